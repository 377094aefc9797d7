//! Controlling sub-agents after they start: listing a session's children, killing them (with every
//! descendant), and reconciling the registry after a restart
//! (interrupted runs are marked failed with a reason and announced, unannounced results are announced,
//! orphan records and sessions are removed).
//!
//! Like `subagents/mod.rs`, this file never starts a run itself: it goes through the registry's launcher.

use std::sync::Arc;

use super::steer::SteerOutcome;
use super::{
    parse_run, run_json, Requester, SpawnRequest, SubagentError, SubagentRegistry, SubagentRun,
    SubagentStatus, SUBAGENT_KEY_MARKER,
};
use crate::config::Config;
use crate::system::blocking::off_worker;
use crate::system::clock::now_ms;

/// The reason recorded for runs a restart interrupted.
pub const RESTART_FAILURE_REASON: &str =
    "the gateway stopped while this sub-agent was running; its run was lost";

/// What restart reconciliation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Runs that were in flight and are now failed.
    pub failed: usize,
    /// Finished runs whose announcement was delivered now.
    pub announced: usize,
    /// Records and sessions removed as orphans.
    pub pruned: usize,
}

impl SubagentRegistry {
    /// The runs a session started (direct children), oldest first.
    pub fn children_of(&self, requester_key: &str) -> Result<Vec<SubagentRun>, SubagentError> {
        Ok(self
            .runs()?
            .into_iter()
            .filter(|r| r.requester_session_key == requester_key)
            .collect())
    }

