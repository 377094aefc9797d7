//! The LMDB environment behind `Store`: opening it with its named databases, running each read and each write
//! as one short transaction, and growing the memory map when a write finds it full.
//!
//! This is the only file that begins transactions; `map.rs` sizes the map. It must not know record shapes (the
//! operation files do) and must not hand heed types to anything outside `store/`.
//!
//! Concurrency design:
//! - Reads use `MDB_NOTLS` read transactions (`read_txn_without_tls`), so a reader slot belongs to the
//!   transaction, not the thread: any thread (tokio's blocking pool included) may read. The reader table has
//!   `MAX_READERS` slots; a read transaction lives only for the duration of one store call, so slots in use
//!   equal the store calls running at that instant. Past the limit LMDB answers `MDB_READERS_FULL`, surfaced as
//!   `StoreError::Lmdb`. Slots left by a killed process are reclaimed at open (`mdb_reader_check`).
//! - LMDB may only change the map size while this process has no transaction open. Every transaction therefore
//!   runs under a shared `resize_gate` guard, and growing the map takes the gate exclusively. A thread never
//!   asks for the gate while holding a transaction, so the gate cannot deadlock with LMDB's writer lock.
//! - A write that meets `MDB_MAP_FULL` (in a put or in the commit) is aborted, the map grows (`map.rs` says how
//!   far each kind of write may take it) and the write's closure runs again from the start.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvOpenOptions, MdbError, RoTxn, RwTxn, WithoutTls};
use parking_lot::{Mutex, RwLock};

use super::group_commit::{GroupCommit, Job, Queued};
use super::map::{os_page_size, round_up, to_usize, MapLimits, Room};
use super::meta;
use super::pace::CommitPace;
use super::StoreError;

/// A named database: raw byte keys, versioned postcard values (see `codec`).
pub(super) type RawDb = Database<'static, Bytes, Bytes>;

/// Reader slots in the lock file (LMDB's own default). Each in-flight store call takes at most one.
pub const MAX_READERS: u32 = 126;
/// Named databases the environment may hold: the six used today plus room for the modules still to come
/// (cron, subagents, memory, embedding cache) without a format change.
pub(super) const MAX_DBS: u32 = 32;
/// LMDB keeps two meta pages at the start of the file; they count as used space.
const META_PAGES: u64 = 2;
/// Attempts at one write before giving up when the map keeps being resized under it by another process.
const MAX_WRITE_ATTEMPTS: usize = 64;

/// The store's named databases, opened once for the environment's lifetime.
#[derive(Clone, Copy)]
pub(super) struct Databases {
    pub sessions: RawDb,
    pub transcripts: RawDb,
    pub devices: RawDb,
    pub pair_requests: RawDb,
    pub dedupe: RawDb,
    pub meta: RawDb,
    pub memory_files: RawDb,
    pub memory_chunks: RawDb,
    pub memory_vectors: RawDb,
    pub memory_terms: RawDb,
    pub embed_cache: RawDb,
    pub cron: RawDb,
    pub cron_runs: RawDb,
    pub subagent_runs: RawDb,
    pub telegram_offsets: RawDb,
    pub channel_state: RawDb,
}

/// Database names, as they appear in errors and stats.
pub(super) const SESSIONS_DB: &str = "sessions";
pub(super) const TRANSCRIPTS_DB: &str = "transcripts";
pub(super) const DEVICES_DB: &str = "devices";
pub(super) const PAIR_REQUESTS_DB: &str = "pair_requests";
pub(super) const DEDUPE_DB: &str = "dedupe";
pub(super) const META_DB: &str = "meta";
pub(super) const MEMORY_FILES_DB: &str = "memory_files";
pub(super) const MEMORY_CHUNKS_DB: &str = "memory_chunks";
pub(super) const MEMORY_VECTORS_DB: &str = "memory_vectors";
pub(super) const MEMORY_TERMS_DB: &str = "memory_terms";
pub(super) const EMBED_CACHE_DB: &str = "embed_cache";

