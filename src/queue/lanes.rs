//! Lanes: how many runs may execute at once. The session lane lets one run
//! per session key through at a time (FIFO); the main (global), subagent and
//! cron lanes each have their own limit, so a busy lane never starves
//! another. Tokio's mutex and semaphore are fair, so each lane is FIFO.
//!
//! A gateway has exactly one [`LaneGate`]: the command queue and the agent
//! runtime share it, so every run (channel, web chat, `agent`, cron,
//! heartbeat, sub-agent) waits in the same lanes. Lane sizes come from the
//! board profile unless the config sets them ([`LaneLimits::resolve`]) and
//! follow config reloads ([`LaneGate::resize`]).
//!
//! This file must not know what a run does or where its messages came from.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::config::Config;
use crate::system::board::BoardLimits;

use parking_lot::Mutex;
use tokio::sync::{OwnedMutexGuard, OwnedSemaphorePermit, Semaphore};

/// Default main-lane size (a Pi 4's profile; upstream's `maxConcurrent`).
pub const DEFAULT_MAIN_LANE: usize = 4;
/// Default cron-lane size (upstream's `cron.maxConcurrentRuns`).
pub use crate::system::board::DEFAULT_CRON_LANE;
/// Default subagent-lane size (upstream's subagent `maxConcurrent`).
pub use crate::system::board::DEFAULT_SUBAGENT_LANE;

/// Which global lane a run occupies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum LaneKind {
    #[default]
    Main,
    Subagent,
    Cron,
}

impl LaneKind {
    /// The lane's name in reports (`main`, `subagent`, `cron`).
    pub fn name(self) -> &'static str {
        match self {
            LaneKind::Main => "main",
            LaneKind::Subagent => "subagent",
            LaneKind::Cron => "cron",
        }
    }

    fn index(self) -> usize {
        match self {
            LaneKind::Main => 0,
            LaneKind::Subagent => 1,
            LaneKind::Cron => 2,
        }
    }
}

/// Lane sizes (from the board profile unless the config overrides them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneLimits {
    pub main: usize,
    pub subagent: usize,
    pub cron: usize,
}

impl LaneLimits {
    /// The same sizes with every lane at least one slot wide.
    fn at_least_one(self) -> LaneLimits {
        LaneLimits {
            main: self.main.max(1),
            subagent: self.subagent.max(1),
            cron: self.cron.max(1),
        }
    }

    /// The lane sizes for this board and config: `agents.defaults.maxConcurrent`,
    /// `agents.defaults.subagents.maxConcurrent` and `cron.maxConcurrentRuns` when
    /// set, else the board profile's; never below one.
    pub fn resolve(board: &BoardLimits, config: &Config) -> LaneLimits {
        let defaults = &config.agents.defaults;
        let subagent = defaults.subagents.as_ref().and_then(|s| s.max_concurrent);
        let pick = |set: Option<u32>, board: usize| set.map_or(board, |n| n as usize).max(1);
        LaneLimits {
            main: pick(defaults.max_concurrent, board.max_concurrent_runs),
            subagent: pick(subagent, board.subagent_lane),
            cron: pick(config.cron.max_concurrent_runs, board.cron_lane),
        }
    }
}

impl Default for LaneLimits {
    fn default() -> Self {
        LaneLimits {
            main: DEFAULT_MAIN_LANE,
            subagent: DEFAULT_SUBAGENT_LANE,
            cron: DEFAULT_CRON_LANE,
        }
    }
}

/// Held while a run executes; dropping it frees its session and lane slot.
pub struct LanePass {
    _session: Option<OwnedMutexGuard<()>>,
    _slot: OwnedSemaphorePermit,
}

/// A slot in one global lane, taken before the run's session (a cron job
/// holds its cron slot while it runs, timeout and all).
pub struct LaneSlot {
    lane: LaneKind,
    permit: OwnedSemaphorePermit,
}

impl LaneSlot {
    /// The lane the slot belongs to.
    pub fn lane(&self) -> LaneKind {
        self.lane
    }
}

/// How far a run has come through the lanes.
pub enum Admission {
    /// Nothing held yet: wait for the session, then a slot in this lane.
    Wait(LaneKind),
    /// The lane slot is held; wait for the session only.
    HoldingSlot(LaneSlot),
    /// Session and slot held (the command queue admitted the turn).
    Admitted(LanePass),
}

