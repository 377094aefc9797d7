//! `channels.discord`: bot token, DM and guild gating, chunking (2000
//! characters, 17 lines), streaming preview, retries, per-account overrides.
//!
//! Names and defaults follow OpenClaw's `DiscordAccountSchema`. The legacy
//! `dm.policy` / `dm.allowFrom` keys are read as fallbacks of `dmPolicy` /
//! `allowFrom`; allow-list rules are in `validate.rs`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use super::channels::{channel_accounts, opt_streaming, StreamingConfig};
use super::common::{ChunkMode, DmConfig, DmPolicy, GroupPolicy, ReplyToMode, RetryConfig};
use crate::config::de as cde;

/// Outbound text chunk size (`DISCORD_TEXT_CHUNK_LIMIT`).
pub const DEFAULT_DISCORD_TEXT_CHUNK_LIMIT: u32 = 2000;
/// Soft cap on lines per message.
pub const DEFAULT_DISCORD_MAX_LINES_PER_MESSAGE: u32 = 17;

channel_accounts! {
    /// One Discord bot account (every key optional; see `effective_*`).
    account DiscordAccountConfig;
    /// `channels.discord`: the default account's keys plus named accounts.
    channel DiscordConfig;
    fields {
        name: String,
        enabled: bool,
        token: String,
        proxy: String,
        /// REST API root (pincer's key; OpenClaw has none), default
        /// `https://discord.com/api/v10`: proxies and test servers.
        api_base_url: String,
        /// Gateway WebSocket URL (pincer's key); unset: asked from
        /// `GET /gateway/bot`.
        gateway_url: String,
        /// Answer other bots: true, false, or only when they mention us.
        allow_bots: AllowBots,
        dm_policy: DmPolicy,
        #[serde(deserialize_with = "cde::opt_id_list")]
        allow_from: Vec<String>,
        default_to: String,
        /// Legacy DM block (`dm.policy`, `dm.allowFrom`).
        dm: DiscordDmConfig,
        group_policy: GroupPolicy,
        guilds: BTreeMap<String, DiscordGuildConfig>,
        history_limit: u32,
        dm_history_limit: u32,
        dms: BTreeMap<String, DmConfig>,
        text_chunk_limit: u32,
        chunk_mode: ChunkMode,
        max_lines_per_message: u32,
        #[serde(deserialize_with = "opt_streaming")]
        streaming: StreamingConfig,
        media_max_mb: f64,
        retry: RetryConfig,
        reply_to_mode: ReplyToMode,
        ack_reaction: String,
        /// Spoken replies for this channel / account, over `tts`.
        tts: super::tts::TtsConfig,
    }
}

/// Discord's REST API root for API version 10.
pub const DEFAULT_DISCORD_API_BASE_URL: &str = "https://discord.com/api/v10";

impl DiscordAccountConfig {
    /// Discord edits hit rate limits: upstream keeps its preview off unless enabled.
    pub const DEFAULT_STREAMING_MODE: super::channels::StreamingMode =
        super::channels::StreamingMode::Off;

    /// How outbound text is split: `streaming.chunkMode`, else the flat
    /// `chunkMode` upstream moved there, else by length.
    pub fn effective_chunk_mode(&self) -> ChunkMode {
        self.streaming_chunk_mode()
            .or(self.chunk_mode)
            .unwrap_or_default()
    }

    /// `apiBaseUrl` without a trailing slash, else Discord's own.
    pub fn effective_api_base_url(&self) -> String {
        self.api_base_url
            .as_deref()
            .map(|url| url.trim().trim_end_matches('/'))
            .filter(|url| !url.is_empty())
            .unwrap_or(DEFAULT_DISCORD_API_BASE_URL)
            .to_string()
    }

    /// `dmPolicy`, else legacy `dm.policy`, else pairing.
    pub fn effective_dm_policy(&self) -> DmPolicy {
        self.dm_policy
            .or_else(|| self.dm.as_ref().and_then(|dm| dm.policy))
            .unwrap_or(DmPolicy::Pairing)
    }

    /// `allowFrom`, else legacy `dm.allowFrom`.
    pub fn effective_allow_from(&self) -> Vec<String> {
        self.allow_from
            .clone()
            .or_else(|| self.dm.as_ref().and_then(|dm| dm.allow_from.clone()))
            .unwrap_or_default()
    }

    pub fn effective_group_policy(&self) -> GroupPolicy {
        self.group_policy.unwrap_or(GroupPolicy::Allowlist)
    }

