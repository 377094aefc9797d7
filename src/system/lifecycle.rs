//! The process's lifecycle, shared by every layer: whether it takes new work
//! (ready, not draining), the shutdown signal, and the tracker of the
//! background tasks that shutdown waits for.
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
    }
}
