//! Idempotency keys: a repeated `agent` / `chat.send` / `send` with the same
//! key returns the first answer instead of running again.
//!
//! Entries live 5 minutes and at most 1000 are kept (upstream's numbers);
//! finished answers are also written to the store so a restart between a
//! client's first try and its retry does not run the turn twice.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;
use serde_json::Value;

use crate::store::{Settlement, Store};

/// How long an answer is remembered.
pub const DEDUPE_TTL_MS: u64 = 5 * 60 * 1000;
/// How many answers are remembered.
pub const DEDUPE_MAX: usize = 1000;
/// How many repeated requests may wait on one run's final answer.
pub const MAX_WAITERS_PER_KEY: usize = 8;

/// A connection and request id waiting for a final `res`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    pub conn_id: String,
    pub request_id: String,
}

/// What the cache knows about a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// The run is still going; `ack` is what its first request was told.
    InFlight { ack: Value },
    /// The final answer: `ok` and the `res` payload (and error when not ok).
    Done {
        ok: bool,
        payload: Value,
        error: Option<Value>,
    },
}

/// An answer as `finish` takes it: `ok`, the `res` payload, the error as JSON.
pub type Answer = (bool, Value, Option<Value>);

struct Entry {
    expires_at_ms: u64,
    seen: Seen,
    waiters: Vec<Waiter>,
    /// The answer the run's reply commit already kept in the store (`mark_persisted`).
    persisted: Option<Answer>,
    /// Matches the key's latest place in `Entries::order`.
    stamp: u64,
}

/// The keys, and their insertion order for eviction. A key that finishes or is forgotten leaves its old place
/// in `order` behind (skipped when it comes up: its stamp no longer matches) instead of a linear search; the
/// leftovers are swept once they outnumber the live keys.
#[derive(Default)]
struct Entries {
    map: HashMap<String, Entry>,
    order: VecDeque<(String, u64)>,
    next_stamp: u64,
}

impl Entries {
    /// Puts `key` at the back of the order; returns the stamp its entry must carry.
    fn touch(&mut self, key: &str) -> u64 {
        self.next_stamp += 1;
        self.order.push_back((key.to_string(), self.next_stamp));
        if self.order.len() > 2 * DEDUPE_MAX.max(self.map.len()) {
            let map = &self.map;
            self.order
                .retain(|(k, stamp)| map.get(k).is_some_and(|e| e.stamp == *stamp));
        }
        self.next_stamp
    }

    /// Keeps `seen` under `key` (room made by evicting the oldest keys); the
    /// key's old entry, if any, must be gone.
    fn insert(&mut self, key: &str, seen: Seen, now_ms: u64) {
        while self.map.len() >= DEDUPE_MAX && self.evict_oldest() {}
        let stamp = self.touch(key);
        self.map.insert(
            key.to_string(),
            Entry {
                expires_at_ms: now_ms + DEDUPE_TTL_MS,
                seen,
                waiters: Vec::new(),
                persisted: None,
                stamp,
            },
        );
    }

    /// Drops the oldest live key; `false` when none is left.
    fn evict_oldest(&mut self) -> bool {
        while let Some((key, stamp)) = self.order.pop_front() {
            if self.map.get(&key).is_some_and(|e| e.stamp == stamp) {
                self.map.remove(&key);
                return true;
            }
        }
        false
    }
}

/// The cache itself.
pub struct IdempotencyCache {
    entries: Mutex<Entries>,
    store: Option<Store>,
}

impl IdempotencyCache {
    pub fn new(store: Option<Store>) -> Self {
        IdempotencyCache {
            entries: Mutex::new(Entries::default()),
            store,
        }
    }

    /// Looks a key up (memory first, then the store).
    pub fn get(&self, key: &str, now_ms: u64) -> Option<Seen> {
        {
            let guard = self.entries.lock();
            if let Some(entry) = guard.map.get(key) {
                if entry.expires_at_ms > now_ms {
                    return Some(entry.seen.clone());
                }
            }
        }
        let store = self.store.as_ref()?;
        let bytes = store.dedupe_get(&store_key(key), now_ms).ok()??;
        let value: Value = serde_json::from_slice(&bytes).ok()?;
        Some(Seen::Done {
            ok: value.get("ok")?.as_bool()?,
            payload: value.get("payload").cloned().unwrap_or(Value::Null),
            error: value.get("error").cloned().filter(|e| !e.is_null()),
        })
    }

