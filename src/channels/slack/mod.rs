//! The Slack channel: every configured app account's Socket Mode
//! connection (inbound, `socket.rs`) or, with `mode: "http"`, its Events
//! API request URL on the gateway's port (`events_http.rs`, added to the
//! gateway's HTTP routes at start and removed at stop), and Web API calls
//! (outbound, `web.rs`) behind the [`Channel`] trait and its edit, delete
//! and reaction capabilities. Markdown from the model is sent as mrkdwn (`mrkdwn.rs`).
//! Slack has no typing indicator for bots, so [`Channel::typing`] is `None`.
//!
//! It must not retry, split or shape replies (the hub does), nor gate or
//! route messages (the pipeline does).

pub mod events_http;
pub mod mrkdwn;
pub mod socket;
pub mod translate;
mod upload;
pub mod web;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::channels::account::{AccountState, AccountTasks};
use crate::channels::http_routes::HttpRoutes;
use crate::channels::media::MediaDefaults;
use crate::channels::{
    AccountStartError, AccountStatus, BoxFuture, Channel, ChunkMode, DeleteMessage, EditMessage,
    InboundSink, OutboundTarget, React, SendError, SentMessage, StartError, TextFormat, TextLimits,
};
use crate::config::schema::channels::DEFAULT_ACCOUNT_ID;
use crate::config::schema::slack::{SlackAccountConfig, SlackConfig, SlackMode};
use events_http::{EventsAccount, EventsRoute};
use parking_lot::Mutex;
use socket::SocketAccount;
use web::{SlackIdentity, SlackWeb};

pub use translate::CHANNEL_ID;

/// Slack's hard cap on a message's text (longer texts are truncated), in
/// characters; an account's `textChunkLimit` (default 8,000) is clamped to it.
pub const SLACK_MAX_MESSAGE_CHARS: usize = 40_000;

/// DM channel ids remembered per account; cleared when full.
const MAX_CACHED_DM_CHANNELS: usize = 1_000;

/// Errors building the channel from config.
#[derive(Debug, thiserror::Error)]
pub enum SlackError {
    #[error("channels.slack account {account}: {reason}")]
    Account { account: String, reason: String },
}

struct Account {
    socket: SocketAccount,
    /// `None`: no bot token, or disabled.
    web: Option<SlackWeb>,
    /// Socket Mode runs (app token present, `mode: socket`).
    listens: bool,
    /// HTTP mode (bot token and signing secret present, `mode: http`):
    /// the request URL's path and what its route needs.
    events: Option<(String, Arc<EventsAccount>)>,
    shared: Arc<AccountState<SlackIdentity>>,
    dm_channels: Mutex<HashMap<String, String>>,
}

/// The Slack adapter for all accounts of `channels.slack`.
pub struct SlackChannel {
    accounts: BTreeMap<String, Account>,
    default_account: String,
    tasks: AccountTasks,
    /// The gateway's inbound routes (HTTP-mode accounts are served there).
    http_routes: Option<Arc<HttpRoutes>>,
}

impl Drop for SlackChannel {
    /// Tasks and routes end with the adapter even without `stop`.
    fn drop(&mut self) {
        self.tasks.token().cancel();
        self.remove_routes();
    }
}

impl SlackChannel {
    /// Every account of `channels.slack`; an account needs `botToken` to
    /// send and, in socket mode, `appToken` to receive.
    /// Web API calls go through `http` (the process's shared client).
    pub fn from_config(
        config: &SlackConfig,
        http: &reqwest::Client,
    ) -> Result<SlackChannel, SlackError> {
        SlackChannel::with_media(config, http, &MediaDefaults::default())
    }

    /// As `from_config`, shared files kept as `media` says (the media root
    /// and `agents.defaults.mediaMaxMb`).
    pub fn with_media(
        config: &SlackConfig,
        http: &reqwest::Client,
        media: &MediaDefaults,
    ) -> Result<SlackChannel, SlackError> {
        let mut accounts = BTreeMap::new();
        for account_id in config.account_ids() {
            let settings = config.account(&account_id).unwrap_or_default();
            accounts.insert(
                account_id.clone(),
                Account::new(&account_id, &settings, http, media)?,
            );
        }
        let default_account = config
            .default_account
            .clone()
            .filter(|id| accounts.contains_key(id))
            .or_else(|| accounts.keys().next().cloned())
            .unwrap_or_else(|| DEFAULT_ACCOUNT_ID.to_string());
        Ok(SlackChannel {
            accounts,
            default_account,
            tasks: AccountTasks::default(),
            http_routes: None,
        })
    }

