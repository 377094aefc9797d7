//! The `channels` section: shared channel defaults, the streaming-preview
//! shape, and the account layering every platform shares (top-level keys
//! are the implicit "default" account; `accounts.<id>` override them key
//! by key, as upstream's `merge<Platform>AccountConfig` does).
//!
//! Each platform's keys live in its own file (`telegram.rs`, `discord.rs`,
//! `slack.rs`, `matrix.rs`, `signal.rs`, `whatsapp.rs`); this file must not grow platform specifics.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::common::{BlockStreamingChunk, BlockStreamingCoalesce, ChunkMode, GroupPolicy};
use super::discord::DiscordConfig;
use super::matrix::MatrixConfig;
use super::signal::SignalConfig;
use super::slack::SlackConfig;
use super::telegram::TelegramConfig;
use super::whatsapp::WhatsAppConfig;

/// Account id of the implicit account made of a channel's top-level keys.
pub const DEFAULT_ACCOUNT_ID: &str = "default";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ChannelsConfig {
    pub defaults: ChannelDefaults,
    pub telegram: Option<TelegramConfig>,
    pub discord: Option<DiscordConfig>,
    pub slack: Option<SlackConfig>,
    pub matrix: Option<MatrixConfig>,
    pub signal: Option<SignalConfig>,
    pub whatsapp: Option<WhatsAppConfig>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ChannelDefaults {
    /// Group policy for channels that set none.
    pub group_policy: Option<GroupPolicy>,
}

/// Live preview of a reply while it streams. The default differs per
/// platform, as upstream's: partial on Telegram and Slack, off on Discord
/// (each account type's `DEFAULT_STREAMING_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamingMode {
    Off,
    /// One preview message edited in place.
    Partial,
    /// Larger chunked preview updates.
    Block,
    /// Progress/status preview.
    Progress,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct StreamingConfig {
    pub mode: Option<StreamingMode>,
    pub chunk_mode: Option<ChunkMode>,
    pub preview: Option<StreamingPreview>,
    pub block: Option<StreamingBlock>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct StreamingPreview {
    pub chunk: Option<BlockStreamingChunk>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct StreamingBlock {
    pub enabled: Option<bool>,
    pub coalesce: Option<BlockStreamingCoalesce>,
}

/// What the message path reads of a platform's `streaming` object: each
/// platform has the keys upstream gives it (Matrix its own modes), behind
/// one view.
pub trait StreamingKeys {
    /// The preview mode, when the platform has one and it is set.
    fn mode(&self) -> Option<StreamingMode>;
    fn chunk_mode(&self) -> Option<ChunkMode>;
    fn block(&self) -> Option<&StreamingBlock>;
    /// `streaming.preview.chunk` (block-mode previews).
    fn preview_chunk(&self) -> Option<&BlockStreamingChunk> {
        None
    }
}

impl StreamingKeys for StreamingConfig {
    fn mode(&self) -> Option<StreamingMode> {
        self.mode
    }
    fn chunk_mode(&self) -> Option<ChunkMode> {
        self.chunk_mode
    }
    fn block(&self) -> Option<&StreamingBlock> {
        self.block.as_ref()
    }
    fn preview_chunk(&self) -> Option<&BlockStreamingChunk> {
        self.preview.as_ref().and_then(|p| p.chunk.as_ref())
    }
}

/// `streaming` as an object, or the legacy forms `"partial"` / `true`.
pub(crate) fn opt_streaming<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<StreamingConfig>, D::Error> {
    deserializer.deserialize_any(StreamingVisitor)
}

struct StreamingVisitor;

impl<'de> Visitor<'de> for StreamingVisitor {
    type Value = Option<StreamingConfig>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a streaming mode (off, partial, block, progress) or a streaming object")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        let mode = if v {
            StreamingMode::Partial
        } else {
            StreamingMode::Off
        };
        Ok(Some(StreamingConfig {
            mode: Some(mode),
            ..StreamingConfig::default()
        }))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        let mode = StreamingMode::deserialize(de::value::StrDeserializer::<E>::new(v))?;
        Ok(Some(StreamingConfig {
            mode: Some(mode),
            ..StreamingConfig::default()
        }))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        StreamingConfig::deserialize(de::value::MapAccessDeserializer::new(map)).map(Some)
    }
}

/// Declares a platform's account struct and its channel struct (the same
/// keys plus `accounts` and `defaultAccount`), with the key-by-key merge of
/// an account over the channel level. Every platform has `enabled` and
/// `streaming` keys; their effective values are generated here too.
macro_rules! channel_accounts {
    (
        $(#[$account_meta:meta])*
        account $account:ident;
        $(#[$channel_meta:meta])*
        channel $channel:ident;
        fields {
            $( $(#[$field_meta:meta])* $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$account_meta])*
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields, default)]
        pub struct $account {
            $( $(#[$field_meta])* pub $field: Option<$ty>, )*
        }

        $(#[$channel_meta])*
        #[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields, default)]
        pub struct $channel {
            $( $(#[$field_meta])* pub $field: Option<$ty>, )*
            /// Named accounts; each key overrides the channel-level value.
            pub accounts: std::collections::BTreeMap<String, $account>,
            /// Account used when a message names none.
            pub default_account: Option<String>,
        }

        impl $account {
            /// Whether the account runs (default true).
            pub fn effective_enabled(&self) -> bool {
                self.enabled.unwrap_or(true)
            }

            /// The preview streaming mode (the platform's
            /// `DEFAULT_STREAMING_MODE` when unset).
            pub fn effective_streaming_mode(&self) -> $crate::config::schema::channels::StreamingMode {
                self.streaming
                    .as_ref()
                    .and_then($crate::config::schema::channels::StreamingKeys::mode)
                    .unwrap_or(Self::DEFAULT_STREAMING_MODE)
            }

            /// `streaming.block.enabled`, when set (else the agents'
            /// `blockStreamingDefault` decides).
            pub fn block_streaming(&self) -> Option<bool> {
                self.streaming
                    .as_ref()
                    .and_then($crate::config::schema::channels::StreamingKeys::block)
                    .and_then(|block| block.enabled)
            }

            /// `streaming.chunkMode`, when set.
            pub fn streaming_chunk_mode(&self) -> Option<$crate::config::schema::common::ChunkMode> {
                self.streaming
                    .as_ref()
                    .and_then($crate::config::schema::channels::StreamingKeys::chunk_mode)
            }
        }

        impl $channel {
            /// The channel-level keys as an account.
            pub fn base(&self) -> $account {
                $account { $( $field: self.$field.clone(), )* }
            }

            /// Account ids: the configured ones, else just "default".
            pub fn account_ids(&self) -> Vec<String> {
                if self.accounts.is_empty() {
                    vec![$crate::config::schema::channels::DEFAULT_ACCOUNT_ID.to_string()]
                } else {
                    self.accounts.keys().cloned().collect()
                }
            }

            /// The account's own keys over the channel-level ones; `None`
            /// for an unknown id (the "default" account always exists).
            pub fn merged_account(&self, account_id: &str) -> Option<$account> {
                let base = self.base();
                match self.accounts.get(account_id) {
                    Some(account) => Some($account {
                        $( $field: account.$field.clone().or(base.$field), )*
                    }),
                    None if account_id == $crate::config::schema::channels::DEFAULT_ACCOUNT_ID => Some(base),
                    None => None,
                }
            }
        }
    };
}

pub(crate) use channel_accounts;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Holder {
        #[serde(default, deserialize_with = "opt_streaming")]
        streaming: Option<StreamingConfig>,
    }

    #[test]
    fn streaming_accepts_legacy_string_and_bool() {
        let holder: Holder = serde_json::from_str(r#"{"streaming":"block"}"#).expect("string form");
        assert_eq!(
            holder.streaming.and_then(|s| s.mode),
            Some(StreamingMode::Block)
        );
        let holder: Holder = serde_json::from_str(r#"{"streaming":false}"#).expect("bool form");
        assert_eq!(
            holder.streaming.and_then(|s| s.mode),
            Some(StreamingMode::Off)
        );
        let holder: Holder =
            serde_json::from_str(r#"{"streaming":{"mode":"progress","chunkMode":"newline"}}"#)
                .expect("object");
        let streaming = holder.streaming.expect("present");
        assert_eq!(streaming.mode, Some(StreamingMode::Progress));
        assert_eq!(streaming.chunk_mode, Some(ChunkMode::Newline));
    }

    #[test]
    fn streaming_rejects_unknown_mode() {
        let err = serde_json::from_str::<Holder>(r#"{"streaming":"fast"}"#)
            .err()
            .expect("bad mode");
        assert!(err.to_string().contains("unknown variant `fast`"), "{err}");
    }
}