    /// Marks a key in flight; `false` when it was already known.
    pub fn begin(&self, key: &str, ack: Value, now_ms: u64) -> bool {
        if self.get(key, now_ms).is_some() {
            return false;
        }
        self.entries
            .lock()
            .insert(key, Seen::InFlight { ack }, now_ms);
        true
    }

    /// Notes that `answer` for the in-flight `key` was committed to the store with the run's reply, so
    /// finishing the key with the same answer writes nothing more.
    pub fn mark_persisted(&self, key: &str, answer: Answer) {
        if let Some(entry) = self.entries.lock().map.get_mut(key) {
            entry.persisted = Some(answer);
        }
    }

    /// Whether `key` was finished in the store already with this very answer.
    fn already_persisted(&self, key: &str, answer: (bool, &Value, Option<&Value>)) -> bool {
        let guard = self.entries.lock();
        let persisted = guard
            .map
            .get(key)
            .and_then(|entry| entry.persisted.as_ref());
        persisted.is_some_and(|(ok, payload, error)| (*ok, payload, error.as_ref()) == answer)
    }

    /// Adds a waiter for an in-flight key; `false` when full or not in flight.
    pub fn add_waiter(&self, key: &str, waiter: Waiter) -> bool {
        let mut guard = self.entries.lock();
        match guard.map.get_mut(key) {
            Some(entry)
                if matches!(entry.seen, Seen::InFlight { .. })
                    && entry.waiters.len() < MAX_WAITERS_PER_KEY =>
            {
                entry.waiters.push(waiter);
                true
            }
            _ => false,
        }
    }

    /// Records the final answer; returns the waiters to notify.
    pub fn finish(
        &self,
        key: &str,
        ok: bool,
        payload: Value,
        error: Option<Value>,
        now_ms: u64,
    ) -> Vec<Waiter> {
        self.finish_settling(key, ok, payload, error, now_ms, &[])
    }

    /// [`IdempotencyCache::finish`], removing the `done` store meta keys (the
    /// durable records of the message this answers) in the same commit.
    pub fn finish_settling(
        &self,
        key: &str,
        ok: bool,
        payload: Value,
        error: Option<Value>,
        now_ms: u64,
        done: &[String],
    ) -> Vec<Waiter> {
        let kept = done.is_empty() && self.already_persisted(key, (ok, &payload, error.as_ref()));
        if let Some(store) = self.store.as_ref().filter(|_| !kept) {
            let settle = settlement(key, ok, &payload, error.as_ref(), now_ms, done);
            if let Err(e) = store.settle(&settle) {
                log::warn!("could not persist idempotency key {key}: {e}");
            }
        }
        self.finish_persisted(key, ok, payload, error, now_ms)
    }

    /// [`IdempotencyCache::finish`] for an answer already in the store (its [`settlement`] went into the
    /// commit of the turn's reply): the memory side only.
    pub fn finish_persisted(
        &self,
        key: &str,
        ok: bool,
        payload: Value,
        error: Option<Value>,
        now_ms: u64,
    ) -> Vec<Waiter> {
        let mut entries = self.entries.lock();
        let waiters = entries
            .map
            .remove(key)
            .map(|e| e.waiters)
            .unwrap_or_default();
        entries.insert(key, Seen::Done { ok, payload, error }, now_ms);
        waiters
    }

    /// Forgets a key (the request failed before anything ran).
    pub fn forget(&self, key: &str) {
        self.entries.lock().map.remove(key);
    }
}

fn store_key(key: &str) -> String {
    format!("idem:{key}")
}

