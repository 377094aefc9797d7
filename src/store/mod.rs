//! Durable storage for pincer: one LMDB environment (via heed) with named databases for sessions, transcripts,
//! devices, pairing requests, dedupe entries and metadata, every value a versioned postcard record.
//!
//! This file owns the public face of the store — `Store`, its options, errors and statistics — and the
//! opening sequence (directory, environment, schema version). The typed operations live in the sibling files,
//! one per database. Nothing here or in the siblings lets a heed or LMDB type escape this module: callers see
//! only `Store`, the value types and `StoreError`. Every write is one transaction committed (and synced, no
//! `NO_SYNC`) before the method returns; reads are single short read transactions.
//!
//! Every method blocks (a write waits for its fsync): async code calls the store through `Store::run_blocking`
//! (or from a blocking context such as `tokio::task::spawn_blocking`), never directly on an async worker
//! thread. `run_blocking` stays on the calling thread only while commits are quick (`pace.rs`).

mod codec;
mod cron;
mod dedupe;
mod devices;
mod dm_pairing;
mod env;
mod group_commit;
pub mod lock_file;
pub use group_commit::{GroupFigures, MAX_GROUP_JOBS};
mod maintenance;
mod map;
mod map_pages;
#[cfg(test)]
pub(crate) use map_pages::resident_map_kib;
mod memory;
mod meta;
mod pace;
pub use pace::{QUICK_COMMIT_MICROS, QUICK_STREAK};
mod channel_state;
mod sealed;
pub use sealed::{SealedChange, SealedRecords, SEALED_KEY_FILE};
mod sessions;
mod subagents;
mod telegram_offsets;
pub use channel_state::MatrixSession;
mod transcript_truncate;
mod transcripts;
mod turn_write;

use std::collections::BTreeMap;
use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use cron::MAX_CRON_RUN_LOG_ENTRIES;
pub use dedupe::Settlement;
pub use devices::{DeviceRecord, DeviceToken, PairRequest, PAIR_REQUEST_TTL_MS};
pub use dm_pairing::{
    ApprovedDmSender, DmApproval, DmPairingLimits, DmPairingRequest, PendingDmPairing,
};
pub use env::MAX_READERS;
pub use maintenance::{
    MaintenancePolicy, MaintenanceReport, DEFAULT_MAX_SESSION_ENTRIES, DEFAULT_PRUNE_AFTER_MS,
    LAST_MAINTENANCE_KEY,
};
pub use memory::{
    CacheWrite, MemoryChunk, MemoryFileRecord, MemoryFileWrite, MemoryIndexStats, NewMemoryChunk,
    QuantizedVector, ScoredChunk, MAX_TERM_BYTES,
};
pub use meta::{read_schema_version, OLDEST_SCHEMA_VERSION, SCHEMA_VERSION, SCHEMA_VERSION_KEY};
pub use sessions::{SessionEntry, SessionOrigin};
pub use transcript_truncate::TruncateOutcome;
pub use transcripts::{TranscriptEntry, MAX_SESSION_ID_BYTES};

use env::LmdbEnv;

/// Default ceiling for the memory map, and so for the data file: 1 GiB.
pub const DEFAULT_MAX_DISK_BYTES: u64 = 1024 * 1024 * 1024;
/// Default starting size of the memory map: 16 MiB. It doubles on demand up to the ceiling.
pub const DEFAULT_INITIAL_MAP_BYTES: u64 = 16 * 1024 * 1024;
/// Smallest initial map the store accepts: 64 KiB (room for the databases' own pages).
pub const MIN_MAP_BYTES: u64 = 64 * 1024;
/// Smallest `max_disk_bytes` the store accepts: 256 KiB (half of it may go to the deletion reserve).
pub const MIN_MAX_DISK_BYTES: u64 = 4 * MIN_MAP_BYTES;
/// Permissions of a data directory the store creates: owner only.
const DATA_DIR_MODE: u32 = 0o700;

/// Sizing of the LMDB memory map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// Hard ceiling for the map (and so the data file). Writes that add data stop short of it by a deletion
    /// reserve (1/64 of it, at least 128 KiB) and then fail with `StoreError::Full`; deletions may use the
    /// reserve, so a full store can always be cleaned up.
    pub max_disk_bytes: u64,
    /// Map size at open; grows by doubling (capped at `max_disk_bytes`) whenever a write finds the map full.
    pub initial_map_bytes: u64,
    /// Where LMDB's lock file lives (`lock_file.rs`): a RAM directory spares the disk the reader table's
    /// writes. Default: `$PINCER_STORE_LOCK_DIR`, else beside the data file.
    pub lock_dir: Option<PathBuf>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            max_disk_bytes: DEFAULT_MAX_DISK_BYTES,
            initial_map_bytes: DEFAULT_INITIAL_MAP_BYTES,
            lock_dir: lock_file::lock_dir_from_env(),
        }
    }
}

