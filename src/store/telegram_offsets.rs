//! The `telegram_offsets` database: per bot account, the Bot API update offset to ask `getUpdates` for next
//! (the last accepted `update_id` + 1), so a restarted poller neither loses nor repeats updates.
//!
//! Keys are Telegram account ids as configured. This file must not decide when an offset advances (the
//! Telegram poller stores it only after the inbound sink accepted the update); it only keeps the number.

use serde::{Deserialize, Serialize};

use super::codec::{check_key, decode_at, encode, Record};
use super::env::TELEGRAM_OFFSETS_DB;
use super::{Store, StoreError};

/// One account's stored cursor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct OffsetRecord {
    next_offset: i64,
    updated_at_ms: u64,
}

impl Record for OffsetRecord {
    const VERSION: u8 = 1;
}

impl Store {
    /// The `getUpdates` offset stored for `account_id`, if any.
    pub fn telegram_offset(&self, account_id: &str) -> Result<Option<i64>, StoreError> {
        check_key(TELEGRAM_OFFSETS_DB, account_id)?;
        self.env.read("telegram_offset", |txn, dbs| {
            let Some(bytes) = dbs.telegram_offsets.get(txn, account_id.as_bytes())? else {
                return Ok(None);
            };
            let record: OffsetRecord = decode_at(TELEGRAM_OFFSETS_DB, account_id, bytes)?;
            Ok(Some(record.next_offset))
        })
    }

    /// Stores the next `getUpdates` offset for `account_id` (committed and synced before returning).
    pub fn set_telegram_offset(
        &self,
        account_id: &str,
        next_offset: i64,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        check_key(TELEGRAM_OFFSETS_DB, account_id)?;
        let record = OffsetRecord {
            next_offset,
            updated_at_ms: now_ms,
        };
        let bytes = encode(TELEGRAM_OFFSETS_DB, account_id, &record)?;
        self.env.write("set_telegram_offset", |txn, dbs| {
            Ok(dbs
                .telegram_offsets
                .put(txn, account_id.as_bytes(), &bytes)?)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_support::temp_store;
    use crate::store::{Store, StoreError, StoreOptions};

    #[test]
    fn offset_is_absent_until_stored_and_then_replaced() {
        let (_dir, store) = temp_store();
        assert_eq!(store.telegram_offset("default").expect("read"), None);
        store.set_telegram_offset("default", 41, 1).expect("write");
        store.set_telegram_offset("default", 42, 2).expect("write");
        store.set_telegram_offset("work", 7, 2).expect("write");
        assert_eq!(store.telegram_offset("default").expect("read"), Some(42));
        assert_eq!(store.telegram_offset("work").expect("read"), Some(7));
    }

    #[test]
    fn offset_survives_reopening_the_store() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let store = Store::open(dir.path(), StoreOptions::default()).expect("open");
            store
                .set_telegram_offset("default", 1_000_001, 5)
                .expect("write");
        }
        let store = Store::open(dir.path(), StoreOptions::default()).expect("reopen");
        assert_eq!(
            store.telegram_offset("default").expect("read"),
            Some(1_000_001)
        );
    }

    #[test]
    fn empty_account_id_is_refused() {
        let (_dir, store) = temp_store();
        assert!(matches!(
            store.set_telegram_offset("", 1, 1),
            Err(StoreError::InvalidKey { .. })
        ));
    }
}
