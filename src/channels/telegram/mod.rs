//! The Telegram channel adapter (Bot API): one `TelegramChannel` serves every
//! configured bot account — long polling (`poll.rs`) or, with `webhookUrl`,
//! webhook mode (`webhook.rs`) per account, inbound translation
//! (`inbound.rs`), attachments (`media.rs`), and outbound (`send.rs`):
//! markdown sent as HTML (`format.rs`) with one plain-text retry when
//! Telegram cannot parse the markup, edits, deletes, typing and reactions.
//! Failures are classified into `SendError` (429 with `retry_after`,
//! 5xx/network transient, other 4xx permanent).
//!
//! This file owns configuration (accounts, tokens, limits), lifecycle and
//! status. Retries, chunking, access policy and routing are not this
//! adapter's job, and the bot token must never appear in a log line or
//! error text.

pub mod api;
pub mod format;
pub mod inbound;
pub mod media;
mod poll;
mod send;
mod upload;
pub mod webhook;
pub mod wire;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::channels::http_routes::HttpRoutes;
use crate::channels::{
    AccountStartError, AccountStatus, BoxFuture, Channel, ChunkMode, DeleteMessage, EditMessage,
    InboundSink, OutboundTarget, React, SendError, SentMessage, StartError, TextFormat, TextLimits,
    Typing,
};
use crate::config::schema::telegram::{TelegramAccountConfig, TelegramConfig};
use crate::config::Config;
use crate::store::Store;
use crate::system::clock::now_ms;

use api::{BotApi, DEFAULT_REQUEST_TIMEOUT_SECS};
use inbound::CHANNEL_ID;
use media::{mb_to_bytes, MediaLimits, DEFAULT_MEDIA_DIR_MAX_BYTES, DEFAULT_MEDIA_MAX_MB};
use webhook::{WebhookReceiver, WebhookSettings};

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
    /// The gateway's inbound routes: webhook accounts without their own
    /// `webhookHost`/`webhookPort` are served there (`None`: own listener).
    pub http_routes: Option<Arc<HttpRoutes>>,
}

impl TelegramOptions {
    /// Options for a loaded config, media under the system temp dir.
    pub fn for_config(config: &Config) -> TelegramOptions {
        TelegramOptions {
            media_dir: crate::channels::media::media_root().join(CHANNEL_ID),
            default_media_max_mb: config.agents.defaults.media_max_mb,
            media_dir_max_bytes: DEFAULT_MEDIA_DIR_MAX_BYTES,
            http: None,
            http_routes: None,
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
    /// Webhook mode when `webhookUrl` is set; long polling otherwise.
    webhook: Option<WebhookSettings>,
    status: Mutex<AccountStatus>,
}

impl Account {
    /// Changes the status and tells the gateway (`health` event).
    fn with_status<R>(&self, change: impl FnOnce(&mut AccountStatus) -> R) -> R {
        let result = change(&mut self.status.lock());
        crate::system::status::changed();
        result
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
    http_routes: Option<Arc<HttpRoutes>>,
}

impl Drop for TelegramChannel {
    /// Pollers and webhook receivers end with the adapter even without `stop`.
    fn drop(&mut self) {
        if let Some(running) = self.running.get_mut() {
            running.stop.cancel();
        }
        self.remove_routes();
    }
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
                Ok(Some(token)) => match build_account(&id, &account, &token, &http, &options) {
                    Ok(built) => {
                        accounts.insert(id, Arc::new(built));
                    }
                    Err(error) => {
                        unconfigured.push(unconfigured_status(&id, &account, Some(error)))
                    }
                },
                Ok(None) => unconfigured.push(unconfigured_status(&id, &account, None)),
                Err(error) => unconfigured.push(unconfigured_status(&id, &account, Some(error))),
            }
        }
        let default_account = crate::channels::account::default_account_id(
            config.default_account.as_deref(),
            &accounts,
        );
        TelegramChannel {
            accounts,
            unconfigured,
            default_account,
            store,
            running: tokio::sync::Mutex::new(None),
            http_routes: options.http_routes.clone(),
        }
    }

