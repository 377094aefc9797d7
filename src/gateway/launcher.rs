//! The gateway's side of background agent work: it starts sub-agent turns on the subagent lane (each with
//! the steer inbox the registry gives it) and hands back their outcome, aborts them, and delivers announcements into a session (`announce_to_session`, the
//! one place that decides how a message enters a session from inside: a turn through the command queue,
//! see `channels::deliver`). It also gives tools the cron service.
//!
//! It only adapts `runs::start_placed`; limits and records belong to `agent::subagents`.

use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use crate::agent::{
    AnnounceError, OutcomeFuture, RunEvent, RunLauncher, RunOutcome, RunStartError, RunStatus,
    TurnOverrides, TurnSpec,
};
use crate::cron::CronService;
use crate::queue::{LaneKind, SteerInbox};
use crate::system::clock::now_ms;

use super::runs::{RunOrigin, RunPlacement};
use super::state::GatewayState;

/// Starts and stops runs for the sub-agent registry.
pub struct GatewayLauncher {
    pub state: Weak<GatewayState>,
}

fn lost_outcome(spec: &TurnSpec, reason: &str) -> RunOutcome {
    let mut outcome =
        RunOutcome::without_turn(&spec.run_id, &spec.session_key, RunStatus::Error, now_ms());
    outcome.error = Some(reason.to_string());
    outcome
}

/// Starts `spec` on `lane`; the future resolves with its outcome.
pub fn launch_on(
    state: &Arc<GatewayState>,
    spec: TurnSpec,
    placement: RunPlacement,
) -> Result<OutcomeFuture, RunStartError> {
    launch_steerable(state, spec, placement, None)
}

/// [`launch_on`], with `steer` as the run's steer inbox when given (sub-agent turns).
pub fn launch_steerable(
    state: &Arc<GatewayState>,
    spec: TurnSpec,
    placement: RunPlacement,
    steer: Option<SteerInbox>,
) -> Result<OutcomeFuture, RunStartError> {
    let finished = launch_collecting(state, spec, placement, steer, TurnOverrides::default())?;
    Ok(Box::pin(async move { finished.await.0 }))
}

/// A run's outcome with its reasoning block (reasoning level `on`), when it produced one.
pub type CollectedFuture = BoxFuture<'static, (RunOutcome, Option<String>)>;

/// Starts `spec` with `overrides` (and `steer` as its steer inbox when given); the future resolves with the
/// outcome and the reasoning block the run produced.
pub fn launch_collecting(
    state: &Arc<GatewayState>,
    spec: TurnSpec,
    placement: RunPlacement,
    steer: Option<SteerInbox>,
    overrides: TurnOverrides,
) -> Result<CollectedFuture, RunStartError> {
    let (tap, mut events) = mpsc::channel(64);
    let origin = RunOrigin {
        tap: Some(tap),
        ..RunOrigin::default()
    };
    let mut prepared = state.services.runtime.prepare(spec.clone(), origin)?;
    prepared.set_placement(placement);
    prepared.set_overrides(overrides);
    if let Some(inbox) = steer {
        prepared.set_steer(inbox);
    }
    state.tasks.spawn(prepared.execute());
    Ok(Box::pin(async move {
        let mut reasoning = None;
        while let Some(event) = events.recv().await {
            match event {
                RunEvent::ReasoningBlock { text } => reasoning = Some(text),
                RunEvent::Finished(outcome) => return (*outcome, reasoning),
                _ => {}
            }
        }
        (
            lost_outcome(&spec, "the run ended without an outcome"),
            None,
        )
    }))
}

/// Delivers `message` into a session as a new turn of `agent_id` through the command queue (the
/// session's queue mode applies when it is busy); `chat` events go to every reader, the turn lands in
/// the transcript, and the answer goes to the session's last chat target when it has one.
pub fn announce_to_session(
    state: &Arc<GatewayState>,
    agent_id: &str,
    session_key: &str,
    message: String,
) -> Result<(), AnnounceError> {
    let hub = super::webchat::hub_of(state);
    crate::channels::deliver::enqueue_announcement(&hub, agent_id, session_key, message)
}

impl RunLauncher for GatewayLauncher {
    fn launch(
        &self,
        spec: TurnSpec,
        lane: LaneKind,
        steer: SteerInbox,
    ) -> Result<OutcomeFuture, RunStartError> {
        let state = self.state.upgrade().ok_or(RunStartError::ShuttingDown)?;
        let placement = RunPlacement { lane, quiet: false };
        launch_steerable(&state, spec, placement, Some(steer))
    }

