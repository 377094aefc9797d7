//! The `messages` section (inbound debounce, the per-session queue, ack
//! reactions, reply prefix) and the `commands` section (chat commands and
//! who may use them).
//!
//! Names and defaults follow OpenClaw's `MessagesConfig`, `QueueConfig` and
//! `CommandsConfig`; queue defaults are `auto-reply/reply/queue/state.ts`
//! (mode collect, debounce 1000 ms, cap 20, drop summarize).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::common::GroupChatConfig;
use crate::config::de as cde;

pub const DEFAULT_QUEUE_DEBOUNCE_MS: u64 = 1_000;
pub const DEFAULT_QUEUE_CAP: u32 = 20;
pub const DEFAULT_BASH_FOREGROUND_MS: u32 = 2_000;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MessagesConfig {
    pub group_chat: GroupChatConfig,
    pub queue: QueueConfig,
    pub inbound: InboundDebounceConfig,
    /// Emoji reacted to inbound messages while they are handled ("" disables).
    pub ack_reaction: Option<String>,
    pub ack_reaction_scope: AckReactionScope,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AckReactionScope {
    #[default]
    GroupMentions,
    GroupAll,
    Direct,
    All,
    Off,
    None,
}

/// What happens to a message that arrives while its session is busy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueueMode {
    #[serde(rename = "steer")]
    Steer,
    #[serde(rename = "followup")]
    Followup,
    #[default]
    #[serde(rename = "collect")]
    Collect,
    #[serde(rename = "steer-backlog", alias = "steer+backlog")]
    SteerBacklog,
    #[serde(rename = "queue")]
    Queue,
    #[serde(rename = "interrupt")]
    Interrupt,
}

/// Which queued message is dropped when the queue is full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueDrop {
    Old,
    New,
    #[default]
    Summarize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct QueueConfig {
    pub mode: QueueMode,
    /// Per-channel mode overrides.
    pub by_channel: BTreeMap<String, QueueMode>,
    pub debounce_ms: u64,
    pub debounce_ms_by_channel: BTreeMap<String, u64>,
    /// Messages held per session.
    pub cap: u32,
    pub drop: QueueDrop,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            mode: QueueMode::Collect,
            by_channel: BTreeMap::new(),
            debounce_ms: DEFAULT_QUEUE_DEBOUNCE_MS,
            debounce_ms_by_channel: BTreeMap::new(),
            cap: DEFAULT_QUEUE_CAP,
            drop: QueueDrop::Summarize,
        }
    }
}

impl QueueConfig {
    /// The mode for messages from `channel`.
    pub fn mode_for(&self, channel: &str) -> QueueMode {
        self.by_channel
            .get(&channel.to_ascii_lowercase())
            .copied()
            .unwrap_or(self.mode)
    }

    /// The debounce for messages from `channel`.
    pub fn debounce_ms_for(&self, channel: &str) -> u64 {
        self.debounce_ms_by_channel
            .get(&channel.to_ascii_lowercase())
            .copied()
            .unwrap_or(self.debounce_ms)
    }
}

/// Coalescing of rapid inbound messages from one sender (0 = off).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct InboundDebounceConfig {
    pub debounce_ms: u64,
    pub by_channel: BTreeMap<String, u64>,
}

