//! `cron`: the agent's view of the gateway's cron service (status, list, add, update, remove, run, runs,
//! wake), after OpenClaw's cron tool. A job added here runs as the calling agent, and an agent-turn job
//! without a delivery target is delivered (`announce`) to where this session's last message came from
//! (channel and recipient of its last route).
//!
//! The tool only translates arguments; scheduling and persistence live behind [`CronControl`] (the cron
//! service implements it).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::{arg_str, arg_u64, Tool, ToolContext, ToolError, ToolFuture, ToolOutput};

/// Run-log entries returned by `runs` when no limit is given.
pub const DEFAULT_RUNS_LIMIT: u64 = 20;
/// Most run-log entries one `runs` call returns.
pub const MAX_RUNS_LIMIT: u64 = 200;
/// Top-level keys taken as a job when a model flattens the job into the arguments.
const FLAT_JOB_KEYS: &[&str] = &[
    "name",
    "schedule",
    "sessionTarget",
    "payload",
    "delivery",
    "enabled",
    "description",
    "deleteAfterRun",
    "agentId",
];

/// What the tool asks of the cron service; errors already name what was wrong.
pub trait CronControl: Send + Sync {
    /// `{enabled, jobs, nextWakeAtMs}`.
    fn status(&self) -> Result<Value, ToolError>;
    /// The jobs, sorted by next run.
    fn list(&self, include_disabled: bool) -> Result<Vec<Value>, ToolError>;
    /// Adds a job; the stored job.
    fn add(&self, job: &Value) -> Result<Value, ToolError>;
    /// Patches a job; the stored job.
    fn update(&self, id: &str, patch: &Value) -> Result<Value, ToolError>;
    /// Removes a job; whether it existed.
    fn remove(&self, id: &str) -> Result<bool, ToolError>;
    /// Claims the job now and runs it in the background; `false` when `due_only` and it is not due.
    fn run_now(self: Arc<Self>, id: &str, due_only: bool) -> Result<bool, ToolError>;
    /// The job's newest run-log entries.
    fn runs(&self, id: &str, limit: usize) -> Result<Vec<Value>, ToolError>;
}

/// Why `wake` reached nobody.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WakeError {
    #[error("the gateway is shutting down")]
    ShuttingDown,
}

/// How the tool reaches the cron service (and the heartbeat, for `wake`).
pub trait CronAccess: Send + Sync {
    /// The running service, if the gateway started one.
    fn service(&self) -> Option<Arc<dyn CronControl>>;
    /// `wake`: `now` runs the heartbeat (and due jobs) at once, else at the next heartbeat; `text` is a
    /// system event for the main session.
    fn wake(&self, now: bool, text: Option<&str>) -> Result<(), WakeError>;
}

pub struct CronTool;

fn job_id(args: &Value) -> Result<&str, ToolError> {
    args.get("jobId")
        .or_else(|| args.get("id"))
        .and_then(Value::as_str)
        .filter(|id| !id.trim().is_empty())
        .ok_or_else(|| ToolError::InvalidArguments("jobId (string) is required".into()))
}

fn output(value: Value) -> ToolOutput {
    ToolOutput {
        text: serde_json::to_string_pretty(&value).unwrap_or_default(),
        details: Some(value),
    }
}

