//! One account's connection: sign in (the configured access token, else a
//! stored password-login session, else a password login kept in the
//! store), then `/sync` long polls from the stored `next_batch`. Each batch:
//! `m.direct` and room state learnt, invites joined as `autoJoin` allows,
//! every timeline message translated, its file fetched, handed to the
//! `InboundSink` and marked read; only then is `next_batch` stored, so a
//! restart neither loses nor replays events. The first sync of an account
//! with no stored token reads `initialSyncLimit` events per room as history
//! and answers none of them.
//!
//! An end-to-end encrypted room is refused: its messages are not answered,
//! the account's status says so and the room gets one plain notice. A
//! malformed event is logged and skipped, never the batch. Failures back
//! off (1 s doubling to 60 s); a refused access token ends the account
//! (a refused stored session is replaced by a new password login).
//!
//! This file must not shape messages (`translate.rs`) or send replies.

use std::sync::Arc;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::api::{ApiError, MatrixApi, SYNC_TIMEOUT_MS};
use super::translate::{translate, BotIdentity, Context, Translated};
use super::Account;
use crate::channels::account::{pause, RECONNECT_BACKOFF};
use crate::channels::media::{add_to_event, failed_note, fetch_remote, MediaKind, MediaOutcome};
use crate::channels::{InboundError, InboundSink};
use crate::config::schema::matrix::MatrixAutoJoin;
use crate::store::{MatrixSession, Store};
use crate::system::clock::now_ms;

/// Timeline events per room in every sync after the first.
pub const SYNC_TIMELINE_LIMIT: u32 = 50;
/// How long a typing notice lasts unless renewed.
pub const TYPING_TIMEOUT_MS: u64 = 30_000;
/// The notice an encrypted room gets once.
pub const ENCRYPTED_ROOM_NOTICE: &str = "This room is end-to-end encrypted. pincer reads \
unencrypted rooms only, so it cannot answer here: please talk to it in an unencrypted room.";

/// Why a batch was not accepted whole.
enum BatchError {
    Stopped,
    Refused(InboundError),
    /// The homeserver failed while the batch was handled (room lookups).
    Api(ApiError),
}

/// The `/sync` filter: no presence, `m.direct` only, lazy members, and
/// `limit` timeline events per room.
pub fn sync_filter(limit: u32) -> String {
    json!({
        "presence": { "not_types": ["*"] },
        "account_data": { "types": ["m.direct"] },
        "room": {
            "timeline": { "limit": limit },
            "state": { "lazy_load_members": true },
            "ephemeral": { "not_types": ["*"] },
            "account_data": { "not_types": ["*"] },
        },
    })
    .to_string()
}

/// Runs `fut` unless `stop` fires first.
async fn unless_stopped<F: std::future::Future>(
    stop: &CancellationToken,
    fut: F,
) -> Option<F::Output> {
    tokio::select! {
        biased;
        _ = stop.cancelled() => None,
        out = fut => Some(out),
    }
}

/// The connection task of one account.
pub struct SyncLoop {
    pub account: Arc<Account>,
    pub store: Store,
    pub sink: Arc<dyn InboundSink>,
    pub stop: CancellationToken,
}

impl SyncLoop {
    /// Runs until stopped or refused for good; the account then no longer runs.
    pub async fn run(self) {
        let account = Arc::clone(&self.account);
        self.sync().await;
        account.state.set_running(false);
    }

    async fn sync(self) {
        let Some(api) = self.sign_in().await else {
            return;
        };
        let user_id = self.account.identity().user_id;
        let homeserver = api.homeserver().to_string();
        if let Ok(direct) = api.direct_rooms(&user_id).await {
            self.account.rooms.set_direct(&direct);
        }
        let mut token = self.load_token(&homeserver, &user_id).await;
        let mut backoff = RECONNECT_BACKOFF;
        let settings = &self.account.settings;
        loop {
            let first = token.is_none();
            let (filter, timeout) = if first {
                (sync_filter(settings.initial_sync_limit), 0)
            } else {
                (sync_filter(SYNC_TIMELINE_LIMIT), SYNC_TIMEOUT_MS)
            };
            let Some(answer) =
                unless_stopped(&self.stop, api.sync(token.as_deref(), &filter, timeout)).await
            else {
                return;
            };
            let error = match answer {
                Ok(batch) => {
                    self.account.state.connected();
                    let Some(next) = batch["next_batch"].as_str().map(str::to_string) else {
                        self.account
                            .state
                            .disconnected("matrix sync: the answer has no next_batch".into());
                        if !pause(&self.stop, backoff.next_delay().as_millis() as u64).await {
                            return;
                        }
                        continue;
                    };
                    match self.handle_batch(&api, &batch, first).await {
                        Ok(()) => {
                            backoff.reset();
                            self.save_token(&homeserver, &user_id, &next).await;
                            token = Some(next);
                            continue;
                        }
                        Err(BatchError::Stopped) => return,
                        Err(BatchError::Refused(reason)) => {
                            format!("inbound sink refused an event: {reason}")
                        }
                        Err(BatchError::Api(error)) => error.to_string(),
                    }
                }
                Err(error) if error.is_unauthorized() => {
                    self.account.refused(&error);
                    return;
                }
                Err(error) => error.to_string(),
            };
            log::warn!("matrix account {}: {error}", self.account.id);
            self.account.state.disconnected(error);
            let delay = backoff.next_delay();
            self.account.count_reconnect();
            if !pause(&self.stop, delay.as_millis() as u64).await {
                return;
            }
        }
    }

