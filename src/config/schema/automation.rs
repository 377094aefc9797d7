//! Background-run settings: the periodic heartbeat
//! (`agents.defaults.heartbeat`, `agents.list[].heartbeat`) and sub-agent
//! limits (`agents.defaults.subagents`, `agents.list[].subagents`).
//!
//! Names and defaults follow OpenClaw's `AgentDefaultsConfig` and
//! `agent-limits.ts`. Duration text is checked in `validate.rs`.

use serde::{Deserialize, Serialize};

use super::agents::AgentModelConfig;
use crate::config::duration::{parse_duration_ms, DurationUnit};

/// Heartbeat interval when none is configured.
pub const DEFAULT_HEARTBEAT_EVERY_MS: u64 = 30 * 60_000;
/// Characters allowed after `HEARTBEAT_OK` before the reply is delivered.
pub const DEFAULT_HEARTBEAT_ACK_MAX_CHARS: u32 = 30;
/// Concurrent sub-agent runs (lane "subagent").
pub const DEFAULT_SUBAGENT_MAX_CONCURRENT: u32 = 8;
/// Nesting depth of `sessions_spawn` chains (1: no nested spawns).
pub const DEFAULT_SUBAGENT_MAX_SPAWN_DEPTH: u32 = 1;
/// Active children one requester session may have.
pub const DEFAULT_SUBAGENT_MAX_CHILDREN: u32 = 5;
/// Minutes after which finished sub-agent sessions are archived.
pub const DEFAULT_SUBAGENT_ARCHIVE_AFTER_MINUTES: u32 = 60;
/// Timeout of the announce call that reports a sub-agent's result.

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirectPolicy {
    Allow,
    Block,
}

/// Periodic background agent turns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct HeartbeatConfig {
    /// Interval as duration text; a bare number means minutes (default 30m).
    pub every: Option<String>,
    pub active_hours: Option<ActiveHours>,
    /// `provider/model` override for heartbeat runs.
    pub model: Option<String>,
    /// Session key the heartbeat runs in ("main" or explicit).
    pub session: Option<String>,
    pub include_reasoning: Option<bool>,
    /// "last", "none" or a channel id.
    pub target: Option<String>,
    pub direct_policy: Option<DirectPolicy>,
    pub to: Option<String>,
    pub account_id: Option<String>,
    pub prompt: Option<String>,
    pub ack_max_chars: Option<u32>,
    pub suppress_tool_error_warnings: Option<bool>,
    pub timeout_seconds: Option<u32>,
    /// Bootstrap only HEARTBEAT.md.
    pub light_context: Option<bool>,
    /// Run without the session's history.
    pub isolated_session: Option<bool>,
}

impl HeartbeatConfig {
    /// The interval in milliseconds (30 minutes when unset). Text that does
    /// not parse was already refused by validation; it reads as the default.
    pub fn every_ms(&self) -> u64 {
        self.every
            .as_deref()
            .and_then(|text| parse_duration_ms(text, DurationUnit::Minutes).ok())
            .unwrap_or(DEFAULT_HEARTBEAT_EVERY_MS)
    }
}

/// Local-time window in which heartbeats run ("HH:MM", end may be "24:00").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ActiveHours {
    pub start: Option<String>,
    pub end: Option<String>,
    /// "user", "local" or an IANA zone (default "user").
    pub timezone: Option<String>,
}

/// Sub-agent limits under `agents.defaults.subagents`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SubagentsConfig {
    /// Agent ids sub-agents may run as ("*" for any).
    pub allow_agents: Vec<String>,
    pub max_concurrent: Option<u32>,
    /// 1–5.
    pub max_spawn_depth: Option<u32>,
    /// 1–20.
    pub max_children_per_agent: Option<u32>,
    /// 0 disables archiving.
    pub archive_after_minutes: Option<u32>,
    pub model: Option<AgentModelConfig>,
    pub thinking: Option<String>,
    /// 0 means no timeout.
    pub run_timeout_seconds: Option<u32>,
    pub require_agent_id: Option<bool>,
}

impl SubagentsConfig {
    pub fn effective_max_concurrent(&self) -> u32 {
        self.max_concurrent
            .unwrap_or(DEFAULT_SUBAGENT_MAX_CONCURRENT)
    }

    pub fn effective_max_spawn_depth(&self) -> u32 {
        self.max_spawn_depth
            .unwrap_or(DEFAULT_SUBAGENT_MAX_SPAWN_DEPTH)
    }

    pub fn effective_max_children_per_agent(&self) -> u32 {
        self.max_children_per_agent
            .unwrap_or(DEFAULT_SUBAGENT_MAX_CHILDREN)
    }

    pub fn effective_archive_after_minutes(&self) -> u32 {
        self.archive_after_minutes
            .unwrap_or(DEFAULT_SUBAGENT_ARCHIVE_AFTER_MINUTES)
    }
}

/// Per-agent sub-agent overrides under `agents.list[].subagents`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AgentSubagentsConfig {
    pub allow_agents: Option<Vec<String>>,
    pub model: Option<AgentModelConfig>,
    pub thinking: Option<String>,
    pub require_agent_id: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_defaults_to_thirty_minutes() {
        assert_eq!(HeartbeatConfig::default().every_ms(), 30 * 60_000);
    }

    #[test]
    fn heartbeat_bare_number_is_minutes() {
        let heartbeat = HeartbeatConfig {
            every: Some("45".into()),
            ..HeartbeatConfig::default()
        };
        assert_eq!(heartbeat.every_ms(), 45 * 60_000);
        let heartbeat = HeartbeatConfig {
            every: Some("2h".into()),
            ..HeartbeatConfig::default()
        };
        assert_eq!(heartbeat.every_ms(), 2 * 3_600_000);
    }

    #[test]
    fn subagent_limits_default_like_upstream() {
        let limits = SubagentsConfig::default();
        assert_eq!(limits.effective_max_concurrent(), 8);
        assert_eq!(limits.effective_max_spawn_depth(), 1);
        assert_eq!(limits.effective_max_children_per_agent(), 5);
        assert_eq!(limits.effective_archive_after_minutes(), 60);
    }
}