    /// HTTP-mode accounts are served on these routes (the gateway's port);
    /// without them such accounts cannot start.
    pub fn with_http_routes(mut self, routes: Arc<HttpRoutes>) -> SlackChannel {
        self.http_routes = Some(routes);
        self
    }

    /// Adds every HTTP-mode account's route and starts its identity task;
    /// the errors name the account and the path.
    fn start_events(&self, sink: &Arc<dyn InboundSink>) -> Vec<AccountStartError> {
        let mut refused = Vec::new();
        for (id, account) in &self.accounts {
            let Some((path, events)) = &account.events else {
                continue;
            };
            let Some(routes) = &self.http_routes else {
                let error = AccountStartError::NoHttpServer {
                    channel: CHANNEL_ID,
                    account_id: id.clone(),
                };
                account.shared.disconnected(error.to_string());
                refused.push(error);
                continue;
            };
            let route = Arc::new(EventsRoute {
                account: events.clone(),
                sink: sink.clone(),
            });
            if let Err(e) = routes.add(path, &events_http::route_owner(id), route) {
                let error = AccountStartError::Route {
                    channel: CHANNEL_ID,
                    account_id: id.clone(),
                    error: e,
                };
                account.shared.disconnected(error.to_string());
                refused.push(error);
                continue;
            }
            account.shared.set_running(true);
            let cancel = self.tasks.token().child_token();
            self.tasks
                .spawn(events_http::run_account(events.clone(), cancel));
        }
        refused
    }

    fn remove_routes(&self) {
        let Some(routes) = &self.http_routes else {
            return;
        };
        for (id, account) in &self.accounts {
            if let Some((path, _)) = &account.events {
                routes.remove(path, &events_http::route_owner(id));
            }
        }
    }

    /// Whether the account's Socket Mode task is alive.
    pub fn is_running(&self, account_id: &str) -> bool {
        self.accounts
            .get(account_id)
            .is_some_and(|a| a.shared.is_running())
    }

    fn account(&self, account_id: &str) -> Result<(&Account, &SlackWeb), SendError> {
        let id = if account_id.is_empty() {
            self.default_account.as_str()
        } else {
            account_id
        };
        let account = self
            .accounts
            .get(id)
            .ok_or_else(|| SendError::NoAccount(id.to_string()))?;
        let web = account
            .web
            .as_ref()
            .ok_or_else(|| SendError::NoAccount(id.to_string()))?;
        Ok((account, web))
    }

    /// The conversation a target names: `channel:C…`, a bare id, or
    /// `user:U…` (posting accepts a user id; edits need the DM channel,
    /// remembered from posts or opened with `conversations.open`).
    async fn conversation(
        &self,
        target: &OutboundTarget,
        for_post: bool,
    ) -> Result<String, SendError> {
        let to = target.to.trim();
        let to = to.strip_prefix("slack:").unwrap_or(to);
        if let Some(user) = to.strip_prefix("user:") {
            if for_post {
                return Ok(user.to_string());
            }
            let (account, web) = self.account(&target.account_id)?;
            if let Some(channel) = account.dm_channels.lock().get(user) {
                return Ok(channel.clone());
            }
            let channel = web.open_dm(user).await?;
            remember_dm(account, user, &channel);
            return Ok(channel);
        }
        let id = to.strip_prefix("channel:").unwrap_or(to);
        if id.is_empty() {
            return Err(SendError::Permanent("empty Slack target".into()));
        }
        Ok(id.to_string())
    }
}

fn remember_dm(account: &Account, user: &str, channel: &str) {
    let mut cache = account.dm_channels.lock();
    if cache.len() >= MAX_CACHED_DM_CHANNELS {
        cache.clear();
    }
    cache.insert(user.to_string(), channel.to_string());
}

