//! The report protocol between the child chain and the parent: fixed-size records on a pipe.
//!
//! Records say which setup step failed (with the plan entry and errno), how the command ended
//! (with timeout or cancellation flags), and what Landlock and the PID namespace enforced. The
//! child encodes with [`encode`] into a stack buffer (no allocation); the parent parses with
//! [`ChildReport::parse`]. This file must not perform any of the steps it names.

use super::landlock::LandlockEnforcement;

/// Bytes of one report record.
pub(crate) const RECORD_BYTES: usize = 16;
pub(crate) const RECORD_SETUP_FAILED: u32 = 1;
pub(crate) const RECORD_EXITED: u32 = 2;
pub(crate) const RECORD_SIGNALED: u32 = 3;
pub(crate) const RECORD_LANDLOCK: u32 = 4;
pub(crate) const RECORD_PID_MAX: u32 = 5;
/// Flag of an exit record: `init` killed the tree at the deadline.
pub(crate) const FLAG_TIMED_OUT: u32 = 1;
/// Flag of an exit record: `init` was told to stop (its parent went away).
pub(crate) const FLAG_CANCELLED: u32 = 2;

/// Where the chain stopped, reported with the errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum Step {
    Setsid = 1,
    JoinCgroup,
    Unshare,
    DenySetgroups,
    UidMap,
    GidMap,
    ForkInit,
    PrivateMounts,
    ScratchRoot,
    PivotScratch,
    NewRoot,
    MountEntry,
    DetachHost,
    PivotFinal,
    RemountRoot,
    Hostname,
    LoopbackUp,
    ForkCommand,
    Workdir,
    Rlimit,
    Capabilities,
    NoNewPrivs,
    Landlock,
    Seccomp,
}

const ALL_STEPS: [Step; 24] = [
    Step::Setsid,
    Step::JoinCgroup,
    Step::Unshare,
    Step::DenySetgroups,
    Step::UidMap,
    Step::GidMap,
    Step::ForkInit,
    Step::PrivateMounts,
    Step::ScratchRoot,
    Step::PivotScratch,
    Step::NewRoot,
    Step::MountEntry,
    Step::DetachHost,
    Step::PivotFinal,
    Step::RemountRoot,
    Step::Hostname,
    Step::LoopbackUp,
    Step::ForkCommand,
    Step::Workdir,
    Step::Rlimit,
    Step::Capabilities,
    Step::NoNewPrivs,
    Step::Landlock,
    Step::Seccomp,
];

impl Step {
    fn from_code(code: u32) -> Option<Self> {
        ALL_STEPS.into_iter().find(|step| *step as u32 == code)
    }

    /// What the step does, for error messages.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Step::Setsid => "start a new session",
            Step::JoinCgroup => "join the run's cgroup",
            Step::Unshare => "create the user, mount, PID, IPC, UTS and network namespaces",
            Step::DenySetgroups => "deny setgroups in the user namespace",
            Step::UidMap => "write the uid map",
            Step::GidMap => "write the gid map",
            Step::ForkInit => "fork the namespace init",
            Step::PrivateMounts => "make mounts private",
            Step::ScratchRoot => "mount the scratch tmpfs",
            Step::PivotScratch => "pivot into the scratch tmpfs",
            Step::NewRoot => "mount the new root tmpfs",
            Step::MountEntry => "build the sandbox root",
            Step::DetachHost => "detach the host file system",
            Step::PivotFinal => "pivot into the sandbox root",
            Step::RemountRoot => "make the sandbox root read-only",
            Step::Hostname => "set the sandbox hostname",
            Step::LoopbackUp => "bring up the loopback interface",
            Step::ForkCommand => "fork the command",
            Step::Workdir => "enter the working directory",
            Step::Rlimit => "set resource limits",
            Step::Capabilities => "drop capabilities",
            Step::NoNewPrivs => "set no_new_privs",
            Step::Landlock => "enforce the Landlock ruleset",
            Step::Seccomp => "install the seccomp filter",
        }
    }
}

/// A failed step: which one, which plan entry (mounts, rlimits, rules), and the errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StepFailure {
    pub(crate) step: Step,
    pub(crate) index: Option<u32>,
    pub(crate) errno: i32,
}

impl StepFailure {
    pub(crate) fn new(step: Step, errno: i32) -> Self {
        Self {
            step,
            index: None,
            errno,
        }
    }

