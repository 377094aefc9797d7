//! `sessions_list`, `sessions_history` and `session_status`: what the agent
//! may see of sessions, read from the store. The sessions it may list or read
//! are those `tools.sessions.visibility` (and, across agents,
//! `tools.agentToAgent`) let it reach, as for `sessions_send`.

use serde_json::{json, Value};

use super::{arg_str, arg_u64, Tool, ToolContext, ToolError, ToolFuture, ToolOutput};

fn store_error(e: crate::store::StoreError) -> ToolError {
    ToolError::Failed(format!("session store: {e}"))
}

/// Whether this run's session may reach `key` (see `sessions_send::check_visible`).
fn visible(
    ctx: &ToolContext,
    key: &str,
    spawned_by: Option<&str>,
) -> Result<(), (&'static str, String)> {
    super::sessions_send::check_visible(
        &ctx.config,
        &ctx.session_key,
        &ctx.agent_id,
        key,
        spawned_by,
    )
}

pub struct SessionsListTool;

impl Tool for SessionsListTool {
    fn name(&self) -> &'static str {
        "sessions_list"
    }
    fn description(&self) -> &'static str {
        "List recent sessions (key, label, last update, token counts)."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 200}}})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let limit = arg_u64(&args, "limit")?.unwrap_or(20).min(200) as usize;
            let rows: Vec<Value> = ctx
                .store
                .sessions()
                .map_err(store_error)?
                .into_iter()
                .filter(|(key, e)| visible(ctx, key, e.spawned_by.as_deref()).is_ok())
                .take(limit)
                .map(|(key, e)| json!({"key": key, "label": e.label, "updatedAt": e.updated_at_ms, "totalTokens": e.total_tokens}))
                .collect();
            let text = serde_json::to_string_pretty(&rows).unwrap_or_default();
            Ok(ToolOutput {
                text,
                details: Some(json!({"count": rows.len()})),
            })
        })
    }
}

pub struct SessionsHistoryTool;

impl Tool for SessionsHistoryTool {
    fn name(&self) -> &'static str {
        "sessions_history"
    }
    fn description(&self) -> &'static str {
        "Read the last messages of a session by key."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"sessionKey": {"type": "string"},
               "limit": {"type": "integer", "minimum": 1, "maximum": 100}}, "required": ["sessionKey"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let key = arg_str(&args, "sessionKey")?;
            let limit = arg_u64(&args, "limit")?.unwrap_or(20).min(100) as usize;
            let entry = ctx
                .store
                .session(key)
                .map_err(store_error)?
                .ok_or_else(|| ToolError::Failed(format!("no session {key}")))?;
            visible(ctx, key, entry.spawned_by.as_deref())
                .map_err(|(_, message)| ToolError::Denied(message))?;
            let lines: Vec<String> = ctx
                .store
                .transcript_tail(&entry.session_id, limit)
                .map_err(store_error)?
                .into_iter()
                .map(|(_, t)| format!("{}: {}", t.role, t.text))
                .collect();
            Ok(ToolOutput::text(lines.join("\n")))
        })
    }
}

pub struct SessionStatusTool;

impl Tool for SessionStatusTool {
    fn name(&self) -> &'static str {
        "session_status"
    }
    fn description(&self) -> &'static str {
        "Show this session's status: key, model overrides, token usage, time."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {}})
    }
    fn execute<'a>(&'a self, _args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let entry = ctx.store.session(&ctx.session_key).map_err(store_error)?;
            let status = json!({
                "sessionKey": ctx.session_key,
                "agentId": ctx.agent_id,
                "sessionId": entry.as_ref().map(|e| e.session_id.clone()),
                "model": entry.as_ref().and_then(|e| e.model_override.clone()),
                "thinkingLevel": entry.as_ref().and_then(|e| e.thinking_level.clone()),
                "inputTokens": entry.as_ref().map(|e| e.input_tokens),
                "outputTokens": entry.as_ref().map(|e| e.output_tokens),
                "now": crate::system::clock::now_ms(),
            });
            Ok(ToolOutput {
                text: serde_json::to_string_pretty(&status).unwrap_or_default(),
                details: Some(status),
            })
        })
    }
}
