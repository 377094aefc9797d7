//! `last-heartbeat`, `set-heartbeats` and `wake`, plus the gateway's heartbeat host: heartbeat turns run
//! quietly in the agent's main session (no `chat` events), and a reply that is not an acknowledgement is
//! delivered to the session's readers as a `chat` final event (`deliver_heartbeat`, where channel delivery
//! joins once the channels hub lands) and announced with a `heartbeat` event.
//!
//! Handlers only translate params and results; the rules live in `crate::heartbeat`.

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use serde_json::{json, Value};

use crate::agent::{RunStartError, TurnOverrides, TurnSpec};
use crate::channels::deliver::ChannelDestination;
use crate::config::Config;
use crate::gateway::clients::BroadcastOptions;
use crate::gateway::frames::ErrorShape;
use crate::gateway::launcher::launch_collecting;
use crate::gateway::runs::RunPlacement;
use crate::gateway::scopes;
use crate::gateway::state::GatewayState;
use crate::heartbeat::runner::{
    HeartbeatDelivery, HeartbeatDeliveryError, HeartbeatTurn, HeartbeatTurnFuture,
};
use crate::heartbeat::{HeartbeatHost, HeartbeatRunner};
use crate::store::Store;

use super::params::Params;

/// The heartbeat runner's view of the gateway.
pub struct GatewayHeartbeatHost {
    pub state: Weak<GatewayState>,
    pub store: Store,
}

impl HeartbeatHost for GatewayHeartbeatHost {
    fn config(&self) -> Arc<Config> {
        self.state
            .upgrade()
            .map_or_else(|| Arc::new(Config::default()), |s| s.config())
    }

    fn store(&self) -> Store {
        self.store.clone()
    }

    fn workspace(&self, agent_id: &str) -> PathBuf {
        match self.state.upgrade() {
            Some(state) => state.workspace_for(&state.config(), agent_id),
            None => PathBuf::new(),
        }
    }

    fn run(
        &self,
        spec: TurnSpec,
        overrides: TurnOverrides,
    ) -> Result<HeartbeatTurnFuture, RunStartError> {
        let state = self.state.upgrade().ok_or(RunStartError::ShuttingDown)?;
        let placement = RunPlacement {
            quiet: true,
            ..RunPlacement::default()
        };
        let finished = launch_collecting(&state, spec, placement, None, overrides)?;
        Ok(Box::pin(async move {
            let (outcome, reasoning) = finished.await;
            HeartbeatTurn { outcome, reasoning }
        }))
    }

    fn deliver(&self, delivery: &HeartbeatDelivery) -> Result<(), HeartbeatDeliveryError> {
        let state = self
            .state
            .upgrade()
            .ok_or(HeartbeatDeliveryError::ShuttingDown)?;
        deliver_heartbeat(&state, delivery);
        Ok(())
    }

    fn min_every_ms(&self) -> u64 {
        self.state
            .upgrade()
            .map_or(0, |s| s.limits.heartbeat_min_every_ms)
    }

    fn publish(&self, event: &Value) {
        if let Some(state) = self.state.upgrade() {
            state.clients.broadcast(
                "heartbeat",
                event,
                BroadcastOptions {
                    drop_if_slow: true,
                    scope: Some(scopes::READ),
                    state_version: None,
                },
            );
        }
    }
}

/// Shows a heartbeat message to the session's readers (its turn is already in the transcript) and sends
/// it to its chat target when it has one.
pub fn deliver_heartbeat(state: &Arc<GatewayState>, delivery: &HeartbeatDelivery) {
    let target = &delivery.target;
    let destination = ChannelDestination::with_default_to(
        &state.config(),
        target.channel.as_deref(),
        target.to.as_deref(),
        target.account_id.as_deref(),
    );
    match destination {
        Some(destination) => crate::channels::deliver::spawn_send_to_channel(
            &crate::gateway::webchat::hub_of(state),
            &delivery.session_key,
            destination,
            delivery.text.clone(),
        ),
        None => {
            if let Some(channel) = target.channel.as_deref().filter(|c| *c != "webchat") {
                log::info!(
                    "heartbeat {}: no recipient on {channel} yet; shown to the session's readers only",
                    delivery.agent_id
                );
            }
        }
    }
    crate::gateway::launcher::broadcast_final(
        state,
        &delivery.agent_id,
        &delivery.session_key,
        &delivery.text,
    );
}

fn runner(state: &GatewayState) -> &Arc<HeartbeatRunner> {
    &state.services.heartbeat
}

/// `last-heartbeat`: the newest heartbeat event, or null.
pub fn last(state: &GatewayState) -> Result<Value, ErrorShape> {
    Ok(runner(state).last_event().unwrap_or(Value::Null))
}

/// `set-heartbeats {enabled}`.
pub fn set(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("set-heartbeats", params)?;
    let enabled = p.opt_bool("enabled")?.ok_or_else(|| {
        ErrorShape::invalid("invalid set-heartbeats params: enabled (boolean) is required")
    })?;
    runner(state).set_enabled(enabled);
    Ok(json!({"ok": true, "enabled": enabled}))
}

/// `wake {mode: now|next-heartbeat, text}`: queues `text` for the next heartbeat; `now` runs it (and the
/// cron timer's check) immediately.
pub fn wake(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("wake", params)?;
    let now = match p.opt_str("mode")? {
        Some("now") => true,
        Some("next-heartbeat") | None => false,
        Some(other) => {
            return Err(ErrorShape::invalid(format!(
                "invalid wake params: mode {other:?} must be \"now\" or \"next-heartbeat\""
            )))
        }
    };
    let text = p.opt_str("text")?;
    wake_both(state, now, text);
    Ok(json!({"ok": true}))
}

/// The heartbeat and cron sides of a wake (also used by the `cron` tool).
pub fn wake_both(state: &GatewayState, now: bool, text: Option<&str>) {
    state.services.heartbeat.wake(now, text);
    if now {
        state.services.cron.wake();
    }
}
