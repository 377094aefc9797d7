//! `subagents`: what this session's sub-agents are doing (`list`), stopping one or all of them with
//! everything they spawned (`kill`), and giving a running one a new instruction (`steer`: into its running
//! turn, or a new turn when that one already made its last model call).
//!
//! The tool only reads arguments; the registry behind `SubagentControl` does the work.

use serde_json::{json, Value};

use super::sessions_spawn::tool_error;
use super::subagent_control::{SteerMode, MAX_STEER_MESSAGE_CHARS};
use super::{arg_str, Tool, ToolContext, ToolError, ToolFuture, ToolOutput};

pub struct SubagentsTool;

impl Tool for SubagentsTool {
    fn name(&self) -> &'static str {
        "subagents"
    }
    fn description(&self) -> &'static str {
        "Manage the sub-agents this session spawned: list them, kill one (target: id, label, #index, last) or all (cascades to their own sub-agents), or steer a running one with a new message (it reads it before its next step)."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["list", "kill", "steer"]},
            "target": {"type": "string"},
            "message": {"type": "string", "maxLength": MAX_STEER_MESSAGE_CHARS}
        }, "required": ["action"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let registry = ctx.services.subagents.clone().ok_or_else(|| {
                ToolError::Failed("sub-agents are not available in this process".into())
            })?;
            let me = ctx.session_key.as_str();
            match arg_str(&args, "action")? {
                "list" => {
                    let runs = registry.children_of(me).map_err(tool_error)?;
                    let rows: Vec<Value> = runs
                        .iter()
                        .enumerate()
                        .map(|(i, r)| {
                            json!({"index": i + 1, "id": r.id, "label": r.label, "task": r.task,
                                "status": r.status, "sessionKey": r.child_session_key,
                                "runId": r.run_id, "depth": r.depth, "error": r.error})
                        })
                        .collect();
                    Ok(ToolOutput {
                        text: serde_json::to_string_pretty(&rows).unwrap_or_default(),
                        details: Some(json!({"count": rows.len()})),
                    })
                }
                "kill" => {
                    let target = arg_str(&args, "target")?;
                    let killed = registry.kill(me, target).map_err(tool_error)?;
                    let keys: Vec<&str> = killed
                        .iter()
                        .map(|r| r.child_session_key.as_str())
                        .collect();
                    Ok(ToolOutput {
                        text: format!(
                            "Killed {} sub-agent run(s): {}",
                            keys.len(),
                            keys.join(", ")
                        ),
                        details: Some(json!({"killed": keys})),
                    })
                }
                "steer" => {
                    let target = arg_str(&args, "target")?;
                    let message = arg_str(&args, "message")?;
                    let steered = registry
                        .steer(&ctx.config, me, target, message)
                        .map_err(tool_error)?;
                    let run = &steered.run;
                    let text = match steered.mode {
                        SteerMode::Injected => format!(
                            "Steered {}: it reads your message before its next step (run {}).",
                            run.child_session_key, run.run_id
                        ),
                        SteerMode::Restarted => format!(
                            "Steered {}: its current turn was stopped and it continues with your message (run {}).",
                            run.child_session_key, run.run_id
                        ),
                    };
                    let mut details = run.to_json();
                    details["mode"] = json!(steered.mode.as_str());
                    Ok(ToolOutput {
                        text,
                        details: Some(details),
                    })
                }
                other => Err(ToolError::InvalidArguments(format!(
                    "action {other:?} must be list, kill or steer"
                ))),
            }
        })
    }
}
