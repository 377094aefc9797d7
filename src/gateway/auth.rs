//! Shared-secret authentication and its failure rate limiter.
//!
//! The gateway's secret is a token or a password (`gateway.auth`); both are
//! compared in constant time. Repeated failures from one address lock it out
//! for a while, loopback excepted by default. Device identity is checked in
//! `device_auth.rs`, pairing in `pairing.rs`.

use std::collections::HashMap;
use std::net::IpAddr;

use parking_lot::Mutex;
use subtle::ConstantTimeEq;

/// The most addresses the limiter remembers; the stalest is forgotten first.
pub const MAX_TRACKED_ADDRESSES: usize = 4096;

/// What the gateway accepts as a shared secret.
#[derive(Clone, PartialEq, Eq)]
pub enum SharedSecret {
    /// `gateway.auth.mode: "none"`: anyone who can reach the port.
    None,
    Token(String),
    Password(String),
}

impl std::fmt::Debug for SharedSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SharedSecret::None => f.write_str("None"),
            SharedSecret::Token(_) => f.write_str("Token(<redacted>)"),
            SharedSecret::Password(_) => f.write_str("Password(<redacted>)"),
        }
    }
}

impl SharedSecret {
    /// `hello-ok.snapshot.authMode`.
    pub fn mode_name(&self) -> &'static str {
        match self {
            SharedSecret::None => "none",
            SharedSecret::Token(_) => "token",
            SharedSecret::Password(_) => "password",
        }
    }
}

/// The credentials a client presented (`connect.params.auth`, or a bearer).
#[derive(Debug, Clone, Default)]
pub struct PresentedAuth {
    pub token: Option<String>,
    pub password: Option<String>,
    pub device_token: Option<String>,
}

/// Why shared-secret auth failed: upstream's detail code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthFailure {
    pub code: &'static str,
    pub message: String,
}