impl Account {
    fn new(
        account_id: &str,
        settings: &SlackAccountConfig,
        http: &reqwest::Client,
        media: &MediaDefaults,
    ) -> Result<Account, SlackError> {
        let token = |t: &Option<String>| t.clone().unwrap_or_default().trim().to_string();
        let (bot_token, app_token) = (token(&settings.bot_token), token(&settings.app_token));
        let enabled = settings.effective_enabled();
        let web = if enabled && !bot_token.is_empty() {
            let web = SlackWeb::new(
                &settings.effective_api_url(),
                &bot_token,
                &app_token,
                http.clone(),
            )
            .map_err(|reason| SlackError::Account {
                account: account_id.to_string(),
                reason,
            })?;
            Some(web)
        } else {
            None
        };
        let socket_mode = settings.effective_mode() == SlackMode::Socket;
        let listens = web.is_some() && socket_mode && !app_token.is_empty();
        let secret = settings.effective_signing_secret();
        let http_ready = web.is_some() && !socket_mode && secret.is_some();
        let shared = Arc::new(AccountState::new(
            account_id,
            enabled,
            listens || http_ready,
        ));
        if web.is_some() && !socket_mode && secret.is_none() {
            shared.update(|s| {
                s.last_error = Some("HTTP events mode needs a signingSecret".into());
            });
        }
        let socket = SocketAccount {
            account_id: account_id.to_string(),
            allow_bots: settings.allow_bots.unwrap_or(false),
            media: media.limits(CHANNEL_ID, settings.media_max_mb),
        };
        let events = match (&web, secret) {
            (Some(web), Some(signing_secret)) if !socket_mode => {
                let account = EventsAccount {
                    socket: socket.clone(),
                    signing_secret,
                    web: web.clone(),
                    shared: shared.clone(),
                };
                Some((settings.effective_webhook_path(), Arc::new(account)))
            }
            _ => None,
        };
        Ok(Account {
            socket,
            web,
            listens,
            events,
            shared,
            dm_channels: Mutex::new(HashMap::new()),
        })
    }
}

/// The text and `mrkdwn` flag for a format.
fn slack_text(text: &str, format: TextFormat) -> (String, bool) {
    match format {
        TextFormat::Markdown => (mrkdwn::markdown_to_mrkdwn(text), true),
        TextFormat::Plain => (mrkdwn::escape(text), false),
    }
}

/// Reaction names: `:eyes:` → `eyes`, a few common emoji → their names.
fn reaction_name(emoji: &str) -> String {
    let trimmed = emoji.trim().trim_matches(':');
    let named = match trimmed {
        "👀" => "eyes",
        "👍" => "+1",
        "👎" => "-1",
        "✅" => "white_check_mark",
        "❌" => "x",
        "🤔" => "thinking_face",
        "⏳" => "hourglass_flowing_sand",
        "🎉" => "tada",
        "❤️" | "❤" => "heart",
        other => other,
    };
    named.to_string()
}

impl Channel for SlackChannel {
    fn id(&self) -> &'static str {
        CHANNEL_ID
    }

    fn text_limits(&self) -> TextLimits {
        TextLimits {
            max_chars: SLACK_MAX_MESSAGE_CHARS,
            max_lines: None,
            chunk_mode: ChunkMode::Length,
        }
    }

    fn start(&self, sink: Arc<dyn InboundSink>) -> BoxFuture<'_, Result<(), StartError>> {
        Box::pin(async move {
            let cancel = self.tasks.token();
            for account in self.accounts.values().filter(|a| a.listens) {
                let Some(web) = account.web.clone() else {
                    continue;
                };
                account.shared.set_running(true);
                self.tasks.spawn(socket::run_account(
                    account.socket.clone(),
                    web,
                    sink.clone(),
                    account.shared.clone(),
                    cancel.child_token(),
                ));
            }
            let refused = self.start_events(&sink);
            if refused.is_empty() {
                Ok(())
            } else {
                Err(StartError { refused })
            }
        })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.remove_routes();
            self.tasks.stop().await;
        })
    }

    fn status(&self) -> Vec<AccountStatus> {
        self.accounts.values().map(|a| a.shared.status()).collect()
    }

    fn send_text<'a>(
        &'a self,
        target: &'a OutboundTarget,
        text: &'a str,
        format: TextFormat,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>> {
        Box::pin(async move {
            let (account, web) = self.account(&target.account_id)?;
            let channel = self.conversation(target, true).await?;
            let (text, mrkdwn) = slack_text(text, format);
            // A quoted message is threaded under (Slack has no quote):
            // its ts starts the thread when the message is not in one.
            let thread = target
                .thread_id
                .as_deref()
                .or(target.reply_to_message_id.as_deref())
                .filter(|t| !t.is_empty());
            let posted = web.post_message(&channel, &text, thread, mrkdwn).await?;
            if let Some(user) = target.to.trim().strip_prefix("user:") {
                remember_dm(account, user, &posted.channel);
            }
            account.shared.outbound_now();
            Ok(SentMessage {
                message_id: posted.ts,
            })
        })
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

impl EditMessage for SlackChannel {
    fn edit_text<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
        text: &'a str,
        format: TextFormat,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let (_, web) = self.account(&target.account_id)?;
            let channel = self.conversation(target, false).await?;
            let (text, _) = slack_text(text, format);
            web.update_message(&channel, message_id, &text).await
        })
    }
}

impl DeleteMessage for SlackChannel {
    fn delete<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let (_, web) = self.account(&target.account_id)?;
            let channel = self.conversation(target, false).await?;
            web.delete_message(&channel, message_id).await
        })
    }
}

