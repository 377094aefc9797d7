//! The echo tracker: texts (and message ids) the bot itself sent recently,
//! so a platform that echoes our own messages back never triggers a run.
//! Bounded to `MAX_ECHO_ITEMS`, oldest forgotten first.
//!
//! This file must not send anything.

use std::collections::{HashSet, VecDeque};

use parking_lot::Mutex;

/// Most remembered outbound items (upstream's echo tracker size).
pub const MAX_ECHO_ITEMS: usize = 500;

#[derive(Default)]
pub struct EchoTracker {
    items: Mutex<(HashSet<String>, VecDeque<String>)>,
}

impl EchoTracker {
    pub fn new() -> EchoTracker {
        EchoTracker::default()
    }

    fn key(session_key: &str, text: &str) -> String {
        format!("{session_key}\u{1f}{}", text.trim())
    }

    /// Remembers something the bot sent into `session_key`.
    pub fn record(&self, session_key: &str, text: &str) {
        let key = EchoTracker::key(session_key, text);
        let mut guard = self.items.lock();
        let (set, order) = &mut *guard;
        if set.insert(key.clone()) {
            order.push_back(key);
        }
        while order.len() > MAX_ECHO_ITEMS {
            if let Some(old) = order.pop_front() {
                set.remove(&old);
            }
        }
    }

    /// Whether an inbound text is our own echo (consumed once matched).
    pub fn is_echo(&self, session_key: &str, text: &str) -> bool {
        let key = EchoTracker::key(session_key, text);
        let mut guard = self.items.lock();
        let (set, order) = &mut *guard;
        if set.remove(&key) {
            order.retain(|k| k != &key);
            return true;
        }
        false
    }

    pub fn len(&self) -> usize {
        self.items.lock().1.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracker_is_bounded() {
        let tracker = EchoTracker::new();
        for i in 0..(MAX_ECHO_ITEMS + 20) {
            tracker.record("s", &format!("m{i}"));
        }
        assert_eq!(tracker.len(), MAX_ECHO_ITEMS);
        assert!(!tracker.is_echo("s", "m0"), "oldest forgotten");
        assert!(tracker.is_echo("s", &format!("m{}", MAX_ECHO_ITEMS + 19)));
    }
}
