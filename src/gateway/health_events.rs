//! The `health` event: sent to clients when a figure of the `HealthSummary`
//! changed (a channel account connected or failed, a message came in or
//! went out, a heartbeat ran, a run started or ended, the memory index
//! synced) — at most once per [`HEALTH_EVENT_MIN_INTERVAL_MS`] — and at
//! least every [`HEALTH_REFRESH_INTERVAL_MS`], upstream's refresh cadence.
//!
//! The components say "changed" through `system::status`; this file reads
//! the figures again and sends them only when they differ from the last
//! event. It must not compute figures itself (`methods::health` does).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::clients::BroadcastOptions;
use super::methods::health;
use super::state::GatewayState;

/// Upstream's `HEALTH_REFRESH_INTERVAL_MS`: a `health` event at least this often.
pub const HEALTH_REFRESH_INTERVAL_MS: u64 = 60_000;
/// Changes closer together than this are sent as one event.
pub const HEALTH_EVENT_MIN_INTERVAL_MS: u64 = 1_000;

/// The summary without what moves by itself (`ts`, `durationMs`, session
/// ages), so equal figures compare equal.
fn fingerprint(summary: &Value) -> Value {
    match summary {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !matches!(key.as_str(), "ts" | "durationMs" | "age"))
                .map(|(key, value)| (key.clone(), fingerprint(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(fingerprint).collect()),
        other => other.clone(),
    }
}

/// Sends `summary` as the `health` event with a new `stateVersion.health`.
fn broadcast(state: &GatewayState, summary: &Value) {
    let version = state.clients.bump_health();
    state.clients.broadcast(
        "health",
        summary,
        BroadcastOptions {
            drop_if_slow: true,
            scope: None,
            state_version: Some(version),
        },
    );
}

/// Runs until shutdown: waits for a change (or the refresh interval), lets
/// changes settle for the minimum interval, then sends the summary if it
/// differs from the last one sent (always on a refresh).
pub fn spawn(state: &Arc<GatewayState>) {
    let state = Arc::clone(state);
    let mut changes = crate::system::status::subscribe();
    tokio::spawn(async move {
        let mut last_sent = fingerprint(&health::summary(&state));
        loop {
            let refresh = tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    false
                }
                _ = tokio::time::sleep(Duration::from_millis(HEALTH_REFRESH_INTERVAL_MS)) => true,
                _ = state.shutdown.cancelled() => break,
            };
            if !refresh {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(HEALTH_EVENT_MIN_INTERVAL_MS)) => {}
                    _ = state.shutdown.cancelled() => break,
                }
                changes.mark_unchanged();
            }
            let summary = health::summary(&state);
            let seen = fingerprint(&summary);
            if refresh || seen != last_sent {
                broadcast(&state, &summary);
                last_sent = seen;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fingerprint_ignores_clocks_but_not_figures() {
        let a = json!({"ts": 1, "durationMs": 2, "sessions": {"recent": [{"key": "k", "age": 5}]},
                       "channels": {"telegram": {"lastInboundAt": 10}}});
        let b = json!({"ts": 9, "durationMs": 7, "sessions": {"recent": [{"key": "k", "age": 50}]},
                       "channels": {"telegram": {"lastInboundAt": 10}}});
        let c = json!({"ts": 9, "durationMs": 7, "sessions": {"recent": [{"key": "k", "age": 50}]},
                       "channels": {"telegram": {"lastInboundAt": 11}}});
        assert_eq!(fingerprint(&a), fingerprint(&b));
        assert_ne!(fingerprint(&b), fingerprint(&c));
    }
}
