//! `exec`: a shell command in the agent's workspace, always through the
//! sandbox runner (`sandbox::exec::run_command`) — never a bare spawn.

use std::time::Duration;

use serde_json::{json, Value};

use crate::sandbox::exec::{run_command, ExecRequest};
use crate::sandbox::{SandboxPolicy, SessionScope};

use super::{arg_str, arg_u64, Tool, ToolContext, ToolError, ToolFuture, ToolOutput};

/// The sandbox policy for an agent: its own `sandbox` block, else
/// `agents.defaults.sandbox`, else pincer's default (everything confined),
/// with limits from the board profile unless the config sets them.
pub fn policy_for(config: &crate::config::Config, agent_id: &str) -> SandboxPolicy {
    use crate::config::SandboxMode as ConfigMode;
    use crate::sandbox::SandboxMode;
    let agent = config
        .agents
        .list
        .iter()
        .find(|a| a.id == agent_id)
        .and_then(|a| a.sandbox.as_ref());
    let defaults = config.agents.defaults.sandbox.as_ref();
    let mut policy = SandboxPolicy::default();
    policy.mode = match agent.and_then(|s| s.mode).or(defaults.and_then(|s| s.mode)) {
        Some(ConfigMode::Off) => SandboxMode::Off,
        Some(ConfigMode::NonMain) => SandboxMode::NonMain,
        Some(ConfigMode::All) | None => SandboxMode::All,
    };
    let board = crate::system::board::detect();
    policy.limits.memory_bytes = board.sandbox.memory_mb * 1024 * 1024;
    policy.limits.max_processes = board.sandbox.pids;
    let limits = agent
        .and_then(|s| s.docker.as_ref())
        .or(defaults.and_then(|s| s.docker.as_ref()));
    if let Some(limits) = limits {
        if let Some(bytes) = limits.memory_bytes() {
            policy.limits.memory_bytes = bytes;
        }
        if let Some(pids) = limits.pids_limit {
            policy.limits.max_processes = u64::from(pids);
        }
        policy.env.extend(limits.env.clone());
    }
    policy
}

pub struct ExecTool;

impl Tool for ExecTool {
    fn name(&self) -> &'static str {
        "exec"
    }
    fn description(&self) -> &'static str {
        "Run a shell command (/bin/sh -c) in the workspace, inside the sandbox. Optional workdir and timeout (seconds)."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "command": {"type": "string"}, "workdir": {"type": "string"},
            "timeout": {"type": "integer", "minimum": 1}}, "required": ["command"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let command = arg_str(&args, "command")?;
            let mut request = ExecRequest::new(command, ctx.workspace.clone());
            request.workdir = args.get("workdir").and_then(Value::as_str).map(Into::into);
            request.timeout = arg_u64(&args, "timeout")?.map(Duration::from_secs);
            let main_key = format!("agent:{}:{}", ctx.agent_id, ctx.config.session.main_key);
            request.session = if ctx.session_key == main_key {
                SessionScope::Main
            } else {
                SessionScope::NonMain
            };
            request.policy = policy_for(&ctx.config, &ctx.agent_id);
            let outcome = tokio::select! {
                outcome = run_command(request) => outcome.map_err(|e| ToolError::Denied(format!("exec refused: {e}")))?,
                _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            };
            let text = format!("{}\n[{}]", outcome.render(), outcome.status_line());
            Ok(ToolOutput {
                text,
                details: Some(
                    json!({"exitCode": outcome.exit_code, "timedOut": outcome.timed_out}),
                ),
            })
        })
    }
}
