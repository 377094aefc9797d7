//! The gateway's `SessionRunner` for the `sessions_send` tool: a sent
//! message starts a run in the target session like `chat.send` does (every
//! `chat` reader sees it), in the subagent lane so it never waits on its
//! caller's slot; the tool may then wait for the run's outcome.

use std::time::Duration;

use crate::agent::runs::RunOutcome;
use crate::agent::turn::TurnSpec;
use crate::queue::LaneKind;
use crate::tools::sessions_send::{SessionRunner, SessionSend};

use super::runs::{start_in_lane, RunOrigin};
use super::state::GatewayState;

/// How `sessions_send` starts and awaits runs: like `chat.send` (every
/// `chat` reader sees the run), in the subagent lane.
pub struct GatewaySessionRunner {
    state: std::sync::Weak<GatewayState>,
}

impl GatewaySessionRunner {
    pub fn new(state: std::sync::Weak<GatewayState>) -> Self {
        GatewaySessionRunner { state }
    }
}

impl SessionRunner for GatewaySessionRunner {
    fn start(&self, send: SessionSend) -> Result<String, String> {
        let state = self
            .state
            .upgrade()
            .ok_or_else(|| "the gateway is shutting down".to_string())?;
        let timeout_ms = crate::channels::hub::run_timeout_ms(&state.config());
        let run_id = uuid::Uuid::new_v4().to_string();
        let spec = TurnSpec {
            run_id: run_id.clone(),
            agent_id: send.agent_id,
            session_key: send.session_key,
            message: send.message,
            timeout_ms,
            model_override: None,
            extra_system_prompt: Some(send.extra_system_prompt),
            label: None,
            channel: None,
        };
        start_in_lane(&state, spec, RunOrigin::default(), LaneKind::Subagent)
            .map_err(|e| e.message)?;
        Ok(run_id)
    }

    fn wait<'a>(
        &'a self,
        run_id: &'a str,
        timeout: Duration,
    ) -> crate::agent::provider::BoxFuture<'a, Option<RunOutcome>> {
        Box::pin(async move {
            let state = self.state.upgrade()?;
            let runs = state.runs.clone();
            drop(state);
            runs.wait(run_id, timeout).await
        })
    }
}
