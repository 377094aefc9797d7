//! The durable inbox: every channel message the hub accepts is written to
//! the store (meta keys `inbox/<time>-<uuid>`, the event as JSON) before the
//! adapter is told it was accepted — Telegram then advances its update
//! offset, Discord its sequence — and removed once its turn has ended (or it
//! needed none). Whatever is still there at start-up was accepted but never
//! answered (the gateway died) and is handed to the message path again.
//! When a record goes, so do the files its message downloaded (inside the
//! media root only); a replayed message whose file is gone gets a note.
//!
//! This file only keeps the records; the hub decides when they go.

use std::sync::Arc;

use super::InboundEvent;
use crate::gateway::state::GatewayState;

/// Meta key prefix of the records.
const PREFIX: &str = "inbox/";
/// Most records replayed at one start (older ones first): a bound on the
/// work a restart can cause, far above what a home gateway has in flight.
pub const MAX_REPLAYED: usize = 1_000;

/// Writes the event's record; its key is returned for [`forget`].
pub async fn record(state: &Arc<GatewayState>, event: &InboundEvent) -> Result<String, String> {
    let bytes = serde_json::to_vec(event).map_err(|e| format!("cannot encode the message: {e}"))?;
    let key = format!(
        "{PREFIX}{:016x}-{}",
        crate::system::clock::now_ms(),
        uuid::Uuid::new_v4().simple()
    );
    let store = state.store.clone();
    let record_key = key.clone();
    tokio::task::spawn_blocking(move || store.put_meta(&record_key, &bytes))
        .await
        .map_err(|e| format!("inbox write failed: {e}"))?
        .map_err(|e| format!("cannot keep the message: {e}"))?;
    Ok(key)
}

/// Removes records and their messages' downloaded files (in the
/// background: callers may be in a `Drop`).
pub fn forget(state: &Arc<GatewayState>, keys: Vec<String>) {
    if keys.is_empty() {
        return;
    }
    let store = state.store.clone();
    let remove = move || {
        let root = super::media::media_root();
        for key in keys {
            let recorded = store.meta(&key).ok().flatten();
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
pub async fn pending(state: &Arc<GatewayState>) -> Vec<(String, InboundEvent)> {
    let store = state.store.clone();
    let listed = tokio::task::spawn_blocking(move || store.meta_with_prefix(PREFIX, MAX_REPLAYED))
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
        match serde_json::from_slice::<InboundEvent>(&bytes) {
            Ok(mut event) => {
                // Files cleaned up since (or lost with a temp dir) become notes.
                super::media::drop_missing(&mut event.message);
                events.push((key, event));
            }
            Err(error) => {
                log::warn!("inbox record {key} is unreadable ({error}); removed");
                forget(state, vec![key]);
            }
        }
    }
    events
}
