//! What a sandboxed session sees of its agent's workspace (`sandbox.workspaceAccess`), by
//! upstream's rule: `rw` the agent's workspace itself; `none` a private sandbox workspace and
//! nothing of the agent's; `ro` the private one plus the agent's workspace read-only (at `/agent`
//! for `exec`), with `write`, `edit` and `apply_patch` disabled. A session the sandbox does not
//! confine (`mode: "off"`, or the main session under `non-main`) works in the agent's workspace.
//!
//! The private workspace lives under `sandbox.workspaceRoot` (else `<data dir>/sandboxes`), one
//! per agent, session or for everyone as `sandbox.scope` says (upstream's default: per agent).
//!
//! Unset, `workspaceAccess` is upstream's `none` where the config turns the sandbox on
//! (`sandbox.mode` set), and `rw` under pincer's own default confinement (no `mode` set), where
//! upstream would run the command unsandboxed in the agent's workspace. This file decides
//! directories only; the sandbox (`sandbox::SandboxSpec`) mounts them.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::config::{Config, SandboxConfig, SandboxScope, WorkspaceAccess};
use crate::sandbox::{SessionScope, SANDBOX_AGENT_WORKSPACE};

use super::workspace::resolve;
use super::{ToolContext, ToolError};

/// Longest readable part of a private workspace's directory name.
const MAX_SLUG_CHARS: usize = 64;

/// The directories the tools of one session work with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolWorkspace {
    /// Where `exec` runs (its `/workspace`) and where the file tools read and write.
    pub root: PathBuf,
    /// The agent's workspace, readable only (`ro`).
    pub read_only: Option<PathBuf>,
    /// The access in force (`rw` for a session the sandbox does not confine).
    pub access: WorkspaceAccess,
}

impl ToolWorkspace {
    /// The file a reading tool opens: `/agent/…` names the read-only agent workspace, anything
    /// else resolves inside the root.
    pub fn resolve_read(&self, requested: &str) -> Result<PathBuf, ToolError> {
        if let Some(agent) = &self.read_only {
            if let Ok(rest) = Path::new(requested).strip_prefix(SANDBOX_AGENT_WORKSPACE) {
                let rest = rest.to_str().filter(|r| !r.is_empty()).unwrap_or(".");
                return resolve(agent, rest);
            }
        }
        resolve(&self.root, requested)
    }

    /// The file a writing tool changes, refused under `ro`.
    pub fn resolve_write(&self, requested: &str) -> Result<PathBuf, ToolError> {
        if self.access == WorkspaceAccess::Ro {
            return Err(ToolError::Denied(
                "the sandbox workspace is read-only (sandbox.workspaceAccess: \"ro\"): write, edit and apply_patch are disabled".to_owned(),
            ));
        }
        resolve(&self.root, requested)
    }
}

/// The tools that write files, which `ro` disables.
pub const WRITING_TOOLS: [&str; 3] = ["write", "edit", "apply_patch"];

/// `tools` as a sandboxed session may use them: in a session a configured sandbox confines, only
/// what `tools.sandbox.tools` allows, and without the writing ones when the session's access is
/// `ro` (upstream does not offer them then).
pub fn restrict_tools(
    config: &Config,
    agent_id: &str,
    session_key: &str,
    mut tools: Vec<String>,
) -> Vec<String> {
    if confined_by_config(config, agent_id, session_key) {
        tools = super::policy::restrict_for_sandbox(config, agent_id, tools);
    }
    if access_for(config, agent_id, session_key) == WorkspaceAccess::Ro {
        tools.retain(|t| !WRITING_TOOLS.contains(&t.as_str()));
    }
    tools
}

/// Whether a sandbox the config turns on (`sandbox.mode` set, the agent's or the defaults') confines
/// this session, as upstream's sandbox would; pincer's implicit confinement (no mode set) does not
/// count, so sessions of a config without a sandbox keep their tools and host-path rules.
pub fn confined_by_config(config: &Config, agent_id: &str, session_key: &str) -> bool {
    let (agent, defaults) = sandbox_blocks(config, agent_id);
    let mode_set = agent.and_then(|s| s.mode).or(defaults.and_then(|s| s.mode));
    mode_set.is_some()
        && super::exec::policy_for(config, agent_id).confines(session_scope(
            config,
            agent_id,
            session_key,
        ))
}

/// `main` or not, for `sandbox.mode: "non-main"`.
pub fn session_scope(config: &Config, agent_id: &str, session_key: &str) -> SessionScope {
    if session_key == format!("agent:{agent_id}:{}", config.session.main_key) {
        SessionScope::Main
    } else {
        SessionScope::NonMain
    }
}

fn sandbox_blocks<'a>(
    config: &'a Config,
    agent_id: &str,
) -> (Option<&'a SandboxConfig>, Option<&'a SandboxConfig>) {
    let agent = config
        .agents
        .list
        .iter()
        .find(|a| a.id == agent_id)
        .and_then(|a| a.sandbox.as_ref());
    (agent, config.agents.defaults.sandbox.as_ref())
}

