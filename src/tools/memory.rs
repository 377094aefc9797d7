//! `memory_search` and `memory_get`: the agent's way into its long-term
//! memory. The tools only adapt arguments and results; searching, reading
//! and confinement to memory files belong to `memory::tools` and the
//! agent's `MemoryService` (the same functions the `memory.*` methods use).

use std::sync::Arc;

use serde_json::{json, Value};

use super::{Tool, ToolContext, ToolError, ToolFuture, ToolOutput};
use crate::config::Config;
use crate::memory::tools::MemoryToolError;
use crate::memory::MemoryService;

/// Hands out an agent's memory service (the gateway's per-agent registry).
pub trait MemoryAccess: Send + Sync {
    fn service(&self, config: &Config, agent_id: &str) -> Option<Arc<MemoryService>>;
}

pub struct MemorySearchTool;
pub struct MemoryGetTool;

type MemoryCall = fn(&MemoryService, &Value) -> Result<Value, MemoryToolError>;

/// Runs one memory call on the blocking pool (sync, ONNX inference, LMDB); a search first brings the
/// index up to date as `sync.onSearch` / `sync.onSessionStart` say, a read waits for the first sync.
async fn call(
    ctx: &ToolContext,
    args: Value,
    f: MemoryCall,
    search: bool,
) -> Result<ToolOutput, ToolError> {
    let access = ctx.services.memory.clone().ok_or_else(|| {
        ToolError::Failed("memory search is not available in this process".into())
    })?;
    let service = access.service(&ctx.config, &ctx.agent_id).ok_or_else(|| {
        ToolError::Failed("memory search is not available in this process".into())
    })?;
    if !service.settings().enabled {
        return Err(ToolError::Denied(format!(
            "memory search is disabled for agent {} (agents.*.memorySearch.enabled)",
            ctx.agent_id
        )));
    }
    let session_key = ctx.session_key.clone();
    let work = tokio::task::spawn_blocking(move || {
        let synced = if search {
            service.before_search(Some(&session_key))
        } else {
            service.ensure_synced()
        };
        if let Err(error) = synced {
            log::warn!("memory: sync before a tool call failed: {error}");
        }
        f(&service, &args).map_err(|error| match error {
            MemoryToolError::InvalidArgument { .. } => {
                ToolError::InvalidArguments(error.to_string())
            }
            MemoryToolError::Memory(e) => ToolError::Failed(e.to_string()),
        })
    });
    let value = tokio::select! {
        joined = work => joined.map_err(|e| ToolError::Failed(format!("memory call failed: {e}")))??,
        _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
    };
    Ok(ToolOutput {
        text: serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string()),
        details: Some(value),
    })
}

impl Tool for MemorySearchTool {
    fn name(&self) -> &'static str {
        "memory_search"
    }
    fn description(&self) -> &'static str {
        "Search long-term memory (MEMORY.md, memory/*.md and configured notes) before answering questions about past work, decisions, people, preferences or todos. Returns snippets with path and line numbers."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "query": {"type": "string"},
            "maxResults": {"type": "integer", "minimum": 1},
            "minScore": {"type": "number", "minimum": 0, "maximum": 1}
        }, "required": ["query"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(call(ctx, args, crate::memory::tools::search, true))
    }
}

impl Tool for MemoryGetTool {
    fn name(&self) -> &'static str {
        "memory_get"
    }
    fn description(&self) -> &'static str {
        "Read lines of a memory file found by memory_search (path as cited, optional first line and line count)."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string"},
            "from": {"type": "integer", "minimum": 1},
            "lines": {"type": "integer", "minimum": 1}
        }, "required": ["path"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(call(ctx, args, crate::memory::tools::get, false))
    }
}