    pub(crate) fn at(step: Step, index: usize, errno: i32) -> Self {
        Self {
            step,
            index: Some(index as u32),
            errno,
        }
    }
}

/// How the command ended, as `init` saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChildExit {
    Exited(i32),
    Signaled(i32),
}

/// Everything the chain reported, parsed by the parent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ChildReport {
    pub(crate) setup_failure: Option<StepFailure>,
    pub(crate) exit: Option<ChildExit>,
    pub(crate) flags: u32,
    pub(crate) landlock: Option<LandlockEnforcement>,
    pub(crate) pid_max: Option<u32>,
}

impl ChildReport {
    /// Parses the records read from the report pipe (a torn trailing record is ignored).
    pub(crate) fn parse(bytes: &[u8]) -> Self {
        let mut report = Self::default();
        for record in bytes.chunks_exact(RECORD_BYTES) {
            let word = |at: usize| {
                u32::from_ne_bytes([record[at], record[at + 1], record[at + 2], record[at + 3]])
            };
            let (kind, a, b, c) = (word(0), word(4), word(8) as i32, word(12) as i32);
            match kind {
                RECORD_SETUP_FAILED => {
                    if let Some(step) = Step::from_code(a) {
                        let index = u32::try_from(b).ok();
                        report.setup_failure.get_or_insert(StepFailure {
                            step,
                            index,
                            errno: c,
                        });
                    }
                }
                RECORD_EXITED => (report.exit, report.flags) = (Some(ChildExit::Exited(b)), a),
                RECORD_SIGNALED => (report.exit, report.flags) = (Some(ChildExit::Signaled(b)), a),
                RECORD_LANDLOCK => report.landlock = Some(LandlockEnforcement::from_code(b)),
                RECORD_PID_MAX => report.pid_max = u32::try_from(b).ok().filter(|max| *max > 0),
                _ => {}
            }
        }
        report
    }
}

/// Encodes one record; written in one `write(2)`, smaller than `PIPE_BUF`, so atomic.
pub(crate) fn encode(kind: u32, a: u32, b: i32, c: i32) -> [u8; RECORD_BYTES] {
    let mut record = [0u8; RECORD_BYTES];
    for (at, word) in [kind, a, b as u32, c as u32].into_iter().enumerate() {
        record[at * 4..at * 4 + 4].copy_from_slice(&word.to_ne_bytes());
    }
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, a: u32, b: i32, c: i32) -> Vec<u8> {
        [kind, a, b as u32, c as u32]
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect()
    }

    #[test]
    fn report_parses_setup_failure_with_mount_index() {
        let bytes = record(RECORD_SETUP_FAILED, Step::MountEntry as u32, 7, libc::EPERM);
        let report = ChildReport::parse(&bytes);
        assert_eq!(
            report.setup_failure,
            Some(StepFailure {
                step: Step::MountEntry,
                index: Some(7),
                errno: libc::EPERM
            })
        );
        assert_eq!(report.exit, None);
    }

    #[test]
    fn report_keeps_the_first_failure_and_the_exit_with_its_flags() {
        let mut bytes = record(RECORD_SETUP_FAILED, Step::Landlock as u32, -1, libc::EINVAL);
        bytes.extend(record(
            RECORD_SETUP_FAILED,
            Step::Seccomp as u32,
            -1,
            libc::EACCES,
        ));
        bytes.extend(record(RECORD_LANDLOCK, 0, 2, 0));
        bytes.extend(record(RECORD_PID_MAX, 0, 301, 0));
        bytes.extend(record(RECORD_SIGNALED, FLAG_TIMED_OUT, libc::SIGKILL, 0));
        bytes.extend([1, 2, 3]);
        let report = ChildReport::parse(&bytes);
        assert_eq!(
            report.setup_failure.map(|f| (f.step, f.index)),
            Some((Step::Landlock, None))
        );
        assert_eq!(report.exit, Some(ChildExit::Signaled(libc::SIGKILL)));
        assert_eq!(report.flags, FLAG_TIMED_OUT);
        assert_eq!(report.landlock, Some(LandlockEnforcement::Full));
        assert_eq!(report.pid_max, Some(301));
    }

    #[test]
    fn every_step_code_round_trips() {
        for step in ALL_STEPS {
            assert_eq!(Step::from_code(step as u32), Some(step));
            assert!(!step.describe().is_empty());
        }
        assert_eq!(Step::from_code(0), None);
    }
}
