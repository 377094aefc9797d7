//! Scheduled jobs, after OpenClaw's cron service: schedules (`at`, `every`, `cron` with an IANA zone),
//! the job model with its error backoff, persistence through the store's `cron` databases, missed-run
//! recovery, the run log and the timer.
//!
//! This module decides when jobs run and records what happened; it must not run agents itself (the gateway
//! supplies a `JobRunner`) and must not block the runtime (store calls go through `block_in_place`).

pub mod expr;
pub mod job;
pub mod schedule;
pub mod service;
mod tool_port;

pub use job::{CronJob, Delivery, JobRunStatus, JobState, Payload, RunResult, SessionTarget};
pub use schedule::Schedule;
pub use service::{
    CronClock, CronOptions, CronService, JobRunner, RunFuture, RunMode, SystemClock,
};

use crate::store::StoreError;

/// What the cron service reports.
#[derive(Debug, thiserror::Error)]
pub enum CronError {
    #[error("invalid cron job: {0}")]
    Invalid(String),
    #[error("unknown cron job id: {0}")]
    NotFound(String),
    #[error("corrupt cron job record: {0}")]
    Corrupt(String),
    #[error("cron store: {0}")]
    Store(#[from] StoreError),
}
