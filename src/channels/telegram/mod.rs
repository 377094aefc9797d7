//! The Telegram channel adapter (Bot API): one `TelegramChannel` serves every
//! configured bot account — long polling per account (`poll.rs`), inbound
//! translation (`inbound.rs`), attachments (`media.rs`), and outbound
//! `sendMessage` / `editMessageText` / `deleteMessage` / `sendChatAction` /
//! `setMessageReaction` with markdown sent as HTML (`format.rs`) and one
//! plain-text retry when Telegram cannot parse the markup. Failures are
//! classified into `SendError` (429 with `retry_after`, 5xx/network
//! transient, other 4xx permanent).
//!
//! Retries, chunking, access policy and routing are not this adapter's job,
//! and the bot token must never appear in a log line or error text.

pub mod api;
pub mod format;
pub mod inbound;
pub mod media;
mod poll;
pub mod wire;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::channels::{
    AccountStatus, BoxFuture, Channel, DeleteMessage, EditMessage, InboundSink, OutboundTarget,
    React, SendError, SentMessage, TextFormat, TextLimits, Typing,
};
use crate::config::schema::channels::DEFAULT_ACCOUNT_ID;
use crate::config::schema::telegram::{TelegramAccountConfig, TelegramConfig};
use crate::config::Config;
use crate::store::Store;
use crate::system::clock::now_ms;

use api::{ApiError, BotApi, DEFAULT_REQUEST_TIMEOUT_SECS};
use inbound::{BotIdentity, CHANNEL_ID, GENERAL_TOPIC_ID};
use media::{mb_to_bytes, MediaLimits, DEFAULT_MEDIA_DIR_MAX_BYTES, DEFAULT_MEDIA_MAX_MB};

/// Characters per outbound chunk (upstream's `TELEGRAM_TEXT_CHUNK_LIMIT`).
pub const TELEGRAM_CHUNK_CHARS: usize = 4_000;
/// Telegram's hard cap on a message's text, in characters.
pub const TELEGRAM_MAX_MESSAGE_CHARS: usize = 4_096;

/// Adapter-wide settings that do not come from `channels.telegram`.
#[derive(Debug, Clone)]
pub struct TelegramOptions {
    /// Where inbound attachments are downloaded.
    pub media_dir: PathBuf,
    /// `agents.defaults.mediaMaxMb` (an account's `mediaMaxMb` wins).
    pub default_media_max_mb: Option<f64>,
    /// Cap of the whole media directory.
    pub media_dir_max_bytes: u64,
    /// Shared HTTP client (one is built when `None`).
    pub http: Option<reqwest::Client>,
}

impl TelegramOptions {
    /// Options for a loaded config, media under the system temp dir.
    pub fn for_config(config: &Config) -> TelegramOptions {
        TelegramOptions {
            media_dir: std::env::temp_dir().join("pincer-media").join(CHANNEL_ID),
            default_media_max_mb: config.agents.defaults.media_max_mb,
            media_dir_max_bytes: DEFAULT_MEDIA_DIR_MAX_BYTES,
            http: None,
        }
    }
}

/// One bot account: its API client, media limits and live state.
pub struct Account {
    pub id: String,
    pub api: BotApi,
    pub media: MediaLimits,
    enabled: bool,
    link_preview: bool,
    status: Mutex<AccountStatus>,
    bot: Mutex<Option<BotIdentity>>,
}

