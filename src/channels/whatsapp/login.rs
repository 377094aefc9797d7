//! Linking a WhatsApp account by QR code on request (`web.login.start` /
//! `web.login.wait` through the [`QrLogin`] capability): the account's
//! running device already asks for a scan when none is linked; this file
//! shows its QR code as a PNG `data:` URL, waits for the phone, and relinks
//! — stops the account's device, deletes it from the sealed records, starts
//! a fresh one — when asked with `force` or after WhatsApp logged it out.
//!
//! Behaviour follows upstream's WhatsApp login (`login-qr.ts`): an account
//! already linked gets no QR code unless forced; the first code is awaited
//! for `timeout` (default 30 s, at least 5 s); the wait answers at once when
//! the code changed from the caller's `currentQrDataUrl`, when the phone
//! linked, or when linking failed, and "still waiting" after `timeout`
//! (default 120 s, at least 1 s). Other accounts keep running throughout.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::time::Instant;

use crate::channels::{
    BoxFuture, QrLoggedOut, QrLogin, QrLoginError, QrLoginStart, QrLoginStarted, QrLoginWait,
    QrLoginWaited,
};
use crate::media::qr;

use super::channel::{sender_id, Account, WhatsAppChannel, CHANNEL_ID};
use super::session::{forget_device, LinkState, LinkStatus};

/// What to tell the person scanning.
const SCAN_MESSAGE: &str =
    "Scan this QR code with WhatsApp on your phone: Settings → Linked devices → Link a device.";

fn linked_as(link: &LinkStatus) -> Option<String> {
    link.linked_jid.as_deref().map(sender_id)
}

fn unavailable(what: impl std::fmt::Display) -> QrLoginError {
    QrLoginError::Unavailable(what.to_string())
}

impl WhatsAppChannel {
    /// The account `id` names (`None` or blank: the default one), enabled.
    fn login_account(&self, id: Option<&str>) -> Result<Arc<Account>, QrLoginError> {
        let id = id
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .unwrap_or(self.default_account.as_str());
        let account = self
            .accounts
            .get(id)
            .ok_or_else(|| QrLoginError::UnknownAccount {
                channel: CHANNEL_ID,
                account_id: id.to_string(),
                configured: self.accounts.keys().cloned().collect::<Vec<_>>().join(", "),
            })?;
        if !account.state.status().enabled {
            return Err(QrLoginError::Disabled {
                channel: CHANNEL_ID,
                account_id: id.to_string(),
            });
        }
        Ok(Arc::clone(account))
    }

    /// Stops the account's device and its tasks, deletes the stored device
    /// when `forget`, and starts a new one (which asks for a scan when none
    /// is stored).
    async fn relink(&self, account: &Arc<Account>, forget: bool) -> Result<(), QrLoginError> {
        let sink = self.sink.lock().clone().ok_or_else(|| {
            unavailable("the WhatsApp channel is not running (the gateway has not started it)")
        })?;
        account.stop.lock().cancel();
        if let Some(session) = account.session.write().await.take() {
            session.stop().await;
        }
        account.state.set_running(false);
        if forget {
            let records = self
                .store
                .sealed(&format!("whatsapp/{}", account.id))
                .map_err(|e| {
                    unavailable(format!("cannot open the device's sealed records: {e}"))
                })?;
            let removed = forget_device(&records).map_err(unavailable)?;
            log::info!(
                "whatsapp account {}: the linked device was forgotten ({removed} records) to link again",
                account.id
            );
            account.state.update(|s| {
                s.identity = None;
                s.last_error = None;
            });
        }
        self.start_account(account, &sink, &self.tasks.token())
            .await
            .map_err(|e| {
                account.state.update(|s| s.last_error = Some(e.clone()));
                unavailable(e)
            })?;
        account.state.set_running(true);
        Ok(())
    }

    async fn start_login(&self, request: QrLoginStart) -> Result<QrLoginStarted, QrLoginError> {
        let account = self.login_account(request.account_id.as_deref())?;
        // One login at a time per account: a second waits for the first's relink.
        let _one = account.login.lock().await;
        let link = account.session.read().await.as_ref().map(|s| s.status());
        let logged_out = link.as_ref().map(|l| l.state) == Some(LinkState::LoggedOut);
        let fresh_device = request.force || logged_out;
        if let Some(link) = link.as_ref().filter(|_| !fresh_device) {
            if let Some(who) = linked_as(link) {
                return Ok(QrLoginStarted {
                    message: format!(
                        "WhatsApp is already linked as {who}. Start the login with force to link again with a new QR code."
                    ),
                    connected: (link.state == LinkState::Connected).then_some(true),
                    linked_as: Some(who),
                    ..QrLoginStarted::default()
                });
            }
        }
        let idle = link.as_ref().is_none_or(|l| {
            matches!(
                l.state,
                LinkState::QrExpired | LinkState::Stopped | LinkState::Replaced
            )
        });
        if fresh_device || idle {
            self.relink(&account, fresh_device).await?;
        }
        let mut watch = account
            .session
            .read()
            .await
            .as_ref()
            .map(|s| s.watch())
            .ok_or_else(|| unavailable("the WhatsApp device did not start"))?;
        let shown = tokio::time::timeout(
            request.timeout,
            watch.wait_for(|s| {
                s.qr.is_some()
                    || matches!(
                        s.state,
                        LinkState::Connected | LinkState::LoggedOut | LinkState::Stopped
                    )
            }),
        )
        .await;
        let link = match shown {
            Err(_) => {
                return Ok(QrLoginStarted {
                    message: format!(
                        "Failed to get a QR code: WhatsApp sent none within {} s.",
                        request.timeout.as_secs()
                    ),
                    ..QrLoginStarted::default()
                })
            }
            Ok(Err(_)) => return Err(unavailable("the WhatsApp device stopped")),
            Ok(Ok(link)) => link.clone(),
        };
        if let Some(payload) = link.qr {
            let url = qr::png_data_url(&payload).map_err(unavailable)?;
            account.login_pending.store(true, Ordering::SeqCst);
            return Ok(QrLoginStarted {
                qr_data_url: Some(url),
                qr_text: Some(payload),
                message: SCAN_MESSAGE.to_string(),
                ..QrLoginStarted::default()
            });
        }
        if link.state == LinkState::Connected {
            let who = linked_as(&link);
            return Ok(QrLoginStarted {
                message: format!(
                    "WhatsApp is linked as {}.",
                    who.as_deref().unwrap_or("an unknown number")
                ),
                connected: Some(true),
                linked_as: who,
                ..QrLoginStarted::default()
            });
        }
        Ok(QrLoginStarted {
            message: format!(
                "Failed to get a QR code: {}",
                link.last_error
                    .unwrap_or_else(|| "the WhatsApp device stopped".into())
            ),
            ..QrLoginStarted::default()
        })
    }

