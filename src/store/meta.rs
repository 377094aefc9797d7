//! The `meta` database: free-form byte values for other modules, and the schema version of the environment.
//!
//! The schema version (a big-endian u32 under `SCHEMA_VERSION_KEY`) is checked when the store opens: an
//! environment written by a newer pincer is refused before anything is written to it. The key is reserved:
//! `put_meta` cannot overwrite it. This file must not interpret any other meta value.
//!
//! [`read_schema_version`] reads the version of a store without opening it for writing (for
//! `pincer store schema` and the update check, which may run beside a running gateway, as root).

use std::path::Path;

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, EnvFlags, EnvOpenOptions, RwTxn};

use super::codec::{check_key, corrupt};
use super::env::{lmdb_error, TxnError, MAX_DBS, MAX_READERS, META_DB};
use super::{Store, StoreError};

/// The schema version this build writes and understands. Bump it (and add a migration) when a database's key
/// layout or meaning changes; record shapes evolve through their own version byte instead.
pub const SCHEMA_VERSION: u32 = 1;
/// The oldest schema version this build opens (older ones would be migrated up to
/// [`SCHEMA_VERSION`] on open; schema 1 is the first, so there is nothing older yet).
pub const OLDEST_SCHEMA_VERSION: u32 = 1;
/// Meta key holding the schema version.
pub const SCHEMA_VERSION_KEY: &str = "schema_version";

/// Reads the schema version in `meta`; writes ours into a fresh environment; refuses a newer one.
pub(super) fn check_and_record_schema(
    wtxn: &mut RwTxn<'_>,
    meta: Database<'_, Bytes, Bytes>,
) -> Result<(), TxnError> {
    let found = match meta.get(wtxn, SCHEMA_VERSION_KEY.as_bytes())? {
        None => None,
        Some(bytes) => Some(parse_schema_version(bytes)?),
    };
    match found {
        Some(found) if found > SCHEMA_VERSION => {
            log::error!("store schema version {found} is newer than this pincer supports ({SCHEMA_VERSION})");
            Err(StoreError::SchemaTooNew {
                found,
                supported: SCHEMA_VERSION,
            }
            .into())
        }
        Some(found) if found == SCHEMA_VERSION => Ok(()),
        // Fresh environment (or, later, an older schema once migrations exist): record ours.
        _ => {
            meta.put(
                wtxn,
                SCHEMA_VERSION_KEY.as_bytes(),
                &SCHEMA_VERSION.to_be_bytes(),
            )?;
            Ok(())
        }
    }
}

fn parse_schema_version(bytes: &[u8]) -> Result<u32, StoreError> {
    let raw: [u8; 4] = bytes.try_into().map_err(|_| {
        corrupt(
            META_DB,
            SCHEMA_VERSION_KEY,
            format!("expected 4 bytes, found {}", bytes.len()),
        )
    })?;
    Ok(u32::from_be_bytes(raw))
}

/// The schema version recorded in the store in `dir`, read without writing to it; `None` when
/// there is no store there yet. Uses the store's lock file when there is one (so it reads
/// safely beside a running gateway) and never creates one: run as root, it must not leave a
/// root-owned lock file the gateway's user cannot open.
pub fn read_schema_version(dir: &Path) -> Result<Option<u32>, StoreError> {
    if !dir.join("data.mdb").exists() {
        return Ok(None);
    }
    let mut flags = EnvFlags::READ_ONLY;
    if !dir.join("lock.mdb").exists() {
        flags |= EnvFlags::NO_LOCK;
    }
    let mut options = EnvOpenOptions::new().read_txn_without_tls();
    options.max_dbs(MAX_DBS).max_readers(MAX_READERS);
    // SAFETY: read-only: nothing is written through this environment. NO_LOCK only when the
    // store has no lock file, which LMDB creates on every open: no pincer has it open.
    let env = unsafe {
        options.flags(flags);
        options.open(dir)
    }
    .map_err(|e| lmdb_error("open read-only", e))?;
    let rtxn = env.read_txn().map_err(|e| lmdb_error("read schema", e))?;
    let meta = env
        .open_databases_and_commit(rtxn, |opener, rtxn| -> Result<_, heed::Error> {
            let db = opener.open_database::<Bytes, Bytes>(rtxn, Some(META_DB))?;
            Ok(CommitOrAbort::<_, ()>::Commit(db))
        })
        .map_err(|e| lmdb_error("open meta", e))?;
    let Some(Some(meta)) = meta.commit() else {
        return Ok(None);
    };
    let rtxn = env.read_txn().map_err(|e| lmdb_error("read schema", e))?;
    let raw = meta
        .get(&rtxn, SCHEMA_VERSION_KEY.as_bytes())
        .map_err(|e| lmdb_error("read schema", e))?;
    raw.map(parse_schema_version).transpose()
}

