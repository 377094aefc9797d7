//! One linked WhatsApp device: the crate's client on pincer's socket, storage
//! and HTTP, and what it is doing, as a [`LinkStatus`] that changes with the
//! crate's events (read with [`WhatsAppSession::status`], or awaited with
//! [`WhatsAppSession::watch`], which keeps only the newest value).
//!
//! Linking: with no stored device the server hands out pairing refs and the
//! crate turns each into a QR payload (`ref,noiseKey,identityKey,advSecret,
//! clientType`), shown for 60 s and then 20 s each; the status carries the
//! current one until the phone scans it. The device's keys are stored as soon
//! as they exist, so a restart after linking logs in without a QR code.
//!
//! Connection loss: the crate reconnects by itself (Fibonacci backoff from
//! 1 s, 10 % jitter, at most 15 minutes); the status counts the reconnects and
//! keeps the last reason. Logged out (the device was removed on the phone, or
//! the server refuses the stored credentials): the crate stops, and so does
//! the status, at [`LinkState::LoggedOut`] with the reason; linking again
//! needs the stored device deleted ([`WhatsAppSession::forget_device`]).

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::{mpsc, watch};
use whatsapp_rust::bot::{Bot, BotHandle};
use whatsapp_rust::types::durability_hook::{InboundDurabilityHook, InboundMessage};
use whatsapp_rust::types::events::Event;
use whatsapp_rust::wacore::proto_helpers::MessageExt;
use whatsapp_rust::wacore::store::traits::DeviceStore;

use super::backend::SealedBackend;
use super::http::ReqwestHttp;
use super::media::{InboundMedia, OutboundMedia};
use super::transport::WsTransportFactory;
use crate::channels::media::{MediaLimits, MediaOutcome};

/// Where a device is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum LinkState {
    /// Connecting (first connection, or a reconnect after a loss).
    Connecting,
    /// Not linked yet: a QR code is waiting to be scanned.
    WaitingForScan,
    /// Every QR code of this connection expired unscanned.
    QrExpired,
    /// Linked and logged in.
    Connected,
    /// The connection was lost; the crate is reconnecting.
    Reconnecting,
    /// The device was logged out (removed on the phone, or refused by the server).
    LoggedOut,
    /// Another client took over this device's session.
    Replaced,
    /// Stopped by pincer.
    Stopped,
}

/// What a device is doing, for `health` and `channels.status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkStatus {
    pub state: LinkState,
    /// A device is stored (keys made); `linked_jid` is set once a phone linked it.
    pub linked: bool,
    pub linked_jid: Option<String>,
    /// The QR payload to show while `state` is `waitingForScan`.
    pub qr: Option<String>,
    /// Seconds the current QR payload stays valid.
    pub qr_ttl_secs: Option<u64>,
    /// Connections that ended unexpectedly since start.
    pub disconnects: u32,
    pub last_disconnect: Option<String>,
    /// Why the device was logged out, replaced or refused.
    pub last_error: Option<String>,
}

impl LinkStatus {
    fn starting(linked_jid: Option<String>, device_stored: bool) -> LinkStatus {
        LinkStatus {
            state: LinkState::Connecting,
            linked: device_stored,
            linked_jid,
            qr: None,
            qr_ttl_secs: None,
            disconnects: 0,
            last_disconnect: None,
            last_error: None,
        }
    }
}

/// Why a session could not start.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("WhatsApp device storage: {0}")]
    Storage(String),
    #[error("WhatsApp client: {0}")]
    Client(String),
    #[error("WhatsApp send to {to}: {reason}")]
    Send { to: String, reason: String },
}

/// A text message the device received (decrypted), for the message path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InboundText {
    /// The chat: the sender's JID for a direct message, the group's for a group.
    pub chat: String,
    pub sender: String,
    /// WhatsApp's message id.
    pub id: String,
    pub push_name: String,
    pub is_group: bool,
    pub text: String,
    /// `contextInfo.mentionedJid` names this device's account (its number or LID).
    pub mentions_me: bool,
    /// `contextInfo.mentionedJid` names someone else.
    pub mentions_others: bool,
    /// A reply quoting one of this account's messages (`contextInfo.participant`).
    pub replies_to_me: bool,
    /// Sent by this account (from the phone): only "message yourself" chats get here.
    pub from_me: bool,
    /// The linked account's number (digits), when known.
    pub own_number: Option<String>,
    /// The attachment of a media message (`text` holds its caption); `None` for a text message.
    pub media: Option<InboundMedia>,
}

