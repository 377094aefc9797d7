//! `channels.slack`: Socket Mode (default) or HTTP events, tokens, DM and
//! channel gating, chunking (8000 characters), streaming, per-account
//! overrides.
//!
//! Names and defaults follow OpenClaw's `SlackAccountSchema` /
//! `SlackConfigSchema` (`mode` socket, `webhookPath` `/slack/events`,
//! `groupPolicy` allowlist). Allow-list and signing-secret rules are in
//! `validate.rs`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::channels::{channel_accounts, opt_streaming, StreamingConfig};
use super::common::{ChunkMode, DmConfig, DmPolicy, GroupPolicy, ReplyToMode};
use crate::config::de;

/// Outbound text chunk size (`SLACK_TEXT_LIMIT`).
pub const DEFAULT_SLACK_TEXT_CHUNK_LIMIT: u32 = 8000;
pub const DEFAULT_SLACK_WEBHOOK_PATH: &str = "/slack/events";
/// Slack's Web API root.
pub const DEFAULT_SLACK_API_URL: &str = "https://slack.com/api";

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlackMode {
    /// Socket Mode with an app token (`xapp-…`).
    #[default]
    Socket,
    /// Events over HTTP request URLs, verified by the signing secret.
    Http,
}

channel_accounts! {
    /// One Slack app account (every key optional; see `effective_*`).
    account SlackAccountConfig;
    /// `channels.slack`: the default account's keys plus named accounts.
    channel SlackConfig;
    fields {
        name: String,
        enabled: bool,
        mode: SlackMode,
        bot_token: String,
        app_token: String,
        /// Web API root (pincer's key; OpenClaw has none), default
        /// `https://slack.com/api`: proxies and test servers.
        api_url: String,
        signing_secret: String,
        webhook_path: String,
        allow_bots: bool,
        require_mention: bool,
        dm_policy: DmPolicy,
        #[serde(deserialize_with = "de::opt_id_list")]
        allow_from: Vec<String>,
        default_to: String,
        /// Legacy DM block (`dm.policy`, `dm.allowFrom`).
        dm: SlackDmConfig,
        group_policy: GroupPolicy,
        channels: BTreeMap<String, SlackChannelConfig>,
        history_limit: u32,
        dm_history_limit: u32,
        dms: BTreeMap<String, DmConfig>,
        text_chunk_limit: u32,
        chunk_mode: ChunkMode,
        #[serde(deserialize_with = "opt_streaming")]
        streaming: StreamingConfig,
        media_max_mb: f64,
        reply_to_mode: ReplyToMode,
        ack_reaction: String,
        /// Spoken replies for this channel / account, over `tts`.
        tts: super::tts::TtsConfig,
    }
}

impl SlackAccountConfig {
    /// Slack previews by default (upstream `resolveSlackStreamingMode`).
    pub const DEFAULT_STREAMING_MODE: super::channels::StreamingMode =
        super::channels::StreamingMode::Partial;

    /// How outbound text is split: `streaming.chunkMode`, else the flat
    /// `chunkMode` upstream moved there, else by length.
    pub fn effective_chunk_mode(&self) -> ChunkMode {
        self.streaming_chunk_mode()
            .or(self.chunk_mode)
            .unwrap_or_default()
    }

    /// `apiUrl` without a trailing slash, else Slack's own.
    pub fn effective_api_url(&self) -> String {
        self.api_url
            .as_deref()
            .map(|url| url.trim().trim_end_matches('/'))
            .filter(|url| !url.is_empty())
            .unwrap_or(DEFAULT_SLACK_API_URL)
            .to_string()
    }

    pub fn effective_mode(&self) -> SlackMode {
        self.mode.unwrap_or_default()
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
            .unwrap_or(DEFAULT_SLACK_TEXT_CHUNK_LIMIT)
    }

    /// `webhookPath` trimmed, with a leading `/` added when missing; blank
    /// or absent → `/slack/events` (upstream's normalisation).
    pub fn effective_webhook_path(&self) -> String {
        let path = self.webhook_path.as_deref().map_or("", str::trim);
        if path.is_empty() {
            DEFAULT_SLACK_WEBHOOK_PATH.to_string()
        } else if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        }
    }

    /// `signingSecret` trimmed; `None` when blank.
    pub fn effective_signing_secret(&self) -> Option<String> {
        self.signing_secret
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    }
}

impl SlackConfig {
    /// The account's settings over the channel level.
    pub fn account(&self, account_id: &str) -> Option<SlackAccountConfig> {
        self.merged_account(account_id)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SlackDmConfig {
    pub enabled: Option<bool>,
    pub policy: Option<DmPolicy>,
    #[serde(deserialize_with = "de::opt_id_list")]
    pub allow_from: Option<Vec<String>>,
    pub group_enabled: Option<bool>,
    #[serde(deserialize_with = "de::opt_id_list")]
    pub group_channels: Option<Vec<String>>,
    pub reply_to_mode: Option<ReplyToMode>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SlackChannelConfig {
    pub enabled: Option<bool>,
    /// `false`: the channel is not on the allowlist.
    pub allow: Option<bool>,
    pub require_mention: Option<bool>,
    pub allow_bots: Option<bool>,
    #[serde(deserialize_with = "de::opt_id_list")]
    pub users: Option<Vec<String>>,
    pub skills: Option<Vec<String>>,
    pub system_prompt: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_defaults_match_openclaw() {
        let slack: SlackConfig =
            serde_json::from_str(r#"{"botToken":"xoxb-1","appToken":"xapp-1"}"#)
                .expect("slack config");
        let account = slack.account("default").expect("default account");
        assert_eq!(account.effective_mode(), SlackMode::Socket);
        assert_eq!(account.effective_webhook_path(), "/slack/events");
        assert_eq!(account.effective_text_chunk_limit(), 8000);
        assert_eq!(account.effective_group_policy(), GroupPolicy::Allowlist);
        assert_eq!(account.effective_dm_policy(), DmPolicy::Pairing);
        assert_eq!(account.effective_api_url(), "https://slack.com/api");
        let http: SlackConfig = serde_json::from_str(
            r#"{"mode":"http","signingSecret":" s3 ","webhookPath":" hooks/slack ",
                "accounts":{"blank":{"webhookPath":"  ","signingSecret":" "}}}"#,
        )
        .expect("http mode");
        let base = http.account("default").expect("default");
        assert_eq!(base.effective_mode(), SlackMode::Http);
        assert_eq!(base.effective_webhook_path(), "/hooks/slack");
        assert_eq!(base.effective_signing_secret().as_deref(), Some("s3"));
        let blank = http.account("blank").expect("blank");
        assert_eq!(blank.effective_webhook_path(), "/slack/events");
        assert_eq!(blank.effective_signing_secret(), None);
        let proxied: SlackConfig =
            serde_json::from_str(r#"{"apiUrl":"http://127.0.0.1:9/api/"}"#).expect("api url");
        assert_eq!(
            proxied
                .account("default")
                .expect("default")
                .effective_api_url(),
            "http://127.0.0.1:9/api"
        );
    }
}
