//! Turns a [`SandboxSpec`] into a prepared run: which layers apply, the validated request, the
//! scrubbed environment, and the [`ChildPlan`] the child executes.
//!
//! Layer choice follows the policy and the host's capabilities and refuses (never silently
//! downgrades) when a required layer is missing. This file validates every field with a message
//! naming it; it must not spawn anything and must not read the gateway's environment (the
//! sandbox's environment is built from the policy alone).

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::child::{ChildPlan, NamespacePlan};
use super::landlock::{Grant, LandlockPlan};
use super::limits::{CgroupDelegation, RlimitPlan, RunCgroup};
use super::namespaces::{
    self, IdMaps, NodeKind, RootInputs, RootPlan, SystemPath, SANDBOX_WORKSPACE,
};
use super::output::OutputLimits;
use super::probe::Capabilities;
use super::seccomp::SeccompPlan;
use super::{Confinement, Layer, NetworkPolicy, SandboxError, SandboxSpec};

/// `PATH` inside the sandbox.
const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Host devices a sandbox without namespaces may use, with whether they are writable.
const HOST_DEVICES: [(&str, bool); 5] = [
    ("/dev/null", true),
    ("/dev/zero", true),
    ("/dev/random", false),
    ("/dev/urandom", false),
    ("/dev/tty", true),
];
/// Sandbox paths an extra read-only path may not cover or shadow.
const RESERVED_PATHS: [&str; 4] = ["/proc", "/dev", "/tmp", SANDBOX_WORKSPACE];
/// First Landlock ABI with TCP bind/connect rules.
const LANDLOCK_TCP_ABI: u32 = 4;
/// Environment variables the sandbox sets itself and a request may not override.
const FIXED_ENV: [&str; 2] = ["HOME", "TMPDIR"];

static RUN_TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The layers one run uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LayerSet {
    pub(crate) confined: bool,
    pub(crate) namespaces: bool,
    pub(crate) mount_proc: bool,
    pub(crate) landlock: bool,
    /// The kernel's Landlock can deny TCP (ABI 4 or later).
    pub(crate) landlock_tcp: bool,
    pub(crate) seccomp: bool,
    pub(crate) cgroup: bool,
}

/// A run ready to spawn.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) plan: ChildPlan,
    pub(crate) argv: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) confinement: Confinement,
    pub(crate) cgroup: Option<RunCgroup>,
    pub(crate) run_tmp: Option<RunTmpDir>,
    pub(crate) output: OutputLimits,
    pub(crate) timeout: Duration,
}

/// A per-run host directory used as `TMPDIR` when there is no private `/tmp`; removed on drop.
#[derive(Debug)]
pub(crate) struct RunTmpDir {
    path: PathBuf,
}

impl RunTmpDir {
    fn create() -> io::Result<Self> {
        let serial = RUN_TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "pincer-sandbox-tmp-{}-{serial}",
            std::process::id()
        ));
        fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(Self { path })
    }
}

impl Drop for RunTmpDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Chooses the layers for this host and prepares the run.
pub(crate) fn prepare_for_host(
    spec: &SandboxSpec,
    capabilities: &Capabilities,
) -> Result<Prepared, SandboxError> {
    let layers = choose_layers(spec, capabilities)?;
    prepare(spec, layers, capabilities.cgroup_delegation.as_ref())
}

/// Picks the layers the policy wants and the host has; refuses when a requirement is unmet.
pub(crate) fn choose_layers(
    spec: &SandboxSpec,
    capabilities: &Capabilities,
) -> Result<LayerSet, SandboxError> {
    let policy = &spec.policy;
    if !policy.confines(spec.session) {
        return Ok(LayerSet::default());
    }
    let usable = |layer: Layer| {
        capabilities.status(layer).is_available() && !policy.skip_layers.contains(&layer)
    };
    let why = |layer: Layer| {
        if policy.skip_layers.contains(&layer) {
            format!("{layer} is skipped by the policy (skipLayers)")
        } else {
            format!("{layer}: {}", capabilities.status(layer))
        }
    };
    let missing: Vec<Layer> = policy
        .require
        .iter()
        .copied()
        .filter(|l| !usable(*l))
        .collect();
    if !missing.is_empty() {
        let detail = missing
            .iter()
            .map(|l| why(*l))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(SandboxError::Refused { missing, detail });
    }
    if !usable(Layer::Namespaces) && !usable(Layer::Landlock) {
        return Err(SandboxError::Refused {
            missing: vec![Layer::Namespaces, Layer::Landlock],
            detail: format!(
                "a sandboxed command needs at least one of them ({}; {})",
                why(Layer::Namespaces),
                why(Layer::Landlock)
            ),
        });
    }
    Ok(LayerSet {
        confined: true,
        namespaces: usable(Layer::Namespaces),
        mount_proc: capabilities.proc_mount.is_available(),
        landlock: usable(Layer::Landlock),
        landlock_tcp: capabilities
            .landlock_abi
            .is_some_and(|abi| abi >= LANDLOCK_TCP_ABI),
        seccomp: usable(Layer::Seccomp),
        cgroup: usable(Layer::Cgroup),
    })
}

