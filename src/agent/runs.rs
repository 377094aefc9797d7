//! The run registry: every agent run in flight, how to abort it, and the
//! recent outcomes that `agent.wait` and repeated requests read.
//!
//! Admission goes through the queue's lanes (`queue::LaneGate`): runs of one
//! session execute one at a time, FIFO, and at most `max_concurrent` run at
//! once in the main lane. Finished outcomes are kept for a while in a
//! bounded table.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::providers::Usage;
use crate::queue::{Admission, LaneGate, LaneKind, LaneLimits, LanePass};

/// How many finished outcomes are remembered.
pub const MAX_FINISHED_RUNS: usize = 1000;
/// How long a finished outcome is remembered.
pub const FINISHED_RUN_TTL_MS: u64 = 10 * 60 * 1000;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Ok,
    Error,
    Aborted,
    Timeout,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::Error => "error",
            RunStatus::Aborted => "aborted",
            RunStatus::Timeout => "timeout",
        }
    }
}

/// The result of a finished run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub run_id: String,
    pub session_key: String,
    pub session_id: String,
    pub status: RunStatus,
    pub started_at_ms: u64,
    pub ended_at_ms: u64,
    /// The assistant's reply (partial when aborted).
    pub text: String,
    pub error: Option<String>,
    pub usage: Usage,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub stop_reason: Option<String>,
    /// What the store refused to keep for this turn, when its wait for the store ran out.
    pub unrecorded: Option<Unrecorded>,
}

/// A turn's write the store refused until the turn stopped waiting (a full disk, the store at its size cap):
/// the message's answer is not in the transcript, so whoever keeps the message keeps it for the next start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unrecorded {
    /// The user's message: no model ran and nothing was answered.
    Message,
    /// The reply: it was streamed to whoever watched, but the transcript lacks it.
    Reply,
}

impl RunOutcome {
    /// The outcome of a run that ended before any turn ran (aborted while it waited, or lost), now.
    pub fn without_turn(run_id: &str, session_key: &str, status: RunStatus, now_ms: u64) -> Self {
        RunOutcome {
            run_id: run_id.to_string(),
            session_key: session_key.to_string(),
            session_id: String::new(),
            status,
            started_at_ms: now_ms,
            ended_at_ms: now_ms,
            text: String::new(),
            error: None,
            usage: Default::default(),
            provider: None,
            model: None,
            stop_reason: None,
            unrecorded: None,
        }
    }
}

/// What a run tells the world while it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    Started {
        started_at_ms: u64,
    },
    /// `text` is the cumulative reply so far, `delta` the new part.
    Delta {
        text: String,
        delta: String,
    },
    /// Thinking as it arrives (reasoning level `stream` only): `text` is
    /// cumulative, `delta` the new part.
    ReasoningDelta {
        text: String,
        delta: String,
    },
    /// The whole thinking of the run, after the answer (reasoning level `on`).
    ReasoningBlock {
        text: String,
    },
    /// A tool call starting (`phase` "start") or finished ("result").
    Tool {
        phase: &'static str,
        call_id: String,
        name: String,
        args: serde_json::Value,
        result: Option<String>,
        is_error: bool,
    },
    Finished(Box<RunOutcome>),
}

struct ActiveRun {
    session_key: String,
    cancel: CancellationToken,
    done: watch::Receiver<Option<RunOutcome>>,
}

#[derive(Default)]
struct Tables {
    active: HashMap<String, ActiveRun>,
    finished: HashMap<String, (u64, RunOutcome)>,
    finished_order: VecDeque<String>,
}

/// The registry; cheap to share behind an `Arc`.
pub struct RunRegistry {
    tables: Mutex<Tables>,
    lanes: Arc<LaneGate>,
}

/// A registered run: what its task needs to report back.
pub struct RunTicket {
    pub run_id: String,
    pub cancel: CancellationToken,
    done: watch::Sender<Option<RunOutcome>>,
}

impl RunRegistry {
    pub fn new(max_concurrent: usize) -> Self {
        RunRegistry::with_lanes(LaneLimits {
            main: max_concurrent.max(1),
            ..LaneLimits::default()
        })
    }

