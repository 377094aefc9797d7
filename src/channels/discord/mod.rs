//! The Discord channel: every configured bot account's gateway connection
//! (inbound, `gateway.rs`) and REST calls (outbound, `rest.rs`) behind the
//! [`Channel`] trait and its typing, edit, delete and reaction
//! capabilities. Discord renders markdown itself, so text goes out as is.
//!
//! It must not retry, split or shape replies (the hub does), nor gate or
//! route messages (the pipeline does); it only translates and classifies.

pub mod gateway;
pub mod payload;
pub mod rest;
pub mod translate;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::channels::account::{AccountState, AccountTasks};
use crate::channels::media::MediaDefaults;
use crate::channels::{
    AccountStatus, BoxFuture, Channel, ChunkMode, DeleteMessage, EditMessage, InboundSink,
    OutboundTarget, React, SendError, SentMessage, StartError, TextFormat, TextLimits, Typing,
};
use crate::config::schema::channels::DEFAULT_ACCOUNT_ID;
use crate::config::schema::discord::{AllowBots, DiscordAccountConfig, DiscordConfig};
use gateway::GatewayAccount;
use parking_lot::Mutex;
use rest::DiscordRest;
use translate::BotIdentity;

pub use translate::CHANNEL_ID;

/// Discord's hard limit on message content, in characters.
pub const DISCORD_MAX_CHARS: usize = 2_000;
/// Lines per message before Discord clients fold it.
pub const DISCORD_MAX_LINES: usize = 17;
/// DM channel ids remembered per account; cleared when full.
const MAX_CACHED_DM_CHANNELS: usize = 1_000;

/// Errors building the channel from config.
#[derive(Debug, thiserror::Error)]
pub enum DiscordError {
    #[error("channels.discord account {account}: {reason}")]
    Account { account: String, reason: String },
}

/// One configured account.
struct Account {
    gateway: GatewayAccount,
    /// `None`: the account has no token (not configured) or is disabled.
    rest: Option<DiscordRest>,
    shared: Arc<AccountState<BotIdentity>>,
    dm_channels: Mutex<HashMap<String, String>>,
}

/// The Discord adapter for all accounts of `channels.discord`.
pub struct DiscordChannel {
    accounts: BTreeMap<String, Account>,
    default_account: String,
    tasks: AccountTasks,
}

impl DiscordChannel {
    /// Every account of `channels.discord`; accounts without a token or
    /// with `enabled: false` are listed as not configured. REST calls go
    /// through `http` (the process's shared client and connection pool).
    pub fn from_config(
        config: &DiscordConfig,
        http: &reqwest::Client,
    ) -> Result<DiscordChannel, DiscordError> {
        DiscordChannel::with_media(config, http, &MediaDefaults::default())
    }

    /// As `from_config`, attachments kept as `media` says (the media root
    /// and `agents.defaults.mediaMaxMb`).
    pub fn with_media(
        config: &DiscordConfig,
        http: &reqwest::Client,
        media: &MediaDefaults,
    ) -> Result<DiscordChannel, DiscordError> {
        let mut accounts = BTreeMap::new();
        for account_id in config.account_ids() {
            let settings = config.account(&account_id).unwrap_or_default();
            let account = Account::new(&account_id, &settings, http, media)?;
            accounts.insert(account_id, account);
        }
        let default_account = config
            .default_account
            .clone()
            .filter(|id| accounts.contains_key(id))
            .or_else(|| accounts.keys().next().cloned())
            .unwrap_or_else(|| DEFAULT_ACCOUNT_ID.to_string());
        Ok(DiscordChannel {
            accounts,
            default_account,
            tasks: AccountTasks::default(),
        })
    }

    /// Whether the account's gateway task is alive (false after a fatal
    /// close such as 4004, or after `stop`).
    pub fn is_running(&self, account_id: &str) -> bool {
        self.accounts
            .get(account_id)
            .is_some_and(|a| a.shared.is_running())
    }

