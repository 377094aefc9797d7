//! The memory index's progress for the gateway's clients: every step of a
//! sync the memory watchers run (`memory::watch::IndexProgress`) goes out as
//! the `pincer.memory.index.progress` event, to operators that may read.
//! OpenClaw's gateway has no such event (its memory indexing reports to its
//! own CLI only), so the name is in pincer's own namespace; payload:
//! `{ agentId, filesDone, filesTotal, chunksWritten, done, error? }`.
//! A slow client may miss steps (the channel keeps the last
//! `PROGRESS_CAPACITY`, the connection drops events it cannot take), never
//! the gateway's work.

use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use super::clients::BroadcastOptions;
use super::scopes;
use super::state::GatewayState;
use crate::memory::watch::IndexProgress;

/// The event's name.
pub const MEMORY_INDEX_PROGRESS_EVENT: &str = "pincer.memory.index.progress";

/// The event's payload for one step.
pub fn payload(progress: &IndexProgress) -> Value {
    let mut payload = json!({
        "agentId": progress.agent_id,
        "filesDone": progress.files_done,
        "filesTotal": progress.files_total,
        "chunksWritten": progress.chunks_written,
        "done": progress.done,
    });
    if let Some(error) = &progress.error {
        payload["error"] = json!(error);
    }
    payload
}

/// Forwards progress until shutdown. Subscribes now, so call it before the
/// watchers start.
pub fn spawn(state: &Arc<GatewayState>) {
    let mut progress = state.services.memory.subscribe_progress();
    let state = Arc::clone(state);
    tokio::spawn(async move {
        loop {
            let step = tokio::select! {
                step = progress.recv() => step,
                _ = state.shutdown.cancelled() => break,
            };
            match step {
                Ok(step) => {
                    state.clients.broadcast(
                        MEMORY_INDEX_PROGRESS_EVENT,
                        &payload(&step),
                        BroadcastOptions {
                            drop_if_slow: true,
                            scope: Some(scopes::READ),
                            state_version: None,
                        },
                    );
                }
                Err(RecvError::Lagged(missed)) => {
                    log::debug!("memory progress: {missed} steps skipped");
                }
                Err(RecvError::Closed) => break,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_names_fields_in_camel_case_and_adds_error_only_when_failed() {
        let mut step = IndexProgress {
            agent_id: "main".into(),
            files_done: 2,
            files_total: 5,
            chunks_written: 7,
            done: false,
            error: None,
        };
        assert_eq!(
            payload(&step),
            json!({"agentId": "main", "filesDone": 2, "filesTotal": 5, "chunksWritten": 7, "done": false})
        );
        step.done = true;
        step.error = Some("disabled".into());
        assert_eq!(payload(&step)["error"], "disabled");
    }
}