/// The linked account as messages name it: its phone-number and LID users.
#[derive(Debug, Clone, Default)]
struct OwnIds {
    pn: Option<String>,
    lid: Option<String>,
}

impl OwnIds {
    fn of(client: &whatsapp_rust::Client) -> OwnIds {
        OwnIds {
            pn: client.pn().map(|j| j.user.to_string()),
            lid: client.lid().map(|j| j.user.to_string()),
        }
    }

    /// Whether `jid` (`user[:device]@server`) is this account.
    fn is_me(&self, jid: &str) -> bool {
        let user = jid.split(['@', ':']).next().unwrap_or_default();
        !user.is_empty() && (self.pn.as_deref() == Some(user) || self.lid.as_deref() == Some(user))
    }
}

/// Ids of the messages this device sent lately (self-chat echo guard).
const RECENT_SENT_IDS: usize = 256;

/// The bounded list of recently sent message ids.
#[derive(Default)]
struct RecentSent(parking_lot::Mutex<std::collections::VecDeque<String>>);

impl RecentSent {
    fn remember(&self, id: &str) {
        let mut ids = self.0.lock();
        if ids.len() >= RECENT_SENT_IDS {
            ids.pop_front();
        }
        ids.push_back(id.to_string());
    }

    fn contains(&self, id: &str) -> bool {
        self.0.lock().iter().any(|sent| sent == id)
    }
}

/// The messages in `event` with text or an attachment (whose caption is the
/// text): others' messages, and the account's own only in its chat with
/// itself (never an echo of what this device sent).
fn inbound_texts<'a>(
    messages: impl Iterator<Item = &'a InboundMessage>,
    me: &OwnIds,
    sent: &RecentSent,
) -> Vec<InboundText> {
    messages
        .filter(|m| {
            let source = &m.info.source;
            !source.is_from_me
                || (!source.is_group
                    && me.is_me(&source.chat.to_string())
                    && !sent.contains(&m.info.id.to_string()))
        })
        .filter_map(|m| {
            let media = InboundMedia::of(&m.message);
            let text = match (m.message.text_content(), &media) {
                (Some(text), _) => text.to_string(),
                (None, Some(media)) => media.caption.clone().unwrap_or_default(),
                (None, None) => return None,
            };
            let context = context_info(&m.message);
            let mentioned: &[String] = context.map_or(&[], |c| c.mentioned_jid.as_slice());
            Some(InboundText {
                chat: m.info.source.chat.to_string(),
                sender: m.info.source.sender.to_string(),
                id: m.info.id.to_string(),
                push_name: m.info.push_name.clone(),
                is_group: m.info.source.is_group,
                text,
                mentions_me: mentioned.iter().any(|j| me.is_me(j)),
                mentions_others: mentioned.iter().any(|j| !me.is_me(j)),
                replies_to_me: context
                    .and_then(|c| c.participant.as_deref())
                    .is_some_and(|p| me.is_me(p)),
                from_me: m.info.source.is_from_me,
                own_number: me.pn.clone(),
                media,
            })
        })
        .collect()
}

/// The `contextInfo` (mentions, the quoted message) of a text or media message.
fn context_info(
    message: &whatsapp_rust::waproto::whatsapp::Message,
) -> Option<&whatsapp_rust::waproto::whatsapp::ContextInfo> {
    let base = message.get_base_message();
    base.extended_text_message
        .as_option()
        .and_then(|m| m.context_info.as_option())
        .or_else(|| {
            base.image_message
                .as_option()
                .and_then(|m| m.context_info.as_option())
        })
        .or_else(|| {
            base.video_message
                .as_option()
                .and_then(|m| m.context_info.as_option())
        })
        .or_else(|| {
            base.audio_message
                .as_option()
                .and_then(|m| m.context_info.as_option())
        })
        .or_else(|| {
            base.document_message
                .as_option()
                .and_then(|m| m.context_info.as_option())
        })
        .or_else(|| {
            base.sticker_message
                .as_option()
                .and_then(|m| m.context_info.as_option())
        })
}

/// Hands each decrypted message to pincer's bounded queue before WhatsApp's
/// server is told it arrived: the crate awaits this hook in its receive
/// pipeline and acks only after it returns, so a full queue holds the
/// pipeline (the server keeps the rest) instead of piling up tasks, and
/// messages go into the queue in the order the crate decrypted them. A
/// closed queue (the account stopping) returns an error: those messages stay
/// unacked and the server delivers them again on the next connection.
struct QueueHook {
    inbound: mpsc::Sender<InboundText>,
    sent: Arc<RecentSent>,
}

