//! Steering a running sub-agent. Every child turn runs with its own steer inbox (kept here, in memory, by
//! registry id); `steer` puts the message in it, and the child's tool loop takes it before its next model
//! call, so the message joins the running turn and its transcript. When the turn has already made its last
//! model call the message is still in the inbox when the turn ends: the registry then starts a new turn in
//! the child's session with it instead of announcing (OpenClaw's steer-then-restart). With no live inbox at
//! all, a steer falls back to aborting the current turn and restarting with the message.
//!
//! Limits as upstream: a message of at most `MAX_STEER_MESSAGE_CHARS`, one steer per `STEER_RATE_LIMIT_MS`
//! from one session to one child. This file never starts a run itself: the registry's launcher does.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{
    max_spawn_depth, parse_run, run_json, SubagentError, SubagentRegistry, SubagentRun,
    SubagentStatus,
};
use crate::config::Config;
use crate::queue::{QueuedMessage, SteerInbox};
use crate::system::blocking::off_worker;
use crate::system::clock::now_ms;
pub use crate::tools::subagent_control::{
    SteerMode, SteerOutcome, MAX_STEER_MESSAGE_CHARS, STEER_RATE_LIMIT_MS,
};

/// Steer messages one running turn holds before it takes them.
const MAX_PENDING_STEERS: usize = 20;
/// Rate-limit entries older than this are forgotten when a new one is written.
const RATE_ENTRY_TTL_MS: u64 = 60_000;

/// One child turn in flight: its agent run and its inbox.
struct LiveTurn {
    run_id: String,
    inbox: SteerInbox,
    max_spawn_depth: u32,
}

/// What an ending turn left behind: steer messages it never took.
pub(crate) struct Leftovers {
    pub messages: Vec<String>,
    pub max_spawn_depth: u32,
}

/// The inboxes of running child turns and the steer rate limit; in memory only (a restart ends every
/// turn anyway).
#[derive(Default)]
pub(crate) struct LiveTurns {
    turns: Mutex<HashMap<String, LiveTurn>>,
    last_steer_ms: Mutex<HashMap<String, u64>>,
}

impl LiveTurns {
    /// A fresh inbox for turn `run_id` of record `id` (replacing an older turn's).
    pub(crate) fn open(&self, id: &str, run_id: &str, max_spawn_depth: u32) -> SteerInbox {
        let inbox = SteerInbox::default();
        self.turns.lock().insert(
            id.to_string(),
            LiveTurn {
                run_id: run_id.to_string(),
                inbox: inbox.clone(),
                max_spawn_depth,
            },
        );
        inbox
    }

    /// Puts `text` in the inbox of turn `run_id`; false when that turn is not live (or its inbox is full).
    fn hand(&self, id: &str, run_id: &str, text: &str) -> bool {
        let turns = self.turns.lock();
        let Some(turn) = turns.get(id).filter(|t| t.run_id == run_id) else {
            return false;
        };
        let message = QueuedMessage::new(uuid::Uuid::new_v4().to_string(), text);
        turn.inbox.push(message, MAX_PENDING_STEERS).is_ok()
    }

    /// Closes turn `run_id` of record `id`: later steers no longer reach it. Returns what it left untaken.
    pub(crate) fn close(&self, id: &str, run_id: &str) -> Leftovers {
        let mut turns = self.turns.lock();
        let Some(turn) = turns.get(id).filter(|t| t.run_id == run_id) else {
            return Leftovers {
                messages: Vec::new(),
                max_spawn_depth: 1,
            };
        };
        let leftovers = Leftovers {
            messages: turn.inbox.take().into_iter().map(|m| m.text).collect(),
            max_spawn_depth: turn.max_spawn_depth,
        };
        turns.remove(id);
        leftovers
    }

    /// Records a steer from `from` to `child` at `now`, or refuses it within the rate limit.
    fn admit(&self, from: &str, child: &str, now: u64) -> Result<(), SubagentError> {
        let key = format!("{from}\u{0}{child}");
        let mut last = self.last_steer_ms.lock();
        if let Some(at) = last.get(&key) {
            let since = now.saturating_sub(*at);
            if since < STEER_RATE_LIMIT_MS {
                return Err(SubagentError::SteerRateLimited {
                    wait_ms: STEER_RATE_LIMIT_MS - since,
                });
            }
        }
        last.retain(|_, at| now.saturating_sub(*at) < RATE_ENTRY_TTL_MS);
        last.insert(key, now);
        Ok(())
    }
}

/// A steer message checked against the limits, trimmed.
fn checked_message(message: &str) -> Result<&str, SubagentError> {
    let message = message.trim();
    if message.is_empty() {
        return Err(SubagentError::Invalid(
            "message must be a non-empty string".into(),
        ));
    }
    let chars = message.chars().count();
    if chars > MAX_STEER_MESSAGE_CHARS {
        return Err(SubagentError::SteerTooLong {
            chars,
            max: MAX_STEER_MESSAGE_CHARS,
        });
    }
    Ok(message)
}

