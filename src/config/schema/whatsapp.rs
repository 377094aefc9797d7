//! `channels.whatsapp`: linked WhatsApp devices (one per account), direct
//! messages only: `dmPolicy`/`allowFrom`, chunking (`textChunkLimit`,
//! `streaming`) and per-account overrides.
//!
//! Names and defaults follow OpenClaw's WhatsApp channel: `dmPolicy`
//! pairing, `textChunkLimit` 4000. Group keys, media, read receipts, self
//! chat and the rest are refused in `unsupported.rs`: pincer's WhatsApp
//! channel answers direct text messages only.

use super::channels::{channel_accounts, StreamingMode};
use super::common::DmPolicy;
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
        text_chunk_limit: u32,
        streaming: WhatsAppStreamingConfig,
    }
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
        assert!(serde_json::from_str::<WhatsAppConfig>(r#"{"groupPolicy":"open"}"#).is_err());
    }
}
