//! What this host can provide for the sandbox, detected by trying it.
//!
//! Each layer is probed by a real trial run of `/bin/true` with only that layer (namespaces
//! with and without a fresh `/proc`, Landlock, seccomp) plus a side-effect-free look at the
//! cgroup v2 delegation. The result is cached per process for [`super::run`] and summarised for
//! `pincer doctor`. This file must not change host state beyond the temporary directory its
//! trials use.

use std::fmt;
use std::fs;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use super::landlock::kernel_abi;
use super::limits::CgroupDelegation;
use super::plan::{create_private_temp_dir, prepare, sweep_stale_temp_dirs, LayerSet};
use super::report::{ChildReport, Step};
use super::runner::trial;
use super::seccomp::SeccompPlan;
use super::{Layer, SandboxError, SandboxSpec};

/// Timeout of one trial run.
const TRIAL_TIMEOUT: Duration = Duration::from_secs(10);

static CACHED: OnceLock<Capabilities> = OnceLock::new();

/// Whether a layer can be used, and why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayerStatus {
    /// The layer works on this host.
    Available,
    /// The layer cannot be used; the text says why.
    Unavailable(String),
}

impl LayerStatus {
    /// True when the layer works.
    pub fn is_available(&self) -> bool {
        matches!(self, LayerStatus::Available)
    }
}

impl fmt::Display for LayerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerStatus::Available => f.write_str("available"),
            LayerStatus::Unavailable(reason) => write!(f, "unavailable: {reason}"),
        }
    }
}

/// What bounds the number of processes of one run on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessLimit {
    /// The run's cgroup `pids.max`.
    CgroupPids,
    /// `RLIMIT_NPROC` of the (unprivileged) service user.
    Rlimit,
    /// Only the PID namespace's `pid_max`, whose kernel floor is 301 (host root without a
    /// cgroup: the kernel never applies `RLIMIT_NPROC` to uid 0).
    PidNamespace,
    /// Nothing: host root without a delegated cgroup on a kernel without per-namespace `pid_max`.
    Unbounded,
}

/// The sandbox layers this host supports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// User, mount, PID, network, IPC, UTS namespaces with the minimal root.
    pub namespaces: LayerStatus,
    /// A fresh procfs inside the sandbox (fails where the host's /proc is partly masked).
    pub proc_mount: LayerStatus,
    /// Landlock.
    pub landlock: LayerStatus,
    /// The kernel's Landlock ABI version.
    pub landlock_abi: Option<u32>,
    /// The seccomp filter.
    pub seccomp: LayerStatus,
    /// A delegated cgroup v2 with memory, pids and cpu controllers.
    pub cgroup: LayerStatus,
    /// The delegated cgroup, when usable.
    pub cgroup_delegation: Option<CgroupDelegation>,
    /// The service runs as root.
    pub running_as_root: bool,
    /// What bounds the processes of a run.
    pub process_limit: ProcessLimit,
}

impl Capabilities {
    /// The status of one layer.
    pub fn status(&self, layer: Layer) -> &LayerStatus {
        match layer {
            Layer::Namespaces => &self.namespaces,
            Layer::Landlock => &self.landlock,
            Layer::Seccomp => &self.seccomp,
            Layer::Cgroup => &self.cgroup,
        }
    }

