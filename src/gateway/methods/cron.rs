//! `cron.list`, `cron.status`, `cron.add`, `cron.update`, `cron.remove`, `cron.run` and `cron.runs`
//! (`wake` is in `heartbeat.rs`),
//! plus the gateway's `JobRunner`: a job's payload becomes an agent run started through `runs::start` (on
//! `cron:<jobId>` for isolated jobs, the agent's main session otherwise), and a finished run is POSTed to the
//! job's webhook when it has one.
//!
//! Handlers only translate params and results; scheduling, persistence and backoff live in `crate::cron`.

use std::sync::{Arc, Weak};

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::agent::{RunEvent, RunStatus, TurnSpec};
use crate::channels::deliver::ChannelDestination;
use crate::config::Config;
use crate::cron::{
    CronError, CronJob, CronOptions, CronService, JobRunStatus, JobRunner, Payload, RunFuture,
    RunMode, RunResult, SessionTarget,
};
use crate::gateway::clients::BroadcastOptions;
use crate::gateway::frames::ErrorShape;
use crate::gateway::runs::{self, RunOrigin};
use crate::gateway::scopes;
use crate::gateway::state::GatewayState;
use crate::routing::session_key::cron_session_key;

use super::params::Params;
use crate::queue::LaneSlot;

/// Default and largest `cron.runs` limits.
pub const DEFAULT_RUNS_LIMIT: u64 = 200;
pub const MAX_RUNS_LIMIT: u64 = 2_000;

/// Runs cron jobs as gateway agent runs.
pub struct GatewayRunner {
    pub state: Weak<GatewayState>,
}

impl JobRunner for GatewayRunner {
    fn run(&self, job: &CronJob, slot: LaneSlot) -> RunFuture {
        let state = self.state.upgrade();
        let job = job.clone();
        Box::pin(async move {
            let Some(state) = state else {
                return failed("the gateway is shutting down".into());
            };
            run_as_agent_turn(&state, &job, slot).await
        })
    }

    /// The `cron` event, to readers (`dropIfSlow`, as upstream).
    fn event(&self, event: &Value) {
        if let Some(state) = self.state.upgrade() {
            state.clients.broadcast(
                "cron",
                event,
                BroadcastOptions {
                    drop_if_slow: true,
                    scope: Some(scopes::READ),
                    state_version: None,
                },
            );
        }
    }

    fn finished(&self, job: &CronJob, entry: &Value) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        let config = state.config();
        if job.delivery.as_ref().is_some_and(|d| d.mode == "announce") {
            announce_result(&state, &config, job, entry);
            return;
        }
        let url = match &job.delivery {
            Some(d) if d.mode == "webhook" => d.to.clone(),
            _ => None,
        };
        let Some(url) = url else {
            return;
        };
        let token = config.cron.webhook_token.clone();
        let request = state.http().post(&url).json(entry);
        let request = match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        tokio::spawn(async move {
            if let Err(e) = request.send().await.and_then(|r| r.error_for_status()) {
                log::warn!("cron: webhook {url} failed: {e}");
            }
        });
    }
}

/// `announce` delivery: a finished isolated job's summary goes to its agent's main session (transcript and
/// readers); the job's channel target is carried along for outbound channel delivery.
fn announce_result(state: &Arc<GatewayState>, config: &Config, job: &CronJob, entry: &Value) {
    let Some(summary) = entry["summary"].as_str().filter(|s| !s.trim().is_empty()) else {
        return;
    };
    if job.session_target == SessionTarget::Main {
        // A main-session run already answered in that session.
        return;
    }
    let agent_id = job
        .agent_id
        .clone()
        .unwrap_or_else(|| config.agents.default_agent_id());
    let session_key = super::sessions::canonical_key(config, Some(&agent_id), None);
    let text = format!("[cron: {}] {summary}", job.name);
    let delivery = job.delivery.clone();
    let state = state.clone();
    tokio::task::spawn_blocking(move || {
        let destination = delivery.and_then(|d| announce_destination(&state, &session_key, &d));
        crate::gateway::launcher::deliver_to_session_readers(
            &state,
            &agent_id,
            &session_key,
            &text,
            destination,
        )
    });
}

