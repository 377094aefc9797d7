//! Sub-agents: `sessions_spawn` starts a child session `agent:<id>:subagent:<uuid>` that runs one task on
//! the subagent lane; when it ends, its result and statistics are announced back to the requester session
//! (to the nearest living ancestor if the requester is gone). Depth (`maxSpawnDepth`), active children
//! (`maxChildrenPerAgent`) and target agents (`allowAgents`) are checked before anything starts. Every run
//! is a record in the store's `subagent_runs` database, so a restart can reconcile it.
//!
//! This module decides and records; it never starts a run itself: a [`RunLauncher`] from the gateway does,
//! and the same launcher delivers announcements (today as a follow-up run in the requester session; the
//! queue can take that over behind the same trait). List, kill and restart recovery live in
//! `control.rs`; steering in `steer.rs`; the words in `prompt.rs`; what the config allows in `config.rs`.

pub mod config;
pub mod control;
pub mod prompt;
pub mod steer;

use std::sync::Arc;

use futures_util::future::BoxFuture;

pub use self::config::max_spawn_depth;
use self::config::{
    check_agent_named, check_target_agent, child_model, child_thinking, child_timeout_ms,
    max_children,
};
use self::prompt::{announce_message, child_system_prompt, ChildPromptParts};
use self::steer::LiveTurns;
use super::runs::{RunOutcome, RunStatus};
use super::runtime::RunStartError;
use super::sessions::SessionIndex;
use super::turn::TurnSpec;
use crate::config::Config;
use crate::queue::{LaneKind, SteerInbox};
use crate::store::{SessionEntry, Store, StoreError};
use crate::system::blocking::off_worker;
use crate::system::clock::now_ms;
pub use crate::tools::subagent_control::{
    Cleanup, Requester, SpawnRequest, SubagentError, SubagentRun, SubagentStatus,
};

/// The part of a child's session key between the agent id and the uuid.
pub const SUBAGENT_KEY_MARKER: &str = ":subagent:";
/// `maxSpawnDepth` is clamped to this (upstream's range is 1–5).
pub const MAX_SPAWN_DEPTH_LIMIT: u32 = 5;
/// How many ancestors an announcement climbs looking for a living session.
const MAX_ANNOUNCE_HOPS: usize = 8;

/// A boxed future resolving to a run's outcome.
pub type OutcomeFuture = BoxFuture<'static, RunOutcome>;

/// Why an announcement did not enter its session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnounceError {
    #[error("the gateway is shutting down")]
    ShuttingDown,
    #[error("the queue of session {session_key} is full (messages.queue.cap)")]
    QueueFull { session_key: String },
}

/// Starts and stops agent runs for the sub-agent registry (the gateway implements it).
pub trait RunLauncher: Send + Sync {
    /// Starts `spec` on `lane` (after its session's earlier runs) with `steer` as the turn's steer inbox
    /// (taken before each model call after the first); the future ends with its outcome.
    fn launch(
        &self,
        spec: TurnSpec,
        lane: LaneKind,
        steer: SteerInbox,
    ) -> Result<OutcomeFuture, RunStartError>;
    /// Aborts an active run; whether it was active.
    fn abort_run(&self, run_id: &str) -> bool;
    /// Delivers an announcement into a session as a new user-visible turn of its agent.
    fn announce(
        &self,
        agent_id: &str,
        session_key: &str,
        message: String,
    ) -> Result<(), AnnounceError>;
}

pub(crate) fn parse_run(json: &str) -> Result<SubagentRun, SubagentError> {
    serde_json::from_str(json).map_err(|e| SubagentError::Corrupt(e.to_string()))
}

pub(crate) fn run_json(run: &SubagentRun) -> String {
    serde_json::to_string(run).expect("a SubagentRun always serialises")
}

/// The depth of a session: its entry's `spawnDepth`, else 1 for a sub-agent key, else 0.
pub fn session_depth(entry: Option<&SessionEntry>, session_key: &str) -> u32 {
    entry
        .and_then(|e| e.spawn_depth)
        .unwrap_or(u32::from(session_key.contains(SUBAGENT_KEY_MARKER)))
}