impl Account {
    fn with_status<R>(&self, change: impl FnOnce(&mut AccountStatus) -> R) -> R {
        change(&mut self.status.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn mark_connected(&self) {
        self.with_status(|s| s.connected = true);
    }

    fn mark_disconnected(&self, error: String) {
        let error = self.api.redact(&error);
        self.with_status(|s| {
            s.connected = false;
            s.last_error = Some(error);
        });
    }

    fn record_error(&self, error: String) {
        let error = self.api.redact(&error);
        log::warn!("telegram account {}: {error}", self.id);
        self.with_status(|s| s.last_error = Some(error));
    }

    fn mark_inbound(&self) {
        self.with_status(|s| s.last_inbound_at_ms = Some(now_ms()));
    }

    fn mark_outbound(&self) {
        self.with_status(|s| s.last_outbound_at_ms = Some(now_ms()));
    }
}

/// The token of an account: `botToken`, else the contents of `tokenFile`.
fn account_token(config: &TelegramAccountConfig) -> Result<Option<String>, String> {
    if let Some(token) = config.bot_token.as_deref().map(str::trim) {
        if !token.is_empty() {
            return Ok(Some(token.to_string()));
        }
    }
    let Some(path) = config
        .token_file
        .as_deref()
        .filter(|p| !p.trim().is_empty())
    else {
        return Ok(None);
    };
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => Ok(Some(text.trim().to_string())),
        Ok(_) => Err(format!("tokenFile {path} is empty")),
        Err(error) => Err(format!("cannot read tokenFile {path}: {error}")),
    }
}

/// Running pollers.
struct Running {
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

/// The Telegram adapter.
pub struct TelegramChannel {
    accounts: BTreeMap<String, Arc<Account>>,
    /// Accounts that cannot run (no token, unreadable token file).
    unconfigured: Vec<AccountStatus>,
    default_account: String,
    store: Store,
    running: tokio::sync::Mutex<Option<Running>>,
}

impl std::fmt::Debug for TelegramChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramChannel")
            .field("accounts", &self.accounts.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl TelegramChannel {
    /// The adapter for `channels.telegram`. Accounts without a usable token
    /// are reported in `status` as not configured.
    pub fn new(config: &TelegramConfig, store: Store, options: TelegramOptions) -> TelegramChannel {
        let http = options.http.clone().unwrap_or_else(|| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .user_agent(concat!("pincer/", env!("CARGO_PKG_VERSION")))
                .build()
                .unwrap_or_else(|_| reqwest::Client::new())
        });
        let mut accounts = BTreeMap::new();
        let mut unconfigured = Vec::new();
        for id in config.account_ids() {
            let Some(account) = config.account(&id) else {
                continue;
            };
            match account_token(&account) {
                Ok(Some(token)) => {
                    let built = build_account(&id, &account, &token, &http, &options);
                    accounts.insert(id, Arc::new(built));
                }
                Ok(None) => unconfigured.push(unconfigured_status(&id, None)),
                Err(error) => unconfigured.push(unconfigured_status(&id, Some(error))),
            }
        }
        let default_account = config
            .default_account
            .clone()
            .filter(|d| accounts.contains_key(d))
            .or_else(|| {
                accounts
                    .contains_key(DEFAULT_ACCOUNT_ID)
                    .then(|| DEFAULT_ACCOUNT_ID.to_string())
            })
            .or_else(|| accounts.keys().next().cloned())
            .unwrap_or_else(|| DEFAULT_ACCOUNT_ID.to_string());
        TelegramChannel {
            accounts,
            unconfigured,
            default_account,
            store,
            running: tokio::sync::Mutex::new(None),
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
            .or_else(|| {
                self.accounts
                    .iter()
                    .find(|(key, _)| key.eq_ignore_ascii_case(id))
                    .map(|(_, account)| account)
            })
            .filter(|account| account.enabled)
            .cloned()
            .ok_or_else(|| SendError::NoAccount(id.to_string()))
    }
}

fn unconfigured_status(id: &str, error: Option<String>) -> AccountStatus {
    AccountStatus {
        account_id: id.to_string(),
        configured: false,
        last_error: error,
        ..AccountStatus::default()
    }
}

fn build_account(
    id: &str,
    config: &TelegramAccountConfig,
    token: &str,
    http: &reqwest::Client,
    options: &TelegramOptions,
) -> Account {
    let timeout_secs = config
        .timeout_seconds
        .map_or(DEFAULT_REQUEST_TIMEOUT_SECS, u64::from)
        .max(1);
    let max_mb = config
        .media_max_mb
        .or(options.default_media_max_mb)
        .unwrap_or(DEFAULT_MEDIA_MAX_MB);
    if config.webhook_url.is_some() {
        log::warn!("telegram account {id}: webhook mode is not implemented; long polling instead");
    }
    Account {
        id: id.to_string(),
        api: BotApi::new(
            http.clone(),
            config.api_root.as_deref(),
            token,
            Duration::from_secs(timeout_secs),
        ),
        media: MediaLimits {
            dir: options.media_dir.clone(),
            max_file_bytes: mb_to_bytes(max_mb),
            max_dir_bytes: options.media_dir_max_bytes,
        },
        enabled: config.effective_enabled(),
        link_preview: config.link_preview.unwrap_or(true),
        status: Mutex::new(AccountStatus {
            account_id: id.to_string(),
            configured: true,
            ..AccountStatus::default()
        }),
        bot: Mutex::new(None),
    }
}

/// A chat to send to: its id and forum topic / DM thread.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ChatTarget {
    chat_id: String,
    thread: Option<i64>,
}

/// Accepts `123`, `@channel`, `telegram:123`, `telegram:group:-100:topic:7`.
fn chat_target(target: &OutboundTarget) -> Result<ChatTarget, SendError> {
    let mut to = target.to.trim();
    to = to.strip_prefix("telegram:").unwrap_or(to);
    to = to.strip_prefix("tg:").unwrap_or(to);
    for kind in ["group:", "channel:", "direct:"] {
        to = to.strip_prefix(kind).unwrap_or(to);
    }
    let (chat, topic) = match to.split_once(":topic:") {
        Some((chat, topic)) => (chat, Some(topic)),
        None => (to, None),
    };
    let valid = chat.parse::<i64>().is_ok() || (chat.starts_with('@') && chat.len() > 1);
    if !valid {
        return Err(SendError::Permanent(format!(
            "not a Telegram chat id: {:?}",
            target.to
        )));
    }
    let thread_text = target.thread_id.as_deref().or(topic).map(str::trim);
    let thread = match thread_text.filter(|t| !t.is_empty()) {
        None => None,
        Some(text) => Some(
            text.parse::<i64>()
                .map_err(|_| SendError::Permanent(format!("not a Telegram thread id: {text:?}")))?,
        ),
    };
    Ok(ChatTarget {
        chat_id: chat.to_string(),
        thread,
    })
}

fn message_id(raw: &str) -> Result<i64, SendError> {
    raw.trim()
        .parse::<i64>()
        .map_err(|_| SendError::Permanent(format!("not a Telegram message id: {raw:?}")))
}

/// The `text` + `parse_mode` fields for a format.
fn text_fields(body: &mut Value, text: &str, format: TextFormat) {
    match format {
        TextFormat::Markdown => {
            body["text"] = json!(format::markdown_to_html(text));
            body["parse_mode"] = json!("HTML");
        }
        TextFormat::Plain => body["text"] = json!(text),
    }
}

/// Calls an API method with markup, retrying once as plain text when
/// Telegram cannot parse the markup.
async fn with_plain_fallback<T, F, Fut>(
    body: Value,
    text: &str,
    format: TextFormat,
    call: F,
) -> Result<T, ApiError>
where
    F: Fn(Value) -> Fut,
    Fut: std::future::Future<Output = Result<T, ApiError>>,
{
    let mut formatted = body.clone();
    text_fields(&mut formatted, text, format);
    match call(formatted).await {
        Err(error) if format == TextFormat::Markdown && error.is_parse_entities() => {
            log::debug!("telegram: markup refused ({error}); resending as plain text");
            let mut plain = body;
            text_fields(&mut plain, text, TextFormat::Plain);
            call(plain).await
        }
        other => other,
    }
}

impl TelegramChannel {
    async fn send_text_inner(
        &self,
        target: &OutboundTarget,
        text: &str,
        format: TextFormat,
    ) -> Result<SentMessage, SendError> {
        let account = self.account_for(target)?;
        let chat = chat_target(target)?;
        let chars = text.chars().count();
        if chars > TELEGRAM_MAX_MESSAGE_CHARS {
            return Err(SendError::Permanent(format!(
                "text is {chars} characters; Telegram allows {TELEGRAM_MAX_MESSAGE_CHARS}"
            )));
        }
        let mut body = json!({ "chat_id": chat.chat_id });
        // Telegram refuses message_thread_id 1 (a forum's General topic).
        if let Some(thread) = chat.thread.filter(|t| *t != GENERAL_TOPIC_ID) {
            body["message_thread_id"] = json!(thread);
        }
        if let Some(reply_to) = target.reply_to_message_id.as_deref() {
            body["reply_parameters"] = json!({
                "message_id": message_id(reply_to)?,
                "allow_sending_without_reply": true,
            });
        }
        if !account.link_preview {
            body["link_preview_options"] = json!({ "is_disabled": true });
        }
        let sent = with_plain_fallback(body, text, format, |b| {
            let api = account.api.clone();
            async move { api.send_message(&b).await }
        })
        .await
        .map_err(ApiError::into_send_error)?;
        account.mark_outbound();
        Ok(SentMessage {
            message_id: sent.message_id.to_string(),
        })
    }

