//! `channels.whatsapp`: linked WhatsApp devices (one per account), direct
//! messages (`dmPolicy`/`allowFrom`, `selfChatMode`), groups
//! (`groupPolicy`/`groupAllowFrom`, the `groups` allowlist with
//! `requireMention` and `systemPrompt` per group JID or `"*"`), read
//! receipts (`sendReadReceipts`), chunking (`textChunkLimit`, `streaming`),
//! `historyLimit` and per-account overrides.
//!
//! Names and defaults follow OpenClaw's WhatsApp channel: `dmPolicy`
//! pairing, `groupPolicy` allowlist (else `channels.defaults.groupPolicy`),
//! `sendReadReceipts` true, `selfChatMode` unset (inferred from the linked
//! number being in `allowFrom`), `textChunkLimit` 4000. Media and the rest
//! are refused in `unsupported.rs`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::channels::{channel_accounts, StreamingMode};
use super::common::{DmPolicy, GroupPolicy};
use super::signal::SignalStreamingConfig;
use crate::config::de;

/// Outbound text chunk size (upstream's WhatsApp `textChunkLimit` default).
pub const DEFAULT_WHATSAPP_TEXT_CHUNK_LIMIT: u32 = 4000;

/// `streaming` of a WhatsApp account: the same keys as Signal's (chunking
/// and blocks, no previews).
pub type WhatsAppStreamingConfig = SignalStreamingConfig;

channel_accounts! {
    /// One WhatsApp account (every key optional; see `effective_*`).
    account WhatsAppAccountConfig;
    /// `channels.whatsapp`: the default account's keys plus named accounts.
    channel WhatsAppConfig;
    fields {
        /// Label of the account in `channels.status`.
        name: String,
        enabled: bool,
        dm_policy: DmPolicy,
        #[serde(deserialize_with = "de::opt_id_list")]
        allow_from: Vec<String>,
        group_policy: GroupPolicy,
        #[serde(deserialize_with = "de::opt_id_list")]
        group_allow_from: Vec<String>,
        groups: BTreeMap<String, WhatsAppGroupConfig>,
        history_limit: u32,
        send_read_receipts: bool,
        self_chat_mode: bool,
        text_chunk_limit: u32,
        streaming: WhatsAppStreamingConfig,
    }
}

/// `groups.<group JID | "*">`: an entry admits the group (the map is the
/// group allowlist once it has one), and decides its mention gate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WhatsAppGroupConfig {
    pub require_mention: Option<bool>,
    /// Added to the answering turn's system prompt in this group.
    pub system_prompt: Option<String>,
}

impl WhatsAppAccountConfig {
    /// WhatsApp sends no previews (a sent message is not edited).
    pub const DEFAULT_STREAMING_MODE: StreamingMode = StreamingMode::Off;

    pub fn effective_dm_policy(&self) -> DmPolicy {
        self.dm_policy.unwrap_or(DmPolicy::Pairing)
    }

    pub fn effective_allow_from(&self) -> Vec<String> {
        self.allow_from.clone().unwrap_or_default()
    }

    /// Read receipts for messages the message path accepts (default true).
    pub fn effective_send_read_receipts(&self) -> bool {
        self.send_read_receipts.unwrap_or(true)
    }

    /// The group senders: `groupAllowFrom`, else `allowFrom` when it has
    /// entries (upstream's fallback), else none.
    pub fn effective_group_allow_from(&self) -> Vec<String> {
        match &self.group_allow_from {
            Some(list) => list.clone(),
            None => self.allow_from.clone().unwrap_or_default(),
        }
    }

    pub fn effective_text_chunk_limit(&self) -> u32 {
        self.text_chunk_limit
            .unwrap_or(DEFAULT_WHATSAPP_TEXT_CHUNK_LIMIT)
    }

    /// `streaming.chunkMode`, else by length.
    pub fn effective_chunk_mode(&self) -> super::common::ChunkMode {
        self.streaming_chunk_mode().unwrap_or_default()
    }
}

impl WhatsAppConfig {
    pub fn account(&self, account_id: &str) -> Option<WhatsAppAccountConfig> {
        self.merged_account(account_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_upstreams_and_accounts_override_key_by_key() {
        let config: WhatsAppConfig = serde_json::from_str(
            r#"{"allowFrom":["+1555"],"accounts":{"work":{"dmPolicy":"allowlist","textChunkLimit":900}}}"#,
        )
        .expect("config");
        let default = config.account("default").expect("default");
        assert_eq!(default.effective_dm_policy(), DmPolicy::Pairing);
        assert_eq!(default.effective_text_chunk_limit(), 4000);
        let work = config.account("work").expect("work");
        assert_eq!(work.effective_dm_policy(), DmPolicy::Allowlist);
        assert_eq!(work.effective_allow_from(), vec!["+1555"]);
        assert_eq!(work.effective_text_chunk_limit(), 900);
        assert!(default.effective_send_read_receipts());
        assert_eq!(default.effective_group_allow_from(), vec!["+1555"]);
        assert_eq!(default.self_chat_mode, None);
        let groups: WhatsAppConfig = serde_json::from_str(
            r#"{"groupPolicy":"open","groupAllowFrom":[],"sendReadReceipts":false,"selfChatMode":true,
                "groups":{"1203@g.us":{"requireMention":false,"systemPrompt":"Be brief."},"*":{}},
                "accounts":{"work":{"sendReadReceipts":true}}}"#,
        )
        .expect("config");
        let default = groups.account("default").expect("default");
        assert_eq!(default.group_policy, Some(GroupPolicy::Open));
        assert!(default.effective_group_allow_from().is_empty());
        assert!(!default.effective_send_read_receipts());
        assert_eq!(default.self_chat_mode, Some(true));
        let entry = &default.groups.as_ref().expect("groups")["1203@g.us"];
        assert_eq!(entry.require_mention, Some(false));
        assert!(groups
            .account("work")
            .expect("work")
            .effective_send_read_receipts());
        assert!(
            serde_json::from_str::<WhatsAppConfig>(r#"{"groups":{"*":{"tools":{}}}}"#).is_err()
        );
    }
}