impl InboundDebounceConfig {
    pub fn debounce_ms_for(&self, channel: &str) -> u64 {
        self.by_channel
            .get(channel)
            .copied()
            .unwrap_or(self.debounce_ms)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CommandsConfig {
    /// Register native platform commands (Telegram menu, Discord slash):
    /// only `false` (pincer registers none; `true`/`"auto"` are refused).
    pub native: NativeSetting,
    pub native_skills: NativeSetting,
    /// Parse `/commands` in message text (only `true`: the only commands).
    pub text: bool,
    /// Allow the `!` / `/bash` command (only `false`: pincer has none).
    pub bash: bool,
    /// How long `/bash` waits before backgrounding (only the default).
    pub bash_foreground_ms: u32,
    /// Allow `/config` (only `false`: pincer has none).
    pub config: bool,
    /// Allow `/debug` (only `false`: pincer has none).
    pub debug: bool,
    /// Allow restart commands.
    pub restart: bool,
    /// Commands obey the channel's access rules (only `true`).
    pub use_access_groups: bool,
    /// Owners, by channel-native id.
    #[serde(deserialize_with = "cde::id_list")]
    pub owner_allow_from: Vec<String>,
    /// Channel ("*" for all) → senders allowed to use commands; when set, a
    /// command from anyone else is dropped (read by `channels::commands`).
    #[serde(deserialize_with = "cde::id_list_map")]
    pub allow_from: BTreeMap<String, Vec<String>>,
}

impl Default for CommandsConfig {
    fn default() -> Self {
        CommandsConfig {
            native: NativeSetting::Off,
            native_skills: NativeSetting::Off,
            text: true,
            bash: false,
            bash_foreground_ms: DEFAULT_BASH_FOREGROUND_MS,
            config: false,
            debug: false,
            restart: true,
            use_access_groups: true,
            owner_allow_from: Vec::new(),
            allow_from: BTreeMap::new(),
        }
    }
}

/// `true`, `false` or `"auto"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NativeSetting {
    #[default]
    Auto,
    On,
    Off,
}

impl Serialize for NativeSetting {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            NativeSetting::Auto => serializer.serialize_str("auto"),
            NativeSetting::On => serializer.serialize_bool(true),
            NativeSetting::Off => serializer.serialize_bool(false),
        }
    }
}

impl<'de> Deserialize<'de> for NativeSetting {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NativeSettingVisitor)
    }
}

struct NativeSettingVisitor;

impl Visitor<'_> for NativeSettingVisitor {
    type Value = NativeSetting;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("true, false or \"auto\"")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<NativeSetting, E> {
        Ok(if v {
            NativeSetting::On
        } else {
            NativeSetting::Off
        })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<NativeSetting, E> {
        match v {
            "auto" => Ok(NativeSetting::Auto),
            other => Err(E::invalid_value(de::Unexpected::Str(other), &self)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_defaults_match_openclaw() {
        let queue = QueueConfig::default();
        assert_eq!(queue.mode, QueueMode::Collect);
        assert_eq!(queue.debounce_ms, 1000);
        assert_eq!(queue.cap, 20);
        assert_eq!(queue.drop, QueueDrop::Summarize);
    }

    #[test]
    fn per_channel_queue_overrides_win() {
        let queue: QueueConfig = serde_json::from_str(
            r#"{"mode":"followup","byChannel":{"telegram":"steer+backlog"},"debounceMsByChannel":{"discord":250}}"#,
        )
        .expect("queue");
        assert_eq!(queue.mode_for("telegram"), QueueMode::SteerBacklog);
        assert_eq!(queue.mode_for("slack"), QueueMode::Followup);
        assert_eq!(queue.debounce_ms_for("discord"), 250);
        assert_eq!(queue.debounce_ms_for("slack"), 1000);
    }

    #[test]
    fn commands_defaults_and_native_forms() {
        let commands = CommandsConfig::default();
        // Pincer registers no native command menus: off unless asked (and then refused).
        assert_eq!(commands.native, NativeSetting::Off);
        assert!(commands.text && commands.restart && !commands.bash);
        let commands: CommandsConfig = serde_json::from_str(
            r#"{"native":"auto","ownerAllowFrom":[12345],"allowFrom":{"*":["a",7]}}"#,
        )
        .expect("commands");
        assert_eq!(commands.native, NativeSetting::Auto);
        assert_eq!(commands.owner_allow_from, vec!["12345".to_string()]);
        assert_eq!(
            commands.allow_from["*"],
            vec!["a".to_string(), "7".to_string()]
        );
    }
}