#[whatsapp_rust::async_trait]
impl InboundDurabilityHook for QueueHook {
    async fn on_messages(
        &self,
        client: Arc<whatsapp_rust::Client>,
        batch: &[InboundMessage],
    ) -> anyhow::Result<()> {
        for text in inbound_texts(batch.iter(), &OwnIds::of(&client), &self.sent) {
            if self.inbound.send(text).await.is_err() {
                anyhow::bail!("the inbound queue is closed");
            }
        }
        Ok(())
    }
}

/// How to run a device.
#[derive(Clone)]
pub struct SessionOptions {
    /// The chat socket (default [`super::WHATSAPP_WS_URL`]).
    pub url: String,
    /// WhatsApp Web client version to announce; `None` asks WhatsApp Web
    /// (over `http`) once a day.
    pub version: Option<(u32, u32, u32)>,
    pub http: reqwest::Client,
    pub backend: SealedBackend,
    /// Where received messages (text, and media with their captions) go, through the crate's inbound
    /// hook (`QueueHook`): bounded, and when it is full the crate's receive pipeline waits for room
    /// before acking (the server holds the rest), so nothing received is dropped.
    pub inbound: Option<mpsc::Sender<InboundText>>,
    /// Tests only: media requests go to this base URL instead of `https://<host>`
    /// ([`ReqwestHttp::with_media_base`]).
    pub media_base: Option<String>,
}

/// A running device.
pub struct WhatsAppSession {
    handle: Option<BotHandle>,
    sent: Arc<RecentSent>,
    status: watch::Receiver<LinkStatus>,
    status_tx: Arc<watch::Sender<LinkStatus>>,
}

impl std::fmt::Debug for WhatsAppSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatsAppSession")
            .field("status", &*self.status.borrow())
            .finish_non_exhaustive()
    }
}

/// The status after `event`, or `None` when the event changes nothing here.
fn next_status(current: &LinkStatus, event: &Event) -> Option<LinkStatus> {
    let mut next = current.clone();
    match event {
        Event::PairingQrCode(qr) => {
            next.state = LinkState::WaitingForScan;
            next.qr = Some(qr.code.clone());
            next.qr_ttl_secs = Some(qr.timeout.as_secs());
            next.linked = true;
        }
        Event::PairingQrCodesExhausted(_) => {
            next.state = LinkState::QrExpired;
            next.qr = None;
            next.qr_ttl_secs = None;
        }
        Event::PairSuccess(pair) => {
            next.state = LinkState::Connecting;
            next.linked_jid = Some(pair.id.to_string());
            next.qr = None;
            next.qr_ttl_secs = None;
        }
        Event::PairError(error) => {
            next.last_error = Some(format!("linking failed: {}", error.error));
        }
        Event::Connected(_) => {
            next.state = LinkState::Connected;
            next.qr = None;
            next.qr_ttl_secs = None;
        }
        Event::Disconnected(disconnected) => {
            if matches!(
                next.state,
                LinkState::LoggedOut | LinkState::Replaced | LinkState::Stopped
            ) {
                return None;
            }
            next.state = LinkState::Reconnecting;
            next.disconnects = next.disconnects.saturating_add(1);
            next.last_disconnect = Some(disconnected.reason.to_string());
        }
        Event::LoggedOut(logged_out) => {
            next.state = LinkState::LoggedOut;
            next.qr = None;
            next.last_error = Some(format!(
                "logged out ({:?}){}",
                logged_out.reason,
                if logged_out.on_connect {
                    ": the server refused the stored credentials"
                } else {
                    ": the device was removed"
                }
            ));
        }
        Event::StreamReplaced(_) => {
            next.state = LinkState::Replaced;
            next.last_error = Some("another client took over this device's session".into());
        }
        Event::TemporaryBan(ban) => {
            next.last_error = Some(format!("temporarily banned ({:?})", ban.code));
        }
        Event::ConnectFailure(failure) => {
            next.last_error = Some(format!("connection refused ({:?})", failure.reason));
        }
        Event::ClientOutdated(_) => {
            next.last_error = Some("WhatsApp refuses this client version as outdated".into());
        }
        _ => return None,
    }
    (next != *current).then_some(next)
}