fn invalid(field: &'static str, reason: impl Into<String>) -> SandboxError {
    SandboxError::InvalidRequest {
        field,
        reason: reason.into(),
    }
}

fn c_string(field: &'static str, value: &[u8]) -> Result<CString, SandboxError> {
    CString::new(value).map_err(|_| invalid(field, "must not contain NUL bytes"))
}

/// Prepares a run with exactly `layers`.
pub(crate) fn prepare(
    spec: &SandboxSpec,
    layers: LayerSet,
    cgroup: Option<&CgroupDelegation>,
) -> Result<Prepared, SandboxError> {
    let policy = &spec.policy;
    validate_argv(&spec.argv)?;
    policy
        .limits
        .validate()
        .map_err(|field| invalid(field, "must be greater than zero"))?;
    let timeout = choose_timeout(spec)?;
    let workspace = canonical_workspace(&spec.workspace)?;
    let relative_workdir = validate_workdir(&workspace, spec.workdir.as_deref())?;
    let extras = validate_extra_paths(&policy.read_only_paths)?;
    let isolate_network = policy.network == NetworkPolicy::None;
    let run_tmp = if layers.confined && !layers.namespaces {
        Some(RunTmpDir::create()?)
    } else {
        None
    };
    let system = namespaces::system_paths(!isolate_network);

    let (namespace_plan, landlock, home, workdir) = if layers.namespaces {
        let root = RootPlan::build(&RootInputs {
            workspace: &workspace,
            system: &system,
            extra_read_only: &extras,
            tmp_bytes: policy.limits.tmp_bytes,
            pid_max: u32::try_from(policy.limits.max_processes.saturating_add(1))
                .unwrap_or(u32::MAX),
            mount_proc: layers.mount_proc,
            isolate_network,
        })?;
        let landlock = if layers.landlock {
            Some(root.landlock_plan(false)?)
        } else {
            None
        };
        let plan = NamespacePlan {
            root,
            maps: IdMaps::for_current_user(),
            unshare_flags: namespaces::unshare_flags(isolate_network),
        };
        let home = PathBuf::from(SANDBOX_WORKSPACE);
        (
            Some(plan),
            landlock,
            home.clone(),
            home.join(&relative_workdir),
        )
    } else {
        let landlock = if layers.landlock {
            let tmp = run_tmp.as_ref().map(|t| t.path.as_path());
            Some(host_landlock_plan(
                &workspace,
                tmp,
                &system,
                &extras,
                isolate_network,
            )?)
        } else {
            None
        };
        (
            None,
            landlock,
            workspace.clone(),
            workspace.join(&relative_workdir),
        )
    };

    let seccomp = if layers.seccomp {
        Some(SeccompPlan::build()?)
    } else {
        None
    };
    let run_cgroup = match cgroup.filter(|_| layers.cgroup) {
        Some(delegation) => {
            delegation.prepare()?;
            Some(delegation.create_run(&policy.limits)?)
        }
        None => None,
    };
    let env = build_env(spec, &home, run_tmp.as_ref().map(|t| t.path.as_path()))?;
    let confinement = Confinement {
        confined: layers.confined,
        namespaces: layers.namespaces,
        network_isolated: isolate_network
            && (layers.namespaces || (layers.landlock && layers.landlock_tcp)),
        proc_mounted: layers.namespaces && layers.mount_proc,
        landlock: None,
        seccomp: seccomp.is_some(),
        cgroup: run_cgroup.is_some(),
        pid_max: None,
    };
    let plan = ChildPlan {
        cgroup_procs: run_cgroup.as_ref().map(|c| c.procs_path().clone()),
        namespaces: namespace_plan,
        landlock,
        seccomp,
        rlimits: RlimitPlan::new(&policy.limits),
        workdir: c_string("workdir", workdir.as_os_str().as_bytes())?,
        timeout,
        report_fd: -1,
    };
    Ok(Prepared {
        plan,
        argv: spec.argv.clone(),
        env,
        confinement,
        cgroup: run_cgroup,
        run_tmp,
        output: policy.output,
        timeout,
    })
}