pub(super) const CRON_DB: &str = "cron";
pub(super) const CRON_RUNS_DB: &str = "cron_runs";
pub(super) const SUBAGENT_RUNS_DB: &str = "subagent_runs";
pub(super) const TELEGRAM_OFFSETS_DB: &str = "telegram_offsets";
pub(super) const CHANNEL_STATE_DB: &str = "channel_state";

impl Databases {
    /// Every database with its name.
    pub fn all(&self) -> [(&'static str, RawDb); 16] {
        [
            (SESSIONS_DB, self.sessions),
            (TRANSCRIPTS_DB, self.transcripts),
            (DEVICES_DB, self.devices),
            (PAIR_REQUESTS_DB, self.pair_requests),
            (DEDUPE_DB, self.dedupe),
            (META_DB, self.meta),
            (MEMORY_FILES_DB, self.memory_files),
            (MEMORY_CHUNKS_DB, self.memory_chunks),
            (MEMORY_VECTORS_DB, self.memory_vectors),
            (MEMORY_TERMS_DB, self.memory_terms),
            (EMBED_CACHE_DB, self.embed_cache),
            (CRON_DB, self.cron),
            (CRON_RUNS_DB, self.cron_runs),
            (SUBAGENT_RUNS_DB, self.subagent_runs),
            (TELEGRAM_OFFSETS_DB, self.telegram_offsets),
            (CHANNEL_STATE_DB, self.channel_state),
        ]
    }
}

/// The error of a transaction body: an LMDB error (inspected for map-full) or a store error.
pub(super) enum TxnError {
    Heed(heed::Error),
    Store(StoreError),
}

impl From<heed::Error> for TxnError {
    fn from(error: heed::Error) -> Self {
        TxnError::Heed(error)
    }
}

impl From<StoreError> for TxnError {
    fn from(error: StoreError) -> Self {
        TxnError::Store(error)
    }
}

impl TxnError {
    fn into_store(self, operation: &'static str) -> StoreError {
        match self {
            TxnError::Store(error) => error,
            TxnError::Heed(error) => lmdb_error(operation, error),
        }
    }

    fn mdb(&self) -> Option<MdbError> {
        match self {
            TxnError::Heed(heed::Error::Mdb(code)) => Some(*code),
            _ => None,
        }
    }
}

/// The error every write of a failed group transaction gets (a store error is not `Clone`).
fn shared_failure(error: &StoreError) -> StoreError {
    match error {
        StoreError::Full { limit_bytes } => StoreError::Full {
            limit_bytes: *limit_bytes,
        },
        other => StoreError::Lmdb {
            operation: "group commit",
            message: other.to_string(),
        },
    }
}

pub(super) fn lmdb_error(operation: &'static str, error: heed::Error) -> StoreError {
    StoreError::Lmdb {
        operation,
        message: error.to_string(),
    }
}

/// Map figures read from the environment.
pub(super) struct EnvFigures {
    pub map_size: u64,
    pub reader_slots_used: u32,
    pub max_readers: u32,
}

/// One open LMDB environment with the store's databases and the resize gate.
pub(super) struct LmdbEnv {
    pub(super) env: Env<WithoutTls>,
    dbs: Databases,
    pub(super) resize_gate: RwLock<()>,
    pub(super) limits: MapLimits,
    /// How long commits take and which writes are open (`pace.rs`).
    pub(super) pace: CommitPace,
    /// Small writes waiting to share the next transaction (`group_commit.rs`).
    pub(super) group: GroupCommit,
}

impl LmdbEnv {
    /// Opens the environment in `dir` (which must exist), creates missing databases and checks the schema.
    pub fn open(
        dir: &Path,
        initial_map_bytes: u64,
        max_disk_bytes: u64,
    ) -> Result<LmdbEnv, StoreError> {
        let page = os_page_size();
        let limits = MapLimits::new(max_disk_bytes, page);
        let initial_map = round_up(to_usize(initial_map_bytes), page).min(limits.write_ceiling);
        let mut options = EnvOpenOptions::new().read_txn_without_tls();
        options
            .map_size(initial_map)
            .max_readers(MAX_READERS)
            .max_dbs(MAX_DBS);
        // SAFETY: the environment lives on a local directory owned by pincer, opened once per process (heed
        // refuses a second open of the same path), and its files are only ever touched through LMDB.
        let env = unsafe { options.open(dir) }.map_err(|error| match error {
            heed::Error::EnvAlreadyOpened => StoreError::AlreadyOpen {
                path: dir.to_path_buf(),
            },
            other => lmdb_error("open", other),
        })?;
        let stale = env
            .clear_stale_readers()
            .map_err(|e| lmdb_error("clear stale readers", e))?;
        if stale > 0 {
            log::info!("store: cleared {stale} reader slots left by dead processes");
        }
        let dbs = create_databases(&env)?;
        Ok(LmdbEnv {
            env,
            dbs,
            resize_gate: RwLock::new(()),
            limits,
            pace: CommitPace::default(),
            group: GroupCommit::default(),
        })
    }

