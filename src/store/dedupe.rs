//! The `dedupe` database: idempotency and duplicate-message entries, each a byte value with an expiry time.
//!
//! Keys are caller-chosen (`chat:<idempotencyKey>`, `telegram:<account>:<peer>:<message id>`); a key too long for
//! LMDB is stored under 0xFF + its SHA-256 instead, which no UTF-8 key can equal. This file must not decide what
//! a value means or how long it lives (callers pass the expiry); expired entries read as absent and are dropped
//! by maintenance.

use heed::RwTxn;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::codec::{check_key, decode, decode_at, encode, Record, MAX_KEY_BYTES};
use super::env::{Databases, TxnError, DEDUPE_DB, META_DB};
use super::{Store, StoreError};

/// First byte of a hashed key: never the first byte of a UTF-8 string.
const HASHED_KEY_MARKER: u8 = 0xff;

/// A stored dedupe value and when it stops counting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct DedupeRecord {
    expires_at_ms: u64,
    value: Vec<u8>,
}

impl Record for DedupeRecord {
    const VERSION: u8 = 1;
}

impl Store {
    /// The value under `key`, or `None` when absent or expired (`expires_at_ms <= now_ms`).
    pub fn dedupe_get(&self, key: &str, now_ms: u64) -> Result<Option<Vec<u8>>, StoreError> {
        let stored_key = stored_key(key)?;
        self.env.read("dedupe_get", |txn, dbs| {
            let Some(bytes) = dbs.dedupe.get(txn, &stored_key)? else {
                return Ok(None);
            };
            let record: DedupeRecord = decode_at(DEDUPE_DB, key, bytes)?;
            Ok((record.expires_at_ms > now_ms).then_some(record.value))
        })
    }

    /// Stores `value` under `key` until `expires_at_ms`, replacing any previous entry.
    pub fn dedupe_put(
        &self,
        key: &str,
        expires_at_ms: u64,
        value: &[u8],
    ) -> Result<(), StoreError> {
        let stored_key = stored_key(key)?;
        let record = DedupeRecord {
            expires_at_ms,
            value: value.to_vec(),
        };
        let bytes = encode(DEDUPE_DB, key, &record)?;
        self.env.write_grouped("dedupe_put", move |txn, dbs| {
            Ok(dbs.dedupe.put(txn, &stored_key, &bytes)?)
        })
    }

    /// Commits `settle` on its own: a finished turn's answer is kept and the
    /// records of the work it finished go together (one fsync instead of two).
    pub fn settle(&self, settle: &Settlement) -> Result<(), StoreError> {
        let encoded = EncodedSettlement::new(settle)?;
        self.env
            .write_grouped("settle", move |txn, dbs| encoded.apply(txn, dbs))
    }
}

/// A finished piece of work's writes: its answer kept under a dedupe `key` until `expires_at_ms`, and the
/// `done` meta keys (the durable records of what it answered) removed. Made on its own
/// ([`Store::settle`]) or in the commit of a turn's reply ([`Store::record_turn_settling`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settlement {
    pub key: String,
    pub expires_at_ms: u64,
    pub value: Vec<u8>,
    pub done: Vec<String>,
}

/// A [`Settlement`] checked and encoded outside the transaction.
pub(super) struct EncodedSettlement {
    stored_key: Vec<u8>,
    bytes: Vec<u8>,
    done: Vec<String>,
}

impl EncodedSettlement {
    pub(super) fn new(settle: &Settlement) -> Result<Self, StoreError> {
        for meta_key in &settle.done {
            check_key(META_DB, meta_key)?;
        }
        let record = DedupeRecord {
            expires_at_ms: settle.expires_at_ms,
            value: settle.value.clone(),
        };
        Ok(EncodedSettlement {
            stored_key: stored_key(&settle.key)?,
            bytes: encode(DEDUPE_DB, &settle.key, &record)?,
            done: settle.done.clone(),
        })
    }

    pub(super) fn apply(&self, txn: &mut RwTxn<'_>, dbs: &Databases) -> Result<(), TxnError> {
        dbs.dedupe.put(txn, &self.stored_key, &self.bytes)?;
        for meta_key in &self.done {
            dbs.meta.delete(txn, meta_key.as_bytes())?;
        }
        Ok(())
    }
}