impl SubagentRegistry {
    /// Hands a running child a new message: into its running turn when that turn is live (it reads the
    /// message before its next model call), else by stopping the turn and starting a new one with it.
    pub fn steer(
        self: &Arc<Self>,
        config: &Config,
        requester_key: &str,
        target: &str,
        message: &str,
    ) -> Result<SteerOutcome, SubagentError> {
        let message = checked_message(message)?;
        let run = self.resolve_child(requester_key, target)?;
        if run.status != SubagentStatus::Running {
            return Err(SubagentError::NotRunning(run.id));
        }
        self.live
            .admit(requester_key, &run.child_session_key, now_ms())?;
        if self.live.hand(&run.id, &run.run_id, message) {
            return Ok(SteerOutcome {
                run,
                mode: SteerMode::Injected,
            });
        }
        let Some(steered) = self.replace_turn(&run.id, &run.run_id, None)? else {
            return Err(SubagentError::NotRunning(run.id));
        };
        self.launcher.abort_run(&run.run_id);
        let spec = self.turn_spec(&steered, message.to_string(), max_spawn_depth(config));
        self.start(steered.clone(), spec, max_spawn_depth(config))?;
        Ok(SteerOutcome {
            run: steered,
            mode: SteerMode::Restarted,
        })
    }

    /// Gives a running record of turn `run_id` a new turn id (adding the old turn's token counts, when
    /// given); `None` when it is no longer running that turn.
    fn replace_turn(
        &self,
        id: &str,
        run_id: &str,
        usage: Option<&crate::agent::providers::Usage>,
    ) -> Result<Option<SubagentRun>, SubagentError> {
        let new_run_id = uuid::Uuid::new_v4().to_string();
        let written = off_worker(|| {
            self.store.subagent_run_update(id, |current| {
                let mut stored = parse_run(current?).ok()?;
                if stored.status != SubagentStatus::Running || stored.run_id != run_id {
                    return None;
                }
                stored.run_id = new_run_id.clone();
                if let Some(usage) = usage {
                    stored.input_tokens += usage.input_tokens;
                    stored.output_tokens += usage.output_tokens;
                }
                Some(run_json(&stored))
            })
        })?;
        written.map(|json| parse_run(&json)).transpose()
    }

    /// A turn ended with steer messages it never took: starts the next turn with them (the ended turn's
    /// result is not announced). Returns whether a new turn started.
    pub(crate) fn continue_with_leftovers(
        self: &Arc<Self>,
        id: &str,
        outcome: &crate::agent::runs::RunOutcome,
        leftovers: Leftovers,
    ) -> Result<bool, SubagentError> {
        if leftovers.messages.is_empty() || outcome.status == crate::agent::runs::RunStatus::Aborted
        {
            return Ok(false);
        }
        let Some(next) = self.replace_turn(id, &outcome.run_id, Some(&outcome.usage))? else {
            return Ok(false);
        };
        let message = leftovers.messages.join("\n\n");
        let spec = self.turn_spec(&next, message, leftovers.max_spawn_depth);
        self.start(next, spec, leftovers.max_spawn_depth)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_past_the_size_limit_are_refused_with_the_limit_named() {
        let long = "x".repeat(MAX_STEER_MESSAGE_CHARS + 1);
        let error = checked_message(&long).expect_err("too long").to_string();
        assert!(error.contains("4000"), "{error}");
        assert!(checked_message("  ").is_err());
        assert_eq!(checked_message(" go left ").expect("ok"), "go left");
    }

    #[test]
    fn a_second_steer_to_the_same_child_within_the_window_is_refused() {
        let live = LiveTurns::default();
        live.admit("main", "child", 10_000).expect("first");
        let error = live
            .admit("main", "child", 10_500)
            .expect_err("too soon")
            .to_string();
        assert!(error.contains("2000 ms"), "{error}");
        live.admit("main", "other-child", 10_500)
            .expect("other child");
        live.admit("main", "child", 12_000)
            .expect("after the window");
    }

    #[test]
    fn a_closed_turn_takes_no_more_messages_and_returns_what_it_left() {
        let live = LiveTurns::default();
        let inbox = live.open("rec", "run-1", 2);
        assert!(live.hand("rec", "run-1", "first"));
        assert_eq!(inbox.take().len(), 1);
        assert!(live.hand("rec", "run-1", "second"));
        assert!(!live.hand("rec", "run-0", "stale turn"));
        let left = live.close("rec", "run-1");
        assert_eq!(left.messages, ["second"]);
        assert_eq!(left.max_spawn_depth, 2);
        assert!(!live.hand("rec", "run-1", "too late"));
        assert!(live.close("rec", "run-1").messages.is_empty());
    }
}
