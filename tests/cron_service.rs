//! The cron service driven by a hand-moved clock and a recording runner: schedules fire, missed runs run
//! once after a restart, errors back off, stale and stuck runs are cleared, timeouts and concurrency limits
//! hold, and the run log records each run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pincer::cron::{
    CronClock, CronJob, CronOptions, CronService, JobRunStatus, JobRunner, RunFuture, RunMode,
    RunResult,
};
use pincer::queue::{LaneGate, LaneKind, LaneLimits, LaneSlot};
use pincer::store::{Store, StoreOptions};
use serde_json::{json, Value};

struct FakeClock(AtomicU64);

impl CronClock for FakeClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl FakeClock {
    fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

/// Records which jobs ran and how many ran at once; fails while `fail` is set; hangs for jobs named
/// "hang"; takes 50 ms for jobs named "slow*". Holds its cron-lane slot until it ends.
#[derive(Default)]
struct RecordingRunner {
    ran: Mutex<Vec<String>>,
    fail: std::sync::atomic::AtomicBool,
    running: Arc<AtomicU64>,
    peak: Arc<AtomicU64>,
}

impl JobRunner for RecordingRunner {
    fn run(&self, job: &CronJob, slot: LaneSlot) -> RunFuture {
        assert_eq!(slot.lane(), LaneKind::Cron);
        self.ran.lock().expect("lock").push(job.name.clone());
        let fail = self.fail.load(Ordering::SeqCst);
        let hang = job.name == "hang";
        let slow = job.name.starts_with("slow");
        let (running, peak) = (self.running.clone(), self.peak.clone());
        Box::pin(async move {
            let _slot = slot;
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            if hang {
                std::future::pending::<()>().await;
            }
            if slow {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            running.fetch_sub(1, Ordering::SeqCst);
            if fail {
                RunResult {
                    status: JobRunStatus::Error,
                    error: Some("provider down".into()),
                    summary: None,
                }
            } else {
                RunResult {
                    status: JobRunStatus::Ok,
                    error: None,
                    summary: Some("done".into()),
                }
            }
        })
    }
}

struct Rig {
    dir: tempfile::TempDir,
    clock: Arc<FakeClock>,
    runner: Arc<RecordingRunner>,
    service: Arc<CronService>,
}

fn service_on(
    dir: &std::path::Path,
    clock: Arc<FakeClock>,
    runner: Arc<RecordingRunner>,
) -> Arc<CronService> {
    service_with_lane(dir, clock, runner, 1)
}

/// A service whose cron lane (`cron.maxConcurrentRuns`) has `cron_lane` slots.
fn service_with_lane(
    dir: &std::path::Path,
    clock: Arc<FakeClock>,
    runner: Arc<RecordingRunner>,
    cron_lane: usize,
) -> Arc<CronService> {
    let store = Store::open(dir, StoreOptions::default()).expect("open store");
    let options = CronOptions {
        enabled: true,
        run_log_keep: 2_000,
    };
    let lanes = Arc::new(LaneGate::new(LaneLimits {
        main: 4,
        subagent: 8,
        cron: cron_lane,
    }));
    CronService::new(store, clock, runner, options, lanes)
}

fn rig(start_ms: u64) -> Rig {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(FakeClock(AtomicU64::new(start_ms)));
    let runner = Arc::new(RecordingRunner::default());
    let service = service_on(dir.path(), clock.clone(), runner.clone());
    Rig {
        dir,
        clock,
        runner,
        service,
    }
}

fn every_job(name: &str, every_ms: u64) -> Value {
    json!({
        "name": name,
        "schedule": {"kind": "every", "everyMs": every_ms},
        "sessionTarget": "isolated",
        "payload": {"kind": "agentTurn", "message": "check the mail"},
    })
}

fn ran(rig: &Rig) -> Vec<String> {
    rig.runner.ran.lock().expect("lock").clone()
}

#[tokio::test]
async fn every_job_runs_when_due_and_not_before() {
    let rig = rig(1_000_000);
    let job = rig.service.add(&every_job("mail", 60_000)).expect("add");
    assert_eq!(job.state.next_run_at_ms, Some(1_060_000));
    rig.clock.set(1_059_999);
    assert!(rig.service.run_due().await.expect("tick").is_empty());
    rig.clock.set(1_060_000);
    let entries = rig.service.run_due().await.expect("tick");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["status"], "ok");
    assert_eq!(ran(&rig), ["mail"]);
    let job = rig.service.get(&job.id).expect("get");
    assert_eq!(job.state.next_run_at_ms, Some(1_120_000));
    assert_eq!(job.state.last_status, Some(JobRunStatus::Ok));
}

#[tokio::test]
async fn missed_runs_run_once_after_restart_and_jobs_survive() {
    let rig = rig(0);
    let id = rig.service.add(&every_job("mail", 60_000)).expect("add").id;
    // Claim the first run, then "crash" with it marked running: drop every handle without finishing.
    rig.clock.set(60_000);
    assert_eq!(rig.service.claim_due().expect("claim").len(), 1);
    let Rig {
        dir,
        clock,
        runner,
        service,
    } = rig;
    drop(service);
    // Down for ten periods.
    clock.set(660_500);
    let service = service_on(dir.path(), clock.clone(), runner.clone());
    assert_eq!(
        service.recover().expect("recover"),
        1,
        "the interrupted run is cleared"
    );
    let job = service.get(&id).expect("job survived");
    assert_eq!(job.state.running_at_ms, None);
    // The interrupted slot (and nine missed ones) are overdue: the job runs once, not once per period.
    let entries = service.run_due().await.expect("tick");
    assert_eq!(entries.len(), 1);
    assert!(service.run_due().await.expect("tick again").is_empty());
    let job = service.get(&id).expect("job");
    assert_eq!(job.state.next_run_at_ms, Some(720_000));
    assert_eq!(service.runs(&id, 10).expect("runs").len(), 1);
}

#[tokio::test]
async fn missed_one_shot_runs_once_and_is_disabled() {
    let rig = rig(0);
    let add = json!({
        "name": "reminder",
        "schedule": {"kind": "at", "at": "1970-01-01T00:01:00Z"},
        "sessionTarget": "main",
        "payload": {"kind": "systemEvent", "text": "stand up"},
    });
    let id = rig.service.add(&add).expect("add").id;
    rig.clock.set(3_600_000);
    assert_eq!(rig.service.run_due().await.expect("tick").len(), 1);
    rig.clock.set(7_200_000);
    assert!(rig.service.run_due().await.expect("tick").is_empty());
    let job = rig.service.get(&id).expect("job");
    assert!(!job.enabled);
    assert_eq!(ran(&rig), ["reminder"]);
}

#[tokio::test]
async fn consecutive_errors_back_off_then_reset() {
    let rig = rig(0);
    let id = rig
        .service
        .add(&every_job("flaky", 10_000))
        .expect("add")
        .id;
    rig.runner.fail.store(true, Ordering::SeqCst);
    let mut nexts = Vec::new();
    let mut now = 10_000;
    for _ in 0..3 {
        rig.clock.set(now);
        assert_eq!(rig.service.run_due().await.expect("tick").len(), 1);
        let job = rig.service.get(&id).expect("job");
        now = job.state.next_run_at_ms.expect("next");
        nexts.push(now);
    }
    assert_eq!(
        nexts,
        [40_000, 100_000, 400_000],
        "30 s, 1 min, 5 min after each error"
    );
    rig.runner.fail.store(false, Ordering::SeqCst);
    rig.clock.set(now);
    rig.service.run_due().await.expect("tick");
    let job = rig.service.get(&id).expect("job");
    assert_eq!(job.state.consecutive_errors, 0);
    assert_eq!(job.state.next_run_at_ms, Some(410_000));
}

#[tokio::test]
async fn stuck_run_is_cleared_after_two_hours() {
    let rig = rig(0);
    let id = rig.service.add(&every_job("mail", 60_000)).expect("add").id;
    rig.clock.set(60_000);
    rig.service.claim_due().expect("claim");
    rig.clock.set(60_000 + 3_600_000);
    assert!(rig.service.claim_due().expect("still running").is_empty());
    rig.clock.set(60_000 + 2 * 3_600_000);
    rig.service.claim_due().expect("clear");
    let job = rig.service.get(&id).expect("job");
    assert_eq!(job.state.running_at_ms, None);
    assert_eq!(
        job.state.last_error.as_deref(),
        Some("stuck run cleared after 2 h")
    );
}

#[tokio::test(start_paused = true)]
async fn job_timeout_records_an_error() {
    let rig = rig(0);
    let mut add = every_job("hang", 60_000);
    add["payload"]["timeoutSeconds"] = json!(5);
    let id = rig.service.add(&add).expect("add").id;
    let entry = tokio::time::timeout(
        Duration::from_secs(60),
        rig.service.run_job(&id, RunMode::Force),
    )
    .await
    .expect("the job's own timeout fires first")
    .expect("run")
    .expect("ran");
    assert_eq!(entry["status"], "error");
    assert_eq!(entry["error"], "job timed out after 5000 ms");
}

#[tokio::test]
async fn manual_run_due_mode_skips_jobs_not_due() {
    let rig = rig(0);
    let id = rig.service.add(&every_job("mail", 60_000)).expect("add").id;
    assert!(rig
        .service
        .run_job(&id, RunMode::Due)
        .await
        .expect("due")
        .is_none());
    assert!(rig
        .service
        .run_job(&id, RunMode::Force)
        .await
        .expect("force")
        .is_some());
    assert!(rig.service.run_job("nope", RunMode::Force).await.is_err());
}

#[tokio::test]
async fn update_and_remove_change_the_schedule() {
    let rig = rig(0);
    let id = rig.service.add(&every_job("mail", 60_000)).expect("add").id;
    let job = rig
        .service
        .update(
            &id,
            &json!({"schedule": {"kind": "cron", "expr": "0 9 * * *", "tz": "Europe/Berlin"}}),
        )
        .expect("update");
    // 1970-01-01 09:00 in Berlin (UTC+1) is 08:00 UTC.
    assert_eq!(job.state.next_run_at_ms, Some(8 * 3_600_000));
    assert!(rig
        .service
        .update(&id, &json!({"sessionTarget": "main"}))
        .is_err());
    assert!(rig
        .service
        .update(&id, &json!({"enabled": false}))
        .expect("disable")
        .state
        .next_run_at_ms
        .is_none());
    assert!(rig.service.list(false).expect("list").is_empty());
    assert_eq!(rig.service.list(true).expect("list all").len(), 1);
    assert!(rig.service.remove(&id).expect("remove"));
    assert!(rig.service.get(&id).is_err());
    drop(rig.dir);
}

#[tokio::test]
async fn invalid_jobs_are_refused_with_the_field() {
    let rig = rig(0);
    let mut bad = every_job("x", 60_000);
    bad["schedule"] = json!({"kind": "cron", "expr": "61 * * * *"});
    let error = rig.service.add(&bad).expect_err("bad minute").to_string();
    assert!(error.contains("minute"), "{error}");
    assert!(rig.service.list(true).expect("list").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn due_jobs_run_at_most_cron_lane_at_once() {
    for lane in [1_usize, 2] {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = Arc::new(FakeClock(AtomicU64::new(0)));
        let runner = Arc::new(RecordingRunner::default());
        let service = service_with_lane(dir.path(), clock.clone(), runner.clone(), lane);
        for n in 0..4 {
            service
                .add(&every_job(&format!("slow-{n}"), 60_000))
                .expect("add");
        }
        clock.set(60_000);
        let entries = service.run_due().await.expect("tick");
        assert_eq!(entries.len(), 4);
        assert!(entries.iter().all(|e| e["status"] == "ok"), "{entries:?}");
        assert_eq!(
            runner.peak.load(Ordering::SeqCst),
            lane as u64,
            "four due jobs with {lane} cron slot(s)"
        );
    }
}

/// A reload that turns `cron.enabled` off stops due jobs from being
/// claimed (and `options()` says so); turning it back on runs them.
#[tokio::test]
async fn disabling_cron_stops_due_runs_until_it_is_enabled_again() {
    let rig = rig(0);
    rig.service.add(&every_job("mail", 60_000)).expect("add");
    let off = CronOptions {
        enabled: false,
        run_log_keep: 2_000,
    };
    rig.service.apply_options(off.clone());
    assert_eq!(rig.service.options(), off);
    rig.clock.set(60_000);
    assert!(rig.service.run_due().await.expect("tick").is_empty());
    assert!(ran(&rig).is_empty());
    rig.service.apply_options(CronOptions {
        enabled: true,
        ..off
    });
    assert_eq!(rig.service.run_due().await.expect("tick").len(), 1);
    assert_eq!(ran(&rig), ["mail"]);
}
