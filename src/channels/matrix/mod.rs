//! The Matrix channel (client-server API, cargo feature `matrix`): every
//! configured account's sync loop (inbound, `sync.rs`: sign-in, `/sync`
//! with the token in the store, invites, encrypted rooms refused), room
//! knowledge (`rooms.rs`), translation (`translate.rs`) and the API client
//! (`api.rs`) behind the [`Channel`] trait with typing, edits (`m.replace`,
//! for previews), redactions, reactions and files (uploaded to the media
//! repository, then an `m.image`/`m.video`/`m.audio`/`m.file` event with
//! the reply's text as its caption). Markdown goes out as Matrix
//! HTML (`format.rs`); a reply quotes and threads as the hub and
//! `threadReplies` ask.
//!
//! No end-to-end encryption: a homeserver account is read in unencrypted
//! rooms only (see README). This file owns configuration, lifecycle and
//! status; retries, chunking, access policy and routing are not this
//! adapter's job, and no access token or password may appear in a log
//! line or error text.

pub mod api;
pub mod format;
pub mod rooms;
mod sync;
pub mod translate;

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::channels::account::{AccountState, AccountTasks};
use crate::channels::media::{MediaDefaults, MediaLimits};
use crate::channels::{
    AccountStatus, BoxFuture, Channel, ChunkMode, DeleteMessage, EditMessage, InboundSink,
    OutboundTarget, React, SendError, SendMedia, SentMessage, StartError, TextFormat, TextLimits,
    Typing, Upload, UploadKind,
};
use crate::config::schema::matrix::{
    MatrixAccountConfig, MatrixAutoJoin, MatrixConfig, MatrixDmSessionScope, MatrixThreadReplies,
    DEFAULT_MATRIX_MEDIA_MAX_MB,
};
use crate::store::Store;

use api::{ApiError, MatrixApi};
use rooms::Rooms;
use sync::{SignInError, SyncLoop, TYPING_TIMEOUT_MS};
pub use translate::{BotIdentity, CHANNEL_ID};

/// Matrix has no hard text limit below an event's 64 KiB; pincer's cap per
/// message (the account's `textChunkLimit` is clamped to it).
pub const MATRIX_MAX_CHARS: usize = 16_000;
/// The largest file uploaded (Synapse's default `max_upload_size`; a
/// homeserver with a lower one refuses with `M_TOO_LARGE`, named in the chat).
pub const MATRIX_MAX_UPLOAD_BYTES: u64 = 50 * 1024 * 1024;
/// Event ids of the bot's own messages remembered per account (replies to
/// them count as mentions).
const MAX_SENT_EVENTS: usize = 1_000;
/// Direct rooms opened for users remembered per account.
const MAX_DIRECT_ROOMS: usize = 1_000;

/// What an account is configured to do (read once from the config).
#[derive(Clone)]
pub struct AccountSettings {
    pub homeserver: String,
    pub access_token: Option<String>,
    pub user_id: Option<String>,
    pub password: Option<String>,
    pub device_id: Option<String>,
    pub device_name: Option<String>,
    pub initial_sync_limit: u32,
    pub allow_private_network: bool,
    pub auto_join: MatrixAutoJoin,
    pub auto_join_allowlist: Vec<String>,
    pub thread_replies: MatrixThreadReplies,
    pub session_scope: MatrixDmSessionScope,
}

/// One configured account.
pub struct Account {
    pub id: String,
    settings: AccountSettings,
    http: reqwest::Client,
    media: MediaLimits,
    state: AccountState<BotIdentity>,
    /// The signed-in client (`None` until sign-in).
    api: RwLock<Option<MatrixApi>>,
    rooms: Rooms,
    sent: Mutex<VecDeque<String>>,
    /// User id → the direct room opened to reach them.
    direct_rooms: Mutex<BTreeMap<String, String>>,
}

impl Account {
    fn identity(&self) -> BotIdentity {
        self.state.identity().unwrap_or_default()
    }