/// Deletes every entry expired at `now_ms` and every undecodable one; returns how many went.
pub(super) fn remove_expired(
    txn: &mut RwTxn<'_>,
    dbs: &Databases,
    now_ms: u64,
) -> Result<usize, TxnError> {
    let mut doomed = Vec::new();
    for item in dbs.dedupe.iter(txn)? {
        let (key, bytes) = item?;
        match decode::<DedupeRecord>(bytes) {
            Ok(record) if record.expires_at_ms > now_ms => {}
            Ok(_) => doomed.push(key.to_vec()),
            Err(reason) => {
                // A dedupe entry is a cache: dropping a bad one loses nothing worth an error.
                log::warn!(
                    "store: dropping corrupt dedupe entry {:?}: {reason}",
                    String::from_utf8_lossy(key)
                );
                doomed.push(key.to_vec());
            }
        }
    }
    for key in &doomed {
        dbs.dedupe.delete(txn, key)?;
    }
    Ok(doomed.len())
}

/// The LMDB key for a dedupe key: the key itself, or marker + SHA-256 when it is too long.
fn stored_key(key: &str) -> Result<Vec<u8>, StoreError> {
    if key.is_empty() {
        return Err(StoreError::InvalidKey {
            db: DEDUPE_DB,
            reason: "key is empty".to_string(),
        });
    }
    if key.len() <= MAX_KEY_BYTES {
        return Ok(key.as_bytes().to_vec());
    }
    let mut hashed = vec![HASHED_KEY_MARKER];
    hashed.extend_from_slice(&Sha256::digest(key.as_bytes()));
    Ok(hashed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    #[test]
    fn entry_is_returned_until_it_expires() {
        let (_dir, store) = temp_store();
        store
            .dedupe_put("chat:run-1", 1_000, b"{\"runId\":\"run-1\"}")
            .expect("put");
        assert_eq!(
            store.dedupe_get("chat:run-1", 999).expect("get"),
            Some(b"{\"runId\":\"run-1\"}".to_vec())
        );
        assert_eq!(
            store
                .dedupe_get("chat:run-1", 1_000)
                .expect("get at expiry"),
            None
        );
        assert_eq!(
            store.dedupe_get("chat:run-1", 5_000).expect("get later"),
            None
        );
        assert_eq!(
            store.dedupe_get("chat:unknown", 0).expect("get absent"),
            None
        );
    }

    #[test]
    fn put_replaces_value_and_expiry() {
        let (_dir, store) = temp_store();
        store.dedupe_put("k", 10, b"old").expect("put");
        store.dedupe_put("k", 100, b"new").expect("put again");
        assert_eq!(
            store.dedupe_get("k", 50).expect("get"),
            Some(b"new".to_vec())
        );
    }

    #[test]
    fn keys_longer_than_lmdb_allows_still_work_and_stay_distinct() {
        let (_dir, store) = temp_store();
        let long_a = format!("agent:{}", "a".repeat(2_000));
        let long_b = format!("agent:{}", "b".repeat(2_000));
        store.dedupe_put(&long_a, 100, b"A").expect("put a");
        store.dedupe_put(&long_b, 100, b"B").expect("put b");
        assert_eq!(
            store.dedupe_get(&long_a, 0).expect("get a"),
            Some(b"A".to_vec())
        );
        assert_eq!(
            store.dedupe_get(&long_b, 0).expect("get b"),
            Some(b"B".to_vec())
        );
        assert!(matches!(
            store.dedupe_put("", 1, b""),
            Err(StoreError::InvalidKey { .. })
        ));
    }

    #[test]
    fn remove_expired_drops_only_expired_and_corrupt_entries() {
        let (_dir, store) = temp_store();
        store.dedupe_put("expired", 10, b"x").expect("put");
        store.dedupe_put("live", 1_000, b"y").expect("put");
        store
            .env
            .write("test", |txn, dbs| {
                Ok(dbs.dedupe.put(txn, b"broken", &[1])?)
            })
            .expect("raw put");
        let removed = store
            .env
            .write("test", |txn, dbs| remove_expired(txn, dbs, 500))
            .expect("remove");
        assert_eq!(removed, 2);
        assert_eq!(
            store.dedupe_get("live", 500).expect("get"),
            Some(b"y".to_vec())
        );
        assert_eq!(
            store.stats().expect("stats").entries.get("dedupe"),
            Some(&1)
        );
    }
}