/// Everything that can go wrong in the store. LMDB failures arrive as text, so heed never leaks out.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The data directory could not be created.
    #[error("cannot create store directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The same directory is already open through another `Store` in this process (clone that one instead).
    #[error("store at {path} is already open in this process; share the existing Store instead")]
    AlreadyOpen { path: PathBuf },
    /// The options cannot describe a usable map.
    #[error("invalid store options: {reason}")]
    InvalidOptions { reason: String },
    /// The environment was written by a pincer that knows a newer schema than this binary.
    #[error(
        "the store was written by a newer pincer (store schema version {found}; pincer {this_version} supports \
         up to {supported}): run a pincer release that supports store schema {found}; do not downgrade pincer \
         over an existing data directory",
        this_version = env!("CARGO_PKG_VERSION")
    )]
    SchemaTooNew { found: u32, supported: u32 },
    /// A write would grow the data past `max_disk_bytes`.
    #[error("store is full: its data would pass the limit of {limit_bytes} bytes; run maintenance or raise the limit")]
    Full { limit_bytes: u64 },
    /// A stored record could not be decoded.
    #[error("corrupt record in database `{db}` at key {key:?}: {reason}")]
    Corrupt {
        db: &'static str,
        key: String,
        reason: String,
    },
    /// A key the database cannot hold (empty, too long, reserved, or containing a forbidden byte).
    #[error("invalid key for database `{db}`: {reason}")]
    InvalidKey { db: &'static str, reason: String },
    /// A value could not be encoded.
    #[error("cannot encode record for database `{db}` at key {key:?}: {reason}")]
    Encode {
        db: &'static str,
        key: String,
        reason: String,
    },
    /// The key file of sealed records (`sealed.rs`) cannot be read or made.
    #[error("sealed-state key file {path}: {reason}")]
    SealKey { path: PathBuf, reason: String },
    /// Any other LMDB failure, with the operation that met it.
    #[error("LMDB error during {operation}: {message}")]
    Lmdb {
        operation: &'static str,
        message: String,
    },
}

impl StoreError {
    /// Whether the same write may succeed later: the store at its size cap or an LMDB failure (a full
    /// disk is one) may pass once space is freed; a bad key, an undecodable record or a schema do not.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Full { .. } | StoreError::Lmdb { .. })
    }
}

/// A point-in-time view of the environment's size and contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreStats {
    /// Directory holding `data.mdb` and `lock.mdb`.
    pub path: PathBuf,
    /// Current memory map size in bytes.
    pub map_size: u64,
    /// Ceiling the map may grow to, in bytes (`max_disk_bytes` in whole pages).
    pub max_map_size: u64,
    /// Ceiling for writes that add data: `max_map_size` less the deletion reserve.
    pub write_ceiling: u64,
    /// Bytes in pages that hold live data (B-tree and overflow pages of every database, plus the meta pages).
    pub used_bytes: u64,
    /// Size of `data.mdb` on disk, in bytes (a high-water mark: LMDB reuses freed pages but never shrinks).
    pub file_bytes: u64,
    /// LMDB page size in bytes.
    pub page_size: u32,
    /// Number of records per named database.
    pub entries: BTreeMap<String, u64>,
    /// Reader slots ever handed out in the lock file (LMDB's high-water mark; a slot is reused once its
    /// transaction ends), and the configured maximum (`MAX_READERS`).
    pub reader_slots_used: u32,
    pub max_readers: u32,
}

/// The store handle. Cheap to clone; all clones share one LMDB environment. `Send + Sync`.
#[derive(Clone)]
pub struct Store {
    env: Arc<LmdbEnv>,
    options: StoreOptions,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.env.path())
            .field("options", &self.options)
            .finish()
    }
}

