//! One channel account's message-path settings read from the config: its
//! access policy (dmPolicy, allowFrom, groupPolicy, groupAllowFrom, allowed
//! groups and their mention requirement), outbound text limit and chunk
//! mode, streaming
//! preview mode, retry policy, and the agent-level block streaming, coalescing
//! and human-delay keys. Each platform keeps its keys in its own config type,
//! so this is the one place that reads `channels.<id>` by name; the hub and
//! the reply path only see the resolved [`ChannelSettings`]. What a
//! message's own group entry adds is in `group_scope.rs`.
//!
//! Pure config reading: nothing here sends, waits or touches the store.

use crate::config::schema::channels::{StreamingKeys, StreamingMode};
use crate::config::schema::common::{
    BlockStreamingChunk, BlockStreamingCoalesce, ChunkMode, DmPolicy, GroupPolicy,
    HumanDelayConfig, ReplyToMode, TypingMode, DEFAULT_TYPING_INTERVAL_SECONDS,
};
use crate::config::schema::messages::AckReactionScope;
use crate::config::Config;
use crate::pipeline::access::{AccessPolicy, GroupActivation};
use crate::reply::coalescer::{
    ChannelCoalesceDefaults, CHANNEL_COALESCE_MIN_CHARS, DEFAULT_COALESCE_IDLE_MS,
};

use super::outbound::RetryPolicy;

mod bots;
mod matrix;
pub(crate) mod signal;
pub(crate) mod whatsapp;

/// How often a streaming preview is edited at most (upstream's default throttle).
pub const DEFAULT_PREVIEW_THROTTLE_MS: u64 = 1_000;

/// What the message path needs to know about one channel account.
#[derive(Debug, Clone)]
pub struct ChannelSettings {
    pub access: AccessPolicy,
    /// `textChunkLimit`, when configured (else the adapter's own limit).
    pub text_chunk_limit: Option<usize>,
    /// Discord's `maxLinesPerMessage` (else the adapter's own).
    pub max_lines_per_message: Option<usize>,
    /// `streaming.chunkMode` / `chunkMode` (length unless configured).
    pub chunk_mode: ChunkMode,
    pub streaming: StreamingMode,
    /// Block streaming: blocks sent as the reply is written (the account's
    /// `streaming.block.enabled`, else `agents.defaults.blockStreamingDefault`
    /// "on"); off, the reply goes out whole when the run ends.
    pub block_streaming: bool,
    /// Which outgoing messages quote (Slack: thread under) the inbound
    /// message (`replyToMode`, off unless configured, as upstream).
    pub reply_to_mode: ReplyToMode,
    pub preview_throttle_ms: u64,
    pub retry: RetryPolicy,
    pub block_chunk: Option<BlockStreamingChunk>,
    pub block_coalesce: Option<BlockStreamingCoalesce>,
    /// The platform's own coalescing defaults (Discord and Slack merge small
    /// blocks up to 1,500 characters, flushed after 1 s idle).
    pub coalesce_defaults: Option<ChannelCoalesceDefaults>,
    pub human_delay: HumanDelayConfig,
    /// `messages.inbound.debounceMs` for this channel.
    pub inbound_debounce_ms: u64,
    /// The ack reaction emoji (`ackReaction` of the account, else
    /// `messages.ackReaction`); `None` when unset or empty.
    pub ack_reaction: Option<String>,
    pub ack_reaction_scope: AckReactionScope,
    /// Unanswered group messages kept as context for the next answer
    /// (`historyLimit` of the account, else `messages.groupChat.historyLimit`,
    /// else 50; 0 disables).
    pub group_history_limit: usize,
    /// Whether the typing indicator shows at all (`typingMode` of the
    /// session, else of agents.defaults: anything but `never`).
    pub typing: bool,
    /// How often "typing…" is re-sent (`typingIntervalSeconds`, 6 s).
    pub typing_interval_ms: u64,
    /// The group's (and topic's) `systemPrompt`, added to the answering turn's system prompt.
    pub group_system_prompt: Option<String>,
    /// The group's (topic's, channel's) `skills`: the skills the answering turn may use, within
    /// the agent's own list.
    pub skill_filter: Option<Vec<String>>,
    /// The agent a Telegram forum topic names (`agentId`): it answers there instead of the bound one.
    pub agent_override: Option<String>,
    /// Block-mode preview chunking (`streaming.preview.chunk`, upstream's 200..800 characters,
    /// paragraph breaks, by default).
    pub preview_chunk: Option<BlockStreamingChunk>,
}