/// A new running record for a child of `requester` at `depth`.
fn new_record(
    config: &Config,
    requester: &Requester,
    request: SpawnRequest,
    agent_id: String,
    depth: u32,
) -> SubagentRun {
    let model = child_model(config, &agent_id, request.model.as_deref());
    let child_session_key = format!(
        "agent:{agent_id}{SUBAGENT_KEY_MARKER}{}",
        uuid::Uuid::new_v4()
    );
    SubagentRun {
        id: uuid::Uuid::new_v4().to_string(),
        run_id: uuid::Uuid::new_v4().to_string(),
        child_session_key,
        requester_session_key: requester.session_key.clone(),
        requester_agent_id: requester.agent_id.clone(),
        agent_id,
        task: request.task.trim().to_string(),
        label: request.label.filter(|l| !l.trim().is_empty()),
        cleanup: request.cleanup,
        depth,
        model,
        timeout_ms: child_timeout_ms(config, request.run_timeout_seconds),
        created_at_ms: now_ms(),
        ended_at_ms: None,
        status: SubagentStatus::Running,
        error: None,
        result: None,
        input_tokens: 0,
        output_tokens: 0,
        announced: false,
    }
}

/// The registry of sub-agent runs. Share it as `Arc<SubagentRegistry>`.
pub struct SubagentRegistry {
    pub(crate) store: Store,
    pub(crate) launcher: Arc<dyn RunLauncher>,
    /// Steer inboxes of the child turns in flight.
    pub(crate) live: LiveTurns,
}

impl SubagentRegistry {
    pub fn new(store: Store, launcher: Arc<dyn RunLauncher>) -> Arc<SubagentRegistry> {
        Arc::new(SubagentRegistry {
            store,
            launcher,
            live: LiveTurns::default(),
        })
    }

    /// Every recorded run, oldest first.
    pub fn runs(&self) -> Result<Vec<SubagentRun>, SubagentError> {
        let mut runs = off_worker(|| self.store.subagent_runs())?
            .iter()
            .map(|(_, json)| parse_run(json))
            .collect::<Result<Vec<_>, _>>()?;
        runs.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        Ok(runs)
    }

    /// Checks the limits, records the run, prepares the child session and starts its first turn.
    pub fn spawn(
        self: &Arc<Self>,
        config: &Config,
        requester: &Requester,
        request: SpawnRequest,
    ) -> Result<SubagentRun, SubagentError> {
        if request.task.trim().is_empty() {
            return Err(SubagentError::Invalid(
                "task must be a non-empty string".into(),
            ));
        }
        self.prune_archived(config, now_ms())?;
        let depth = self.check_limits(config, requester)?;
        check_agent_named(config, &requester.agent_id, request.agent_id.is_some())?;
        let agent_id = request
            .agent_id
            .as_deref()
            .map(crate::routing::session_key::normalize_agent_id)
            .unwrap_or_else(|| requester.agent_id.clone());
        check_target_agent(config, &requester.agent_id, &agent_id)?;
        let thinking = child_thinking(
            config,
            &requester.agent_id,
            &agent_id,
            request.thinking.as_deref(),
        );
        if let Some(level) = thinking
            .as_deref()
            .filter(|l| crate::agent::failover::ThinkingLevel::parse(l).is_none())
        {
            return Err(SubagentError::Invalid(format!(
                "invalid thinking level {level:?} (off, minimal, low, medium, high, xhigh)"
            )));
        }
        let run = new_record(config, requester, request, agent_id, depth + 1);
        let mut entry = SessionEntry::new(uuid::Uuid::new_v4().to_string(), run.created_at_ms);
        entry.spawned_by = Some(run.requester_session_key.clone());
        entry.spawn_depth = Some(run.depth);
        entry.label = run.label.clone();
        entry.thinking_level = thinking;
        entry.status = Some(SubagentStatus::Running.as_str().into());
        off_worker(|| {
            SessionIndex::new(self.store.clone()).create(&run.child_session_key, &entry)?;
            self.store.subagent_run_put(&run.id, &run_json(&run))
        })?;
        let max_depth = max_spawn_depth(config);
        let spec = self.turn_spec(&run, run.task.clone(), max_depth);
        self.start(run.clone(), spec, max_depth)?;
        Ok(run)
    }