    /// Runs `body` in one read transaction.
    pub fn read<R>(
        &self,
        operation: &'static str,
        body: impl FnOnce(&RoTxn<'_>, &Databases) -> Result<R, TxnError>,
    ) -> Result<R, StoreError> {
        let txn = {
            let gate = self.resize_gate.read();
            match self.env.read_txn() {
                Ok(txn) => Some((gate, txn)),
                Err(heed::Error::Mdb(MdbError::MapResized)) => None,
                Err(other) => return Err(lmdb_error(operation, other)),
            }
        };
        let (_gate, txn) = match txn {
            Some(open) => open,
            None => {
                self.adopt_foreign_resize(operation)?;
                let gate = self.resize_gate.read();
                let txn = self.env.read_txn().map_err(|e| lmdb_error(operation, e))?;
                (gate, txn)
            }
        };
        body(&txn, &self.dbs).map_err(|e| e.into_store(operation))
    }

    /// Runs `body` in one write transaction that adds data (`Room::Ordinary`); see `write_in`.
    pub fn write<R>(
        &self,
        operation: &'static str,
        body: impl FnMut(&mut RwTxn<'_>, &Databases) -> Result<R, TxnError>,
    ) -> Result<R, StoreError> {
        self.write_in(Room::Ordinary, operation, body)
    }

    /// Runs `body` in one write transaction that removes data (`Room::Reserve`); see `write_in`.
    pub fn delete<R>(
        &self,
        operation: &'static str,
        body: impl FnMut(&mut RwTxn<'_>, &Databases) -> Result<R, TxnError>,
    ) -> Result<R, StoreError> {
        let outcome = self.write_in(Room::Reserve, operation, body);
        self.leave_reserve();
        outcome
    }

    /// Runs `body` in one write transaction and commits it before returning. On a full map the transaction is
    /// aborted, the map grows (up to `room`'s ceiling) and `body` runs again, so `body` must not have effects
    /// outside the transaction.
    fn write_in<R>(
        &self,
        room: Room,
        operation: &'static str,
        mut body: impl FnMut(&mut RwTxn<'_>, &Databases) -> Result<R, TxnError>,
    ) -> Result<R, StoreError> {
        for _ in 0..MAX_WRITE_ATTEMPTS {
            let (outcome, observed_map) = self.try_write(&mut body);
            let error = match outcome {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            match error.mdb() {
                Some(MdbError::MapFull) => self.grow(observed_map, room)?,
                Some(MdbError::MapResized) => self.adopt_foreign_resize(operation)?,
                _ => return Err(error.into_store(operation)),
            }
        }
        Err(StoreError::Lmdb {
            operation,
            message: "the map kept changing size; write abandoned".to_string(),
        })
    }

    fn try_write<R>(
        &self,
        body: &mut impl FnMut(&mut RwTxn<'_>, &Databases) -> Result<R, TxnError>,
    ) -> (Result<R, TxnError>, usize) {
        let _gate = self.resize_gate.read();
        let observed_map = self.env.info().map_size;
        let _writing = self.pace.writing();
        let outcome = (|| {
            let mut txn = self.env.write_txn()?;
            let value = body(&mut txn, &self.dbs)?;
            let committing = Instant::now();
            txn.commit()?;
            self.pace.commit_took(committing.elapsed());
            Ok(value)
        })();
        (outcome, observed_map)
    }

    /// Runs `body` as one write of a group transaction (`group_commit.rs`): atomic on its own (a nested
    /// transaction), committed and synced with whatever other grouped writes were waiting, before this returns.
    /// Adds data (`Room::Ordinary`). `body` may run more than once and must have no effects of its own.
    pub fn write_grouped<R: Send + 'static>(
        &self,
        operation: &'static str,
        mut body: impl FnMut(&mut RwTxn<'_>, &Databases) -> Result<R, TxnError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let value = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&value);
        let job: Job = Box::new(move |txn, dbs| {
            *slot.lock() = Some(body(txn, dbs)?);
            Ok(())
        });
        self.group.submit(self, operation, job)?;
        let taken = value.lock().take();
        taken.ok_or(StoreError::Lmdb {
            operation,
            message: "the group commit returned no value".to_string(),
        })
    }

    /// Runs a batch of grouped writes in one write transaction, each in a nested transaction of its own, and
    /// commits it; returns each write's outcome in order. A full map grows and the batch runs again.
    pub(super) fn write_batch(&self, batch: &mut [Queued]) -> Vec<Result<(), StoreError>> {
        let count = batch.len();
        let shared = |error: &StoreError| {
            (0..count)
                .map(|_| Err(shared_failure(error)))
                .collect::<Vec<_>>()
        };
        for _ in 0..MAX_WRITE_ATTEMPTS {
            let (outcome, observed_map) = self.try_batch(batch);
            let error = match outcome {
                Ok(outcomes) => return outcomes,
                Err(error) => error,
            };
            let recovered = match error.mdb() {
                Some(MdbError::MapFull) => self.grow(observed_map, Room::Ordinary),
                Some(MdbError::MapResized) => self.adopt_foreign_resize("group commit"),
                _ => Err(error.into_store("group commit")),
            };
            if let Err(error) = recovered {
                return shared(&error);
            }
        }
        shared(&StoreError::Lmdb {
            operation: "group commit",
            message: "the map kept changing size; write abandoned".to_string(),
        })
    }

    fn try_batch(
        &self,
        batch: &mut [Queued],
    ) -> (Result<Vec<Result<(), StoreError>>, TxnError>, usize) {
        let _gate = self.resize_gate.read();
        let observed_map = self.env.info().map_size;
        let _writing = self.pace.writing();
        let outcome = (|| {
            let mut txn = self.env.write_txn()?;
            let mut outcomes = Vec::with_capacity(batch.len());
            for queued in batch.iter_mut() {
                let mut nested = self.env.nested_write_txn(&mut txn)?;
                match (queued.job)(&mut nested, &self.dbs) {
                    Ok(()) => {
                        nested.commit()?;
                        outcomes.push(Ok(()));
                    }
                    // The map is full or moved: the whole batch runs again after the fix.
                    Err(error)
                        if error.mdb().is_some_and(|code| {
                            matches!(code, MdbError::MapFull | MdbError::MapResized)
                        }) =>
                    {
                        return Err(error)
                    }
                    Err(error) => {
                        nested.abort();
                        outcomes.push(Err(error.into_store(queued.operation)));
                    }
                }
            }
            let committing = Instant::now();
            txn.commit()?;
            self.pace.commit_took(committing.elapsed());
            Ok(outcomes)
        })();
        (outcome, observed_map)
    }

    pub fn path(&self) -> &Path {
        self.env.path()
    }

    pub fn map_size(&self) -> u64 {
        self.env.info().map_size as u64
    }

    /// The hard cap (`max_disk_bytes` in whole pages).
    pub fn max_map_bytes(&self) -> u64 {
        self.limits.hard_cap as u64
    }

    /// The largest map ordinary (data-adding) writes may grow to.
    pub fn write_ceiling_bytes(&self) -> u64 {
        self.limits.write_ceiling as u64
    }

    pub fn info(&self) -> EnvFigures {
        let info = self.env.info();
        EnvFigures {
            map_size: info.map_size as u64,
            reader_slots_used: info.number_of_readers,
            max_readers: info.maximum_number_of_readers,
        }
    }

    pub fn file_bytes(&self) -> Result<u64, StoreError> {
        self.env
            .real_disk_size()
            .map_err(|e| lmdb_error("file size", e))
    }

    pub fn page_size(&self) -> u32 {
        self.env.unnamed_database_stat().page_size
    }

    pub fn sync(&self) -> Result<(), StoreError> {
        self.env.force_sync().map_err(|e| lmdb_error("sync", e))
    }
}

/// Bytes in pages holding live data as seen by `txn`: every named database's B-tree and overflow pages, the
/// unnamed database (the catalogue of names) and the meta pages. Free pages are not counted.
pub(super) fn used_bytes(env: &LmdbEnv, txn: &RoTxn<'_>, dbs: &Databases) -> Result<u64, TxnError> {
    let catalogue = env.env.unnamed_database_stat();
    let page = u64::from(catalogue.page_size);
    let mut pages = META_PAGES + pages_of(&catalogue);
    for (_, db) in dbs.all() {
        pages += pages_of(&db.stat(txn)?);
    }
    Ok(pages * page)
}

fn pages_of(stat: &heed::DatabaseStat) -> u64 {
    (stat.branch_pages + stat.leaf_pages + stat.overflow_pages) as u64
}

fn create_databases(env: &Env<WithoutTls>) -> Result<Databases, StoreError> {
    let wtxn = env
        .write_txn()
        .map_err(|e| lmdb_error("open databases", e))?;
    // An error from the closure (a schema that is too new, a corrupt version record) drops the transaction
    // uncommitted, so a refused environment is left exactly as it was found.
    let (
        (sessions, transcripts, devices, pair_requests, dedupe, meta, cron, cron_runs),
        memory,
        (telegram_offsets, channel_state),
    ) = env
        .create_databases_and_commit(wtxn, |opener, wtxn| -> Result<_, TxnError> {
            let mut create = |name| opener.create_database::<Bytes, Bytes>(wtxn, Some(name));
            let dbs = (
                create(SESSIONS_DB)?,
                create(TRANSCRIPTS_DB)?,
                create(DEVICES_DB)?,
                create(PAIR_REQUESTS_DB)?,
                create(DEDUPE_DB)?,
                create(META_DB)?,
                create(CRON_DB)?,
                create(CRON_RUNS_DB)?,
            );
            let memory = [
                create(MEMORY_FILES_DB)?,
                create(MEMORY_CHUNKS_DB)?,
                create(MEMORY_VECTORS_DB)?,
                create(MEMORY_TERMS_DB)?,
                create(EMBED_CACHE_DB)?,
                create(SUBAGENT_RUNS_DB)?,
            ];
            let channels = (create(TELEGRAM_OFFSETS_DB)?, create(CHANNEL_STATE_DB)?);
            meta::check_and_record_schema(wtxn, dbs.5)?;
            Ok(CommitOrAbort::<_, ()>::Commit((dbs, memory, channels)))
        })
        .map_err(|e| e.into_store("open databases"))?
        .commit()
        .ok_or(StoreError::Lmdb {
            operation: "open databases",
            message: "creation aborted".to_string(),
        })?;
    Ok(Databases {
        sessions,
        transcripts,
        devices,
        pair_requests,
        dedupe,
        meta,
        memory_files: memory[0],
        memory_chunks: memory[1],
        memory_vectors: memory[2],
        memory_terms: memory[3],
        embed_cache: memory[4],
        cron,
        cron_runs,
        subagent_runs: memory[5],
        telegram_offsets,
        channel_state,
    })
}
