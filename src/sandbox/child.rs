//! The confined child's process chain, run from a `pre_exec` hook of the spawned command.
//!
//! `relay` (the forked child the parent waits on) joins the run's cgroup, starts a session,
//! unshares the namespaces and forks `init`; `init` (PID 1 of the new PID namespace, or a
//! child subreaper without one) builds the root, forks the command process, then reaps, enforces
//! the wall-clock deadline and kills the whole tree when the command ends; the command process
//! drops rlimits, capabilities, Landlock and seccomp on itself and returns to exec. Outcomes
//! travel to the parent as fixed-size records on a report pipe. This file must not allocate on
//! the child side and must not leave any process of the tree alive after `init` exits.

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use super::landlock::LandlockPlan;
use super::limits::{last_errno, RlimitPlan};
use super::namespaces::{IdMaps, RootPlan};
use super::report::{
    encode, Step, StepFailure, FLAG_CANCELLED, FLAG_TIMED_OUT, RECORD_BYTES, RECORD_EXITED,
    RECORD_LANDLOCK, RECORD_PID_MAX, RECORD_SETUP_FAILED, RECORD_SIGNALED,
};
use super::seccomp::SeccompPlan;

/// Most children reaped per wake-up, so a flood of exits cannot starve the deadline check.
const REAP_BATCH: usize = 64;

/// Highest fd number `close_range` is asked to cover.
const MAX_FD: libc::c_uint = libc::c_uint::MAX;
/// fds closed one by one where `close_range` is missing (kernels before 5.9).
const FALLBACK_CLOSE_FDS: libc::c_int = 4096;

// prctl and capability values (stable kernel ABI).
const PR_SET_SECUREBITS: libc::c_int = 28;
const PR_CAPBSET_DROP: libc::c_int = 24;
const PR_CAP_AMBIENT: libc::c_int = 47;
const PR_CAP_AMBIENT_CLEAR_ALL: libc::c_ulong = 4;
/// NOROOT, NO_SETUID_FIXUP, KEEP_CAPS and NO_CAP_AMBIENT_RAISE, each with its lock bit.
const SECUREBITS_LOCKED_DOWN: libc::c_ulong = 0b1111_1111;
const CAP_LAST_POSSIBLE: libc::c_ulong = 63;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 4;
/// Name of the init process (its comm and its scrubbed argv).
const INIT_NAME: &std::ffi::CStr = c"pincer-init";
/// Largest argument area the init scrubs (ARG_MAX-sized areas are plausible, bigger are not).
const MAX_ARGUMENT_AREA_BYTES: usize = 2 * 1024 * 1024;

/// The namespace part of a plan.
#[derive(Clone, Debug)]
pub(crate) struct NamespacePlan {
    pub(crate) root: RootPlan,
    pub(crate) maps: IdMaps,
    pub(crate) unshare_flags: libc::c_int,
}

/// Everything the chain needs, prepared by the parent so the child only makes syscalls.
#[derive(Clone, Debug)]
pub(crate) struct ChildPlan {
    pub(crate) cgroup_procs: Option<CString>,
    pub(crate) namespaces: Option<NamespacePlan>,
    pub(crate) landlock: Option<LandlockPlan>,
    pub(crate) seccomp: Option<SeccompPlan>,
    pub(crate) rlimits: RlimitPlan,
    pub(crate) workdir: CString,
    pub(crate) timeout: Duration,
    pub(crate) report_fd: RawFd,
}

impl ChildPlan {
    /// The `pre_exec` body. Returns `Ok` only in the command process, ready to exec; the relay
    /// and init processes never return.
    pub(crate) fn enter(&self) -> io::Result<()> {
        self.enter_relay().map_err(|failure| {
            let index = failure.index.map_or(-1, |i| i as i32);
            self.write_record(
                RECORD_SETUP_FAILED,
                failure.step as u32,
                index,
                failure.errno,
            );
            io::Error::from_raw_os_error(failure.errno)
        })
    }