fn validate_argv(argv: &[String]) -> Result<(), SandboxError> {
    let program = argv
        .first()
        .ok_or_else(|| invalid("argv", "must name a program"))?;
    if !program.starts_with('/') {
        return Err(invalid(
            "argv",
            format!("the program must be an absolute path, got {program:?}"),
        ));
    }
    if argv.iter().any(|arg| arg.contains('\0')) {
        return Err(invalid("argv", "arguments must not contain NUL bytes"));
    }
    Ok(())
}

fn choose_timeout(spec: &SandboxSpec) -> Result<Duration, SandboxError> {
    let max = Duration::from_secs(spec.policy.max_timeout_secs);
    let timeout = spec
        .timeout
        .unwrap_or(Duration::from_secs(spec.policy.timeout_secs));
    if timeout.is_zero() {
        return Err(invalid("timeout", "must be greater than zero"));
    }
    Ok(timeout.min(max))
}

fn canonical_workspace(workspace: &Path) -> Result<PathBuf, SandboxError> {
    let canonical = workspace
        .canonicalize()
        .map_err(|e| invalid("workspace", format!("{}: {e}", workspace.display())))?;
    if !canonical.is_dir() {
        return Err(invalid(
            "workspace",
            format!("{} is not a directory", canonical.display()),
        ));
    }
    if canonical.parent().is_none() {
        return Err(invalid(
            "workspace",
            "the file-system root cannot be a workspace",
        ));
    }
    Ok(canonical)
}

/// Checks that the workdir stays inside the workspace; returns it relative to the workspace.
fn validate_workdir(workspace: &Path, workdir: Option<&Path>) -> Result<PathBuf, SandboxError> {
    let Some(workdir) = workdir else {
        return Ok(PathBuf::new());
    };
    let relative = workdir.strip_prefix(SANDBOX_WORKSPACE).unwrap_or(workdir);
    if !relative
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(invalid(
            "workdir",
            format!(
                "{} must be a path inside the workspace without `..`",
                workdir.display()
            ),
        ));
    }
    let host = workspace.join(relative);
    let canonical = host
        .canonicalize()
        .map_err(|e| invalid("workdir", format!("{}: {e}", workdir.display())))?;
    if !canonical.starts_with(workspace) || !canonical.is_dir() {
        return Err(invalid(
            "workdir",
            format!(
                "{} is not a directory inside the workspace",
                workdir.display()
            ),
        ));
    }
    Ok(canonical
        .strip_prefix(workspace)
        .unwrap_or(Path::new(""))
        .to_path_buf())
}

fn validate_extra_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>, SandboxError> {
    paths
        .iter()
        .map(|path| {
            if !path.is_absolute() {
                return Err(invalid(
                    "readOnlyPaths",
                    format!("{} must be absolute", path.display()),
                ));
            }
            let canonical = path
                .canonicalize()
                .map_err(|e| invalid("readOnlyPaths", format!("{}: {e}", path.display())))?;
            let reserved = RESERVED_PATHS
                .iter()
                .any(|r| canonical.starts_with(r) || Path::new(r).starts_with(&canonical));
            if reserved {
                return Err(invalid(
                    "readOnlyPaths",
                    format!(
                        "{} overlaps a sandbox path (/proc, /dev, /tmp, /workspace)",
                        canonical.display()
                    ),
                ));
            }
            Ok(canonical)
        })
        .collect()
}