    /// The signed-in client: configured token, stored session, or a new
    /// password login; `None` when stopped or refused for good.
    async fn sign_in(&self) -> Option<MatrixApi> {
        let mut backoff = RECONNECT_BACKOFF;
        loop {
            let attempt = unless_stopped(&self.stop, self.try_sign_in()).await?;
            match attempt {
                Ok(api) => return Some(api),
                Err(SignInError::Fatal(text)) => {
                    log::error!("matrix account {}: {text}", self.account.id);
                    self.account.state.disconnected(text);
                    return None;
                }
                Err(SignInError::Retry(text)) => {
                    log::warn!("matrix account {}: {text}", self.account.id);
                    self.account.state.disconnected(text);
                }
            }
            if !pause(&self.stop, backoff.next_delay().as_millis() as u64).await {
                return None;
            }
        }
    }

    async fn try_sign_in(&self) -> Result<MatrixApi, SignInError> {
        let settings = &self.account.settings;
        self.account.check_homeserver().await?;
        let base = MatrixApi::new(self.account.http.clone(), &settings.homeserver, "");
        if let Some(token) = &settings.access_token {
            let api = base.with_token(token);
            let me = api.whoami().await.map_err(|e| {
                if e.is_unauthorized() {
                    SignInError::Fatal(format!(
                        "{e} (the access token was refused; fix accessToken and restart the account)"
                    ))
                } else {
                    SignInError::Retry(e.to_string())
                }
            })?;
            self.account.signed_in(&api, &me.user_id).await;
            return Ok(api);
        }
        let (Some(user_id), Some(password)) = (&settings.user_id, &settings.password) else {
            return Err(SignInError::Fatal(
                "no accessToken, and no userId with a password".into(),
            ));
        };
        if let Some(session) = self.stored_session(user_id).await {
            let api = base.with_token(&session.access_token);
            match api.whoami().await {
                Ok(me) => {
                    self.account.signed_in(&api, &me.user_id).await;
                    return Ok(api);
                }
                Err(e) if e.is_unauthorized() => {
                    log::info!(
                        "matrix account {}: the stored session was refused; logging in again",
                        self.account.id
                    );
                    let store = &self.store;
                    let _ = store.run_blocking(|| store.clear_matrix_session(&self.account.id));
                }
                Err(e) => return Err(SignInError::Retry(e.to_string())),
            }
        }
        let login = base
            .login(
                user_id,
                password,
                settings.device_id.as_deref(),
                settings.device_name.as_deref(),
            )
            .await
            .map_err(|e| {
                if e.is_forbidden() || e.is_unauthorized() {
                    SignInError::Fatal(format!(
                        "{e} (the homeserver refused userId/password; fix them and restart the account)"
                    ))
                } else {
                    SignInError::Retry(e.to_string())
                }
            })?;
        let session = MatrixSession {
            homeserver: settings.homeserver.clone(),
            user_id: user_id.clone(),
            device_id: login.device_id.clone(),
            access_token: login.access_token.clone(),
        };
        let store = &self.store;
        if let Err(error) =
            store.run_blocking(|| store.set_matrix_session(&self.account.id, &session))
        {
            log::warn!(
                "matrix account {}: cannot keep the login session: {error}",
                self.account.id
            );
        }
        let api = base.with_token(&login.access_token);
        self.account.signed_in(&api, &login.user_id).await;
        Ok(api)
    }

    async fn stored_session(&self, user_id: &str) -> Option<MatrixSession> {
        let store = &self.store;
        let homeserver = &self.account.settings.homeserver;
        store
            .run_blocking(|| store.matrix_session(&self.account.id, homeserver, user_id))
            .ok()
            .flatten()
    }

    async fn load_token(&self, homeserver: &str, user_id: &str) -> Option<String> {
        let store = &self.store;
        match store.run_blocking(|| store.matrix_sync_token(&self.account.id, homeserver, user_id))
        {
            Ok(token) => token,
            Err(error) => {
                self.account
                    .record_error(format!("cannot read the stored sync token: {error}"));
                None
            }
        }
    }