impl Store {
    /// Opens (creating if needed, mode 0700) the store in `dir`: one LMDB environment with its named databases.
    /// Refuses an environment whose schema version is newer than this binary's (`StoreError::SchemaTooNew`).
    pub fn open(dir: &Path, options: StoreOptions) -> Result<Store, StoreError> {
        validate_options(&options)?;
        if !dir.exists() {
            DirBuilder::new()
                .recursive(true)
                .mode(DATA_DIR_MODE)
                .create(dir)
                .map_err(|source| StoreError::CreateDir {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
        if let Some(lock_dir) = &options.lock_dir {
            if let Err(e) = lock_file::place(dir, lock_dir) {
                log::warn!(
                    "store: cannot keep the lock file in {} ({e}); it stays in {}",
                    lock_dir.display(),
                    dir.display()
                );
            }
        }
        if let Err(e) = lock_file::prepare(dir) {
            log::warn!("store: the lock file's directory: {e}");
        }
        let env = LmdbEnv::open(dir, options.initial_map_bytes, options.max_disk_bytes)?;
        if let Err(e) = lock_file::hand_over(dir) {
            log::warn!("store: cannot hand the lock file to the store's owner: {e}");
        }
        log::debug!(
            "store opened at {} (map {} bytes)",
            dir.display(),
            env.map_size()
        );
        Ok(Store {
            env: Arc::new(env),
            options,
        })
    }

    /// The directory this store lives in.
    pub fn path(&self) -> &Path {
        self.env.path()
    }

    /// Drops this process's resident pages of the memory map (see `map_pages.rs`): bulk writers call it after
    /// each batch so touched pages do not pile up in RSS. Returns the bytes of mapping advised.
    pub fn release_mapped_pages(&self) -> std::io::Result<usize> {
        self.env.release_mapped_pages()
    }

    /// Runs store work for async code: on the calling thread while the store's commits are quick and no other
    /// write is open, else off the async worker (`system::blocking::off_worker`: `block_in_place` on a
    /// multi-threaded runtime, which keeps the event loop going while `work` waits for fsync; see `pace.rs`).
    /// `work` should touch only the store, besides CPU work.
    pub fn run_blocking<R>(&self, work: impl FnOnce() -> R) -> R {
        if self.env.pace.inline_ok() {
            work()
        } else {
            crate::system::blocking::off_worker(work)
        }
    }

    /// The options this store was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// Sizes and record counts; see `StoreStats`.
    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        let (used_bytes, entries) = self.env.read("stats", |txn, dbs| {
            let used = env::used_bytes(&self.env, txn, dbs)?;
            let mut entries = BTreeMap::new();
            for (name, db) in dbs.all() {
                entries.insert(name.to_string(), db.len(txn)?);
            }
            Ok((used, entries))
        })?;
        let info = self.env.info();
        Ok(StoreStats {
            path: self.env.path().to_path_buf(),
            map_size: info.map_size,
            max_map_size: self.env.max_map_bytes(),
            write_ceiling: self.env.write_ceiling_bytes(),
            used_bytes,
            file_bytes: self.env.file_bytes()?,
            page_size: self.env.page_size(),
            entries,
            reader_slots_used: info.reader_slots_used,
            max_readers: info.max_readers,
        })
    }

    /// What the group commit did since open: transactions, the writes they carried, the largest batch.
    pub fn group_figures(&self) -> GroupFigures {
        self.env.group.figures()
    }

    /// Flushes the data file to disk (`mdb_env_sync` with force). Commits already sync; this is for shutdown.
    pub fn sync(&self) -> Result<(), StoreError> {
        self.env.sync()
    }
}

fn validate_options(options: &StoreOptions) -> Result<(), StoreError> {
    if options.max_disk_bytes < MIN_MAX_DISK_BYTES {
        return Err(StoreError::InvalidOptions {
            reason: format!(
                "max_disk_bytes is {} but must be at least {MIN_MAX_DISK_BYTES}",
                options.max_disk_bytes
            ),
        });
    }
    if options.initial_map_bytes < MIN_MAP_BYTES {
        return Err(StoreError::InvalidOptions {
            reason: format!(
                "initial_map_bytes is {} but must be at least {MIN_MAP_BYTES}",
                options.initial_map_bytes
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Helpers for the unit tests of every store file.
    use super::{Store, StoreOptions};

    /// A store in a fresh temporary directory (kept alive by the returned guard).
    pub(crate) fn temp_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(dir.path(), StoreOptions::default()).expect("open store");
        (dir, store)
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::temp_store;
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn open_creates_owner_only_directory_with_lmdb_files() {
        let parent = tempfile::tempdir().expect("temp dir");
        let dir = parent.path().join("nested").join("pincer");
        let store = Store::open(&dir, StoreOptions::default()).expect("open");
        let mode = std::fs::metadata(&dir)
            .expect("dir metadata")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o700);
        assert!(dir.join("data.mdb").exists());
        assert!(dir.join("lock.mdb").exists());
        assert_eq!(store.path(), dir.canonicalize().expect("canonical"));
    }

    #[test]
    fn opening_the_same_directory_twice_in_one_process_is_refused() {
        let (dir, _store) = temp_store();
        let second = Store::open(dir.path(), StoreOptions::default());
        assert!(
            matches!(second, Err(StoreError::AlreadyOpen { .. })),
            "{second:?}"
        );
    }

    #[test]
    fn an_open_write_keeps_store_work_off_the_async_thread() {
        let (_dir, store) = temp_store();
        let quick_streak = || {
            for _ in 0..QUICK_STREAK {
                store
                    .env
                    .pace
                    .commit_took(std::time::Duration::from_micros(QUICK_COMMIT_MICROS));
            }
        };
        quick_streak();
        assert!(store.env.pace.inline_ok());
        let during = store
            .env
            .write("probe", |_, _| Ok(store.env.pace.inline_ok()))
            .expect("write");
        assert!(!during, "a caller would queue behind the open write");
        // The probe's own commit may have been slow (this disk's fsync); the write is closed either way.
        quick_streak();
        assert!(store.env.pace.inline_ok(), "no write is left open");
    }

    #[test]
    fn data_survives_closing_and_reopening() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let store = Store::open(dir.path(), StoreOptions::default()).expect("open");
            store.put_meta("greeting", b"hello").expect("put");
        }
        let store = Store::open(dir.path(), StoreOptions::default()).expect("reopen");
        assert_eq!(
            store.meta("greeting").expect("meta"),
            Some(b"hello".to_vec())
        );
    }

    #[test]
    fn options_below_the_minimum_map_are_rejected() {
        let dir = tempfile::tempdir().expect("temp dir");
        let tiny = StoreOptions {
            lock_dir: None,
            max_disk_bytes: 4096,
            initial_map_bytes: DEFAULT_INITIAL_MAP_BYTES,
        };
        assert!(matches!(
            Store::open(dir.path(), tiny),
            Err(StoreError::InvalidOptions { .. })
        ));
        let tiny_initial = StoreOptions {
            lock_dir: None,
            max_disk_bytes: DEFAULT_MAX_DISK_BYTES,
            initial_map_bytes: 1,
        };
        assert!(matches!(
            Store::open(dir.path(), tiny_initial),
            Err(StoreError::InvalidOptions { .. })
        ));
    }

    #[test]
    fn stats_report_sizes_and_entries_per_database() {
        let (_dir, store) = temp_store();
        let empty = store.stats().expect("stats");
        store.put_meta("a", &[7u8; 10_000]).expect("put");
        let stats = store.stats().expect("stats");
        assert_eq!(stats.map_size, DEFAULT_INITIAL_MAP_BYTES);
        assert_eq!(stats.max_map_size, DEFAULT_MAX_DISK_BYTES);
        assert_eq!(
            stats.write_ceiling,
            DEFAULT_MAX_DISK_BYTES - DEFAULT_MAX_DISK_BYTES / 64
        );
        assert!(
            stats.used_bytes >= empty.used_bytes + 10_000,
            "{empty:?} then {stats:?}"
        );
        assert!(stats.file_bytes >= stats.used_bytes);
        assert!(stats.page_size >= 512);
        // schema_version plus the one key written here.
        assert_eq!(stats.entries.get("meta"), Some(&2));
        assert_eq!(stats.entries.get("sessions"), Some(&0));
        let names: Vec<&str> = stats.entries.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "channel_state",
                "cron",
                "cron_runs",
                "dedupe",
                "devices",
                "embed_cache",
                "memory_chunks",
                "memory_files",
                "memory_terms",
                "memory_vectors",
                "meta",
                "pair_requests",
                "sessions",
                "subagent_runs",
                "telegram_offsets",
                "transcripts"
            ]
        );
        assert_eq!(stats.max_readers, env::MAX_READERS);
    }

    #[test]
    fn sync_succeeds_on_an_open_store() {
        let (_dir, store) = temp_store();
        store.put_meta("k", b"v").expect("put");
        store.sync().expect("sync");
    }

    #[test]
    fn store_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Store>();
    }
}