    fn abort_run(&self, run_id: &str) -> bool {
        self.state
            .upgrade()
            .is_some_and(|state| state.services.runs.abort(run_id))
    }

    fn announce(
        &self,
        agent_id: &str,
        session_key: &str,
        message: String,
    ) -> Result<(), AnnounceError> {
        let state = self.state.upgrade().ok_or(AnnounceError::ShuttingDown)?;
        announce_to_session(&state, agent_id, session_key, message)
    }
}

/// The cron service for the `cron` tool, once the gateway has started it.
pub struct GatewayCron {
    pub state: Weak<GatewayState>,
}

impl crate::tools::cron::CronAccess for GatewayCron {
    fn service(&self) -> Option<Arc<dyn crate::tools::cron::CronControl>> {
        let service: Arc<CronService> = self.state.upgrade()?.services.cron.clone();
        Some(service)
    }

    fn wake(&self, now: bool, text: Option<&str>) -> Result<(), crate::tools::cron::WakeError> {
        let state = self
            .state
            .upgrade()
            .ok_or(crate::tools::cron::WakeError::ShuttingDown)?;
        super::methods::heartbeat::wake_both(&state, now, text);
        Ok(())
    }
}

/// Where backgrounded `exec` runs announce their exit (`tools.exec.notifyOnExit`): the line is
/// queued as a system event for the next heartbeat and a heartbeat is asked for at once, as
/// upstream does. pincer keeps one system-event queue, which the heartbeat delivers to the
/// heartbeat agents' sessions; the run's own session key is logged with it.
pub struct GatewayExecExits {
    pub state: Weak<GatewayState>,
}

impl crate::tools::process::ExecExitNotifier for GatewayExecExits {
    fn exec_exited(&self, session_key: &str, text: &str) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        log::info!("exec: background run of {session_key} ended: {text}");
        state.services.heartbeat.wake(true, Some(text));
    }
}

/// Restart recovery of the sub-agent registry, in the background once the gateway is ready.
pub fn reconcile_subagents(state: &Arc<GatewayState>) {
    let registry = state.services.subagents.clone();
    state.tasks.spawn(async move {
        match tokio::task::block_in_place(|| registry.reconcile()) {
            Ok(report) if report != Default::default() => log::info!(
                "subagents: after restart {} interrupted run(s) failed, {} announced, {} orphan(s) removed",
                report.failed,
                report.announced,
                report.pruned
            ),
            Ok(_) => {}
            Err(e) => log::warn!("subagents: restart reconciliation failed: {e}"),
        }
    });
}

/// Records `text` as an assistant message in a session's transcript (creating the session if needed)
/// and shows it to the session's readers as a `chat` final event; with a `destination` it is also sent to
/// that chat. Blocks on the store: call from a blocking context.
pub fn deliver_to_session_readers(
    state: &Arc<GatewayState>,
    agent_id: &str,
    session_key: &str,
    text: &str,
    destination: Option<crate::channels::deliver::ChannelDestination>,
) {
    let now = now_ms();
    let recorded = (|| -> Result<(), crate::store::StoreError> {
        let entry = crate::agent::SessionIndex::new(state.services.store.clone())
            .ensure(session_key, now)?;
        state.services.store.append_transcript(
            &entry.session_id,
            &crate::store::TranscriptEntry {
                role: "assistant".into(),
                text: text.to_string(),
                timestamp_ms: now,
                run_id: None,
                stop_reason: None,
                input_tokens: None,
                output_tokens: None,
                extra_json: None,
            },
        )?;
        Ok(())
    })();
    if let Err(e) = recorded {
        log::warn!("cannot record a delivery in {session_key}: {e}");
    }
    if let Some(destination) = destination {
        crate::channels::deliver::spawn_send_to_channel(
            &super::webchat::hub_of(state),
            session_key,
            destination,
            text.to_string(),
        );
    }
    broadcast_final(state, agent_id, session_key, text);
}

/// A `chat` final event carrying `text` for a session's readers (no run behind it).
pub fn broadcast_final(state: &GatewayState, agent_id: &str, session_key: &str, text: &str) {
    let payload = serde_json::json!({
        "runId": format!("delivery-{}", uuid::Uuid::new_v4()),
        "sessionKey": session_key,
        "seq": 1,
        "state": "final",
        "agentId": agent_id,
        "message": {"role": "assistant", "content": [{"type": "text", "text": text}],
                    "timestamp": now_ms()},
    });
    state.clients.broadcast(
        "chat",
        &payload,
        super::clients::BroadcastOptions {
            drop_if_slow: false,
            scope: Some(super::scopes::READ),
            state_version: None,
        },
    );
}
