//! The `cron` section: whether scheduled jobs run, how many at once, retry
//! of transient failures, webhook delivery, and retention of run sessions
//! and run logs.
//!
//! Names and defaults follow OpenClaw's cron schema (`cron.enabled` on
//! unless false, one run at a time, run sessions kept 24 h, run logs capped
//! at 2 000 000 bytes / 2000 lines). Duration and size text is validated in
//! `validate.rs`.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::config::de as cde;
use crate::config::duration::{parse_byte_size, parse_duration_ms, DurationUnit};

pub const DEFAULT_CRON_SESSION_RETENTION_MS: u64 = 24 * 3_600_000;
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
    pub retry: Option<CronRetryConfig>,
    /// Legacy webhook for jobs with `notify: true`.
    pub webhook: Option<String>,
    /// Bearer token for webhook delivery.
    pub webhook_token: Option<String>,
    /// How long finished run sessions are kept; `false` keeps them.
    pub session_retention: Option<Retention>,
    pub run_log: CronRunLogConfig,
}

impl Default for CronConfig {
    fn default() -> Self {
        CronConfig {
            enabled: true,
            store: None,
            max_concurrent_runs: None,
            retry: None,
            webhook: None,
            webhook_token: None,
            session_retention: None,
            run_log: CronRunLogConfig::default(),
        }
    }
}

impl CronConfig {
    /// Retention of run sessions in ms; `None` when pruning is disabled.
    pub fn session_retention_ms(&self) -> Option<u64> {
        match &self.session_retention {
            None => Some(DEFAULT_CRON_SESSION_RETENTION_MS),
            Some(Retention::Disabled) => None,
            Some(Retention::After(text)) => Some(
                parse_duration_ms(text, DurationUnit::Hours)
                    .unwrap_or(DEFAULT_CRON_SESSION_RETENTION_MS),
            ),
        }
    }
}

/// Duration text, or `false` to disable pruning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retention {
    Disabled,
    After(String),
}

impl Serialize for Retention {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Retention::Disabled => serializer.serialize_bool(false),
            Retention::After(text) => serializer.serialize_str(text),
        }
    }
}

impl<'de> Deserialize<'de> for Retention {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RetentionVisitor)
    }
}

struct RetentionVisitor;

impl Visitor<'_> for RetentionVisitor {
    type Value = Retention;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("duration text (\"24h\") or false")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Retention, E> {
        if v {
            Err(E::invalid_value(de::Unexpected::Bool(v), &self))
        } else {
            Ok(Retention::Disabled)
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Retention, E> {
        Ok(Retention::After(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Retention, E> {
        Ok(Retention::After(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Retention, E> {
        Ok(Retention::After(v.to_string()))
    }
}

/// Retry of transient job failures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CronRetryConfig {
    /// 0–10.
    pub max_attempts: Option<u32>,
    /// Delays between attempts (1–10 entries).
    pub backoff_ms: Option<Vec<u64>>,
    /// rate_limit | overloaded | network | timeout | server_error.
    pub retry_on: Option<Vec<String>>,
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
        assert_eq!(cron.session_retention_ms(), Some(24 * 3_600_000));
        assert_eq!(cron.run_log.max_bytes(), 2_000_000);
        assert_eq!(cron.run_log.keep_lines, 2000);
    }

    #[test]
    fn retention_false_disables_pruning() {
        let cron: CronConfig =
            serde_json::from_str(r#"{"sessionRetention": false}"#).expect("false");
        assert_eq!(cron.session_retention_ms(), None);
        let cron: CronConfig = serde_json::from_str(r#"{"sessionRetention": "7d"}"#).expect("text");
        assert_eq!(cron.session_retention_ms(), Some(7 * 86_400_000));
        assert!(serde_json::from_str::<CronConfig>(r#"{"sessionRetention": true}"#).is_err());
    }
}
