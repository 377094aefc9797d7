//! The cron service as the `cron` tool sees it: [`CronControl`] over [`CronService`], with the service's
//! errors turned into tool errors that name what was wrong.
//!
//! This file translates only; the service schedules and persists.

use std::sync::Arc;

use serde_json::{json, Value};

use super::{CronError, CronService, RunMode};
use crate::tools::cron::CronControl;
use crate::tools::ToolError;

fn tool_error(error: CronError) -> ToolError {
    match error {
        CronError::Invalid(message) => ToolError::InvalidArguments(message),
        other => ToolError::Failed(other.to_string()),
    }
}

fn job_json(job: super::CronJob) -> Value {
    serde_json::to_value(job).unwrap_or(Value::Null)
}

impl CronControl for CronService {
    fn status(&self) -> Result<Value, ToolError> {
        Ok(json!({
            "enabled": self.options().enabled,
            "jobs": self.list(true).map_err(tool_error)?.len(),
            "nextWakeAtMs": self.next_wake_ms().map_err(tool_error)?,
        }))
    }

    fn list(&self, include_disabled: bool) -> Result<Vec<Value>, ToolError> {
        let jobs = CronService::list(self, include_disabled).map_err(tool_error)?;
        Ok(jobs.into_iter().map(job_json).collect())
    }

    fn add(&self, job: &Value) -> Result<Value, ToolError> {
        CronService::add(self, job)
            .map(job_json)
            .map_err(tool_error)
    }

    fn update(&self, id: &str, patch: &Value) -> Result<Value, ToolError> {
        CronService::update(self, id, patch)
            .map(job_json)
            .map_err(tool_error)
    }

    fn remove(&self, id: &str) -> Result<bool, ToolError> {
        CronService::remove(self, id).map_err(tool_error)
    }

    fn run_now(self: Arc<Self>, id: &str, due_only: bool) -> Result<bool, ToolError> {
        let mode = if due_only {
            RunMode::Due
        } else {
            RunMode::Force
        };
        let Some(job) = self.claim_now(id, mode).map_err(tool_error)? else {
            return Ok(false);
        };
        tokio::spawn(async move {
            if let Err(e) = self.execute(job).await {
                log::warn!("cron tool: run failed: {e}");
            }
        });
        Ok(true)
    }

    fn runs(&self, id: &str, limit: usize) -> Result<Vec<Value>, ToolError> {
        CronService::runs(self, id, limit).map_err(tool_error)
    }
}