impl WhatsAppSession {
    /// Starts the device: links (QR) when none is stored, logs in when one is.
    pub async fn start(options: SessionOptions) -> Result<WhatsAppSession, SessionError> {
        let stored = options
            .backend
            .load()
            .await
            .map_err(|e| SessionError::Storage(e.to_string()))?;
        let linked_jid = stored
            .as_ref()
            .and_then(|device| device.pn.as_ref().map(ToString::to_string));
        let (status_tx, status) =
            watch::channel(LinkStatus::starting(linked_jid, stored.is_some()));
        let status_tx = Arc::new(status_tx);
        let events_tx = Arc::clone(&status_tx);
        let sent = Arc::new(RecentSent::default());
        let mut builder = Bot::builder()
            .with_backend(options.backend.clone())
            .with_transport_factory(WsTransportFactory::new(options.url.clone()))
            .with_http_client(
                ReqwestHttp::new(options.http.clone()).with_media_base(options.media_base.clone()),
            )
            .with_runtime(whatsapp_rust::TokioRuntime)
            .skip_history_sync()
            .on_event(move |event, _client| {
                events_tx.send_if_modified(|current| match next_status(current, &event) {
                    Some(next) => {
                        *current = next;
                        true
                    }
                    None => false,
                });
                async {}
            });
        if let Some(inbound) = options.inbound.clone() {
            builder = builder.with_inbound_durability_hook(QueueHook {
                inbound,
                sent: Arc::clone(&sent),
            });
        }
        if let Some(version) = options.version {
            builder = builder.with_version(version);
        }
        let bot = builder
            .build()
            .await
            .map_err(|e| SessionError::Client(e.to_string()))?;
        Ok(WhatsAppSession {
            handle: Some(bot.spawn()),
            sent,
            status,
            status_tx,
        })
    }

    /// What the device is doing now.
    pub fn status(&self) -> LinkStatus {
        self.status.borrow().clone()
    }

    /// A receiver of status changes (it keeps only the newest).
    pub fn watch(&self) -> watch::Receiver<LinkStatus> {
        self.status.clone()
    }

    /// Sends `text` to `to` (a JID: `<number>@s.whatsapp.net`, or a group's `<id>@g.us`), end-to-end
    /// encrypted by the crate; returns WhatsApp's message id.
    pub async fn send_text(&self, to: &str, text: &str) -> Result<String, SessionError> {
        let failed = |reason: String| SessionError::Send {
            to: to.to_string(),
            reason,
        };
        let jid: whatsapp_rust::Jid = to
            .parse()
            .map_err(|e| failed(format!("not a WhatsApp JID: {e}")))?;
        let client = self
            .handle
            .as_ref()
            .map(BotHandle::client)
            .ok_or_else(|| failed("the device is stopped".into()))?;
        let message = whatsapp_rust::waproto::whatsapp::Message {
            conversation: Some(text.to_string()),
            ..Default::default()
        };
        let sent = client
            .send_message(jid, message)
            .await
            .map_err(|e| failed(e.to_string()))?;
        self.sent.remember(&sent.message_id);
        Ok(sent.message_id)
    }

    /// Marks message `id` in `chat` read (a `<receipt type="read">`); `sender`
    /// is the member who wrote it in a group.
    pub async fn mark_read(
        &self,
        chat: &str,
        sender: Option<&str>,
        id: &str,
    ) -> Result<(), SessionError> {
        let failed = |reason: String| SessionError::Send {
            to: chat.to_string(),
            reason,
        };
        let parse = |jid: &str| {
            jid.parse::<whatsapp_rust::Jid>()
                .map_err(|e| failed(format!("not a WhatsApp JID: {e}")))
        };
        let chat_jid = parse(chat)?;
        let sender_jid = sender.map(parse).transpose()?;
        let client = self
            .handle
            .as_ref()
            .map(BotHandle::client)
            .ok_or_else(|| failed("the device is stopped".into()))?;
        client
            .mark_as_read(&chat_jid, sender_jid.as_ref(), &[id])
            .await
            .map_err(|e| failed(e.to_string()))
    }

    /// Downloads a received attachment into `limits.dir` (decrypted, within the cap), or says why not.
    pub async fn download_media(&self, media: &InboundMedia, limits: &MediaLimits) -> MediaOutcome {
        match self.handle.as_ref().map(BotHandle::client) {
            Some(client) => super::media::download(&client, media, limits).await,
            None => MediaOutcome::Skipped(crate::channels::media::failed_note(
                media.kind,
                "the WhatsApp device is stopped",
            )),
        }
    }

