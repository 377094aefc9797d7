//! The durable inbox: every channel message the hub accepts is written to
//! the store (meta keys `inbox/<time>-<uuid>`, the event as JSON) before the
//! adapter is told it was accepted — Telegram then advances its update
//! offset, Discord its sequence — and removed once its turn has ended (or it
//! needed none). Whatever is still there at start-up was accepted but never
//! answered (the gateway died) and is handed to the message path again.
//! A record goes only after its answer was sent, so a crash between the
//! platform taking the answer and the record's removal answers the message
//! again after the restart: at least once, because an accepted message must
//! never be lost and no platform send can be made atomic with a store write.
//! When a record goes, so do the files its message downloaded (inside the
//! media root only); a replayed message whose file is gone gets a note.
//!
//! Web chat messages (`chat.send`) get records of their own
//! (`webchat-inbox/…`, a [`WebchatRecord`]) written before the `res`.
//!
//! This file only keeps the records; the hub decides when they go.

use super::InboundEvent;
use crate::store::{Store, StoreError};

/// Meta key prefix of the channel messages' records.
pub const RECORD_PREFIX: &str = "inbox/";
/// Meta key prefix of the web chat's records.
const WEBCHAT_PREFIX: &str = "webchat-inbox/";
/// Most records replayed at one start (older ones first): a bound on the
/// work a restart can cause, far above what a home gateway has in flight.
pub const MAX_REPLAYED: usize = 1_000;

/// A web chat message accepted by `chat.send`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WebchatRecord {
    pub agent_id: String,
    pub session_key: String,
    /// The `chat.send` idempotency key (the run id).
    pub run_id: String,
    /// The message as it will be queued (already finalised).
    pub text: String,
    pub timeout_ms: u64,
}

/// Why a message's record was not written.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    #[error("cannot encode the message: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("inbox write failed: {0}")]
    WriteTask(#[from] tokio::task::JoinError),
    #[error("cannot keep the message: {0}")]
    Store(#[from] StoreError),
}

fn new_key(prefix: &str) -> String {
    format!(
        "{prefix}{:016x}-{}",
        crate::system::clock::now_ms(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Writes a web chat message's record (blocks on the store); its key is
/// returned for [`forget`].
pub fn record_webchat(store: &Store, record: &WebchatRecord) -> Result<String, InboxError> {
    let (key, bytes) = webchat_record(record)?;
    store.put_meta(&key, &bytes)?;
    Ok(key)
}

/// A web chat message's record as [`record_webchat`] writes it (its meta key
/// and value), for a caller that writes it in a commit of its own.
pub fn webchat_record(record: &WebchatRecord) -> Result<(String, Vec<u8>), InboxError> {
    Ok((new_key(WEBCHAT_PREFIX), serde_json::to_vec(record)?))
}

/// Writes the event's record; its key is returned for [`forget`].
pub async fn record(store: &Store, event: &InboundEvent) -> Result<String, InboxError> {
    let bytes = serde_json::to_vec(event)?;
    let key = new_key(RECORD_PREFIX);
    let store = store.clone();
    let record_key = key.clone();
    tokio::task::spawn_blocking(move || store.put_meta(&record_key, &bytes)).await??;
    Ok(key)
}

/// The run id of a channel message's turn. A message kept in the inbox gets
/// the same id each time it runs (after a crash, the replayed run finds the
/// user turn its first run recorded and does not record it twice); one
/// record answered in several sessions (broadcast groups) gets one id per
/// session.
pub fn run_id_for(channel: &str, session_key: &str, records: &[String]) -> String {
    use sha2::{Digest, Sha256};
    if records.is_empty() {
        return format!("{channel}-{}", uuid::Uuid::new_v4());
    }
    let mut hash = Sha256::new();
    for key in records {
        hash.update(key.as_bytes());
        hash.update([0]);
    }
    hash.update(session_key.as_bytes());
    let digest = hash.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{channel}-{hex}")
}

/// Removes records and their messages' downloaded files (in the
/// background: callers may be in a `Drop`).
pub fn forget(store: &Store, keys: Vec<String>) {
    if keys.is_empty() {
        return;
    }
    let store = store.clone();
    let remove = move || {
        let root = super::media::media_root();
        for key in keys {
            // Only channel messages download files.
            let recorded = key
                .starts_with(RECORD_PREFIX)
                .then(|| store.meta(&key).ok().flatten())
                .flatten();
            if let Some(event) = recorded
                .as_deref()
                .and_then(|bytes| serde_json::from_slice::<InboundEvent>(bytes).ok())
            {
                super::media::remove_files(&event.message.media, &root);
            }
            if let Err(e) = store.delete_meta(&key) {
                log::warn!("cannot remove inbox record {key}: {e}");
            }
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn_blocking(remove);
        }
        Err(_) => remove(),
    }
}

/// The records left from before this start, oldest first. Unreadable ones
/// are logged and removed.
pub async fn pending(store: &Store) -> Vec<(String, InboundEvent)> {
    let mut events = pending_of::<InboundEvent>(store, RECORD_PREFIX).await;
    for (_, event) in &mut events {
        // Files cleaned up since (or lost with a temp dir) become notes.
        super::media::drop_missing(&mut event.message);
    }
    events
}

/// The web chat records left from before this start, oldest first.
pub async fn pending_webchat(store: &Store) -> Vec<(String, WebchatRecord)> {
    pending_of(store, WEBCHAT_PREFIX).await
}

async fn pending_of<T: serde::de::DeserializeOwned>(
    store: &Store,
    prefix: &'static str,
) -> Vec<(String, T)> {
    let reader = store.clone();
    let listed = tokio::task::spawn_blocking(move || reader.meta_with_prefix(prefix, MAX_REPLAYED))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
    let records = match listed {
        Ok(records) => records,
        Err(error) => {
            log::warn!("cannot read the inbox: {error}");
            return Vec::new();
        }
    };
    let mut events = Vec::new();
    for (key, bytes) in records {
        match serde_json::from_slice::<T>(&bytes) {
            Ok(event) => events.push((key, event)),
            Err(error) => {
                log::warn!("inbox record {key} is unreadable ({error}); removed");
                forget(store, vec![key]);
            }
        }
    }
    events
}
