//! Small infrastructure sections: `discovery` (mDNS / wide-area DNS-SD) and
//! `logging` (levels, file, console style, redaction).
//!
//! Names and defaults follow OpenClaw's `DiscoveryConfig` (`mdns.mode`
//! minimal) and `LoggingConfig` (level info).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DiscoveryConfig {
    pub mdns: MdnsConfig,
    pub wide_area: WideAreaConfig,
}

/// How much the gateway advertises on the LAN (`_openclaw-gw._tcp`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MdnsMode {
    Off,
    /// Omit `cliPath` and `sshPort` from TXT records.
    #[default]
    Minimal,
    Full,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MdnsConfig {
    pub mode: MdnsMode,
}

/// Unicast DNS-SD advertising.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WideAreaConfig {
    pub enabled: bool,
    /// e.g. "openclaw.internal".
    pub domain: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Silent,
    Fatal,
    Error,
    Warn,
    #[default]
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    /// The `log` crate filter for this level.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConsoleStyle {
    Pretty,
    Compact,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedactSensitive {
    Off,
    Tools,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LoggingConfig {
    pub level: LogLevel,
    /// Log file path (default: the journal).
    pub file: Option<String>,
    pub max_file_bytes: Option<u64>,
    pub console_level: Option<LogLevel>,
    pub console_style: Option<ConsoleStyle>,
    pub redact_sensitive: Option<RedactSensitive>,
    pub redact_patterns: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_and_logging_defaults() {
        assert_eq!(DiscoveryConfig::default().mdns.mode, MdnsMode::Minimal);
        assert!(!DiscoveryConfig::default().wide_area.enabled);
        assert_eq!(LoggingConfig::default().level, LogLevel::Info);
        assert_eq!(LogLevel::Silent.to_filter(), log::LevelFilter::Off);
    }
}