    /// The layers as JSON (for the `status` method).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "namespaces": self.namespaces.to_string(),
            "proc": self.proc_mount.to_string(),
            "landlock": self.landlock.to_string(),
            "landlockAbi": self.landlock_abi,
            "seccomp": self.seccomp.to_string(),
            "cgroup": self.cgroup.to_string(),
            "runningAsRoot": self.running_as_root,
        })
    }

    /// A human summary, one line per layer (for `pincer doctor`).
    pub fn summary(&self) -> String {
        // SAFETY: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() };
        let mut lines = vec![format!(
            "sandbox layers on this host (running as uid {uid}{}):",
            if self.running_as_root { ", root" } else { "" }
        )];
        let abi = self
            .landlock_abi
            .map(|v| format!(" (ABI {v})"))
            .unwrap_or_default();
        lines.push(format!("  namespaces: {}", self.namespaces));
        lines.push(format!("  /proc inside the sandbox: {}", self.proc_mount));
        lines.push(format!("  landlock{abi}: {}", self.landlock));
        lines.push(format!(
            "  seccomp ({}): {}",
            std::env::consts::ARCH,
            self.seccomp
        ));
        lines.push(format!("  cgroup v2: {}", self.cgroup));
        lines.push(format!(
            "  process limit: {}",
            match self.process_limit {
                ProcessLimit::CgroupPids => "cgroup pids.max",
                ProcessLimit::Rlimit => "RLIMIT_NPROC",
                ProcessLimit::PidNamespace => "pid namespace pid_max only (at least 301; RLIMIT_NPROC does not bind root)",
                ProcessLimit::Unbounded => "NONE: RLIMIT_NPROC does not bind root; run as a service user or delegate a cgroup",
            }
        ));
        if let Some(delegation) = &self.cgroup_delegation {
            lines.push(format!(
                "    delegated cgroup: {}",
                delegation.dir.display()
            ));
        }
        lines.push(
            "  rlimits, no_new_privs, capability drop, scrubbed env, timeout, output caps: always"
                .to_owned(),
        );
        lines.join("\n")
    }
}

/// Probes this host now (each call runs fresh trials).
pub fn probe() -> Capabilities {
    // SAFETY: geteuid cannot fail.
    let running_as_root = unsafe { libc::geteuid() } == 0;
    let (cgroup, cgroup_delegation) = match CgroupDelegation::detect() {
        Ok(delegation) => (LayerStatus::Available, Some(delegation)),
        Err(reason) => (LayerStatus::Unavailable(reason.to_string()), None),
    };
    let landlock_abi = kernel_abi();
    sweep_stale_temp_dirs(&std::env::temp_dir());
    let trials = match TrialDir::create() {
        Ok(dir) => dir.run_all(landlock_abi.is_ok()),
        Err(error) => {
            let reason =
                LayerStatus::Unavailable(format!("could not create a trial workspace: {error}"));
            TrialResults {
                namespaces: reason.clone(),
                proc_mount: reason.clone(),
                landlock: reason.clone(),
                seccomp: reason,
                pid_namespace_limit: false,
            }
        }
    };
    let process_limit = if cgroup.is_available() {
        ProcessLimit::CgroupPids
    } else if !running_as_root {
        ProcessLimit::Rlimit
    } else if trials.pid_namespace_limit {
        ProcessLimit::PidNamespace
    } else {
        ProcessLimit::Unbounded
    };
    Capabilities {
        namespaces: trials.namespaces,
        proc_mount: trials.proc_mount,
        landlock: match &landlock_abi {
            Ok(_) => trials.landlock,
            Err(reason) => LayerStatus::Unavailable(reason.clone()),
        },
        landlock_abi: landlock_abi.ok(),
        seccomp: trials.seccomp,
        cgroup,
        cgroup_delegation,
        running_as_root,
        process_limit,
    }
}

/// The capabilities probed once for this process.
pub(crate) fn cached() -> &'static Capabilities {
    CACHED.get_or_init(probe)
}

struct TrialResults {
    namespaces: LayerStatus,
    proc_mount: LayerStatus,
    landlock: LayerStatus,
    seccomp: LayerStatus,
    pid_namespace_limit: bool,
}

/// A temporary empty workspace for trial runs, removed on drop.
struct TrialDir {
    path: PathBuf,
}

impl TrialDir {
    fn create() -> std::io::Result<Self> {
        let path = create_private_temp_dir("pincer-sandbox-probe")?;
        Ok(Self { path })
    }