/// Upstream's default group history length.
pub const DEFAULT_GROUP_HISTORY_LIMIT: usize = 50;

impl ChannelSettings {
    /// The settings of `channel`'s `account_id` under `config`.
    pub fn resolve(config: &Config, channel: &str, account_id: &str) -> ChannelSettings {
        let defaults = &config.agents.defaults;
        let mut settings = ChannelSettings {
            access: AccessPolicy {
                channel: channel.to_string(),
                account_id: account_id.to_string(),
                group_policy: config
                    .channels
                    .defaults
                    .group_policy
                    .unwrap_or(GroupPolicy::Allowlist),
                ..AccessPolicy::default()
            },
            text_chunk_limit: None,
            max_lines_per_message: None,
            chunk_mode: ChunkMode::Length,
            streaming: StreamingMode::Off,
            block_streaming: defaults.block_streaming_default.as_deref() == Some("on"),
            reply_to_mode: ReplyToMode::Off,
            preview_throttle_ms: DEFAULT_PREVIEW_THROTTLE_MS,
            retry: RetryPolicy::for_channel(channel),
            block_chunk: defaults.block_streaming_chunk.clone(),
            block_coalesce: defaults.block_streaming_coalesce.clone(),
            coalesce_defaults: match channel {
                "discord" | "slack" => Some(ChannelCoalesceDefaults {
                    min_chars: CHANNEL_COALESCE_MIN_CHARS,
                    idle_ms: DEFAULT_COALESCE_IDLE_MS,
                }),
                _ => None,
            },
            human_delay: defaults.human_delay.clone().unwrap_or_default(),
            inbound_debounce_ms: config.messages.inbound.debounce_ms_for(channel),
            ack_reaction: config.messages.ack_reaction.clone(),
            ack_reaction_scope: config.messages.ack_reaction_scope,
            group_history_limit: config
                .messages
                .group_chat
                .history_limit
                .map_or(DEFAULT_GROUP_HISTORY_LIMIT, |l| l as usize),
            typing: config.session.typing_mode.or(defaults.typing_mode) != Some(TypingMode::Never),
            typing_interval_ms: u64::from(
                config
                    .session
                    .typing_interval_seconds
                    .or(defaults.typing_interval_seconds)
                    .unwrap_or(DEFAULT_TYPING_INTERVAL_SECONDS),
            ) * 1000,
            group_system_prompt: None,
            skill_filter: None,
            agent_override: None,
            preview_chunk: None,
        };
        match channel {
            "telegram" => settings.apply_telegram(config, account_id),
            "discord" => settings.apply_discord(config, account_id),
            "slack" => settings.apply_slack(config, account_id),
            "matrix" => settings.apply_matrix(config, account_id),
            "signal" => settings.apply_signal(config, account_id),
            "whatsapp" => settings.apply_whatsapp(config, account_id),
            // The web chat is the gateway's own operators: always admitted.
            "webchat" => {
                settings.access.dm_policy = DmPolicy::Open;
                settings.access.allow_from = vec!["*".into()];
            }
            _ => {}
        }
        settings.ack_reaction = settings.ack_reaction.filter(|e| !e.trim().is_empty());
        settings
    }

    /// What the agent answering a message adds: its own `humanDelay` keys over
    /// `agents.defaults.humanDelay`'s, key by key (upstream's merge).
    pub fn for_agent(mut self, config: &Config, agent_id: &str) -> ChannelSettings {
        if let Some(own) = config
            .agents
            .entry(agent_id)
            .and_then(|a| a.human_delay.as_ref())
        {
            let base = &self.human_delay;
            self.human_delay = HumanDelayConfig {
                mode: own.mode.or(base.mode),
                min_ms: own.min_ms.or(base.min_ms),
                max_ms: own.max_ms.or(base.max_ms),
            };
        }
        self
    }

    /// The ack reaction for an admitted message, if its scope covers it.
    pub fn ack_reaction_for(&self, is_group: bool, mentioned: bool) -> Option<&str> {
        let covered = match self.ack_reaction_scope {
            AckReactionScope::All => true,
            AckReactionScope::Direct => !is_group,
            AckReactionScope::GroupAll => is_group,
            AckReactionScope::GroupMentions => is_group && mentioned,
            AckReactionScope::Off | AckReactionScope::None => false,
        };
        covered.then_some(self.ack_reaction.as_deref()).flatten()
    }