    /// A registry whose main, subagent and cron lanes have these sizes.
    pub fn with_lanes(limits: LaneLimits) -> Self {
        RunRegistry::with_gate(Arc::new(LaneGate::new(limits)))
    }

    /// A registry admitting runs through `gate` (the gateway's one gate, shared with the command queue).
    pub fn with_gate(lanes: Arc<LaneGate>) -> Self {
        RunRegistry {
            tables: Mutex::new(Tables::default()),
            lanes,
        }
    }

    /// The lanes every run waits in.
    pub fn gate(&self) -> &Arc<LaneGate> {
        &self.lanes
    }

    /// Registers a new run; `None` when a run with this id is already active.
    pub fn register(&self, run_id: &str, session_key: &str) -> Option<RunTicket> {
        let mut tables = self.tables.lock();
        if tables.active.contains_key(run_id) {
            return None;
        }
        let cancel = CancellationToken::new();
        let (done_tx, done_rx) = watch::channel(None);
        tables.active.insert(
            run_id.to_string(),
            ActiveRun {
                session_key: session_key.to_string(),
                cancel: cancel.clone(),
                done: done_rx,
            },
        );
        drop(tables);
        crate::system::status::changed();
        Some(RunTicket {
            run_id: run_id.to_string(),
            cancel,
            done: done_tx,
        })
    }

    /// Waits for this session's turn (session lane) and a main-lane slot.
    pub async fn admit(&self, session_key: &str) -> LanePass {
        self.lanes.admit(session_key, LaneKind::Main).await
    }

    /// Waits for whatever `admission` still lacks: the session's turn and a lane slot (runs nested in
    /// another run use the subagent lane, so they never wait on their caller's slot).
    pub async fn admit_with(&self, session_key: &str, admission: Admission) -> LanePass {
        self.lanes.complete(session_key, admission).await
    }

    /// Free slots in a lane right now.
    pub fn lane_available(&self, lane: LaneKind) -> usize {
        self.lanes.available(lane)
    }

    /// Records a run's outcome and wakes its waiters.
    pub fn finish(&self, ticket: RunTicket, outcome: RunOutcome, now_ms: u64) {
        let mut tables = self.tables.lock();
        tables.active.remove(&ticket.run_id);
        self.lanes.prune_idle_sessions();
        prune_finished(&mut tables, now_ms);
        tables.finished_order.push_back(ticket.run_id.clone());
        tables
            .finished
            .insert(ticket.run_id.clone(), (now_ms, outcome.clone()));
        drop(tables);
        crate::system::status::changed();
        let _ = ticket.done.send(Some(outcome));
    }

