//! Board profiles: per-board limits from `board/*.json5` (built into the
//! binary), picked by the device-tree model string at start. One limit may be
//! raised or lowered from the environment for load tests and benchmarks:
//! `PINCER_MAX_CONNECTIONS` (the gateway's connection cap; `pincer doctor`
//! shows the value in force).

use serde::Deserialize;

const PROFILES: &[&str] = &[
    include_str!("../../board/pi-zero-2w.json5"),
    include_str!("../../board/pi3.json5"),
    include_str!("../../board/pi4.json5"),
    include_str!("../../board/pi5.json5"),
    include_str!("../../board/generic.json5"),
];

/// Environment variable overriding the profile's `gateway.maxConnections`.
pub const MAX_CONNECTIONS_ENV: &str = "PINCER_MAX_CONNECTIONS";

/// Where Linux exposes the device-tree model.
const MODEL_PATHS: &[&str] = &[
    "/proc/device-tree/model",
    "/sys/firmware/devicetree/base/model",
];

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayProfile {
    pub max_connections: usize,
    pub max_buffered_bytes: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lanes {
    pub global: usize,
    pub subagent: usize,
    pub cron: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EmbedderProfile {
    pub threads: usize,
    pub batch: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxProfile {
    pub memory_mb: u64,
    pub pids: u64,
}

/// What one inbound media job may use on this board (`media` in the profile).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MediaProfile {
    /// Images with more megapixels are refused before decoding.
    pub max_megapixels: u64,
    /// Working memory of one image decode, in MiB.
    pub decode_mib: usize,
    /// Media jobs at once.
    pub concurrency: usize,
    /// Disk the media area may hold, in MiB.
    pub area_mib: u64,
    /// Longer side of an image handed to a model, in pixels.
    pub image_max_side: u32,
}

/// How long a socket may take to complete the handshake.
pub const DEFAULT_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// How often `tick` events go out.
pub const TICK_INTERVAL_MS: u64 = 30_000;
/// Concurrent sub-agent runs when neither the board nor the config says.
pub const DEFAULT_SUBAGENT_LANE: usize = 8;
/// Concurrent cron runs when neither the board nor the config says.
pub const DEFAULT_CRON_LANE: usize = 1;

/// The limits a board gives every layer (defaults fit a Pi 4): connections
/// and buffers for the gateway, lane sizes for the queue, the heartbeat floor.
#[derive(Debug, Clone)]
pub struct BoardLimits {
    pub max_connections: usize,
    pub max_buffered_bytes: usize,
    pub handshake_timeout_ms: u64,
    pub tick_interval_ms: u64,
    pub max_concurrent_runs: usize,
    /// Concurrent sub-agent runs (the subagent lane).
    pub subagent_lane: usize,
    /// Concurrent cron runs (the cron lane).
    pub cron_lane: usize,
    /// Heartbeats run at most this often on this board (0: no floor).
    pub heartbeat_min_every_ms: u64,
}

impl Default for BoardLimits {
    fn default() -> Self {
        BoardLimits {
            max_connections: 128,
            max_buffered_bytes: 8 * 1024 * 1024,
            handshake_timeout_ms: DEFAULT_HANDSHAKE_TIMEOUT_MS,
            tick_interval_ms: TICK_INTERVAL_MS,
            max_concurrent_runs: 4,
            subagent_lane: DEFAULT_SUBAGENT_LANE,
            cron_lane: DEFAULT_CRON_LANE,
            heartbeat_min_every_ms: 0,
        }
    }
}

/// One board's profile.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoardProfile {
    pub name: String,
    pub model_match: String,
    pub target: String,
    pub ram_mb: u64,
    pub cores: usize,
    pub gateway: GatewayProfile,
    pub lanes: Lanes,
    pub embedder: EmbedderProfile,
    pub sandbox: SandboxProfile,
    pub media: MediaProfile,
    /// Shortest heartbeat interval on this board, in minutes (a longer configured one stays).
    #[serde(default)]
    pub heartbeat_min_every_minutes: Option<u64>,
    /// The model string read from the device tree, when there was one.
    #[serde(skip)]
    pub model: Option<String>,
}

impl BoardProfile {
    /// The limits this board gets.
    pub fn limits(&self) -> BoardLimits {
        BoardLimits {
            max_connections: self.gateway.max_connections,
            max_buffered_bytes: self.gateway.max_buffered_bytes,
            max_concurrent_runs: self.lanes.global,
            subagent_lane: self.lanes.subagent,
            cron_lane: self.lanes.cron,
            heartbeat_min_every_ms: self.heartbeat_min_every_minutes.map_or(0, |m| m * 60_000),
            ..BoardLimits::default()
        }
    }
}

/// All built-in profiles.
pub fn profiles() -> Vec<BoardProfile> {
    PROFILES
        .iter()
        .map(|text| {
            json5::from_str(text).expect("built-in board profiles are valid (checked by a test)")
        })
        .collect()
}

/// The profile for a device-tree model string (the generic one when none matches).
pub fn for_model(model: Option<&str>) -> BoardProfile {
    let all = profiles();
    let chosen = model
        .and_then(|m| {
            all.iter()
                .find(|p| !p.model_match.is_empty() && m.contains(&p.model_match))
        })
        .or_else(|| all.iter().find(|p| p.model_match.is_empty()))
        .cloned()
        .expect("the generic profile is built in");
    BoardProfile {
        model: model.map(str::to_string),
        ..chosen
    }
}

/// Reads the device tree and picks the profile, once per process: neither changes while it runs, and
/// parsing the built-in profiles costs more than a turn's own work (exec's sandbox policy asks every turn).
pub fn detect() -> BoardProfile {
    static DETECTED: std::sync::OnceLock<BoardProfile> = std::sync::OnceLock::new();
    DETECTED
        .get_or_init(|| {
            let model = MODEL_PATHS
                .iter()
                .find_map(|p| std::fs::read_to_string(p).ok())
                .map(|m| m.trim_end_matches('\0').trim().to_string());
            let env = std::env::var(MAX_CONNECTIONS_ENV).ok();
            with_overrides(for_model(model.as_deref()), env.as_deref())
        })
        .clone()
}

/// `profile` with `PINCER_MAX_CONNECTIONS` applied (`value`: the variable's text); a value that is not a
/// positive number is ignored with a warning.
fn with_overrides(mut profile: BoardProfile, value: Option<&str>) -> BoardProfile {
    match value.map(|v| v.trim().parse::<usize>()) {
        Some(Ok(n)) if n > 0 => profile.gateway.max_connections = n,
        Some(_) => {
            log::warn!("{MAX_CONNECTIONS_ENV} must be a positive number; the board's limit stays")
        }
        None => {}
    }
    profile
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_cap_can_be_overridden_from_the_environment() {
        let generic = for_model(None);
        let raised = with_overrides(generic.clone(), Some("1500"));
        assert_eq!(raised.limits().max_connections, 1500);
        let kept = with_overrides(generic.clone(), Some("lots"));
        assert_eq!(
            kept.limits().max_connections,
            generic.limits().max_connections
        );
        let zero = with_overrides(generic.clone(), Some("0"));
        assert_eq!(
            zero.limits().max_connections,
            generic.limits().max_connections
        );
    }

    #[test]
    fn every_profile_parses_and_pi_models_match() {
        assert_eq!(profiles().len(), PROFILES.len());
        assert_eq!(
            for_model(Some("Raspberry Pi Zero 2 W Rev 1.0")).name,
            "pi-zero-2w"
        );
        assert_eq!(
            for_model(Some("Raspberry Pi 4 Model B Rev 1.5")).name,
            "pi4"
        );
        assert_eq!(
            for_model(Some("Raspberry Pi 5 Model B Rev 1.0")).name,
            "pi5"
        );
        assert_eq!(for_model(None).name, "generic");
        assert!(
            for_model(Some("Raspberry Pi Zero 2 W"))
                .limits()
                .max_connections
                < for_model(None).limits().max_connections
        );
    }
}
