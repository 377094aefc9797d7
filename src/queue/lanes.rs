//! Lanes: how many runs may execute at once. The session lane lets one run
//! per session key through at a time (FIFO); the main (global), subagent and
//! cron lanes each have their own limit, so a busy lane never starves
//! another. Tokio's mutex and semaphore are fair, so each lane is FIFO.
//!
//! This file must not know what a run does or where its messages came from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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

/// Lane sizes (from the board profile unless the config overrides them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneLimits {
    pub main: usize,
    pub subagent: usize,
    pub cron: usize,
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

/// The lanes of one gateway.
pub struct LaneGate {
    main: Arc<Semaphore>,
    subagent: Arc<Semaphore>,
    cron: Arc<Semaphore>,
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl LaneGate {
    pub fn new(limits: LaneLimits) -> LaneGate {
        LaneGate {
            main: Arc::new(Semaphore::new(limits.main.max(1))),
            subagent: Arc::new(Semaphore::new(limits.subagent.max(1))),
            cron: Arc::new(Semaphore::new(limits.cron.max(1))),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    fn semaphore(&self, lane: LaneKind) -> Arc<Semaphore> {
        match lane {
            LaneKind::Main => self.main.clone(),
            LaneKind::Subagent => self.subagent.clone(),
            LaneKind::Cron => self.cron.clone(),
        }
    }

    /// Waits for a slot in `lane` only (the caller already serialises the session).
    pub async fn lane_slot(&self, lane: LaneKind) -> OwnedSemaphorePermit {
        self.semaphore(lane)
            .acquire_owned()
            .await
            .expect("lane semaphores are never closed")
    }

    /// Waits for this session's turn, then a slot in `lane`, in that order.
    pub async fn admit(&self, session_key: &str, lane: LaneKind) -> LanePass {
        let lock = {
            let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            sessions.entry(session_key.to_string()).or_default().clone()
        };
        let session = lock.lock_owned().await;
        let slot = self.lane_slot(lane).await;
        LanePass {
            _session: Some(session),
            _slot: slot,
        }
    }

    /// Forgets session locks nobody holds or waits for (keeps the map bounded).
    pub fn prune_idle_sessions(&self) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|_, lock| Arc::strong_count(lock) > 1);
    }

    /// Session locks currently remembered.
    pub fn session_count(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Free slots in a lane right now.
    pub fn available(&self, lane: LaneKind) -> usize {
        self.semaphore(lane).available_permits()
    }
}