    /// Aborts one run; returns whether it was active.
    pub fn abort(&self, run_id: &str) -> bool {
        match self.tables.lock().active.get(run_id) {
            Some(run) => {
                run.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Aborts every active run of a session; returns their ids.
    pub fn abort_session(&self, session_key: &str) -> Vec<String> {
        let tables = self.tables.lock();
        let mut ids = Vec::new();
        for (id, run) in &tables.active {
            if run.session_key == session_key {
                run.cancel.cancel();
                ids.push(id.clone());
            }
        }
        ids.sort();
        ids
    }

    /// Aborts everything (shutdown deadline passed).
    pub fn abort_all(&self) {
        for run in self.tables.lock().active.values() {
            run.cancel.cancel();
        }
    }

    /// The session of an active run.
    pub fn session_of(&self, run_id: &str) -> Option<String> {
        self.tables
            .lock()
            .active
            .get(run_id)
            .map(|r| r.session_key.clone())
    }

    pub fn active_count(&self) -> usize {
        self.tables.lock().active.len()
    }

    /// Active run ids of one session.
    pub fn active_in_session(&self, session_key: &str) -> Vec<String> {
        let mut ids: Vec<String> = self
            .tables
            .lock()
            .active
            .iter()
            .filter(|(_, r)| r.session_key == session_key)
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// A remembered outcome.
    pub fn finished(&self, run_id: &str) -> Option<RunOutcome> {
        self.tables
            .lock()
            .finished
            .get(run_id)
            .map(|(_, o)| o.clone())
    }

    /// Waits up to `timeout` for a run to finish. `None` on timeout.
    pub async fn wait(&self, run_id: &str, timeout: Duration) -> Option<RunOutcome> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let receiver = {
                let tables = self.tables.lock();
                if let Some((_, outcome)) = tables.finished.get(run_id) {
                    return Some(outcome.clone());
                }
                tables.active.get(run_id).map(|r| r.done.clone())
            };
            match receiver {
                Some(mut rx) => {
                    let waited =
                        tokio::time::timeout_at(deadline, rx.wait_for(Option::is_some)).await;
                    return match waited {
                        Ok(Ok(outcome)) => outcome.clone(),
                        Ok(Err(_)) => self.finished(run_id),
                        Err(_) => None,
                    };
                }
                // Not started yet: poll until it appears or time runs out.
                None => {
                    if tokio::time::Instant::now() >= deadline {
                        return None;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

fn prune_finished(tables: &mut Tables, now_ms: u64) {
    while let Some(oldest) = tables.finished_order.front().cloned() {
        let expired = tables
            .finished
            .get(&oldest)
            .is_none_or(|(at, _)| now_ms.saturating_sub(*at) > FINISHED_RUN_TTL_MS);
        if expired || tables.finished_order.len() >= MAX_FINISHED_RUNS {
            tables.finished_order.pop_front();
            tables.finished.remove(&oldest);
        } else {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn outcome(run_id: &str, session: &str) -> RunOutcome {
        RunOutcome {
            run_id: run_id.into(),
            session_key: session.into(),
            session_id: "s".into(),
            status: RunStatus::Ok,
            started_at_ms: 1,
            ended_at_ms: 2,
            text: "hi".into(),
            error: None,
            usage: Usage::default(),
            provider: None,
            model: None,
            stop_reason: None,
            unrecorded: None,
        }
    }

    #[tokio::test]
    async fn wait_returns_outcome_once_finished() {
        let registry = Arc::new(RunRegistry::new(2));
        let ticket = registry.register("r1", "k").expect("new run");
        assert!(
            registry.register("r1", "k").is_none(),
            "duplicate id refused"
        );
        let waiter = {
            let registry = registry.clone();
            tokio::spawn(async move { registry.wait("r1", Duration::from_secs(5)).await })
        };
        registry.finish(ticket, outcome("r1", "k"), 10);
        let got = waiter.await.expect("join").expect("finished");
        assert_eq!(got.text, "hi");
        assert_eq!(
            registry.finished("r1").map(|o| o.status),
            Some(RunStatus::Ok)
        );
        assert_eq!(registry.active_count(), 0);
    }

    #[tokio::test]
    async fn wait_times_out_for_unknown_run() {
        let registry = RunRegistry::new(1);
        assert!(registry
            .wait("nope", Duration::from_millis(120))
            .await
            .is_none());
    }

    #[test]
    fn abort_session_cancels_only_that_session() {
        let registry = RunRegistry::new(2);
        let a = registry.register("a", "s1").expect("a");
        let b = registry.register("b", "s2").expect("b");
        assert_eq!(registry.abort_session("s1"), vec!["a".to_string()]);
        assert!(a.cancel.is_cancelled());
        assert!(!b.cancel.is_cancelled());
    }

    #[test]
    fn finished_table_is_bounded() {
        let registry = RunRegistry::new(1);
        for i in 0..(MAX_FINISHED_RUNS + 50) {
            let id = format!("r{i}");
            let ticket = registry.register(&id, "k").expect("new");
            registry.finish(ticket, outcome(&id, "k"), 100);
        }
        assert!(registry.tables.lock().finished.len() <= MAX_FINISHED_RUNS);
        assert!(registry.finished("r0").is_none());
        assert!(registry
            .finished(&format!("r{}", MAX_FINISHED_RUNS + 49))
            .is_some());
    }
}