    fn record_error(&self, error: String) {
        log::warn!("matrix account {}: {error}", self.id);
        self.state.update(|s| s.last_error = Some(error));
    }

    fn refused(&self, error: &ApiError) {
        let text =
            format!("{error} (the access token was refused; fix it and restart the account)");
        log::error!("matrix account {}: {text}", self.id);
        self.state.disconnected(text);
    }

    fn count_reconnect(&self) {
        self.state
            .update(|s| s.reconnect_attempts = Some(s.reconnect_attempts.unwrap_or(0) + 1));
    }

    async fn signed_in(&self, api: &MatrixApi, user_id: &str) {
        let display_name = api_display_name(api, user_id).await;
        self.state
            .set_identity(sync::identity_of(user_id, display_name));
        *self.api.write() = Some(api.clone());
        self.state.update(|s| {
            s.identity = Some(user_id.to_string());
            s.reconnect_attempts = Some(0);
        });
        log::info!("matrix account {}: signed in as {user_id}", self.id);
    }

    fn remember_sent(&self, event_id: &str) {
        let mut sent = self.sent.lock();
        if sent.len() >= MAX_SENT_EVENTS {
            sent.pop_front();
        }
        sent.push_back(event_id.to_string());
    }

    /// Remembers the direct room that reaches `user` (all forgotten when
    /// `MAX_DIRECT_ROOMS` are known: they are looked up again on need).
    fn remember_direct_room(&self, user: &str, room: &str) {
        let mut rooms = self.direct_rooms.lock();
        if rooms.len() >= MAX_DIRECT_ROOMS && !rooms.contains_key(user) {
            rooms.clear();
        }
        rooms.insert(user.to_string(), room.to_string());
    }

    fn sent_by_bot(&self, event_id: &str) -> bool {
        self.sent.lock().iter().any(|id| id == event_id)
    }

    /// Refuses a homeserver on a loopback, private or link-local address
    /// unless `network.dangerouslyAllowPrivateNetwork` (upstream's rule).
    async fn check_homeserver(&self) -> Result<(), SignInError> {
        if self.settings.allow_private_network {
            return Ok(());
        }
        let url = reqwest::Url::parse(&self.settings.homeserver).map_err(|e| {
            SignInError::Fatal(format!(
                "homeserver {:?} is not a URL: {e}",
                self.settings.homeserver
            ))
        })?;
        let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
        let port = url.port_or_known_default().unwrap_or(443);
        let addresses: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| {
                    SignInError::Retry(format!("cannot resolve the homeserver {host}: {e}"))
                })?
                .map(|a| a.ip())
                .collect(),
        };
        match addresses
            .iter()
            .find(|ip| !crate::tools::web_fetch::is_public(**ip))
        {
            Some(ip) => Err(SignInError::Fatal(format!(
                "the homeserver {host} is at the private address {ip}; set network.dangerouslyAllowPrivateNetwork: true to allow it"
            ))),
            None => Ok(()),
        }
    }

    fn api(&self) -> Result<MatrixApi, SendError> {
        self.api.read().clone().ok_or_else(|| {
            SendError::Transient(format!("matrix account {} is not signed in", self.id))
        })
    }
}

/// The bot's display name, if it has one (for stripping a leading mention).
async fn api_display_name(api: &MatrixApi, user_id: &str) -> Option<String> {
    api.display_name(user_id).await.ok().flatten()
}

/// The Matrix adapter for all accounts of `channels.matrix`.
pub struct MatrixChannel {
    accounts: BTreeMap<String, Arc<Account>>,
    unconfigured: Vec<AccountStatus>,
    default_account: String,
    store: Store,
    tasks: AccountTasks,
}