/// The chat a job's result goes to: its own `channel` + `to`, or, with a channel but no recipient, the
/// session's last route on that channel, else the channel's `defaultTo` (`channel: "last"` or none: the last
/// route whatever it is).
fn announce_destination(
    state: &GatewayState,
    session_key: &str,
    delivery: &crate::cron::job::Delivery,
) -> Option<ChannelDestination> {
    if delivery.mode != "announce" {
        return None;
    }
    let channel = delivery.channel.as_deref().filter(|c| *c != "last");
    if let Some(destination) = ChannelDestination::new(channel, delivery.to.as_deref(), None) {
        return Some(destination);
    }
    let last = ChannelDestination::last_route_of(&state.services.store, session_key);
    match (channel, last) {
        (Some(channel), Some(last)) if channel == last.channel => Some(last),
        (None, Some(last)) => Some(last),
        // A channel without a recipient or a matching last route: its `defaultTo`.
        _ => ChannelDestination::with_default_to(&state.config(), channel, None, None),
    }
}

fn failed(error: String) -> RunResult {
    RunResult {
        status: JobRunStatus::Error,
        error: Some(error),
        summary: None,
    }
}

async fn run_as_agent_turn(state: &Arc<GatewayState>, job: &CronJob, slot: LaneSlot) -> RunResult {
    let config = state.config();
    let agent_id = job
        .agent_id
        .clone()
        .unwrap_or_else(|| config.agents.default_agent_id());
    let (session_key, message, model, timeout_ms) = match &job.payload {
        Payload::SystemEvent { text } => (
            super::sessions::canonical_key(&config, Some(&agent_id), None),
            text.clone(),
            None,
            crate::cron::service::DEFAULT_JOB_TIMEOUT_MS,
        ),
        Payload::AgentTurn {
            message,
            model,
            timeout_seconds,
            ..
        } => (
            match job.session_target {
                SessionTarget::Isolated => cron_session_key(&job.id),
                SessionTarget::Main => {
                    super::sessions::canonical_key(&config, Some(&agent_id), None)
                }
            },
            message.clone(),
            model.clone(),
            timeout_seconds.map_or(crate::cron::service::DEFAULT_JOB_TIMEOUT_MS, |s| s * 1_000),
        ),
    };
    let spec = TurnSpec {
        run_id: uuid::Uuid::new_v4().to_string(),
        agent_id,
        session_key,
        message,
        timeout_ms,
        model_override: model,
        extra_system_prompt: None,
        label: Some(format!("cron: {}", job.name)),
        channel: None,
        skill_filter: None,
        interaction: false,
        images: Vec::new(),
    };
    let (tap, mut events) = mpsc::channel(64);
    let origin = RunOrigin {
        tap: Some(tap),
        ..RunOrigin::default()
    };
    // The job holds its cron-lane slot: the run waits for its session only.
    let mut prepared = match runs::prepare(state, spec, origin) {
        Ok(prepared) => prepared,
        Err(e) => return failed(e.message),
    };
    prepared.set_lane_slot(slot);
    state.tasks.spawn(prepared.execute());
    while let Some(event) = events.recv().await {
        if let RunEvent::Finished(outcome) = event {
            return match outcome.status {
                RunStatus::Ok => RunResult {
                    status: JobRunStatus::Ok,
                    error: None,
                    summary: (!outcome.text.is_empty()).then(|| outcome.text.clone()),
                },
                RunStatus::Aborted => RunResult {
                    status: JobRunStatus::Skipped,
                    error: Some("aborted".into()),
                    summary: None,
                },
                _ => failed(outcome.error.clone().unwrap_or_else(|| "run failed".into())),
            };
        }
    }
    failed("the run ended without an outcome".into())
}

