//! Board profiles: per-board limits from `board/*.json5` (built into the
//! binary), picked by the device-tree model string at start.

use serde::Deserialize;

use crate::gateway::state::GatewayLimits;

const PROFILES: &[&str] = &[
    include_str!("../../board/pi-zero-2w.json5"),
    include_str!("../../board/pi3.json5"),
    include_str!("../../board/pi4.json5"),
    include_str!("../../board/pi5.json5"),
    include_str!("../../board/generic.json5"),
];

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
    /// Shortest heartbeat interval on this board, in minutes (a longer configured one stays).
    #[serde(default)]
    pub heartbeat_min_every_minutes: Option<u64>,
    /// The model string read from the device tree, when there was one.
    #[serde(skip)]
    pub model: Option<String>,
}

impl BoardProfile {
    /// The gateway limits this board gets.
    pub fn limits(&self) -> GatewayLimits {
        GatewayLimits {
            max_connections: self.gateway.max_connections,
            max_buffered_bytes: self.gateway.max_buffered_bytes,
            max_concurrent_runs: self.lanes.global,
            subagent_lane: self.lanes.subagent,
            cron_lane: self.lanes.cron,
            heartbeat_min_every_ms: self.heartbeat_min_every_minutes.map_or(0, |m| m * 60_000),
            ..GatewayLimits::default()
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

/// Reads the device tree and picks the profile.
pub fn detect() -> BoardProfile {
    let model = MODEL_PATHS
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|m| m.trim_end_matches('\0').trim().to_string());
    for_model(model.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

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
