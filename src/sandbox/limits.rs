//! Resource limits of a sandboxed command: rlimits set in the child, and cgroup v2 limits when
//! the service runs in a delegated cgroup (systemd `Delegate=yes`).
//!
//! The parent computes an [`RlimitPlan`] (never above the gateway's own hard limits) that the
//! child applies with plain `setrlimit` calls; the cgroup side detects a writable delegated
//! hierarchy, creates one child cgroup per run, and kills/removes it afterwards. This file must
//! not spawn processes and must not touch cgroups it did not create, apart from moving the
//! service's own processes into a leaf once so that controllers can be enabled.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// cgroup v2 controllers a sandbox run needs.
const REQUIRED_CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];
/// Leaf the service's own processes move into so its cgroup can delegate controllers.
const GATEWAY_LEAF: &str = "pincer-gateway";
/// Prefix of the per-run cgroups.
const RUN_CGROUP_PREFIX: &str = "pincer-sandbox-";
/// Period of `cpu.max`, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// Limits applied to every process of one sandboxed command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceLimits {
    /// Address space per process (`RLIMIT_AS`) and the run's `memory.max` with a cgroup.
    pub memory_bytes: u64,
    /// CPU time per process (`RLIMIT_CPU`).
    pub cpu_seconds: u64,
    /// Processes of the sandbox user (`RLIMIT_NPROC`) and the run's `pids.max`.
    pub max_processes: u64,
    /// Largest file a process may write (`RLIMIT_FSIZE`).
    pub max_file_bytes: u64,
    /// Open file descriptors per process (`RLIMIT_NOFILE`).
    pub max_open_files: u64,
    /// Size of the sandbox's private `/tmp` (a tmpfs, so it counts against RAM).
    pub tmp_bytes: u64,
    /// CPU share of the run's cgroup (`cpu.max`), 100 = one core.
    pub cpu_quota_percent: u32,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 1024 * 1024 * 1024,
            cpu_seconds: 120,
            max_processes: 64,
            max_file_bytes: 256 * 1024 * 1024,
            max_open_files: 256,
            tmp_bytes: 64 * 1024 * 1024,
            cpu_quota_percent: 100,
        }
    }
}

impl ResourceLimits {
    /// Names the first limit that is zero (a zero limit would make every command fail).
    pub fn validate(&self) -> Result<(), &'static str> {
        let fields = [
            ("limits.memoryBytes", self.memory_bytes),
            ("limits.cpuSeconds", self.cpu_seconds),
            ("limits.maxProcesses", self.max_processes),
            ("limits.maxFileBytes", self.max_file_bytes),
            ("limits.maxOpenFiles", self.max_open_files),
            ("limits.tmpBytes", self.tmp_bytes),
            ("limits.cpuQuotaPercent", u64::from(self.cpu_quota_percent)),
        ];
        match fields.iter().find(|(_, value)| *value == 0) {
            Some((name, _)) => Err(name),
            None => Ok(()),
        }
    }
}

/// The type of an rlimit resource number (glibc and musl differ).
#[cfg(target_env = "gnu")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
type Resource = libc::c_int;

/// rlimits the child sets on itself before exec, as `(resource, soft, hard)`.
#[derive(Clone, Debug)]
pub(crate) struct RlimitPlan {
    entries: Vec<(Resource, libc::rlim_t, libc::rlim_t)>,
}

impl RlimitPlan {
    /// Plans the limits, capped at this process's own hard limits (which a child cannot raise).
    pub(crate) fn new(limits: &ResourceLimits) -> Self {
        let wanted = [
            (libc::RLIMIT_AS, limits.memory_bytes, limits.memory_bytes),
            (libc::RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1),
            (
                libc::RLIMIT_NPROC,
                limits.max_processes,
                limits.max_processes,
            ),
            (
                libc::RLIMIT_FSIZE,
                limits.max_file_bytes,
                limits.max_file_bytes,
            ),
            (
                libc::RLIMIT_NOFILE,
                limits.max_open_files,
                limits.max_open_files,
            ),
            (libc::RLIMIT_CORE, 0, 0),
        ];
        let entries = wanted
            .into_iter()
            .map(|(resource, soft, hard)| {
                let ceiling = current_hard_limit(resource);
                let hard = (hard as libc::rlim_t).min(ceiling);
                let soft = (soft as libc::rlim_t).min(hard);
                (resource, soft, hard)
            })
            .collect();
        Self { entries }
    }