    async fn edit_text_inner(
        &self,
        target: &OutboundTarget,
        message: &str,
        text: &str,
        format: TextFormat,
    ) -> Result<(), SendError> {
        let account = self.account_for(target)?;
        let chat = chat_target(target)?;
        let body = json!({ "chat_id": chat.chat_id, "message_id": message_id(message)? });
        let edited = with_plain_fallback(body, text, format, |b| {
            let api = account.api.clone();
            async move { api.edit_message_text(&b).await }
        })
        .await;
        match edited {
            Ok(_) => {}
            Err(error) if error.is_not_modified() => {}
            Err(error) => return Err(error.into_send_error()),
        }
        account.mark_outbound();
        Ok(())
    }
}

impl Channel for TelegramChannel {
    fn id(&self) -> &'static str {
        CHANNEL_ID
    }

    fn text_limits(&self) -> TextLimits {
        TextLimits {
            max_chars: TELEGRAM_CHUNK_CHARS,
            max_lines: None,
        }
    }

    fn start(&self, sink: Arc<dyn InboundSink>) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let mut running = self.running.lock().await;
            if running.is_some() {
                return Ok(());
            }
            let stop = CancellationToken::new();
            let tasks = self
                .accounts
                .values()
                .filter(|account| account.enabled)
                .map(|account| {
                    let poller = poll::Poller {
                        account: Arc::clone(account),
                        store: self.store.clone(),
                        sink: Arc::clone(&sink),
                        stop: stop.child_token(),
                    };
                    tokio::spawn(poller.run())
                })
                .collect();
            *running = Some(Running { stop, tasks });
            Ok(())
        })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let Some(running) = self.running.lock().await.take() else {
                return;
            };
            running.stop.cancel();
            for task in running.tasks {
                if let Err(error) = task.await {
                    log::error!("telegram poller ended abnormally: {error}");
                }
            }
            for account in self.accounts.values() {
                account.with_status(|s| s.connected = false);
            }
        })
    }

    fn status(&self) -> Vec<AccountStatus> {
        let mut all: Vec<AccountStatus> = self
            .accounts
            .values()
            .map(|account| account.with_status(|s| s.clone()))
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
        Box::pin(self.send_text_inner(target, text, format))
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
}