    async fn wait_login(&self, request: QrLoginWait) -> Result<QrLoginWaited, QrLoginError> {
        let account = self.login_account(request.account_id.as_deref())?;
        let Some(mut watch) = account.session.read().await.as_ref().map(|s| s.watch()) else {
            return Ok(QrLoginWaited {
                message: "No WhatsApp login in progress: the device is not running.".into(),
                ..QrLoginWaited::default()
            });
        };
        let waiting = watch.borrow().state == LinkState::WaitingForScan;
        if !account.login_pending.load(Ordering::SeqCst) && !waiting {
            return Ok(QrLoginWaited {
                message: "No WhatsApp login in progress: start one with web.login.start.".into(),
                ..QrLoginWaited::default()
            });
        }
        let ended = |message: String| -> Result<QrLoginWaited, QrLoginError> {
            account.login_pending.store(false, Ordering::SeqCst);
            Ok(QrLoginWaited {
                message,
                ..QrLoginWaited::default()
            })
        };
        let deadline = Instant::now() + request.timeout;
        loop {
            let link = watch.borrow_and_update().clone();
            match link.state {
                LinkState::Connected => {
                    account.login_pending.store(false, Ordering::SeqCst);
                    let who = linked_as(&link);
                    return Ok(QrLoginWaited {
                        connected: true,
                        message: format!(
                            "Linked! WhatsApp is ready as {}.",
                            who.as_deref().unwrap_or("an unknown number")
                        ),
                        linked_as: who,
                        ..QrLoginWaited::default()
                    });
                }
                LinkState::LoggedOut => {
                    return ended(format!(
                        "WhatsApp logged the device out ({}); start the login again for a new QR code.",
                        link.last_error.as_deref().unwrap_or("no reason given")
                    ))
                }
                LinkState::QrExpired => {
                    return ended(
                        "The QR code expired before it was scanned; start the login again for a new one."
                            .into(),
                    )
                }
                LinkState::Replaced | LinkState::Stopped => {
                    return ended(format!(
                        "WhatsApp login ended: {}",
                        link.last_error
                            .as_deref()
                            .unwrap_or("the device was stopped")
                    ))
                }
                LinkState::Connecting | LinkState::WaitingForScan | LinkState::Reconnecting => {}
            }
            if let (Some(payload), Some(current)) = (&link.qr, &request.current_qr_data_url) {
                let url = qr::png_data_url(payload).map_err(unavailable)?;
                if url != *current {
                    return Ok(QrLoginWaited {
                        message: format!("The QR code was refreshed. {SCAN_MESSAGE}"),
                        qr_data_url: Some(url),
                        qr_text: Some(payload.clone()),
                        waiting: true,
                        ..QrLoginWaited::default()
                    });
                }
            }
            match tokio::time::timeout_at(deadline, watch.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return ended("The WhatsApp device stopped during the login.".into()),
                Err(_) => {
                    return Ok(QrLoginWaited {
                        message: "Still waiting for the QR code to be scanned.".into(),
                        waiting: true,
                        ..QrLoginWaited::default()
                    })
                }
            }
        }
    }
}

impl WhatsAppChannel {
    async fn log_out(&self, account_id: Option<String>) -> Result<QrLoggedOut, QrLoginError> {
        let account = self.login_account(account_id.as_deref())?;
        let _one = account.login.lock().await;
        let logged_out = match account.session.read().await.as_ref() {
            Some(session) => session.log_out().await,
            None => false,
        };
        self.relink(&account, true).await?;
        log::info!(
            "whatsapp account {}: logged out{}",
            account.id,
            if logged_out {
                " (WhatsApp was told to remove the device)"
            } else {
                " (not connected: the device is forgotten here only)"
            }
        );
        Ok(QrLoggedOut {
            account_id: account.id.clone(),
            cleared: true,
            logged_out,
        })
    }
}

impl QrLogin for WhatsAppChannel {
    fn login_qr_start(
        &self,
        request: QrLoginStart,
    ) -> BoxFuture<'_, Result<QrLoginStarted, QrLoginError>> {
        Box::pin(self.start_login(request))
    }

    fn login_qr_wait(
        &self,
        request: QrLoginWait,
    ) -> BoxFuture<'_, Result<QrLoginWaited, QrLoginError>> {
        Box::pin(self.wait_login(request))
    }

    fn logout(
        &self,
        account_id: Option<String>,
    ) -> BoxFuture<'_, Result<QrLoggedOut, QrLoginError>> {
        Box::pin(self.log_out(account_id))
    }
}