/// The cron service's options from the config.
pub fn options(config: &crate::config::Config) -> CronOptions {
    CronOptions {
        enabled: config.cron.enabled,
        run_log_keep: config.cron.run_log.keep_lines as usize,
    }
}

fn cron_error(error: CronError) -> ErrorShape {
    match error {
        CronError::Invalid(_) | CronError::NotFound(_) => ErrorShape::invalid(error.to_string()),
        other => ErrorShape::unavailable(other.to_string()),
    }
}

fn job_id<'a>(p: &Params<'a>, method: &str) -> Result<&'a str, ErrorShape> {
    match p.opt_str("id")?.or(p.opt_str("jobId")?) {
        Some(id) if !id.trim().is_empty() => Ok(id),
        _ => Err(ErrorShape::invalid(format!(
            "invalid {method} params: id is required"
        ))),
    }
}

fn to_value(job: &CronJob) -> Value {
    serde_json::to_value(job).unwrap_or(Value::Null)
}

/// Dispatches one cron method.
pub fn handle(
    state: &Arc<GatewayState>,
    method: &str,
    params: &Value,
) -> Result<Value, ErrorShape> {
    let service = &state.services.cron;
    let p = Params::new(method, params)?;
    match method {
        "cron.list" => list_page(service, &p),
        "cron.status" => Ok(json!({
            "enabled": service.options().enabled,
            "storePath": state.store_path(),
            "jobs": service.list(true).map_err(cron_error)?.len(),
            "nextWakeAtMs": service.next_wake_ms().map_err(cron_error)?,
        })),
        "cron.add" => service
            .add(params)
            .map(|j| to_value(&j))
            .map_err(cron_error),
        "cron.update" => {
            let id = job_id(&p, method)?;
            let patch = p.raw("patch").ok_or_else(|| {
                ErrorShape::invalid("invalid cron.update params: patch is required")
            })?;
            service
                .update(id, patch)
                .map(|j| to_value(&j))
                .map_err(cron_error)
        }
        "cron.remove" => {
            let removed = service.remove(job_id(&p, method)?).map_err(cron_error)?;
            Ok(json!({"ok": true, "removed": removed}))
        }
        "cron.run" => run(state, service, &p),
        "cron.runs" => runs_page(service, &p),
        other => Err(ErrorShape::invalid(format!("unknown method: {other}"))),
    }
}

/// `cron.run`: claims the job now and runs it in the background; `ran: false` with a reason otherwise.
fn run(
    state: &Arc<GatewayState>,
    service: &Arc<CronService>,
    p: &Params<'_>,
) -> Result<Value, ErrorShape> {
    let id = job_id(p, "cron.run")?;
    let mode = match p.opt_str("mode")? {
        None | Some("force") => RunMode::Force,
        Some("due") => RunMode::Due,
        Some(other) => {
            return Err(ErrorShape::invalid(format!(
                "invalid cron.run params: mode {other:?} must be \"due\" or \"force\""
            )))
        }
    };
    let Some(job) = service.claim_now(id, mode).map_err(cron_error)? else {
        return Ok(json!({"ok": true, "ran": false, "reason": "not-due"}));
    };
    let service = service.clone();
    state.tasks.spawn(async move {
        if let Err(e) = service.execute(job).await {
            log::warn!("cron: manual run failed: {e}");
        }
    });
    Ok(json!({"ok": true, "ran": true}))
}

/// Largest `cron.list` page.
const MAX_LIST_LIMIT: u64 = 200;

/// A page of items as upstream pages its cron inventory and run history:
/// `total` before paging, the `offset` used (clamped to `total`), and
/// `nextOffset` (null on the last page).
fn page(items: Vec<Value>, offset: u64, limit: u64, field: &str) -> Value {
    let total = items.len();
    let offset = (offset as usize).min(total);
    let page: Vec<Value> = items
        .into_iter()
        .skip(offset)
        .take(limit as usize)
        .collect();
    let next = offset + page.len();
    let next_offset = (next < total).then_some(next);
    json!({
        field: page, "total": total, "offset": offset, "limit": limit,
        "hasMore": next_offset.is_some(), "nextOffset": next_offset,
    })
}