    fn enter_relay(&self) -> Result<(), StepFailure> {
        // SAFETY: signal/setsid/prctl/fork are async-signal-safe syscalls without memory effects.
        unsafe {
            libc::signal(libc::SIGCHLD, libc::SIG_DFL);
            if libc::setsid() < 0 {
                return Err(StepFailure::new(Step::Setsid, last_errno()));
            }
        }
        if let Some(procs) = &self.cgroup_procs {
            write_all(procs, b"0").map_err(|e| StepFailure::new(Step::JoinCgroup, e))?;
        }
        if let Some(namespaces) = &self.namespaces {
            // SAFETY: unshare has no memory effects.
            if unsafe { libc::unshare(namespaces.unshare_flags) } != 0 {
                return Err(StepFailure::new(Step::Unshare, last_errno()));
            }
            namespaces.maps.write_own()?;
        }
        // Not dumpable: the sandbox cannot read this process's memory (a copy of the gateway's)
        // through /proc. Set after the maps, which a non-dumpable process could not write.
        // SAFETY: prctl and fork have no memory effects on this process.
        let init = unsafe {
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            libc::fork()
        };
        match init {
            -1 => Err(StepFailure::new(Step::ForkInit, last_errno())),
            0 => self.enter_init(),
            init => relay(init),
        }
    }

    fn enter_init(&self) -> Result<(), StepFailure> {
        let in_pid_namespace = self.namespaces.is_some();
        let signals = supervised_signals();
        // SAFETY: prctl/sigprocmask on this process only.
        unsafe {
            let parent_death = if in_pid_namespace {
                libc::SIGKILL
            } else {
                libc::SIGTERM
            };
            libc::prctl(libc::PR_SET_PDEATHSIG, parent_death, 0, 0, 0);
            if !in_pid_namespace {
                libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
            }
            libc::sigprocmask(libc::SIG_BLOCK, &signals, std::ptr::null_mut());
        }
        scrub_own_arguments();
        if let Some(namespaces) = &self.namespaces {
            let pid_max = namespaces.root.enter()?;
            self.write_record(RECORD_PID_MAX, 0, pid_max.map_or(0, |max| max as i32), 0);
        }
        let started = monotonic_now();
        // SAFETY: fork has no memory effects on this process.
        match unsafe { libc::fork() } {
            -1 => Err(StepFailure::new(Step::ForkCommand, last_errno())),
            0 => self.enter_command(),
            command => {
                close_all_fds_except(self.report_fd);
                self.supervise(command, started, &signals)
            }
        }
    }

    fn enter_command(&self) -> Result<(), StepFailure> {
        // SAFETY: signal mask and process group of this process only; workdir is NUL-terminated.
        unsafe {
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            if self.namespaces.is_none() {
                libc::setpgid(0, 0);
            }
            if libc::chdir(self.workdir.as_ptr()) != 0 {
                return Err(StepFailure::new(Step::Workdir, last_errno()));
            }
        }
        mark_inherited_fds_cloexec();
        drop_capabilities().map_err(|e| StepFailure::new(Step::Capabilities, e))?;
        // SAFETY: prctl on this process only.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(StepFailure::new(Step::NoNewPrivs, last_errno()));
        }
        if let Some(landlock) = &self.landlock {
            let enforced = landlock.apply().map_err(|(index, errno)| match index {
                Some(index) => StepFailure::at(Step::Landlock, index, errno),
                None => StepFailure::new(Step::Landlock, errno),
            })?;
            self.write_record(RECORD_LANDLOCK, 0, enforced.code(), 0);
        }
        // Limits come last before seccomp: the Landlock setup above may still allocate.
        self.rlimits
            .apply()
            .map_err(|(index, errno)| StepFailure::at(Step::Rlimit, index, errno))?;
        if let Some(seccomp) = &self.seccomp {
            seccomp
                .apply()
                .map_err(|e| StepFailure::new(Step::Seccomp, e))?;
        }
        Ok(())
    }

    /// `init`'s loop: reap, enforce the deadline, and kill the tree when the command ends.
    fn supervise(&self, command: libc::pid_t, started: Duration, signals: &libc::sigset_t) -> ! {
        let in_pid_namespace = self.namespaces.is_some();
        let deadline = started + self.timeout;
        let mut flags = 0;
        let mut status = None;
        while status.is_none() {
            status = reap_without_blocking(command);
            if status.is_some() {
                break;
            }
            let now = monotonic_now();
            if now >= deadline {
                flags |= FLAG_TIMED_OUT;
                break;
            }
            let remaining = to_timespec(deadline - now);
            // SAFETY: sigtimedwait reads a valid set and timeout.
            let signal = unsafe { libc::sigtimedwait(signals, std::ptr::null_mut(), &remaining) };
            if matches!(signal, libc::SIGTERM | libc::SIGINT | libc::SIGHUP) {
                flags |= FLAG_CANCELLED;
                break;
            }
        }
        let status = kill_and_reap_all(command, in_pid_namespace, status);
        match status {
            Some(s) if libc::WIFSIGNALED(s) => {
                self.write_record(RECORD_SIGNALED, flags, libc::WTERMSIG(s), 0)
            }
            Some(s) => self.write_record(RECORD_EXITED, flags, libc::WEXITSTATUS(s), 0),
            None => self.write_record(RECORD_SIGNALED, flags, libc::SIGKILL, 0),
        }
        // SAFETY: _exit ends this process without running the parent's destructors.
        unsafe { libc::_exit(0) }
    }

    fn write_record(&self, kind: u32, a: u32, b: i32, c: i32) {
        let record = encode(kind, a, b, c);
        // SAFETY: writes a stack buffer; a record is smaller than PIPE_BUF, so it is atomic.
        unsafe { libc::write(self.report_fd, record.as_ptr().cast(), RECORD_BYTES) };
    }
}

