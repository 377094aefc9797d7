//! LAN discovery: the gateway advertises itself over mDNS / DNS-SD as
//! `_openclaw-gw._tcp.local.`, with the TXT keys OpenClaw's gateway
//! publishes, so `openclaw gateway discover` and OpenClaw's apps find it.
//!
//! What is advertised follows upstream's bonjour advertiser and its
//! discovery runtime: `discovery.mdns.mode` `off` advertises nothing,
//! `minimal` (the default) leaves out `sshPort`, `cliPath` and `tailnetDns`,
//! `full` adds them; `OPENCLAW_DISABLE_BONJOUR` (truthy) turns it off and
//! `OPENCLAW_MDNS_HOSTNAME`, `OPENCLAW_SSH_PORT`, `OPENCLAW_CLI_PATH` and
//! `OPENCLAW_TAILNET_DNS` are read as upstream reads them.
//!
//! The responder is the `mdns-sd` crate (pure Rust, one thread of its own):
//! it probes the instance name, answers the PTR/SRV/TXT records and
//! `<host>.local` A/AAAA for the addresses of every interface, re-announces
//! when an address appears (it checks the interfaces every 5 s), and sends
//! goodbye packets (TTL 0) when [`Advertiser::stop`] withdraws the service.
//! When avahi-daemon runs on the host it answers `<host>.local` too; the
//! records are the same (the host's name and addresses), which mDNS treats
//! as shared, not as a conflict, so pincer still advertises on its own.
//! This file owns the records only: the gateway decides when to start and
//! stop (`gateway/mod.rs`).

use std::path::Path;
use std::time::Duration;

use mdns_sd::{ServiceDaemon, ServiceInfo, UnregisterStatus};

use crate::config::MdnsMode;

/// The DNS-SD service type OpenClaw's clients browse for.
pub const SERVICE_TYPE: &str = "_openclaw-gw._tcp.local.";
/// Longest DNS label, in bytes (RFC 1035): instance and host names are one label each.
pub const MAX_DNS_LABEL_BYTES: usize = 63;
/// SSH port advertised in `full` mode when `OPENCLAW_SSH_PORT` is unset (upstream's default).
pub const DEFAULT_SSH_PORT: u16 = 22;
/// How long [`Advertiser::stop`] waits for the goodbye packets to be sent.
pub const GOODBYE_WAIT_MS: u64 = 2_000;
/// avahi-daemon's socket: present while avahi runs on this host.
pub const AVAHI_SOCKET: &str = "/run/avahi-daemon/socket";

/// What the gateway knows about itself that the advertisement carries.
#[derive(Debug, Clone)]
pub struct GatewayFacts {
    pub mode: MdnsMode,
    pub port: u16,
    /// SHA-256 fingerprint of the TLS certificate when TLS is on.
    pub tls_fingerprint: Option<String>,
    /// The gateway listens beyond loopback (upstream's `gatewayDirectReachable`).
    pub direct_reachable: bool,
    /// The system host name (`gethostname`).
    pub system_host: String,
}

/// The records to publish: instance name, host label and TXT keys in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertisement {
    pub instance: String,
    /// The mDNS host label; the SRV target is `<host>.local.`.
    pub host: String,
    pub port: u16,
    pub txt: Vec<(String, String)>,
}

