//! `channels.matrix`: a homeserver account over the client-server API
//! (access token, or user id + password), DM and room gating, invites,
//! chunking (4000 characters), reply threading, per-account overrides.
//!
//! Names and defaults follow OpenClaw's Matrix channel (`groupPolicy`
//! allowlist, `dm.policy` pairing, `autoJoin` off, `threadReplies`
//! inbound, `streaming.mode` off, `mediaMaxMb` 20). Keys pincer does not
//! implement are refused in `unsupported.rs`; `encryption: true` and the
//! `quiet`/`progress` streaming modes are refused by validation: pincer
//! reads unencrypted rooms only.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::channels::{channel_accounts, StreamingBlock, StreamingKeys, StreamingMode};
use super::common::{ChunkMode, DmPolicy, GroupPolicy, ReplyToMode};
use super::messages::AckReactionScope;
use crate::config::de;

/// Outbound text chunk size (upstream's Matrix `textChunkLimit` default).
pub const DEFAULT_MATRIX_TEXT_CHUNK_LIMIT: u32 = 4000;
/// Inbound attachment cap in MB (upstream's `DEFAULT_MEDIA_MAX_MB` for Matrix).
pub const DEFAULT_MATRIX_MEDIA_MAX_MB: f64 = 20.0;
/// Timeline events per room asked for in the first sync of an account
/// with no stored sync token (its events are history, never answered).
pub const DEFAULT_MATRIX_INITIAL_SYNC_LIMIT: u32 = 10;

channel_accounts! {
    /// One Matrix account (every key optional; see `effective_*`).
    account MatrixAccountConfig;
    /// `channels.matrix`: the default account's keys plus named accounts.
    channel MatrixConfig;
    fields {
        /// Label of the account in `channels.status`.
        name: String,
        enabled: bool,
        /// Homeserver base URL (`https://matrix.example.org`).
        homeserver: String,
        network: MatrixNetworkConfig,
        /// Full user id (`@bot:example.org`), needed for password login.
        user_id: String,
        access_token: String,
        password: String,
        device_id: String,
        device_name: String,
        initial_sync_limit: u32,
        /// End-to-end encryption: only `false` (validation refuses `true`).
        encryption: bool,
        allowlist_only: bool,
        group_policy: GroupPolicy,
        #[serde(deserialize_with = "de::opt_id_list")]
        group_allow_from: Vec<String>,
        dm: MatrixDmConfig,
        groups: BTreeMap<String, MatrixRoomConfig>,
        /// Legacy alias of `groups`.
        rooms: BTreeMap<String, MatrixRoomConfig>,
        auto_join: MatrixAutoJoin,
        #[serde(deserialize_with = "de::opt_id_list")]
        auto_join_allowlist: Vec<String>,
        reply_to_mode: ReplyToMode,
        thread_replies: MatrixThreadReplies,
        text_chunk_limit: u32,
        streaming: MatrixStreamingConfig,
        media_max_mb: f64,
        history_limit: u32,
        ack_reaction: String,
        ack_reaction_scope: AckReactionScope,
    }
}

impl MatrixAccountConfig {
    /// Matrix sends no previews unless asked (upstream's `streaming.mode` off).
    pub const DEFAULT_STREAMING_MODE: StreamingMode = StreamingMode::Off;

    /// `streaming.chunkMode`, else by length.
    pub fn effective_chunk_mode(&self) -> ChunkMode {
        self.streaming_chunk_mode().unwrap_or_default()
    }

    /// `dm.policy` (pairing by default); `dm.enabled: false` disables DMs and
    /// `allowlistOnly` turns every active policy into `allowlist`.
    pub fn effective_dm_policy(&self) -> DmPolicy {
        let dm = self.dm.clone().unwrap_or_default();
        if dm.enabled == Some(false) {
            return DmPolicy::Disabled;
        }
        let policy = dm.policy.unwrap_or(DmPolicy::Pairing);
        if self.allowlist_only == Some(true) && policy != DmPolicy::Disabled {
            DmPolicy::Allowlist
        } else {
            policy
        }
    }