    /// Applies the limits to the calling process. Runs in the forked child: no allocation.
    pub(crate) fn apply(&self) -> Result<(), (usize, i32)> {
        for (index, &(resource, soft, hard)) in self.entries.iter().enumerate() {
            let limit = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            // SAFETY: setrlimit reads a valid rlimit struct.
            if unsafe { libc::setrlimit(resource, &limit) } != 0 {
                return Err((index, last_errno()));
            }
        }
        Ok(())
    }

    /// Name of the rlimit at `index`, for error messages.
    pub(crate) fn name(&self, index: usize) -> &'static str {
        const NAMES: [&str; 6] = [
            "RLIMIT_AS",
            "RLIMIT_CPU",
            "RLIMIT_NPROC",
            "RLIMIT_FSIZE",
            "RLIMIT_NOFILE",
            "RLIMIT_CORE",
        ];
        NAMES.get(index).copied().unwrap_or("rlimit")
    }
}

fn current_hard_limit(resource: Resource) -> libc::rlim_t {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid rlimit struct.
    if unsafe { libc::getrlimit(resource, &mut limit) } == 0 {
        limit.rlim_max
    } else {
        libc::RLIM_INFINITY
    }
}

pub(crate) fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A cgroup v2 directory delegated to this service, with the controllers a run needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupDelegation {
    /// The service's own cgroup directory.
    pub dir: PathBuf,
}

static RUN_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Why no delegated cgroup v2 directory is usable.
#[derive(Debug, thiserror::Error)]
pub enum DelegationError {
    #[error("{}: {error}", path.display())]
    Read { path: PathBuf, error: io::Error },
    #[error("this process is in no cgroup v2 hierarchy (cgroup v1 only)")]
    CgroupV1Only,
    #[error("no cgroup2 filesystem is mounted")]
    NoCgroup2Mount,
    #[error(
        "controllers {} are not available in {} (available: {}); hybrid cgroup v1 host or no Delegate=yes",
        missing.join(", "),
        dir.display(),
        if available.is_empty() { "none".to_owned() } else { available.join(" ") }
    )]
    MissingControllers {
        missing: Vec<&'static str>,
        dir: PathBuf,
        available: Vec<String>,
    },
    #[error("{} is not writable by this service (set Delegate=yes on its unit)", .0.display())]
    NotWritable(PathBuf),
    /// Root can write any cgroup: only systemd's mark says this one is ours to split.
    #[error(
        "{} is not delegated to this process (root can write it, but its unit has no Delegate=yes: \
         systemd's trusted.delegate/user.delegate mark is absent)",
        .0.display()
    )]
    NotDelegated(PathBuf),
}

fn read(path: &Path) -> Result<String, DelegationError> {
    fs::read_to_string(path).map_err(|error| DelegationError::Read {
        path: path.to_path_buf(),
        error,
    })
}

impl CgroupDelegation {
    /// Detects this process's delegated cgroup v2 directory; `Err` says why none is usable.
    pub fn detect() -> Result<Self, DelegationError> {
        let own = read(Path::new("/proc/self/cgroup"))?;
        let mountinfo = read(Path::new("/proc/self/mountinfo"))?;
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        Self::detect_in(&own, &mountinfo, Path::new("/"), euid)
    }

    /// [`detect`](Self::detect) over given `/proc/self/cgroup` and mountinfo texts, with paths
    /// resolved under `fs_root` (tests use a fake tree), for a process running as `euid`.
    ///
    /// An unprivileged process can write only a cgroup delegated to it. Root can write any, so
    /// for root the cgroup must carry systemd's delegation mark (`trusted.delegate` or
    /// `user.delegate` = 1, set for `Delegate=yes` units), unless it is the root of this
    /// process's cgroup namespace (a container's). Without that check, `pincer doctor` run as
    /// root in an SSH session took over `ssh.service`'s cgroup and left sshd unable to fork.
    pub fn detect_in(
        own_cgroup: &str,
        mountinfo: &str,
        fs_root: &Path,
        euid: u32,
    ) -> Result<Self, DelegationError> {
        let relative = own_cgroup
            .lines()
            .find_map(|line| line.strip_prefix("0::"))
            .ok_or(DelegationError::CgroupV1Only)?;
        let mount = cgroup2_mount_point(mountinfo).ok_or(DelegationError::NoCgroup2Mount)?;
        let mut dir = fs_root.join(mount.trim_start_matches('/'));
        let relative = relative.trim().trim_start_matches('/');
        if !relative.is_empty() {
            dir.push(relative);
        }
        let controllers = read(&dir.join("cgroup.controllers"))?;
        let available: Vec<&str> = controllers.split_whitespace().collect();
        let missing: Vec<&'static str> = REQUIRED_CONTROLLERS
            .into_iter()
            .filter(|wanted| !available.contains(wanted))
            .collect();
        if !missing.is_empty() {
            return Err(DelegationError::MissingControllers {
                missing,
                available: available.into_iter().map(str::to_owned).collect(),
                dir,
            });
        }
        for file in [
            dir.clone(),
            dir.join("cgroup.subtree_control"),
            dir.join("cgroup.procs"),
        ] {
            if !is_writable(&file) {
                return Err(DelegationError::NotWritable(file));
            }
        }
        if euid == 0 && !relative.is_empty() && !delegation_marked(&dir) {
            return Err(DelegationError::NotDelegated(dir));
        }
        Ok(Self { dir })
    }

