//! The `logging` section: `logging.level`, how much pincer logs. Names and
//! values follow OpenClaw's `LoggingConfig` (silent … trace, default
//! info). Upstream's file, console and redaction keys are not supported
//! (`unsupported.rs`); the `--log-level` flag wins over this key.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Silent,
    Fatal,
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    /// The `log` crate filter for this level (fatal logs as error).
    pub fn to_filter(self) -> log::LevelFilter {
        match self {
            LogLevel::Silent => log::LevelFilter::Off,
            LogLevel::Fatal | LogLevel::Error => log::LevelFilter::Error,
            LogLevel::Warn => log::LevelFilter::Warn,
            LogLevel::Info => log::LevelFilter::Info,
            LogLevel::Debug => log::LevelFilter::Debug,
            LogLevel::Trace => log::LevelFilter::Trace,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LoggingConfig {
    /// Unset: info (or the `--log-level` flag).
    pub level: Option<LogLevel>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_map_to_log_filters() {
        assert_eq!(LogLevel::Silent.to_filter(), log::LevelFilter::Off);
        assert_eq!(LogLevel::Fatal.to_filter(), log::LevelFilter::Error);
        assert_eq!(LogLevel::Warn.to_filter(), log::LevelFilter::Warn);
        assert_eq!(LoggingConfig::default().level, None);
    }
}