/// The advertisement for `facts`, or `None` when nothing is to be advertised
/// (mode `off` or `OPENCLAW_DISABLE_BONJOUR`). `env` reads a variable.
pub fn plan(facts: &GatewayFacts, env: &dyn Fn(&str) -> Option<String>) -> Option<Advertisement> {
    if facts.mode == MdnsMode::Off || disabled_by_env(env("OPENCLAW_DISABLE_BONJOUR")) {
        return None;
    }
    let minimal = facts.mode != MdnsMode::Full;
    let host = mdns_host_label(env("OPENCLAW_MDNS_HOSTNAME").as_deref(), &facts.system_host);
    let instance = truncate_label(&instance_name(&facts.system_host), "OpenClaw");
    let display = display_name(&instance);
    let mut txt: Vec<(String, String)> = vec![
        ("role".into(), "gateway".into()),
        ("gatewayPort".into(), facts.port.to_string()),
        ("lanHost".into(), format!("{host}.local")),
        ("displayName".into(), display),
    ];
    if let Some(fingerprint) = &facts.tls_fingerprint {
        txt.push(("gatewayTls".into(), "1".into()));
        txt.push(("gatewayTlsSha256".into(), fingerprint.clone()));
    }
    if facts.direct_reachable {
        txt.push(("gatewayDirectReachable".into(), "1".into()));
    }
    if !minimal {
        if let Some(dns) = trimmed(env("OPENCLAW_TAILNET_DNS")) {
            txt.push(("tailnetDns".into(), dns.trim_end_matches('.').to_string()));
        }
        let cli = trimmed(env("OPENCLAW_CLI_PATH")).or_else(|| {
            std::env::current_exe()
                .ok()
                .map(|path| path.display().to_string())
        });
        if let Some(cli) = cli {
            txt.push(("cliPath".into(), cli));
        }
    }
    txt.push(("transport".into(), "gateway".into()));
    if !minimal {
        let ssh = env("OPENCLAW_SSH_PORT")
            .and_then(|raw| raw.trim().parse::<u16>().ok())
            .filter(|port| *port > 0)
            .unwrap_or(DEFAULT_SSH_PORT);
        txt.push(("sshPort".into(), ssh.to_string()));
    }
    Some(Advertisement {
        instance,
        host,
        port: facts.port,
        txt,
    })
}

/// True while avahi-daemon runs on this host (its socket exists).
pub fn avahi_running() -> bool {
    Path::new(AVAHI_SOCKET).exists()
}

