//! The cron job model — identity, schedule, session target, payload, delivery and run state — with the
//! error backoff table and the state changes a finished run makes.
//!
//! Shapes follow OpenClaw's `CronJob` JSON (camelCase, `kind`-tagged payloads); the store keeps jobs in this
//! JSON form. Nothing here reads the clock or the store: callers pass `now_ms`.

use serde::{Deserialize, Serialize};

use super::schedule::{Schedule, ScheduleError};

/// Delays after 1, 2, 3, 4 and 5+ consecutive errors: 30 s, 1 min, 5 min, 15 min, 60 min.
pub const ERROR_BACKOFF_MS: [u64; 5] = [30_000, 60_000, 300_000, 900_000, 3_600_000];
/// Smallest gap between the end of a run and the job's next start: 2 s.
pub const MIN_REFIRE_GAP_MS: u64 = 2_000;

/// Which session a job's run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionTarget {
    /// The agent's main session.
    Main,
    /// The job's own session, `cron:<jobId>`.
    Isolated,
}

/// What a run does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Payload {
    /// A system event text for the main session.
    SystemEvent { text: String },
    /// An agent turn with this message.
    #[serde(rename_all = "camelCase")]
    AgentTurn {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        thinking: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_seconds: Option<u64>,
    },
}

/// Where a run's result goes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// `none`, `announce` or `webhook`.
    #[serde(default = "default_delivery_mode")]
    pub mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// A chat target, or the webhook URL for `webhook`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

fn default_delivery_mode() -> String {
    "none".into()
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobRunStatus {
    Ok,
    Error,
    Skipped,
}

/// A job's run state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_status: Option<JobRunStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_duration_ms: Option<u64>,
    #[serde(default)]
    pub consecutive_errors: u32,
}

/// A scheduled job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CronJob {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub enabled: bool,
    #[serde(default)]
    pub delete_after_run: bool,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub schedule: Schedule,
    pub session_target: SessionTarget,
    pub payload: Payload,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
    #[serde(default)]
    pub state: JobState,
}

/// Why a job was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    #[error("{0}")]
    Schedule(#[from] ScheduleError),
    #[error("{0}")]
    Shape(String),
}

/// The outcome of one run, as the runner reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    pub status: JobRunStatus,
    pub error: Option<String>,
    pub summary: Option<String>,
}

impl CronJob {
    /// Checks the combination of fields OpenClaw accepts: main sessions take system events, isolated
    /// sessions take agent turns; texts are not empty; the schedule computes.
    pub fn validate(&self) -> Result<(), JobError> {
        self.schedule.validate()?;
        if self.name.trim().is_empty() {
            return Err(JobError::Shape("name must be a non-empty string".into()));
        }
        match (&self.session_target, &self.payload) {
            (SessionTarget::Main, Payload::SystemEvent { text }) if !text.trim().is_empty() => {
                Ok(())
            }
            (SessionTarget::Isolated, Payload::AgentTurn { message, .. })
                if !message.trim().is_empty() =>
            {
                Ok(())
            }
            (SessionTarget::Main, Payload::AgentTurn { .. }) => Err(JobError::Shape(
                "sessionTarget \"main\" requires payload.kind \"systemEvent\"".into(),
            )),
            (SessionTarget::Isolated, Payload::SystemEvent { .. }) => Err(JobError::Shape(
                "sessionTarget \"isolated\" requires payload.kind \"agentTurn\"".into(),
            )),
            _ => Err(JobError::Shape(
                "payload text must be a non-empty string".into(),
            )),
        }
    }

    /// Recomputes `nextRunAtMs` from `now_ms` (none when disabled or the schedule is spent).
    pub fn recompute_next(&mut self, now_ms: u64) {
        self.state.next_run_at_ms = if self.enabled {
            self.schedule
                .next_after(now_ms, self.created_at_ms, &self.id)
        } else {
            None
        };
    }

    /// Whether the job should start at `now_ms`.
    pub fn is_due(&self, now_ms: u64) -> bool {
        self.enabled
            && self.state.running_at_ms.is_none()
            && self.state.next_run_at_ms.is_some_and(|next| next <= now_ms)
    }