    fn account(&self, account_id: &str) -> Result<(&Account, &DiscordRest), SendError> {
        let id = if account_id.is_empty() {
            self.default_account.as_str()
        } else {
            account_id
        };
        let account = self
            .accounts
            .get(id)
            .ok_or_else(|| SendError::NoAccount(id.to_string()))?;
        let rest = account
            .rest
            .as_ref()
            .ok_or_else(|| SendError::NoAccount(id.to_string()))?;
        Ok((account, rest))
    }

    /// The channel a target names: its thread, `channel:ID`, a bare id, or
    /// the DM channel of `user:ID` (opened once, then remembered).
    async fn channel_id(&self, target: &OutboundTarget) -> Result<String, SendError> {
        if let Some(thread) = target.thread_id.as_deref().filter(|t| !t.is_empty()) {
            return Ok(thread.to_string());
        }
        let to = target.to.trim();
        let to = to.strip_prefix("discord:").unwrap_or(to);
        if let Some(user_id) = to.strip_prefix("user:") {
            let (account, rest) = self.account(&target.account_id)?;
            if let Some(id) = account.dm_channels.lock().get(user_id) {
                return Ok(id.clone());
            }
            let channel_id = rest.open_dm(user_id).await?;
            let mut cache = account.dm_channels.lock();
            if cache.len() >= MAX_CACHED_DM_CHANNELS {
                cache.clear();
            }
            cache.insert(user_id.to_string(), channel_id.clone());
            return Ok(channel_id);
        }
        let id = to.strip_prefix("channel:").unwrap_or(to);
        if id.is_empty() {
            return Err(SendError::Permanent("empty Discord target".into()));
        }
        Ok(id.to_string())
    }
}

impl Account {
    fn new(
        account_id: &str,
        settings: &DiscordAccountConfig,
        http: &reqwest::Client,
        media: &MediaDefaults,
    ) -> Result<Account, DiscordError> {
        let token = settings
            .token
            .clone()
            .unwrap_or_default()
            .trim()
            .to_string();
        let configured = !token.is_empty() && settings.effective_enabled();
        let rest = if configured {
            let rest = DiscordRest::new(&settings.effective_api_base_url(), &token, http.clone())
                .map_err(|reason| DiscordError::Account {
                account: account_id.to_string(),
                reason,
            })?;
            Some(rest)
        } else {
            None
        };
        let shared = Arc::new(AccountState::new(
            account_id,
            settings.effective_enabled(),
            configured,
        ));
        Ok(Account {
            gateway: GatewayAccount {
                account_id: account_id.to_string(),
                token,
                gateway_url: settings
                    .gateway_url
                    .clone()
                    .filter(|u| !u.trim().is_empty()),
                allow_bots: settings.allow_bots.unwrap_or(AllowBots::Never),
                intents: payload::intents::ASSISTANT,
                media: media.limits(CHANNEL_ID, settings.media_max_mb),
            },
            rest,
            shared,
            dm_channels: Mutex::new(HashMap::new()),
        })
    }
}

