//! `sessions_send`: the agent sends a message into another session, which
//! runs a turn there, and optionally waits for that session's reply
//! (`timeoutSeconds`, default 30; 0 = fire and forget). Answers upstream's
//! result shape: `runId`, `status` (`ok` | `accepted` | `timeout` | `error` |
//! `forbidden`), `reply`, `sessionKey`.
//!
//! Who may be reached follows upstream's `tools.sessions.visibility`
//! (`self` | `tree` (default: this session and the sessions it spawned) |
//! `agent` | `all`) and, across agents, `tools.agentToAgent` (`enabled`,
//! `allow` patterns). A session never sends to itself: waiting on its own
//! lane would only time out. Runs are started through a [`SessionRunner`]
//! the gateway provides; this file never touches the gateway itself. Once
//! the target has answered, the agent-to-agent flow (`sessions_a2a.rs`)
//! goes on in the background.

use std::time::Duration;

use serde_json::{json, Value};

use super::sessions_a2a::AgentToAgentFlow;
use super::{arg_u64, Tool, ToolContext, ToolError, ToolFuture, ToolOutput};
use crate::config::{Config, SessionsVisibility};
use crate::routing::session_key::{agent_of_key, scoped_main_session_key};
use futures_util::future::BoxFuture;

/// How long the tool waits for the reply when the model does not say.
pub const DEFAULT_SEND_TIMEOUT_SECONDS: u64 = 30;
/// The longest wait the model may ask for.
pub const MAX_SEND_TIMEOUT_SECONDS: u64 = 600;
/// The longest message the tool passes on.
pub const MAX_SEND_MESSAGE_CHARS: usize = 32 * 1024;

/// A run to start in another session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSend {
    pub agent_id: String,
    pub session_key: String,
    pub message: String,
    /// Tells the target's model where the message comes from.
    pub extra_system_prompt: String,
}

/// How a run in another session ended, as the session tools see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionRunStatus {
    Ok,
    Error,
    Timeout,
    Aborted,
}

impl SessionRunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionRunStatus::Ok => "ok",
            SessionRunStatus::Error => "error",
            SessionRunStatus::Timeout => "timeout",
            SessionRunStatus::Aborted => "aborted",
        }
    }
}

/// The end of a run in another session: its status, answer and error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionReply {
    pub status: SessionRunStatus,
    pub text: String,
    pub error: Option<String>,
}

/// Why a run in another session did not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionStartError {
    #[error("sessions_send needs a running gateway")]
    NoGateway,
    #[error("the gateway is shutting down")]
    ShuttingDown,
    /// The runtime refused the run; its reason.
    #[error("{0}")]
    Refused(String),
}

/// Starts and awaits runs in other sessions (the gateway's run registry).
pub trait SessionRunner: Send + Sync {
    /// Starts the run and returns its id.
    fn start(&self, send: SessionSend) -> Result<String, SessionStartError>;
    /// The run's outcome, or `None` when `timeout` passes first.
    fn wait<'a>(
        &'a self,
        run_id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Option<SessionReply>>;
    /// Posts `text` to the chat of `session_key` (its last route, or the
    /// group/channel its key names); `Ok(false)` when it has none.
    fn announce<'a>(
        &'a self,
        _session_key: &'a str,
        _text: String,
    ) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async { Ok(false) })
    }
    /// Runs the agent-to-agent flow after a send, in the background.
    fn spawn_flow(&self, flow: BoxFuture<'static, ()>) {
        tokio::spawn(flow);
    }
}

/// Outside a gateway there is nobody to run the other session.
pub struct NoSessionRunner;

impl SessionRunner for NoSessionRunner {
    fn start(&self, _send: SessionSend) -> Result<String, SessionStartError> {
        Err(SessionStartError::NoGateway)
    }
    fn wait<'a>(&'a self, _run_id: &'a str, _t: Duration) -> BoxFuture<'a, Option<SessionReply>> {
        Box::pin(async { None })
    }
}

/// The canonical key for what the model wrote: `main` is the agent's main
/// session, bare names are scoped to the requesting agent.
fn canonical_target(config: &Config, agent_id: &str, key: &str) -> String {
    let main_key = &config.session.main_key;
    match key.trim() {
        k if k == "main" || k == main_key => scoped_main_session_key(&config.session, agent_id),
        k if k.starts_with("agent:") || k == "global" => k.to_string(),
        k => format!("agent:{agent_id}:{k}"),
    }
}

/// Whether `pattern` (`*` wildcards) matches an agent id.
fn pattern_matches(pattern: &str, agent_id: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == agent_id;
    }
    let mut rest = agent_id;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(part) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