/// The job object of an `add`: `job`, or recognised job keys given at the top level.
fn job_object(args: &Value) -> Result<Map<String, Value>, ToolError> {
    if let Some(job) = args.get("job").and_then(Value::as_object) {
        if !job.is_empty() {
            return Ok(job.clone());
        }
    }
    let flat: Map<String, Value> = FLAT_JOB_KEYS
        .iter()
        .filter_map(|k| args.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect();
    if flat.contains_key("schedule") || flat.contains_key("payload") {
        return Ok(flat);
    }
    Err(ToolError::InvalidArguments(
        "job (object with name, schedule, sessionTarget, payload) is required".into(),
    ))
}

/// Fills the agent and, for agent turns without a target, the session's last route as delivery.
pub fn complete_job(
    mut job: Map<String, Value>,
    agent_id: &str,
    last_route: Option<(String, Option<String>)>,
) -> Map<String, Value> {
    job.entry("agentId").or_insert(json!(agent_id));
    let agent_turn = job
        .get("payload")
        .and_then(|p| p.get("kind"))
        .and_then(Value::as_str)
        == Some("agentTurn");
    let delivery = job.get("delivery").and_then(Value::as_object).cloned();
    let mode = delivery
        .as_ref()
        .and_then(|d| d.get("mode"))
        .and_then(Value::as_str)
        .unwrap_or("announce");
    let has_target = delivery
        .as_ref()
        .is_some_and(|d| d.get("channel").is_some() || d.get("to").is_some());
    if agent_turn && mode == "announce" && !has_target {
        if let Some((channel, to)) = last_route {
            let mut target = delivery.unwrap_or_default();
            target.insert("mode".into(), json!("announce"));
            target.insert("channel".into(), json!(channel));
            if let Some(to) = to {
                target.insert("to".into(), json!(to));
            }
            job.insert("delivery".into(), Value::Object(target));
        }
    }
    job
}

fn add(service: &dyn CronControl, args: &Value, ctx: &ToolContext) -> Result<Value, ToolError> {
    let session = ctx
        .store
        .run_blocking(|| ctx.store.session(&ctx.session_key))
        .map_err(|e| ToolError::Failed(format!("session store: {e}")))?;
    let last_route = session.and_then(|s| s.last_channel.map(|c| (c, s.last_to)));
    let job = complete_job(job_object(args)?, &ctx.agent_id, last_route);
    service.add(&Value::Object(job))
}

fn run(service: &Arc<dyn CronControl>, args: &Value) -> Result<Value, ToolError> {
    let id = job_id(args)?;
    let due_only = match args.get("runMode").and_then(Value::as_str) {
        None | Some("force") => false,
        Some("due") => true,
        Some(other) => {
            return Err(ToolError::InvalidArguments(format!(
                "runMode {other:?} must be \"due\" or \"force\""
            )))
        }
    };
    if service.clone().run_now(id, due_only)? {
        Ok(json!({"ok": true, "ran": true}))
    } else {
        Ok(json!({"ok": true, "ran": false, "reason": "not-due"}))
    }
}

fn dispatch(
    access: &dyn CronAccess,
    service: &Arc<dyn CronControl>,
    args: &Value,
    ctx: &ToolContext,
) -> Result<Value, ToolError> {
    match arg_str(args, "action")? {
        "status" => service.status(),
        "list" => {
            let include = args.get("includeDisabled").and_then(Value::as_bool) == Some(true);
            let jobs = service.list(include)?;
            Ok(json!({"jobs": jobs}))
        }
        "add" => add(service.as_ref(), args, ctx),
        "update" => {
            let patch = args
                .get("patch")
                .filter(|p| p.is_object())
                .ok_or_else(|| ToolError::InvalidArguments("patch (object) is required".into()))?;
            service.update(job_id(args)?, patch)
        }
        "remove" => {
            let removed = service.remove(job_id(args)?)?;
            Ok(json!({"ok": true, "removed": removed}))
        }
        "run" => run(service, args),
        "runs" => {
            let limit = arg_u64(args, "limit")?
                .unwrap_or(DEFAULT_RUNS_LIMIT)
                .clamp(1, MAX_RUNS_LIMIT);
            let entries = service.runs(job_id(args)?, limit as usize)?;
            Ok(json!({"entries": entries}))
        }
        "wake" => {
            let now = match args.get("mode").and_then(Value::as_str) {
                None | Some("next-heartbeat") => false,
                Some("now") => true,
                Some(other) => {
                    return Err(ToolError::InvalidArguments(format!(
                        "mode {other:?} must be \"now\" or \"next-heartbeat\""
                    )))
                }
            };
            let text = args.get("text").and_then(Value::as_str);
            access
                .wake(now, text)
                .map_err(|e| ToolError::Failed(e.to_string()))?;
            Ok(json!({"ok": true}))
        }
        other => Err(ToolError::InvalidArguments(format!(
            "action {other:?} must be one of status, list, add, update, remove, run, runs, wake"
        ))),
    }
}

impl Tool for CronTool {
    fn name(&self) -> &'static str {
        "cron"
    }
    fn description(&self) -> &'static str {
        "Manage scheduled jobs: status, list, add (job: {name, schedule {kind at|every|cron}, sessionTarget main|isolated, payload {kind systemEvent, text} | {kind agentTurn, message}}), update (jobId, patch), remove, run, runs (jobId), wake (text, mode now|next-heartbeat). Agent-turn jobs report back to this conversation unless delivery says otherwise."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["status", "list", "add", "update", "remove", "run", "runs", "wake"]},
            "includeDisabled": {"type": "boolean"},
            "job": {"type": "object", "additionalProperties": true},
            "jobId": {"type": "string"},
            "id": {"type": "string"},
            "patch": {"type": "object", "additionalProperties": true},
            "text": {"type": "string"},
            "mode": {"type": "string", "enum": ["now", "next-heartbeat"]},
            "runMode": {"type": "string", "enum": ["due", "force"]},
            "limit": {"type": "integer", "minimum": 1}
        }, "required": ["action"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let access = ctx
                .services
                .cron
                .clone()
                .ok_or_else(|| ToolError::Failed("the cron service is not running".into()))?;
            let service = access
                .service()
                .ok_or_else(|| ToolError::Failed("the cron service is not running".into()))?;
            let value = dispatch(access.as_ref(), &service, &args, ctx)?;
            Ok(output(value))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_turn_jobs_default_to_the_sessions_last_route() {
        let job = json!({"name": "n", "payload": {"kind": "agentTurn", "message": "m"}});
        let route = Some(("telegram".to_string(), Some("42".to_string())));
        let done = complete_job(job.as_object().cloned().expect("object"), "main", route);
        assert_eq!(done["agentId"], "main");
        assert_eq!(
            done["delivery"],
            json!({"mode": "announce", "channel": "telegram", "to": "42"})
        );
    }

    #[test]
    fn explicit_targets_and_system_events_are_left_alone() {
        let route = || Some(("telegram".to_string(), Some("42".to_string())));
        let webhook = json!({"payload": {"kind": "agentTurn", "message": "m"},
            "delivery": {"mode": "webhook", "to": "http://127.0.0.1/x"}, "agentId": "ops"});
        let done = complete_job(
            webhook.as_object().cloned().expect("object"),
            "main",
            route(),
        );
        assert_eq!(done["delivery"]["mode"], "webhook");
        assert_eq!(done["agentId"], "ops");
        let event = json!({"payload": {"kind": "systemEvent", "text": "t"}});
        let done = complete_job(event.as_object().cloned().expect("object"), "main", route());
        assert!(done.get("delivery").is_none());
    }

    #[test]
    fn flattened_jobs_are_recovered_and_empty_ones_refused() {
        let flat =
            json!({"action": "add", "name": "n", "schedule": {"kind": "every", "everyMs": 60000}});
        let job = job_object(&flat).expect("recovered");
        assert!(job.contains_key("schedule") && !job.contains_key("action"));
        assert!(job_object(&json!({"action": "add"})).is_err());
    }
}