/// The access in force for a session of `agent_id` (see the module comment for the default).
pub fn access_for(config: &Config, agent_id: &str, session_key: &str) -> WorkspaceAccess {
    let scope = session_scope(config, agent_id, session_key);
    if !super::exec::policy_for(config, agent_id).confines(scope) {
        return WorkspaceAccess::Rw;
    }
    let (agent, defaults) = sandbox_blocks(config, agent_id);
    let pick = |f: fn(&SandboxConfig) -> Option<WorkspaceAccess>| {
        agent.and_then(f).or_else(|| defaults.and_then(f))
    };
    let mode_set = agent.and_then(|s| s.mode).or(defaults.and_then(|s| s.mode));
    pick(|s| s.workspace_access).unwrap_or(if mode_set.is_some() {
        WorkspaceAccess::None
    } else {
        WorkspaceAccess::Rw
    })
}

/// The directories for `ctx`'s session, creating the private workspace when one is used.
pub fn for_context(ctx: &ToolContext) -> Result<ToolWorkspace, ToolError> {
    let access = access_for(&ctx.config, &ctx.agent_id, &ctx.session_key);
    if access == WorkspaceAccess::Rw {
        return Ok(ToolWorkspace {
            root: ctx.workspace.clone(),
            read_only: None,
            access,
        });
    }
    let root = private_workspace(ctx);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&root)
        .map_err(|e| {
            ToolError::Failed(format!(
                "the sandbox workspace {} cannot be created: {e}",
                root.display()
            ))
        })?;
    Ok(ToolWorkspace {
        root,
        read_only: (access == WorkspaceAccess::Ro).then(|| ctx.workspace.clone()),
        access,
    })
}

/// `<workspaceRoot>/<agent-…|session-…|shared>`.
fn private_workspace(ctx: &ToolContext) -> PathBuf {
    let (agent, defaults) = sandbox_blocks(&ctx.config, &ctx.agent_id);
    let root = agent
        .and_then(|s| s.workspace_root.as_deref())
        .or(defaults.and_then(|s| s.workspace_root.as_deref()))
        .map(crate::memory::expand_home)
        .unwrap_or_else(|| ctx.services.sandbox_root.clone());
    let scope = agent
        .and_then(|s| s.scope)
        .or(defaults.and_then(|s| s.scope));
    let name = match scope.unwrap_or(SandboxScope::Agent) {
        SandboxScope::Agent => format!("agent-{}", slug(&ctx.agent_id)),
        SandboxScope::Session => format!("session-{}", slug(&ctx.session_key)),
        SandboxScope::Shared => "shared".to_owned(),
    };
    root.join(name)
}

/// A directory name for `key`: its safe characters, shortened, and a hash of the whole key so
/// keys that differ only in the replaced characters stay apart.
fn slug(key: &str) -> String {
    let readable: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_SLUG_CHARS)
        .collect();
    // FNV-1a: stable across runs and builds, unlike the std hasher.
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{readable}-{:08x}", hash as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        crate::config::parse_str(text, "test").expect("config")
    }

    #[test]
    fn unset_access_is_none_when_the_config_turns_the_sandbox_on_and_rw_otherwise() {
        let main = "agent:main:main";
        let group = "agent:main:telegram:group:1";
        let implicit = config("{}");
        assert_eq!(access_for(&implicit, "main", group), WorkspaceAccess::Rw);
        let all = config(r#"{ agents: { defaults: { sandbox: { mode: "all" } } } }"#);
        assert_eq!(access_for(&all, "main", group), WorkspaceAccess::None);
        let non_main = config(
            r#"{ agents: { defaults: { sandbox: { mode: "non-main", workspaceAccess: "ro" } } } }"#,
        );
        assert_eq!(access_for(&non_main, "main", main), WorkspaceAccess::Rw);
        assert_eq!(access_for(&non_main, "main", group), WorkspaceAccess::Ro);
        let agent = config(
            r#"{ agents: { defaults: { sandbox: { workspaceAccess: "ro" } },
                 list: [{ id: "main", sandbox: { workspaceAccess: "none" } }] } }"#,
        );
        assert_eq!(access_for(&agent, "main", group), WorkspaceAccess::None);
        let off = config(
            r#"{ agents: { defaults: { sandbox: { mode: "off", workspaceAccess: "none" } } } }"#,
        );
        assert_eq!(access_for(&off, "main", group), WorkspaceAccess::Rw);
    }

    #[test]
    fn ro_withholds_the_writing_tools() {
        let tools = || {
            ["read", "write", "edit", "apply_patch", "exec"]
                .map(String::from)
                .to_vec()
        };
        let ro = config(
            r#"{ agents: { defaults: { sandbox: { mode: "all", workspaceAccess: "ro" } } } }"#,
        );
        let group = "agent:main:telegram:group:1";
        assert_eq!(
            restrict_tools(&ro, "main", group, tools()),
            vec!["read", "exec"]
        );
        let none = config(r#"{ agents: { defaults: { sandbox: { mode: "all" } } } }"#);
        assert_eq!(restrict_tools(&none, "main", group, tools()), tools());
    }

    #[test]
    fn slugs_are_safe_bounded_and_distinct() {
        let a = slug("agent:main:telegram:direct:42");
        assert!(a.starts_with("agent_main_telegram_direct_42-"), "{a}");
        assert_ne!(slug("a:b"), slug("a_b"));
        assert_eq!(slug("../..").chars().filter(|c| *c == '/').count(), 0);
        assert!(slug(&"x".repeat(500)).len() <= MAX_SLUG_CHARS + 9);
    }
}
