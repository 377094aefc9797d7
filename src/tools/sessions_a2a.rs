//! What follows a `sessions_send` once the target session has answered, as
//! in OpenClaw's agent-to-agent flow: up to `session.agentToAgent.
//! maxPingPongTurns` reply rounds in which the two sessions answer each
//! other (the requester first, each with a system note saying whose turn it
//! is; either ends the rounds by answering exactly `REPLY_SKIP`), then one
//! announce step in the target session whose answer is posted to the target
//! session's chat unless it is exactly `ANNOUNCE_SKIP`.
//!
//! The flow runs after the tool has answered (fire-and-forget mode first
//! waits for the target's reply itself). Steps go through the
//! [`SessionRunner`], so each one waits for its session's lane like any
//! other run and is bounded by the step timeout. This file must not reach
//! into the gateway or the channels.

use std::sync::Arc;
use std::time::Duration;

use super::sessions_send::{SessionRunStatus, SessionRunner, SessionSend};

/// The answer that ends the reply rounds.
pub const REPLY_SKIP: &str = "REPLY_SKIP";
/// The answer that keeps the announce step silent.
pub const ANNOUNCE_SKIP: &str = "ANNOUNCE_SKIP";
/// The message of the announce step's run.
const ANNOUNCE_MESSAGE: &str = "Agent-to-agent announce step.";
/// How long a fire-and-forget flow waits for the target's first reply.
const MAX_FIRST_REPLY_WAIT: Duration = Duration::from_secs(60);

/// One finished `sessions_send` and what its flow needs.
#[derive(Debug, Clone)]
pub struct AgentToAgentFlow {
    pub requester_key: String,
    pub requester_agent: String,
    /// Where the requester's conversation lives (`telegram`, `webchat`…).
    pub requester_channel: Option<String>,
    pub target_key: String,
    pub target_agent: String,
    /// The message the requester sent.
    pub message: String,
    /// The target's first reply, when the tool waited for it.
    pub first_reply: Option<String>,
    /// The target's run, when the tool did not wait.
    pub wait_run_id: Option<String>,
    /// Bound of each step (and of the first-reply wait, at most 60 s).
    pub step_timeout: Duration,
    /// Reply rounds (0 skips straight to the announce step).
    pub max_turns: u8,
}

/// Whose turn a reply round is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Requester,
    Target,
}

impl AgentToAgentFlow {
    /// Runs the rounds and the announce step; returns the announced text, if
    /// any was posted. Failures end the flow quietly (logged).
    pub async fn run(self, runner: Arc<dyn SessionRunner>) -> Option<String> {
        let first = match self.first_reply.clone() {
            Some(reply) => reply,
            None => self.wait_first_reply(runner.as_ref()).await?,
        };
        if first.trim().is_empty() {
            return None;
        }
        let latest = self.reply_rounds(runner.as_ref(), &first).await;
        let prompt = self.announce_context(&first, &latest);
        let announcement = self
            .step(runner.as_ref(), Role::Target, ANNOUNCE_MESSAGE, prompt)
            .await?;
        let announcement = announcement.trim();
        if announcement.is_empty() || announcement == ANNOUNCE_SKIP {
            return None;
        }
        match runner
            .announce(&self.target_key, announcement.to_string())
            .await
        {
            Ok(true) => Some(announcement.to_string()),
            Ok(false) => None,
            Err(error) => {
                log::warn!(
                    "{}: agent-to-agent announce failed: {error}",
                    self.target_key
                );
                None
            }
        }
    }

    async fn wait_first_reply(&self, runner: &dyn SessionRunner) -> Option<String> {
        let run_id = self.wait_run_id.as_deref()?;
        let wait = self.step_timeout.min(MAX_FIRST_REPLY_WAIT);
        let outcome = runner.wait(run_id, wait).await?;
        (outcome.status == SessionRunStatus::Ok).then_some(outcome.text)
    }

    /// The rounds; returns the latest reply.
    async fn reply_rounds(&self, runner: &dyn SessionRunner, first: &str) -> String {
        let mut latest = first.to_string();
        if self.requester_key == self.target_key {
            return latest;
        }
        let mut role = Role::Requester;
        for turn in 1..=self.max_turns {
            let prompt = self.reply_context(role, turn);
            let Some(reply) = self.step(runner, role, &latest, prompt).await else {
                break;
            };
            if reply.trim().is_empty() || reply.trim() == REPLY_SKIP {
                break;
            }
            latest = reply;
            role = match role {
                Role::Requester => Role::Target,
                Role::Target => Role::Requester,
            };
        }
        latest
    }

    /// Runs one step in `role`'s session and waits for its answer.
    async fn step(
        &self,
        runner: &dyn SessionRunner,
        role: Role,
        message: &str,
        extra_system_prompt: String,
    ) -> Option<String> {
        let (agent_id, session_key) = match role {
            Role::Requester => (&self.requester_agent, &self.requester_key),
            Role::Target => (&self.target_agent, &self.target_key),
        };
        let send = SessionSend {
            agent_id: agent_id.clone(),
            session_key: session_key.clone(),
            message: message.to_string(),
            extra_system_prompt,
        };
        let run_id = match runner.start(send) {
            Ok(run_id) => run_id,
            Err(error) => {
                log::warn!("{session_key}: agent-to-agent step not started: {error}");
                return None;
            }
        };
        let outcome = runner.wait(&run_id, self.step_timeout).await?;
        (outcome.status == SessionRunStatus::Ok).then_some(outcome.text)
    }

    fn sessions_lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "Agent 1 (requester) session: {}.",
            self.requester_key
        )];
        if let Some(channel) = &self.requester_channel {
            lines.push(format!("Agent 1 (requester) channel: {channel}."));
        }
        lines.push(format!("Agent 2 (target) session: {}.", self.target_key));
        lines
    }

    fn reply_context(&self, role: Role, turn: u8) -> String {
        let speaker = match role {
            Role::Requester => "Agent 1 (requester)",
            Role::Target => "Agent 2 (target)",
        };
        let mut lines = vec![
            "Agent-to-agent reply step:".to_string(),
            format!("You are {speaker}; the message is the other agent's latest reply."),
            format!("Turn {turn} of {}.", self.max_turns),
        ];
        lines.extend(self.sessions_lines());
        lines.push(format!(
            "To end this exchange, answer exactly \"{REPLY_SKIP}\"."
        ));
        lines.join("\n")
    }

    fn announce_context(&self, first: &str, latest: &str) -> String {
        let mut lines = vec!["Agent-to-agent announce step:".to_string()];
        lines.extend(self.sessions_lines());
        lines.extend([
            format!("Original request: {}", self.message),
            format!("Round 1 reply: {first}"),
            format!("Latest reply: {latest}"),
            format!(
                "Your answer is posted to this session's chat; answer exactly \
                 \"{ANNOUNCE_SKIP}\" to post nothing."
            ),
            "The agent-to-agent exchange ends with this answer.".to_string(),
        ]);
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests;