    /// The adapter for a loaded config (media under the system temp dir,
    /// `agents.defaults.mediaMaxMb` as the default cap); `None` when
    /// `channels.telegram` is absent.
    pub fn from_config(config: &Config, store: Store) -> Option<TelegramChannel> {
        let telegram = config.channels.telegram.as_ref()?;
        Some(TelegramChannel::new(
            telegram,
            store,
            TelegramOptions::for_config(config),
        ))
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

/// Webhook mode when `webhookUrl` is set: on the gateway's port unless
/// `webhookHost`/`webhookPort` ask for a listener of its own (or the
/// gateway offers no routes).
fn webhook_settings(config: &TelegramAccountConfig, on_gateway: bool) -> Option<WebhookSettings> {
    let url = config.webhook_url.as_deref().map(str::trim)?;
    let explicit = config.webhook_host.is_some() || config.webhook_port.is_some();
    (!url.is_empty()).then(|| WebhookSettings {
        url: url.to_string(),
        secret: config.webhook_secret.clone().unwrap_or_default(),
        host: config.effective_webhook_host().to_string(),
        port: config.effective_webhook_port(),
        path: config.effective_webhook_path().to_string(),
        own_listener: explicit || !on_gateway,
    })
}

impl TelegramChannel {
    /// The receiver of a webhook account; on the gateway's port its route
    /// is added now, so a path clash refuses the start.
    fn webhook_receiver(
        &self,
        account: &Arc<Account>,
        settings: &WebhookSettings,
        sink: &Arc<dyn InboundSink>,
        stop: &CancellationToken,
    ) -> Result<WebhookReceiver, AccountStartError> {
        let ready = Arc::new(std::sync::OnceLock::new());
        if let (false, Some(routes)) = (settings.own_listener, &self.http_routes) {
            let route = Arc::new(webhook::WebhookRoute {
                ready: Arc::clone(&ready),
            });
            routes
                .add(&settings.path, &webhook::route_owner(&account.id), route)
                .map_err(|error| AccountStartError::Route {
                    channel: CHANNEL_ID,
                    account_id: account.id.clone(),
                    error,
                })?;
        }
        Ok(WebhookReceiver {
            account: Arc::clone(account),
            settings: settings.clone(),
            sink: Arc::clone(sink),
            stop: stop.child_token(),
            ready,
        })
    }

    fn remove_routes(&self) {
        let Some(routes) = &self.http_routes else {
            return;
        };
        for account in self.accounts.values() {
            if let Some(settings) = account.webhook.as_ref().filter(|s| !s.own_listener) {
                routes.remove(&settings.path, &webhook::route_owner(&account.id));
            }
        }
    }
}

fn unconfigured_status(
    id: &str,
    config: &TelegramAccountConfig,
    error: Option<String>,
) -> AccountStatus {
    AccountStatus {
        account_id: id.to_string(),
        enabled: config.effective_enabled(),
        configured: false,
        last_error: error,
        ..AccountStatus::default()
    }
}

/// The HTTP client of an account: the shared one, or one through `proxy`.
fn account_http(
    config: &TelegramAccountConfig,
    shared: &reqwest::Client,
) -> Result<reqwest::Client, String> {
    let Some(proxy) = config
        .proxy
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty())
    else {
        return Ok(shared.clone());
    };
    let proxy = reqwest::Proxy::all(proxy)
        .map_err(|error| format!("proxy {proxy:?} is not a usable proxy URL: {error}"))?;
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("pincer/", env!("CARGO_PKG_VERSION")))
        .proxy(proxy)
        .build()
        .map_err(|error| format!("cannot build an HTTP client for the proxy: {error}"))
}

