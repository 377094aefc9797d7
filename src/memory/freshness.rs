//! When a search brings the index up to date first, after OpenClaw's memory sync settings:
//! `sync.onSearch` (default on) syncs before a search whenever the memory files changed since the
//! last sync (size or modification time of any file, or a file added or gone); `sync.onSessionStart`
//! (default on) does so for the first search of each session even with `onSearch` off. The periodic
//! sync (`sync.intervalMinutes`) is the watcher's (`watch.rs`).
//!
//! This file only remembers what the last sync saw and which sessions searched; `MemoryService`
//! decides and syncs.

use std::collections::HashSet;

use parking_lot::Mutex;

/// Sessions remembered as having searched; the set is emptied when full (a session forgotten that way
/// may sync once more on its next search).
pub const MAX_WARM_SESSIONS: usize = 1_024;

/// Cited path, size and modification time (ns) of each memory file, in discovery order.
pub type Fingerprint = Vec<(String, u64, u128)>;

#[derive(Default)]
pub(super) struct Freshness {
    synced: Mutex<Option<Fingerprint>>,
    warm: Mutex<HashSet<String>>,
}

impl Freshness {
    /// The files as the sync that just ended started from.
    pub(super) fn record(&self, seen: Fingerprint) {
        *self.synced.lock() = Some(seen);
    }

    /// Whether the files now differ from what the last sync saw (no sync yet: dirty).
    pub(super) fn is_dirty(&self, now: &Fingerprint) -> bool {
        self.synced.lock().as_ref() != Some(now)
    }

    /// True the first time `session_key` searches (then remembered, within the bound).
    pub(super) fn claim_session(&self, session_key: &str) -> bool {
        let mut warm = self.warm.lock();
        if warm.contains(session_key) {
            return false;
        }
        if warm.len() >= MAX_WARM_SESSIONS {
            warm.clear();
        }
        warm.insert(session_key.to_string());
        true
    }

    #[cfg(test)]
    pub(super) fn warm_sessions(&self) -> usize {
        self.warm.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_after_the_last_sync_is_dirty() {
        let freshness = Freshness::default();
        let files: Fingerprint = vec![("MEMORY.md".into(), 10, 1)];
        assert!(freshness.is_dirty(&files), "never synced");
        freshness.record(files.clone());
        assert!(!freshness.is_dirty(&files));
        assert!(freshness.is_dirty(&vec![("MEMORY.md".into(), 11, 2)]));
        assert!(freshness.is_dirty(&Vec::new()), "a file gone");
    }

    #[test]
    fn sessions_are_claimed_once_and_the_set_is_bounded() {
        let freshness = Freshness::default();
        assert!(freshness.claim_session("a"));
        assert!(!freshness.claim_session("a"));
        for i in 0..MAX_WARM_SESSIONS + 10 {
            freshness.claim_session(&format!("s{i}"));
        }
        assert!(freshness.warm_sessions() <= MAX_WARM_SESSIONS);
    }
}
