//! Store maintenance, after OpenClaw's session maintenance: keeps the store bounded on a small board.
//!
//! In order: prune sessions not updated within `prune_after_ms`, cap the rest to `max_entries` (oldest first),
//! then, when `max_disk_bytes` is set and the live pages exceed it, remove the oldest sessions until they fit under
//! `high_water_bytes` (80% of the budget unless configured, as upstream).
//! A removed session takes its transcript with it (unless another session still uses that session id). Then
//! expired dedupe entries and pairing requests older than `PAIR_REQUEST_TTL_MS` are dropped. Work is done in
//! small committed transactions, so a gateway write never waits long and a full map can still shrink. In warn mode
//! (`session.maintenance.mode: "warn"`) no session is removed: the pass counts and logs what the limits exceed.
//! This file decides what to remove; it must not decide when maintenance runs (the gateway's timer does).

use std::collections::HashMap;

use heed::{RoTxn, RwTxn};

use super::codec::{decode, key_text};
use super::devices::{PairRequest, PAIR_REQUEST_TTL_MS};
use super::env::{self, Databases, TxnError, SESSIONS_DB};
use super::sessions::SessionEntry;
use super::transcripts::delete_entries;
use super::{dedupe, Store, StoreError};
use crate::config::schema::session::SessionMaintenance;

/// Meta key holding the time of the last maintenance pass (big-endian u64 ms since the epoch).
pub const LAST_MAINTENANCE_KEY: &str = "maintenance.last_run_ms";
/// Default age after which an untouched session is pruned: 30 days (OpenClaw's `pruneAfter`).
pub const DEFAULT_PRUNE_AFTER_MS: u64 = 30 * 24 * 60 * 60 * 1000;
/// Default cap on stored sessions (OpenClaw's `maxEntries`).
pub const DEFAULT_MAX_SESSION_ENTRIES: usize = 5000;
/// Sessions removed per transaction while pruning or capping.
const SESSIONS_PER_TXN: usize = 128;
/// Sessions removed per transaction while shrinking to the disk budget (small, so freed pages become reusable).
const DISK_EVICTIONS_PER_TXN: usize = 16;

/// What maintenance keeps. A zero `prune_after_ms` or `max_entries` disables that step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaintenancePolicy {
    pub prune_after_ms: u64,
    pub max_entries: usize,
    pub max_disk_bytes: Option<u64>,
    /// Once over `max_disk_bytes`, sessions go until used bytes are at most
    /// this (`session.maintenance.highWaterBytes`, 80% of the budget by
    /// default); `None`: down to the budget itself.
    pub high_water_bytes: Option<u64>,
    /// Remove what the limits exceed (`enforce`); when false (`warn`) only report it.
    pub enforce: bool,
}

impl Default for MaintenancePolicy {
    fn default() -> Self {
        MaintenancePolicy {
            prune_after_ms: DEFAULT_PRUNE_AFTER_MS,
            max_entries: DEFAULT_MAX_SESSION_ENTRIES,
            max_disk_bytes: None,
            high_water_bytes: None,
            enforce: true,
        }
    }
}

impl MaintenancePolicy {
    /// The policy `session.maintenance` describes.
    pub fn from_config(maintenance: &SessionMaintenance) -> MaintenancePolicy {
        MaintenancePolicy {
            prune_after_ms: maintenance.prune_after_ms(),
            max_entries: maintenance.max_entries as usize,
            max_disk_bytes: maintenance.max_disk_bytes(),
            high_water_bytes: maintenance.high_water_bytes(),
            enforce: maintenance.enforces(),
        }
    }
}

/// What one maintenance pass removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    /// Sessions not updated within `prune_after_ms`.
    pub pruned_sessions: usize,
    /// Sessions over `max_entries`.
    pub capped_sessions: usize,
    pub expired_dedupe: usize,
    pub expired_pair_requests: usize,
    /// Transcript entries removed with their sessions.
    pub transcripts_removed: usize,
    /// Sessions removed to bring used bytes under `max_disk_bytes`.
    pub disk_evicted_sessions: usize,
    /// Warn mode: sessions the age limit would have pruned.
    pub would_prune: usize,
    /// Warn mode: sessions the entry cap would have removed.
    pub would_cap: usize,
    /// Warn mode: used bytes, when they exceed `max_disk_bytes`.
    pub over_disk_budget_bytes: Option<u64>,
}