    /// `maxSpawnDepth` and `maxChildrenPerAgent` for this requester; returns its depth.
    fn check_limits(&self, config: &Config, requester: &Requester) -> Result<u32, SubagentError> {
        let parent = off_worker(|| self.store.session(&requester.session_key))?;
        let depth = session_depth(parent.as_ref(), &requester.session_key);
        let max_depth = max_spawn_depth(config);
        if depth >= max_depth {
            return Err(SubagentError::DepthLimit {
                depth,
                max: max_depth,
            });
        }
        let active = self
            .runs()?
            .iter()
            .filter(|r| {
                r.requester_session_key == requester.session_key
                    && r.status == SubagentStatus::Running
            })
            .count();
        if active >= max_children(config) {
            return Err(SubagentError::TooManyChildren {
                active,
                max: max_children(config),
            });
        }
        Ok(depth)
    }

    /// The turn a child runs: `message` in its session, with the sub-agent system prompt.
    pub(crate) fn turn_spec(&self, run: &SubagentRun, message: String, max_depth: u32) -> TurnSpec {
        let prompt = child_system_prompt(&ChildPromptParts {
            requester_session_key: &run.requester_session_key,
            child_session_key: &run.child_session_key,
            label: run.label.as_deref(),
            task: &run.task,
            depth: run.depth,
            max_spawn_depth: max_depth,
        });
        TurnSpec {
            run_id: run.run_id.clone(),
            agent_id: run.agent_id.clone(),
            session_key: run.child_session_key.clone(),
            message,
            timeout_ms: run.timeout_ms,
            model_override: run.model.clone(),
            extra_system_prompt: Some(prompt),
            label: run.label.clone(),
            channel: None,
            skill_filter: None,
            interaction: false,
            images: Vec::new(),
        }
    }

    /// Launches a child turn with its own steer inbox and watches it to its end in the background.
    pub(crate) fn start(
        self: &Arc<Self>,
        run: SubagentRun,
        spec: TurnSpec,
        max_depth: u32,
    ) -> Result<(), SubagentError> {
        let inbox = self.live.open(&run.id, &spec.run_id, max_depth);
        let outcome = match self.launcher.launch(spec, LaneKind::Subagent, inbox) {
            Ok(outcome) => outcome,
            Err(error) => {
                let reason = error.to_string();
                self.live.close(&run.id, &run.run_id);
                let failed = self.settle(&run.id, &run.run_id, |r| {
                    r.status = SubagentStatus::Failed;
                    r.error = Some(reason.clone());
                })?;
                if let Some(failed) = failed {
                    self.mirror_status(&failed);
                }
                return Err(SubagentError::Launch(reason));
            }
        };
        let registry = self.clone();
        tokio::spawn(async move {
            let outcome = outcome.await;
            if let Err(e) = registry.finish(&run.id, &outcome) {
                log::warn!("subagents: recording run {} failed: {e}", run.id);
            }
        });
        Ok(())
    }

