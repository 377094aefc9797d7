//! The `session` section: how conversations map to sessions (DM scope, main
//! key, identity links), when they reset, and how the session store is kept
//! bounded (`session.maintenance`).
//!
//! Names and defaults follow OpenClaw's `SessionConfig` and
//! `store-maintenance.ts` (prune after 30 days, at most 500 entries);
//! `agentToAgent.maxPingPongTurns` defaults to 5, its upper bound.
//! Duration and size text is validated in `validate.rs`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::common::TypingMode;
use crate::config::de;
use crate::config::duration::{parse_byte_size, parse_duration_ms, DurationUnit};

/// Default age after which session entries are pruned.
pub const DEFAULT_PRUNE_AFTER: &str = "30d";
/// Default age after which session entries are pruned, in milliseconds.
pub const DEFAULT_PRUNE_AFTER_MS: u64 = 30 * 86_400_000;
/// Default cap on stored session entries.
pub const DEFAULT_SESSION_MAX_ENTRIES: u32 = 500;
/// Share of `maxDiskBytes` cleanup shrinks the store to, when no
/// `highWaterBytes` is given.
pub const DEFAULT_HIGH_WATER_RATIO: f64 = 0.8;

/// How direct messages map to sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DmScope {
    /// Every DM shares the agent's main session.
    #[default]
    Main,
    PerPeer,
    PerChannelPeer,
    PerAccountChannelPeer,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SessionConfig {
    /// "per-sender" or "global".
    pub scope: Option<String>,
    pub dm_scope: DmScope,
    pub main_key: String,
    /// Canonical peer → platform-prefixed identities ("telegram:123").
    pub identity_links: BTreeMap<String, Vec<String>>,
    /// Messages that start a fresh session, besides `/new` and `/reset` (case-insensitive; text after
    /// the trigger becomes the new session's first message).
    pub reset_triggers: Vec<String>,
    /// Legacy idle window in minutes (upstream moved it to `reset.idleMinutes`); idle mode when no
    /// `reset`/`resetByType` is set.
    pub idle_minutes: Option<u32>,
    pub reset: Option<SessionResetConfig>,
    pub reset_by_type: Option<SessionResetByType>,
    pub reset_by_channel: BTreeMap<String, SessionResetConfig>,
    pub typing_interval_seconds: Option<u32>,
    pub typing_mode: Option<TypingMode>,
    pub maintenance: SessionMaintenance,
    pub agent_to_agent: SessionAgentToAgent,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            scope: None,
            dm_scope: DmScope::Main,
            main_key: "main".to_string(),
            identity_links: BTreeMap::new(),
            reset_triggers: Vec::new(),
            idle_minutes: None,
            reset: None,
            reset_by_type: None,
            reset_by_channel: BTreeMap::new(),
            typing_interval_seconds: None,
            typing_mode: None,
            maintenance: SessionMaintenance::default(),
            agent_to_agent: SessionAgentToAgent::default(),
        }
    }
}

/// Default and largest number of reply rounds after a `sessions_send`.
pub const MAX_PING_PONG_TURNS: u8 = 5;

/// `session.agentToAgent`: the conversation that follows a `sessions_send`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SessionAgentToAgent {
    /// Reply rounds between the two sessions after the first reply (0–5).
    pub max_ping_pong_turns: u8,
}