/// Overwrites this process's argv (a copy of the gateway's, readable by anyone through
/// `/proc/<pid>/cmdline`) with the init's name, and renames the process.
fn scrub_own_arguments() {
    // SAFETY: prctl with a NUL-terminated constant name.
    unsafe { libc::prctl(libc::PR_SET_NAME, INIT_NAME.as_ptr(), 0, 0, 0) };
    let mut stat = [0u8; 2048];
    // SAFETY: reads into a stack buffer from a NUL-terminated constant path.
    let read = unsafe {
        let fd = libc::open(
            c"/proc/self/stat".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return;
        }
        let read = libc::read(fd, stat.as_mut_ptr().cast(), stat.len());
        libc::close(fd);
        read
    };
    let Ok(read) = usize::try_from(read) else {
        return;
    };
    let Some((start, end)) = argument_area(&stat[..read]) else {
        return;
    };
    let name = INIT_NAME.to_bytes_with_nul();
    if end <= start || end - start > MAX_ARGUMENT_AREA_BYTES || end - start < name.len() {
        return;
    }
    // SAFETY: [start, end) is this process's own argument area (from /proc/self/stat), mapped
    // writable on its stack and no longer read by anything in this process.
    unsafe {
        std::ptr::write_bytes(start as *mut u8, 0, end - start);
        std::ptr::copy_nonoverlapping(name.as_ptr(), start as *mut u8, name.len());
    }
}

/// `arg_start` and `arg_end` (fields 48 and 49) of a `/proc/<pid>/stat` line.
fn argument_area(stat: &[u8]) -> Option<(usize, usize)> {
    let after_name = stat.iter().rposition(|&b| b == b')')? + 2;
    // Fields after the parenthesised name start at field 3.
    let mut fields = stat.get(after_name..)?.split(|&b| b == b' ');
    let start = parse_decimal(fields.nth(48 - 3)?)?;
    let end = parse_decimal(fields.next()?)?;
    Some((start, end))
}

fn parse_decimal(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0usize, |value, &d| {
        d.is_ascii_digit()
            .then(|| value.checked_mul(10)?.checked_add(usize::from(d - b'0')))
            .flatten()
    })
}

fn supervised_signals() -> libc::sigset_t {
    // SAFETY: builds a signal set in a zeroed value.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// The relay: waits for `init` and exits with a status mirroring it (the report pipe carries
/// the precise outcome).
fn relay(init: libc::pid_t) -> ! {
    close_all_fds_except(-1);
    let mut status = 0;
    // SAFETY: waitpid on our own child, then _exit.
    unsafe {
        while libc::waitpid(init, &mut status, 0) < 0 && last_errno() == libc::EINTR {}
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            128 + libc::WTERMSIG(status)
        };
        libc::_exit(code)
    }
}

fn reap_without_blocking(command: libc::pid_t) -> Option<libc::c_int> {
    let mut found = None;
    for _ in 0..REAP_BATCH {
        let mut status = 0;
        // SAFETY: waitpid writes the status of a child of this process.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return found;
        }
        if pid == command {
            found = Some(status);
        }
    }
    found
}

/// Kills every remaining process of the tree and reaps them all; returns the command's status.
fn kill_and_reap_all(
    command: libc::pid_t,
    in_pid_namespace: bool,
    mut status: Option<libc::c_int>,
) -> Option<libc::c_int> {
    loop {
        kill_tree(command, in_pid_namespace);
        let mut reaped = 0;
        // SAFETY: blocking waitpid for any child of this process.
        let pid = unsafe { libc::waitpid(-1, &mut reaped, 0) };
        if pid < 0 {
            if last_errno() == libc::EINTR {
                continue;
            }
            return status;
        }
        if pid == command && status.is_none() {
            status = Some(reaped);
        }
    }
}

