//! The gateway's `SessionRunner` for the `sessions_send` tool: a sent
//! message starts a run in the target session like `chat.send` does (every
//! `chat` reader sees it), in the subagent lane so it never waits on its
//! caller's slot; the tool may then wait for the run's outcome. The
//! agent-to-agent flow's announcement goes to the target session's chat.

use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::agent::{RunStartError, RunStatus, TurnSpec};
use crate::queue::LaneKind;
use crate::tools::sessions_send::{SessionReply, SessionRunStatus};
use crate::tools::sessions_send::{SessionRunner, SessionSend, SessionStartError};

use super::runs::{RunOrigin, RunPlacement};
use super::state::GatewayState;
use crate::channels::deliver::{send_to_channel, ChannelDestination};

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
    fn start(&self, send: SessionSend) -> Result<String, SessionStartError> {
        let state = self
            .state
            .upgrade()
            .ok_or(SessionStartError::ShuttingDown)?;
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
            skill_filter: None,
            interaction: false,
            images: Vec::new(),
        };
        let placement = RunPlacement {
            lane: LaneKind::Subagent,
            quiet: false,
        };
        state
            .services
            .runtime
            .start(spec, RunOrigin::default(), placement)
            .map_err(|e| match e {
                RunStartError::ShuttingDown => SessionStartError::ShuttingDown,
                other => SessionStartError::Refused(other.to_string()),
            })?;
        Ok(run_id)
    }

    fn wait<'a>(
        &'a self,
        run_id: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Option<SessionReply>> {
        Box::pin(async move {
            let state = self.state.upgrade()?;
            let runs = state.services.runs.clone();
            drop(state);
            let outcome = runs.wait(run_id, timeout).await?;
            Some(SessionReply {
                status: match outcome.status {
                    RunStatus::Ok => SessionRunStatus::Ok,
                    RunStatus::Error => SessionRunStatus::Error,
                    RunStatus::Timeout => SessionRunStatus::Timeout,
                    RunStatus::Aborted => SessionRunStatus::Aborted,
                },
                text: outcome.text,
                error: outcome.error,
            })
        })
    }

    fn announce<'a>(
        &'a self,
        session_key: &'a str,
        text: String,
    ) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            let state = self
                .state
                .upgrade()
                .ok_or_else(|| "the gateway is shutting down".to_string())?;
            let destination = tokio::task::block_in_place(|| {
                ChannelDestination::last_route_of(&state.services.store, session_key)
            })
            .or_else(|| destination_of_key(session_key));
            let Some(destination) = destination else {
                return Ok(false);
            };
            let hub = crate::gateway::webchat::hub_of(&state);
            send_to_channel(hub, session_key.to_string(), destination, text)
                .await
                .map_err(|e| e.to_string())?;
            Ok(true)
        })
    }

    fn spawn_flow(&self, flow: BoxFuture<'static, ()>) {
        if let Some(state) = self.state.upgrade() {
            state.tasks.spawn(flow);
        }
    }
}

/// The chat a group or channel session's key names.
fn destination_of_key(session_key: &str) -> Option<ChannelDestination> {
    let chat = crate::routing::session_key::chat_of_key(session_key)?;
    let mut destination = ChannelDestination::new(Some(&chat.channel), Some(&chat.peer), None)?;
    destination.thread_id = chat.thread;
    Some(destination)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_and_channel_keys_name_their_chat() {
        let group =
            destination_of_key("agent:main:telegram:group:-100123:topic:554").expect("group");
        assert_eq!(
            (group.channel.as_str(), group.to.as_str()),
            ("telegram", "-100123")
        );
        assert_eq!(group.thread_id.as_deref(), Some("554"));
        let channel = destination_of_key("agent:ops:discord:channel:42").expect("channel");
        assert_eq!((channel.to.as_str(), channel.thread_id), ("42", None));
    }

    #[test]
    fn direct_main_and_web_chat_keys_name_none() {
        for key in [
            "agent:main:main",
            "agent:main:telegram:direct:7",
            "agent:main:webchat:group:x",
            "agent:main:subagent:1234",
        ] {
            assert_eq!(destination_of_key(key), None, "{key}");
        }
    }
}
