//! Small value shapes shared by several sections: reply chunking and
//! coalescing, human delay, group chat, DM history, outbound retry, tool
//! policies, identity, and the channel policy enums.
//!
//! Names follow OpenClaw's `types.base.ts` / `zod-schema.core.ts`. Shapes
//! only: nothing here resolves layering between sections.

use serde::{Deserialize, Serialize};

/// Who may DM the bot on a channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DmPolicy {
    /// Unknown senders get a pairing code the owner must approve.
    #[default]
    Pairing,
    /// Only senders in `allowFrom` (or approved by pairing).
    Allowlist,
    /// Anyone (`allowFrom` must contain `"*"`).
    Open,
    /// DMs are ignored.
    Disabled,
}

/// How group messages are admitted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupPolicy {
    Open,
    Disabled,
    #[default]
    Allowlist,
}

/// Threading of replies when reply tags are present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplyToMode {
    Off,
    First,
    All,
    Batched,
}

/// How outbound text is split (`chunkMode`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChunkMode {
    /// Split only where the text exceeds the limit.
    #[default]
    Length,
    /// Every paragraph (blank-line boundary outside code fences) its own
    /// message, then by length (upstream's current meaning; it once split
    /// on every newline).
    Newline,
}

/// Default refresh of the typing indicator (upstream's 6 s).
pub const DEFAULT_TYPING_INTERVAL_SECONDS: u32 = 6;
/// Longest refresh interval accepted.
pub const MAX_TYPING_INTERVAL_SECONDS: u32 = 3_600;

/// When the typing indicator starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TypingMode {
    Never,
    Instant,
    Thinking,
    Message,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BreakPreference {
    Paragraph,
    Newline,
    Sentence,
}

/// Soft block chunking for streamed replies.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct BlockStreamingChunk {
    pub min_chars: Option<u32>,
    pub max_chars: Option<u32>,
    pub break_preference: Option<BreakPreference>,
}

/// Merging of streamed blocks before sending.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct BlockStreamingCoalesce {
    pub min_chars: Option<u32>,
    pub max_chars: Option<u32>,
    /// Flush after this long without new text.
    pub idle_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HumanDelayMode {
    Off,
    Natural,
    Custom,
}

/// Human-like pause between block replies (upstream 800–2500 ms natural).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct HumanDelayConfig {
    pub mode: Option<HumanDelayMode>,
    pub min_ms: Option<u64>,
    pub max_ms: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GroupChatConfig {
    /// Regex patterns (case-insensitive) that count as mentioning the bot
    /// in a group; an agent's list, when set, replaces the global one.
    pub mention_patterns: Option<Vec<String>>,
    /// Group messages kept as context.
    pub history_limit: Option<u32>,
}

/// `agents.list[].groupChat`: an agent's own mention patterns. Upstream also
/// accepts `historyLimit` here and never reads it (only
/// `messages.groupChat.historyLimit` counts), so pincer refuses it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AgentGroupChatConfig {
    /// Replaces `messages.groupChat.mentionPatterns` for this agent.
    pub mention_patterns: Option<Vec<String>>,
}

/// Compiled size allowed for one mention pattern (the regex crate's
/// `size_limit`): a pattern past it is refused, so a hostile or careless
/// pattern cannot take unbounded memory.
pub const MAX_MENTION_PATTERN_BYTES: usize = 256 * 1024;
/// Most mention patterns one list may hold.
pub const MAX_MENTION_PATTERNS: usize = 64;

/// Per-DM overrides keyed by sender id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DmConfig {
    pub history_limit: Option<u32>,
}

/// Default outbound API retry attempts.
pub const DEFAULT_RETRY_ATTEMPTS: u32 = 3;
/// Default first retry delay.
pub const DEFAULT_RETRY_MIN_DELAY_MS: u64 = 400;
/// Default cap on retry delays.
pub const DEFAULT_RETRY_MAX_DELAY_MS: u64 = 30_000;
/// Default jitter factor applied to retry delays.
pub const DEFAULT_RETRY_JITTER: f64 = 0.1;

/// Retry policy for outbound platform API calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RetryConfig {
    pub attempts: u32,
    pub min_delay_ms: u64,
    pub max_delay_ms: u64,
    /// 0..1.
    pub jitter: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            attempts: DEFAULT_RETRY_ATTEMPTS,
            min_delay_ms: DEFAULT_RETRY_MIN_DELAY_MS,
            max_delay_ms: DEFAULT_RETRY_MAX_DELAY_MS,
            jitter: DEFAULT_RETRY_JITTER,
        }
    }
}

/// Base tool profile applied before allow/deny lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolProfile {
    Minimal,
    Coding,
    Messaging,
    Full,
}

/// An allow/deny tool policy (deny wins).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ToolPolicy {
    pub profile: Option<ToolProfile>,
    pub allow: Vec<String>,
    /// Additions to the profile's allowlist (not with `allow`).
    pub also_allow: Vec<String>,
    pub deny: Vec<String>,
}

/// An allow/deny policy without a profile (sandbox, subagents, groups).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AllowDeny {
    pub allow: Vec<String>,
    pub also_allow: Vec<String>,
    pub deny: Vec<String>,
}

/// Wrapper used by `tools.subagents`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ToolsScope {
    pub tools: AllowDeny,
}

/// `tools.sandbox` (and an agent's): the tool policy of sessions a configured
/// sandbox confines. Each list is kept as written, set or not: an unset
/// `allow` means upstream's default allowlist and an unset `deny` its default
/// denylist, while an empty list written out means "none".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SandboxToolsScope {
    pub tools: SandboxToolPolicy,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SandboxToolPolicy {
    pub allow: Option<Vec<String>>,
    pub also_allow: Option<Vec<String>>,
    pub deny: Option<Vec<String>>,
}
