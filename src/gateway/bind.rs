//! Where the gateway listens: `gateway.bind` resolved to socket addresses,
//! and the rule that nothing beyond loopback is served without a secret the
//! owner set.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::config::BindMode;

/// The addresses to listen on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindPlan {
    pub addrs: Vec<SocketAddr>,
    /// Every address is loopback.
    pub loopback_only: bool,
}

/// The Tailscale (CGNAT) range 100.64.0.0/10.
pub fn is_tailnet(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    o[0] == 100 && (o[1] & 0xC0) == 64
}

/// The host's IPv4 addresses (via getifaddrs).
pub fn host_ipv4_addresses() -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return out;
    }
    let mut cursor = list;
    while !cursor.is_null() {
        // SAFETY: `cursor` walks the list getifaddrs returned.
        let entry = unsafe { &*cursor };
        if !entry.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr of the family it names.
            let family = unsafe { (*entry.ifa_addr).sa_family } as i32;
            if family == libc::AF_INET {
                // SAFETY: AF_INET addresses are sockaddr_in.
                let sin = unsafe { &*(entry.ifa_addr as *const libc::sockaddr_in) };
                out.push(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
            }
        }
        cursor = entry.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs.
    unsafe { libc::freeifaddrs(list) };
    out
}

fn in_container() -> bool {
    std::path::Path::new("/.dockerenv").exists()
        || std::path::Path::new("/run/.containerenv").exists()
}

/// Resolves `gateway.bind` (and `customBindHost`) for `port`.
pub fn resolve(mode: &BindMode, custom_host: Option<&str>, port: u16) -> Result<BindPlan, String> {
    let loopback = || BindPlan {
        addrs: vec![
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port),
        ],
        loopback_only: true,
    };
    let all = || BindPlan {
        addrs: vec![SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)],
        loopback_only: false,
    };
    Ok(match mode {
        BindMode::Loopback => loopback(),
        BindMode::Lan => all(),
        BindMode::Auto => {
            if in_container() {
                all()
            } else {
                loopback()
            }
        }
        BindMode::Tailnet => match host_ipv4_addresses().into_iter().find(|ip| is_tailnet(*ip)) {
            Some(ip) => BindPlan {
                addrs: vec![SocketAddr::new(IpAddr::V4(ip), port)],
                loopback_only: false,
            },
            None => {
                log::warn!("gateway.bind is \"tailnet\" but no 100.64.0.0/10 address is up; listening on loopback");
                loopback()
            }
        },
        BindMode::Custom => {
            let host = custom_host
                .ok_or("gateway.bind is \"custom\" but gateway.customBindHost is not set")?;
            let ip: Ipv4Addr = host.parse().map_err(|_| {
                format!("gateway.customBindHost must be an IPv4 address, got {host:?}")
            })?;
            BindPlan {
                addrs: vec![SocketAddr::new(IpAddr::V4(ip), port)],
                loopback_only: ip.is_loopback(),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tailnet_range_is_cgnat() {
        assert!(is_tailnet("100.64.0.1".parse().expect("ip")));
        assert!(is_tailnet("100.127.255.254".parse().expect("ip")));
        assert!(!is_tailnet("100.128.0.1".parse().expect("ip")));
        assert!(!is_tailnet("192.168.1.2".parse().expect("ip")));
    }

    #[test]
    fn modes_resolve() {
        let plan = resolve(&BindMode::Loopback, None, 18789).expect("loopback");
        assert!(plan.loopback_only);
        assert_eq!(plan.addrs[0].to_string(), "127.0.0.1:18789");
        let plan = resolve(&BindMode::Lan, None, 1).expect("lan");
        assert!(!plan.loopback_only);
        let err = resolve(&BindMode::Custom, Some("host.example"), 1).expect_err("ipv4 only");
        assert!(err.contains("customBindHost"));
        assert!(resolve(&BindMode::Custom, None, 1).is_err());
        assert!(
            resolve(&BindMode::Custom, Some("127.0.0.2"), 1)
                .expect("custom")
                .loopback_only
        );
    }
}