impl Store {
    /// The value stored under a meta key, if any.
    pub fn meta(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        check_key(META_DB, key)?;
        self.env.read("meta", |txn, dbs| {
            Ok(dbs.meta.get(txn, key.as_bytes())?.map(<[u8]>::to_vec))
        })
    }

    /// Stores a meta value. The schema version key is reserved and refused.
    pub fn put_meta(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        check_key(META_DB, key)?;
        if key == SCHEMA_VERSION_KEY {
            return Err(StoreError::InvalidKey {
                db: META_DB,
                reason: format!("`{SCHEMA_VERSION_KEY}` is reserved for the store itself"),
            });
        }
        let (key, value) = (key.as_bytes().to_vec(), value.to_vec());
        self.env.write_grouped("put_meta", move |txn, dbs| {
            Ok(dbs.meta.put(txn, &key, &value)?)
        })
    }

    /// Removes a meta value; returns whether it existed.
    pub fn delete_meta(&self, key: &str) -> Result<bool, StoreError> {
        check_key(META_DB, key)?;
        if key == SCHEMA_VERSION_KEY {
            return Err(StoreError::InvalidKey {
                db: META_DB,
                reason: format!("`{SCHEMA_VERSION_KEY}` is reserved for the store itself"),
            });
        }
        let key = key.as_bytes().to_vec();
        self.env.write_grouped("delete_meta", move |txn, dbs| {
            Ok(dbs.meta.delete(txn, &key)?)
        })
    }