    /// Records a finished run that started at `started_ms` and ended at `ended_ms`: status, error count,
    /// and the next run (backed off after errors, never sooner than `MIN_REFIRE_GAP_MS`; one-shot jobs are
    /// disabled). Returns whether the job should be deleted (`deleteAfterRun` after a successful one-shot).
    pub fn apply_result(&mut self, result: &RunResult, started_ms: u64, ended_ms: u64) -> bool {
        self.state.running_at_ms = None;
        self.state.last_run_at_ms = Some(started_ms);
        self.state.last_status = Some(result.status);
        self.state.last_error = result.error.clone();
        self.state.last_duration_ms = Some(ended_ms.saturating_sub(started_ms));
        self.updated_at_ms = ended_ms;
        if result.status == JobRunStatus::Error {
            self.state.consecutive_errors = self.state.consecutive_errors.saturating_add(1);
        } else {
            self.state.consecutive_errors = 0;
        }
        if self.schedule.is_one_shot() {
            self.enabled = false;
            self.state.next_run_at_ms = None;
            return self.delete_after_run && result.status == JobRunStatus::Ok;
        }
        let earliest = ended_ms + MIN_REFIRE_GAP_MS;
        let natural = self
            .schedule
            .next_after(ended_ms, self.created_at_ms, &self.id);
        let backoff = backoff_ms(self.state.consecutive_errors).map(|delay| ended_ms + delay);
        self.state.next_run_at_ms = natural
            .map(|n| n.max(backoff.unwrap_or(0)).max(earliest))
            .or(backoff);
        false
    }
}

/// The delay before retrying after `consecutive_errors` errors in a row (`None` when there were none).
pub fn backoff_ms(consecutive_errors: u32) -> Option<u64> {
    let index = usize::try_from(consecutive_errors).ok()?.checked_sub(1)?;
    Some(ERROR_BACKOFF_MS[index.min(ERROR_BACKOFF_MS.len() - 1)])
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn every_minute_job() -> CronJob {
        CronJob {
            id: "job-1".into(),
            agent_id: None,
            name: "ping".into(),
            description: None,
            enabled: true,
            delete_after_run: false,
            created_at_ms: 0,
            updated_at_ms: 0,
            schedule: Schedule::Every {
                every_ms: 60_000,
                anchor_ms: None,
            },
            session_target: SessionTarget::Isolated,
            payload: Payload::AgentTurn {
                message: "hi".into(),
                model: None,
                thinking: None,
                timeout_seconds: None,
            },
            delivery: None,
            state: JobState::default(),
        }
    }

    fn error() -> RunResult {
        RunResult {
            status: JobRunStatus::Error,
            error: Some("boom".into()),
            summary: None,
        }
    }

    #[test]
    fn backoff_steps_through_the_table_and_stays_at_an_hour() {
        let steps: Vec<_> = (0..7).map(backoff_ms).collect();
        assert_eq!(
            steps,
            [
                None,
                Some(30_000),
                Some(60_000),
                Some(300_000),
                Some(900_000),
                Some(3_600_000),
                Some(3_600_000)
            ]
        );
    }

    #[test]
    fn errors_push_the_next_run_past_the_backoff_and_success_resets_it() {
        let mut job = every_minute_job();
        // Error at 60 s: natural next is 120 s, backoff 30 s → 120 s.
        job.apply_result(&error(), 60_000, 60_000);
        assert_eq!(job.state.next_run_at_ms, Some(120_000));
        job.apply_result(&error(), 120_000, 120_000);
        job.apply_result(&error(), 180_000, 180_000);
        // Third error: 5 min backoff beats the 1 min schedule.
        assert_eq!(job.state.consecutive_errors, 3);
        assert_eq!(job.state.next_run_at_ms, Some(480_000));
        let ok = RunResult {
            status: JobRunStatus::Ok,
            error: None,
            summary: None,
        };
        job.apply_result(&ok, 480_000, 481_000);
        assert_eq!(job.state.consecutive_errors, 0);
        assert_eq!(job.state.next_run_at_ms, Some(540_000));
    }

    #[test]
    fn one_shot_is_disabled_after_running() {
        let mut job = every_minute_job();
        job.schedule = Schedule::At {
            at: "2025-01-01T00:00:00Z".into(),
        };
        job.delete_after_run = true;
        let ok = RunResult {
            status: JobRunStatus::Ok,
            error: None,
            summary: None,
        };
        assert!(job.apply_result(&ok, 5, 6));
        assert!(!job.enabled);
        assert_eq!(job.state.next_run_at_ms, None);
    }

    #[test]
    fn payload_must_fit_the_session_target() {
        let mut job = every_minute_job();
        assert_eq!(job.validate(), Ok(()));
        job.session_target = SessionTarget::Main;
        assert!(job.validate().is_err());
        job.payload = Payload::SystemEvent {
            text: "wake".into(),
        };
        assert_eq!(job.validate(), Ok(()));
    }
}