impl std::fmt::Debug for MatrixChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatrixChannel")
            .field("accounts", &self.accounts.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Why an account cannot run, or its settings.
fn account_settings(config: &MatrixAccountConfig) -> Result<AccountSettings, String> {
    let text = |value: &Option<String>| {
        value
            .as_deref()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    let homeserver = config.effective_homeserver().ok_or("no homeserver")?;
    // Validation refuses it at load; an account never runs with it either.
    if config.encryption == Some(true) {
        return Err("encryption: true is not supported by pincer (unencrypted rooms only)".into());
    }
    let access_token = text(&config.access_token);
    let user_id = text(&config.user_id);
    let password = config.password.clone().filter(|p| !p.is_empty());
    if access_token.is_none() && (user_id.is_none() || password.is_none()) {
        return Err("no accessToken, and no userId with a password".into());
    }
    Ok(AccountSettings {
        homeserver,
        access_token,
        user_id,
        password,
        device_id: text(&config.device_id),
        device_name: text(&config.device_name),
        initial_sync_limit: config.effective_initial_sync_limit(),
        allow_private_network: config.effective_allow_private_network(),
        auto_join: config.effective_auto_join(),
        auto_join_allowlist: config
            .auto_join_allowlist
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.trim().to_string())
            .collect(),
        thread_replies: config.effective_thread_replies(),
        session_scope: config.effective_dm_session_scope(),
    })
}

impl MatrixChannel {
    /// Every account of `channels.matrix`; accounts without a homeserver and
    /// credentials, or disabled, are listed as not configured.
    pub fn new(
        config: &MatrixConfig,
        store: Store,
        http: &reqwest::Client,
        media: &MediaDefaults,
    ) -> MatrixChannel {
        let mut accounts = BTreeMap::new();
        let mut unconfigured = Vec::new();
        for id in config.account_ids() {
            let Some(account) = config.account(&id) else {
                continue;
            };
            let enabled = account.effective_enabled();
            let status_base = AccountStatus {
                account_id: id.clone(),
                enabled,
                name: account.name.clone(),
                base_url: account.effective_homeserver(),
                ..AccountStatus::default()
            };
            match account_settings(&account) {
                Ok(settings) => {
                    let state = AccountState::new(&id, enabled, true);
                    let base = status_base.clone();
                    state.update(|s| {
                        s.name = base.name;
                        s.base_url = base.base_url;
                    });
                    let max_mb = account.media_max_mb.or(Some(DEFAULT_MATRIX_MEDIA_MAX_MB));
                    accounts.insert(
                        id.clone(),
                        Arc::new(Account {
                            id,
                            settings,
                            http: http.clone(),
                            media: media.limits(CHANNEL_ID, max_mb),
                            state,
                            api: RwLock::new(None),
                            rooms: Rooms::default(),
                            sent: Mutex::new(VecDeque::new()),
                            direct_rooms: Mutex::new(BTreeMap::new()),
                        }),
                    );
                }
                Err(error) => unconfigured.push(AccountStatus {
                    last_error: Some(error),
                    ..status_base
                }),
            }
        }
        let default_account = crate::channels::account::default_account_id(
            config.default_account.as_deref(),
            &accounts,
        );
        MatrixChannel {
            accounts,
            unconfigured,
            default_account,
            store,
            tasks: AccountTasks::default(),
        }
    }

    fn account_for(&self, target: &OutboundTarget) -> Result<Arc<Account>, SendError> {
        let id = if target.account_id.trim().is_empty() {
            self.default_account.as_str()
        } else {
            target.account_id.trim()
        };
        self.accounts
            .get(id)
            .filter(|a| a.state.status().enabled)
            .cloned()
            .ok_or_else(|| SendError::NoAccount(id.to_string()))
    }

    /// The room a target names: a room id (`!room:hs`, `matrix:` and
    /// `room:` prefixes allowed), an alias, or a user (`@user:hs`,
    /// `user:@user:hs`) reached in their direct room (found in `m.direct`,
    /// else created).
    async fn room_of(
        &self,
        account: &Account,
        api: &MatrixApi,
        to: &str,
    ) -> Result<String, SendError> {
        let to = to.trim();
        let to = to.strip_prefix("matrix:").unwrap_or(to);
        let to = to.strip_prefix("room:").unwrap_or(to);
        let to = to.strip_prefix("user:").unwrap_or(to);
        if to.starts_with('!') {
            return Ok(to.to_string());
        }
        if to.starts_with('#') {
            return api
                .resolve_alias(to)
                .await
                .map_err(ApiError::into_send_error);
        }
        if !(to.starts_with('@') && to.contains(':')) {
            return Err(SendError::Permanent(format!(
                "{to:?} is not a Matrix room id, alias or user id"
            )));
        }
        if let Some(room) = account.direct_rooms.lock().get(to) {
            return Ok(room.clone());
        }
        let me = account.identity().user_id;
        let direct = api
            .direct_rooms(&me)
            .await
            .map_err(ApiError::into_send_error)?;
        let room = match direct[to]
            .as_array()
            .and_then(|r| r.first())
            .and_then(|r| r.as_str())
        {
            Some(room) => room.to_string(),
            None => {
                let room = api
                    .create_direct_room(to)
                    .await
                    .map_err(ApiError::into_send_error)?;
                let mut updated = direct.clone();
                if !updated.is_object() {
                    updated = serde_json::json!({});
                }
                updated[to] = serde_json::json!([room]);
                if let Err(error) = api.set_direct_rooms(&me, &updated).await {
                    log::warn!(
                        "matrix account {}: cannot update m.direct: {error}",
                        account.id
                    );
                }
                room
            }
        };
        account.remember_direct_room(to, &room);
        Ok(room)
    }

    async fn send_content(
        &self,
        target: &OutboundTarget,
        event_type: &str,
        content: serde_json::Value,
    ) -> Result<(Arc<Account>, String), SendError> {
        let account = self.account_for(target)?;
        let api = account.api()?;
        let room = self.room_of(&account, &api, &target.to).await?;
        let event_id = api
            .send_event(&room, event_type, &content)
            .await
            .map_err(ApiError::into_send_error)?;
        account.remember_sent(&event_id);
        Ok((account, event_id))
    }
}

impl Channel for MatrixChannel {
    fn id(&self) -> &'static str {
        CHANNEL_ID
    }

    fn text_limits(&self) -> TextLimits {
        TextLimits {
            max_chars: MATRIX_MAX_CHARS,
            max_lines: None,
            chunk_mode: ChunkMode::Length,
        }
    }

    fn start(&self, sink: Arc<dyn InboundSink>) -> BoxFuture<'_, Result<(), StartError>> {
        Box::pin(async move {
            let cancel = self.tasks.token();
            for account in self.accounts.values() {
                if !account.state.status().enabled || account.state.is_running() {
                    continue;
                }
                account.state.set_running(true);
                self.tasks.spawn(
                    SyncLoop {
                        account: Arc::clone(account),
                        store: self.store.clone(),
                        sink: Arc::clone(&sink),
                        stop: cancel.child_token(),
                    }
                    .run(),
                );
            }
            Ok(())
        })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.tasks.stop())
    }

    fn status(&self) -> Vec<AccountStatus> {
        let mut all: Vec<AccountStatus> = self
            .accounts
            .values()
            .map(|a| a.state.status())
            .chain(self.unconfigured.iter().cloned())
            .collect();
        all.sort_by(|a, b| a.account_id.cmp(&b.account_id));
        all
    }

    fn send_text<'a>(
        &'a self,
        target: &'a OutboundTarget,
        text: &'a str,
        format: TextFormat,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>> {
        Box::pin(async move {
            let mut content = format::text_content(text, format);
            if let Some(relation) = format::relation(
                target.thread_id.as_deref(),
                target.reply_to_message_id.as_deref(),
            ) {
                content["m.relates_to"] = relation;
            }
            let (account, message_id) =
                self.send_content(target, "m.room.message", content).await?;
            account.state.outbound_now();
            Ok(SentMessage { message_id })
        })
    }

    fn typing(&self) -> Option<&dyn Typing> {
        Some(self)
    }
    fn edit(&self) -> Option<&dyn EditMessage> {
        Some(self)
    }
    fn delete(&self) -> Option<&dyn DeleteMessage> {
        Some(self)
    }
    fn reactions(&self) -> Option<&dyn React> {
        Some(self)
    }
    fn media(&self) -> Option<&dyn SendMedia> {
        Some(self)
    }
}