    /// `dm.allowFrom`.
    pub fn effective_dm_allow_from(&self) -> Vec<String> {
        self.dm
            .as_ref()
            .and_then(|dm| dm.allow_from.clone())
            .unwrap_or_default()
    }

    /// `groupPolicy` (allowlist by default); `allowlistOnly` turns `open`
    /// into `allowlist`.
    pub fn effective_group_policy(&self) -> GroupPolicy {
        let policy = self.group_policy.unwrap_or(GroupPolicy::Allowlist);
        if self.allowlist_only == Some(true) && policy == GroupPolicy::Open {
            GroupPolicy::Allowlist
        } else {
            policy
        }
    }

    /// The room entries: `groups` over the legacy `rooms`, key by key.
    pub fn effective_rooms(&self) -> BTreeMap<String, MatrixRoomConfig> {
        let mut rooms = self.rooms.clone().unwrap_or_default();
        rooms.extend(self.groups.clone().unwrap_or_default());
        rooms
    }

    pub fn effective_auto_join(&self) -> MatrixAutoJoin {
        self.auto_join.unwrap_or_default()
    }

    pub fn effective_thread_replies(&self) -> MatrixThreadReplies {
        self.thread_replies.unwrap_or_default()
    }

    pub fn effective_dm_session_scope(&self) -> MatrixDmSessionScope {
        self.dm
            .as_ref()
            .and_then(|dm| dm.session_scope)
            .unwrap_or_default()
    }

    pub fn effective_text_chunk_limit(&self) -> u32 {
        self.text_chunk_limit
            .unwrap_or(DEFAULT_MATRIX_TEXT_CHUNK_LIMIT)
    }

    pub fn effective_initial_sync_limit(&self) -> u32 {
        self.initial_sync_limit
            .unwrap_or(DEFAULT_MATRIX_INITIAL_SYNC_LIMIT)
    }

    /// `network.dangerouslyAllowPrivateNetwork` (false: a homeserver on a
    /// loopback, private or link-local address is refused, as upstream).
    pub fn effective_allow_private_network(&self) -> bool {
        self.network
            .as_ref()
            .and_then(|n| n.dangerously_allow_private_network)
            .unwrap_or(false)
    }

    /// `homeserver` trimmed, without a trailing slash; `None` when blank.
    pub fn effective_homeserver(&self) -> Option<String> {
        self.homeserver
            .as_deref()
            .map(|h| h.trim().trim_end_matches('/'))
            .filter(|h| !h.is_empty())
            .map(str::to_string)
    }
}

impl MatrixConfig {
    /// The account's settings over the channel level.
    pub fn account(&self, account_id: &str) -> Option<MatrixAccountConfig> {
        self.merged_account(account_id)
    }
}

/// `network`: what the homeserver address may be.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MatrixNetworkConfig {
    pub dangerously_allow_private_network: Option<bool>,
}

/// `dm`: direct rooms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MatrixDmConfig {
    /// `false`: no direct message is answered.
    pub enabled: Option<bool>,
    pub policy: Option<DmPolicy>,
    #[serde(deserialize_with = "de::opt_id_list")]
    pub allow_from: Option<Vec<String>>,
    pub session_scope: Option<MatrixDmSessionScope>,
}

/// Which session a direct room's messages go to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MatrixDmSessionScope {
    /// One session per user, whichever room they write from.
    #[default]
    PerUser,
    /// One session per direct room.
    PerRoom,
}

/// `groups.<room>` (or legacy `rooms.<room>`), keyed by room id or alias.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MatrixRoomConfig {
    /// `false`: the room is treated as if it were not listed.
    pub enabled: Option<bool>,
    pub require_mention: Option<bool>,
    /// `true`: no mention needed here; `false`: mentions needed again.
    pub auto_reply: Option<bool>,
    #[serde(deserialize_with = "de::opt_id_list")]
    pub users: Option<Vec<String>>,
    pub skills: Option<Vec<String>>,
    pub system_prompt: Option<String>,
}

/// Which invites the account accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatrixAutoJoin {
    Always,
    /// Rooms (ids or aliases) in `autoJoinAllowlist`.
    Allowlist,
    #[default]
    Off,
}

