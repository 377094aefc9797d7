//! `memory.status` and `memory.search` for the Control UI: the same service and tool function the agent
//! uses, for one agent (`agentId`, default the default agent).
//!
//! The first call for an agent creates its service, indexes, and starts its watcher (debounced syncs on
//! change) under the gateway's shutdown token. This file must not index or rank by itself.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;
use crate::memory::tools::{self, ToolError};
use crate::memory::{registry, MemoryService};

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
    let (service, created) =
        registry::service_for(&state.store, &config, &agent_id, &state.data_dir);
    if created && service.settings().enabled {
        // The first call indexes before answering (handlers run where blocking is allowed); the watcher then
        // keeps the index fresh.
        if let Err(error) = service.sync(false, &mut |_| {}) {
            log::warn!("memory: initial sync for agent {agent_id} failed: {error}");
        }
        start_watcher(state, &service);
    }
    Ok(service)
}

/// Starts the sync-on-start + debounced watcher of `service` on the gateway's task tracker.
pub fn start_watcher(state: &Arc<GatewayState>, service: &Arc<MemoryService>) {
    if !service.settings().enabled {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let service = Arc::clone(service);
    let cancel = state.shutdown.clone();
    let debounce = std::time::Duration::from_millis(service.settings().watch_debounce_ms);
    let watch = service.settings().watch;
    state.tasks.spawn_on(
        async move {
            if watch {
                crate::memory::watch::run(service, debounce, cancel).await;
            } else {
                let _ = tokio::task::spawn_blocking(move || service.sync(false, &mut |_| {})).await;
            }
        },
        &runtime,
    );
}

fn tool_error(error: ToolError) -> ErrorShape {
    match error {
        ToolError::InvalidArgument { .. } => {
            ErrorShape::invalid(format!("invalid memory.search params: {error}"))
        }
        ToolError::Memory(inner) => ErrorShape::unavailable(inner.to_string()),
    }
}

/// `memory.status { agentId? }` → the agent's `MemoryStatus`.
pub fn status(state: &Arc<GatewayState>, params: &Value) -> Result<Value, ErrorShape> {
    let params = Params::new("memory.status", params)?;
    let service = service(state, &params)?;
    let status = service
        .status()
        .map_err(|e| ErrorShape::unavailable(e.to_string()))?;
    Ok(serde_json::to_value(status).unwrap_or_else(|_| json!({})))
}

/// `memory.search { query, agentId?, maxResults?, minScore? }` → `{ results, mode, fallbackReason? }`.
pub fn search(state: &Arc<GatewayState>, params: &Value) -> Result<Value, ErrorShape> {
    let parsed = Params::new("memory.search", params)?;
    let service = service(state, &parsed)?;
    tools::search(&service, params).map_err(tool_error)
}