impl Default for SessionAgentToAgent {
    fn default() -> Self {
        SessionAgentToAgent {
            max_ping_pong_turns: MAX_PING_PONG_TURNS,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionResetMode {
    /// No automatic reset (upstream's default).
    None,
    Daily,
    Idle,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SessionResetConfig {
    pub mode: Option<SessionResetMode>,
    /// Local hour (0–23) of the daily reset.
    pub at_hour: Option<u8>,
    pub idle_minutes: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SessionResetByType {
    pub direct: Option<SessionResetConfig>,
    /// Deprecated upstream alias of `direct`.
    pub dm: Option<SessionResetConfig>,
    pub group: Option<SessionResetConfig>,
    pub thread: Option<SessionResetConfig>,
}

/// Bounds on the session store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SessionMaintenance {
    /// "enforce" (the default, as upstream) or "warn" (report only, delete nothing).
    pub mode: Option<String>,
    /// Age after which entries are pruned ("30d", "12h"; bare number = days).
    #[serde(deserialize_with = "de::opt_text_or_number")]
    pub prune_after: Option<String>,
    pub max_entries: u32,
    /// Disk budget for session data ("500mb"); none by default.
    #[serde(deserialize_with = "de::opt_text_or_number")]
    pub max_disk_bytes: Option<String>,
    /// Size cleanup shrinks to once over budget (default 80% of the budget).
    #[serde(deserialize_with = "de::opt_text_or_number")]
    pub high_water_bytes: Option<String>,
}

impl Default for SessionMaintenance {
    fn default() -> Self {
        SessionMaintenance {
            mode: None,
            prune_after: Some(DEFAULT_PRUNE_AFTER.to_string()),
            max_entries: DEFAULT_SESSION_MAX_ENTRIES,
            max_disk_bytes: None,
            high_water_bytes: None,
        }
    }
}

impl SessionMaintenance {
    /// `pruneAfter` in milliseconds (30 days when unset).
    pub fn prune_after_ms(&self) -> u64 {
        self.prune_after
            .as_deref()
            .and_then(|text| parse_duration_ms(text, DurationUnit::Days).ok())
            .unwrap_or(DEFAULT_PRUNE_AFTER_MS)
    }

    /// The disk budget in bytes, if one is set.
    pub fn max_disk_bytes(&self) -> Option<u64> {
        self.max_disk_bytes
            .as_deref()
            .and_then(|text| parse_byte_size(text).ok())
    }

    /// The size cleanup shrinks to: `highWaterBytes` capped at the budget,
    /// else 80% of the budget; `None` without a budget.
    pub fn high_water_bytes(&self) -> Option<u64> {
        let budget = self.max_disk_bytes()?;
        let configured = self
            .high_water_bytes
            .as_deref()
            .and_then(|text| parse_byte_size(text).ok());
        Some(match configured {
            Some(bytes) => bytes.min(budget),
            None => ((budget as f64) * DEFAULT_HIGH_WATER_RATIO).floor() as u64,
        })
    }

    /// Whether maintenance deletes (`enforce`, the default) or only warns (`warn`).
    pub fn enforces(&self) -> bool {
        self.mode.as_deref() != Some("warn")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_openclaw() {
        let session = SessionConfig::default();
        assert_eq!(session.dm_scope, DmScope::Main);
        assert_eq!(session.main_key, "main");
        assert_eq!(session.maintenance.prune_after.as_deref(), Some("30d"));
        assert_eq!(session.maintenance.prune_after_ms(), 30 * 86_400_000);
        assert_eq!(session.maintenance.max_entries, 500);
        assert_eq!(session.maintenance.max_disk_bytes(), None);
        assert!(session.maintenance.enforces());
    }

    #[test]
    fn prune_after_and_disk_budget_parse_like_upstream() {
        let maintenance: SessionMaintenance =
            serde_json::from_str(r#"{"pruneAfter": "12h", "maxDiskBytes": "500mb"}"#)
                .expect("text forms");
        assert_eq!(maintenance.prune_after_ms(), 12 * 3_600_000);
        assert_eq!(maintenance.max_disk_bytes(), Some(500 * 1024 * 1024));
        assert_eq!(maintenance.high_water_bytes(), Some(400 * 1024 * 1024));
        let maintenance: SessionMaintenance =
            serde_json::from_str(r#"{"pruneAfter": 7, "maxDiskBytes": 1000}"#)
                .expect("number forms");
        assert_eq!(maintenance.prune_after_ms(), 7 * 86_400_000);
        assert_eq!(maintenance.max_disk_bytes(), Some(1000));
    }

    #[test]
    fn dm_scope_uses_kebab_names() {
        let session: SessionConfig =
            serde_json::from_str(r#"{"dmScope": "per-account-channel-peer"}"#).expect("kebab name");
        assert_eq!(session.dm_scope, DmScope::PerAccountChannelPeer);
    }
}
