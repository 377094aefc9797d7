//! The `cron` section: whether scheduled jobs run, how many at once,
//! webhook delivery, and retention of run logs.
//!
//! Names and defaults follow OpenClaw's cron schema (`cron.enabled` on
//! unless false, one run at a time, run logs capped
//! at 2 000 000 bytes / 2000 lines). Duration and size text is validated in
//! `validate.rs`.

use serde::{Deserialize, Serialize};

use crate::config::de as cde;
use crate::config::duration::parse_byte_size;

pub const DEFAULT_CRON_RUN_LOG_MAX_BYTES: u64 = 2_000_000;
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
    /// Legacy webhook for jobs with `notify: true`.
    pub webhook: Option<String>,
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
            webhook: None,
            webhook_token: None,
            run_log: CronRunLogConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CronRunLogConfig {
    /// Size text or bytes (default 2000000).
    #[serde(deserialize_with = "cde::opt_text_or_number")]
    pub max_bytes: Option<String>,
    pub keep_lines: u32,
}

impl Default for CronRunLogConfig {
    fn default() -> Self {
        CronRunLogConfig {
            max_bytes: None,
            keep_lines: DEFAULT_CRON_RUN_LOG_KEEP_LINES,
        }
    }
}

impl CronRunLogConfig {
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
            .as_deref()
            .and_then(|text| parse_byte_size(text).ok())
            .unwrap_or(DEFAULT_CRON_RUN_LOG_MAX_BYTES)
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
        assert_eq!(cron.run_log.max_bytes(), 2_000_000);
        assert_eq!(cron.run_log.keep_lines, 2000);
    }
}