impl SendMedia for MatrixChannel {
    fn max_upload_bytes(&self, _kind: UploadKind) -> u64 {
        MATRIX_MAX_UPLOAD_BYTES
    }

    fn max_caption_chars(&self) -> usize {
        MATRIX_MAX_CHARS
    }

    /// The file to the media repository, then an `m.room.message` naming
    /// its `mxc://` URI (`format::file_content`), in the thread or reply
    /// the target names.
    fn send_media<'a>(
        &'a self,
        target: &'a OutboundTarget,
        upload: Upload<'a>,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let api = account.api()?;
            let mxc = api
                .upload(upload.path, upload.file_name, upload.mime, upload.bytes)
                .await
                .map_err(ApiError::into_send_error)?;
            let mut content = format::file_content(
                upload.kind,
                &mxc,
                upload.file_name,
                upload.mime,
                upload.bytes,
                upload.caption.filter(|c| !c.trim().is_empty()),
            );
            if let Some(relation) = format::relation(
                target.thread_id.as_deref(),
                target.reply_to_message_id.as_deref(),
            ) {
                content["m.relates_to"] = relation;
            }
            let (account, message_id) =
                self.send_content(target, "m.room.message", content).await?;
            account.state.outbound_now();
            Ok(SentMessage { message_id })
        })
    }
}

