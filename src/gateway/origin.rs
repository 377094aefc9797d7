//! Browser origin checks for the WebSocket, as upstream's `checkBrowserOrigin`:
//! a connection whose upgrade carries an `Origin` header is a browser page, and
//! it may connect only when that origin is allowed — listed in
//! `gateway.controlUi.allowedOrigins` (or `*` there), the gateway's own host
//! (the `Host` header) when that host is a private address, a `.local` or
//! `.ts.net` name, or loopback for a local caller; or any loopback page for a
//! caller on this machine. Also where a caller counts as local (loopback, not
//! proxied) or on the LAN. This file decides; `handshake.rs` refuses.

use std::net::IpAddr;

/// An `Origin` header value taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedOrigin {
    /// `scheme://host[:port]`, lower-cased.
    pub origin: String,
    /// `host[:port]`, lower-cased.
    pub host: String,
    /// The host name without port or IPv6 brackets.
    pub hostname: String,
}

/// Why a browser origin was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OriginMatch {
    Allowlist,
    PrivateSameOrigin,
    LocalLoopback,
}

/// `scheme://host[:port]` with nothing else (a trailing `/` allowed); `None`
/// for `null`, paths, credentials or garbage.
pub fn parse_origin(raw: &str) -> Option<ParsedOrigin> {
    let trimmed = raw.trim();
    if trimmed.is_empty() || trimmed == "null" {
        return None;
    }
    let (scheme, rest) = trimmed.split_once("://")?;
    let mut chars = scheme.chars();
    if !chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        || !chars.all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
    {
        return None;
    }
    let host = rest.strip_suffix('/').unwrap_or(rest);
    if host.is_empty() || host.contains(['/', '?', '#', '@', '\\', ' ']) {
        return None;
    }
    let host = host.to_ascii_lowercase();
    let hostname = host_name(&host)?;
    Some(ParsedOrigin {
        origin: format!("{}://{host}", scheme.to_ascii_lowercase()),
        host,
        hostname,
    })
}

/// The name part of `host[:port]` (IPv6 without its brackets).
fn host_name(host: &str) -> Option<String> {
    if let Some(rest) = host.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.starts_with(':')) {
            return None;
        }
        return Some(inside.to_string());
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        Some(_) => return None,
        None => host,
    };
    (!name.is_empty()).then(|| name.to_string())
}

fn is_loopback_name(hostname: &str) -> bool {
    hostname == "localhost"
        || hostname.ends_with(".localhost")
        || hostname.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Loopback or a private LAN address: RFC 1918, link-local, IPv6 unique-local
/// and link-local (and IPv4-mapped forms of those); Tailscale's 100.64/10 is
/// not the LAN.
pub fn is_lan_or_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_private() || v4.is_link_local(),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_lan_or_loopback(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            v6.is_loopback() || (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80
        }
    }
}

/// Upstream's `isPrivateOrLoopbackAddress`: the LAN plus the carrier-grade
/// NAT range Tailscale uses.
fn is_private_or_loopback(ip: IpAddr) -> bool {
    let cgnat =
        matches!(ip, IpAddr::V4(v4) if v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64);
    is_lan_or_loopback(ip) || cgnat
}

/// Whether the gateway's own host name (from `Host`) is one a browser page on
/// it may trust as same-origin.
fn trusted_same_origin_host(hostname: &str, local_client: bool) -> bool {
    if is_loopback_name(hostname) {
        return local_client;
    }
    if let Ok(ip) = hostname.parse::<IpAddr>() {
        return is_private_or_loopback(ip);
    }
    hostname.ends_with(".local") || hostname.ends_with(".ts.net")
}

/// Checks a browser's `Origin` against the allowlist, the gateway's own
/// host and the local-loopback rule, in upstream's order.
pub fn check(
    origin: &str,
    request_host: Option<&str>,
    allowed: &[String],
    local_client: bool,
) -> Result<OriginMatch, &'static str> {
    let parsed = parse_origin(origin).ok_or("origin missing or invalid")?;
    let listed = allowed.iter().map(|a| a.trim().to_ascii_lowercase());
    let listed: Vec<String> = listed
        .map(|a| a.strip_suffix('/').map(str::to_string).unwrap_or(a))
        .collect();
    if listed.iter().any(|a| a == "*" || *a == parsed.origin) {
        return Ok(OriginMatch::Allowlist);
    }
    let request_host = request_host.map(|h| h.trim().to_ascii_lowercase());
    if let Some(host) = request_host.as_deref().filter(|h| !h.is_empty()) {
        if parsed.host == host
            && host_name(host).is_some_and(|name| trusted_same_origin_host(&name, local_client))
        {
            return Ok(OriginMatch::PrivateSameOrigin);
        }
    }
    if local_client && is_loopback_name(&parsed.hostname) {
        return Ok(OriginMatch::LocalLoopback);
    }
    Err("origin not allowed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_parse_as_browsers_send_them() {
        let parsed = parse_origin("HTTP://Pincer.local:18789").expect("origin");
        assert_eq!(parsed.origin, "http://pincer.local:18789");
        assert_eq!(parsed.hostname, "pincer.local");
        assert_eq!(parse_origin("http://[::1]:80").expect("v6").hostname, "::1");
        for bad in ["null", "", "http://x/path", "file://", "http://u@x", "x"] {
            assert_eq!(parse_origin(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn upstream_rules_in_order() {
        let none: Vec<String> = Vec::new();
        // The gateway's own page on a .local name or a private address.
        assert_eq!(
            check(
                "http://pincer.local:18789",
                Some("pincer.local:18789"),
                &none,
                false
            ),
            Ok(OriginMatch::PrivateSameOrigin)
        );
        assert_eq!(
            check(
                "http://192.168.1.5:18789",
                Some("192.168.1.5:18789"),
                &none,
                false
            ),
            Ok(OriginMatch::PrivateSameOrigin)
        );
        // Same host but a public name: refused unless listed.
        assert_eq!(
            check("http://example.com", Some("example.com"), &none, false),
            Err("origin not allowed")
        );
        let listed = vec!["https://Example.com/".to_string()];
        assert_eq!(
            check("https://example.com", Some("example.com"), &listed, false),
            Ok(OriginMatch::Allowlist)
        );
        assert_eq!(
            check("http://evil.test", None, &["*".to_string()], false),
            Ok(OriginMatch::Allowlist)
        );
        // Another page: refused, even from a private address.
        assert_eq!(
            check("http://evil.test", Some("192.168.1.5:18789"), &none, false),
            Err("origin not allowed")
        );
        // A loopback page is fine for a caller on this machine, not for a proxied one.
        assert_eq!(
            check(
                "http://127.0.0.1:5173",
                Some("127.0.0.1:18789"),
                &none,
                true
            ),
            Ok(OriginMatch::LocalLoopback)
        );
        assert_eq!(
            check(
                "http://localhost:18789",
                Some("localhost:18789"),
                &none,
                false
            ),
            Err("origin not allowed")
        );
        assert_eq!(
            check("null", None, &none, true),
            Err("origin missing or invalid")
        );
    }

    #[test]
    fn the_lan_is_private_ranges_and_loopback_not_tailscale() {
        for lan in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.9",
            "192.168.0.2",
            "169.254.1.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:192.168.1.2",
        ] {
            assert!(is_lan_or_loopback(lan.parse().expect("ip")), "{lan}");
        }
        for not_lan in ["100.64.0.1", "8.8.8.8", "2001:db8::1", "::ffff:8.8.8.8"] {
            assert!(
                !is_lan_or_loopback(not_lan.parse().expect("ip")),
                "{not_lan}"
            );
        }
    }
}