/// Where replies go relative to threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatrixThreadReplies {
    /// Always in the room's main timeline.
    Off,
    /// In the thread the message came from, if any.
    #[default]
    Inbound,
    /// In a thread: the message's own, else one rooted at the message.
    Always,
}

/// Matrix's streaming modes (`quiet` and `progress` are refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatrixStreamingMode {
    Off,
    /// One preview message edited in place (`m.replace`).
    Partial,
    Quiet,
    Progress,
}

/// `streaming` of a Matrix account.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MatrixStreamingConfig {
    pub mode: Option<MatrixStreamingMode>,
    pub chunk_mode: Option<ChunkMode>,
    pub block: Option<StreamingBlock>,
}

impl StreamingKeys for MatrixStreamingConfig {
    fn mode(&self) -> Option<StreamingMode> {
        self.mode.map(|mode| match mode {
            MatrixStreamingMode::Partial => StreamingMode::Partial,
            // Validation refuses quiet and progress.
            _ => StreamingMode::Off,
        })
    }
    fn chunk_mode(&self) -> Option<ChunkMode> {
        self.chunk_mode
    }
    fn block(&self) -> Option<&StreamingBlock> {
        self.block.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> MatrixConfig {
        serde_json::from_str(json).expect("matrix config")
    }

    #[test]
    fn matrix_defaults_match_openclaw() {
        let matrix = parse(r#"{"homeserver":"https://hs.example/","accessToken":"syt_1"}"#);
        let account = matrix.account("default").expect("default account");
        assert_eq!(
            account.effective_homeserver().as_deref(),
            Some("https://hs.example")
        );
        assert_eq!(account.effective_dm_policy(), DmPolicy::Pairing);
        assert_eq!(account.effective_group_policy(), GroupPolicy::Allowlist);
        assert_eq!(account.effective_auto_join(), MatrixAutoJoin::Off);
        assert_eq!(
            account.effective_thread_replies(),
            MatrixThreadReplies::Inbound
        );
        assert_eq!(account.effective_text_chunk_limit(), 4000);
        assert_eq!(account.effective_streaming_mode(), StreamingMode::Off);
        assert_eq!(
            account.effective_dm_session_scope(),
            MatrixDmSessionScope::PerUser
        );
        assert!(!account.effective_allow_private_network());
    }

    #[test]
    fn allowlist_only_tightens_open_policies_but_not_disabled_ones() {
        let matrix = parse(
            r#"{"allowlistOnly":true,"groupPolicy":"open","dm":{"policy":"open","allowFrom":["*"]},
                "accounts":{"off":{"dm":{"policy":"disabled"},"groupPolicy":"disabled"},
                            "quiet":{"dm":{"enabled":false,"policy":"open"}}}}"#,
        );
        let base = matrix.account("default").expect("default");
        assert_eq!(base.effective_dm_policy(), DmPolicy::Allowlist);
        assert_eq!(base.effective_group_policy(), GroupPolicy::Allowlist);
        let off = matrix.account("off").expect("off");
        assert_eq!(off.effective_dm_policy(), DmPolicy::Disabled);
        assert_eq!(off.effective_group_policy(), GroupPolicy::Disabled);
        let quiet = matrix.account("quiet").expect("quiet");
        assert_eq!(quiet.effective_dm_policy(), DmPolicy::Disabled);
    }

    #[test]
    fn groups_win_over_the_legacy_rooms_key() {
        let matrix = parse(
            r#"{"rooms":{"!a:hs":{"requireMention":false},"!b:hs":{}},
                "groups":{"!a:hs":{"requireMention":true}}}"#,
        );
        let rooms = matrix
            .account("default")
            .expect("default")
            .effective_rooms();
        assert_eq!(rooms.len(), 2);
        assert_eq!(rooms["!a:hs"].require_mention, Some(true));
    }

    #[test]
    fn unknown_streaming_keys_and_modes_are_refused() {
        let err = serde_json::from_str::<MatrixConfig>(r#"{"streaming":{"mode":"block"}}"#)
            .expect_err("block is no Matrix mode");
        assert!(err.to_string().contains("unknown variant"), "{err}");
        assert!(serde_json::from_str::<MatrixConfig>(r#"{"streaming":"partial"}"#).is_err());
    }
}