    pub fn effective_text_chunk_limit(&self) -> u32 {
        self.text_chunk_limit
            .unwrap_or(DEFAULT_DISCORD_TEXT_CHUNK_LIMIT)
    }

    pub fn effective_max_lines_per_message(&self) -> u32 {
        self.max_lines_per_message
            .unwrap_or(DEFAULT_DISCORD_MAX_LINES_PER_MESSAGE)
    }

    pub fn effective_retry(&self) -> RetryConfig {
        self.retry.clone().unwrap_or_default()
    }
}

impl DiscordConfig {
    /// The account's settings over the channel level.
    pub fn account(&self, account_id: &str) -> Option<DiscordAccountConfig> {
        self.merged_account(account_id)
    }
}

/// Whether messages from other bots are processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowBots {
    Never,
    Always,
    /// Only when the other bot mentions this one.
    Mentions,
}

impl Serialize for AllowBots {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            AllowBots::Never => serializer.serialize_bool(false),
            AllowBots::Always => serializer.serialize_bool(true),
            AllowBots::Mentions => serializer.serialize_str("mentions"),
        }
    }
}

impl<'de> Deserialize<'de> for AllowBots {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(AllowBotsVisitor)
    }
}

struct AllowBotsVisitor;

impl Visitor<'_> for AllowBotsVisitor {
    type Value = AllowBots;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("true, false or \"mentions\"")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<AllowBots, E> {
        Ok(if v {
            AllowBots::Always
        } else {
            AllowBots::Never
        })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<AllowBots, E> {
        match v {
            "mentions" => Ok(AllowBots::Mentions),
            other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DiscordDmConfig {
    pub enabled: Option<bool>,
    pub policy: Option<DmPolicy>,
    #[serde(deserialize_with = "cde::opt_id_list")]
    pub allow_from: Option<Vec<String>>,
    /// Answer in group DMs.
    pub group_enabled: Option<bool>,
    #[serde(deserialize_with = "cde::opt_id_list")]
    pub group_channels: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DiscordGuildConfig {
    pub require_mention: Option<bool>,
    /// Users allowed in this guild.
    #[serde(deserialize_with = "cde::opt_id_list")]
    pub users: Option<Vec<String>>,
    /// Roles allowed in this guild.
    #[serde(deserialize_with = "cde::opt_id_list")]
    pub roles: Option<Vec<String>>,
    pub channels: BTreeMap<String, DiscordGuildChannelConfig>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DiscordGuildChannelConfig {
    pub enabled: Option<bool>,
    /// `false`: the channel is not on the guild's allowlist.
    pub allow: Option<bool>,
    pub require_mention: Option<bool>,
    #[serde(deserialize_with = "cde::opt_id_list")]
    pub users: Option<Vec<String>>,
    #[serde(deserialize_with = "cde::opt_id_list")]
    pub roles: Option<Vec<String>>,
    pub skills: Option<Vec<String>>,
    pub system_prompt: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discord_defaults_and_legacy_dm_block() {
        let discord: DiscordConfig = serde_json::from_str(
            r#"{"token":"t","allowBots":"mentions","dm":{"policy":"allowlist","allowFrom":[123456789012345678]},
                "guilds":{"1":{"requireMention":true,"channels":{"2":{"enabled":true}}}}}"#,
        )
        .expect("discord config");
        let account = discord.account("default").expect("default account");
        assert_eq!(account.allow_bots, Some(AllowBots::Mentions));
        assert_eq!(account.effective_dm_policy(), DmPolicy::Allowlist);
        assert_eq!(
            account.effective_allow_from(),
            vec!["123456789012345678".to_string()]
        );
        assert_eq!(account.effective_text_chunk_limit(), 2000);
        assert_eq!(account.effective_max_lines_per_message(), 17);
        assert!(serde_json::from_str::<DiscordConfig>(r#"{"allowBots":"sometimes"}"#).is_err());
        assert_eq!(
            account.effective_api_base_url(),
            "https://discord.com/api/v10"
        );
    }

    #[test]
    fn api_and_gateway_urls_are_per_account() {
        let discord: DiscordConfig = serde_json::from_str(
            r#"{"token":"t","apiBaseUrl":"http://127.0.0.1:9/api/","accounts":{"b":{"gatewayUrl":"ws://127.0.0.1:8"}}}"#,
        )
        .expect("discord config");
        let b = discord.account("b").expect("account b");
        assert_eq!(b.effective_api_base_url(), "http://127.0.0.1:9/api");
        assert_eq!(b.gateway_url.as_deref(), Some("ws://127.0.0.1:8"));
    }
}