/// The store's copy of a final answer for `key` and the removal of the `done` records, to commit with the
/// turn's reply (`Store::record_turn_settling`) or on its own.
pub fn settlement(
    key: &str,
    ok: bool,
    payload: &Value,
    error: Option<&Value>,
    now_ms: u64,
    done: &[String],
) -> Settlement {
    let record = StoredAnswer { ok, payload, error };
    Settlement {
        key: store_key(key),
        expires_at_ms: now_ms + DEDUPE_TTL_MS,
        value: serde_json::to_vec(&record).expect("a JSON value always serializes"),
        done: done.to_vec(),
    }
}

/// An answer as the store keeps it (`{"ok", "payload", "error"}`).
#[derive(serde::Serialize)]
struct StoredAnswer<'a> {
    ok: bool,
    payload: &'a Value,
    error: Option<&'a Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repeat_sees_in_flight_then_done() {
        let cache = IdempotencyCache::new(None);
        assert!(cache.begin("agent:k", json!({"status": "accepted"}), 0));
        assert!(!cache.begin("agent:k", json!({}), 1));
        assert_eq!(
            cache.get("agent:k", 1),
            Some(Seen::InFlight {
                ack: json!({"status": "accepted"})
            })
        );
        assert!(cache.add_waiter(
            "agent:k",
            Waiter {
                conn_id: "c".into(),
                request_id: "2".into()
            }
        ));
        let waiters = cache.finish("agent:k", true, json!({"status": "ok"}), None, 2);
        assert_eq!(waiters.len(), 1);
        assert!(matches!(
            cache.get("agent:k", 3),
            Some(Seen::Done { ok: true, .. })
        ));
        assert!(
            cache.get("agent:k", 2 + DEDUPE_TTL_MS + 1).is_none(),
            "expires"
        );
    }

    #[test]
    fn an_answer_kept_with_the_reply_is_not_written_again() {
        let (_dir, store) = crate::store::test_support::temp_store();
        let cache = IdempotencyCache::new(Some(store.clone()));
        cache.begin("agent:k", json!({"status": "accepted"}), 0);
        let answer = (true, json!({"status": "ok"}), None);
        cache.mark_persisted("agent:k", answer.clone());
        let before = store.group_figures().jobs;
        cache.finish("agent:k", true, json!({"status": "ok"}), None, 1);
        assert_eq!(store.group_figures().jobs, before, "nothing written");
        // Another answer than the one kept (a reasoning block added, say) is written.
        cache.begin("agent:j", json!({"status": "accepted"}), 0);
        cache.mark_persisted("agent:j", answer);
        cache.finish("agent:j", true, json!({"status": "ok", "more": 1}), None, 1);
        assert_eq!(store.group_figures().jobs, before + 1);
    }

    #[test]
    fn cache_is_bounded() {
        let cache = IdempotencyCache::new(None);
        for i in 0..(DEDUPE_MAX + 10) {
            cache.begin(&format!("k{i}"), json!(i), 0);
        }
        assert!(cache.entries.lock().map.len() <= DEDUPE_MAX);
        assert!(cache.get("k0", 1).is_none());
    }

    #[test]
    fn finished_keys_move_to_the_back_and_leftover_places_stay_bounded() {
        let cache = IdempotencyCache::new(None);
        cache.begin("first", json!(0), 0);
        for i in 0..(DEDUPE_MAX - 1) {
            cache.begin(&format!("k{i}"), json!(i), 0);
        }
        // Finishing `first` makes it the newest: the next key evicts k0 instead.
        cache.finish("first", true, json!({}), None, 1);
        cache.begin("one-more", json!(0), 2);
        assert!(cache.get("first", 3).is_some());
        assert!(cache.get("k0", 3).is_none());
        assert!(cache.get("k1", 3).is_some());
        // Many finishes and forgets leave old places behind; they are swept.
        for round in 0..5 {
            for i in 2..(DEDUPE_MAX - 1) {
                cache.finish(&format!("k{i}"), true, json!(round), None, 4);
            }
        }
        cache.forget("k1");
        let entries = cache.entries.lock();
        assert!(entries.map.len() <= DEDUPE_MAX);
        assert!(
            entries.order.len() <= 2 * DEDUPE_MAX + 1,
            "{} places",
            entries.order.len()
        );
    }
}
