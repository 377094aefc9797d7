//! The `agents` section: shared defaults for every agent (`agents.defaults`)
//! and the agent list (`agents.list`), with the model reference shape
//! (`"provider/model"` or `{primary, fallbacks}`).
//!
//! Keys are the subset of OpenClaw's `AgentDefaultsConfig` / `AgentConfig`
//! that pincer implements (model, workspace, limits, heartbeat, memory
//! search, sandbox, subagents, compaction, pruning, reply streaming).
//! Heartbeat, subagent and sandbox shapes live in `automation.rs` and
//! `sandbox.rs`; cross-field checks live in `validate.rs`.

use std::fmt;
use std::path::PathBuf;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::automation::{AgentSubagentsConfig, HeartbeatConfig, SubagentsConfig};
use super::common::{
    AgentGroupChatConfig, BlockStreamingChunk, BlockStreamingCoalesce, HumanDelayConfig, TypingMode,
};
use super::memory::MemorySearchConfig;
use super::sandbox::SandboxConfig;
use super::tools::AgentToolsConfig;

/// Agent id used when no agent is configured.
pub const DEFAULT_AGENT_ID: &str = "main";
/// Upstream default for concurrent agent runs across conversations.
pub const DEFAULT_AGENT_MAX_CONCURRENT: u32 = 4;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AgentsConfig {
    pub defaults: AgentDefaults,
    pub list: Vec<AgentEntry>,
}

impl AgentsConfig {
    /// The agent with `default: true`, else the first listed, else `"main"`.
    pub fn default_agent_id(&self) -> String {
        self.list
            .iter()
            .find(|agent| agent.default)
            .or_else(|| self.list.first())
            .map(|agent| agent.id.clone())
            .unwrap_or_else(|| DEFAULT_AGENT_ID.to_string())
    }

    /// The listed agent with this id.
    pub fn entry(&self, agent_id: &str) -> Option<&AgentEntry> {
        self.list.iter().find(|agent| agent.id == agent_id)
    }

    /// The model for `agent_id`: its own, else `agents.defaults.model`.
    pub fn model_for(&self, agent_id: &str) -> Option<&AgentModelConfig> {
        self.entry(agent_id)
            .and_then(|agent| agent.model.as_ref())
            .or(self.defaults.model.as_ref())
    }
}

/// A model reference: `"provider/model"` or `{primary, fallbacks}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum AgentModelConfig {
    Ref(String),
    Chain(ModelChain),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ModelChain {
    pub primary: Option<String>,
    pub fallbacks: Vec<String>,
}

impl AgentModelConfig {
    /// The primary `provider/model`, if one is named.
    pub fn primary(&self) -> Option<&str> {
        match self {
            AgentModelConfig::Ref(model) => Some(model.as_str()),
            AgentModelConfig::Chain(chain) => chain.primary.as_deref(),
        }
    }

    /// Models to try, in order, when the primary fails.
    pub fn fallbacks(&self) -> &[String] {
        match self {
            AgentModelConfig::Ref(_) => &[],
            AgentModelConfig::Chain(chain) => &chain.fallbacks,
        }
    }
}

impl<'de> Deserialize<'de> for AgentModelConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(AgentModelVisitor)
    }
}

struct AgentModelVisitor;

impl<'de> Visitor<'de> for AgentModelVisitor {
    type Value = AgentModelConfig;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a \"provider/model\" string or an object with primary/fallbacks")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(AgentModelConfig::Ref(v.to_string()))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        ModelChain::deserialize(de::value::MapAccessDeserializer::new(map))
            .map(AgentModelConfig::Chain)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AgentDefaults {
    pub model: Option<AgentModelConfig>,
    /// Working directory for agent runs.
    pub workspace: Option<PathBuf>,
    /// Skills every agent may load (absent: all).
    pub skills: Option<Vec<String>>,
    /// IANA timezone of the user, for the system prompt.
    pub user_timezone: Option<String>,
    pub timeout_seconds: Option<u32>,
    /// Context window cap used for estimates.
    pub context_tokens: Option<u32>,
    /// Most characters of one workspace bootstrap file in the system prompt.
    pub bootstrap_max_chars: Option<u32>,
    /// Most characters of all bootstrap files together.
    pub bootstrap_total_max_chars: Option<u32>,
    /// off | minimal | low | medium | high | xhigh | adaptive.
    pub thinking_default: Option<String>,
    /// Concurrent agent runs across all conversations (upstream default 4).
    pub max_concurrent: Option<u32>,
    pub heartbeat: Option<HeartbeatConfig>,
    pub memory_search: Option<MemorySearchConfig>,
    pub sandbox: Option<SandboxConfig>,
    pub subagents: Option<SubagentsConfig>,
    pub compaction: Option<CompactionConfig>,
    pub context_pruning: Option<ContextPruningConfig>,
    /// off | on.
    pub block_streaming_default: Option<String>,
    /// text_end | message_end.
    pub block_streaming_break: Option<String>,
    pub block_streaming_chunk: Option<BlockStreamingChunk>,
    pub block_streaming_coalesce: Option<BlockStreamingCoalesce>,
    pub human_delay: Option<HumanDelayConfig>,
    pub typing_mode: Option<TypingMode>,
    pub typing_interval_seconds: Option<u32>,
    /// Largest inbound attachment the agent sees, in MB.
    pub media_max_mb: Option<f64>,
}

