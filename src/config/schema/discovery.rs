//! The `discovery` section: `discovery.mdns.mode`, how the gateway
//! advertises itself on the LAN (`_openclaw-gw._tcp`, see
//! `gateway/discovery.rs`). Values and default follow OpenClaw's
//! `discovery.mdns.mode` (off, minimal, full; default minimal). Upstream's
//! unicast DNS-SD keys (`discovery.wideArea.*`) are not supported
//! (`unsupported.rs`). A change needs a restart, as upstream.

use serde::{Deserialize, Serialize};

/// How much the mDNS advertisement says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MdnsMode {
    /// Nothing is advertised.
    Off,
    /// The service without `sshPort`, `cliPath` and `tailnetDns`.
    #[default]
    Minimal,
    /// The service with every TXT key.
    Full,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MdnsConfig {
    pub mode: MdnsMode,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DiscoveryConfig {
    pub mdns: MdnsConfig,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_defaults_to_minimal_and_reads_upstream_names() {
        assert_eq!(DiscoveryConfig::default().mdns.mode, MdnsMode::Minimal);
        let parsed: DiscoveryConfig =
            serde_json::from_str(r#"{"mdns":{"mode":"off"}}"#).expect("valid section");
        assert_eq!(parsed.mdns.mode, MdnsMode::Off);
        let bad = serde_json::from_str::<DiscoveryConfig>(r#"{"mdns":{"mode":"loud"}}"#);
        assert!(bad.is_err());
    }
}