impl React for SlackChannel {
    fn react<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
        emoji: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let (_, web) = self.account(&target.account_id)?;
            let channel = self.conversation(target, false).await?;
            web.add_reaction(&channel, message_id, &reaction_name(emoji))
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reaction_names_drop_colons_and_name_common_emoji() {
        assert_eq!(reaction_name(":eyes:"), "eyes");
        assert_eq!(reaction_name("👍"), "+1");
        assert_eq!(reaction_name("custom_one"), "custom_one");
    }

    #[test]
    fn accounts_need_both_tokens_to_listen() {
        let config: SlackConfig = serde_json::from_str(
            r#"{"accounts":{"full":{"botToken":"xoxb-1","appToken":"xapp-1"},"sendonly":{"botToken":"xoxb-2"}}}"#,
        )
        .expect("config");
        let channel = SlackChannel::from_config(&config, &reqwest::Client::new()).expect("channel");
        let configured: Vec<(String, bool)> = channel
            .status()
            .into_iter()
            .map(|s| (s.account_id, s.configured))
            .collect();
        assert_eq!(
            configured,
            vec![("full".into(), true), ("sendonly".into(), false)]
        );
        assert_eq!(channel.text_limits().max_chars, SLACK_MAX_MESSAGE_CHARS);
        assert!(channel.typing().is_none());
    }

    struct Refusing;

    impl InboundSink for Refusing {
        fn deliver(
            &self,
            _event: crate::channels::InboundEvent,
        ) -> BoxFuture<'_, Result<(), crate::channels::InboundError>> {
            Box::pin(async { Err(crate::channels::InboundError::NoAdapter("slack".into())) })
        }
    }

    fn http_channel(accounts: &str, routes: &Arc<HttpRoutes>) -> SlackChannel {
        let config: SlackConfig = serde_json::from_str(accounts).expect("config");
        // Nothing listens there: the identity task only retries.
        let http = reqwest::Client::new();
        SlackChannel::from_config(&config, &http)
            .expect("channel")
            .with_http_routes(routes.clone())
    }

    #[tokio::test]
    async fn http_mode_serves_its_path_from_start_to_stop() {
        let routes = Arc::new(HttpRoutes::new(&["/health"]));
        let channel = http_channel(
            r#"{"mode":"http","botToken":"xoxb-1","signingSecret":"s","apiUrl":"http://127.0.0.1:9/api",
                "accounts":{"home":{},"work":{"webhookPath":"work/events"}}}"#,
            &routes,
        );
        assert!(channel.status().iter().all(|s| s.configured));
        assert!(routes.paths().is_empty(), "no route before start");
        channel.start(Arc::new(Refusing)).await.expect("started");
        assert_eq!(routes.paths(), vec!["/slack/events", "/work/events"]);
        channel.stop().await;
        assert!(routes.paths().is_empty(), "routes removed at stop");
    }

    #[tokio::test]
    async fn a_taken_webhook_path_refuses_the_start_naming_it() {
        let routes = Arc::new(HttpRoutes::new(&["/health"]));
        let channel = http_channel(
            r#"{"mode":"http","botToken":"xoxb-1","signingSecret":"s","apiUrl":"http://127.0.0.1:9/api",
                "accounts":{"a":{},"b":{},"c":{"webhookPath":"/health"}}}"#,
            &routes,
        );
        let error = channel
            .start(Arc::new(Refusing))
            .await
            .expect_err("clash refused")
            .to_string();
        assert!(
            error.contains("slack account b: webhookPath: HTTP path /slack/events is already served for slack account a"),
            "{error}"
        );
        assert!(error.contains("slack account c: webhookPath: HTTP path /health is one of the gateway's own routes"), "{error}");
        assert_eq!(routes.paths(), vec!["/slack/events"]);
        let b = channel.status().into_iter().find(|s| s.account_id == "b");
        assert!(b
            .and_then(|s| s.last_error)
            .is_some_and(|e| e.contains("/slack/events")));
        drop(channel);
        assert!(routes.paths().is_empty(), "the adapter's routes go with it");
    }

    #[test]
    fn http_mode_without_a_signing_secret_is_not_configured() {
        let config: SlackConfig =
            serde_json::from_str(r#"{"mode":"http","botToken":"xoxb-1"}"#).expect("config");
        let channel = SlackChannel::from_config(&config, &reqwest::Client::new()).expect("channel");
        let status = channel.status().remove(0);
        assert!(!status.configured);
        assert_eq!(
            status.last_error.as_deref(),
            Some("HTTP events mode needs a signingSecret")
        );
    }
}
