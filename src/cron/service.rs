//! The cron service: job CRUD over the store, claiming and running due jobs through a `JobRunner`, the run
//! log, start-up recovery, and the single timer that wakes for the nearest job.
//!
//! Time comes from an injected `CronClock`, so tests drive schedules, missed runs and backoff without
//! sleeping. A run is claimed by setting `runningAtMs` in one store transaction, so two callers (the timer and
//! `cron.run`) never start the same job twice. The service never runs agents itself: the runner does.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::queue::{LaneGate, LaneKind, LaneSlot};
use tokio_util::sync::CancellationToken;

use super::job::{CronJob, JobRunStatus, JobState, Payload, RunResult};
use super::CronError;
use crate::store::Store;

/// The timer never sleeps longer than this, so wall-clock jumps are noticed within a minute.
pub const MAX_TIMER_DELAY_MS: u64 = 60_000;
/// The timer never re-arms sooner than this after waking.
pub const MIN_TIMER_DELAY_MS: u64 = 2_000;
/// A run still marked running after this long is treated as stuck and cleared: 2 h.
pub const STUCK_RUN_MS: u64 = 2 * 3_600_000;
/// Run timeout when the payload sets none: 10 min.
pub const DEFAULT_JOB_TIMEOUT_MS: u64 = 600_000;

/// Milliseconds since the epoch, as the service sees them.
pub trait CronClock: Send + Sync {
    fn now_ms(&self) -> u64;
}

/// The wall clock.
pub struct SystemClock;

impl CronClock for SystemClock {
    fn now_ms(&self) -> u64 {
        crate::system::clock::now_ms()
    }
}

/// A boxed future returned by a runner.
pub type RunFuture = BoxFuture<'static, RunResult>;

/// Executes one job's payload (an agent turn, a system event) and reports how it went.
pub trait JobRunner: Send + Sync {
    /// Runs `job` holding `slot`, its place in the cron lane (the run it starts waits for its session
    /// only); the slot is freed when the future ends.
    fn run(&self, job: &CronJob, slot: LaneSlot) -> RunFuture;
    /// Called after the run is recorded, with the run-log entry (webhooks, events). Must not block.
    fn finished(&self, _job: &CronJob, _entry: &Value) {}
    /// Told of every job change and run in upstream's `cron` event shape: `{jobId, action}` with
    /// action `added`, `updated`, `removed`, `started` or `finished` (plus `runAtMs`, `durationMs`,
    /// `status`, `error`, `summary`, `nextRunAtMs`, and the job where it still exists). Must not block.
    fn event(&self, _event: &Value) {}
}

/// A `cron` event about `job`.
fn job_event(action: &str, job: &CronJob) -> Value {
    json!({
        "jobId": job.id,
        "action": action,
        "nextRunAtMs": job.state.next_run_at_ms,
        "job": job,
    })
}

/// Service settings (from the `cron` config section), replaced on reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronOptions {
    pub enabled: bool,
    pub run_log_keep: usize,
}

/// The cron service. Share it as `Arc<CronService>`.
pub struct CronService {
    store: Store,
    clock: Arc<dyn CronClock>,
    runner: Arc<dyn JobRunner>,
    /// What the service runs with now: `cron.status` reports it and the
    /// timer obeys it (a reload swaps it through `apply_options`).
    options: parking_lot::RwLock<CronOptions>,
    /// The gateway's lanes: a job runs in a cron-lane slot (`cron.maxConcurrentRuns`).
    lanes: Arc<LaneGate>,
    wake: Notify,
}

/// Whether a manual run needs the job to be due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunMode {
    Due,
    Force,
}

use crate::system::blocking::off_worker;

fn parse_job(json: &str) -> Result<CronJob, CronError> {
    serde_json::from_str(json).map_err(|e| CronError::Corrupt(e.to_string()))
}

fn to_json(job: &CronJob) -> String {
    serde_json::to_string(job).expect("a CronJob always serialises")
}

