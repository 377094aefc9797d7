//! The sandbox runner: the one way agent-requested processes are started.
//!
//! [`run`] takes a [`SandboxSpec`] (argv, workspace, policy, per-call overrides) and returns an
//! [`Outcome`] (termination, capped stdout/stderr, the confinement actually applied). Layers —
//! namespaces, Landlock, seccomp, cgroup v2 — are detected once per process ([`probe`]), used
//! when available, and a command is refused rather than run unconfined when the policy's
//! requirements are not met. rlimits, a scrubbed environment, dropped capabilities, the wall-clock
//! timeout with whole-tree kill and the output caps apply to every run, confined or not. This
//! module owns the policy types and the entry points ([`run`], and [`spawn`] for background runs);
//! it must not be bypassed by other modules.

pub mod background;
pub mod exec;
pub mod landlock;
pub mod limits;
pub mod output;
pub mod probe;

mod child;
mod mounts;
mod namespaces;
mod plan;
mod report;
mod request;
mod runner;
mod seccomp;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use self::background::{spawn, BackgroundRun, LiveOutput, OutputSlice, RunState};
pub use self::landlock::LandlockEnforcement;
pub use self::limits::ResourceLimits;
pub use self::namespaces::{SANDBOX_AGENT_WORKSPACE, SANDBOX_WORKSPACE};
pub use self::output::{CapturedStream, OutputLimits};
pub use self::probe::{probe, Capabilities, LayerStatus, ProcessLimit};
pub use self::seccomp::SeccompBuildError;

/// When commands are sandboxed (OpenClaw's `agents.defaults.sandbox.mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Never: commands run on the host (still with limits, timeout and a scrubbed environment).
    Off,
    /// Only for sessions other than the main one.
    NonMain,
    /// Always.
    #[default]
    All,
}

/// Which kind of session asked for the command (decides `non-main`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SessionScope {
    /// The agent's main session (`session.mainKey`).
    Main,
    /// Any other session: groups, channels, subagents.
    #[default]
    NonMain,
}

/// Network access of a sandboxed command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkPolicy {
    /// Own network namespace with only `lo` (TCP denied by Landlock without namespaces).
    #[default]
    None,
    /// The host's network.
    Host,
}

/// A confinement layer that can be required or skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// User, mount, PID, network, IPC and UTS namespaces.
    Namespaces,
    /// Landlock file-system (and TCP) rules.
    Landlock,
    /// The seccomp syscall filter.
    Seccomp,
    /// A per-run cgroup v2 with memory, pids and cpu limits.
    Cgroup,
}

impl Layer {
    /// Every layer, in reporting order.
    pub const ALL: [Layer; 4] = [
        Layer::Namespaces,
        Layer::Landlock,
        Layer::Seccomp,
        Layer::Cgroup,
    ];
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Namespaces => "namespaces",
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
            Layer::Cgroup => "cgroup",
        })
    }
}

/// Sandbox configuration (per agent; the board profile supplies the limits).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SandboxPolicy {
    /// When to sandbox.
    pub mode: SandboxMode,
    /// Layers that must be present or the command is refused. Independently of this list, a
    /// sandboxed command always needs Landlock or namespaces.
    pub require: Vec<Layer>,
    /// Layers not to use even where available (a host where one misbehaves).
    pub skip_layers: Vec<Layer>,
    /// Network access.
    pub network: NetworkPolicy,
    /// Resource limits per run.
    pub limits: ResourceLimits,
    /// Output caps per stream.
    pub output: OutputLimits,
    /// Default wall-clock timeout, in seconds.
    pub timeout_secs: u64,
    /// Largest per-call timeout, in seconds.
    pub max_timeout_secs: u64,
    /// Extra environment variables every command gets.
    pub env: BTreeMap<String, String>,
    /// Directories put in front of the sandbox's `PATH`, as the command sees them
    /// (`tools.exec.pathPrepend`); absolute, without `:`.
    pub path_prepend: Vec<String>,
    /// Extra host paths visible read-only, at the same path.
    pub read_only_paths: Vec<PathBuf>,
    /// The uid and gid commands run as inside the sandbox's user namespace (`sandbox.docker.user`),
    /// mapped to the service's own ids outside; `None` is root inside. Needs the namespaces layer.
    pub user: Option<(u32, u32)>,
    /// `LANG` inside the sandbox.
    pub lang: String,
    /// `TERM` inside the sandbox.
    pub term: String,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        Self {
            mode: SandboxMode::All,
            require: Vec::new(),
            skip_layers: Vec::new(),
            network: NetworkPolicy::None,
            limits: ResourceLimits::default(),
            output: OutputLimits::default(),
            timeout_secs: 120,
            max_timeout_secs: 1800,
            env: BTreeMap::new(),
            path_prepend: Vec::new(),
            read_only_paths: Vec::new(),
            user: None,
            lang: "C.UTF-8".to_owned(),
            term: "dumb".to_owned(),
        }
    }
}

