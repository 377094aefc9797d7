//! The namespace layer: user (service user mapped to root inside), mount (a minimal private
//! root), PID, network, IPC, UTS and cgroup namespaces.
//!
//! The parent plans the root as a list of [`MountEntry`] values with every path already a C
//! string; the child (the new PID namespace's init) executes the plan with plain syscalls: a
//! scratch tmpfs, a first `pivot_root` so the host tree sits at `/oldroot`, bind mounts into a
//! new root tmpfs, then a final pivot that detaches the host tree entirely. This file must not
//! allocate on the child side and must not expose any host path the plan does not name.

use std::ffi::{CStr, CString, OsStr};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::landlock::{Grant, LandlockPlan};
use super::mounts::{
    check, loopback_up, make_mount_point, mkdir_all, mount, pivot, set_mount_flags, write_file,
    write_new_file, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY,
};
use super::report::{Step, StepFailure};

/// Where the workspace appears inside the sandbox (also `HOME` and the default cwd).
pub const SANDBOX_WORKSPACE: &str = "/workspace";
/// Where a read-only workspace appears inside the sandbox (upstream's `/agent`).
pub const SANDBOX_AGENT_WORKSPACE: &str = "/agent";
/// Host directories (or symlinks) exposed read-only besides every `/lib*` entry of `/`.
const SYSTEM_PATHS: [&str; 4] = ["/usr", "/bin", "/etc/ssl", "/etc/alternatives"];
/// Extra host files exposed read-only when the sandbox shares the host network.
const HOST_NETWORK_FILES: [&str; 4] = [
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
];
/// Devices in the sandbox's `/dev`, with whether they are writable.
const DEVICES: [(&str, bool); 5] = [
    ("null", true),
    ("zero", true),
    ("random", false),
    ("urandom", false),
    ("tty", true),
];
/// Hostname inside the UTS namespace.
const SANDBOX_HOSTNAME: &CStr = c"pincer-sandbox";
/// Options of the tmpfs holding the sandbox's root skeleton (mount points, a few small files).
const ROOT_SKELETON_OPTIONS: &CStr = c"mode=0755,size=1048576";
/// Options of the scratch tmpfs the root is assembled in (two empty directories).
const SCRATCH_OPTIONS: &CStr = c"mode=0700,size=65536";
/// Size of the sandbox's `/dev` tmpfs.
const DEV_TMPFS_BYTES: u64 = 64 * 1024;
/// Lowest `pid_max` the kernel accepts (RESERVED_PIDS + 1).
const PID_MAX_FLOOR: u32 = 301;

const PASSWD: &[u8] = b"root:x:0:0:sandbox:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
const GROUP: &[u8] = b"root:x:0:\nnogroup:x:65534:\n";
const HOSTS: &[u8] =
    b"127.0.0.1\tlocalhost pincer-sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n";

// mount_setattr(2) and statvfs(3) values not all libc versions export.

/// What a host path is, followed through symlinks for files and directories.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NodeKind {
    Directory,
    File,
    Symlink(PathBuf),
}

/// A host system path exposed to the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SystemPath {
    pub(crate) path: PathBuf,
    pub(crate) kind: NodeKind,
}

/// The host system paths the sandbox sees read-only: `/usr`, `/bin`, `/lib*`, `/etc/ssl`,
/// `/etc/alternatives` (and DNS files with host networking); missing ones are skipped.
pub(crate) fn system_paths(host_network: bool) -> Vec<SystemPath> {
    let mut names: Vec<PathBuf> = SYSTEM_PATHS.iter().map(PathBuf::from).collect();
    if let Ok(root) = fs::read_dir("/") {
        let mut libs: Vec<PathBuf> = root
            .filter_map(Result::ok)
            .filter(|entry| entry.file_name().as_bytes().starts_with(b"lib"))
            .map(|entry| entry.path())
            .collect();
        libs.sort();
        names.extend(libs);
    }
    let mut found: Vec<SystemPath> = names
        .into_iter()
        .filter_map(|path| classify(&path, false))
        .collect();
    if host_network {
        found.extend(
            HOST_NETWORK_FILES
                .iter()
                .filter_map(|path| classify(Path::new(path), true)),
        );
    }
    found
}

fn classify(path: &Path, follow: bool) -> Option<SystemPath> {
    let meta = if follow {
        fs::metadata(path)
    } else {
        fs::symlink_metadata(path)
    }
    .ok()?;
    let kind = if meta.file_type().is_symlink() {
        NodeKind::Symlink(fs::read_link(path).ok()?)
    } else if meta.is_dir() {
        NodeKind::Directory
    } else {
        NodeKind::File
    };
    Some(SystemPath {
        path: path.to_path_buf(),
        kind,
    })
}