/// Upstream's reading of `OPENCLAW_DISABLE_BONJOUR`: truthy disables, anything else does not.
fn disabled_by_env(raw: Option<String>) -> bool {
    let Some(raw) = raw else { return false };
    matches!(
        raw.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

fn trimmed(value: Option<String>) -> Option<String> {
    value
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The host label: `OPENCLAW_MDNS_HOSTNAME`, else the system name's first
/// label when it is a valid DNS label, else `openclaw`; without `.local`.
fn mdns_host_label(override_name: Option<&str>, system_host: &str) -> String {
    let system = first_label(system_host).filter(|label| is_dns_label(label));
    let raw = override_name
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .or(system)
        .unwrap_or_else(|| "openclaw".into());
    let label = first_label(&raw).unwrap_or_else(|| "openclaw".into());
    truncate_label(&label, "openclaw")
}

fn first_label(name: &str) -> Option<String> {
    let name = name.trim();
    let name = strip_local(name);
    let label = name.split('.').next().unwrap_or("").trim();
    (!label.is_empty()).then(|| label.to_string())
}

fn strip_local(name: &str) -> &str {
    let lower = name.to_ascii_lowercase();
    if lower.ends_with(".local") {
        &name[..name.len() - ".local".len()]
    } else {
        name
    }
}

fn is_dns_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_DNS_LABEL_BYTES
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

/// `<machine> (OpenClaw)`, unless the machine's name already says OpenClaw.
fn instance_name(system_host: &str) -> String {
    let machine = strip_local(system_host.trim()).trim();
    if machine.is_empty() {
        return "OpenClaw".into();
    }
    if machine.to_ascii_lowercase().contains("openclaw") {
        return machine.to_string();
    }
    format!("{machine} (OpenClaw)")
}

/// The instance name without its ` (OpenClaw)` suffix.
fn display_name(instance: &str) -> String {
    let normalized = instance.split_whitespace().collect::<Vec<_>>().join(" ");
    let lower = normalized.to_ascii_lowercase();
    let stripped = if lower.ends_with(" (openclaw)") {
        normalized[..normalized.len() - " (openclaw)".len()].trim()
    } else {
        normalized.as_str()
    };
    if stripped.is_empty() {
        normalized
    } else {
        stripped.to_string()
    }
}

/// At most [`MAX_DNS_LABEL_BYTES`] bytes, cut on a character boundary, trailing dashes dropped.
fn truncate_label(name: &str, fallback: &str) -> String {
    if name.len() <= MAX_DNS_LABEL_BYTES {
        return name.to_string();
    }
    let mut end = MAX_DNS_LABEL_BYTES;
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let cut = name[..end].trim_end_matches('-').trim();
    if cut.is_empty() {
        fallback.to_string()
    } else {
        cut.to_string()
    }
}

/// Why advertising could not start.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("mDNS responder could not start: {0}")]
    Responder(String),
    #[error("mDNS service {instance:?} could not be registered: {reason}")]
    Register { instance: String, reason: String },
}

/// A running advertisement; [`Advertiser::stop`] withdraws it.
pub struct Advertiser {
    daemon: ServiceDaemon,
    fullname: String,
    advertisement: Advertisement,
}

impl Advertiser {
    /// Starts the responder and registers `advertisement` on every
    /// interface, its addresses kept current by the responder.
    pub fn start(advertisement: Advertisement) -> Result<Advertiser, DiscoveryError> {
        let daemon = ServiceDaemon::new().map_err(|e| DiscoveryError::Responder(e.to_string()))?;
        let register = |reason: String| DiscoveryError::Register {
            instance: advertisement.instance.clone(),
            reason,
        };
        let txt: Vec<(&str, &str)> = advertisement
            .txt
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let info = ServiceInfo::new(
            SERVICE_TYPE,
            &advertisement.instance,
            &format!("{}.local.", advertisement.host),
            "",
            advertisement.port,
            txt.as_slice(),
        )
        .map_err(|e| register(e.to_string()))?
        .enable_addr_auto();
        let fullname = info.get_fullname().to_string();
        if let Err(e) = daemon.register(info) {
            let _ = daemon.shutdown();
            return Err(register(e.to_string()));
        }
        Ok(Advertiser {
            daemon,
            fullname,
            advertisement,
        })
    }

    /// What is advertised.
    pub fn advertisement(&self) -> &Advertisement {
        &self.advertisement
    }

    /// Withdraws the service (goodbye packets, TTL 0) and stops the
    /// responder, waiting at most [`GOODBYE_WAIT_MS`]. Blocking.
    pub fn stop(self) {
        let wait = Duration::from_millis(GOODBYE_WAIT_MS);
        match self.daemon.unregister(&self.fullname) {
            Ok(status) => match status.recv_timeout(wait) {
                Ok(UnregisterStatus::OK) => log::info!("mDNS: withdrew {}", self.fullname),
                Ok(UnregisterStatus::NotFound) => {
                    log::warn!("mDNS: {} was not registered", self.fullname)
                }
                Err(e) => log::warn!("mDNS: no answer withdrawing {}: {e}", self.fullname),
            },
            Err(e) => log::warn!("mDNS: cannot withdraw {}: {e}", self.fullname),
        }
        if let Ok(done) = self.daemon.shutdown() {
            let _ = done.recv_timeout(wait);
        }
    }
}

/// Starts advertising what `facts` and the environment ask for; logs and
/// returns `None` when that is nothing or when the responder fails (the
/// gateway serves on without discovery, as upstream's does).
pub fn start(facts: &GatewayFacts) -> Option<Advertiser> {
    let Some(advertisement) = plan(facts, &|name| std::env::var(name).ok()) else {
        log::info!("mDNS: not advertising (discovery.mdns.mode off or OPENCLAW_DISABLE_BONJOUR)");
        return None;
    };
    if avahi_running() {
        log::info!(
            "mDNS: avahi-daemon runs here and answers {}.local as well; pincer advertises the service itself",
            advertisement.host
        );
    }
    match Advertiser::start(advertisement) {
        Ok(advertiser) => {
            let ad = advertiser.advertisement();
            log::info!(
                "mDNS: advertising {:?} as {SERVICE_TYPE} on {}.local port {}",
                ad.instance,
                ad.host,
                ad.port
            );
            Some(advertiser)
        }
        Err(e) => {
            log::warn!("{e}; the gateway runs without LAN discovery");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn facts(mode: MdnsMode) -> GatewayFacts {
        GatewayFacts {
            mode,
            port: 18789,
            tls_fingerprint: None,
            direct_reachable: false,
            system_host: "pi.lan".into(),
        }
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn keys(ad: &Advertisement) -> Vec<&str> {
        ad.txt.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn minimal_mode_publishes_upstream_keys_without_ssh_and_cli() {
        let ad = plan(&facts(MdnsMode::Minimal), &env_of(&[])).expect("advertised");
        assert_eq!(ad.instance, "pi.lan (OpenClaw)");
        assert_eq!(ad.host, "pi");
        assert_eq!(
            ad.txt,
            vec![
                ("role".to_string(), "gateway".to_string()),
                ("gatewayPort".into(), "18789".into()),
                ("lanHost".into(), "pi.local".into()),
                ("displayName".into(), "pi.lan".into()),
                ("transport".into(), "gateway".into()),
            ]
        );
    }

    #[test]
    fn full_mode_adds_ssh_cli_and_tailnet() {
        let env = env_of(&[
            ("OPENCLAW_SSH_PORT", "2222"),
            ("OPENCLAW_CLI_PATH", "/usr/bin/pincer"),
            ("OPENCLAW_TAILNET_DNS", "pi.tail1.ts.net."),
        ]);
        let ad = plan(&facts(MdnsMode::Full), &env).expect("advertised");
        let get = |key: &str| {
            ad.txt
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("sshPort"), Some("2222"));
        assert_eq!(get("cliPath"), Some("/usr/bin/pincer"));
        assert_eq!(get("tailnetDns"), Some("pi.tail1.ts.net"));
        let minimal = plan(&facts(MdnsMode::Minimal), &env).expect("advertised");
        assert!(!keys(&minimal).contains(&"sshPort"));
        assert!(!keys(&minimal).contains(&"cliPath"));
        assert!(!keys(&minimal).contains(&"tailnetDns"));
        let default_ssh = plan(&facts(MdnsMode::Full), &env_of(&[])).expect("advertised");
        assert!(default_ssh
            .txt
            .contains(&("sshPort".to_string(), "22".to_string())));
    }

    #[test]
    fn tls_and_direct_reach_are_announced() {
        let mut f = facts(MdnsMode::Minimal);
        f.tls_fingerprint = Some("AB:CD".into());
        f.direct_reachable = true;
        let ad = plan(&f, &env_of(&[])).expect("advertised");
        assert_eq!(
            keys(&ad),
            vec![
                "role",
                "gatewayPort",
                "lanHost",
                "displayName",
                "gatewayTls",
                "gatewayTlsSha256",
                "gatewayDirectReachable",
                "transport"
            ]
        );
        assert!(ad
            .txt
            .contains(&("gatewayTlsSha256".to_string(), "AB:CD".to_string())));
    }

    #[test]
    fn off_mode_and_disable_variable_advertise_nothing() {
        assert_eq!(plan(&facts(MdnsMode::Off), &env_of(&[])), None);
        let off = env_of(&[("OPENCLAW_DISABLE_BONJOUR", "1")]);
        assert_eq!(plan(&facts(MdnsMode::Full), &off), None);
        let not_off = env_of(&[("OPENCLAW_DISABLE_BONJOUR", "0")]);
        assert!(plan(&facts(MdnsMode::Minimal), &not_off).is_some());
    }

    #[test]
    fn host_label_comes_from_override_system_or_default() {
        let env = env_of(&[("OPENCLAW_MDNS_HOSTNAME", "kitchen.local")]);
        assert_eq!(
            plan(&facts(MdnsMode::Minimal), &env).expect("ad").host,
            "kitchen"
        );
        let mut f = facts(MdnsMode::Minimal);
        f.system_host = "bad_name!".into();
        assert_eq!(plan(&f, &env_of(&[])).expect("ad").host, "openclaw");
        f.system_host = "my-openclaw-box".into();
        let ad = plan(&f, &env_of(&[])).expect("ad");
        assert_eq!(ad.instance, "my-openclaw-box");
        assert_eq!(ad.host, "my-openclaw-box");
    }

    #[test]
    fn long_names_are_cut_to_one_dns_label() {
        let mut f = facts(MdnsMode::Minimal);
        f.system_host = "é".repeat(40);
        let ad = plan(&f, &env_of(&[])).expect("ad");
        assert!(ad.instance.len() <= MAX_DNS_LABEL_BYTES);
        assert!(ad.instance.starts_with('é'));
        assert_eq!(ad.host, "openclaw");
    }
}