    /// Makes the delegated cgroup able to host run cgroups: moves the service's processes into
    /// a leaf and enables the controllers for children. Idempotent.
    pub fn prepare(&self) -> io::Result<()> {
        let subtree = fs::read_to_string(self.dir.join("cgroup.subtree_control"))?;
        let enabled: Vec<&str> = subtree.split_whitespace().collect();
        if REQUIRED_CONTROLLERS.iter().all(|c| enabled.contains(c)) {
            return Ok(());
        }
        let leaf = self.dir.join(GATEWAY_LEAF);
        match fs::create_dir(&leaf) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let members = fs::read_to_string(self.dir.join("cgroup.procs"))?;
        for pid in members.split_whitespace() {
            fs::write(leaf.join("cgroup.procs"), pid)?;
        }
        let enable: Vec<String> = REQUIRED_CONTROLLERS
            .iter()
            .map(|c| format!("+{c}"))
            .collect();
        fs::write(self.dir.join("cgroup.subtree_control"), enable.join(" "))
    }

    /// Creates the cgroup of one run with its limits written.
    pub fn create_run(&self, limits: &ResourceLimits) -> io::Result<RunCgroup> {
        let serial = RUN_COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(format!(
            "{RUN_CGROUP_PREFIX}{}-{serial}",
            std::process::id()
        ));
        fs::create_dir(&dir)?;
        let run = RunCgroup::new(dir)?;
        let quota_us = CPU_PERIOD_US * u64::from(limits.cpu_quota_percent) / 100;
        let settings = [
            ("memory.max", limits.memory_bytes.to_string()),
            ("memory.swap.max", "0".to_owned()),
            ("memory.oom.group", "1".to_owned()),
            ("pids.max", limits.max_processes.to_string()),
            ("cpu.max", format!("{quota_us} {CPU_PERIOD_US}")),
        ];
        for (file, value) in settings {
            let path = run.dir.join(file);
            // memory.swap.max is absent without swap accounting; every other file is required.
            if file == "memory.swap.max" && !path.exists() {
                continue;
            }
            fs::write(&path, value)?;
        }
        Ok(run)
    }
}

fn cgroup2_mount_point(mountinfo: &str) -> Option<&str> {
    mountinfo.lines().find_map(|line| {
        let (fields, rest) = line.split_once(" - ")?;
        if rest.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        fields.split_whitespace().nth(4)
    })
}