/// Upstream's policy check: `Err((status, message))` when refused.
pub fn check_send_allowed(
    config: &Config,
    requester_key: &str,
    requester_agent: &str,
    target_key: &str,
    target_spawned_by: Option<&str>,
) -> Result<(), (&'static str, String)> {
    if target_key == requester_key {
        return Err((
            "error",
            "sessions_send cannot target the current session; answer here instead".into(),
        ));
    }
    check_visible(
        config,
        requester_key,
        requester_agent,
        target_key,
        target_spawned_by,
    )
}

/// Whether the session tools (`sessions_list`, `sessions_history`, `sessions_send`) of a session may
/// reach `target_key`, by `tools.sessions.visibility` (`self`: only its own session; `tree`: also the
/// sessions it spawned; `agent`: its agent's sessions; `all`: any, another agent's only as
/// `tools.agentToAgent` allows): `Err((status, message))` when not.
pub fn check_visible(
    config: &Config,
    requester_key: &str,
    requester_agent: &str,
    target_key: &str,
    target_spawned_by: Option<&str>,
) -> Result<(), (&'static str, String)> {
    if target_key == requester_key {
        return Ok(());
    }
    let visibility = config.tools.sessions.visibility;
    let target_agent = agent_of_key(target_key).unwrap_or(requester_agent);
    if target_agent != requester_agent {
        if visibility != SessionsVisibility::All {
            return Err(("forbidden", "Session visibility is restricted. Set tools.sessions.visibility=all to allow cross-agent access.".into()));
        }
        let a2a = &config.tools.agent_to_agent;
        if !a2a.enabled {
            return Err(("forbidden", "Agent-to-agent messaging is disabled. Set tools.agentToAgent.enabled=true to allow cross-agent sends.".into()));
        }
        let allowed =
            |id: &str| a2a.allow.is_empty() || a2a.allow.iter().any(|p| pattern_matches(p, id));
        if !allowed(requester_agent) || !allowed(target_agent) {
            return Err((
                "forbidden",
                "Agent-to-agent messaging denied by tools.agentToAgent.allow.".into(),
            ));
        }
        return Ok(());
    }
    match visibility {
        SessionsVisibility::OwnSession => Err(("forbidden", "Session visibility is restricted to the current session (tools.sessions.visibility=self).".into())),
        SessionsVisibility::Tree if target_spawned_by != Some(requester_key) => Err(("forbidden", "Session visibility is restricted to the current session tree (tools.sessions.visibility=tree).".into())),
        _ => Ok(()),
    }
}

pub struct SessionsSendTool;

impl Tool for SessionsSendTool {
    fn name(&self) -> &'static str {
        "sessions_send"
    }
    fn description(&self) -> &'static str {
        "Send a message into another session (by sessionKey or label) and wait up to \
         timeoutSeconds for its reply (0: do not wait)."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "sessionKey": {"type": "string"},
            "label": {"type": "string", "minLength": 1, "maxLength": 64},
            "agentId": {"type": "string", "minLength": 1, "maxLength": 64},
            "message": {"type": "string"},
            "timeoutSeconds": {"type": "integer", "minimum": 0}},
            "required": ["message"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let result = send(&args, ctx).await?;
            Ok(ToolOutput {
                text: serde_json::to_string_pretty(&result).unwrap_or_default(),
                details: Some(result),
            })
        })
    }
}

fn refused(status: &str, error: String, session_key: Option<&str>) -> Value {
    json!({"runId": uuid::Uuid::new_v4().to_string(), "status": status, "error": error,
           "sessionKey": session_key})
}

/// The message, also under upstream's aliases (`content`, `text`).
fn message_arg(args: &Value) -> Result<String, ToolError> {
    let message = ["message", "content", "text"]
        .iter()
        .filter_map(|k| args.get(*k).and_then(Value::as_str))
        .find(|m| !m.trim().is_empty())
        .ok_or_else(|| ToolError::InvalidArguments("message (string) is required".into()))?;
    if message.chars().count() > MAX_SEND_MESSAGE_CHARS {
        return Err(ToolError::InvalidArguments(format!(
            "message is longer than {MAX_SEND_MESSAGE_CHARS} characters"
        )));
    }
    Ok(message.to_string())
}

/// Finds the target key from `sessionKey`, or `label` (+ `agentId`).
fn resolve_target(args: &Value, ctx: &ToolContext) -> Result<Result<String, Value>, ToolError> {
    let agent = args
        .get("agentId")
        .and_then(Value::as_str)
        .filter(|a| !a.trim().is_empty())
        .unwrap_or(&ctx.agent_id);
    if let Some(key) = args
        .get("sessionKey")
        .and_then(Value::as_str)
        .filter(|k| !k.trim().is_empty())
    {
        return Ok(Ok(canonical_target(&ctx.config, agent, key)));
    }
    let Some(label) = args
        .get("label")
        .and_then(Value::as_str)
        .filter(|l| !l.trim().is_empty())
    else {
        if args.get("agentId").is_some() {
            return Ok(Ok(canonical_target(&ctx.config, agent, "main")));
        }
        return Ok(Err(refused(
            "error",
            "Either sessionKey or label is required".into(),
            None,
        )));
    };
    let sessions = ctx
        .store
        .run_blocking(|| ctx.store.sessions())
        .map_err(|e| ToolError::Failed(format!("session store: {e}")))?;
    let found = sessions.into_iter().find(|(key, entry)| {
        entry.label.as_deref() == Some(label.trim()) && agent_of_key(key).unwrap_or(agent) == agent
    });
    Ok(match found {
        Some((key, _)) => Ok(key),
        None => Err(refused(
            "error",
            format!("No session found with label: {label}"),
            None,
        )),
    })
}