impl Typing for MatrixChannel {
    fn send_typing<'a>(
        &'a self,
        target: &'a OutboundTarget,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let api = account.api()?;
            let room = self.room_of(&account, &api, &target.to).await?;
            api.typing(&room, &account.identity().user_id, TYPING_TIMEOUT_MS)
                .await
                .map_err(ApiError::into_send_error)
        })
    }
}

impl EditMessage for MatrixChannel {
    fn edit_text<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
        text: &'a str,
        format: TextFormat,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let content = format::edit_content(message_id, text, format);
            self.send_content(target, "m.room.message", content)
                .await
                .map(drop)
        })
    }
}

impl DeleteMessage for MatrixChannel {
    fn delete<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let api = account.api()?;
            let room = self.room_of(&account, &api, &target.to).await?;
            api.redact(&room, message_id)
                .await
                .map_err(ApiError::into_send_error)
        })
    }
}

impl React for MatrixChannel {
    fn react<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
        emoji: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let content = format::reaction_content(message_id, emoji);
            self.send_content(target, "m.reaction", content)
                .await
                .map(drop)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    #[test]
    fn accounts_without_credentials_are_listed_but_not_configured() {
        let (_dir, store) = temp_store();
        let config: MatrixConfig = serde_json::from_str(
            r#"{"homeserver":"https://hs","accounts":{
                "token":{"accessToken":"syt_1","name":"Main bot"},
                "password":{"userId":"@bot:hs","password":"pw"},
                "nothing":{},
                "e2ee":{"accessToken":"syt_3","encryption":true},
                "nohs":{"homeserver":" ","accessToken":"syt_2"}}}"#,
        )
        .expect("config");
        let channel = MatrixChannel::new(
            &config,
            store,
            &reqwest::Client::new(),
            &MediaDefaults::default(),
        );
        let status: Vec<(String, bool, Option<String>)> = channel
            .status()
            .into_iter()
            .map(|s| (s.account_id, s.configured, s.last_error))
            .collect();
        assert_eq!(
            status,
            vec![
                (
                    "e2ee".into(),
                    false,
                    Some(
                        "encryption: true is not supported by pincer (unencrypted rooms only)"
                            .into()
                    )
                ),
                ("nohs".into(), false, Some("no homeserver".into())),
                (
                    "nothing".into(),
                    false,
                    Some("no accessToken, and no userId with a password".into())
                ),
                ("password".into(), true, None),
                ("token".into(), true, None),
            ]
        );
        let token = &channel.accounts["token"];
        assert_eq!(token.state.status().name.as_deref(), Some("Main bot"));
        assert_eq!(token.state.status().base_url.as_deref(), Some("https://hs"));
        assert_eq!(token.media.max_file_bytes, 20 * 1024 * 1024);
    }

    #[test]
    fn remembered_sent_events_and_direct_rooms_are_bounded() {
        let (_dir, store) = temp_store();
        let config: MatrixConfig =
            serde_json::from_str(r#"{"homeserver":"https://hs","accessToken":"t"}"#)
                .expect("config");
        let channel = MatrixChannel::new(
            &config,
            store,
            &reqwest::Client::new(),
            &MediaDefaults::default(),
        );
        let account = &channel.accounts[crate::config::schema::channels::DEFAULT_ACCOUNT_ID];
        for i in 0..MAX_SENT_EVENTS + 5 {
            account.remember_sent(&format!("$e{i}"));
        }
        assert_eq!(account.sent.lock().len(), MAX_SENT_EVENTS);
        assert!(!account.sent_by_bot("$e0"), "the oldest went first");
        assert!(account.sent_by_bot(&format!("$e{}", MAX_SENT_EVENTS + 4)));
        for i in 0..MAX_DIRECT_ROOMS + 5 {
            account.remember_direct_room(&format!("@u{i}:hs"), &format!("!r{i}:hs"));
        }
        assert!(account.direct_rooms.lock().len() <= MAX_DIRECT_ROOMS);
        let last = format!("@u{}:hs", MAX_DIRECT_ROOMS + 4);
        assert!(account.direct_rooms.lock().contains_key(&last));
    }

    #[tokio::test]
    async fn a_private_homeserver_is_refused_unless_allowed() {
        let (_dir, store) = temp_store();
        let config: MatrixConfig = serde_json::from_str(
            r#"{"homeserver":"http://127.0.0.1:8008","accessToken":"t",
                "accounts":{"lan":{"network":{"dangerouslyAllowPrivateNetwork":true}},"strict":{}}}"#,
        )
        .expect("config");
        let channel = MatrixChannel::new(
            &config,
            store,
            &reqwest::Client::new(),
            &MediaDefaults::default(),
        );
        match channel.accounts["strict"].check_homeserver().await {
            Err(SignInError::Fatal(text)) => {
                assert!(text.contains("dangerouslyAllowPrivateNetwork"), "{text}")
            }
            _ => panic!("a loopback homeserver must be refused"),
        }
        assert!(channel.accounts["lan"].check_homeserver().await.is_ok());
    }

    #[tokio::test]
    async fn sending_before_sign_in_or_through_an_unknown_account_fails_clearly() {
        let (_dir, store) = temp_store();
        let config: MatrixConfig =
            serde_json::from_str(r#"{"homeserver":"https://hs","accessToken":"t"}"#)
                .expect("config");
        let channel = MatrixChannel::new(
            &config,
            store,
            &reqwest::Client::new(),
            &MediaDefaults::default(),
        );
        let target = OutboundTarget {
            account_id: "nobody".into(),
            to: "!r:hs".into(),
            ..OutboundTarget::default()
        };
        assert_eq!(
            channel.send_text(&target, "hi", TextFormat::Plain).await,
            Err(SendError::NoAccount("nobody".into()))
        );
        let target = OutboundTarget {
            to: "!r:hs".into(),
            ..OutboundTarget::default()
        };
        assert!(matches!(
            channel.send_text(&target, "hi", TextFormat::Plain).await,
            Err(SendError::Transient(_))
        ));
    }
}