/// systemd's mark on a `Delegate=yes` unit's cgroup: the `trusted.delegate` extended
/// attribute (root-only), else `user.delegate`, set to "1".
fn delegation_marked(dir: &Path) -> bool {
    let Ok(c_path) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    ["trusted.delegate", "user.delegate"].iter().any(|name| {
        let c_name = CString::new(*name).expect("attribute names have no NUL");
        let mut value = [0u8; 8];
        // SAFETY: getxattr reads two NUL-terminated strings and writes at most value.len()
        // bytes into value.
        let len = unsafe {
            libc::getxattr(
                c_path.as_ptr(),
                c_name.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        len == 1 && value[0] == b'1'
    })
}

fn is_writable(path: &Path) -> bool {
    let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: access reads a NUL-terminated path.
    unsafe { libc::access(c_path.as_ptr(), libc::W_OK) == 0 }
}

/// The cgroup of one sandbox run; killed and removed by [`RunCgroup::finish`] or on drop.
#[derive(Debug)]
pub struct RunCgroup {
    dir: PathBuf,
    procs_path: CString,
}

impl RunCgroup {
    fn new(dir: PathBuf) -> io::Result<Self> {
        let procs_path = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in cgroup path"))?;
        Ok(Self { dir, procs_path })
    }

    /// Directory of this run's cgroup.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `cgroup.procs` of this run, which the child writes itself into.
    pub(crate) fn procs_path(&self) -> &CString {
        &self.procs_path
    }

    /// Kills every process left in the cgroup.
    pub fn kill(&self) {
        let kill_file = self.dir.join("cgroup.kill");
        if kill_file.exists() && fs::write(&kill_file, "1").is_ok() {
            return;
        }
        let Ok(members) = fs::read_to_string(self.dir.join("cgroup.procs")) else {
            return;
        };
        for pid in members
            .split_whitespace()
            .filter_map(|p| p.parse::<libc::pid_t>().ok())
        {
            // SAFETY: kill has no memory effects; the pid belongs to this run's cgroup.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// True when the kernel's OOM killer acted in this cgroup.
    pub fn oom_killed(&self) -> bool {
        let Ok(events) = fs::read_to_string(self.dir.join("memory.events")) else {
            return false;
        };
        events.lines().any(|line| {
            line.strip_prefix("oom_kill ")
                .and_then(|count| count.trim().parse::<u64>().ok())
                .is_some_and(|count| count > 0)
        })
    }

    /// Kills what is left and removes the cgroup; returns whether the OOM killer acted.
    pub fn finish(self) -> bool {
        let oom = self.oom_killed();
        drop(self);
        oom
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        self.kill();
        // A killed cgroup empties within moments; rmdir fails with EBUSY until it has.
        for _ in 0..50 {
            match fs::remove_dir(&self.dir) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    const MOUNTINFO: &str = "\
22 27 0:21 / /proc rw,relatime - proc proc rw
41 31 0:38 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
";

    fn fake_tree(controllers: &str) -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("tempdir");
        let service = root
            .path()
            .join("sys/fs/cgroup/system.slice/pincer.service");
        fs::create_dir_all(&service).expect("create fake cgroup");
        fs::write(service.join("cgroup.controllers"), controllers).expect("write");
        fs::write(service.join("cgroup.subtree_control"), "").expect("write");
        fs::write(service.join("cgroup.procs"), "4242\n4243\n").expect("write");
        root
    }

    /// The uid a `User=pincer` service runs as: writability is the delegation.
    const SERVICE_UID: u32 = 995;

    fn mark_delegated(dir: &Path) {
        let path = CString::new(dir.as_os_str().as_bytes()).expect("path");
        // SAFETY: two NUL-terminated strings and a one-byte value.
        let rc = unsafe {
            libc::setxattr(
                path.as_ptr(),
                c"user.delegate".as_ptr(),
                b"1".as_ptr().cast(),
                1,
                0,
            )
        };
        assert_eq!(rc, 0, "setxattr: {}", io::Error::last_os_error());
    }

    #[test]
    fn root_takes_only_a_cgroup_systemd_marked_as_delegated() {
        let root = fake_tree("cpu memory pids");
        let own = "0::/system.slice/ssh.service\n";
        let ssh = root.path().join("sys/fs/cgroup/system.slice/ssh.service");
        fs::create_dir_all(&ssh).expect("ssh cgroup");
        for file in [
            "cgroup.controllers",
            "cgroup.subtree_control",
            "cgroup.procs",
        ] {
            fs::write(ssh.join(file), "cpu memory pids").expect("write");
        }
        let refused = CgroupDelegation::detect_in(own, MOUNTINFO, root.path(), 0)
            .expect_err("root in an undelegated unit")
            .to_string();
        assert!(refused.contains("not delegated"), "{refused}");
        mark_delegated(&ssh);
        CgroupDelegation::detect_in(own, MOUNTINFO, root.path(), 0).expect("marked: delegated");
        // the root of a cgroup namespace (a container's) is the process's own
        let ns_root = fake_tree("cpu memory pids");
        fs::write(
            ns_root.path().join("sys/fs/cgroup/cgroup.controllers"),
            "cpu memory pids",
        )
        .expect("write");
        for file in ["cgroup.subtree_control", "cgroup.procs"] {
            fs::write(ns_root.path().join("sys/fs/cgroup").join(file), "").expect("write");
        }
        CgroupDelegation::detect_in("0::/\n", MOUNTINFO, ns_root.path(), 0)
            .expect("namespace root");
    }

    #[test]
    fn delegated_cgroup_with_all_controllers_is_detected() {
        let root = fake_tree("cpuset cpu io memory pids");
        let found = CgroupDelegation::detect_in(
            "0::/system.slice/pincer.service\n",
            MOUNTINFO,
            root.path(),
            SERVICE_UID,
        )
        .expect("delegation detected");
        assert!(found
            .dir
            .ends_with("sys/fs/cgroup/system.slice/pincer.service"));
    }

    #[test]
    fn missing_controllers_are_named_in_the_reason() {
        let root = fake_tree("hugetlb");
        let reason = CgroupDelegation::detect_in(
            "0::/system.slice/pincer.service\n",
            MOUNTINFO,
            root.path(),
            SERVICE_UID,
        )
        .expect_err("no memory controller")
        .to_string();
        assert!(reason.contains("memory, pids, cpu"), "{reason}");
        assert!(reason.contains("available: hugetlb"), "{reason}");
    }

    #[test]
    fn cgroup_v1_only_host_is_reported() {
        let reason =
            CgroupDelegation::detect_in("4:memory:/x\n1:cpu:/\n", MOUNTINFO, Path::new("/"), 0)
                .expect_err("v1 only")
                .to_string();
        assert!(reason.contains("cgroup v1"), "{reason}");
    }

    #[test]
    fn prepare_moves_service_processes_to_a_leaf_and_enables_controllers() {
        let root = fake_tree("cpu memory pids");
        let found = CgroupDelegation::detect_in(
            "0::/system.slice/pincer.service",
            MOUNTINFO,
            root.path(),
            SERVICE_UID,
        )
        .expect("detected");
        found.prepare().expect("prepare");
        let leaf =
            fs::read_to_string(found.dir.join(GATEWAY_LEAF).join("cgroup.procs")).expect("leaf");
        assert_eq!(
            leaf, "4243",
            "each pid written into the leaf, the last one remains in a plain file"
        );
        let subtree =
            fs::read_to_string(found.dir.join("cgroup.subtree_control")).expect("subtree");
        assert_eq!(subtree, "+memory +pids +cpu");
    }

    #[test]
    fn run_cgroup_gets_the_limits_and_is_removed_when_finished() {
        let root = fake_tree("cpu memory pids");
        let found = CgroupDelegation::detect_in(
            "0::/system.slice/pincer.service",
            MOUNTINFO,
            root.path(),
            SERVICE_UID,
        )
        .expect("detected");
        let limits = ResourceLimits {
            memory_bytes: 1 << 28,
            max_processes: 32,
            cpu_quota_percent: 50,
            ..ResourceLimits::default()
        };
        let run = found.create_run(&limits).expect("create run cgroup");
        let dir = run.dir().to_path_buf();
        let procs = Path::new(OsStr::from_bytes(run.procs_path().as_bytes()));
        assert_eq!(procs, dir.join("cgroup.procs"));
        let read = |file: &str| fs::read_to_string(dir.join(file)).expect("limit file");
        assert_eq!(read("memory.max"), (1u64 << 28).to_string());
        assert_eq!(read("pids.max"), "32");
        assert_eq!(read("cpu.max"), "50000 100000");
        assert_eq!(read("memory.oom.group"), "1");
        fs::write(dir.join("memory.events"), "low 0\noom 1\noom_kill 1\n").expect("write events");
        assert!(run.oom_killed(), "oom_kill count read from memory.events");
        // A kernel cgroup's interface files never block rmdir; the fake's regular files would.
        for file in [
            "memory.max",
            "pids.max",
            "cpu.max",
            "memory.oom.group",
            "memory.events",
        ] {
            fs::remove_file(dir.join(file)).expect("remove");
        }
        run.finish();
        assert!(!dir.exists(), "run cgroup removed");
    }

    #[test]
    fn rlimits_never_exceed_the_parent_hard_limits() {
        let plan = RlimitPlan::new(&ResourceLimits {
            max_open_files: u64::MAX / 2,
            ..ResourceLimits::default()
        });
        let nofile = plan
            .entries
            .iter()
            .find(|(resource, _, _)| *resource == libc::RLIMIT_NOFILE)
            .expect("nofile planned");
        assert!(nofile.2 <= current_hard_limit(libc::RLIMIT_NOFILE));
        let core = plan
            .entries
            .iter()
            .find(|(r, _, _)| *r == libc::RLIMIT_CORE)
            .expect("core");
        assert_eq!((core.1, core.2), (0, 0));
    }

    #[test]
    fn zero_limits_are_rejected_by_name() {
        let limits = ResourceLimits {
            max_processes: 0,
            ..ResourceLimits::default()
        };
        assert_eq!(limits.validate(), Err("limits.maxProcesses"));
        assert_eq!(ResourceLimits::default().validate(), Ok(()));
    }
}