/// One step of building the sandbox root, executed in order by the child.
#[derive(Clone, Debug)]
pub(crate) enum MountEntry {
    /// Recursive read-only bind of a host directory or file.
    ReadOnlyBind {
        source: CString,
        target: CString,
        is_dir: bool,
    },
    /// Writable bind of a host directory (the workspace), nosuid and nodev.
    WritableBind { source: CString, target: CString },
    /// A symlink (`/bin -> usr/bin` on merged-/usr systems).
    Symlink { path: CString, points_to: CString },
    /// A size-capped tmpfs.
    Tmpfs { target: CString, options: CString },
    /// A bind of one host device node.
    Device { source: CString, target: CString },
    /// A procfs for the new PID namespace.
    Proc { target: CString },
    /// The PID namespace's `pid_max` (Linux 6.14+; older kernels refuse and the step is skipped).
    PidMax {
        path: CString,
        value: CString,
        pid_max: u32,
    },
    /// A bind of a path onto itself, made read-only (`/proc/sys`).
    ReadOnlySelf { target: CString },
    /// A small file written into the root skeleton.
    File {
        target: CString,
        contents: &'static [u8],
    },
}

/// Inputs of the root plan.
pub(crate) struct RootInputs<'a> {
    /// Canonical host path of the workspace.
    pub(crate) workspace: &'a Path,
    /// Canonical host path of a directory bound read-only at [`SANDBOX_AGENT_WORKSPACE`].
    pub(crate) read_only_workspace: Option<&'a Path>,
    /// Host system paths (from [`system_paths`]).
    pub(crate) system: &'a [SystemPath],
    /// Extra host paths exposed read-only at the same path.
    pub(crate) extra_read_only: &'a [PathBuf],
    pub(crate) tmp_bytes: u64,
    /// `pid_max` of the PID namespace (bounds the processes in it where the kernel allows).
    pub(crate) pid_max: u32,
    pub(crate) mount_proc: bool,
    pub(crate) isolate_network: bool,
}

/// The planned sandbox root plus the namespace-wide settings the init applies.
#[derive(Clone, Debug)]
pub(crate) struct RootPlan {
    entries: Vec<MountEntry>,
    isolate_network: bool,
}

/// The user-namespace maps of the service user to root inside (or to the configured user).
#[derive(Clone, Debug)]
pub(crate) struct IdMaps {
    uid_map: CString,
    gid_map: CString,
}

impl IdMaps {
    /// Maps this process's effective uid and gid to `inside` (uid, gid), else to 0 and 0. The
    /// command keeps no capabilities either way (the child drops them before it runs it).
    pub(crate) fn for_current_user(inside: Option<(u32, u32)>) -> Self {
        // SAFETY: geteuid/getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let (inner_uid, inner_gid) = inside.unwrap_or((0, 0));
        Self {
            uid_map: CString::new(format!("{inner_uid} {uid} 1\n")).expect("digits contain no NUL"),
            gid_map: CString::new(format!("{inner_gid} {gid} 1\n")).expect("digits contain no NUL"),
        }
    }

    /// Writes the maps of the calling process after `unshare(CLONE_NEWUSER)`. Child side.
    pub(crate) fn write_own(&self) -> Result<(), StepFailure> {
        write_file(c"/proc/self/setgroups", b"deny")
            .map_err(|e| StepFailure::new(Step::DenySetgroups, e))?;
        write_file(c"/proc/self/uid_map", self.uid_map.to_bytes())
            .map_err(|e| StepFailure::new(Step::UidMap, e))?;
        write_file(c"/proc/self/gid_map", self.gid_map.to_bytes())
            .map_err(|e| StepFailure::new(Step::GidMap, e))
    }
}

/// The `unshare` flags for a sandbox.
pub(crate) fn unshare_flags(isolate_network: bool) -> libc::c_int {
    let base = libc::CLONE_NEWUSER
        | libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    if isolate_network {
        base | libc::CLONE_NEWNET
    } else {
        base
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("NUL byte in {}", path.display()),
        )
    })
}

/// `/oldroot` + host path, the source of a bind once the host tree sits at `/oldroot`.
fn host_source(path: &Path) -> io::Result<CString> {
    c_path(&Path::new("/oldroot").join(path.strip_prefix("/").unwrap_or(path)))
}