    /// The account's `streaming.block.enabled` over the agents' default,
    /// its `streaming.block.coalesce` over `blockStreamingCoalesce`, and its
    /// `streaming.preview.chunk`.
    pub(super) fn apply_block_streaming(
        &mut self,
        enabled: Option<bool>,
        streaming: Option<&dyn StreamingKeys>,
    ) {
        if let Some(enabled) = enabled {
            self.block_streaming = enabled;
        }
        let coalesce = streaming
            .and_then(|s| s.block())
            .and_then(|b| b.coalesce.clone());
        if coalesce.is_some() {
            self.block_coalesce = coalesce;
        }
        self.preview_chunk = streaming.and_then(|s| s.preview_chunk()).cloned();
    }

    /// The outbound limits: the account's `textChunkLimit` clamped to the
    /// adapter's hard cap (the cap itself when unset), and its
    /// `maxLinesPerMessage` where the platform folds long messages, and its
    /// chunk mode.
    pub fn text_limits(&self, adapter: crate::channels::TextLimits) -> crate::channels::TextLimits {
        crate::channels::TextLimits {
            max_chars: self
                .text_chunk_limit
                .map_or(adapter.max_chars, |limit| limit.clamp(1, adapter.max_chars)),
            max_lines: self
                .max_lines_per_message
                .filter(|lines| *lines > 0)
                .or(adapter.max_lines),
            chunk_mode: self.chunk_mode,
        }
    }
}

