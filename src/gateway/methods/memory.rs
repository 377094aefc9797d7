//! `memory.status` and `memory.search` for the Control UI: the same service and tool function the agent
//! uses, for one agent (`agentId`, default the default agent).
//!
//! Services and their watchers live in `GatewayState::memory` (started with the gateway, updated on config
//! reload). Also the `/new` session flush glue. This file must not index or rank by itself.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;
use crate::memory::tools::{self, MemoryToolError};
use crate::memory::MemoryService;

use super::params::Params;

fn service(
    state: &Arc<GatewayState>,
    params: &Params<'_>,
) -> Result<Arc<MemoryService>, ErrorShape> {
    let config = state.config();
    let agent_id = match params.opt_str("agentId")? {
        Some(id) => {
            let known = id == config.agents.default_agent_id() || config.agents.entry(id).is_some();
            if !known {
                return Err(ErrorShape::invalid(format!("unknown agent id \"{id}\"")));
            }
            id.to_string()
        }
        None => config.agents.default_agent_id(),
    };
    Ok(state.services.memory.service(&config, &agent_id))
}

fn tool_error(error: MemoryToolError) -> ErrorShape {
    match error {
        MemoryToolError::InvalidArgument { .. } => {
            ErrorShape::invalid(format!("invalid memory.search params: {error}"))
        }
        MemoryToolError::Memory(inner) => ErrorShape::unavailable(inner.to_string()),
    }
}

/// `memory.status { agentId? }` → the agent's `MemoryStatus`.
pub fn status(state: &Arc<GatewayState>, params: &Value) -> Result<Value, ErrorShape> {
    let params = Params::new("memory.status", params)?;
    let service = service(state, &params)?;
    // The status waits for the first sync of this process (the watcher's, or this one).
    if let Err(error) = service.ensure_synced() {
        log::warn!(
            "memory: sync for agent {} failed: {error}",
            service.agent_id()
        );
    }
    let status = service
        .status()
        .map_err(|e| ErrorShape::unavailable(e.to_string()))?;
    Ok(serde_json::to_value(status).unwrap_or_else(|_| json!({})))
}

/// `memory.search { query, agentId?, maxResults?, minScore? }` → `{ results, mode, fallbackReason? }`.
pub fn search(state: &Arc<GatewayState>, params: &Value) -> Result<Value, ErrorShape> {
    let parsed = Params::new("memory.search", params)?;
    let service = service(state, &parsed)?;
    // First the index is brought up to date as `sync.onSearch` says.
    if let Err(error) = service.before_search(None) {
        log::warn!(
            "memory: sync for agent {} failed: {error}",
            service.agent_id()
        );
    }
    tools::search(&service, params).map_err(tool_error)
}

/// The agent tools' way to an agent's memory service: the gateway's registry.
pub struct GatewayMemory {
    pub state: std::sync::Weak<GatewayState>,
}

impl crate::tools::memory::MemoryAccess for GatewayMemory {
    fn service(
        &self,
        config: &crate::config::Config,
        agent_id: &str,
    ) -> Option<Arc<MemoryService>> {
        let state = self.state.upgrade()?;
        Some(state.services.memory.service(config, agent_id))
    }
}