fn build_account(
    id: &str,
    config: &TelegramAccountConfig,
    token: &str,
    http: &reqwest::Client,
    options: &TelegramOptions,
) -> Result<Account, String> {
    let timeout_secs = config
        .timeout_seconds
        .map_or(DEFAULT_REQUEST_TIMEOUT_SECS, u64::from)
        .max(1);
    let max_mb = config
        .media_max_mb
        .or(options.default_media_max_mb)
        .unwrap_or(DEFAULT_MEDIA_MAX_MB);
    let http = account_http(config, http)?;
    Ok(Account {
        id: id.to_string(),
        api: BotApi::new(
            http,
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
        webhook: webhook_settings(config, options.http_routes.is_some()),
        status: Mutex::new(AccountStatus {
            account_id: id.to_string(),
            enabled: config.effective_enabled(),
            configured: true,
            ..AccountStatus::default()
        }),
    })
}

impl Channel for TelegramChannel {
    fn id(&self) -> &'static str {
        CHANNEL_ID
    }

    fn text_limits(&self) -> TextLimits {
        TextLimits {
            max_chars: TELEGRAM_MAX_MESSAGE_CHARS,
            max_lines: None,
            chunk_mode: ChunkMode::Length,
        }
    }

    fn start(&self, sink: Arc<dyn InboundSink>) -> BoxFuture<'_, Result<(), StartError>> {
        Box::pin(async move {
            let mut running = self.running.lock().await;
            if running.is_some() {
                return Ok(());
            }
            let stop = CancellationToken::new();
            let mut tasks = Vec::new();
            let mut refused = Vec::new();
            for account in self.accounts.values().filter(|a| a.enabled) {
                let task = match &account.webhook {
                    Some(settings) => {
                        match self.webhook_receiver(account, settings, &sink, &stop) {
                            Ok(receiver) => {
                                account.with_status(|s| s.running = true);
                                tokio::spawn(receiver.run())
                            }
                            Err(error) => {
                                account.mark_disconnected(error.to_string());
                                refused.push(error);
                                continue;
                            }
                        }
                    }
                    None => {
                        account.with_status(|s| s.running = true);
                        tokio::spawn(
                            poll::Poller {
                                account: Arc::clone(account),
                                store: self.store.clone(),
                                sink: Arc::clone(&sink),
                                stop: stop.child_token(),
                            }
                            .run(),
                        )
                    }
                };
                tasks.push(task);
            }
            *running = Some(Running { stop, tasks });
            if refused.is_empty() {
                Ok(())
            } else {
                Err(StartError { refused })
            }
        })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let Some(running) = self.running.lock().await.take() else {
                return;
            };
            running.stop.cancel();
            self.remove_routes();
            for task in running.tasks {
                if let Err(error) = task.await {
                    log::error!("telegram poller ended abnormally: {error}");
                }
            }
            for account in self.accounts.values() {
                account.with_status(|s| {
                    s.running = false;
                    s.connected = false;
                });
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

    fn media(&self) -> Option<&dyn crate::channels::SendMedia> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    fn config(json: serde_json::Value) -> Config {
        serde_json::from_value(json).expect("config")
    }

    #[test]
    fn media_cap_comes_from_the_account_else_agent_defaults_else_five_mb() {
        let (_dir, store) = temp_store();
        let cfg = config(serde_json::json!({
            "agents": { "defaults": { "mediaMaxMb": 2 } },
            "channels": { "telegram": { "accounts": {
                "a": { "botToken": "1:a" },
                "b": { "botToken": "2:b", "mediaMaxMb": 0.5 }
            } } }
        }));
        let channel = TelegramChannel::from_config(&cfg, store.clone()).expect("configured");
        assert_eq!(channel.accounts["a"].media.max_file_bytes, 2 * 1024 * 1024);
        assert_eq!(channel.accounts["b"].media.max_file_bytes, 512 * 1024);
        let bare = config(serde_json::json!({ "channels": { "telegram": { "botToken": "1:a" } } }));
        let channel = TelegramChannel::from_config(&bare, store.clone()).expect("configured");
        assert_eq!(
            channel.accounts["default"].media.max_file_bytes,
            5 * 1024 * 1024
        );
        assert!(TelegramChannel::from_config(&Config::default(), store).is_none());
    }

    #[test]
    fn webhook_mode_is_chosen_by_webhook_url_with_upstream_defaults() {
        let (_dir, store) = temp_store();
        let cfg = config(serde_json::json!({ "channels": { "telegram": {
            "botToken": "1:a", "webhookUrl": "https://x.example/hook", "webhookSecret": "s"
        } } }));
        let channel = TelegramChannel::from_config(&cfg, store).expect("configured");
        let webhook = channel.accounts["default"]
            .webhook
            .clone()
            .expect("webhook mode");
        assert_eq!(
            (webhook.host.as_str(), webhook.port, webhook.path.as_str()),
            ("127.0.0.1", 8787, "/telegram-webhook")
        );
    }
}