/// The lanes of one gateway.
pub struct LaneGate {
    main: Arc<Semaphore>,
    subagent: Arc<Semaphore>,
    cron: Arc<Semaphore>,
    /// The sizes the lanes have (or are shrinking to).
    limits: Mutex<LaneLimits>,
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Runs waiting for a slot, per lane (`LaneKind::index`).
    waiting: [AtomicUsize; 3],
}

/// One lane's figures for `health` and `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneUsage {
    pub lane: LaneKind,
    pub limit: usize,
    pub busy: usize,
    pub waiting: usize,
}

/// Counts a run as waiting for a slot while it lives (also when the wait is
/// cancelled).
struct WaitingGuard<'a>(&'a AtomicUsize);

impl<'a> WaitingGuard<'a> {
    fn enter(count: &'a AtomicUsize) -> WaitingGuard<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        WaitingGuard(count)
    }
}

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl LaneGate {
    pub fn new(limits: LaneLimits) -> LaneGate {
        let limits = limits.at_least_one();
        LaneGate {
            main: Arc::new(Semaphore::new(limits.main)),
            subagent: Arc::new(Semaphore::new(limits.subagent)),
            cron: Arc::new(Semaphore::new(limits.cron)),
            limits: Mutex::new(limits),
            sessions: Mutex::new(HashMap::new()),
            waiting: Default::default(),
        }
    }

    /// The lanes' sizes.
    pub fn limits(&self) -> LaneLimits {
        *self.limits.lock()
    }

    /// Gives the lanes new sizes (a config reload). A lane grows at once; a
    /// lane that shrinks takes back free slots now and busy ones as their runs
    /// end, so no running turn is cut short. Must be called inside a Tokio
    /// runtime when a lane shrinks below its busy slots.
    pub fn resize(&self, new: LaneLimits) {
        let mut limits = self.limits.lock();
        let old = *limits;
        let new = new.at_least_one();
        for (lane, from, to) in [
            (LaneKind::Main, old.main, new.main),
            (LaneKind::Subagent, old.subagent, new.subagent),
            (LaneKind::Cron, old.cron, new.cron),
        ] {
            let semaphore = self.semaphore(lane);
            if to > from {
                semaphore.add_permits(to - from);
            } else if from > to {
                let owed = from - to;
                let taken = semaphore.forget_permits(owed);
                if taken < owed {
                    let rest = (owed - taken) as u32;
                    tokio::spawn(async move {
                        if let Ok(permits) = semaphore.acquire_many_owned(rest).await {
                            permits.forget();
                        }
                    });
                }
            }
        }
        *limits = new;
    }

    fn semaphore(&self, lane: LaneKind) -> Arc<Semaphore> {
        match lane {
            LaneKind::Main => self.main.clone(),
            LaneKind::Subagent => self.subagent.clone(),
            LaneKind::Cron => self.cron.clone(),
        }
    }

    /// Waits for a slot in `lane` only; the run's session is waited for later
    /// ([`Admission::HoldingSlot`]).
    pub async fn lane_slot(&self, lane: LaneKind) -> LaneSlot {
        let waiting = WaitingGuard::enter(&self.waiting[lane.index()]);
        let permit = self
            .semaphore(lane)
            .acquire_owned()
            .await
            .expect("lane semaphores are never closed");
        drop(waiting);
        crate::system::status::changed();
        LaneSlot { lane, permit }
    }

    /// Waits for this session's turn, then a slot in `lane`, in that order.
    pub async fn admit(&self, session_key: &str, lane: LaneKind) -> LanePass {
        let session = self.session_turn(session_key).await;
        let slot = self.lane_slot(lane).await;
        LanePass {
            _session: Some(session),
            _slot: slot.permit,
        }
    }

    /// Waits for whatever `admission` still lacks.
    pub async fn complete(&self, session_key: &str, admission: Admission) -> LanePass {
        match admission {
            Admission::Wait(lane) => self.admit(session_key, lane).await,
            Admission::HoldingSlot(slot) => LanePass {
                _session: Some(self.session_turn(session_key).await),
                _slot: slot.permit,
            },
            Admission::Admitted(pass) => pass,
        }
    }

    /// Waits until no other run of this session holds its lane.
    async fn session_turn(&self, session_key: &str) -> OwnedMutexGuard<()> {
        let lock = {
            let mut sessions = self.sessions.lock();
            sessions.entry(session_key.to_string()).or_default().clone()
        };
        lock.lock_owned().await
    }

    /// Forgets session locks nobody holds or waits for (keeps the map bounded).
    pub fn prune_idle_sessions(&self) {
        let mut sessions = self.sessions.lock();
        sessions.retain(|_, lock| Arc::strong_count(lock) > 1);
    }

    /// Session locks currently remembered.
    pub fn session_count(&self) -> usize {
        self.sessions.lock().len()
    }

    /// Free slots in a lane right now.
    pub fn available(&self, lane: LaneKind) -> usize {
        self.semaphore(lane).available_permits()
    }

    /// Each lane's size, busy slots and the runs waiting for one, now.
    pub fn usage(&self) -> Vec<LaneUsage> {
        let limits = self.limits();
        [
            (LaneKind::Main, limits.main),
            (LaneKind::Subagent, limits.subagent),
            (LaneKind::Cron, limits.cron),
        ]
        .into_iter()
        .map(|(lane, limit)| LaneUsage {
            lane,
            limit,
            busy: limit.saturating_sub(self.available(lane)),
            waiting: self.waiting[lane.index()].load(Ordering::Acquire),
        })
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn config(text: &str) -> Config {
        crate::config::parse_str(text, "test").expect("valid config")
    }

    fn board() -> BoardLimits {
        BoardLimits {
            max_concurrent_runs: 2,
            subagent_lane: 4,
            cron_lane: 1,
            ..BoardLimits::default()
        }
    }

    #[tokio::test]
    async fn usage_counts_busy_slots_and_waiting_runs() {
        let gate = Arc::new(LaneGate::new(LaneLimits {
            main: 1,
            subagent: 1,
            cron: 1,
        }));
        let held = gate.lane_slot(LaneKind::Main).await;
        let waiter = {
            let gate = Arc::clone(&gate);
            tokio::spawn(async move { gate.lane_slot(LaneKind::Main).await })
        };
        let main = |gate: &LaneGate| gate.usage()[0];
        while main(&gate).waiting == 0 {
            tokio::task::yield_now().await;
        }
        let usage = main(&gate);
        assert_eq!(
            (usage.lane, usage.limit, usage.busy, usage.waiting),
            (LaneKind::Main, 1, 1, 1)
        );
        drop(held);
        let second = waiter.await.expect("waiter");
        let usage = main(&gate);
        assert_eq!((usage.busy, usage.waiting), (1, 0));
        drop(second);
        assert_eq!(main(&gate).busy, 0);
        assert_eq!(gate.usage()[2].lane, LaneKind::Cron);
    }

    #[test]
    fn lane_sizes_come_from_the_board_unless_the_config_sets_them() {
        let unset = LaneLimits::resolve(&board(), &config("{}"));
        assert_eq!(
            unset,
            LaneLimits {
                main: 2,
                subagent: 4,
                cron: 1
            }
        );
        let set = LaneLimits::resolve(
            &board(),
            &config(
                "{ agents: { defaults: { maxConcurrent: 6, subagents: { maxConcurrent: 3 } } },
                   cron: { maxConcurrentRuns: 5 } }",
            ),
        );
        assert_eq!(
            set,
            LaneLimits {
                main: 6,
                subagent: 3,
                cron: 5
            }
        );
    }

    #[tokio::test]
    async fn a_lane_grows_at_once_and_shrinks_as_its_runs_end() {
        let gate = LaneGate::new(LaneLimits {
            main: 2,
            subagent: 1,
            cron: 1,
        });
        let first = gate.admit("a", LaneKind::Main).await;
        let second = gate.admit("b", LaneKind::Main).await;
        assert_eq!(gate.available(LaneKind::Main), 0);
        gate.resize(LaneLimits {
            main: 3,
            subagent: 1,
            cron: 1,
        });
        assert_eq!(gate.available(LaneKind::Main), 1, "grown at once");
        gate.resize(LaneLimits {
            main: 1,
            subagent: 1,
            cron: 1,
        });
        assert_eq!(
            gate.available(LaneKind::Main),
            0,
            "the free slot is taken back"
        );
        assert_eq!(gate.limits().main, 1);
        drop(first);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            gate.available(LaneKind::Main),
            0,
            "an ended run's slot pays the shrink"
        );
        drop(second);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(gate.available(LaneKind::Main), 1, "one slot, as resized");
        let _third = gate.admit("c", LaneKind::Main).await;
        assert_eq!(gate.available(LaneKind::Main), 0);
    }
}
