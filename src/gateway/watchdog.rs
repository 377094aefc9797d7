//! The gateway's answer to systemd's watchdog: which parts must answer for the
//! process to count as alive (the runtime runs a task, the store serves a read, the
//! lane gate's counters can be read), handed to `system::watchdog`'s pinger. A read
//! only: the check writes nothing, so an idle appliance does not wear its SD card.

use std::sync::Arc;

use crate::system::notify::NotifySocket;
use crate::system::watchdog::{self, LivenessCheck, WatchdogRequest};

use super::state::GatewayState;

/// A meta key that is never written: reading it walks the store's read path.
const LIVENESS_META_KEY: &str = "watchdog.liveness";

/// Starts the pinger when systemd asked for one; logs what it found either way.
pub(super) fn spawn(state: &Arc<GatewayState>) {
    let request = match watchdog::request_from_env() {
        Ok(request) => request,
        Err(e) => {
            log::warn!("watchdog: ignored: {e}");
            return;
        }
    };
    let (Some(interval), Some(socket)) = (request.ping_interval(), NotifySocket::from_env()) else {
        if request != WatchdogRequest::NotRequested {
            log::info!("watchdog: {}", request.describe());
        }
        return;
    };
    log::info!(
        "watchdog: {}; the check: runtime, store, lanes",
        request.describe()
    );
    let state = state.clone();
    let check: LivenessCheck = Box::new(move || {
        let state = state.clone();
        Box::pin(async move { liveness(&state).await })
    });
    tokio::spawn(watchdog::keep_alive(socket, interval, check));
}

async fn liveness(state: &GatewayState) -> Result<(), String> {
    watchdog::runtime_answers().await?;
    let store = &state.services.store;
    store
        .run_blocking(|| store.meta(LIVENESS_META_KEY))
        .map_err(|e| format!("the store does not answer: {e}"))?;
    // Takes the gate's lock: a deadlocked lane gate hangs the check, and the pings stop.
    let _ = state.services.runs.gate().usage();
    Ok(())
}