    /// Every meta value whose key starts with `prefix`, in key order, at most `limit`.
    pub fn meta_with_prefix(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        self.env.read("meta_with_prefix", |txn, dbs| {
            let mut found = Vec::new();
            for item in dbs.meta.prefix_iter(txn, prefix.as_bytes())? {
                if found.len() >= limit {
                    break;
                }
                let (key, value) = item?;
                found.push((String::from_utf8_lossy(key).into_owned(), value.to_vec()));
            }
            Ok(found)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;
    use crate::store::StoreOptions;

    #[test]
    fn meta_values_list_by_prefix_and_delete() {
        let (_dir, store) = temp_store();
        store.put_meta("inbox/a", b"1").expect("put");
        store.put_meta("inbox/b", b"2").expect("put");
        store.put_meta("other", b"3").expect("put");
        let listed = store.meta_with_prefix("inbox/", 10).expect("list");
        assert_eq!(
            listed,
            vec![
                ("inbox/a".to_string(), b"1".to_vec()),
                ("inbox/b".to_string(), b"2".to_vec())
            ]
        );
        assert_eq!(store.meta_with_prefix("inbox/", 1).expect("list").len(), 1);
        assert!(store.delete_meta("inbox/a").expect("delete"));
        assert!(!store.delete_meta("inbox/a").expect("delete again"));
        assert_eq!(store.meta_with_prefix("inbox/", 10).expect("list").len(), 1);
        assert!(store.delete_meta(SCHEMA_VERSION_KEY).is_err());
    }

    #[test]
    fn meta_values_round_trip_and_overwrite() {
        let (_dir, store) = temp_store();
        assert_eq!(store.meta("gateway.token").expect("meta"), None);
        store.put_meta("gateway.token", b"one").expect("put");
        store.put_meta("gateway.token", b"two").expect("put");
        assert_eq!(
            store.meta("gateway.token").expect("meta"),
            Some(b"two".to_vec())
        );
    }

    #[test]
    fn fresh_store_records_the_current_schema_version() {
        let (_dir, store) = temp_store();
        let raw = store
            .meta(SCHEMA_VERSION_KEY)
            .expect("meta")
            .expect("schema version present");
        assert_eq!(raw, SCHEMA_VERSION.to_be_bytes().to_vec());
    }

    #[test]
    fn the_schema_version_is_read_without_writing() {
        // (Beside a gateway that has the store open: tests/update_rauc.rs; LMDB must not open one
        // environment twice in one process.)
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(read_schema_version(dir.path()).expect("no store"), None);
        let store = Store::open(dir.path(), StoreOptions::default()).expect("open");
        write_schema_version(&store, &7u32.to_be_bytes());
        drop(store);
        let data = dir.path().join("data.mdb");
        let before = std::fs::read(&data).expect("data");
        assert_eq!(read_schema_version(dir.path()).expect("read"), Some(7));
        assert_eq!(
            std::fs::read(&data).expect("data"),
            before,
            "nothing written"
        );
        // A copied data file without its lock file: read without creating one.
        let copy = tempfile::tempdir().expect("copy");
        std::fs::copy(&data, copy.path().join("data.mdb")).expect("copy");
        assert_eq!(
            read_schema_version(copy.path()).expect("read copy"),
            Some(7)
        );
        assert!(
            !copy.path().join("lock.mdb").exists(),
            "no lock file created"
        );
    }

    #[test]
    fn schema_version_key_cannot_be_overwritten() {
        let (_dir, store) = temp_store();
        let error = store
            .put_meta(SCHEMA_VERSION_KEY, &99u32.to_be_bytes())
            .expect_err("reserved");
        assert!(matches!(error, StoreError::InvalidKey { .. }), "{error:?}");
    }

    /// Writes a raw schema version, bypassing the reserved-key check as a newer pincer would.
    fn write_schema_version(store: &Store, version: &[u8]) {
        store
            .env
            .write("test", |txn, dbs| {
                Ok(dbs.meta.put(txn, SCHEMA_VERSION_KEY.as_bytes(), version)?)
            })
            .expect("write schema version");
    }

    #[test]
    fn environment_with_newer_schema_is_refused_and_left_untouched() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let store = Store::open(dir.path(), StoreOptions::default()).expect("open");
            write_schema_version(&store, &(SCHEMA_VERSION + 1).to_be_bytes());
        }
        let error = Store::open(dir.path(), StoreOptions::default()).expect_err("too new");
        match &error {
            StoreError::SchemaTooNew { found, supported } => {
                assert_eq!(*found, SCHEMA_VERSION + 1);
                assert_eq!(*supported, SCHEMA_VERSION);
            }
            other => panic!("unexpected {other:?}"),
        }
        let message = error.to_string();
        assert!(
            message.contains("newer pincer") && message.contains("do not downgrade"),
            "{message}"
        );
        // Refusing twice proves the first refusal did not overwrite the version.
        assert!(matches!(
            Store::open(dir.path(), StoreOptions::default()),
            Err(StoreError::SchemaTooNew { .. })
        ));
    }

    #[test]
    fn malformed_schema_version_is_a_corrupt_record_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let store = Store::open(dir.path(), StoreOptions::default()).expect("open");
            write_schema_version(&store, b"xyz");
        }
        let error = Store::open(dir.path(), StoreOptions::default()).expect_err("corrupt");
        assert!(
            matches!(error, StoreError::Corrupt { db: "meta", .. }),
            "{error:?}"
        );
    }
}
