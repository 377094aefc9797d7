//! The `gateway` section: port, bind policy, auth, TLS, Tailscale, reload,
//! HTTP endpoints and web chat settings.
//!
//! Key names and defaults follow OpenClaw's `GatewayConfig`
//! (`src/config/types.gateway.ts`, `zod-schema.ts`). Cross-field rules
//! (custom bind host, trusted-proxy requirements) live in `validate.rs`;
//! this file only declares shapes and defaults.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::de;

/// OpenClaw's default gateway port (`DEFAULT_GATEWAY_PORT`).
pub const DEFAULT_GATEWAY_PORT: u16 = 18789;
/// Default debounce before a changed config file is re-read.
pub const DEFAULT_RELOAD_DEBOUNCE_MS: u64 = 300;
/// Default failed-auth attempts per client before lockout.
pub const DEFAULT_AUTH_MAX_ATTEMPTS: u32 = 10;
/// Default sliding window for counting failed auth attempts.
pub const DEFAULT_AUTH_WINDOW_MS: u64 = 60_000;
/// Default lockout after too many failed auth attempts.
pub const DEFAULT_AUTH_LOCKOUT_MS: u64 = 300_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GatewayConfig {
    /// The one port for WebSocket + HTTP.
    #[serde(deserialize_with = "de::port")]
    pub port: u16,
    /// `local` runs a gateway here; `remote` points clients at another one.
    pub mode: Option<GatewayMode>,
    pub bind: BindMode,
    /// IPv4 address used when `bind` is `custom`.
    pub custom_bind_host: Option<String>,
    pub auth: GatewayAuthConfig,
    pub tls: GatewayTlsConfig,
    pub tailscale: TailscaleConfig,
    pub reload: ReloadConfig,
    pub http: GatewayHttpConfig,
    /// Allow/deny overrides for `POST /tools/invoke`.
    pub tools: GatewayToolsConfig,
    pub webchat: GatewayWebchatConfig,
    /// The browser UI served on the gateway port and who may open it.
    pub control_ui: ControlUiConfig,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            port: DEFAULT_GATEWAY_PORT,
            mode: None,
            bind: BindMode::default(),
            custom_bind_host: None,
            auth: GatewayAuthConfig::default(),
            tls: GatewayTlsConfig::default(),
            tailscale: TailscaleConfig::default(),
            reload: ReloadConfig::default(),
            http: GatewayHttpConfig::default(),
            tools: GatewayToolsConfig::default(),
            webchat: GatewayWebchatConfig::default(),
            control_ui: ControlUiConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GatewayMode {
    Local,
    Remote,
}

/// Which address the gateway listens on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BindMode {
    /// 127.0.0.1 (and ::1 when available).
    #[default]
    Loopback,
    /// 0.0.0.0.
    Lan,
    /// The first Tailscale IPv4, else loopback.
    Tailnet,
    /// 0.0.0.0 inside containers, else loopback.
    Auto,
    /// `customBindHost`.
    Custom,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuthMode {
    None,
    Token,
    Password,
    TrustedProxy,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GatewayAuthConfig {
    /// Unset: password when a password is configured, else token.
    pub mode: Option<AuthMode>,
    pub token: Option<String>,
    pub password: Option<String>,
    pub rate_limit: AuthRateLimitConfig,
}

impl GatewayAuthConfig {
    /// The auth mode in force: the configured one, else password when a
    /// password is set, else token.
    pub fn effective_mode(&self) -> AuthMode {
        match self.mode {
            Some(mode) => mode,
            None if self
                .password
                .as_deref()
                .is_some_and(|p| !p.trim().is_empty()) =>
            {
                AuthMode::Password
            }
            None => AuthMode::Token,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AuthRateLimitConfig {
    /// Failed attempts per client IP before lockout.
    pub max_attempts: u32,
    /// Sliding window for counting failures.
    pub window_ms: u64,
    /// Lockout once the limit is exceeded.
    pub lockout_ms: u64,
    /// Loopback clients are never rate limited.
    pub exempt_loopback: bool,
}

impl Default for AuthRateLimitConfig {
    fn default() -> Self {
        AuthRateLimitConfig {
            max_attempts: DEFAULT_AUTH_MAX_ATTEMPTS,
            window_ms: DEFAULT_AUTH_WINDOW_MS,
            lockout_ms: DEFAULT_AUTH_LOCKOUT_MS,
            exempt_loopback: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GatewayTlsConfig {
    pub enabled: bool,
    /// Generate a self-signed certificate when cert/key are missing
    /// (false: TLS without both files refuses to start).
    pub auto_generate: bool,
    pub cert_path: Option<PathBuf>,
    pub key_path: Option<PathBuf>,
}

impl Default for GatewayTlsConfig {
    fn default() -> Self {
        GatewayTlsConfig {
            enabled: false,
            auto_generate: true,
            cert_path: None,
            key_path: None,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TailscaleMode {
    #[default]
    Off,
    Serve,
    Funnel,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TailscaleConfig {
    pub mode: TailscaleMode,
    /// Undo `tailscale serve/funnel` on shutdown.
    pub reset_on_exit: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReloadMode {
    /// Hot-apply what can be, restart for the rest.
    #[default]
    Hybrid,
    Off,
    Hot,
    Restart,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ReloadConfig {
    pub mode: ReloadMode,
    pub debounce_ms: u64,
}

impl Default for ReloadConfig {
    fn default() -> Self {
        ReloadConfig {
            mode: ReloadMode::Hybrid,
            debounce_ms: DEFAULT_RELOAD_DEBOUNCE_MS,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GatewayHttpConfig {
    pub endpoints: HttpEndpoints,
}

/// The OpenAI-compatible endpoint, off by default (upstream's
/// `responses` endpoint is not served: see `unsupported.rs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct HttpEndpoints {
    /// `POST /v1/chat/completions`.
    pub chat_completions: EndpointToggle,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct EndpointToggle {
    pub enabled: bool,
    /// Request body cap in bytes (pincer's default 4 MiB; upstream's 20 MB).
    pub max_body_bytes: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GatewayToolsConfig {
    /// Tools to remove from the default HTTP deny list.
    pub allow: Vec<String>,
    /// Tools to add to the default HTTP deny list.
    pub deny: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct GatewayWebchatConfig {
    /// Cap on characters returned by `chat.history` (max 500000).
    pub chat_history_max_chars: Option<u32>,
}

/// `gateway.controlUi`: upstream's `enabled`, `basePath`, `allowedOrigins`
/// and `allowInsecureAuth` (its other keys are refused: `unsupported.rs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ControlUiConfig {
    /// Serve the Control UI on the gateway port (default true).
    pub enabled: bool,
    /// Path prefix the UI is served under (`/pincer`); empty or `/`: the root.
    pub base_path: Option<String>,
    /// Browser origins allowed to open a WebSocket besides the gateway's own
    /// host (`*` allows any).
    pub allowed_origins: Vec<String>,
    /// A Control UI on this host (loopback, not proxied) may connect with the
    /// shared secret alone, without a device identity.
    pub allow_insecure_auth: bool,
}

impl Default for ControlUiConfig {
    fn default() -> Self {
        ControlUiConfig {
            enabled: true,
            base_path: None,
            allowed_origins: Vec::new(),
            allow_insecure_auth: false,
        }
    }
}

impl ControlUiConfig {
    /// The base path as upstream normalises it: empty for the root, else
    /// `/prefix` without a trailing slash.
    pub fn normalized_base_path(&self) -> String {
        let value = self.base_path.as_deref().unwrap_or("").trim();
        let trimmed = value.trim_matches('/');
        if trimmed.is_empty() {
            String::new()
        } else {
            format!("/{trimmed}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_openclaw() {
        let gateway = GatewayConfig::default();
        assert_eq!(gateway.port, 18789);
        assert_eq!(gateway.bind, BindMode::Loopback);
        assert_eq!(gateway.reload.mode, ReloadMode::Hybrid);
        assert_eq!(gateway.reload.debounce_ms, 300);
        assert!(gateway.tls.auto_generate);
        assert!(!gateway.http.endpoints.chat_completions.enabled);
        let limit = &gateway.auth.rate_limit;
        assert_eq!(
            (limit.max_attempts, limit.window_ms, limit.lockout_ms),
            (10, 60_000, 300_000)
        );
        assert!(limit.exempt_loopback);
        assert!(gateway.control_ui.enabled);
        assert!(!gateway.control_ui.allow_insecure_auth);
        assert_eq!(gateway.control_ui.normalized_base_path(), "");
    }

    #[test]
    fn base_path_is_normalised_as_upstream() {
        let mut ui = ControlUiConfig::default();
        for (raw, want) in [
            ("/", ""),
            ("pincer", "/pincer"),
            ("/pincer/", "/pincer"),
            (" /a/b ", "/a/b"),
        ] {
            ui.base_path = Some(raw.into());
            assert_eq!(ui.normalized_base_path(), want, "{raw:?}");
        }
    }

    #[test]
    fn unset_auth_mode_is_password_when_a_password_is_set() {
        let mut auth = GatewayAuthConfig::default();
        assert_eq!(auth.effective_mode(), AuthMode::Token);
        auth.password = Some("hunter2".into());
        assert_eq!(auth.effective_mode(), AuthMode::Password);
        auth.mode = Some(AuthMode::None);
        assert_eq!(auth.effective_mode(), AuthMode::None);
    }
}