/// Constant-time string equality.
pub fn secrets_equal(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Checks presented credentials against the gateway's shared secret.
pub fn check_shared_secret(
    secret: &SharedSecret,
    presented: &PresentedAuth,
) -> Result<(), AuthFailure> {
    match secret {
        SharedSecret::None => Ok(()),
        SharedSecret::Token(expected) => match presented.token.as_deref().filter(|t| !t.is_empty()) {
            None => Err(AuthFailure {
                code: "AUTH_TOKEN_MISSING",
                message: "unauthorized: gateway token missing (set auth.token to the gateway's token: OPENCLAW_GATEWAY_TOKEN)".into(),
            }),
            Some(t) if secrets_equal(t, expected) => Ok(()),
            Some(_) => Err(AuthFailure {
                code: "AUTH_TOKEN_MISMATCH",
                message: "unauthorized: gateway token mismatch (the token does not match gateway.auth.token)".into(),
            }),
        },
        SharedSecret::Password(expected) => {
            match presented.password.as_deref().filter(|p| !p.is_empty()) {
                None => Err(AuthFailure {
                    code: "AUTH_PASSWORD_MISSING",
                    message: "unauthorized: gateway password missing (set auth.password: OPENCLAW_GATEWAY_PASSWORD)".into(),
                }),
                Some(p) if secrets_equal(p, expected) => Ok(()),
                Some(_) => Err(AuthFailure {
                    code: "AUTH_PASSWORD_MISMATCH",
                    message: "unauthorized: gateway password mismatch".into(),
                }),
            }
        }
    }
}

/// Limits from `gateway.auth.rateLimit`.
#[derive(Debug, Clone, Copy)]
pub struct RateLimitPolicy {
    pub max_attempts: u32,
    pub window_ms: u64,
    pub lockout_ms: u64,
    pub exempt_loopback: bool,
}

#[derive(Debug, Clone, Copy)]
struct Attempts {
    window_start_ms: u64,
    failures: u32,
    locked_until_ms: u64,
    last_seen_ms: u64,
}

/// Counts auth failures per address and locks out repeat offenders.
#[derive(Debug)]
pub struct AuthRateLimiter {
    policy: RateLimitPolicy,
    entries: Mutex<HashMap<IpAddr, Attempts>>,
}

impl AuthRateLimiter {
    pub fn new(policy: RateLimitPolicy) -> Self {
        AuthRateLimiter {
            policy,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn exempt(&self, ip: IpAddr) -> bool {
        self.policy.exempt_loopback && ip.is_loopback()
    }

    /// `Some(ms)` when `ip` is locked out: how long until it may try again.
    pub fn locked_for(&self, ip: IpAddr, now_ms: u64) -> Option<u64> {
        if self.exempt(ip) {
            return None;
        }
        let entries = self.entries.lock();
        let entry = entries.get(&ip)?;
        (entry.locked_until_ms > now_ms).then(|| entry.locked_until_ms - now_ms)
    }

    /// Records one failure; returns the lockout length when this one locked `ip` out.
    pub fn record_failure(&self, ip: IpAddr, now_ms: u64) -> Option<u64> {
        if self.exempt(ip) {
            return None;
        }
        let mut entries = self.entries.lock();
        if entries.len() >= MAX_TRACKED_ADDRESSES && !entries.contains_key(&ip) {
            let stalest = entries
                .iter()
                .min_by_key(|(_, a)| a.last_seen_ms)
                .map(|(ip, _)| *ip);
            if let Some(stalest) = stalest {
                entries.remove(&stalest);
            }
        }
        let entry = entries.entry(ip).or_insert(Attempts {
            window_start_ms: now_ms,
            failures: 0,
            locked_until_ms: 0,
            last_seen_ms: now_ms,
        });
        if now_ms.saturating_sub(entry.window_start_ms) > self.policy.window_ms {
            entry.window_start_ms = now_ms;
            entry.failures = 0;
        }
        entry.failures += 1;
        entry.last_seen_ms = now_ms;
        if entry.failures >= self.policy.max_attempts {
            entry.locked_until_ms = now_ms + self.policy.lockout_ms;
            entry.failures = 0;
            entry.window_start_ms = now_ms;
            return Some(self.policy.lockout_ms);
        }
        None
    }

    /// Forgets an address after a successful login.
    pub fn record_success(&self, ip: IpAddr) {
        let mut entries = self.entries.lock();
        entries.remove(&ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn presented(token: Option<&str>) -> PresentedAuth {
        PresentedAuth {
            token: token.map(String::from),
            ..Default::default()
        }
    }

    #[test]
    fn token_auth_distinguishes_missing_and_mismatch() {
        let secret = SharedSecret::Token("abc".into());
        assert!(check_shared_secret(&secret, &presented(Some("abc"))).is_ok());
        assert_eq!(
            check_shared_secret(&secret, &presented(None))
                .expect_err("missing")
                .code,
            "AUTH_TOKEN_MISSING"
        );
        assert_eq!(
            check_shared_secret(&secret, &presented(Some("abd")))
                .expect_err("mismatch")
                .code,
            "AUTH_TOKEN_MISMATCH"
        );
        assert!(check_shared_secret(&SharedSecret::None, &presented(None)).is_ok());
    }

    #[test]
    fn limiter_locks_after_max_attempts_and_exempts_loopback() {
        let limiter = AuthRateLimiter::new(RateLimitPolicy {
            max_attempts: 3,
            window_ms: 60_000,
            lockout_ms: 300_000,
            exempt_loopback: true,
        });
        let remote: IpAddr = "192.0.2.7".parse().expect("ip");
        assert_eq!(limiter.record_failure(remote, 0), None);
        assert_eq!(limiter.record_failure(remote, 1), None);
        assert_eq!(limiter.record_failure(remote, 2), Some(300_000));
        assert_eq!(limiter.locked_for(remote, 1_000), Some(299_002));
        assert_eq!(limiter.locked_for(remote, 400_000), None);
        let local: IpAddr = "127.0.0.1".parse().expect("ip");
        for i in 0..10 {
            assert_eq!(limiter.record_failure(local, i), None);
        }
        assert_eq!(limiter.locked_for(local, 10), None);
    }

    #[test]
    fn limiter_window_resets_old_failures() {
        let limiter = AuthRateLimiter::new(RateLimitPolicy {
            max_attempts: 2,
            window_ms: 100,
            lockout_ms: 1_000,
            exempt_loopback: false,
        });
        let ip: IpAddr = "127.0.0.1".parse().expect("ip");
        assert_eq!(limiter.record_failure(ip, 0), None);
        assert_eq!(
            limiter.record_failure(ip, 500),
            None,
            "first failure aged out"
        );
        assert_eq!(limiter.record_failure(ip, 501), Some(1_000));
    }
}
