//! Keeps the index fresh: one sync when the watcher starts, then a poll of the memory files' size and
//! modification time; a change starts a quiet period (the debounce, 1,500 ms by default) and the sync runs
//! once nothing has changed for that long. Polling (no inotify) keeps it portable and bounded: one stat per
//! memory file per poll, one sync at a time, on the blocking pool.
//!
//! This file must not index by itself; it only decides when `MemoryService::sync` runs.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use super::MemoryService;

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

/// One sync on the blocking pool; failures are logged.
pub async fn sync_now(service: &Arc<MemoryService>) {
    let service = Arc::clone(service);
    let outcome = tokio::task::spawn_blocking(move || service.sync(false, &mut |_| {})).await;
    match outcome {
        Ok(Ok(report)) => log::debug!("memory: sync done: {report:?}"),
        Ok(Err(error)) => log::warn!("memory: sync failed: {error}"),
        Err(error) => log::warn!("memory: sync task failed: {error}"),
    }
}

async fn current_fingerprint(service: &Arc<MemoryService>) -> Vec<(String, u64, u128)> {
    let service = Arc::clone(service);
    tokio::task::spawn_blocking(move || fingerprint(&service))
        .await
        .unwrap_or_default()
}

/// Syncs once, then watches until `cancel` fires.
pub async fn run(service: Arc<MemoryService>, debounce: Duration, cancel: CancellationToken) {
    let poll = Duration::from_millis(POLL_INTERVAL_MS);
    // Fingerprint first: a file changed while the first sync runs is then seen as a change, never missed.
    let mut seen = current_fingerprint(&service).await;
    sync_now(&service).await;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(poll) => {}
        }
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
        sync_now(&service).await;
    }
}