impl CronService {
    pub fn new(
        store: Store,
        clock: Arc<dyn CronClock>,
        runner: Arc<dyn JobRunner>,
        options: CronOptions,
        lanes: Arc<LaneGate>,
    ) -> Arc<CronService> {
        Arc::new(CronService {
            store,
            clock,
            runner,
            options: parking_lot::RwLock::new(options),
            lanes,
            wake: Notify::new(),
        })
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The settings the service runs with now.
    pub fn options(&self) -> CronOptions {
        self.options.read().clone()
    }

    /// Takes new settings (a config reload): turning `enabled` off stops
    /// due runs from being claimed, turning it on wakes the timer.
    pub fn apply_options(&self, options: CronOptions) {
        let changed = {
            let mut current = self.options.write();
            let changed = *current != options;
            *current = options;
            changed
        };
        if changed {
            self.wake.notify_one();
        }
    }

    /// Every job, sorted by next run (jobs without one last); disabled jobs only when asked.
    pub fn list(&self, include_disabled: bool) -> Result<Vec<CronJob>, CronError> {
        let mut jobs = Vec::new();
        for (_, json) in off_worker(|| self.store.cron_jobs())? {
            let job = parse_job(&json)?;
            if include_disabled || job.enabled {
                jobs.push(job);
            }
        }
        jobs.sort_by_key(|j| (j.state.next_run_at_ms.unwrap_or(u64::MAX), j.id.clone()));
        Ok(jobs)
    }

    pub fn get(&self, id: &str) -> Result<CronJob, CronError> {
        match off_worker(|| self.store.cron_job(id))? {
            Some(json) => parse_job(&json),
            None => Err(CronError::NotFound(id.to_string())),
        }
    }

    /// Creates a job from OpenClaw's `cron.add` params (name, schedule, sessionTarget, payload, …).
    pub fn add(&self, input: &Value) -> Result<CronJob, CronError> {
        let now = self.now_ms();
        let mut object = input
            .as_object()
            .cloned()
            .ok_or_else(|| CronError::Invalid("job must be an object".into()))?;
        object.remove("state");
        object.insert("id".into(), json!(uuid::Uuid::new_v4().to_string()));
        object.entry("enabled").or_insert(json!(true));
        object.insert("createdAtMs".into(), json!(now));
        object.insert("updatedAtMs".into(), json!(now));
        let mut job: CronJob = serde_json::from_value(Value::Object(object))
            .map_err(|e| CronError::Invalid(e.to_string()))?;
        job.validate()
            .map_err(|e| CronError::Invalid(e.to_string()))?;
        job.state = JobState::default();
        job.recompute_next(now);
        off_worker(|| self.store.cron_job_put(&job.id, &to_json(&job)))?;
        self.wake.notify_one();
        self.runner.event(&job_event("added", &job));
        Ok(job)
    }

    /// Applies a `cron.update` patch: top-level fields replace the job's; `id`, `createdAtMs` and `state`
    /// cannot be patched. The next run is recomputed.
    pub fn update(&self, id: &str, patch: &Value) -> Result<CronJob, CronError> {
        let patch = patch
            .as_object()
            .ok_or_else(|| CronError::Invalid("patch must be an object".into()))?;
        let now = self.now_ms();
        let mut failure = None;
        let written = off_worker(|| {
            self.store.cron_job_update(id, |current| {
                failure = None;
                let mut value: Value = serde_json::from_str(current?).ok()?;
                let object = value.as_object_mut()?;
                for (key, field) in patch {
                    if !matches!(key.as_str(), "id" | "createdAtMs" | "state") {
                        object.insert(key.clone(), field.clone());
                    }
                }
                object.insert("updatedAtMs".into(), json!(now));
                let parsed = serde_json::from_value::<CronJob>(value)
                    .map_err(|e| e.to_string())
                    .and_then(|job| job.validate().map(|_| job).map_err(|e| e.to_string()));
                match parsed {
                    Ok(mut job) => {
                        job.recompute_next(now);
                        Some(to_json(&job))
                    }
                    Err(reason) => {
                        failure = Some(reason);
                        None
                    }
                }
            })
        })?;
        if let Some(reason) = failure {
            return Err(CronError::Invalid(reason));
        }
        let json = written.ok_or_else(|| CronError::NotFound(id.to_string()))?;
        self.wake.notify_one();
        let job = parse_job(&json)?;
        self.runner.event(&job_event("updated", &job));
        Ok(job)
    }

    /// Deletes a job and its run log; returns whether it existed.
    pub fn remove(&self, id: &str) -> Result<bool, CronError> {
        let removed = off_worker(|| self.store.cron_job_delete(id))?;
        self.wake.notify_one();
        if removed {
            self.runner
                .event(&json!({"jobId": id, "action": "removed"}));
        }
        Ok(removed)
    }

    /// The newest `limit` run-log entries of a job, newest first.
    pub fn runs(&self, id: &str, limit: usize) -> Result<Vec<Value>, CronError> {
        let entries = off_worker(|| self.store.cron_runs(id, limit))?;
        Ok(entries
            .iter()
            .filter_map(|e| serde_json::from_str(e).ok())
            .collect())
    }

    /// The earliest next run of any enabled job that is not running.
    pub fn next_wake_ms(&self) -> Result<Option<u64>, CronError> {
        Ok(self
            .list(false)?
            .iter()
            .filter(|j| j.state.running_at_ms.is_none())
            .filter_map(|j| j.state.next_run_at_ms)
            .min())
    }

    /// Start-up recovery: clears `runningAtMs` left by a previous process and computes a next run for enabled jobs that lack one. Jobs whose next run passed while the gateway
    /// was down stay due, so the first tick runs each of them once. Returns how many stale runs were cleared.
    pub fn recover(&self) -> Result<usize, CronError> {
        let now = self.now_ms();
        let mut cleared = 0;
        for job in self.list(true)? {
            let stale = job.state.running_at_ms.is_some();
            if !(stale || job.enabled && job.state.next_run_at_ms.is_none()) {
                continue;
            }
            cleared += usize::from(stale);
            off_worker(|| {
                self.store.cron_job_update(&job.id, |cur| {
                    let mut job = parse_job(cur?).ok()?;
                    // An interrupted run keeps its slot (`nextRunAtMs` is only moved when a run finishes),
                    // so it is due again and runs once.
                    job.state.running_at_ms = None;
                    if job.enabled && job.state.next_run_at_ms.is_none() {
                        job.recompute_next(now);
                    }
                    Some(to_json(&job))
                })
            })?;
        }
        Ok(cleared)
    }

    /// Clears a run that will never report (stuck or interrupted) as an error.
    fn abandon_run(&self, id: &str, now: u64, reason: &str) -> Result<(), CronError> {
        let result = RunResult {
            status: JobRunStatus::Error,
            error: Some(reason.to_string()),
            summary: None,
        };
        off_worker(|| {
            self.store.cron_job_update(id, |cur| {
                let mut job = parse_job(cur?).ok()?;
                let started = job.state.running_at_ms?;
                job.apply_result(&result, started, now);
                Some(to_json(&job))
            })
        })?;
        Ok(())
    }

    /// Claims every due job (and clears stuck runs); the caller runs them with `execute`.
    pub fn claim_due(&self) -> Result<Vec<CronJob>, CronError> {
        if !self.options.read().enabled {
            return Ok(Vec::new());
        }
        let now = self.now_ms();
        let mut claimed = Vec::new();
        for job in self.list(false)? {
            if job
                .state
                .running_at_ms
                .is_some_and(|started| now.saturating_sub(started) >= STUCK_RUN_MS)
            {
                self.abandon_run(&job.id, now, "stuck run cleared after 2 h")?;
                continue;
            }
            if job.is_due(now) {
                if let Some(job) = self.claim(&job.id, RunMode::Due, now)? {
                    claimed.push(job);
                }
            }
        }
        Ok(claimed)
    }

    /// Marks the job running if it may start now; `None` when it is running, disabled or not due.
    pub fn claim(&self, id: &str, mode: RunMode, now: u64) -> Result<Option<CronJob>, CronError> {
        let written = off_worker(|| {
            self.store.cron_job_update(id, |cur| {
                let mut job = parse_job(cur?).ok()?;
                let may_start = match mode {
                    RunMode::Due => job.is_due(now),
                    RunMode::Force => job.state.running_at_ms.is_none(),
                };
                if !may_start {
                    return None;
                }
                job.state.running_at_ms = Some(now);
                Some(to_json(&job))
            })
        })?;
        written.map(|json| parse_job(&json)).transpose()
    }

    /// Claims and runs every due job, waiting for all of them; returns their run-log entries.
    /// The job `id` (which must exist) claimed now for a manual run (`cron.run`, the tool's `run`):
    /// `None` when `mode` is due-only and it is not due.
    pub fn claim_now(&self, id: &str, mode: RunMode) -> Result<Option<CronJob>, CronError> {
        self.get(id)?;
        self.claim(id, mode, self.now_ms())
    }

    pub async fn run_due(&self) -> Result<Vec<Value>, CronError> {
        let claimed = self.claim_due()?;
        let runs = claimed.into_iter().map(|job| self.execute(job));
        futures_util::future::join_all(runs)
            .await
            .into_iter()
            .collect()
    }

    /// `cron.run`: runs one job now (`Due` only if it is due). `None` when it was not run.
    pub async fn run_job(&self, id: &str, mode: RunMode) -> Result<Option<Value>, CronError> {
        self.get(id)?;
        match self.claim(id, mode, self.now_ms())? {
            None => Ok(None),
            Some(job) => self.execute(job).await.map(Some),
        }
    }

    /// Runs a claimed job in a cron-lane slot under its timeout, then records the result.
    pub async fn execute(&self, job: CronJob) -> Result<Value, CronError> {
        let timeout_ms = match &job.payload {
            Payload::AgentTurn {
                timeout_seconds: Some(s),
                ..
            } => s.saturating_mul(1_000).max(1_000),
            _ => DEFAULT_JOB_TIMEOUT_MS,
        };
        self.runner.event(&json!({
            "jobId": job.id,
            "action": "started",
            "runAtMs": job.state.running_at_ms.unwrap_or_else(|| self.now_ms()),
        }));
        let result = {
            let slot = self.lanes.lane_slot(LaneKind::Cron).await;
            match tokio::time::timeout(
                Duration::from_millis(timeout_ms),
                self.runner.run(&job, slot),
            )
            .await
            {
                Ok(result) => result,
                Err(_) => RunResult {
                    status: JobRunStatus::Error,
                    error: Some(format!("job timed out after {timeout_ms} ms")),
                    summary: None,
                },
            }
        };
        self.record(job, result)
    }

    fn record(&self, job: CronJob, result: RunResult) -> Result<Value, CronError> {
        let ended = self.now_ms();
        let started = job.state.running_at_ms.unwrap_or(ended);
        let mut delete = false;
        let written = off_worker(|| {
            self.store.cron_job_update(&job.id, |cur| {
                let mut stored = parse_job(cur?).ok()?;
                delete = stored.apply_result(&result, started, ended);
                Some(to_json(&stored))
            })
        })?;
        let updated = match written {
            Some(json) => parse_job(&json)?,
            None => job,
        };
        let entry = json!({
            "ts": ended,
            "jobId": updated.id,
            "action": "finished",
            "status": result.status,
            "error": result.error,
            "summary": result.summary,
            "runAtMs": started,
            "durationMs": ended.saturating_sub(started),
            "nextRunAtMs": updated.state.next_run_at_ms,
        });
        off_worker(|| {
            self.store.cron_run_append(
                &updated.id,
                started,
                &entry.to_string(),
                self.options.read().run_log_keep,
            )
        })?;
        let mut event = entry.clone();
        if let Some(fields) = event.as_object_mut() {
            fields.remove("ts");
            fields.insert("job".into(), json!(updated));
        }
        self.runner.event(&event);
        if delete {
            self.remove(&updated.id)?;
        }
        self.runner.finished(&updated, &entry);
        Ok(entry)
    }

    /// Asks the timer to re-check now (after `wake` or a job change).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The timer: recovers, then repeatedly starts due jobs in the background and sleeps until the nearest
    /// next run (at most `MAX_TIMER_DELAY_MS`, at least `MIN_TIMER_DELAY_MS`), a wake-up, or shutdown.
    pub async fn run_timer(self: Arc<Self>, shutdown: CancellationToken) {
        if let Err(e) = self.recover() {
            log::warn!("cron: start-up recovery failed: {e}");
        }
        loop {
            match self.claim_due() {
                Ok(claimed) => {
                    for job in claimed {
                        let service = self.clone();
                        tokio::spawn(async move {
                            let id = job.id.clone();
                            if let Err(e) = service.execute(job).await {
                                log::warn!("cron: job {id}: {e}");
                            }
                            service.wake();
                        });
                    }
                }
                Err(e) => log::warn!("cron: cannot claim due jobs: {e}"),
            }
            let now = self.now_ms();
            let next = self.next_wake_ms().ok().flatten();
            let delay = next
                .map_or(MAX_TIMER_DELAY_MS, |n| n.saturating_sub(now))
                .clamp(
                    MIN_TIMER_DELAY_MS.min(MAX_TIMER_DELAY_MS),
                    MAX_TIMER_DELAY_MS,
                );
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(delay)) => {}
                _ = self.wake.notified() => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }
}