    async fn save_token(&self, homeserver: &str, user_id: &str, next: &str) {
        let store = &self.store;
        if let Err(error) = store.run_blocking(|| {
            store.set_matrix_sync_token(&self.account.id, homeserver, user_id, next, now_ms())
        }) {
            self.account
                .record_error(format!("cannot store the sync token: {error}"));
        }
    }

    async fn handle_batch(
        &self,
        api: &MatrixApi,
        batch: &Value,
        first: bool,
    ) -> Result<(), BatchError> {
        for event in batch["account_data"]["events"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if event["type"] == "m.direct" {
                self.account.rooms.set_direct(&event["content"]);
            }
        }
        if let Some(invites) = batch["rooms"]["invite"].as_object() {
            for (room_id, room) in invites {
                if self.stop.is_cancelled() {
                    return Err(BatchError::Stopped);
                }
                self.invited(api, room_id, room).await;
            }
        }
        let Some(joined) = batch["rooms"]["join"].as_object() else {
            return Ok(());
        };
        for (room_id, room) in joined {
            self.account.rooms.learn(room_id, room);
            if first {
                continue;
            }
            if room["timeline"]["limited"] == true {
                log::warn!(
                    "matrix account {}: room {room_id} had more new events than one sync carries; the older ones are skipped",
                    self.account.id
                );
            }
            for event in room["timeline"]["events"].as_array().into_iter().flatten() {
                if self.stop.is_cancelled() {
                    return Err(BatchError::Stopped);
                }
                self.handle_event(api, room_id, event).await?;
            }
        }
        Ok(())
    }

    /// An invite: joined when `autoJoin` allows it, else left pending.
    async fn invited(&self, api: &MatrixApi, room_id: &str, room: &Value) {
        let settings = &self.account.settings;
        let me = self.account.identity().user_id;
        let invite = room["invite_state"]["events"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["type"] == "m.room.member" && e["state_key"] == me.as_str());
        let inviter = invite
            .and_then(|e| e["sender"].as_str())
            .unwrap_or("someone")
            .to_string();
        let direct =
            invite.is_some_and(|e| e["content"]["is_direct"] == true && e["sender"].is_string());
        let allowed = match settings.auto_join {
            MatrixAutoJoin::Off => false,
            MatrixAutoJoin::Always => true,
            MatrixAutoJoin::Allowlist => self.on_join_allowlist(api, room_id).await,
        };
        if !allowed {
            log::info!(
                "matrix account {}: invite to {room_id} from {inviter} not accepted (autoJoin {:?})",
                self.account.id,
                settings.auto_join
            );
            return;
        }
        match api.join(room_id).await {
            Ok(_) => {
                if direct {
                    self.account.rooms.mark_direct(room_id);
                    self.remember_direct(api, &me, &inviter, room_id).await;
                }
                log::info!(
                    "matrix account {}: joined {room_id} (invited by {inviter})",
                    self.account.id
                )
            }
            Err(error) => self
                .account
                .record_error(format!("cannot join {room_id}: {error}")),
        }
    }

    /// Adds a joined DM to the account's `m.direct` (under the inviter), so
    /// it is still a DM after a restart, as Matrix clients keep it.
    async fn remember_direct(&self, api: &MatrixApi, me: &str, inviter: &str, room_id: &str) {
        let updated = match api.direct_rooms(me).await {
            Ok(mut direct) => {
                if !direct.is_object() {
                    direct = json!({});
                }
                let rooms = &mut direct[inviter];
                if !rooms.is_array() {
                    *rooms = json!([]);
                }
                if let Some(list) = rooms.as_array_mut() {
                    if !list.iter().any(|r| r == room_id) {
                        list.push(json!(room_id));
                    }
                }
                direct
            }
            Err(error) => {
                self.account
                    .record_error(format!("cannot read m.direct: {error}"));
                return;
            }
        };
        if let Err(error) = api.set_direct_rooms(me, &updated).await {
            self.account
                .record_error(format!("cannot add {room_id} to m.direct: {error}"));
        }
    }

    /// `autoJoinAllowlist` names the room: `"*"`, its id, or an alias the
    /// homeserver resolves to it (never what the invite itself claims).
    async fn on_join_allowlist(&self, api: &MatrixApi, room_id: &str) -> bool {
        for entry in &self.account.settings.auto_join_allowlist {
            if entry == "*" || entry == room_id {
                return true;
            }
            if entry.starts_with('#') {
                match api.resolve_alias(entry).await {
                    Ok(resolved) if resolved == room_id => return true,
                    Ok(_) => {}
                    Err(error) => log::warn!(
                        "matrix account {}: autoJoinAllowlist alias {entry}: {error}",
                        self.account.id
                    ),
                }
            }
        }
        false
    }