impl Typing for TelegramChannel {
    fn send_typing<'a>(
        &'a self,
        target: &'a OutboundTarget,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let chat = chat_target(target)?;
            // Typing shows in the General topic only with its id (upstream).
            account
                .api
                .send_typing(&chat.chat_id, chat.thread)
                .await
                .map_err(ApiError::into_send_error)?;
            Ok(())
        })
    }
}

impl EditMessage for TelegramChannel {
    fn edit_text<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
        text: &'a str,
        format: TextFormat,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(self.edit_text_inner(target, message_id, text, format))
    }
}

impl DeleteMessage for TelegramChannel {
    fn delete<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let chat = chat_target(target)?;
            account
                .api
                .delete_message(&chat.chat_id, message_id(message)?)
                .await
                .map_err(ApiError::into_send_error)?;
            Ok(())
        })
    }
}

impl React for TelegramChannel {
    fn react<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message: &'a str,
        emoji: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let chat = chat_target(target)?;
            account
                .api
                .set_reaction(&chat.chat_id, message_id(message)?, emoji)
                .await
                .map_err(ApiError::into_send_error)?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(to: &str, thread: Option<&str>) -> OutboundTarget {
        OutboundTarget {
            to: to.into(),
            thread_id: thread.map(str::to_string),
            ..OutboundTarget::default()
        }
    }

    #[test]
    fn targets_accept_upstream_spellings() {
        assert_eq!(
            chat_target(&target("telegram:group:-100123:topic:7", None)).expect("topic"),
            ChatTarget {
                chat_id: "-100123".into(),
                thread: Some(7)
            }
        );
        assert_eq!(
            chat_target(&target("42", Some("9"))).expect("plain"),
            ChatTarget {
                chat_id: "42".into(),
                thread: Some(9)
            }
        );
        assert_eq!(
            chat_target(&target("@news", None))
                .expect("username")
                .chat_id,
            "@news"
        );
        assert!(matches!(
            chat_target(&target("telegram:not-a-chat", None)),
            Err(SendError::Permanent(_))
        ));
    }
}