/// `cron.list`: the jobs (enabled only unless `includeDisabled`), filtered by
/// `enabled` ("all", "enabled", "disabled") and `query` (in the name or
/// description), one page at a time; `snapshotRevision` changes whenever
/// any listed job does.
fn list_page(service: &Arc<CronService>, p: &Params<'_>) -> Result<Value, ErrorShape> {
    let enabled = p.opt_str("enabled")?;
    if let Some(other) = enabled.filter(|e| !matches!(*e, "all" | "enabled" | "disabled")) {
        return Err(ErrorShape::invalid(format!(
            "invalid cron.list params: enabled {other:?} must be \"all\", \"enabled\" or \"disabled\""
        )));
    }
    let include = p.opt_bool("includeDisabled")?.unwrap_or(false) || enabled.is_some();
    let query = p.opt_str("query")?.map(str::to_lowercase);
    let offset = p.opt_u64("offset", 0, u64::MAX)?.unwrap_or(0);
    let limit = p
        .opt_u64("limit", 1, MAX_LIST_LIMIT)?
        .unwrap_or(MAX_LIST_LIMIT);
    let jobs: Vec<Value> = service
        .list(include)
        .map_err(cron_error)?
        .iter()
        .filter(|job| match enabled {
            Some("enabled") => job.enabled,
            Some("disabled") => !job.enabled,
            _ => true,
        })
        .filter(|job| {
            query.as_ref().is_none_or(|q| {
                job.name.to_lowercase().contains(q)
                    || job
                        .description
                        .as_ref()
                        .is_some_and(|d| d.to_lowercase().contains(q))
            })
        })
        .map(to_value)
        .collect();
    let revision = revision_of(&jobs);
    let mut answer = page(jobs, offset, limit, "jobs");
    answer["snapshotRevision"] = json!(revision);
    Ok(answer)
}

/// A short digest (FNV-1a) of the listed jobs' JSON.
fn revision_of(jobs: &[Value]) -> String {
    let text = serde_json::to_string(jobs).unwrap_or_default();
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// `cron.runs`: one job's run log (`id`/`jobId`, scope `job`) or every job's
/// (scope `all`, the default without an id), newest first, one page at a time.
fn runs_page(service: &Arc<CronService>, p: &Params<'_>) -> Result<Value, ErrorShape> {
    let id = p
        .opt_str("id")?
        .or(p.opt_str("jobId")?)
        .filter(|id| !id.trim().is_empty());
    let scope = p
        .opt_str("scope")?
        .unwrap_or(if id.is_some() { "job" } else { "all" });
    let limit = p
        .opt_u64("limit", 1, MAX_RUNS_LIMIT)?
        .unwrap_or(DEFAULT_RUNS_LIMIT);
    let offset = p.opt_u64("offset", 0, u64::MAX)?.unwrap_or(0);
    // Each job's newest MAX_RUNS_LIMIT entries: the page and `total` count
    // within those.
    let wanted = MAX_RUNS_LIMIT as usize;
    let mut entries = match (scope, id) {
        ("job", Some(id)) => service.runs(id, wanted).map_err(cron_error)?,
        ("job", None) => {
            return Err(ErrorShape::invalid(
                "invalid cron.runs params: id is required",
            ))
        }
        ("all", _) => {
            let mut all = Vec::new();
            for job in service.list(true).map_err(cron_error)? {
                all.extend(service.runs(&job.id, wanted).map_err(cron_error)?);
            }
            all
        }
        (other, _) => {
            return Err(ErrorShape::invalid(format!(
                "invalid cron.runs params: scope {other:?} must be \"job\" or \"all\""
            )))
        }
    };
    let ts = |entry: &Value| entry["ts"].as_u64().unwrap_or(0);
    entries.sort_by_key(|entry| std::cmp::Reverse(ts(entry)));
    Ok(page(entries, offset, limit, "entries"))
}
