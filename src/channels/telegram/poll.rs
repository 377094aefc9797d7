//! One account's long-polling loop: `getMe` for the bot's identity, then
//! `getUpdates` (30 s long poll) from the stored offset, each update
//! translated, its attachment fetched, handed to the `InboundSink`, and only
//! then the offset (update id + 1) persisted, so a restart neither loses nor
//! repeats updates. Failures back off exponentially (capped) and show in
//! the account's status; 409 Conflict names the likely cause, and a webhook
//! left from webhook mode is removed (`deleteWebhook`, queued updates kept).
//! `stop` ends the loop at once, abandoning a pending long poll.
//!
//! This file must not shape messages (`inbound.rs`) or send anything.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::api::{ApiError, POLL_TIMEOUT_SECS};
use super::inbound::{message_of, translate, BotIdentity};
use super::media::{attachment_of, fetch};
use super::wire::Update;
use super::Account;
use crate::channels::media::add_to_event;
use crate::channels::{InboundError, InboundSink};
use crate::store::Store;
use crate::system::backoff::Backoff;
use crate::system::clock::now_ms;

/// First wait after a failure.
pub const INITIAL_BACKOFF_MS: u64 = 1_000;
/// Longest wait between attempts.
pub const MAX_BACKOFF_MS: u64 = 30_000;

/// The wait after failed polls or webhook set-ups: doubles per failure from
/// `INITIAL_BACKOFF_MS` up to `MAX_BACKOFF_MS`, no jitter.
pub(super) const BACKOFF: Backoff = Backoff::new(
    Duration::from_millis(INITIAL_BACKOFF_MS),
    Duration::from_millis(MAX_BACKOFF_MS),
);

/// Why handling one update stopped.
pub(super) enum HandleError {
    Stopped,
    Refused(InboundError),
}

/// Runs `fut` unless `stop` fires first (`None` then).
pub(super) async fn unless_stopped<F: std::future::Future>(
    stop: &CancellationToken,
    fut: F,
) -> Option<F::Output> {
    tokio::select! {
        biased;
        _ = stop.cancelled() => None,
        out = fut => Some(out),
    }
}

/// Sleeps `delay`; `false` when stopped meanwhile.
pub(super) async fn pause(stop: &CancellationToken, delay: Duration) -> bool {
    unless_stopped(stop, tokio::time::sleep(delay))
        .await
        .is_some()
}

/// The poller of one account.
pub struct Poller {
    pub account: Arc<Account>,
    pub store: Store,
    pub sink: Arc<dyn InboundSink>,
    pub stop: CancellationToken,
}

impl Poller {
    /// Runs until stopped (or the token is refused for good).
    /// Polls until stopped or refused for good; the account then no longer
    /// runs.
    pub async fn run(self) {
        let account = Arc::clone(&self.account);
        self.poll().await;
        account.with_status(|s| {
            s.running = false;
            s.connected = false;
        });
    }

    async fn poll(self) {
        let Some(bot) = identify(&self.account, &self.stop).await else {
            return;
        };
        let mut offset = self.load_offset().await;
        let mut backoff = BACKOFF;
        loop {
            let polled = unless_stopped(
                &self.stop,
                self.account.api.get_updates(offset, POLL_TIMEOUT_SECS),
            )
            .await;
            let delay = match polled {
                None => return,
                Some(Ok(updates)) => {
                    self.account.mark_connected();
                    backoff.reset();
                    match self.handle_batch(&bot, updates, &mut offset).await {
                        Ok(()) => continue,
                        Err(HandleError::Stopped) => return,
                        Err(HandleError::Refused(reason)) => {
                            self.account
                                .record_error(format!("inbound sink refused an update: {reason}"));
                            backoff.next_delay()
                        }
                    }
                }
                Some(Err(error)) => {
                    record_api_error(&self.account, &error);
                    if error.is_unauthorized() {
                        return;
                    }
                    if error.is_webhook_conflict() && self.remove_webhook().await {
                        continue;
                    }
                    backoff.next_delay()
                }
            };
            if !pause(&self.stop, delay).await {
                return;
            }
        }
    }

    /// This account polls, so a webhook left from webhook mode is removed
    /// (its queued updates are kept for `getUpdates`). `true` when removed.
    async fn remove_webhook(&self) -> bool {
        match unless_stopped(&self.stop, self.account.api.delete_webhook()).await {
            Some(Ok(_)) => {
                log::info!(
                    "telegram account {}: removed the webhook to poll",
                    self.account.id
                );
                true
            }
            Some(Err(error)) => {
                record_api_error(&self.account, &error);
                false
            }
            None => false,
        }
    }