    fn run_all(&self, landlock_supported: bool) -> TrialResults {
        let only = |layers: LayerSet| self.try_layers(layers);
        let namespaces = LayerSet {
            confined: true,
            namespaces: true,
            mount_proc: true,
            ..LayerSet::default()
        };
        let mut pid_namespace_limit = false;
        let (namespaces, proc_mount) = match only(namespaces) {
            Ok(report) => {
                pid_namespace_limit = report.pid_max.is_some();
                (LayerStatus::Available, LayerStatus::Available)
            }
            Err(failure) if failure.is_proc_mount => match only(LayerSet {
                mount_proc: false,
                ..namespaces
            }) {
                Ok(_) => (
                    LayerStatus::Available,
                    LayerStatus::Unavailable(failure.reason),
                ),
                Err(other) => (
                    LayerStatus::Unavailable(other.reason),
                    LayerStatus::Unavailable(failure.reason),
                ),
            },
            Err(failure) => (
                LayerStatus::Unavailable(failure.reason),
                LayerStatus::Unavailable("needs namespaces".to_owned()),
            ),
        };
        let landlock = if landlock_supported {
            to_status(only(LayerSet {
                confined: true,
                landlock: true,
                landlock_tcp: true,
                ..LayerSet::default()
            }))
        } else {
            LayerStatus::Unavailable("not supported by the kernel".to_owned())
        };
        let seccomp = match SeccompPlan::build() {
            Err(error) => LayerStatus::Unavailable(error.to_string()),
            Ok(_) => to_status(only(LayerSet {
                confined: true,
                seccomp: true,
                ..LayerSet::default()
            })),
        };
        TrialResults {
            namespaces,
            proc_mount,
            landlock,
            seccomp,
            pid_namespace_limit,
        }
    }

    fn try_layers(&self, layers: LayerSet) -> Result<ChildReport, TrialFailure> {
        let mut spec = SandboxSpec::new(vec!["/bin/true".to_owned()], &self.path);
        spec.timeout = Some(TRIAL_TIMEOUT);
        let prepared = prepare(&spec, layers, None).map_err(TrialFailure::from)?;
        trial(&prepared).map_err(|error| {
            let is_proc_mount = matches!(&error, SandboxError::Setup { step, detail, .. }
                if *step == Step::MountEntry.describe() && detail.contains("/proc"));
            TrialFailure {
                reason: error.to_string(),
                is_proc_mount,
            }
        })
    }
}

impl Drop for TrialDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

struct TrialFailure {
    reason: String,
    is_proc_mount: bool,
}

impl From<SandboxError> for TrialFailure {
    fn from(error: SandboxError) -> Self {
        Self {
            reason: error.to_string(),
            is_proc_mount: false,
        }
    }
}

fn to_status(result: Result<ChildReport, TrialFailure>) -> LayerStatus {
    match result {
        Ok(_) => LayerStatus::Available,
        Err(failure) => LayerStatus::Unavailable(failure.reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_every_layer_and_its_status() {
        let capabilities = Capabilities {
            namespaces: LayerStatus::Available,
            proc_mount: LayerStatus::Unavailable("procfs is masked".into()),
            landlock: LayerStatus::Available,
            landlock_abi: Some(7),
            seccomp: LayerStatus::Available,
            cgroup: LayerStatus::Unavailable("cgroup v1 only".into()),
            cgroup_delegation: None,
            running_as_root: false,
            process_limit: ProcessLimit::Rlimit,
        };
        let summary = capabilities.summary();
        for expected in [
            "namespaces: available",
            "/proc inside the sandbox: unavailable: procfs is masked",
            "landlock (ABI 7): available",
            "cgroup v2: unavailable: cgroup v1 only",
        ] {
            assert!(
                summary.contains(expected),
                "missing {expected:?} in\n{summary}"
            );
        }
    }

    #[test]
    fn probe_reports_a_reason_for_every_unavailable_layer() {
        let capabilities = probe();
        for layer in Layer::ALL {
            if let LayerStatus::Unavailable(reason) = capabilities.status(layer) {
                assert!(
                    !reason.trim().is_empty(),
                    "{layer} unavailable without a reason"
                );
            }
        }
        println!("{}", capabilities.summary());
    }
}