/// A session as maintenance sees it; removal is skipped if the entry changed since it was listed.
#[derive(Clone, Debug)]
struct Candidate {
    key: String,
    session_id: String,
    updated_at_ms: u64,
    /// Whether no other listed session uses `session_id`, so its transcript may go with it.
    owns_transcript: bool,
}

impl Store {
    /// Runs one maintenance pass at `now_ms` (ms since the epoch); see the module documentation.
    pub fn maintain(
        &self,
        policy: &MaintenancePolicy,
        now_ms: u64,
    ) -> Result<MaintenanceReport, StoreError> {
        let mut report = MaintenanceReport::default();
        let live = self.env.read("maintain", list_oldest_first)?;
        if policy.enforce {
            self.enforce(policy, live, now_ms, &mut report)?;
        } else {
            self.report_only(policy, &live, now_ms, &mut report)?;
        }
        let (expired_dedupe, expired_pair_requests) = self.env.delete("maintain", |txn, dbs| {
            Ok((
                dedupe::remove_expired(txn, dbs, now_ms)?,
                remove_expired_pair_requests(txn, dbs, now_ms)?,
            ))
        })?;
        report.expired_dedupe = expired_dedupe;
        report.expired_pair_requests = expired_pair_requests;
        self.record_run(now_ms)?;
        log::debug!("store maintenance: {report:?}");
        Ok(report)
    }

    /// Warn mode: counts what the limits exceed and logs it; removes no session.
    fn report_only(
        &self,
        policy: &MaintenancePolicy,
        live: &[Candidate],
        now_ms: u64,
        report: &mut MaintenanceReport,
    ) -> Result<(), StoreError> {
        let stale = |c: &&Candidate| {
            policy.prune_after_ms > 0
                && now_ms.saturating_sub(c.updated_at_ms) > policy.prune_after_ms
        };
        report.would_prune = live.iter().filter(stale).count();
        let kept = live.len() - report.would_prune;
        if policy.max_entries > 0 && kept > policy.max_entries {
            report.would_cap = kept - policy.max_entries;
        }
        if let Some(limit_bytes) = policy.max_disk_bytes {
            let used = self
                .env
                .read("maintain", |txn, dbs| env::used_bytes(&self.env, txn, dbs))?;
            report.over_disk_budget_bytes = Some(used).filter(|used| *used > limit_bytes);
        }
        if report.would_prune > 0 {
            log::warn!(
                "session maintenance (warn mode): {} sessions not updated within {} ms would be pruned",
                report.would_prune,
                policy.prune_after_ms
            );
        }
        if report.would_cap > 0 {
            log::warn!(
                "session maintenance (warn mode): {} sessions over maxEntries {} would be removed",
                report.would_cap,
                policy.max_entries
            );
        }
        if let (Some(used), Some(limit)) = (report.over_disk_budget_bytes, policy.max_disk_bytes) {
            log::warn!(
                "session maintenance (warn mode): the store uses {used} bytes, over maxDiskBytes {limit}; the oldest sessions would be removed"
            );
        }
        Ok(())
    }

    /// Enforce mode: prunes, caps and evicts for the disk budget, in that order.
    fn enforce(
        &self,
        policy: &MaintenancePolicy,
        mut live: Vec<Candidate>,
        now_ms: u64,
        report: &mut MaintenanceReport,
    ) -> Result<(), StoreError> {
        if policy.prune_after_ms > 0 {
            let (stale, fresh): (Vec<_>, Vec<_>) = live
                .into_iter()
                .partition(|c| now_ms.saturating_sub(c.updated_at_ms) > policy.prune_after_ms);
            let (removed, transcripts) = self.remove_in_batches(&stale)?;
            report.pruned_sessions = removed;
            report.transcripts_removed += transcripts;
            live = fresh;
        }
        if policy.max_entries > 0 && live.len() > policy.max_entries {
            let over: Vec<Candidate> = live.drain(..live.len() - policy.max_entries).collect();
            let (removed, transcripts) = self.remove_in_batches(&over)?;
            report.capped_sessions = removed;
            report.transcripts_removed += transcripts;
        }
        if let Some(limit_bytes) = policy.max_disk_bytes {
            let target_bytes = policy
                .high_water_bytes
                .map_or(limit_bytes, |high| high.min(limit_bytes));
            let (removed, transcripts) = self.evict_for_disk(&live, limit_bytes, target_bytes)?;
            report.disk_evicted_sessions = removed;
            report.transcripts_removed += transcripts;
        }
        Ok(())
    }

