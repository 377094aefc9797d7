//! Idempotency keys: a repeated `agent` / `chat.send` / `send` with the same
//! key returns the first answer instead of running again.
//!
//! Entries live 5 minutes and at most 1000 are kept (upstream's numbers);
//! finished answers are also written to the store so a restart between a
//! client's first try and its retry does not run the turn twice.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::Value;

use crate::store::Store;

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

struct Entry {
    expires_at_ms: u64,
    seen: Seen,
    waiters: Vec<Waiter>,
}

/// The cache itself.
pub struct IdempotencyCache {
    entries: Mutex<(HashMap<String, Entry>, VecDeque<String>)>,
    store: Option<Store>,
}

impl IdempotencyCache {
    pub fn new(store: Option<Store>) -> Self {
        IdempotencyCache {
            entries: Mutex::new((HashMap::new(), VecDeque::new())),
            store,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (HashMap<String, Entry>, VecDeque<String>)> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks a key up (memory first, then the store).
    pub fn get(&self, key: &str, now_ms: u64) -> Option<Seen> {
        {
            let guard = self.lock();
            if let Some(entry) = guard.0.get(key) {
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
        let mut guard = self.lock();
        let (map, order) = &mut *guard;
        while map.len() >= DEDUPE_MAX {
            match order.pop_front() {
                Some(old) => {
                    map.remove(&old);
                }
                None => break,
            }
        }
        order.push_back(key.to_string());
        map.insert(
            key.to_string(),
            Entry {
                expires_at_ms: now_ms + DEDUPE_TTL_MS,
                seen: Seen::InFlight { ack },
                waiters: Vec::new(),
            },
        );
        true
    }

    /// Adds a waiter for an in-flight key; `false` when full or not in flight.
    pub fn add_waiter(&self, key: &str, waiter: Waiter) -> bool {
        let mut guard = self.lock();
        match guard.0.get_mut(key) {
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
        if let Some(store) = &self.store {
            let record = serde_json::json!({"ok": ok, "payload": payload, "error": error});
            if let Err(e) = store.dedupe_put_settling(
                &store_key(key),
                now_ms + DEDUPE_TTL_MS,
                record.to_string().as_bytes(),
                done,
            ) {
                log::warn!("could not persist idempotency key {key}: {e}");
            }
        }
        let mut guard = self.lock();
        let (map, order) = &mut *guard;
        let waiters = map.remove(key).map(|e| e.waiters).unwrap_or_default();
        order.retain(|k| k != key);
        order.push_back(key.to_string());
        map.insert(
            key.to_string(),
            Entry {
                expires_at_ms: now_ms + DEDUPE_TTL_MS,
                seen: Seen::Done { ok, payload, error },
                waiters: Vec::new(),
            },
        );
        waiters
    }

    /// Forgets a key (the request failed before anything ran).
    pub fn forget(&self, key: &str) {
        let mut guard = self.lock();
        guard.0.remove(key);
        guard.1.retain(|k| k != key);
    }
}

fn store_key(key: &str) -> String {
    format!("idem:{key}")
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
    fn cache_is_bounded() {
        let cache = IdempotencyCache::new(None);
        for i in 0..(DEDUPE_MAX + 10) {
            cache.begin(&format!("k{i}"), json!(i), 0);
        }
        assert!(cache.lock().0.len() <= DEDUPE_MAX);
        assert!(cache.get("k0", 1).is_none());
    }
}
