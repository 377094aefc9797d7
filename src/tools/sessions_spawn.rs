//! `sessions_spawn`: starts a sub-agent for one task in its own session and returns at once with the
//! child's session key and run id; the result comes back later as a message in this session.
//!
//! The tool only reads arguments; limits, records and the run belong to the registry behind
//! `SubagentControl`.

use serde_json::{json, Value};

use super::subagent_control::{Cleanup, Requester, SpawnRequest, SubagentError};
use super::{arg_str, arg_u64, Tool, ToolContext, ToolError, ToolFuture, ToolOutput};

pub struct SessionsSpawnTool;

fn opt_str(args: &Value, name: &str) -> Result<Option<String>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
        Some(_) => Err(ToolError::InvalidArguments(format!(
            "{name} must be a string"
        ))),
    }
}

/// Reads the spawn arguments.
pub fn spawn_request(args: &Value) -> Result<SpawnRequest, ToolError> {
    let cleanup = match opt_str(args, "cleanup")?.as_deref() {
        None | Some("keep") => Cleanup::Keep,
        Some("delete") => Cleanup::Delete,
        Some(other) => {
            return Err(ToolError::InvalidArguments(format!(
                "cleanup {other:?} must be \"delete\" or \"keep\""
            )))
        }
    };
    Ok(SpawnRequest {
        task: arg_str(args, "task")?.to_string(),
        label: opt_str(args, "label")?,
        agent_id: opt_str(args, "agentId")?,
        model: opt_str(args, "model")?,
        thinking: opt_str(args, "thinking")?,
        run_timeout_seconds: arg_u64(args, "runTimeoutSeconds")?,
        cleanup,
    })
}

/// How registry errors reach the model.
pub fn tool_error(error: SubagentError) -> ToolError {
    match error {
        SubagentError::Invalid(m) => ToolError::InvalidArguments(m),
        SubagentError::DepthLimit { .. }
        | SubagentError::TooManyChildren { .. }
        | SubagentError::AgentNotAllowed { .. } => ToolError::Denied(error.to_string()),
        other => ToolError::Failed(other.to_string()),
    }
}

impl Tool for SessionsSpawnTool {
    fn name(&self) -> &'static str {
        "sessions_spawn"
    }
    fn description(&self) -> &'static str {
        "Start a sub-agent in its own session to do one task in the background. Returns at once; its result is announced back to this session when it finishes."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "task": {"type": "string", "description": "What the sub-agent must do, self-contained."},
            "label": {"type": "string"},
            "agentId": {"type": "string", "description": "Run as another agent (subagents.allowAgents)."},
            "model": {"type": "string", "description": "provider/model override"},
            "thinking": {"type": "string"},
            "runTimeoutSeconds": {"type": "integer", "minimum": 0},
            "cleanup": {"type": "string", "enum": ["delete", "keep"]}
        }, "required": ["task"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let request = spawn_request(&args)?;
            let registry = ctx.services.subagents.clone().ok_or_else(|| {
                ToolError::Failed("sub-agents are not available in this process".into())
            })?;
            let requester = Requester {
                agent_id: ctx.agent_id.clone(),
                session_key: ctx.session_key.clone(),
            };
            let run = registry
                .spawn(&ctx.config, &requester, request)
                .map_err(tool_error)?;
            let result = json!({
                "status": "accepted",
                "childSessionKey": run.child_session_key,
                "runId": run.run_id,
                "id": run.id,
                "depth": run.depth,
            });
            Ok(ToolOutput {
                text: format!(
                    "Sub-agent started (session {}, run {}). Its result will arrive in this session as a message when it finishes; do not wait or poll for it.",
                    run.child_session_key, run.run_id
                ),
                details: Some(result),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_read_and_cleanup_is_checked() {
        let request = spawn_request(
            &json!({"task": " sum it ", "label": "sum", "cleanup": "delete",
            "runTimeoutSeconds": 30}),
        )
        .expect("valid");
        assert_eq!(request.task, " sum it ");
        assert_eq!(request.label.as_deref(), Some("sum"));
        assert_eq!(request.cleanup, Cleanup::Delete);
        assert_eq!(request.run_timeout_seconds, Some(30));
        assert!(spawn_request(&json!({"task": "x", "cleanup": "later"})).is_err());
        assert!(spawn_request(&json!({"label": "x"})).is_err());
    }
}