    async fn handle_event(
        &self,
        api: &MatrixApi,
        room_id: &str,
        event: &Value,
    ) -> Result<(), BatchError> {
        let kind = event["type"].as_str().unwrap_or("");
        let bot = self.account.identity();
        if !matches!(kind, "m.room.message" | "m.room.encrypted")
            || event["sender"] == bot.user_id.as_str()
        {
            return Ok(());
        }
        let room = self
            .account
            .rooms
            .resolve(api, room_id, &bot.user_id)
            .await
            .map_err(BatchError::Api)?;
        let settings = &self.account.settings;
        let translated = {
            let sent = |id: &str| self.account.sent_by_bot(id);
            let ctx = Context {
                account_id: &self.account.id,
                bot: &bot,
                room_id,
                room: &room,
                direct: self.account.rooms.is_direct(room_id),
                session_scope: settings.session_scope,
                thread_replies: settings.thread_replies,
                sent_by_bot: &sent,
            };
            translate(&ctx, event)
        };
        match translated {
            Translated::Skipped => Ok(()),
            Translated::Malformed(reason) => {
                log::warn!(
                    "matrix account {}: malformed event in {room_id} skipped: {reason}",
                    self.account.id
                );
                Ok(())
            }
            Translated::Encrypted => {
                self.refuse_encrypted(api, room_id).await;
                Ok(())
            }
            Translated::Message { .. } if room.encrypted => {
                self.refuse_encrypted(api, room_id).await;
                Ok(())
            }
            Translated::Message { mut event, file } => {
                if let Some(file) = file {
                    let outcome = match api.media_url(&file.url) {
                        Some(url) => {
                            let remote = crate::channels::media::RemoteFile { url, ..file };
                            let authorization = api.authorization();
                            let fetch = fetch_remote(
                                &self.account.http,
                                &self.account.media,
                                &remote,
                                Some(&authorization),
                                "mx",
                            );
                            unless_stopped(&self.stop, fetch)
                                .await
                                .ok_or(BatchError::Stopped)?
                        }
                        None => MediaOutcome::Skipped(failed_note(
                            MediaKind::of_mime(file.mime_type.as_deref()),
                            "not an mxc:// URL",
                        )),
                    };
                    add_to_event(&mut event, outcome);
                }
                let event_id = event.message.message_id.clone().unwrap_or_default();
                // Delivery is awaited to the end even when stopping: the
                // sink's answer decides whether the event counts as accepted.
                self.sink
                    .deliver(*event)
                    .await
                    .map_err(BatchError::Refused)?;
                self.account.state.inbound_now();
                if let Err(error) = api.read_markers(room_id, &event_id).await {
                    log::debug!(
                        "matrix account {}: read marker in {room_id}: {error}",
                        self.account.id
                    );
                }
                Ok(())
            }
        }
    }

    /// An encrypted room: not answered; the status says so, the room is
    /// told once.
    async fn refuse_encrypted(&self, api: &MatrixApi, room_id: &str) {
        self.account.rooms.mark_encrypted(room_id);
        let reason = format!(
            "room {room_id} is end-to-end encrypted: pincer answers in unencrypted rooms only"
        );
        self.account
            .state
            .update(|s| s.state_reason = Some(reason.clone()));
        if !self.account.rooms.first_notice(room_id) {
            return;
        }
        log::warn!("matrix account {}: {reason}", self.account.id);
        let notice = json!({ "msgtype": "m.notice", "body": ENCRYPTED_ROOM_NOTICE });
        match api.send_event(room_id, "m.room.message", &notice).await {
            Ok(event_id) => self.account.remember_sent(&event_id),
            Err(error) => log::warn!(
                "matrix account {}: cannot tell {room_id} it is not read: {error}",
                self.account.id
            ),
        }
    }
}

/// Why signing in failed.
pub(super) enum SignInError {
    /// Worth another try later (network, homeserver errors).
    Retry(String),
    /// Refused for good until the config changes.
    Fatal(String),
}

/// Who the bot is, once signed in.
pub(super) fn identity_of(user_id: &str, display_name: Option<String>) -> BotIdentity {
    BotIdentity {
        user_id: user_id.to_string(),
        display_name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_bounds_the_timeline_and_drops_presence() {
        let filter: Value = serde_json::from_str(&sync_filter(7)).expect("json");
        assert_eq!(filter["room"]["timeline"]["limit"], 7);
        assert_eq!(filter["presence"]["not_types"], json!(["*"]));
        assert_eq!(filter["account_data"]["types"], json!(["m.direct"]));
    }
}