impl Channel for DiscordChannel {
    fn id(&self) -> &'static str {
        CHANNEL_ID
    }

    fn text_limits(&self) -> TextLimits {
        TextLimits {
            max_chars: DISCORD_MAX_CHARS,
            max_lines: Some(DISCORD_MAX_LINES),
            chunk_mode: ChunkMode::Length,
        }
    }

    fn start(&self, sink: Arc<dyn InboundSink>) -> BoxFuture<'_, Result<(), StartError>> {
        Box::pin(async move {
            let cancel = self.tasks.token();
            for account in self.accounts.values() {
                let Some(rest) = account.rest.clone() else {
                    continue;
                };
                account.shared.set_running(true);
                self.tasks.spawn(gateway::run_account(
                    account.gateway.clone(),
                    rest,
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
        _format: TextFormat,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>> {
        Box::pin(async move {
            let (account, rest) = self.account(&target.account_id)?;
            let channel_id = self.channel_id(target).await?;
            let reply_to = target.reply_to_message_id.as_deref();
            let message_id = rest.create_message(&channel_id, text, reply_to).await?;
            account.shared.outbound_now();
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
    fn media(&self) -> Option<&dyn crate::channels::SendMedia> {
        Some(self)
    }
}

/// Discord's upload cap for a bot outside boosted servers (10 MiB).
pub const DISCORD_MAX_UPLOAD_BYTES: u64 = 10 * 1024 * 1024;

impl crate::channels::SendMedia for DiscordChannel {
    fn max_upload_bytes(&self, _kind: crate::channels::UploadKind) -> u64 {
        DISCORD_MAX_UPLOAD_BYTES
    }

    fn max_caption_chars(&self) -> usize {
        DISCORD_MAX_CHARS
    }

    fn send_media<'a>(
        &'a self,
        target: &'a OutboundTarget,
        upload: crate::channels::Upload<'a>,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>> {
        Box::pin(async move {
            let (account, rest) = self.account(&target.account_id)?;
            let channel_id = self.channel_id(target).await?;
            let reply_to = target.reply_to_message_id.as_deref();
            let message_id = rest
                .create_message_with_file(&channel_id, upload.caption, reply_to, &upload)
                .await?;
            account.shared.outbound_now();
            Ok(SentMessage { message_id })
        })
    }
}

impl Typing for DiscordChannel {
    fn send_typing<'a>(
        &'a self,
        target: &'a OutboundTarget,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let (_, rest) = self.account(&target.account_id)?;
            rest.trigger_typing(&self.channel_id(target).await?).await
        })
    }
}

impl EditMessage for DiscordChannel {
    fn edit_text<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
        text: &'a str,
        _format: TextFormat,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let (_, rest) = self.account(&target.account_id)?;
            let channel_id = self.channel_id(target).await?;
            rest.edit_message(&channel_id, message_id, text).await
        })
    }
}

impl DeleteMessage for DiscordChannel {
    fn delete<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let (_, rest) = self.account(&target.account_id)?;
            let channel_id = self.channel_id(target).await?;
            rest.delete_message(&channel_id, message_id).await
        })
    }
}

impl React for DiscordChannel {
    fn react<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
        emoji: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let (_, rest) = self.account(&target.account_id)?;
            let channel_id = self.channel_id(target).await?;
            rest.add_reaction(&channel_id, message_id, emoji).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_without_token_are_listed_but_not_configured() {
        let config: DiscordConfig = serde_json::from_str(
            r#"{"accounts":{"main":{"token":"t"},"spare":{},"off":{"token":"t","enabled":false}}}"#,
        )
        .expect("config");
        let channel =
            DiscordChannel::from_config(&config, &reqwest::Client::new()).expect("channel");
        let configured: Vec<(String, bool)> = channel
            .status()
            .into_iter()
            .map(|s| (s.account_id, s.configured))
            .collect();
        assert_eq!(
            configured,
            vec![
                ("main".into(), true),
                ("off".into(), false),
                ("spare".into(), false)
            ]
        );
        assert_eq!(channel.text_limits().max_lines, Some(17));
    }

    #[tokio::test]
    async fn sending_through_an_unconfigured_account_is_no_account() {
        let config: DiscordConfig = serde_json::from_str(r#"{}"#).expect("config");
        let channel =
            DiscordChannel::from_config(&config, &reqwest::Client::new()).expect("channel");
        let target = OutboundTarget {
            to: "channel:1".into(),
            ..OutboundTarget::default()
        };
        let err = channel
            .send_text(&target, "hi", TextFormat::Plain)
            .await
            .expect_err("no token");
        assert_eq!(err, SendError::NoAccount("default".into()));
    }
}
