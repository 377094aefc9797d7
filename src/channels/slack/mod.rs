//! The Slack channel: every configured app account's Socket Mode
//! connection (inbound, `socket.rs`) and Web API calls (outbound,
//! `web.rs`) behind the [`Channel`] trait and its edit, delete and reaction
//! capabilities. Markdown from the model is sent as mrkdwn (`mrkdwn.rs`).
//! Slack has no typing indicator for bots, so [`Channel::typing`] is `None`.
//!
//! It must not retry, split or shape replies (the hub does), nor gate or
//! route messages (the pipeline does).

pub mod mrkdwn;
pub mod socket;
pub mod translate;
pub mod web;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::channels::discord::account::{AccountState, AccountTasks};
use crate::channels::media::MediaDefaults;
use crate::channels::{
    AccountStatus, BoxFuture, Channel, DeleteMessage, EditMessage, InboundSink, OutboundTarget,
    React, SendError, SentMessage, TextFormat, TextLimits,
};
use crate::config::schema::channels::DEFAULT_ACCOUNT_ID;
use crate::config::schema::slack::{SlackAccountConfig, SlackConfig, SlackMode};
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
    shared: Arc<AccountState<SlackIdentity>>,
    dm_channels: Mutex<HashMap<String, String>>,
}

/// The Slack adapter for all accounts of `channels.slack`.
pub struct SlackChannel {
    accounts: BTreeMap<String, Account>,
    default_account: String,
    tasks: AccountTasks,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
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
        })
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
            if let Some(channel) = lock(&account.dm_channels).get(user) {
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
    let mut cache = lock(&account.dm_channels);
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
        let shared = Arc::new(AccountState::new(account_id, listens));
        shared.update(|s| {
            if web.is_some() && !socket_mode {
                s.last_error =
                    Some("HTTP events mode is not supported yet; use Socket Mode".into());
            }
        });
        Ok(Account {
            socket: SocketAccount {
                account_id: account_id.to_string(),
                allow_bots: settings.allow_bots.unwrap_or(false),
                media: media.limits(CHANNEL_ID, settings.media_max_mb),
            },
            web,
            listens,
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
        }
    }

    fn start(&self, sink: Arc<dyn InboundSink>) -> BoxFuture<'_, Result<(), String>> {
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
            Ok(())
        })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.tasks.stop())
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
            let thread = target.thread_id.as_deref().filter(|t| !t.is_empty());
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
}