    /// Records when maintenance last ran. This small commit also matters at the size cap: LMDB reuses pages freed
    /// by transaction N only from transaction N + 2 on, so it makes the space freed above usable by the very next
    /// write. At the cap it may itself find no room; that is not an error of the pass.
    fn record_run(&self, now_ms: u64) -> Result<(), StoreError> {
        let outcome = self.env.delete("maintain", |txn, dbs| {
            Ok(dbs
                .meta
                .put(txn, LAST_MAINTENANCE_KEY.as_bytes(), &now_ms.to_be_bytes())?)
        });
        match outcome {
            Ok(()) | Err(StoreError::Full { .. }) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Removes `victims` in transactions of `SESSIONS_PER_TXN`; returns (sessions, transcript entries) removed.
    fn remove_in_batches(&self, victims: &[Candidate]) -> Result<(usize, usize), StoreError> {
        let mut totals = (0, 0);
        for batch in victims.chunks(SESSIONS_PER_TXN) {
            let (sessions, transcripts) = self.env.delete("maintain", |txn, dbs| {
                let mut removed = (0, 0);
                for victim in batch {
                    if let Some(transcripts) = remove_unchanged(txn, dbs, victim)? {
                        removed.0 += 1;
                        removed.1 += transcripts;
                    }
                }
                Ok(removed)
            })?;
            totals.0 += sessions;
            totals.1 += transcripts;
        }
        Ok(totals)
    }

    /// Removes the oldest of `live` until used bytes fit `limit_bytes` or none are left.
    fn evict_for_disk(
        &self,
        live: &[Candidate],
        limit_bytes: u64,
        target_bytes: u64,
    ) -> Result<(usize, usize), StoreError> {
        let mut next = 0;
        let mut totals = (0, 0);
        let used = self
            .env
            .read("maintain", |txn, dbs| env::used_bytes(&self.env, txn, dbs))?;
        if used <= limit_bytes {
            return Ok(totals);
        }
        loop {
            let (consumed, sessions, transcripts, still_over) =
                self.env.delete("maintain", |txn, dbs| {
                    let mut cursor = next;
                    let mut removed = (0, 0);
                    let mut over = env::used_bytes(&self.env, txn, dbs)? > target_bytes;
                    while over && cursor < live.len() && cursor - next < DISK_EVICTIONS_PER_TXN {
                        if let Some(transcripts) = remove_unchanged(txn, dbs, &live[cursor])? {
                            removed.0 += 1;
                            removed.1 += transcripts;
                        }
                        cursor += 1;
                        over = env::used_bytes(&self.env, txn, dbs)? > target_bytes;
                    }
                    Ok((cursor - next, removed.0, removed.1, over))
                })?;
            next += consumed;
            totals.0 += sessions;
            totals.1 += transcripts;
            if !still_over || next >= live.len() {
                if still_over {
                    log::warn!("store maintenance: no sessions left to remove, used bytes still over {target_bytes}");
                }
                return Ok(totals);
            }
        }
    }
}

/// Every decodable session, oldest first (ties: greater key first, mirroring `sessions()`), with transcript
/// ownership worked out. Corrupt entries are logged and left alone: maintenance never destroys unreadable data.
fn list_oldest_first(txn: &RoTxn<'_>, dbs: &Databases) -> Result<Vec<Candidate>, TxnError> {
    let mut all = Vec::new();
    for item in dbs.sessions.iter(txn)? {
        let (key, bytes) = item?;
        let key = key_text(SESSIONS_DB, key)?;
        match decode::<SessionEntry>(bytes) {
            Ok(entry) => all.push(Candidate {
                key: key.to_string(),
                session_id: entry.session_id,
                updated_at_ms: entry.updated_at_ms,
                owns_transcript: false,
            }),
            Err(reason) => {
                log::warn!("store maintenance: skipping corrupt session {key:?}: {reason}")
            }
        }
    }
    all.sort_by(|a, b| {
        a.updated_at_ms
            .cmp(&b.updated_at_ms)
            .then_with(|| b.key.cmp(&a.key))
    });
    // The transcript goes with the last remaining user of its session id, in removal (oldest-first) order.
    let mut users: HashMap<String, usize> = HashMap::new();
    for candidate in &all {
        *users.entry(candidate.session_id.clone()).or_default() += 1;
    }
    for candidate in &mut all {
        if let Some(count) = users.get_mut(&candidate.session_id) {
            *count -= 1;
            candidate.owns_transcript = *count == 0;
        }
    }
    Ok(all)
}

/// Deletes `victim` if its entry is unchanged since it was listed; returns the transcript entries removed with
/// it, or `None` when it was skipped (deleted or updated meanwhile).
fn remove_unchanged(
    txn: &mut RwTxn<'_>,
    dbs: &Databases,
    victim: &Candidate,
) -> Result<Option<usize>, TxnError> {
    let unchanged = match dbs.sessions.get(txn, victim.key.as_bytes())? {
        None => false,
        Some(bytes) => decode::<SessionEntry>(bytes).is_ok_and(|entry| {
            entry.updated_at_ms == victim.updated_at_ms && entry.session_id == victim.session_id
        }),
    };
    if !unchanged {
        return Ok(None);
    }
    dbs.sessions.delete(txn, victim.key.as_bytes())?;
    let transcripts = if victim.owns_transcript {
        delete_entries(txn, dbs, &victim.session_id)?
    } else {
        0
    };
    Ok(Some(transcripts as usize))
}

/// Deletes pairing requests older than `PAIR_REQUEST_TTL_MS` (and undecodable ones); returns how many went.
fn remove_expired_pair_requests(
    txn: &mut RwTxn<'_>,
    dbs: &Databases,
    now_ms: u64,
) -> Result<usize, TxnError> {
    let mut doomed = Vec::new();
    for item in dbs.pair_requests.iter(txn)? {
        let (key, bytes) = item?;
        match decode::<PairRequest>(bytes) {
            Ok(request) if now_ms.saturating_sub(request.created_at_ms) <= PAIR_REQUEST_TTL_MS => {}
            Ok(_) => doomed.push(key.to_vec()),
            Err(reason) => {
                log::warn!(
                    "store: dropping corrupt pair request {:?}: {reason}",
                    String::from_utf8_lossy(key)
                );
                doomed.push(key.to_vec());
            }
        }
    }
    for key in &doomed {
        dbs.pair_requests.delete(txn, key)?;
    }
    Ok(doomed.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::session::SessionMaintenance;
    use crate::store::test_support::temp_store;
    use crate::store::TranscriptEntry;

    const DAY_MS: u64 = 24 * 60 * 60 * 1000;
    const NOW_MS: u64 = 100 * DAY_MS;

    fn keep_all() -> MaintenancePolicy {
        MaintenancePolicy {
            prune_after_ms: 0,
            max_entries: 0,
            max_disk_bytes: None,
            high_water_bytes: None,
            enforce: true,
        }
    }

    fn add_session(
        store: &Store,
        key: &str,
        session_id: &str,
        updated_at_ms: u64,
        messages: usize,
        text_bytes: usize,
    ) {
        let entry = SessionEntry {
            updated_at_ms,
            ..SessionEntry::new(session_id, updated_at_ms)
        };
        store.put_session(key, &entry).expect("put session");
        let text = "x".repeat(text_bytes);
        for _ in 0..messages {
            let message = TranscriptEntry {
                role: "user".into(),
                text: text.clone(),
                ..TranscriptEntry::default()
            };
            store
                .append_transcript(session_id, &message)
                .expect("append");
        }
    }

    fn keys(store: &Store) -> Vec<String> {
        store
            .sessions()
            .expect("list")
            .into_iter()
            .map(|(key, _)| key)
            .collect()
    }

    #[test]
    fn empty_store_needs_no_maintenance() {
        let (_dir, store) = temp_store();
        let report = store
            .maintain(&MaintenancePolicy::default(), NOW_MS)
            .expect("maintain");
        assert_eq!(report, MaintenanceReport::default());
    }

    #[test]
    fn sessions_idle_past_the_window_are_pruned_with_their_transcripts() {
        let (_dir, store) = temp_store();
        add_session(&store, "stale", "s-stale", NOW_MS - 31 * DAY_MS, 3, 10);
        add_session(&store, "fresh", "s-fresh", NOW_MS - DAY_MS, 2, 10);
        let policy = MaintenancePolicy {
            prune_after_ms: 30 * DAY_MS,
            ..keep_all()
        };
        let report = store.maintain(&policy, NOW_MS).expect("maintain");
        assert_eq!((report.pruned_sessions, report.transcripts_removed), (1, 3));
        assert_eq!(keys(&store), ["fresh"]);
        assert!(store
            .transcript_tail("s-stale", 10)
            .expect("tail")
            .is_empty());
        assert_eq!(store.transcript_tail("s-fresh", 10).expect("tail").len(), 2);
    }

    fn maintenance_config(mode: Option<&str>) -> SessionMaintenance {
        SessionMaintenance {
            mode: mode.map(str::to_string),
            prune_after: Some("30d".into()),
            max_entries: 2,
            max_disk_bytes: Some("1".into()),
            high_water_bytes: None,
        }
    }

    fn four_sessions_one_stale(store: &Store) {
        add_session(store, "stale", "s-stale", NOW_MS - 31 * DAY_MS, 2, 10);
        for i in 0..3u64 {
            add_session(
                store,
                &format!("k{i}"),
                &format!("s{i}"),
                NOW_MS - (10 - i) * 1000,
                1,
                10,
            );
        }
    }

    #[test]
    fn warn_mode_reports_what_it_would_remove_and_removes_nothing() {
        let (_dir, store) = temp_store();
        four_sessions_one_stale(&store);
        let policy = MaintenancePolicy::from_config(&maintenance_config(Some("warn")));
        let report = store.maintain(&policy, NOW_MS).expect("maintain");
        assert_eq!(keys(&store), ["k2", "k1", "k0", "stale"]);
        assert_eq!(store.transcript_tail("s-stale", 10).expect("tail").len(), 2);
        assert_eq!(
            (
                report.pruned_sessions,
                report.capped_sessions,
                report.transcripts_removed
            ),
            (0, 0, 0),
            "{report:?}"
        );
        assert_eq!((report.would_prune, report.would_cap), (1, 1), "{report:?}");
        assert!(report.over_disk_budget_bytes.is_some(), "{report:?}");
    }

    #[test]
    fn enforce_mode_and_the_default_remove_what_warn_mode_reports() {
        for mode in [Some("enforce"), None] {
            let (_dir, store) = temp_store();
            four_sessions_one_stale(&store);
            let mut config = maintenance_config(mode);
            config.max_disk_bytes = None;
            let policy = MaintenancePolicy::from_config(&config);
            let report = store.maintain(&policy, NOW_MS).expect("maintain");
            assert_eq!((report.pruned_sessions, report.capped_sessions), (1, 1));
            assert_eq!(keys(&store), ["k2", "k1"], "mode {mode:?}");
        }
    }

    #[test]
    fn sessions_over_the_cap_are_removed_oldest_first() {
        let (_dir, store) = temp_store();
        for i in 0..5u64 {
            add_session(
                &store,
                &format!("k{i}"),
                &format!("s{i}"),
                NOW_MS - (10 - i) * 1000,
                1,
                5,
            );
        }
        let policy = MaintenancePolicy {
            max_entries: 2,
            ..keep_all()
        };
        let report = store.maintain(&policy, NOW_MS).expect("maintain");
        assert_eq!((report.capped_sessions, report.transcripts_removed), (3, 3));
        assert_eq!(keys(&store), ["k4", "k3"]);
    }

    #[test]
    fn zero_window_and_zero_cap_remove_nothing() {
        let (_dir, store) = temp_store();
        add_session(&store, "ancient", "s", 1, 1, 5);
        let report = store.maintain(&keep_all(), NOW_MS).expect("maintain");
        assert_eq!(report, MaintenanceReport::default());
        assert_eq!(keys(&store), ["ancient"]);
    }

    #[test]
    fn disk_budget_removes_oldest_sessions_until_used_bytes_fit() {
        let (_dir, store) = temp_store();
        for i in 0..20u64 {
            add_session(
                &store,
                &format!("k{i:02}"),
                &format!("s{i:02}"),
                NOW_MS - (100 - i),
                4,
                2_000,
            );
        }
        let before = store.stats().expect("stats").used_bytes;
        let limit_bytes = before / 2;
        let policy = MaintenancePolicy {
            max_disk_bytes: Some(limit_bytes),
            ..keep_all()
        };
        let report = store.maintain(&policy, NOW_MS).expect("maintain");
        let after = store.stats().expect("stats").used_bytes;
        assert!(
            after <= limit_bytes,
            "used {after} bytes, limit {limit_bytes}"
        );
        assert!(
            report.disk_evicted_sessions >= 5 && report.disk_evicted_sessions < 20,
            "{report:?}"
        );
        assert_eq!(report.transcripts_removed, report.disk_evicted_sessions * 4);
        let remaining = keys(&store);
        assert_eq!(remaining.len(), 20 - report.disk_evicted_sessions);
        // The survivors are exactly the newest ones.
        let newest: Vec<String> = (report.disk_evicted_sessions as u64..20)
            .rev()
            .map(|i| format!("k{i:02}"))
            .collect();
        assert_eq!(remaining, newest);
    }

    fn twenty_sessions(store: &Store) -> u64 {
        for i in 0..20u64 {
            add_session(
                store,
                &format!("k{i:02}"),
                &format!("s{i:02}"),
                NOW_MS - (100 - i),
                4,
                2_000,
            );
        }
        store.stats().expect("stats").used_bytes
    }

    #[test]
    fn over_budget_cleanup_shrinks_to_the_high_water_mark() {
        let (_dir, store) = temp_store();
        let before = twenty_sessions(&store);
        let config = SessionMaintenance {
            max_disk_bytes: Some(format!("{}b", before * 9 / 10)),
            high_water_bytes: Some(format!("{}b", before / 2)),
            ..SessionMaintenance::default()
        };
        let policy = MaintenancePolicy::from_config(&config);
        assert_eq!(policy.high_water_bytes, Some(before / 2));
        let report = store.maintain(&policy, NOW_MS).expect("maintain");
        let after = store.stats().expect("stats").used_bytes;
        assert!(
            after <= before / 2,
            "used {after} bytes, high water {}",
            before / 2
        );
        // Down to the budget alone would have removed only about a tenth.
        assert!(report.disk_evicted_sessions >= 8, "{report:?}");
    }

    #[test]
    fn under_budget_nothing_goes_even_above_the_high_water_mark() {
        let (_dir, store) = temp_store();
        let before = twenty_sessions(&store);
        let policy = MaintenancePolicy {
            max_disk_bytes: Some(before * 2),
            high_water_bytes: Some(before / 2),
            ..keep_all()
        };
        let report = store.maintain(&policy, NOW_MS).expect("maintain");
        assert_eq!(report.disk_evicted_sessions, 0, "{report:?}");
        assert_eq!(keys(&store).len(), 20);
    }

    #[test]
    fn a_store_full_at_its_cap_accepts_writes_again_after_maintenance() {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = crate::store::StoreOptions {
            lock_dir: None,
            max_disk_bytes: 512 * 1024,
            initial_map_bytes: 64 * 1024,
        };
        let store = Store::open(dir.path(), options).expect("open");
        let message = TranscriptEntry {
            role: "user".into(),
            text: "y".repeat(6_000),
            ..TranscriptEntry::default()
        };
        let mut sessions = 0u64;
        let full = 'fill: loop {
            let session_id = format!("s{sessions:03}");
            if let Err(error) = store.put_session(
                &format!("k{sessions:03}"),
                &SessionEntry::new(&session_id, sessions),
            ) {
                break 'fill error;
            }
            for _ in 0..4 {
                if let Err(error) = store.append_transcript(&session_id, &message) {
                    break 'fill error;
                }
            }
            sessions += 1;
            assert!(sessions < 100, "never filled");
        };
        assert!(matches!(full, StoreError::Full { .. }), "{full:?}");
        let report = store
            .maintain(
                &MaintenancePolicy {
                    max_entries: 2,
                    ..keep_all()
                },
                NOW_MS,
            )
            .expect("maintain");
        assert!(report.capped_sessions >= 1, "{report:?}");
        store
            .append_transcript("after", &message)
            .expect("first write after maintenance");
        let last_run = store
            .meta(LAST_MAINTENANCE_KEY)
            .expect("meta")
            .expect("last run recorded");
        assert_eq!(last_run, NOW_MS.to_be_bytes().to_vec());
    }

    #[test]
    fn disk_budget_already_met_removes_nothing() {
        let (_dir, store) = temp_store();
        add_session(&store, "k", "s", NOW_MS, 2, 100);
        let policy = MaintenancePolicy {
            max_disk_bytes: Some(1 << 30),
            ..keep_all()
        };
        assert_eq!(
            store.maintain(&policy, NOW_MS).expect("maintain"),
            MaintenanceReport::default()
        );
    }

    #[test]
    fn transcript_shared_by_two_keys_stays_while_one_remains() {
        let (_dir, store) = temp_store();
        add_session(&store, "old", "shared", NOW_MS - 50 * DAY_MS, 2, 5);
        add_session(&store, "new", "shared", NOW_MS, 0, 5);
        let policy = MaintenancePolicy {
            prune_after_ms: 30 * DAY_MS,
            ..keep_all()
        };
        let report = store.maintain(&policy, NOW_MS).expect("maintain");
        assert_eq!((report.pruned_sessions, report.transcripts_removed), (1, 0));
        assert_eq!(store.transcript_tail("shared", 10).expect("tail").len(), 2);
    }

    #[test]
    fn corrupt_sessions_are_left_for_an_operator() {
        let (_dir, store) = temp_store();
        store
            .env
            .write("test", |txn, dbs| {
                Ok(dbs.sessions.put(txn, b"broken", &[1])?)
            })
            .expect("raw put");
        let policy = MaintenancePolicy {
            prune_after_ms: 1,
            max_entries: 1,
            max_disk_bytes: Some(1),
            high_water_bytes: None,
            enforce: true,
        };
        let report = store.maintain(&policy, NOW_MS).expect("maintain");
        assert_eq!(report, MaintenanceReport::default());
        assert_eq!(
            store.stats().expect("stats").entries.get("sessions"),
            Some(&1)
        );
    }

    #[test]
    fn expired_dedupe_entries_and_old_pair_requests_are_dropped() {
        let (_dir, store) = temp_store();
        store.dedupe_put("expired", NOW_MS - 1, b"x").expect("put");
        store.dedupe_put("live", NOW_MS + 1, b"y").expect("put");
        let request = |id: &str, created_at_ms| PairRequest {
            request_id: id.into(),
            created_at_ms,
            ..PairRequest::default()
        };
        store
            .put_pair_request(&request("old", NOW_MS - PAIR_REQUEST_TTL_MS - 1))
            .expect("put");
        store
            .put_pair_request(&request("edge", NOW_MS - PAIR_REQUEST_TTL_MS))
            .expect("put");
        store
            .put_pair_request(&request("new", NOW_MS))
            .expect("put");
        let report = store.maintain(&keep_all(), NOW_MS).expect("maintain");
        assert_eq!(
            (report.expired_dedupe, report.expired_pair_requests),
            (1, 1)
        );
        let left: Vec<String> = store
            .pair_requests()
            .expect("list")
            .into_iter()
            .map(|r| r.request_id)
            .collect();
        assert_eq!(left, ["edge", "new"]);
        assert_eq!(
            store.dedupe_get("live", NOW_MS).expect("get"),
            Some(b"y".to_vec())
        );
    }
}