    /// Records a finished turn and announces it, unless the child was steered onto a newer turn or killed.
    /// Steer messages the turn never took start the next turn instead.
    pub fn finish(self: &Arc<Self>, id: &str, outcome: &RunOutcome) -> Result<(), SubagentError> {
        let leftovers = self.live.close(id, &outcome.run_id);
        if self.continue_with_leftovers(id, outcome, leftovers)? {
            return Ok(());
        }
        let settled = self.settle(id, &outcome.run_id, |r| {
            r.status = match outcome.status {
                RunStatus::Ok => SubagentStatus::Done,
                RunStatus::Timeout => SubagentStatus::Timeout,
                RunStatus::Aborted => SubagentStatus::Killed,
                RunStatus::Error => SubagentStatus::Failed,
            };
            r.result = (!outcome.text.is_empty()).then(|| outcome.text.clone());
            r.error = outcome.error.clone();
            r.input_tokens += outcome.usage.input_tokens;
            r.output_tokens += outcome.usage.output_tokens;
        })?;
        let Some(run) = settled else {
            // Killed (or otherwise ended) while running: the turn has now written its last session
            // update, so the stored end state goes on the session again.
            let current = off_worker(|| self.store.subagent_run(id))?;
            if let Some(run) = current.map(|json| parse_run(&json)).transpose()? {
                if run.run_id == outcome.run_id {
                    self.mirror_status(&run);
                }
            }
            return Ok(());
        };
        self.mirror_status(&run);
        if run.status != SubagentStatus::Killed {
            self.announce(&run)?;
        }
        Ok(())
    }

    /// Moves a running record of `run_id` to its end state; `None` when the record is gone, no longer
    /// running, or runs a newer turn.
    fn settle(
        &self,
        id: &str,
        run_id: &str,
        change: impl Fn(&mut SubagentRun),
    ) -> Result<Option<SubagentRun>, SubagentError> {
        let now = now_ms();
        let written = off_worker(|| {
            self.store.subagent_run_update(id, |current| {
                let mut run = parse_run(current?).ok()?;
                if run.run_id != run_id || run.status != SubagentStatus::Running {
                    return None;
                }
                change(&mut run);
                run.ended_at_ms = Some(now);
                Some(run_json(&run))
            })
        })?;
        written.map(|json| parse_run(&json)).transpose()
    }

    /// Writes the run's status onto the child's session entry (`sessions.list` shows it).
    pub(crate) fn mirror_status(&self, run: &SubagentRun) {
        let result = off_worker(|| {
            SessionIndex::new(self.store.clone()).set_status(
                &run.child_session_key,
                run.status.as_str(),
                now_ms(),
            )
        });
        if let Err(e) = result {
            log::warn!(
                "subagents: cannot update session {}: {e}",
                run.child_session_key
            );
        }
    }

    /// Where an announcement goes: the requester's session, or the nearest ancestor that still exists.
    pub fn announce_target(
        &self,
        run: &SubagentRun,
    ) -> Result<Option<(String, String)>, SubagentError> {
        let runs = self.runs()?;
        let mut key = run.requester_session_key.clone();
        let mut agent = run.requester_agent_id.clone();
        for _ in 0..MAX_ANNOUNCE_HOPS {
            if off_worker(|| self.store.session(&key))?.is_some()
                || !key.contains(SUBAGENT_KEY_MARKER)
            {
                return Ok(Some((agent, key)));
            }
            let Some(parent) = runs.iter().find(|r| r.child_session_key == key) else {
                return Ok(None);
            };
            key = parent.requester_session_key.clone();
            agent = parent.requester_agent_id.clone();
        }
        Ok(None)
    }

    /// Announces a finished run to its requester (or ancestor), then applies `cleanup`.
    pub fn announce(&self, run: &SubagentRun) -> Result<(), SubagentError> {
        match self.announce_target(run)? {
            Some((agent, key)) => {
                if let Err(e) = self.launcher.announce(&agent, &key, announce_message(run)) {
                    log::warn!("subagents: announcing run {} to {key} failed: {e}", run.id);
                    return Ok(());
                }
            }
            None => log::warn!(
                "subagents: run {} has no living requester to announce to",
                run.id
            ),
        }
        off_worker(|| {
            self.store.subagent_run_update(&run.id, |current| {
                let mut stored = parse_run(current?).ok()?;
                stored.announced = true;
                Some(run_json(&stored))
            })
        })?;
        if run.cleanup == Cleanup::Delete {
            off_worker(|| -> Result<(), StoreError> {
                if let Some(entry) = self.store.delete_session(&run.child_session_key)? {
                    self.store.delete_transcript(&entry.session_id)?;
                }
                Ok(())
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