    /// Uploads `media` (encrypted) and sends it to `to` as an image, video, audio file, voice note or
    /// document with its caption (an audio's caption follows as a text); returns the media message's id.
    pub async fn send_media(
        &self,
        to: &str,
        media: &OutboundMedia<'_>,
    ) -> Result<String, SessionError> {
        let failed = |reason: String| SessionError::Send {
            to: to.to_string(),
            reason,
        };
        let jid: whatsapp_rust::Jid = to
            .parse()
            .map_err(|e| failed(format!("not a WhatsApp JID: {e}")))?;
        let client = self
            .handle
            .as_ref()
            .map(BotHandle::client)
            .ok_or_else(|| failed("the device is stopped".into()))?;
        let message = super::media::upload(&client, media).await.map_err(failed)?;
        let sent = client
            .send_message(jid, message)
            .await
            .map_err(|e| failed(e.to_string()))?;
        self.sent.remember(&sent.message_id);
        let audio = matches!(
            media.kind,
            crate::channels::UploadKind::Audio | crate::channels::UploadKind::Voice
        );
        if let Some(caption) = media.caption.filter(|c| audio && !c.trim().is_empty()) {
            self.send_text(to, caption).await?;
        }
        Ok(sent.message_id)
    }

    /// Asks WhatsApp to remove this device when connected (the crate's
    /// deregistration, best effort) and disconnects; says whether it was
    /// connected. The stored keys stay: [`forget_device`] deletes them.
    pub async fn log_out(&self) -> bool {
        let connected = self.status().state == LinkState::Connected;
        if let Some(handle) = self.handle.as_ref() {
            handle.client().logout().await;
        }
        connected
    }

    /// Disconnects (flushing the crate's state to the store) and stops.
    pub async fn stop(mut self) {
        if let Some(handle) = self.handle.take() {
            handle.shutdown().await;
        }
        self.status_tx.send_modify(|s| {
            s.state = LinkState::Stopped;
            s.qr = None;
        });
    }
}

impl Drop for WhatsAppSession {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.abort();
        }
    }
}

/// Deletes a stored device (after a logout, to link again).
pub fn forget_device(records: &crate::store::SealedRecords) -> Result<usize, SessionError> {
    records
        .run_blocking(|| records.delete_prefix(""))
        .map_err(|e| SessionError::Storage(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use whatsapp_rust::types::events::{Disconnected, LoggedOut};
    use whatsapp_rust::wacore::net::DisconnectReason;
    use whatsapp_rust::wacore::types::events::ConnectFailureReason;

    #[test]
    fn the_linked_account_is_known_by_number_and_lid_with_or_without_a_device() {
        let me = OwnIds {
            pn: Some("15550001111".into()),
            lid: Some("99887766".into()),
        };
        assert!(me.is_me("15550001111@s.whatsapp.net"));
        assert!(me.is_me("15550001111:3@s.whatsapp.net"));
        assert!(me.is_me("99887766@lid"));
        assert!(!me.is_me("15557654321@s.whatsapp.net"));
        assert!(!me.is_me("1555000111@s.whatsapp.net"));
        assert!(!me.is_me("@s.whatsapp.net"));
        assert!(!OwnIds::default().is_me("15550001111@s.whatsapp.net"));
    }

    #[test]
    fn the_sent_ids_kept_are_bounded() {
        let sent = RecentSent::default();
        for i in 0..RECENT_SENT_IDS + 10 {
            sent.remember(&format!("3EB0{i}"));
        }
        assert_eq!(sent.0.lock().len(), RECENT_SENT_IDS);
        assert!(!sent.contains("3EB00"), "the oldest went first");
        assert!(sent.contains(&format!("3EB0{}", RECENT_SENT_IDS + 9)));
    }

    #[test]
    fn a_disconnect_after_a_logout_does_not_read_as_reconnecting() {
        let start = LinkStatus::starting(Some("1:1@s.whatsapp.net".into()), true);
        let lost = next_status(
            &start,
            &Event::Disconnected(
                Disconnected::builder()
                    .reason(DisconnectReason::StreamEnded)
                    .build(),
            ),
        )
        .expect("changes");
        assert_eq!(lost.state, LinkState::Reconnecting);
        assert_eq!(lost.disconnects, 1);
        let out = next_status(
            &lost,
            &Event::LoggedOut(
                LoggedOut::builder()
                    .on_connect(false)
                    .reason(ConnectFailureReason::LoggedOut)
                    .build(),
            ),
        )
        .expect("changes");
        assert_eq!(out.state, LinkState::LoggedOut);
        assert!(out.last_error.as_deref().unwrap_or("").contains("removed"));
        let after = next_status(
            &out,
            &Event::Disconnected(
                Disconnected::builder()
                    .reason(DisconnectReason::StreamEnded)
                    .build(),
            ),
        );
        assert_eq!(after, None, "a logged-out device stays logged out");
    }
}