async fn send(args: &Value, ctx: &ToolContext) -> Result<Value, ToolError> {
    let message = message_arg(args)?;
    let timeout_s = arg_u64(args, "timeoutSeconds")?
        .unwrap_or(DEFAULT_SEND_TIMEOUT_SECONDS)
        .min(MAX_SEND_TIMEOUT_SECONDS);
    let target = match resolve_target(args, ctx)? {
        Ok(target) => target,
        Err(refusal) => return Ok(refusal),
    };
    let entry = ctx
        .store
        .run_blocking(|| ctx.store.session(&target))
        .map_err(|e| ToolError::Failed(format!("session store: {e}")))?;
    let spawned_by = entry.as_ref().and_then(|e| e.spawned_by.as_deref());
    if let Err((status, error)) = check_send_allowed(
        &ctx.config,
        &ctx.session_key,
        &ctx.agent_id,
        &target,
        spawned_by,
    ) {
        return Ok(refused(status, error, Some(&target)));
    }
    let send_agent = agent_of_key(&target).unwrap_or(&ctx.agent_id).to_string();
    let sent_message = message.clone();
    let send = SessionSend {
        agent_id: send_agent.clone(),
        session_key: target.clone(),
        message,
        extra_system_prompt: format!(
            "Agent-to-agent message: this message comes from session {} (agent {}) through \
             sessions_send, not from a human. Your reply goes back to that session.",
            ctx.session_key, ctx.agent_id
        ),
    };
    let run_id = match ctx.services.sessions.start(send) {
        Ok(run_id) => run_id,
        Err(error) => return Ok(refused("error", error.to_string(), Some(&target))),
    };
    let mut flow = AgentToAgentFlow {
        requester_key: ctx.session_key.clone(),
        requester_agent: ctx.agent_id.clone(),
        requester_channel: None,
        target_key: target.clone(),
        target_agent: send_agent,
        message: sent_message,
        first_reply: None,
        wait_run_id: None,
        step_timeout: Duration::from_secs(
            timeout_s.max(FLOW_STEP_TIMEOUT_SECONDS_WHEN_NOT_WAITING),
        ),
        max_turns: ctx.config.session.agent_to_agent.max_ping_pong_turns,
    };
    if timeout_s == 0 {
        flow.wait_run_id = Some(run_id.clone());
        start_flow(ctx, flow);
        return Ok(json!({"runId": run_id, "status": "accepted", "sessionKey": target}));
    }
    let waited = tokio::select! {
        waited = ctx.services.sessions.wait(&run_id, Duration::from_secs(timeout_s)) => waited,
        _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
    };
    Ok(match waited {
        None => json!({"runId": run_id, "status": "timeout", "sessionKey": target,
                       "error": format!("no reply within {timeout_s} s; the run goes on")}),
        Some(outcome) if outcome.status == SessionRunStatus::Ok => {
            flow.first_reply = Some(outcome.text.clone());
            start_flow(ctx, flow);
            json!({"runId": run_id, "status": "ok", "reply": outcome.text, "sessionKey": target})
        }
        Some(outcome) => json!({"runId": run_id,
            "status": if outcome.status == SessionRunStatus::Timeout { "timeout" } else { "error" },
            "error": outcome.error.unwrap_or_else(|| outcome.status.as_str().to_string()),
            "sentBeforeError": true, "sessionKey": target}),
    })
}

/// The flow's step bound when the tool did not wait (upstream's 30 s).
const FLOW_STEP_TIMEOUT_SECONDS_WHEN_NOT_WAITING: u64 = 30;

/// The channel of the requester's conversation, for the flow's notes.
fn requester_channel(ctx: &ToolContext) -> Option<String> {
    let entry = ctx
        .store
        .run_blocking(|| ctx.store.session(&ctx.session_key))
        .ok()
        .flatten()?;
    entry.last_channel.or(entry.channel)
}

/// Starts the agent-to-agent flow after the tool has answered (only then is
/// the requester's channel looked up).
fn start_flow(ctx: &ToolContext, mut flow: AgentToAgentFlow) {
    flow.requester_channel = requester_channel(ctx);
    let runner = ctx.services.sessions.clone();
    let task = flow.run(runner.clone());
    runner.spawn_flow(Box::pin(async move {
        task.await;
    }));
}

#[cfg(test)]
mod tests;