    /// Finds one child of `requester_key` by registry id, run id, session key, label, 1-based index
    /// (`2` or `#2`) or `last`.
    pub fn resolve_child(
        &self,
        requester_key: &str,
        target: &str,
    ) -> Result<SubagentRun, SubagentError> {
        let children = self.children_of(requester_key)?;
        let target = target.trim();
        let by_index = target
            .trim_start_matches('#')
            .parse::<usize>()
            .ok()
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| children.get(i));
        let found = if target == "last" {
            children.last()
        } else {
            by_index.or_else(|| {
                children.iter().find(|r| {
                    r.id == target
                        || r.run_id == target
                        || r.child_session_key == target
                        || r.label.as_deref() == Some(target)
                })
            })
        };
        found
            .cloned()
            .ok_or_else(|| SubagentError::NotFound(target.to_string()))
    }

    /// `run` and every run below it (children of its session, their children, …).
    fn with_descendants(&self, run: SubagentRun) -> Result<Vec<SubagentRun>, SubagentError> {
        let all = self.runs()?;
        let mut out = vec![run];
        let mut next = 0;
        while next < out.len() {
            let key = out[next].child_session_key.clone();
            out.extend(
                all.iter()
                    .filter(|r| r.requester_session_key == key)
                    .cloned(),
            );
            next += 1;
        }
        Ok(out)
    }

    /// Kills a child (or `all` children) of `requester_key` and every descendant; returns the runs that
    /// were running and are now killed.
    pub fn kill(
        &self,
        requester_key: &str,
        target: &str,
    ) -> Result<Vec<SubagentRun>, SubagentError> {
        let roots = if target.trim() == "all" {
            self.children_of(requester_key)?
        } else {
            vec![self.resolve_child(requester_key, target)?]
        };
        let mut killed = Vec::new();
        for root in roots {
            for run in self.with_descendants(root)? {
                if let Some(run) = self.mark_killed(&run, requester_key)? {
                    self.launcher.abort_run(&run.run_id);
                    self.mirror_status(&run);
                    killed.push(run);
                }
            }
        }
        Ok(killed)
    }

    fn mark_killed(
        &self,
        run: &SubagentRun,
        by: &str,
    ) -> Result<Option<SubagentRun>, SubagentError> {
        let now = now_ms();
        let written = off_worker(|| {
            self.store.subagent_run_update(&run.id, |current| {
                let mut stored = parse_run(current?).ok()?;
                if stored.status != SubagentStatus::Running {
                    return None;
                }
                stored.status = SubagentStatus::Killed;
                stored.error = Some(format!("killed by {by}"));
                stored.ended_at_ms = Some(now);
                Some(run_json(&stored))
            })
        })?;
        written.map(|json| parse_run(&json)).transpose()
    }

    /// After a restart: runs still marked running lost their process, so they are failed with a reason
    /// and announced; finished runs not yet announced are announced; records whose child session is gone
    /// after announcing, and sub-agent sessions without a record, are removed.
    pub fn reconcile(&self) -> Result<ReconcileReport, SubagentError> {
        let mut report = ReconcileReport::default();
        let now = now_ms();
        for run in self.runs()? {
            let mut run = run;
            if run.status == SubagentStatus::Running {
                run.status = SubagentStatus::Failed;
                run.error = Some(RESTART_FAILURE_REASON.into());
                run.ended_at_ms = Some(now);
                off_worker(|| self.store.subagent_run_put(&run.id, &run_json(&run)))?;
                self.mirror_status(&run);
                report.failed += 1;
            }
            if !run.announced {
                self.announce(&run)?;
                report.announced += 1;
                continue;
            }
            if off_worker(|| self.store.session(&run.child_session_key))?.is_none() {
                off_worker(|| self.store.subagent_run_delete(&run.id))?;
                report.pruned += 1;
            }
        }
        report.pruned += self.prune_orphan_sessions()?;
        Ok(report)
    }

    /// Archives finished, announced runs that ended more than `archiveAfterMinutes` ago (0 keeps them):
    /// the record, the child session and its transcript are removed, so the registry stays bounded.
    /// Returns how many runs went.
    pub fn prune_archived(&self, config: &Config, now: u64) -> Result<usize, SubagentError> {
        let minutes = config
            .agents
            .defaults
            .subagents
            .as_ref()
            .map_or(60, |s| s.effective_archive_after_minutes());
        if minutes == 0 {
            return Ok(0);
        }
        let keep_ms = u64::from(minutes) * 60_000;
        let mut pruned = 0;
        for run in self.runs()? {
            let old = run
                .ended_at_ms
                .is_some_and(|ended| now.saturating_sub(ended) > keep_ms);
            if old && run.announced && run.status != SubagentStatus::Running {
                off_worker(|| -> Result<(), crate::store::StoreError> {
                    if let Some(entry) = self.store.delete_session(&run.child_session_key)? {
                        self.store.delete_transcript(&entry.session_id)?;
                    }
                    self.store.subagent_run_delete(&run.id)?;
                    Ok(())
                })?;
                pruned += 1;
            }
        }
        Ok(pruned)
    }

    /// Removes sub-agent sessions (and transcripts) that no record knows.
    fn prune_orphan_sessions(&self) -> Result<usize, SubagentError> {
        let known: std::collections::HashSet<String> = self
            .runs()?
            .into_iter()
            .map(|r| r.child_session_key)
            .collect();
        let mut pruned = 0;
        for (key, entry) in off_worker(|| self.store.sessions())? {
            if key.contains(SUBAGENT_KEY_MARKER) && !known.contains(&key) {
                off_worker(|| -> Result<(), crate::store::StoreError> {
                    self.store.delete_session(&key)?;
                    self.store.delete_transcript(&entry.session_id)?;
                    Ok(())
                })?;
                pruned += 1;
            }
        }
        Ok(pruned)
    }
}

impl crate::tools::subagent_control::SubagentControl for SubagentRegistry {
    fn spawn(
        self: Arc<Self>,
        config: &Config,
        requester: &Requester,
        request: SpawnRequest,
    ) -> Result<SubagentRun, SubagentError> {
        SubagentRegistry::spawn(&self, config, requester, request)
    }

    fn children_of(&self, requester_key: &str) -> Result<Vec<SubagentRun>, SubagentError> {
        SubagentRegistry::children_of(self, requester_key)
    }

    fn kill(&self, requester_key: &str, target: &str) -> Result<Vec<SubagentRun>, SubagentError> {
        SubagentRegistry::kill(self, requester_key, target)
    }

    fn steer(
        self: Arc<Self>,
        config: &Config,
        requester_key: &str,
        target: &str,
        message: &str,
    ) -> Result<SteerOutcome, SubagentError> {
        SubagentRegistry::steer(&self, config, requester_key, target, message)
    }
}
