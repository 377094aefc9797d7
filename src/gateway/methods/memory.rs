//! `memory.status` and `memory.search` for the Control UI: the same service and tool function the agent
//! uses, for one agent (`agentId`, default the default agent).
//!
//! Services and their watchers live in `GatewayState::memory` (started with the gateway, updated on config
//! reload). Also the `/new` session flush glue. This file must not index or rank by itself.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::agent::models;
use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;
use crate::memory::tools::{self, ToolError};
use crate::agent::session_note as flush;
use crate::memory::MemoryService;
use crate::store::SessionEntry;

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
    let service = state.memory.service(&config, &agent_id);
    // Answers wait for the first sync of this process (the watcher's, or this one).
    if let Err(error) = service.ensure_synced() {
        log::warn!("memory: sync for agent {agent_id} failed: {error}");
    }
    Ok(service)
}

/// On `/new` / `sessions.reset`: saves the closing session's last messages as a dated memory note of its agent
/// (`agent::session_note`), with a slug from the agent's model, in the background. Only when the agent's memory
/// search is enabled and the session has a transcript.
pub fn flush_closing_session(state: &GatewayState, key: &str, closing: &SessionEntry) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let config = state.config();
    let agent_id = crate::routing::session_key::agent_of_key(key)
        .map_or_else(|| config.agents.default_agent_id(), str::to_string);
    let service = state.memory.service(&config, &agent_id);
    if !service.settings().enabled {
        return;
    }
    let session = flush::ClosingSession {
        session_key: key.to_string(),
        session_id: closing.session_id.clone(),
        source: closing
            .last_channel
            .clone()
            .or_else(|| closing.channel.clone()),
        closed_at_ms: crate::system::clock::now_ms(),
    };
    let store = state.store.clone();
    let http = state.http();
    let task = async move {
        let (reader, session_id) = (store, session.session_id.clone());
        let read = tokio::task::spawn_blocking(move || {
            flush::recent_conversation(&reader, &session_id, flush::DEFAULT_SESSION_MESSAGES)
        })
        .await;
        let key = session.session_key.clone();
        let conversation = match read {
            Ok(Ok(lines)) if !lines.is_empty() => lines,
            Ok(Ok(_)) => return,
            Ok(Err(error)) => {
                log::warn!("memory: cannot read the closing session {key}: {error}");
                return;
            }
            Err(error) => {
                log::warn!("memory: reading the closing session {key} failed: {error}");
                return;
            }
        };
        let slug = match models::resolve_chain(&config, &agent_id, None, &http) {
            Ok(chain) => flush::slug_for(&chain[0], &conversation).await,
            Err(_) => None,
        };
        let saved = tokio::task::spawn_blocking(move || {
            flush::save_session_summary(
                service.workspace(),
                &session,
                &conversation,
                slug.as_deref(),
            )
        })
        .await;
        match saved {
            Ok(Ok(path)) => log::info!("memory: session {key} saved to {}", path.display()),
            Ok(Err(error)) => log::warn!("memory: cannot save the closing session {key}: {error}"),
            Err(error) => log::warn!("memory: saving the closing session {key} failed: {error}"),
        }
    };
    state.tasks.spawn_on(task, &runtime);
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
        Some(state.memory.service(config, agent_id))
    }
}
