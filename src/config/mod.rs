//! pincer's configuration: OpenClaw-compatible JSON5 (`pincer.json5`), read
//! into a typed tree with OpenClaw's key names and defaults, validated with
//! errors that name the file and the JSON path, watched for hot reload, and
//! importable from an existing OpenClaw config.
//!
//! This module is the only place in the crate that reads environment
//! variables (config path, `OPENCLAW_GATEWAY_*` overrides, `${VAR}`
//! substitution). It never starts services: callers get values and events.

mod de;
pub mod duration;
mod env;
mod error;
mod handle;
mod import;
mod load;
pub mod patch;
pub mod redact;
mod register;
mod reload;
pub mod schema;
mod strict;
mod trace;
mod unsupported;
mod validate;
mod validate_agents;
mod validate_channels;

use serde::{Deserialize, Serialize};

pub use error::ConfigError;
pub use handle::ConfigHandle;
pub use import::{import_openclaw, ImportReport};
pub use load::{
    apply_env_overrides, candidate_paths, load, load_from, parse_json5, parse_str,
    parse_str_with_env, parse_value, write_atomic, LoadedConfig,
};
pub use patch::{changed_paths, merge_patch, restart_required};
pub use redact::{redact_file, restore_redacted, REDACTED_SENTINEL};
pub use register::{describe as describe_key, render as render_register};
pub use reload::{spawn_watcher, ReloadEvent, POLL_INTERVAL_MS, RELOAD_CHANNEL_CAPACITY};
pub use schema::*;
pub use trace::accepted_keys;
pub use unsupported::{is_unsupported, UNSUPPORTED_KEYS};

/// The whole config file. Unknown keys are errors; `$schema` is accepted
/// and ignored; `meta` is kept as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Config {
    /// Editor schema hint; ignored.
    #[serde(rename = "$schema", skip_serializing)]
    pub schema: Option<String>,
    /// Upstream bookkeeping (`lastTouchedVersion`, …), kept untouched.
    pub meta: Option<serde_json::Map<String, serde_json::Value>>,
    pub gateway: GatewayConfig,
    pub agents: AgentsConfig,
    pub models: ModelsConfig,
    pub session: SessionConfig,
    pub bindings: Vec<Binding>,
    pub broadcast: BroadcastConfig,
    pub channels: ChannelsConfig,
    pub messages: MessagesConfig,
    pub commands: CommandsConfig,
    pub cron: CronConfig,
    pub tools: ToolsConfig,
    pub memory: MemoryConfig,
    pub logging: LoggingConfig,
    pub discovery: DiscoveryConfig,
    /// Spoken replies (`schema/tts.rs`).
    pub tts: TtsConfig,
}

impl Config {
    /// Memory search settings for one agent: upstream defaults, then
    /// `memory.search`, then `agents.defaults.memorySearch`, then the
    /// agent's own `memorySearch`, later layers winning key by key.
    pub fn memory_search_for(&self, agent_id: &str) -> ResolvedMemorySearch {
        let layers = [
            self.memory.search.as_ref(),
            self.agents.defaults.memory_search.as_ref(),
            self.agents
                .entry(agent_id)
                .and_then(|agent| agent.memory_search.as_ref()),
        ];
        MemorySearchConfig::layered(layers.into_iter().flatten()).resolve()
    }
}
