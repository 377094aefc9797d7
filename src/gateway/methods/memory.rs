//! `memory.status`, `memory.search` and `pincer.memory.index` for the Control UI: the same service and tool function the agent
//! uses, for one agent (`agentId`, default the default agent).
//!
//! Services and their watchers live in `GatewayState::memory` (started with the gateway, updated on config
//! reload). Also the `/new` session flush glue. This file must not index or rank by itself.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::gateway::clients::BroadcastOptions;
use crate::gateway::frames::ErrorShape;
use crate::gateway::memory_events::{payload, MEMORY_INDEX_PROGRESS_EVENT};
use crate::gateway::scopes;
use crate::gateway::state::GatewayState;
use crate::memory::tools::{self, MemoryToolError};
use crate::memory::watch::IndexProgress;
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

/// One re-index at a time: the claim, released when dropped.
pub struct ReindexClaim(Arc<std::sync::atomic::AtomicBool>);

impl ReindexClaim {
    /// The claim, unless a re-index holds it already.
    pub fn try_claim(flag: &Arc<std::sync::atomic::AtomicBool>) -> Option<ReindexClaim> {
        use std::sync::atomic::Ordering;
        flag.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| ReindexClaim(Arc::clone(flag)))
    }
}

impl Drop for ReindexClaim {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// `pincer.memory.index { agentId?, force? }`: starts a sync of the agent's
/// memory index now (`force`: every file re-indexed) and answers at once;
/// its progress goes out as `pincer.memory.index.progress` events, the last
/// one with `done`. One re-index runs at a time (a second is refused until
/// it ends). pincer's own: OpenClaw re-indexes from its CLI only.
pub fn index(state: &Arc<GatewayState>, params: &Value) -> Result<Value, ErrorShape> {
    let parsed = Params::new("pincer.memory.index", params)?;
    let force = parsed.opt_bool("force")?.unwrap_or(true);
    let config = state.config();
    let agent_id = match parsed.opt_str("agentId")? {
        Some(id) => {
            let known = id == config.agents.default_agent_id() || config.agents.entry(id).is_some();
            if !known {
                return Err(ErrorShape::invalid(format!("unknown agent id \"{id}\"")));
            }
            id.to_string()
        }
        None => config.agents.default_agent_id(),
    };
    let service = state.services.memory.service(&config, &agent_id);
    if !service.settings().enabled {
        return Err(ErrorShape::invalid(format!(
            "memory search is disabled for agent {agent_id}"
        )));
    }
    let Some(claim) = ReindexClaim::try_claim(&state.memory_reindex) else {
        return Err(
            ErrorShape::unavailable("a memory re-index is already running").retry_after(1000),
        );
    };
    let weak = Arc::downgrade(state);
    let agent = agent_id.clone();
    state.tasks.spawn(async move {
        // Held until the sync ends.
        let _claim = claim;
        let emitter = weak.clone();
        let send = move |step: IndexProgress| {
            if let Some(state) = emitter.upgrade() {
                state.clients.broadcast(
                    MEMORY_INDEX_PROGRESS_EVENT,
                    &payload(&step),
                    BroadcastOptions {
                        drop_if_slow: true,
                        scope: Some(scopes::READ),
                        state_version: None,
                    },
                );
            }
        };
        let step = send.clone();
        let who = agent.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            service.sync(force, &mut |p| {
                step(IndexProgress {
                    agent_id: who.clone(),
                    files_done: p.files_done,
                    files_total: p.files_total,
                    chunks_written: p.chunks_written,
                    done: false,
                    error: None,
                })
            })
        })
        .await;
        let (files, chunks, error) = match outcome {
            Ok(Ok(report)) => (report.files_seen, report.chunks_written, None),
            Ok(Err(e)) => (0, 0, Some(e.to_string())),
            Err(e) => (0, 0, Some(e.to_string())),
        };
        if let Some(error) = &error {
            log::warn!("memory: re-index of agent {agent} failed: {error}");
        }
        send(IndexProgress {
            agent_id: agent,
            files_done: files,
            files_total: files,
            chunks_written: chunks,
            done: true,
            error,
        });
    });
    Ok(json!({"started": true, "agentId": agent_id, "force": force}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn one_reindex_at_a_time() {
        let flag = Arc::new(AtomicBool::new(false));
        let first = ReindexClaim::try_claim(&flag).expect("free");
        assert!(ReindexClaim::try_claim(&flag).is_none(), "held");
        drop(first);
        assert!(ReindexClaim::try_claim(&flag).is_some(), "released");
    }
}
