//! Keeps the index fresh: one sync when the watcher starts, then (with `sync.watch`, the default) a poll
//! of the memory files' size and modification time; a change starts a quiet period (the debounce, 1,500 ms
//! by default) and the sync runs once nothing has changed for that long. With `sync.intervalMinutes` a
//! sync also runs that often, watching or not. Polling (no inotify) keeps it portable and bounded: one
//! stat per memory file per poll, one sync at a time, on the blocking pool.
//!
//! This file must not index by itself; it only decides when `MemoryService::sync` runs. Each sync's
//! progress goes to a bounded broadcast channel ([`IndexProgress`]): the gateway forwards it to its
//! clients as events; with nobody listening it is dropped.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use super::MemoryService;
use crate::config::schema::memory::ResolvedMemorySearch;

/// How often the files are checked for changes.
pub const POLL_INTERVAL_MS: u64 = 500;

/// Size and modification time of every memory file, in discovery order.
pub fn fingerprint(service: &MemoryService) -> Vec<(String, u64, u128)> {
    service
        .files()
        .into_iter()
        .map(|file| {
            let meta = std::fs::metadata(&file.absolute).ok();
            let size = meta.as_ref().map_or(0, std::fs::Metadata::len);
            let modified = meta
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            (file.cited_path, size, modified)
        })
        .collect()
}

/// Progress events a listener may fall behind by before it misses some (it then skips ahead).
pub const PROGRESS_CAPACITY: usize = 64;

/// One step of a sync the watcher runs: after each file, then once when it ends (`done`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexProgress {
    pub agent_id: String,
    pub files_done: u64,
    pub files_total: u64,
    pub chunks_written: u64,
    pub done: bool,
    /// Why the sync failed (only with `done`).
    pub error: Option<String>,
}

/// Where the watcher's syncs report their progress.
pub type ProgressSender = tokio::sync::broadcast::Sender<IndexProgress>;

/// One sync on the blocking pool, its progress sent to `progress`; failures are logged.
pub async fn sync_now(service: &Arc<MemoryService>, progress: &ProgressSender) {
    let service = Arc::clone(service);
    let agent_id = service.agent_id().to_string();
    let tx = progress.clone();
    let agent = agent_id.clone();
    let outcome = tokio::task::spawn_blocking(move || {
        service.sync(false, &mut |p| {
            let _ = tx.send(IndexProgress {
                agent_id: agent.clone(),
                files_done: p.files_done,
                files_total: p.files_total,
                chunks_written: p.chunks_written,
                done: false,
                error: None,
            });
        })
    })
    .await;
    let last = |error: Option<String>, files: u64, chunks: u64| IndexProgress {
        agent_id: agent_id.clone(),
        files_done: files,
        files_total: files,
        chunks_written: chunks,
        done: true,
        error,
    };
    let end = match outcome {
        Ok(Ok(report)) => {
            log::debug!("memory: sync done: {report:?}");
            last(None, report.files_seen, report.chunks_written)
        }
        Ok(Err(error)) => {
            log::warn!("memory: sync failed: {error}");
            last(Some(error.to_string()), 0, 0)
        }
        Err(error) => {
            log::warn!("memory: sync task failed: {error}");
            last(Some(error.to_string()), 0, 0)
        }
    };
    let _ = progress.send(end);
}

async fn current_fingerprint(service: &Arc<MemoryService>) -> Vec<(String, u64, u128)> {
    let service = Arc::clone(service);
    tokio::task::spawn_blocking(move || fingerprint(&service))
        .await
        .unwrap_or_default()
}

/// When the watcher syncs besides its first sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchPlan {
    /// Poll the files and sync after a change (`sync.watch`), after this quiet period.
    pub watch: Option<Duration>,
    /// Sync this often whatever happened (`sync.intervalMinutes`; `None` for 0).
    pub every: Option<Duration>,
}

impl WatchPlan {
    /// The plan `service`'s settings describe.
    pub fn of(service: &MemoryService) -> WatchPlan {
        let settings: &ResolvedMemorySearch = service.settings();
        WatchPlan {
            watch: settings
                .watch
                .then(|| Duration::from_millis(settings.watch_debounce_ms)),
            every: (settings.sync_interval_minutes > 0)
                .then(|| Duration::from_secs(u64::from(settings.sync_interval_minutes) * 60)),
        }
    }
}

/// Syncs once, then as `plan` says until `cancel` fires (at once when it says nothing more).
pub async fn run(
    service: Arc<MemoryService>,
    plan: WatchPlan,
    cancel: CancellationToken,
    progress: ProgressSender,
) {
    // Polling without watching only to see the interval come round.
    let poll = match (plan.watch, plan.every) {
        (Some(_), _) => Duration::from_millis(POLL_INTERVAL_MS),
        (None, Some(every)) => every,
        (None, None) => {
            sync_now(&service, &progress).await;
            return;
        }
    };
    // Fingerprint first: a file changed while the first sync runs is then seen as a change, never missed.
    let mut seen = current_fingerprint(&service).await;
    sync_now(&service, &progress).await;
    let mut next_periodic = plan.every.map(|every| tokio::time::Instant::now() + every);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(poll) => {}
        }
        if next_periodic.is_some_and(|at| tokio::time::Instant::now() >= at) {
            seen = current_fingerprint(&service).await;
            sync_now(&service, &progress).await;
            next_periodic = plan.every.map(|every| tokio::time::Instant::now() + every);
            continue;
        }
        let Some(debounce) = plan.watch else {
            continue;
        };
        let now = current_fingerprint(&service).await;
        if now == seen {
            continue;
        }
        // Wait for a quiet period: every further change restarts the debounce.
        seen = now;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(debounce) => {}
            }
            let again = current_fingerprint(&service).await;
            if again == seen {
                break;
            }
            seen = again;
        }
        sync_now(&service, &progress).await;
    }
}