    async fn load_offset(&self) -> Option<i64> {
        let store = self.store.clone();
        let id = self.account.id.clone();
        match tokio::task::spawn_blocking(move || store.telegram_offset(&id)).await {
            Ok(Ok(offset)) => offset,
            Ok(Err(error)) => {
                self.account
                    .record_error(format!("cannot read the stored update offset: {error}"));
                None
            }
            Err(join) => {
                self.account
                    .record_error(format!("cannot read the stored update offset: {join}"));
                None
            }
        }
    }

    async fn save_offset(&self, next: i64) {
        let store = self.store.clone();
        let id = self.account.id.clone();
        let saved =
            tokio::task::spawn_blocking(move || store.set_telegram_offset(&id, next, now_ms()))
                .await;
        let failure = match saved {
            Ok(Ok(())) => return,
            Ok(Err(error)) => error.to_string(),
            Err(join) => join.to_string(),
        };
        self.account
            .record_error(format!("cannot store the update offset {next}: {failure}"));
    }

    async fn handle_batch(
        &self,
        bot: &BotIdentity,
        updates: Vec<Value>,
        offset: &mut Option<i64>,
    ) -> Result<(), HandleError> {
        for raw in updates {
            if self.stop.is_cancelled() {
                return Err(HandleError::Stopped);
            }
            let Some(update_id) = raw.get("update_id").and_then(Value::as_i64) else {
                log::warn!(
                    "telegram account {}: update without update_id skipped",
                    self.account.id
                );
                continue;
            };
            if offset.is_some_and(|o| update_id < o) {
                continue;
            }
            process_update(
                &self.account,
                self.sink.as_ref(),
                &self.stop,
                bot,
                update_id,
                raw,
            )
            .await?;
            let next = update_id + 1;
            self.save_offset(next).await;
            *offset = Some(next);
        }
        Ok(())
    }
}

/// `getMe` until it answers; `None` when stopped or the token is refused.
pub(super) async fn identify(account: &Account, stop: &CancellationToken) -> Option<BotIdentity> {
    let mut backoff = BACKOFF;
    loop {
        match unless_stopped(stop, account.api.get_me()).await? {
            Ok(me) => {
                account.mark_connected();
                log::info!(
                    "telegram account {}: connected as @{}",
                    account.id,
                    me.username.as_deref().unwrap_or("?")
                );
                return Some(BotIdentity {
                    id: me.id,
                    username: me.username,
                });
            }
            Err(error) => {
                record_api_error(account, &error);
                if error.is_unauthorized() {
                    return None;
                }
            }
        }
        if !pause(stop, backoff.next_delay()).await {
            return None;
        }
    }
}

/// Shows a failed API call in the account's status, naming likely causes.
pub(super) fn record_api_error(account: &Account, error: &ApiError) {
    let text = if error.is_conflict() {
        format!("{error} (another getUpdates poller or a webhook is active for this bot token)")
    } else if error.is_unauthorized() {
        format!("{error} (the bot token was refused; fix it and restart the account)")
    } else {
        error.to_string()
    };
    log::warn!("telegram account {}: {text}", account.id);
    account.mark_disconnected(text);
}

/// Translates one update, fetches its attachment and hands it to `sink`.
/// Updates without a message pincer answers are accepted as they are.
pub(super) async fn process_update(
    account: &Account,
    sink: &dyn InboundSink,
    stop: &CancellationToken,
    bot: &BotIdentity,
    update_id: i64,
    raw: Value,
) -> Result<(), HandleError> {
    let update: Update = match serde_json::from_value(raw) {
        Ok(update) => update,
        Err(error) => {
            log::warn!(
                "telegram account {}: update {update_id} unreadable, skipped: {error}",
                account.id
            );
            return Ok(());
        }
    };
    let Some(message) = message_of(&update) else {
        return Ok(());
    };
    let mut event = translate(&account.id, bot, message);
    if let Some(attachment) = attachment_of(message, account.media.max_file_bytes) {
        let outcome = unless_stopped(stop, fetch(&account.api, &account.media, &attachment))
            .await
            .ok_or(HandleError::Stopped)?;
        add_to_event(&mut event, outcome);
    }
    // Delivery is awaited to the end even when stopping: the sink's answer
    // decides whether the update counts as accepted.
    sink.deliver(event).await.map_err(HandleError::Refused)?;
    account.mark_inbound();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_second_up_to_thirty() {
        let mut backoff = BACKOFF;
        let delays: Vec<u64> = (0..7)
            .map(|_| backoff.next_delay().as_millis() as u64)
            .collect();
        assert_eq!(delays, [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000]);
    }
}
