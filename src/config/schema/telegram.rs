//! `channels.telegram`: bot token, DM and group gating, chunking and
//! streaming preview, retries, polling vs webhook, per-account overrides.
//!
//! Names and defaults follow OpenClaw's `TelegramAccountSchema`
//! (text chunks of 4000, `dmPolicy` pairing, `groupPolicy` allowlist,
//! webhook on 127.0.0.1:8787 at `/telegram-webhook`, streaming partial).
//! Allow-list rules are in `validate.rs`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::channels::{channel_accounts, opt_streaming, StreamingConfig};
use super::common::{ChunkMode, DmConfig, DmPolicy, GroupPolicy, ReplyToMode, RetryConfig};
use crate::config::de;

/// Outbound text chunk size (`TELEGRAM_TEXT_CHUNK_LIMIT`).
pub const DEFAULT_TELEGRAM_TEXT_CHUNK_LIMIT: u32 = 4000;
pub const DEFAULT_TELEGRAM_WEBHOOK_PATH: &str = "/telegram-webhook";
pub const DEFAULT_TELEGRAM_WEBHOOK_HOST: &str = "127.0.0.1";
pub const DEFAULT_TELEGRAM_WEBHOOK_PORT: u16 = 8787;

channel_accounts! {
    /// One Telegram bot account (every key optional; see `effective_*`).
    account TelegramAccountConfig;
    /// `channels.telegram`: the default account's keys plus named accounts.
    channel TelegramConfig;
    fields {
        name: String,
        enabled: bool,
        bot_token: String,
        /// File holding the bot token.
        token_file: String,
        dm_policy: DmPolicy,
        #[serde(deserialize_with = "de::opt_id_list")]
        allow_from: Vec<String>,
        #[serde(deserialize_with = "de::opt_id_list")]
        group_allow_from: Vec<String>,
        group_policy: GroupPolicy,
        groups: BTreeMap<String, TelegramGroupConfig>,
        #[serde(deserialize_with = "de::opt_id")]
        default_to: String,
        history_limit: u32,
        dm_history_limit: u32,
        dms: BTreeMap<String, DmConfig>,
        text_chunk_limit: u32,
        chunk_mode: ChunkMode,
        #[serde(deserialize_with = "opt_streaming")]
        streaming: StreamingConfig,
        media_max_mb: f64,
        timeout_seconds: u32,
        retry: RetryConfig,
        proxy: String,
        reply_to_mode: ReplyToMode,
        webhook_url: String,
        webhook_secret: String,
        webhook_path: String,
        webhook_host: String,
        #[serde(deserialize_with = "de::opt_port")]
        webhook_port: u16,
        /// Bot API root for a self-hosted Bot API server.
        api_root: String,
        link_preview: bool,
        ack_reaction: String,
        /// Spoken replies for this channel / account, over `tts`.
        tts: super::tts::TtsConfig,
    }
}

impl TelegramAccountConfig {
    /// Telegram previews by default (upstream `resolveTelegramPreviewStreamMode`).
    pub const DEFAULT_STREAMING_MODE: super::channels::StreamingMode =
        super::channels::StreamingMode::Partial;

    /// How outbound text is split: `streaming.chunkMode`, else the flat
    /// `chunkMode` upstream moved there, else by length.
    pub fn effective_chunk_mode(&self) -> ChunkMode {
        self.streaming_chunk_mode()
            .or(self.chunk_mode)
            .unwrap_or_default()
    }

    pub fn effective_dm_policy(&self) -> DmPolicy {
        self.dm_policy.unwrap_or(DmPolicy::Pairing)
    }

    pub fn effective_group_policy(&self) -> GroupPolicy {
        self.group_policy.unwrap_or(GroupPolicy::Allowlist)
    }

    pub fn effective_text_chunk_limit(&self) -> u32 {
        self.text_chunk_limit
            .unwrap_or(DEFAULT_TELEGRAM_TEXT_CHUNK_LIMIT)
    }

    pub fn effective_retry(&self) -> RetryConfig {
        self.retry.clone().unwrap_or_default()
    }

    /// Group senders allowed: `groupAllowFrom`, else `allowFrom`.
    pub fn effective_group_allow_from(&self) -> Vec<String> {
        self.group_allow_from
            .clone()
            .or_else(|| self.allow_from.clone())
            .unwrap_or_default()
    }

    pub fn effective_webhook_path(&self) -> &str {
        self.webhook_path
            .as_deref()
            .unwrap_or(DEFAULT_TELEGRAM_WEBHOOK_PATH)
    }

