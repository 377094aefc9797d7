//! Hot reload: a tokio task that polls the config file once a second
//! (modification time, size and inode, so a file replaced by rename is
//! seen), waits until the file has been quiet for `gateway.reload.debounceMs`,
//! re-reads it, and reports the result on a bounded channel.
//!
//! The task never applies anything: the caller keeps its running config on
//! `Rejected` and decides what to restart on `Applied`. It stops when the
//! receiver is dropped.
//!
//! `gateway.reload.mode` is read from each new version of the file, as
//! upstream does (the `gateway.reload` section itself needs no restart): with
//! `off` a change is reported as `Ignored` and becomes the baseline, so
//! turning reload back on later reports only what changed after that.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;

use super::error::ConfigError;
use super::load::{loaded_from_text, sha256_hex, LoadedConfig};
use super::patch::{changed_paths, restart_required};
use super::schema::ReloadMode;

/// How often the file's metadata is checked.
pub const POLL_INTERVAL_MS: u64 = 1_000;
/// Events buffered before the watcher waits for the receiver.
pub const RELOAD_CHANNEL_CAPACITY: usize = 4;

/// What the watcher found after a change to the file.
// Events are rare (one per file edit); boxing the config would only make
// every consumer deref it.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ReloadEvent {
    /// The new file is valid. `restart_required` lists the changed paths
    /// that need a gateway restart (every changed path in `restart` mode).
    Applied {
        loaded: LoadedConfig,
        restart_required: Vec<String>,
    },
    /// The new file is invalid; keep running the previous config.
    Rejected { error: ConfigError },
    /// The new file says `gateway.reload.mode: "off"`: these changed paths
    /// are not applied (they are the baseline of the next change).
    Ignored { changed: Vec<String> },
}

/// Identity of the file's current version, cheap to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

async fn stamp(path: &Path) -> Option<FileStamp> {
    use std::os::unix::fs::MetadataExt;
    let meta = tokio::fs::metadata(path).await.ok()?;
    Some(FileStamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode: meta.ino(),
    })
}

/// Starts watching `path` (which `current` was loaded from). Must be called
/// inside a tokio runtime.
pub fn spawn_watcher(path: PathBuf, current: LoadedConfig) -> mpsc::Receiver<ReloadEvent> {
    let (tx, rx) = mpsc::channel(RELOAD_CHANNEL_CAPACITY);
    tokio::spawn(watch(path, current, tx));
    rx
}

async fn watch(path: PathBuf, mut current: LoadedConfig, tx: mpsc::Sender<ReloadEvent>) {
    // Unknown at start: the first tick re-reads once and, if the content
    // still hashes to `current`, stays quiet. No edit made between loading
    // and spawning is missed.
    let mut last_stamp: Option<FileStamp> = None;
    let mut ticker = tokio::time::interval(Duration::from_millis(POLL_INTERVAL_MS));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if tx.is_closed() {
            return;
        }
        let seen = stamp(&path).await;
        if seen == last_stamp || seen.is_none() {
            // Unchanged, or mid-replacement (missing): look again next tick.
            continue;
        }
        last_stamp = settle(&path, seen, current.config.gateway.reload.debounce_ms).await;
        let Some(event) = reread(&path, &mut current).await else {
            continue;
        };
        if tx.send(event).await.is_err() {
            return;
        }
    }
}

/// Waits until the file's stamp stays the same for one debounce period.
async fn settle(path: &Path, mut seen: Option<FileStamp>, debounce_ms: u64) -> Option<FileStamp> {
    loop {
        tokio::time::sleep(Duration::from_millis(debounce_ms)).await;
        let now = stamp(path).await;
        if now == seen {
            return now;
        }
        seen = now;
    }
}

/// Reads the settled file; `None` when its content is what is running.
async fn reread(path: &Path, current: &mut LoadedConfig) -> Option<ReloadEvent> {
    let raw = match tokio::fs::read_to_string(path).await {
        Ok(raw) => raw,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return None,
        Err(source) => {
            let error = ConfigError::Read {
                path: path.to_path_buf(),
                source,
            };
            return Some(ReloadEvent::Rejected { error });
        }
    };
    if sha256_hex(&raw) == current.hash {
        return None;
    }
    let parsed = loaded_from_text(path, raw);
    match parsed {
        Ok(loaded) => {
            let restart = match loaded.config.gateway.reload.mode {
                ReloadMode::Off => {
                    let changed = changed_paths(&current.config, &loaded.config);
                    *current = loaded;
                    return Some(ReloadEvent::Ignored { changed });
                }
                ReloadMode::Restart => changed_paths(&current.config, &loaded.config),
                ReloadMode::Hybrid | ReloadMode::Hot => {
                    restart_required(&current.config, &loaded.config)
                }
            };
            *current = loaded.clone();
            Some(ReloadEvent::Applied {
                loaded,
                restart_required: restart,
            })
        }
        Err(error) => Some(ReloadEvent::Rejected { error }),
    }
}