impl SandboxPolicy {
    /// True when a command from `session` must be confined under this policy.
    pub fn confines(&self, session: SessionScope) -> bool {
        match self.mode {
            SandboxMode::Off => false,
            SandboxMode::NonMain => session == SessionScope::NonMain,
            SandboxMode::All => true,
        }
    }
}

/// One command to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxSpec {
    /// Program and arguments; the program is an absolute path (inside the sandbox's root).
    pub argv: Vec<String>,
    /// Host directory of the agent's workspace (read-write inside, at [`SANDBOX_WORKSPACE`]).
    pub workspace: PathBuf,
    /// A host directory the command may read but not change, at [`SANDBOX_AGENT_WORKSPACE`]
    /// with namespaces and at its own path without them (`workspaceAccess: "ro"`: the agent's
    /// workspace beside a private one).
    pub read_only_workspace: Option<PathBuf>,
    /// Working directory relative to the workspace (default: the workspace itself).
    pub workdir: Option<PathBuf>,
    /// Per-call environment variables, added to the policy's.
    pub env: Vec<(String, String)>,
    /// Per-call timeout (capped at the policy's maximum).
    pub timeout: Option<Duration>,
    /// Session kind, for `non-main` mode.
    pub session: SessionScope,
    /// The policy.
    pub policy: SandboxPolicy,
}

impl SandboxSpec {
    /// A spec running `argv` in `workspace` under the default policy.
    pub fn new(argv: Vec<String>, workspace: impl Into<PathBuf>) -> Self {
        Self {
            argv,
            workspace: workspace.into(),
            read_only_workspace: None,
            workdir: None,
            env: Vec::new(),
            timeout: None,
            session: SessionScope::default(),
            policy: SandboxPolicy::default(),
        }
    }
}

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Termination {
    /// It exited with this code.
    Exited(i32),
    /// A signal killed it (e.g. SIGKILL from RLIMIT_CPU, SIGXFSZ from RLIMIT_FSIZE).
    Signaled(i32),
    /// The wall-clock timeout passed; the whole process tree was killed.
    TimedOut,
}

impl Termination {
    /// True for a zero exit code.
    pub fn success(self) -> bool {
        self == Termination::Exited(0)
    }
}

/// The confinement a run actually had.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Confinement {
    /// False when the policy ran the command on the host (mode `off`, or `non-main` for main).
    pub confined: bool,
    /// User, mount, PID, IPC, UTS namespaces.
    pub namespaces: bool,
    /// Own network namespace (or Landlock TCP denial without namespaces).
    pub network_isolated: bool,
    /// A procfs of the sandbox's own PID namespace is mounted.
    pub proc_mounted: bool,
    /// Landlock enforcement as reported by the child.
    pub landlock: Option<LandlockEnforcement>,
    /// The seccomp filter is installed.
    pub seccomp: bool,
    /// A per-run cgroup v2 holds the command.
    pub cgroup: bool,
    /// `pid_max` of the sandbox's PID namespace, when the kernel allows setting it (6.14+).
    pub pid_max: Option<u32>,
}

impl Confinement {
    /// A one-line description, e.g. `namespaces, landlock (full), seccomp, rlimits`.
    pub fn summary(&self) -> String {
        if !self.confined {
            return "unconfined (sandbox mode off for this session): rlimits, timeout, scrubbed env".to_owned();
        }
        let mut layers = Vec::new();
        if self.namespaces {
            layers.push(
                if self.network_isolated {
                    "namespaces (isolated network)"
                } else {
                    "namespaces (host network)"
                }
                .to_owned(),
            );
        }
        if let Some(level) = self.landlock {
            layers.push(format!(
                "landlock ({})",
                format!("{level:?}").to_lowercase()
            ));
        }
        if self.seccomp {
            layers.push("seccomp".to_owned());
        }
        if self.cgroup {
            layers.push("cgroup".to_owned());
        }
        layers.push("rlimits".to_owned());
        layers.join(", ")
    }
}