    pub fn effective_webhook_host(&self) -> &str {
        self.webhook_host
            .as_deref()
            .unwrap_or(DEFAULT_TELEGRAM_WEBHOOK_HOST)
    }

    pub fn effective_webhook_port(&self) -> u16 {
        self.webhook_port.unwrap_or(DEFAULT_TELEGRAM_WEBHOOK_PORT)
    }
}

impl TelegramConfig {
    /// The account's settings over the channel level. As upstream, a
    /// channel-level `groups` map is not inherited when several accounts
    /// are configured (a bot outside a listed group would fail there).
    pub fn account(&self, account_id: &str) -> Option<TelegramAccountConfig> {
        let mut merged = self.merged_account(account_id)?;
        let own_groups = self
            .accounts
            .get(account_id)
            .and_then(|a| a.groups.as_ref());
        if self.accounts.len() > 1 && own_groups.is_none() {
            merged.groups = None;
        }
        Some(merged)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TelegramGroupConfig {
    pub require_mention: Option<bool>,
    pub group_policy: Option<GroupPolicy>,
    pub enabled: Option<bool>,
    #[serde(deserialize_with = "de::opt_id_list")]
    pub allow_from: Option<Vec<String>>,
    pub system_prompt: Option<String>,
    pub skills: Option<Vec<String>>,
    /// Forum topics keyed by `message_thread_id`.
    pub topics: BTreeMap<String, TelegramTopicConfig>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TelegramTopicConfig {
    pub require_mention: Option<bool>,
    pub group_policy: Option<GroupPolicy>,
    pub enabled: Option<bool>,
    #[serde(deserialize_with = "de::opt_id_list")]
    pub allow_from: Option<Vec<String>>,
    pub system_prompt: Option<String>,
    pub skills: Option<Vec<String>>,
    /// Agent that answers in this topic.
    pub agent_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::channels::StreamingMode;

    fn parse(json: &str) -> TelegramConfig {
        serde_json::from_str(json).expect("telegram config")
    }

    #[test]
    fn single_account_defaults_match_openclaw() {
        let telegram = parse(r#"{"botToken":"123:abc","allowFrom":[42,"tg:7"]}"#);
        assert_eq!(telegram.account_ids(), vec!["default".to_string()]);
        let account = telegram.account("default").expect("default account");
        assert_eq!(account.bot_token.as_deref(), Some("123:abc"));
        assert_eq!(
            account.allow_from,
            Some(vec!["42".to_string(), "tg:7".to_string()])
        );
        assert_eq!(account.effective_dm_policy(), DmPolicy::Pairing);
        assert_eq!(account.effective_group_policy(), GroupPolicy::Allowlist);
        assert_eq!(account.effective_text_chunk_limit(), 4000);
        assert_eq!(account.effective_streaming_mode(), StreamingMode::Partial);
        assert_eq!(account.effective_webhook_port(), 8787);
        assert_eq!(account.effective_retry().attempts, 3);
    }

    #[test]
    fn account_keys_override_channel_keys() {
        let telegram = parse(
            r#"{"dmPolicy":"allowlist","allowFrom":[1],"textChunkLimit":3000,
                "accounts":{"work":{"botToken":"w:1","dmPolicy":"open","allowFrom":["*"]},
                            "home":{"botToken":"h:2"}}}"#,
        );
        assert_eq!(
            telegram.account_ids(),
            vec!["home".to_string(), "work".to_string()]
        );
        let work = telegram.account("work").expect("work");
        assert_eq!(work.effective_dm_policy(), DmPolicy::Open);
        assert_eq!(work.allow_from, Some(vec!["*".to_string()]));
        assert_eq!(work.effective_text_chunk_limit(), 3000);
        let home = telegram.account("home").expect("home");
        assert_eq!(home.effective_dm_policy(), DmPolicy::Allowlist);
        assert_eq!(home.bot_token.as_deref(), Some("h:2"));
        assert!(telegram.account("nobody").is_none());
    }

    #[test]
    fn channel_groups_are_not_inherited_by_several_accounts() {
        let telegram =
            parse(r#"{"groups":{"-100":{"requireMention":true}},"accounts":{"a":{},"b":{}}}"#);
        assert!(telegram.account("a").expect("a").groups.is_none());
        let single = parse(r#"{"groups":{"-100":{"requireMention":true}},"accounts":{"a":{}}}"#);
        assert!(single.account("a").expect("a").groups.is_some());
    }
}