fn host_landlock_plan(
    workspace: &Path,
    tmp: Option<&Path>,
    system: &[SystemPath],
    extras: &[PathBuf],
    deny_tcp: bool,
) -> io::Result<LandlockPlan> {
    let mut plan = LandlockPlan::new(deny_tcp);
    let read_only = |path: &Path| {
        if path.is_dir() {
            Grant::ReadOnlyTree
        } else {
            Grant::ReadOnlyFile
        }
    };
    for entry in system {
        // A symlink's target is covered by the directory it points into (`/bin` -> `/usr/bin`).
        if !matches!(entry.kind, NodeKind::Symlink(_)) {
            plan.allow(&entry.path, read_only(&entry.path))?;
        }
    }
    for extra in extras {
        plan.allow(extra, read_only(extra))?;
    }
    for (device, writable) in HOST_DEVICES {
        if Path::new(device).exists() {
            plan.allow(Path::new(device), Grant::Device { writable })?;
        }
    }
    plan.allow(workspace, Grant::ReadWrite)?;
    if let Some(tmp) = tmp {
        plan.allow(tmp, Grant::ReadWrite)?;
    }
    Ok(plan)
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The whole environment of the command: PATH, HOME, LANG, TERM, TMPDIR without a private
/// `/tmp`, then the policy's and the call's extras. Nothing comes from the gateway's own
/// environment.
fn build_env(
    spec: &SandboxSpec,
    home: &Path,
    tmp: Option<&Path>,
) -> Result<Vec<(String, String)>, SandboxError> {
    let path_text = |path: &Path| {
        path.to_str().map(str::to_owned).ok_or_else(|| {
            invalid(
                "workspace",
                format!("{} is not valid UTF-8", path.display()),
            )
        })
    };
    let mut env = vec![
        ("PATH".to_owned(), SANDBOX_PATH.to_owned()),
        ("HOME".to_owned(), path_text(home)?),
        ("LANG".to_owned(), spec.policy.lang.clone()),
        ("TERM".to_owned(), spec.policy.term.clone()),
    ];
    if let Some(tmp) = tmp {
        env.push(("TMPDIR".to_owned(), path_text(tmp)?));
    }
    let extras = spec
        .policy
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str(), "policy.env"));
    let per_call = spec
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str(), "env"));
    for (name, value, field) in extras.chain(per_call) {
        if !valid_env_name(name) {
            return Err(invalid(
                field,
                format!("{name:?} is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)"),
            ));
        }
        if FIXED_ENV.contains(&name) {
            return Err(invalid(
                field,
                format!("{name} is set by the sandbox and cannot be overridden"),
            ));
        }
        if value.contains('\0') {
            return Err(invalid(
                field,
                format!("the value of {name} contains a NUL byte"),
            ));
        }
        env.retain(|(existing, _)| existing != name);
        env.push((name.to_owned(), value.to_owned()));
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::probe::LayerStatus;
    use crate::sandbox::{SandboxMode, SessionScope};

    fn capabilities(namespaces: bool, landlock: bool) -> Capabilities {
        let status = |ok: bool| {
            if ok {
                LayerStatus::Available
            } else {
                LayerStatus::Unavailable("not on this host".into())
            }
        };
        Capabilities {
            namespaces: status(namespaces),
            proc_mount: status(namespaces),
            landlock: status(landlock),
            landlock_abi: None,
            seccomp: status(true),
            cgroup: status(false),
            cgroup_delegation: None,
            running_as_root: false,
            process_limit: crate::sandbox::ProcessLimit::Rlimit,
        }
    }

    fn spec(workspace: &Path) -> SandboxSpec {
        SandboxSpec::new(vec!["/bin/true".into()], workspace)
    }

    #[test]
    fn refuses_when_neither_namespaces_nor_landlock_exist() {
        let dir = tempfile::tempdir().expect("tempdir");
        let error =
            choose_layers(&spec(dir.path()), &capabilities(false, false)).expect_err("refused");
        let message = error.to_string();
        assert!(
            message.contains("namespaces") && message.contains("landlock"),
            "{message}"
        );
    }

    #[test]
    fn refuses_when_a_required_layer_is_missing_and_names_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut request = spec(dir.path());
        request.policy.require = vec![Layer::Cgroup];
        match choose_layers(&request, &capabilities(true, true)) {
            Err(SandboxError::Refused { missing, detail }) => {
                assert_eq!(missing, vec![Layer::Cgroup]);
                assert!(detail.contains("not on this host"), "{detail}");
            }
            other => panic!("expected refusal, got {other:?}"),
        }
    }

    #[test]
    fn skipped_layer_counts_as_missing_when_required() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut request = spec(dir.path());
        request.policy.require = vec![Layer::Landlock];
        request.policy.skip_layers = vec![Layer::Landlock];
        let error = choose_layers(&request, &capabilities(true, true)).expect_err("refused");
        assert!(error.to_string().contains("skipLayers"), "{error}");
    }

    #[test]
    fn mode_off_and_main_session_under_non_main_run_unconfined() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut request = spec(dir.path());
        request.policy.mode = SandboxMode::NonMain;
        request.session = SessionScope::Main;
        let layers =
            choose_layers(&request, &capabilities(false, false)).expect("unconfined is allowed");
        assert_eq!(layers, LayerSet::default());
        request.policy.mode = SandboxMode::Off;
        request.session = SessionScope::NonMain;
        assert!(
            !choose_layers(&request, &capabilities(true, true))
                .expect("off")
                .confined
        );
    }

    #[test]
    fn landlock_alone_is_enough_without_namespaces() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layers =
            choose_layers(&spec(dir.path()), &capabilities(false, true)).expect("landlock only");
        assert!(layers.confined && layers.landlock && !layers.namespaces);
    }

    #[test]
    fn workdir_cannot_leave_the_workspace() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir(dir.path().join("sub")).expect("mkdir");
        let workspace = dir.path().canonicalize().expect("canonical");
        assert_eq!(
            validate_workdir(&workspace, Some(Path::new("sub"))).expect("inside"),
            PathBuf::from("sub")
        );
        assert_eq!(
            validate_workdir(&workspace, Some(Path::new("/workspace/sub"))).expect("sandbox path"),
            PathBuf::from("sub")
        );
        for bad in ["../", "sub/../..", "/etc"] {
            assert!(
                validate_workdir(&workspace, Some(Path::new(bad))).is_err(),
                "{bad} accepted"
            );
        }
        std::os::unix::fs::symlink("/", workspace.join("escape")).expect("symlink");
        assert!(
            validate_workdir(&workspace, Some(Path::new("escape"))).is_err(),
            "symlink out accepted"
        );
    }

    #[test]
    fn environment_holds_only_the_sandbox_variables_and_extras() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut request = spec(dir.path());
        request.policy.env.insert("EDITOR".into(), "vi".into());
        request.env.push(("LANG".into(), "de_DE.UTF-8".into()));
        let env = build_env(&request, Path::new("/workspace"), None).expect("env");
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, vec!["PATH", "HOME", "TERM", "EDITOR", "LANG"]);
        assert!(env.contains(&("HOME".into(), "/workspace".into())));
        assert!(env.contains(&("LANG".into(), "de_DE.UTF-8".into())));
    }

    #[test]
    fn environment_rejects_bad_names_and_fixed_variables() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, value) in [
            ("1BAD", "x"),
            ("A=B", "x"),
            ("HOME", "/root"),
            ("OK", "nul\0byte"),
        ] {
            let mut request = spec(dir.path());
            request.env.push((name.into(), value.into()));
            assert!(
                build_env(&request, Path::new("/workspace"), None).is_err(),
                "{name:?} accepted"
            );
        }
    }

    #[test]
    fn extra_paths_may_not_shadow_sandbox_paths() {
        assert!(validate_extra_paths(&[PathBuf::from("/tmp")]).is_err());
        assert!(validate_extra_paths(&[PathBuf::from("relative")]).is_err());
        assert!(validate_extra_paths(&[PathBuf::from("/")]).is_err());
        assert_eq!(
            validate_extra_paths(&[PathBuf::from("/usr")]).expect("usr"),
            vec![PathBuf::from("/usr")]
        );
    }

    #[test]
    fn timeout_override_is_capped_at_the_maximum() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut request = spec(dir.path());
        request.timeout = Some(Duration::from_secs(10_000));
        assert_eq!(
            choose_timeout(&request).expect("timeout"),
            Duration::from_secs(1800)
        );
        request.timeout = None;
        assert_eq!(
            choose_timeout(&request).expect("timeout"),
            Duration::from_secs(120)
        );
        request.timeout = Some(Duration::ZERO);
        assert!(choose_timeout(&request).is_err());
    }

    #[test]
    fn program_must_be_an_absolute_path() {
        assert!(validate_argv(&["sh".into()]).is_err());
        assert!(validate_argv(&[]).is_err());
        assert!(validate_argv(&["/bin/sh".into(), "-c".into(), "true".into()]).is_ok());
    }
}
