//! Duplicate-delivery filter: a message seen once (keyed by channel,
//! account, peer, session and message id) is not processed again within
//! the TTL. A bounded in-memory set answers fast; the `dedupe` database
//! remembers across a restart, so a redelivered update is still dropped.
//!
//! This file must not decide what happens to a message beyond "seen".

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;

use crate::store::{Store, StoreError};

/// How long a delivery is remembered (upstream's inbound dedupe TTL: 20 min).
pub const DEDUPE_TTL_MS: u64 = 20 * 60 * 1000;
/// Most keys held in memory (upstream's inbound dedupe cap).
pub const MAX_DEDUPE_KEYS: usize = 5_000;

/// The parts of a delivery's identity.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryKey<'a> {
    pub channel: &'a str,
    pub account_id: &'a str,
    pub peer_id: &'a str,
    pub session_key: &'a str,
    pub message_id: &'a str,
}

impl DeliveryKey<'_> {
    pub fn render(&self) -> String {
        format!(
            "inbound:{}:{}:{}:{}:{}",
            self.channel, self.account_id, self.peer_id, self.session_key, self.message_id
        )
    }
}

/// The filter; share it behind an `Arc`.
pub struct InboundDedupe {
    store: Option<Store>,
    seen: Mutex<(HashMap<String, u64>, VecDeque<String>)>,
}

impl InboundDedupe {
    /// `store` makes the filter survive restarts.
    pub fn new(store: Option<Store>) -> InboundDedupe {
        InboundDedupe {
            store,
            seen: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    /// Records the delivery; `true` when it was already seen (a duplicate).
    /// Blocks on the store: call from a blocking context.
    pub fn check_and_record(&self, key: &DeliveryKey<'_>, now_ms: u64) -> Result<bool, StoreError> {
        let rendered = key.render();
        {
            let mut guard = self.seen.lock();
            let (map, order) = &mut *guard;
            if map.get(&rendered).is_some_and(|expiry| *expiry > now_ms) {
                return Ok(true);
            }
            map.insert(rendered.clone(), now_ms + DEDUPE_TTL_MS);
            order.push_back(rendered.clone());
            while order.len() > MAX_DEDUPE_KEYS {
                if let Some(old) = order.pop_front() {
                    map.remove(&old);
                }
            }
        }
        let Some(store) = &self.store else {
            return Ok(false);
        };
        if store.dedupe_get(&rendered, now_ms)?.is_some() {
            return Ok(true);
        }
        store.dedupe_put(&rendered, now_ms + DEDUPE_TTL_MS, b"1")?;
        Ok(false)
    }

    /// Keys held in memory.
    pub fn len(&self) -> usize {
        self.seen.lock().1.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