/// `/newroot` + sandbox path, the target of a mount while the root is being built.
fn new_root_target(path: &Path) -> io::Result<CString> {
    c_path(&Path::new("/newroot").join(path.strip_prefix("/").unwrap_or(path)))
}

impl RootPlan {
    /// Plans the sandbox root.
    pub(crate) fn build(inputs: &RootInputs<'_>) -> io::Result<Self> {
        let mut entries = Vec::new();
        for system in inputs.system {
            entries.push(match &system.kind {
                NodeKind::Symlink(points_to) => MountEntry::Symlink {
                    path: new_root_target(&system.path)?,
                    points_to: c_path(points_to)?,
                },
                kind => MountEntry::ReadOnlyBind {
                    source: host_source(&system.path)?,
                    target: new_root_target(&system.path)?,
                    is_dir: *kind == NodeKind::Directory,
                },
            });
        }
        for (name, contents) in [("passwd", PASSWD), ("group", GROUP)] {
            entries.push(MountEntry::File {
                target: new_root_target(&Path::new("/etc").join(name))?,
                contents,
            });
        }
        if inputs.isolate_network {
            entries.push(MountEntry::File {
                target: new_root_target(Path::new("/etc/hosts"))?,
                contents: HOSTS,
            });
        }
        for extra in inputs.extra_read_only {
            let is_dir = fs::metadata(extra)?.is_dir();
            entries.push(MountEntry::ReadOnlyBind {
                source: host_source(extra)?,
                target: new_root_target(extra)?,
                is_dir,
            });
        }
        if let Some(read_only) = inputs.read_only_workspace {
            entries.push(MountEntry::ReadOnlyBind {
                source: host_source(read_only)?,
                target: new_root_target(Path::new(SANDBOX_AGENT_WORKSPACE))?,
                is_dir: true,
            });
        }
        entries.push(MountEntry::WritableBind {
            source: host_source(inputs.workspace)?,
            target: new_root_target(Path::new(SANDBOX_WORKSPACE))?,
        });
        entries.push(MountEntry::Tmpfs {
            target: new_root_target(Path::new("/tmp"))?,
            options: CString::new(format!("mode=1777,size={}", inputs.tmp_bytes)).expect("no NUL"),
        });
        Self::plan_dev(&mut entries)?;
        if inputs.mount_proc {
            Self::plan_proc(&mut entries, inputs.pid_max)?;
        }
        Ok(Self {
            entries,
            isolate_network: inputs.isolate_network,
        })
    }

    fn plan_proc(entries: &mut Vec<MountEntry>, pid_max: u32) -> io::Result<()> {
        entries.push(MountEntry::Proc {
            target: new_root_target(Path::new("/proc"))?,
        });
        // Before Linux 6.14 `pid_max` is one value for the whole machine: a sandbox started
        // by root (whose user namespace maps to the real root) would set it for every process
        // on the host — the appliance could then fork no more (seen on bookworm's 6.1).
        if pid_max_is_per_namespace(&kernel_release()) {
            let pid_max = pid_max.max(PID_MAX_FLOOR);
            entries.push(MountEntry::PidMax {
                path: new_root_target(Path::new("/proc/sys/kernel/pid_max"))?,
                value: CString::new(pid_max.to_string()).expect("digits contain no NUL"),
                pid_max,
            });
        }
        for protected in ["/proc/sys", "/proc/sysrq-trigger"] {
            entries.push(MountEntry::ReadOnlySelf {
                target: new_root_target(Path::new(protected))?,
            });
        }
        Ok(())
    }