/// In a PID namespace, `kill(-1)` from its init reaches every other process in it. Without
/// one, the command's process group and every child of this subreaper are killed.
fn kill_tree(command: libc::pid_t, in_pid_namespace: bool) {
    // SAFETY: kill has no memory effects; the targets are this tree's processes.
    unsafe {
        if in_pid_namespace {
            libc::kill(-1, libc::SIGKILL);
            return;
        }
        libc::kill(-command, libc::SIGKILL);
    }
    kill_children();
}

/// Kills every child listed in `/proc/thread-self/children` (orphans reparent to this
/// subreaper, so repeated calls reach the whole tree).
fn kill_children() {
    let mut buffer = [0u8; 4096];
    // SAFETY: reads into a stack buffer from a NUL-terminated constant path.
    let read = unsafe {
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return;
        }
        let read = libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len());
        libc::close(fd);
        read
    };
    let Ok(read) = usize::try_from(read) else {
        return;
    };
    let mut pid: libc::pid_t = 0;
    for &byte in &buffer[..read] {
        if byte.is_ascii_digit() {
            pid = pid * 10 + libc::pid_t::from(byte - b'0');
        } else if pid > 0 {
            // SAFETY: the pid is a child of this process, so it cannot have been reused.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            pid = 0;
        }
    }
    if pid > 0 {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Drops every capability for good: securebits locked so root gains none on exec, bounding and
/// ambient sets emptied, then the effective/permitted/inheritable sets cleared.
fn drop_capabilities() -> Result<(), i32> {
    // SAFETY: prctl and capset on this process with valid arguments.
    unsafe {
        // Without CAP_SETPCAP (an unprivileged service without namespaces) there are no
        // capabilities to drop beyond the ones capset clears below.
        if libc::prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED_DOWN, 0, 0, 0) == 0 {
            for cap in 0..=CAP_LAST_POSSIBLE {
                if libc::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && last_errno() == libc::EINVAL {
                    break;
                }
            }
        }
        libc::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        let header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData::default(); 2];
        if libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) != 0 {
            return Err(last_errno());
        }
    }
    Ok(())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn close_all_fds_except(keep: RawFd) {
    let ranges: [(libc::c_uint, libc::c_uint); 2] = if keep >= 3 {
        [
            (3, keep as libc::c_uint - 1),
            (keep as libc::c_uint + 1, MAX_FD),
        ]
    } else {
        [(3, MAX_FD), (1, 0)]
    };
    for (first, last) in ranges {
        if first > last {
            continue;
        }
        // SAFETY: close_range only closes descriptors of this process.
        if unsafe { libc::syscall(libc::SYS_close_range, first, last, 0) } != 0 {
            for fd in first as libc::c_int..FALLBACK_CLOSE_FDS.min(last as libc::c_int) {
                // SAFETY: closing possibly-unused descriptors of this process.
                unsafe { libc::close(fd) };
            }
        }
    }
    for fd in 0..3 {
        // SAFETY: init and the relay never use stdio; closing keeps them off the output pipes.
        unsafe { libc::close(fd) };
    }
}

/// Marks every inherited descriptor above stderr close-on-exec (libraries may leak some).
fn mark_inherited_fds_cloexec() {
    // SAFETY: only sets flags on this process's descriptors.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            MAX_FD,
            CLOSE_RANGE_CLOEXEC,
        )
    };
}

fn write_all(path: &CString, contents: &[u8]) -> Result<(), i32> {
    // SAFETY: path is NUL-terminated; contents is a valid slice.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(last_errno());
        }
        let written = libc::write(fd, contents.as_ptr().cast(), contents.len());
        let errno = last_errno();
        libc::close(fd);
        if written < 0 {
            return Err(errno);
        }
    }
    Ok(())
}

fn monotonic_now() -> Duration {
    // SAFETY: an all-zero timespec is valid (some targets add private padding fields).
    let mut now: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: clock_gettime writes into a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn to_timespec(duration: Duration) -> libc::timespec {
    // SAFETY: as in monotonic_now.
    let mut timespec: libc::timespec = unsafe { std::mem::zeroed() };
    timespec.tv_sec = duration.as_secs() as _;
    timespec.tv_nsec = duration.subsec_nanos() as _;
    timespec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_area_is_read_from_fields_48_and_49() {
        let mut line = b"42 (a) b) S".to_vec();
        for field in 4..=52 {
            line.extend_from_slice(format!(" {field}").as_bytes());
        }
        line.push(b'\n');
        assert_eq!(argument_area(&line), Some((48, 49)));
        let own = std::fs::read("/proc/self/stat").expect("own stat");
        let (start, end) = argument_area(&own).expect("own argument area");
        assert!(end > start);
        assert_eq!(parse_decimal(b"12x"), None);
    }
}
