//! How long the store's commits take, and whether async code may call the store without leaving its thread.
//!
//! Every store call blocks, and a commit waits for its fsync. On an SD card that is milliseconds, so async code
//! hands store work to a blocking thread (`block_in_place`) and the event loop goes on. That hand-off wakes
//! another thread: tens of microseconds of latency and CPU, more than a whole commit costs where fsync is fast
//! (tmpfs, NVMe). This file keeps the figure that decides: a commit counts as quick when it (its fsync
//! included) finishes within `QUICK_COMMIT_MICROS`, and store work may run inline once `QUICK_STREAK` commits
//! in a row were quick and no other write transaction is open (an inline call must never queue behind, say, a
//! memory index batch). One slow commit sends every caller back to the blocking thread until the streak is
//! rebuilt, so a device that is slow now and then costs at most one stall of the event loop per streak.
//!
//! It only measures and answers; `env.rs` reports each commit and `Store::run_blocking` asks.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// A commit (its fsync included) within this many microseconds is quick: less than the thread hand-off that
/// would keep it off the event loop.
pub const QUICK_COMMIT_MICROS: u64 = 250;
/// Quick commits in a row before store work may run on the calling thread.
pub const QUICK_STREAK: u32 = 16;

/// Recent commit latency and open write transactions of one environment.
#[derive(Debug, Default)]
pub struct CommitPace {
    /// Quick commits since the last slow one (saturating).
    streak: AtomicU32,
    /// Write transactions open now (begun, not yet committed or aborted).
    writers: AtomicU32,
}

impl CommitPace {
    /// Records one commit's duration.
    pub fn commit_took(&self, took: Duration) {
        if took <= Duration::from_micros(QUICK_COMMIT_MICROS) {
            let _ = self
                .streak
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    Some(n.saturating_add(1))
                });
        } else {
            self.streak.store(0, Ordering::Relaxed);
        }
    }

    /// Marks a write transaction open until the guard drops.
    pub fn writing(&self) -> WriterGuard<'_> {
        self.writers.fetch_add(1, Ordering::AcqRel);
        WriterGuard { pace: self }
    }

    /// Whether store work may run on the calling (async) thread: recent commits were quick and no write is
    /// open that it could wait behind.
    pub fn inline_ok(&self) -> bool {
        self.streak.load(Ordering::Relaxed) >= QUICK_STREAK
            && self.writers.load(Ordering::Acquire) == 0
    }
}

/// An open write transaction, counted by [`CommitPace::writing`].
pub struct WriterGuard<'a> {
    pace: &'a CommitPace,
}

impl Drop for WriterGuard<'_> {
    fn drop(&mut self) {
        self.pace.writers.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUICK: Duration = Duration::from_micros(QUICK_COMMIT_MICROS);
    const SLOW: Duration = Duration::from_micros(QUICK_COMMIT_MICROS + 1);

    #[test]
    fn store_work_stays_on_a_blocking_thread_until_a_streak_of_quick_commits() {
        let pace = CommitPace::default();
        assert!(!pace.inline_ok(), "a fresh store has shown nothing yet");
        for _ in 1..QUICK_STREAK {
            pace.commit_took(QUICK);
        }
        assert!(!pace.inline_ok(), "one commit short of the streak");
        pace.commit_took(QUICK);
        assert!(pace.inline_ok());
    }

    #[test]
    fn one_slow_commit_sends_store_work_back_to_a_blocking_thread() {
        let pace = CommitPace::default();
        for _ in 0..QUICK_STREAK * 4 {
            pace.commit_took(QUICK);
        }
        pace.commit_took(SLOW);
        assert!(!pace.inline_ok());
        for _ in 0..QUICK_STREAK {
            pace.commit_took(QUICK);
        }
        assert!(pace.inline_ok(), "a new streak earns it back");
    }

    #[test]
    fn an_open_write_keeps_store_work_off_the_calling_thread() {
        let pace = CommitPace::default();
        for _ in 0..QUICK_STREAK {
            pace.commit_took(QUICK);
        }
        let open = pace.writing();
        assert!(!pace.inline_ok(), "it would wait behind the open write");
        drop(open);
        assert!(pace.inline_ok());
    }
}