    fn plan_dev(entries: &mut Vec<MountEntry>) -> io::Result<()> {
        entries.push(MountEntry::Tmpfs {
            target: new_root_target(Path::new("/dev"))?,
            options: CString::new(format!("mode=0755,size={DEV_TMPFS_BYTES}")).expect("no NUL"),
        });
        for (device, _) in DEVICES {
            let host = Path::new("/dev").join(device);
            if host.exists() {
                entries.push(MountEntry::Device {
                    source: host_source(&host)?,
                    target: new_root_target(&host)?,
                });
            }
        }
        for (link, points_to) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            entries.push(MountEntry::Symlink {
                path: new_root_target(&Path::new("/dev").join(link))?,
                points_to: c_path(Path::new(points_to))?,
            });
        }
        Ok(())
    }

    /// The Landlock grants matching this root, as paths seen inside the sandbox.
    pub(crate) fn landlock_plan(&self, deny_tcp: bool) -> io::Result<LandlockPlan> {
        let mut plan = LandlockPlan::new(deny_tcp);
        plan.allow(Path::new("/"), Grant::ListOnly)?;
        for entry in &self.entries {
            let (target, grant) = match entry {
                MountEntry::ReadOnlyBind {
                    target,
                    is_dir: true,
                    ..
                } => (target, Grant::ReadOnlyTree),
                MountEntry::ReadOnlyBind {
                    target,
                    is_dir: false,
                    ..
                }
                | MountEntry::File { target, .. } => (target, Grant::ReadOnlyFile),
                MountEntry::WritableBind { target, .. } => (target, Grant::ReadWrite),
                MountEntry::Tmpfs { target, .. } if target.to_bytes() == b"/newroot/dev" => {
                    (target, Grant::ListOnly)
                }
                MountEntry::Tmpfs { target, .. } => (target, Grant::ReadWrite),
                MountEntry::Device { target, .. } => {
                    let name = Path::new(OsStr::from_bytes(target.to_bytes())).file_name();
                    let writable = DEVICES
                        .iter()
                        .any(|(d, w)| *w && name == Some(OsStr::new(d)));
                    (target, Grant::Device { writable })
                }
                MountEntry::Proc { target } => (target, Grant::ProcRead),
                MountEntry::Symlink { .. }
                | MountEntry::ReadOnlySelf { .. }
                | MountEntry::PidMax { .. } => continue,
            };
            plan.allow(&sandbox_path(target), grant)?;
        }
        Ok(plan)
    }

    /// Describes entry `index` for an error message (its path inside the sandbox).
    pub(crate) fn describe(&self, index: usize) -> String {
        let Some(entry) = self.entries.get(index) else {
            return format!("mount step {index}");
        };
        let (what, target) = match entry {
            MountEntry::ReadOnlyBind { target, .. } => ("read-only bind of", target),
            MountEntry::WritableBind { target, .. } => ("writable bind of", target),
            MountEntry::Symlink { path, .. } => ("symlink", path),
            MountEntry::Tmpfs { target, .. } => ("tmpfs on", target),
            MountEntry::Device { target, .. } => ("device bind of", target),
            MountEntry::Proc { target } => ("procfs on", target),
            MountEntry::ReadOnlySelf { target } => ("read-only remount of", target),
            MountEntry::PidMax { path, .. } => ("write of", path),
            MountEntry::File { target, .. } => ("file", target),
        };
        format!("{what} {}", sandbox_path(target).display())
    }

    /// Builds the root and pivots into it; returns the `pid_max` set on the PID namespace, if
    /// the kernel took it. Child side (the PID namespace's init): no allocation.
    pub(crate) fn enter(&self) -> Result<Option<u32>, StepFailure> {
        let at = |step: Step| move |errno: i32| StepFailure::new(step, errno);
        mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)
            .map_err(at(Step::PrivateMounts))?;
        let scratch = libc::MS_NOSUID | libc::MS_NODEV;
        mount(
            Some(c"tmpfs"),
            c"/tmp",
            Some(c"tmpfs"),
            scratch,
            Some(SCRATCH_OPTIONS),
        )
        .map_err(at(Step::ScratchRoot))?;
        for dir in [c"/tmp/newroot", c"/tmp/oldroot"] {
            check(unsafe { libc::mkdir(dir.as_ptr(), 0o755) }).map_err(at(Step::ScratchRoot))?;
        }
        pivot(c"/tmp", c"oldroot").map_err(at(Step::PivotScratch))?;
        mount(
            Some(c"tmpfs"),
            c"/newroot",
            Some(c"tmpfs"),
            scratch,
            Some(ROOT_SKELETON_OPTIONS),
        )
        .map_err(at(Step::NewRoot))?;
        let mut pid_limit = None;
        for (index, entry) in self.entries.iter().enumerate() {
            if let MountEntry::PidMax {
                path,
                value,
                pid_max,
            } = entry
            {
                pid_limit = write_file(path, value.to_bytes()).ok().map(|()| *pid_max);
                continue;
            }
            apply_entry(entry).map_err(|errno| StepFailure::at(Step::MountEntry, index, errno))?;
        }
        // SAFETY: plain syscalls on NUL-terminated constant paths.
        check(unsafe { libc::umount2(c"/oldroot".as_ptr(), libc::MNT_DETACH) })
            .map_err(at(Step::DetachHost))?;
        pivot(c"/newroot", c".").map_err(at(Step::PivotFinal))?;
        check(unsafe { libc::umount2(c".".as_ptr(), libc::MNT_DETACH) })
            .map_err(at(Step::PivotFinal))?;
        check(unsafe { libc::chdir(c"/".as_ptr()) }).map_err(at(Step::PivotFinal))?;
        set_mount_flags(
            c"/",
            false,
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        )
        .map_err(at(Step::RemountRoot))?;
        let name = SANDBOX_HOSTNAME.to_bytes();
        check(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) })
            .map_err(at(Step::Hostname))?;
        if self.isolate_network {
            loopback_up().map_err(at(Step::LoopbackUp))?;
        }
        Ok(pid_limit)
    }
}