/// The result of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// How the command ended.
    pub termination: Termination,
    /// Captured standard output (head and tail).
    pub stdout: CapturedStream,
    /// Captured standard error (head and tail).
    pub stderr: CapturedStream,
    /// Wall-clock time from spawn to the end of the process tree.
    pub duration: Duration,
    /// Layers that applied.
    pub confinement: Confinement,
    /// The cgroup's OOM killer acted (only known with a cgroup).
    pub oom_killed: bool,
    /// Output was cut off because a process outside the killed tree kept a pipe open.
    pub output_incomplete: bool,
}

/// Why a command did not run (a command that ran and failed is an [`Outcome`]).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The policy requires layers this host cannot provide (or that the policy skips).
    #[error(
        "sandbox refused to run the command: missing {}: {detail}",
        list(missing)
    )]
    Refused {
        /// The layers that are missing.
        missing: Vec<Layer>,
        /// Why each is missing.
        detail: String,
    },
    /// The request or policy is malformed.
    #[error("invalid sandbox request: {field}: {reason}")]
    InvalidRequest {
        /// The offending field.
        field: &'static str,
        /// What is wrong and what is allowed.
        reason: String,
    },
    /// A setup step in the child failed.
    #[error("sandbox setup failed: could not {step}{detail}: {}", std::io::Error::from_raw_os_error(*errno))]
    Setup {
        /// The step.
        step: &'static str,
        /// The plan entry involved (mount, rule, limit), prefixed with ": " when present.
        detail: String,
        /// The errno.
        errno: i32,
    },
    /// The program could not be executed.
    #[error("could not start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The error.
        source: std::io::Error,
    },
    /// The seccomp filter could not be compiled.
    #[error(transparent)]
    Seccomp(#[from] SeccompBuildError),
    /// Preparing or supervising the run failed.
    #[error("sandbox I/O error: {0}")]
    Io(#[from] std::io::Error),
}

fn list(layers: &[Layer]) -> String {
    layers
        .iter()
        .map(Layer::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs one command under the policy of its spec. The only entry point for agent-requested
/// processes.
pub async fn run(spec: SandboxSpec) -> Result<Outcome, SandboxError> {
    let prepared = tokio::task::spawn_blocking(move || {
        let capabilities = probe::cached();
        plan::prepare_for_host(&spec, capabilities)
    })
    .await
    .map_err(|e| SandboxError::Io(std::io::Error::other(e)))??;
    runner::run_prepared(prepared).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_decides_which_sessions_are_confined() {
        let policy = |mode| SandboxPolicy {
            mode,
            ..SandboxPolicy::default()
        };
        assert!(policy(SandboxMode::All).confines(SessionScope::Main));
        assert!(!policy(SandboxMode::Off).confines(SessionScope::NonMain));
        assert!(!policy(SandboxMode::NonMain).confines(SessionScope::Main));
        assert!(policy(SandboxMode::NonMain).confines(SessionScope::NonMain));
    }

    #[test]
    fn policy_reads_openclaw_style_keys() {
        let policy: SandboxPolicy = serde_json::from_str(
            r#"{"mode":"non-main","require":["landlock","seccomp"],"network":"host","timeoutSecs":30,
                "limits":{"maxProcesses":16}}"#,
        )
        .expect("policy parses");
        assert_eq!(policy.mode, SandboxMode::NonMain);
        assert_eq!(policy.require, vec![Layer::Landlock, Layer::Seccomp]);
        assert_eq!(policy.network, NetworkPolicy::Host);
        assert_eq!(policy.timeout_secs, 30);
        assert_eq!(policy.limits.max_processes, 16);
        assert_eq!(
            policy.limits.cpu_seconds,
            ResourceLimits::default().cpu_seconds
        );
    }

    #[test]
    fn unknown_mode_is_rejected_with_the_allowed_values() {
        let error =
            serde_json::from_str::<SandboxPolicy>(r#"{"mode":"sometimes"}"#).expect_err("bad mode");
        let message = error.to_string();
        assert!(
            message.contains("off") && message.contains("non-main") && message.contains("all"),
            "{message}"
        );
    }

    #[test]
    fn refusal_names_the_missing_layers() {
        let error = SandboxError::Refused {
            missing: vec![Layer::Landlock, Layer::Cgroup],
            detail: "not here".to_owned(),
        };
        assert_eq!(
            error.to_string(),
            "sandbox refused to run the command: missing landlock, cgroup: not here"
        );
    }

    #[test]
    fn confinement_summary_lists_the_applied_layers() {
        let confinement = Confinement {
            confined: true,
            namespaces: true,
            network_isolated: true,
            landlock: Some(LandlockEnforcement::Full),
            seccomp: true,
            ..Confinement::default()
        };
        assert_eq!(
            confinement.summary(),
            "namespaces (isolated network), landlock (full), seccomp, rlimits"
        );
    }
}
