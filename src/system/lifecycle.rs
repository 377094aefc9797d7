//! The process's lifecycle, shared by every layer: whether it takes new work
//! (ready, not draining), the shutdown signal, the tracker of the
//! background tasks that shutdown waits for, and the request to restart in
//! place (drain, then re-exec: `system::restart`).
//!
//! This file only holds the flags; who sets them is the composition root.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Ready, draining, shutdown and the background tasks.
#[derive(Default)]
pub struct Lifecycle {
    pub shutdown: CancellationToken,
    pub tasks: TaskTracker,
    /// Cancelled when someone asks for a restart in place (`/restart`, a
    /// config change that needs one); the gateway then drains and re-execs.
    pub restart: CancellationToken,
    ready: AtomicBool,
    draining: AtomicBool,
}

impl Lifecycle {
    /// Started and not shutting down: new work is taken.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire) && !self.draining.load(Ordering::Acquire)
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Stops taking new work (shutdown has begun).
    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Shutdown (or a restart) has begun: work refused now is not lost work,
    /// it waits for the next start.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Asks the gateway to drain and restart in place; `why` is logged.
    /// Asking again while a restart is pending changes nothing.
    pub fn request_restart(&self, why: &str) {
        if !self.restart.is_cancelled() {
            log::info!("restart in place requested: {why}");
            self.restart.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_between_start_and_drain() {
        let lifecycle = Lifecycle::default();
        assert!(!lifecycle.is_ready());
        lifecycle.set_ready();
        assert!(lifecycle.is_ready());
        lifecycle.set_draining();
        assert!(!lifecycle.is_ready());
        assert!(lifecycle.is_draining());
    }

    #[test]
    fn a_restart_request_is_seen_once_and_stays() {
        let lifecycle = Lifecycle::default();
        assert!(!lifecycle.restart.is_cancelled());
        lifecycle.request_restart("test");
        lifecycle.request_restart("again");
        assert!(lifecycle.restart.is_cancelled());
    }
}
