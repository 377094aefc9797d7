//! The `tools` section (global tool policy, exec, filesystem, web fetch and
//! search, loop detection, sub-agent and sandbox tool policies) and the per-agent `agents.list[].tools` block.
//!
//! Names follow OpenClaw's `ToolsSchema` / `AgentToolsSchema`. Exec keys are
//! optional so an agent's block can override the global one key by key;
//! the `effective_*` helpers give upstream's defaults (host auto, security
//! deny, ask on-miss).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::common::{SandboxToolsScope, ToolPolicy, ToolProfile, ToolsScope};

/// Hard cap on characters returned by `web_fetch` (upstream's default).
pub const DEFAULT_WEB_FETCH_MAX_CHARS_CAP: u32 = 20_000;
/// Redirects `web_fetch` follows.
pub const DEFAULT_WEB_FETCH_MAX_REDIRECTS: u32 = 3;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ToolsConfig {
    pub profile: Option<ToolProfile>,
    pub allow: Vec<String>,
    pub also_allow: Vec<String>,
    pub deny: Vec<String>,
    /// Policy overrides keyed by provider id or `provider/model`.
    pub by_provider: BTreeMap<String, ToolPolicy>,
    pub web: WebToolsConfig,
    pub exec: ExecToolConfig,
    pub fs: FsToolsConfig,
    pub sessions: SessionToolsConfig,
    pub agent_to_agent: AgentToAgentConfig,
    pub loop_detection: Option<LoopDetectionConfig>,
    pub subagents: ToolsScope,
    pub sandbox: SandboxToolsScope,
    /// Understanding inbound media (`tools.media`).
    pub media: super::media::MediaToolsConfig,
}

/// `agents.list[].tools`: the same policy keys, scoped to one agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AgentToolsConfig {
    pub profile: Option<ToolProfile>,
    pub allow: Vec<String>,
    pub also_allow: Vec<String>,
    pub deny: Vec<String>,
    pub by_provider: BTreeMap<String, ToolPolicy>,
    pub exec: Option<ExecToolConfig>,
    pub fs: Option<FsToolsConfig>,
    pub loop_detection: Option<LoopDetectionConfig>,
    pub sandbox: SandboxToolsScope,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WebToolsConfig {
    pub fetch: WebFetchConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WebFetchConfig {
    pub enabled: bool,
    pub max_chars: Option<u32>,
    pub max_chars_cap: u32,
    pub max_response_bytes: Option<u64>,
    pub timeout_seconds: Option<u32>,
    pub cache_ttl_minutes: Option<f64>,
    pub max_redirects: u32,
    pub user_agent: Option<String>,
    pub ssrf_policy: WebFetchSsrfPolicy,
}

/// `tools.web.fetch.ssrfPolicy`: only `allowedHostnames` (exact hostnames or IP literals fetched
/// even when they resolve to a private, loopback or link-local address); upstream's other SSRF keys
/// are refused (`unsupported.rs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WebFetchSsrfPolicy {
    pub allowed_hostnames: Vec<String>,
}

impl Default for WebFetchConfig {
    fn default() -> Self {
        WebFetchConfig {
            enabled: true,
            max_chars: None,
            max_chars_cap: DEFAULT_WEB_FETCH_MAX_CHARS_CAP,
            max_response_bytes: None,
            timeout_seconds: None,
            cache_ttl_minutes: None,
            max_redirects: DEFAULT_WEB_FETCH_MAX_REDIRECTS,
            user_agent: None,
            ssrf_policy: WebFetchSsrfPolicy::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecHost {
    #[default]
    Auto,
    Sandbox,
    Gateway,
    Node,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecSecurity {
    #[default]
    Deny,
    Allowlist,
    Full,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecAsk {
    Off,
    #[default]
    OnMiss,
    Always,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ExecToolConfig {
    pub host: Option<ExecHost>,
    pub security: Option<ExecSecurity>,
    pub ask: Option<ExecAsk>,
    /// Directories prepended to PATH.
    pub path_prepend: Option<Vec<String>>,
    /// pincer: command prefixes that run without asking (upstream keeps these in
    /// `exec-approvals.json`); `allow-always` adds to it in memory.
    pub allowlist: Option<Vec<String>>,
    /// Time before a command is backgrounded.
    pub background_ms: Option<u64>,
    /// Time before a command is killed.
    pub timeout_sec: Option<u32>,
    pub cleanup_ms: Option<u64>,
    pub notify_on_exit: Option<bool>,
    pub notify_on_exit_empty_success: Option<bool>,
}

impl ExecToolConfig {
    pub fn effective_host(&self) -> ExecHost {
        self.host.unwrap_or_default()
    }

    pub fn effective_security(&self) -> ExecSecurity {
        self.security.unwrap_or_default()
    }

    pub fn effective_ask(&self) -> ExecAsk {
        self.ask.unwrap_or_default()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FsToolsConfig {
    /// Confine file tools to the agent workspace. Upstream's default is
    /// false; pincer's is true (see `effective_workspace_only`).
    pub workspace_only: Option<bool>,
}

impl FsToolsConfig {
    /// Unset means confined: an appliance's file tools stay in the
    /// workspace unless the config says `workspaceOnly: false`.
    pub fn effective_workspace_only(&self) -> bool {
        self.workspace_only.unwrap_or(true)
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionsVisibility {
    #[serde(rename = "self")]
    OwnSession,
    #[default]
    Tree,
    Agent,
    All,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct SessionToolsConfig {
    /// Which sessions session tools may target (default "tree").
    pub visibility: SessionsVisibility,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AgentToAgentConfig {
    pub enabled: bool,
    pub allow: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct LoopDetectionConfig {
    pub enabled: Option<bool>,
    pub history_size: Option<u32>,
    pub warning_threshold: Option<u32>,
    pub critical_threshold: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_defaults_are_cautious() {
        let exec = ExecToolConfig::default();
        assert_eq!(exec.effective_host(), ExecHost::Auto);
        assert_eq!(exec.effective_security(), ExecSecurity::Deny);
        assert_eq!(exec.effective_ask(), ExecAsk::OnMiss);
    }

    #[test]
    fn tools_section_parses_upstream_keys() {
        let tools: ToolsConfig = serde_json::from_str(
            r#"{"profile":"coding","deny":["browser"],"exec":{"security":"allowlist","ask":"always"},
                "web":{"fetch":{"maxChars":20000}},"sessions":{"visibility":"self"},
                "sandbox":{"tools":{"allow":["exec"]}}}"#,
        )
        .expect("tools");
        assert_eq!(tools.profile, Some(ToolProfile::Coding));
        assert_eq!(tools.exec.effective_security(), ExecSecurity::Allowlist);
        assert_eq!(tools.web.fetch.max_chars, Some(20000));
        assert_eq!(tools.sessions.visibility, SessionsVisibility::OwnSession);
        assert_eq!(tools.sandbox.tools.allow, Some(vec!["exec".to_string()]));
    }
}
