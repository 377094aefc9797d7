//! The `cron` section: whether scheduled jobs run, how many at once,
//! the bearer token of webhook deliveries, and how many run-log lines each
//! job keeps.
//!
//! Names and defaults follow OpenClaw's cron schema (`cron.enabled` on
//! unless false, run logs of 2000 lines). pincer keeps run logs in its
//! database by line count, so upstream's `runLog.maxBytes` is unsupported,
//! and the retired global `cron.webhook` (upstream moved it into each job's
//! `delivery`) is too.

use serde::{Deserialize, Serialize};

pub const DEFAULT_CRON_RUN_LOG_KEEP_LINES: u32 = 2_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CronConfig {
    pub enabled: bool,
    /// Upstream's job store path; pincer keeps jobs in its database and only
    /// accepts the key for compatibility.
    pub store: Option<String>,
    /// Concurrent cron runs (the cron lane); unset: the board profile's (upstream's default is 1).
    pub max_concurrent_runs: Option<u32>,
    /// Bearer token for webhook delivery.
    pub webhook_token: Option<String>,
    pub run_log: CronRunLogConfig,
}

impl Default for CronConfig {
    fn default() -> Self {
        CronConfig {
            enabled: true,
            store: None,
            max_concurrent_runs: None,
            webhook_token: None,
            run_log: CronRunLogConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CronRunLogConfig {
    pub keep_lines: u32,
}

impl Default for CronRunLogConfig {
    fn default() -> Self {
        CronRunLogConfig {
            keep_lines: DEFAULT_CRON_RUN_LOG_KEEP_LINES,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_defaults_match_openclaw() {
        let cron = CronConfig::default();
        assert!(cron.enabled);
        assert_eq!(cron.max_concurrent_runs, None);
        assert_eq!(cron.run_log.keep_lines, 2000);
    }
}