/// Group activation from a resolved `requireMention`.
pub(super) fn activation(require_mention: bool) -> GroupActivation {
    if require_mention {
        GroupActivation::Mention
    } else {
        GroupActivation::All
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telegram_account_keys_reach_the_access_policy() {
        let config = crate::config::parse_str(
            r#"{ channels: { telegram: { botToken: "t", dmPolicy: "allowlist", allowFrom: [42],
                 groupPolicy: "open", textChunkLimit: 1000, streaming: "off",
                 groups: { "-100": { requireMention: false } } } } }"#,
            "test",
        )
        .expect("config");
        let settings = ChannelSettings::resolve(&config, "telegram", "default");
        assert_eq!(settings.access.dm_policy, DmPolicy::Allowlist);
        assert_eq!(settings.access.allow_from, vec!["42".to_string()]);
        assert_eq!(settings.access.group_policy, GroupPolicy::Open);
        assert_eq!(settings.streaming, StreamingMode::Off);
        let limits = settings.text_limits(crate::channels::TextLimits {
            max_chars: 4096,
            max_lines: None,
            chunk_mode: ChunkMode::Length,
        });
        assert_eq!(limits.max_chars, 1000);
        assert_eq!(settings.coalesce_defaults, None);
        let discord = ChannelSettings::resolve(&config, "discord", "default");
        assert_eq!(
            discord.coalesce_defaults.map(|d| d.min_chars),
            Some(CHANNEL_COALESCE_MIN_CHARS)
        );
        let unknown = ChannelSettings::resolve(&config, "irc", "default");
        assert_eq!(unknown.access.dm_policy, DmPolicy::Pairing);
        assert_eq!(
            unknown.retry.backoff.initial(),
            std::time::Duration::from_millis(500)
        );
    }

    #[test]
    fn an_agents_human_delay_keys_override_the_defaults_one_by_one() {
        use crate::config::schema::common::HumanDelayMode;
        let config = crate::config::parse_str(
            r#"{ agents: { defaults: { humanDelay: { mode: "custom", minMs: 100, maxMs: 200 } },
                 list: [ { id: "main" }, { id: "slow", humanDelay: { maxMs: 900 } },
                         { id: "quiet", humanDelay: { mode: "off" } } ] } }"#,
            "test",
        )
        .expect("config");
        let delay = |agent: &str| {
            ChannelSettings::resolve(&config, "telegram", "default")
                .for_agent(&config, agent)
                .human_delay
        };
        let main = delay("main");
        assert_eq!(
            (main.mode, main.min_ms, main.max_ms),
            (Some(HumanDelayMode::Custom), Some(100), Some(200))
        );
        let slow = delay("slow");
        assert_eq!(
            (slow.mode, slow.min_ms, slow.max_ms),
            (Some(HumanDelayMode::Custom), Some(100), Some(900))
        );
        assert_eq!(delay("quiet").mode, Some(HumanDelayMode::Off));
    }

    #[test]
    fn chunk_mode_comes_from_the_account_then_the_channel() {
        let config = crate::config::parse_str(
            r#"{ channels: {
                 telegram: { botToken: "t", chunkMode: "newline",
                   accounts: { plain: { botToken: "u", chunkMode: "length" }, inherits: { botToken: "v" } } },
                 discord: { token: "d", streaming: { mode: "off", chunkMode: "newline" }, chunkMode: "length" },
                 slack: { botToken: "xoxb-1", appToken: "xapp-1" } } }"#,
            "test",
        )
        .expect("config");
        let mode = |channel: &str, account: &str| {
            let settings = ChannelSettings::resolve(&config, channel, account);
            let adapter = crate::channels::TextLimits {
                max_chars: 4000,
                max_lines: None,
                chunk_mode: ChunkMode::Length,
            };
            settings.text_limits(adapter).chunk_mode
        };
        assert_eq!(mode("telegram", "plain"), ChunkMode::Length);
        assert_eq!(mode("telegram", "inherits"), ChunkMode::Newline);
        // `streaming.chunkMode` (upstream's current key) wins over the flat one.
        assert_eq!(mode("discord", "default"), ChunkMode::Newline);
        assert_eq!(mode("slack", "default"), ChunkMode::Length);
        assert_eq!(mode("webchat", "default"), ChunkMode::Length);
    }

    #[test]
    fn slack_channels_map_is_the_group_allowlist() {
        let config = crate::config::parse_str(
            r#"{ channels: { slack: { botToken: "xoxb-1", appToken: "xapp-1",
                 channels: { C1: { requireMention: true } } } } }"#,
            "test",
        )
        .expect("config");
        let settings = ChannelSettings::resolve(&config, "slack", "default");
        assert_eq!(settings.access.allowed_groups, vec!["C1".to_string()]);
    }

    #[test]
    fn block_streaming_is_off_unless_the_agents_default_or_the_account_enables_it() {
        let config = crate::config::parse_str(
            r#"{ channels: { telegram: { botToken: "t" }, discord: { token: "d" },
                 slack: { botToken: "xoxb-1", appToken: "xapp-1" } } }"#,
            "test",
        )
        .expect("config");
        for channel in ["telegram", "discord", "slack"] {
            let settings = ChannelSettings::resolve(&config, channel, "default");
            assert!(!settings.block_streaming, "{channel}");
            assert_eq!(settings.reply_to_mode, ReplyToMode::Off, "{channel}");
        }
        let preview =
            |channel: &str| ChannelSettings::resolve(&config, channel, "default").streaming;
        assert_eq!(preview("telegram"), StreamingMode::Partial);
        assert_eq!(preview("slack"), StreamingMode::Partial);
        assert_eq!(preview("discord"), StreamingMode::Off);
        let config = crate::config::parse_str(
            r#"{ agents: { defaults: { blockStreamingDefault: "on" } },
                 channels: { telegram: { botToken: "t", replyToMode: "first" },
                   discord: { token: "d", streaming: { mode: "off",
                     block: { enabled: false, coalesce: { minChars: 10 } } } } } }"#,
            "test",
        )
        .expect("config");
        let telegram = ChannelSettings::resolve(&config, "telegram", "default");
        assert!(telegram.block_streaming);
        assert_eq!(telegram.reply_to_mode, ReplyToMode::First);
        let discord = ChannelSettings::resolve(&config, "discord", "default");
        assert!(!discord.block_streaming);
        assert_eq!(discord.block_coalesce.and_then(|c| c.min_chars), Some(10));
    }

    #[test]
    fn dm_enabled_false_answers_no_direct_message() {
        let config = crate::config::parse_str(
            r#"{ channels: { discord: { token: "d", dmPolicy: "open", allowFrom: ["*"], dm: { enabled: false } },
                 slack: { botToken: "xoxb-1", appToken: "xapp-1", dm: { enabled: false } } } }"#,
            "test",
        )
        .expect("config");
        for channel in ["discord", "slack"] {
            let settings = ChannelSettings::resolve(&config, channel, "default");
            assert_eq!(settings.access.dm_policy, DmPolicy::Disabled, "{channel}");
        }
    }
}