/// Strips the `/newroot` prefix of a planned target.
fn sandbox_path(target: &CStr) -> PathBuf {
    let path = Path::new(OsStr::from_bytes(target.to_bytes()));
    Path::new("/").join(path.strip_prefix("/newroot").unwrap_or(path))
}

/// Attributes of a read-only bind.
const READ_ONLY: u64 = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
/// Mount flags of the sandbox's tmpfs and procfs mounts.
const NO_SUID_NO_DEV: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV;

fn apply_entry(entry: &MountEntry) -> Result<(), i32> {
    let bind = libc::MS_BIND | libc::MS_REC;
    match entry {
        MountEntry::ReadOnlyBind {
            source,
            target,
            is_dir,
        } => {
            make_mount_point(target, *is_dir)?;
            mount(Some(source), target, None, bind, None)?;
            set_mount_flags(target, true, READ_ONLY)
        }
        MountEntry::WritableBind { source, target } => {
            make_mount_point(target, true)?;
            mount(Some(source), target, None, bind, None)?;
            set_mount_flags(target, true, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
        }
        MountEntry::Symlink { path, points_to } => {
            mkdir_all(path, false)?;
            // SAFETY: both are NUL-terminated strings.
            check(unsafe { libc::symlink(points_to.as_ptr(), path.as_ptr()) })
        }
        MountEntry::Tmpfs { target, options } => {
            mkdir_all(target, true)?;
            mount(
                Some(c"tmpfs"),
                target,
                Some(c"tmpfs"),
                NO_SUID_NO_DEV,
                Some(options),
            )
        }
        MountEntry::Device { source, target } => {
            make_mount_point(target, false)?;
            mount(Some(source), target, None, libc::MS_BIND, None)
        }
        MountEntry::Proc { target } => {
            mkdir_all(target, true)?;
            let flags = NO_SUID_NO_DEV | libc::MS_NOEXEC;
            // hidepid=2 hides processes the viewer cannot ptrace, such as the non-dumpable init
            // (except from gid 0, a root service: the init's argv is scrubbed for that case).
            mount(
                Some(c"proc"),
                target,
                Some(c"proc"),
                flags,
                Some(c"hidepid=2"),
            )
        }
        MountEntry::ReadOnlySelf { target } => {
            match mount(Some(target), target, None, bind, None) {
                // Kernels without the file (no magic SysRq) have nothing to protect.
                Err(libc::ENOENT) => Ok(()),
                Err(errno) => Err(errno),
                Ok(()) => set_mount_flags(target, true, READ_ONLY),
            }
        }
        MountEntry::File { target, contents } => {
            mkdir_all(target, false)?;
            write_new_file(target, contents)
        }
        MountEntry::PidMax { path, value, .. } => write_file(path, value.to_bytes()),
    }
}

#[cfg(test)]
mod tests;

/// The running kernel's release (`uname -r`), empty when it cannot be read.
fn kernel_release() -> String {
    // SAFETY: uname fills a utsname it is given; a zeroed one is a valid buffer.
    let mut name: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut name) } != 0 {
        return String::new();
    }
    // SAFETY: uname NUL-terminates release.
    unsafe { std::ffi::CStr::from_ptr(name.release.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Whether `/proc/sys/kernel/pid_max` belongs to each PID namespace (Linux 6.14 and later)
/// rather than to the whole machine, judged from a release such as `6.1.0-26-arm64`.
pub(crate) fn pid_max_is_per_namespace(release: &str) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (6, 14)
}

#[cfg(test)]
mod pid_max_tests {
    #[test]
    fn pid_max_is_set_only_where_each_namespace_has_its_own() {
        assert!(!super::pid_max_is_per_namespace("6.1.0-26-arm64"));
        assert!(!super::pid_max_is_per_namespace("6.12.47+rpt-rpi-v8"));
        assert!(!super::pid_max_is_per_namespace("5.15.0"));
        assert!(!super::pid_max_is_per_namespace(""));
        assert!(super::pid_max_is_per_namespace("6.14.0"));
        assert!(super::pid_max_is_per_namespace("6.18.44-fc-v669"));
        assert!(super::pid_max_is_per_namespace("7.0.1"));
    }
}