impl AgentDefaults {
    /// `maxConcurrent`, else upstream's default of 4.
    pub fn effective_max_concurrent(&self) -> u32 {
        self.max_concurrent.unwrap_or(DEFAULT_AGENT_MAX_CONCURRENT)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AgentEntry {
    pub id: String,
    /// The agent that handles unrouted messages.
    pub default: bool,
    pub name: Option<String>,
    pub workspace: Option<PathBuf>,
    pub model: Option<AgentModelConfig>,
    pub thinking_default: Option<String>,
    pub skills: Option<Vec<String>>,
    pub memory_search: Option<MemorySearchConfig>,
    pub human_delay: Option<HumanDelayConfig>,
    pub heartbeat: Option<HeartbeatConfig>,
    pub group_chat: Option<AgentGroupChatConfig>,
    pub subagents: Option<AgentSubagentsConfig>,
    pub sandbox: Option<SandboxConfig>,
    pub tools: Option<AgentToolsConfig>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompactionMode {
    Default,
    Safeguard,
}

/// Summarising old turns when the context window fills.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CompactionConfig {
    pub mode: Option<CompactionMode>,
    pub reserve_tokens: Option<u32>,
    pub keep_recent_tokens: Option<u32>,
    pub reserve_tokens_floor: Option<u32>,
    pub custom_instructions: Option<String>,
    /// Model used for the summary (default: the agent's).
    pub model: Option<String>,
    pub timeout_seconds: Option<u32>,
    pub memory_flush: Option<MemoryFlushConfig>,
}

/// The agentic turn that saves memories before compaction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemoryFlushConfig {
    pub enabled: Option<bool>,
    pub soft_threshold_tokens: Option<u32>,
    pub prompt: Option<String>,
    pub system_prompt: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ContextPruningMode {
    Off,
    CacheTtl,
}

/// Trimming of old tool results from the model context.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ContextPruningConfig {
    pub mode: Option<ContextPruningMode>,
    /// Duration text, default unit minutes.
    pub ttl: Option<String>,
    pub keep_last_assistants: Option<u32>,
    pub soft_trim_ratio: Option<f64>,
    pub hard_clear_ratio: Option<f64>,
    pub min_prunable_tool_chars: Option<u32>,
    pub tools: Option<super::common::AllowDeny>,
    pub soft_trim: Option<SoftTrimConfig>,
    pub hard_clear: Option<HardClearConfig>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SoftTrimConfig {
    pub max_chars: Option<u32>,
    pub head_chars: Option<u32>,
    pub tail_chars: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct HardClearConfig {
    pub enabled: Option<bool>,
    pub placeholder: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, default: bool) -> AgentEntry {
        AgentEntry {
            id: id.to_string(),
            default,
            ..AgentEntry::default()
        }
    }

    #[test]
    fn default_agent_is_main_without_a_list() {
        assert_eq!(AgentsConfig::default().default_agent_id(), "main");
    }

    #[test]
    fn default_agent_is_the_flagged_entry_else_the_first() {
        let mut agents = AgentsConfig {
            list: vec![entry("work", false), entry("home", true)],
            ..AgentsConfig::default()
        };
        assert_eq!(agents.default_agent_id(), "home");
        agents.list[1].default = false;
        assert_eq!(agents.default_agent_id(), "work");
    }

    #[test]
    fn model_string_and_object_forms_both_parse() {
        let plain: AgentModelConfig =
            serde_json::from_str("\"anthropic/claude\"").expect("string form");
        assert_eq!(plain.primary(), Some("anthropic/claude"));
        assert!(plain.fallbacks().is_empty());
        let chain: AgentModelConfig =
            serde_json::from_str(r#"{"primary":"a/b","fallbacks":["c/d"]}"#).expect("object form");
        assert_eq!(chain.primary(), Some("a/b"));
        assert_eq!(chain.fallbacks(), ["c/d".to_string()]);
    }

    #[test]
    fn model_object_with_unknown_key_is_refused() {
        let err = serde_json::from_str::<AgentModelConfig>(r#"{"primry":"a/b"}"#)
            .expect_err("unknown key");
        assert!(err.to_string().contains("unknown field `primry`"), "{err}");
    }

    #[test]
    fn agent_model_falls_back_to_defaults() {
        let agents = AgentsConfig {
            defaults: AgentDefaults {
                model: Some(AgentModelConfig::Ref("a/default".into())),
                ..AgentDefaults::default()
            },
            list: vec![AgentEntry {
                model: Some(AgentModelConfig::Ref("b/own".into())),
                ..entry("own", false)
            }],
        };
        assert_eq!(
            agents.model_for("own").and_then(|m| m.primary()),
            Some("b/own")
        );
        assert_eq!(
            agents.model_for("other").and_then(|m| m.primary()),
            Some("a/default")
        );
    }
}
