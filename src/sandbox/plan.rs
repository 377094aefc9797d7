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
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
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
use super::request::{build_env, invalid, ValidRequest};
use super::seccomp::SeccompPlan;
use super::{Confinement, Layer, NetworkPolicy, SandboxError, SandboxSpec};

/// Host devices a sandbox without namespaces may use, with whether they are writable.
const HOST_DEVICES: [(&str, bool); 5] = [
    ("/dev/null", true),
    ("/dev/zero", true),
    ("/dev/random", false),
    ("/dev/urandom", false),
    ("/dev/tty", true),
];
/// First Landlock ABI with TCP bind/connect rules.
const LANDLOCK_TCP_ABI: u32 = 4;

static TEMP_DIR_COUNTER: AtomicU64 = AtomicU64::new(0);

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
        let path = create_private_temp_dir("pincer-sandbox-tmp")?;
        Ok(Self { path })
    }
}

impl Drop for RunTmpDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Creates a new directory under the system temp dir, readable by its owner only.
///
/// The name carries the pid, a per-process serial and a random part: a process killed
/// before it could clean up leaves its directory behind, and a later process may get
/// the same pid, so pid and serial alone would collide with it.
pub(crate) fn create_private_temp_dir(prefix: &str) -> io::Result<PathBuf> {
    let serial = TEMP_DIR_COUNTER.fetch_add(1, Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(
        "{prefix}-{}-{serial}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    fs::DirBuilder::new().mode(0o700).create(&path)?;
    Ok(path)
}

/// The name prefixes of the directories [`create_private_temp_dir`] makes.
pub(crate) const TEMP_DIR_PREFIXES: [&str; 2] = ["pincer-sandbox-tmp", "pincer-sandbox-probe"];

/// Removes the sandbox temp directories under `root` left by processes that no longer run.
///
/// A process killed before its runs ended cannot clean up after itself. Only directories
/// owned by this user whose creating pid is gone (in this pid namespace) are removed.
/// Returns how many were removed.
pub(crate) fn sweep_stale_temp_dirs(root: &Path) -> usize {
    let Ok(entries) = fs::read_dir(root) else {
        return 0;
    };
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(stale_dir_pid) else {
            continue;
        };
        let owned = entry
            .metadata()
            .is_ok_and(|meta| meta.is_dir() && meta.uid() == uid);
        let alive = Path::new("/proc").join(pid.to_string()).exists();
        if owned && !alive && fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The creating pid in a sandbox temp directory's name (`<prefix>-<pid>-<serial>[-<random>]`).
fn stale_dir_pid(name: &str) -> Option<u32> {
    let rest = TEMP_DIR_PREFIXES
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix)?.strip_prefix('-'))?;
    rest.split('-').next()?.parse().ok()
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
    let ValidRequest {
        timeout,
        workspace,
        relative_workdir,
        extras,
        read_only_workspace,
    } = ValidRequest::check(spec)?;
    let isolate_network = policy.network == NetworkPolicy::None;
    let run_tmp = if layers.confined && !layers.namespaces {
        Some(RunTmpDir::create()?)
    } else {
        None
    };
    let isolation = plan_isolation(&IsolationInputs {
        spec,
        layers,
        workspace: &workspace,
        relative_workdir: &relative_workdir,
        extras: &extras,
        read_only_workspace: read_only_workspace.as_deref(),
        tmp: run_tmp.as_ref().map(|t| t.path.as_path()),
        isolate_network,
    })?;
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
    let env = build_env(
        spec,
        &isolation.home,
        run_tmp.as_ref().map(|t| t.path.as_path()),
    )?;
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
        namespaces: isolation.namespaces,
        landlock: isolation.landlock,
        seccomp,
        rlimits: RlimitPlan::new(&policy.limits),
        workdir: c_string("workdir", isolation.workdir.as_os_str().as_bytes())?,
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

/// Inputs of [`plan_isolation`].
struct IsolationInputs<'a> {
    spec: &'a SandboxSpec,
    layers: LayerSet,
    workspace: &'a Path,
    relative_workdir: &'a Path,
    extras: &'a [PathBuf],
    read_only_workspace: Option<&'a Path>,
    tmp: Option<&'a Path>,
    isolate_network: bool,
}

/// The namespace and Landlock plans, with HOME and the working directory as the child sees them.
struct Isolation {
    namespaces: Option<NamespacePlan>,
    landlock: Option<LandlockPlan>,
    home: PathBuf,
    workdir: PathBuf,
}

fn plan_isolation(inputs: &IsolationInputs<'_>) -> Result<Isolation, SandboxError> {
    let (layers, limits) = (inputs.layers, &inputs.spec.policy.limits);
    let system = namespaces::system_paths(!inputs.isolate_network);
    if !layers.namespaces {
        let landlock = if layers.landlock {
            let (workspace, extras) = (inputs.workspace, inputs.extras);
            let read_only: Vec<PathBuf> = extras
                .iter()
                .cloned()
                .chain(inputs.read_only_workspace.map(Path::to_path_buf))
                .collect();
            Some(host_landlock_plan(
                workspace,
                inputs.tmp,
                &system,
                &read_only,
                inputs.isolate_network,
            )?)
        } else {
            None
        };
        return Ok(Isolation {
            namespaces: None,
            landlock,
            home: inputs.workspace.to_path_buf(),
            workdir: inputs.workspace.join(inputs.relative_workdir),
        });
    }
    let root = RootPlan::build(&RootInputs {
        workspace: inputs.workspace,
        read_only_workspace: inputs.read_only_workspace,
        system: &system,
        extra_read_only: inputs.extras,
        tmp_bytes: limits.tmp_bytes,
        pid_max: u32::try_from(limits.max_processes.saturating_add(1)).unwrap_or(u32::MAX),
        mount_proc: layers.mount_proc,
        isolate_network: inputs.isolate_network,
    })?;
    let landlock = if layers.landlock {
        Some(root.landlock_plan(false)?)
    } else {
        None
    };
    let home = PathBuf::from(SANDBOX_WORKSPACE);
    Ok(Isolation {
        namespaces: Some(NamespacePlan {
            root,
            maps: IdMaps::for_current_user(inputs.spec.policy.user),
            unshare_flags: namespaces::unshare_flags(inputs.isolate_network),
        }),
        landlock,
        workdir: home.join(inputs.relative_workdir),
        home,
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::probe::LayerStatus;
    use crate::sandbox::{SandboxMode, SessionScope};

    fn spec(workspace: &Path) -> SandboxSpec {
        SandboxSpec::new(vec!["/bin/true".into()], workspace)
    }

    #[test]
    fn private_temp_dirs_are_distinct_and_owner_only() {
        let first = create_private_temp_dir("pincer-sandbox-tmp").expect("first");
        let second = create_private_temp_dir("pincer-sandbox-tmp").expect("second");
        assert_ne!(first, second);
        let mode = fs::metadata(&first).expect("stat").mode() & 0o777;
        assert_eq!(mode, 0o700);
        fs::remove_dir_all(first).expect("cleanup");
        fs::remove_dir_all(second).expect("cleanup");
    }

    #[test]
    fn sweep_removes_directories_of_dead_processes_only() {
        let root = tempfile::tempdir().expect("root");
        let mut child = std::process::Command::new("/bin/true")
            .spawn()
            .expect("spawn");
        let dead = child.id();
        child.wait().expect("wait");
        let live = std::process::id();
        let dead_tmp = root.path().join(format!("pincer-sandbox-tmp-{dead}-0"));
        let dead_probe = root
            .path()
            .join(format!("pincer-sandbox-probe-{dead}-3-abc"));
        let live_tmp = root.path().join(format!("pincer-sandbox-tmp-{live}-0-abc"));
        let unrelated = root.path().join(format!("pincer-other-{dead}-0"));
        for dir in [&dead_tmp, &dead_probe, &live_tmp, &unrelated] {
            fs::create_dir(dir).expect("mkdir");
        }
        fs::write(dead_tmp.join("left.txt"), "x").expect("file");
        assert_eq!(sweep_stale_temp_dirs(root.path()), 2);
        assert!(!dead_tmp.exists() && !dead_probe.exists());
        assert!(live_tmp.exists() && unrelated.exists());
    }

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
}
