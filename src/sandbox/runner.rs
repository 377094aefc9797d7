//! Spawning and supervising a prepared run from the parent's side.
//!
//! Builds the command (cleared environment, `/dev/null` stdin, piped output, the child chain in
//! `pre_exec`), spawns it off the async threads, drains both output streams into capped buffers,
//! waits for the relay with a backstop deadline a little past the child's own, and turns the
//! report records into an [`Outcome`] or a precise [`SandboxError`]. This file must not decide
//! the policy (plan.rs does) and must not return while any process of the run is alive, except
//! that output drained past the grace period is cut off and flagged.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::io::AsyncRead;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::limits::RunCgroup;
use super::output::{self, CapturedStream};
use super::plan::Prepared;
use super::report::{ChildExit, ChildReport, Step, StepFailure, FLAG_TIMED_OUT, RECORD_BYTES};
use super::{Outcome, SandboxError, Termination};

/// How long past the child's own deadline the parent waits before killing the relay itself.
const BACKSTOP_GRACE: Duration = Duration::from_secs(5);
/// How long output is still read after the process tree ended.
pub(super) const OUTPUT_DRAIN_GRACE: Duration = Duration::from_secs(2);
/// Most report bytes read (a run writes at most a handful of records).
const MAX_REPORT_BYTES: usize = 64 * RECORD_BYTES;

/// The report pipe: the child chain writes records, the parent reads them after the run.
pub(super) struct ReportPipe {
    read: File,
    write: Option<OwnedFd>,
}

impl ReportPipe {
    pub(super) fn new() -> io::Result<Self> {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nobody else.
        let (read, write) = unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // The write end must block in the child so a record is never dropped.
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(fds[1], libc::F_SETFL, 0) };
        Ok(Self {
            read,
            write: Some(write),
        })
    }

    pub(super) fn write_fd(&self) -> i32 {
        self.write.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    pub(super) fn close_write_end(&mut self) {
        self.write = None;
    }

    /// Reads what the chain reported (non-blocking: called once the relay has exited).
    pub(super) fn collect(&mut self) -> ChildReport {
        let mut bytes = Vec::with_capacity(4 * RECORD_BYTES);
        let mut chunk = [0u8; RECORD_BYTES * 4];
        while bytes.len() < MAX_REPORT_BYTES {
            match self.read.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(read) => bytes.extend_from_slice(&chunk[..read]),
            }
        }
        ChildReport::parse(&bytes)
    }
}

pub(super) fn build_command(prepared: &Prepared, report_fd: i32) -> Command {
    let mut command = Command::new(&prepared.argv[0]);
    command
        .args(&prepared.argv[1..])
        .env_clear()
        .envs(prepared.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut plan = prepared.plan.clone();
    plan.report_fd = report_fd;
    // SAFETY: the hook runs in the forked child. It only makes syscalls on data prepared in
    // the parent (C strings, BPF programs, rule lists); see child.rs.
    unsafe { command.pre_exec(move || plan.enter()) };
    command
}

/// Turns a failed spawn into the most precise error the report allows.
pub(super) fn spawn_error(
    prepared: &Prepared,
    error: io::Error,
    report: &ChildReport,
) -> SandboxError {
    match report.setup_failure {
        Some(failure) => setup_error(prepared, failure),
        None => SandboxError::Spawn {
            program: prepared.argv[0].clone(),
            source: error,
        },
    }
}

pub(super) fn setup_error(prepared: &Prepared, failure: StepFailure) -> SandboxError {
    let plan = &prepared.plan;
    let entry = failure.index.map(|i| i as usize);
    let detail = match (failure.step, entry) {
        (Step::MountEntry, Some(index)) => plan.namespaces.as_ref().map(|n| n.root.describe(index)),
        (Step::Landlock, Some(index)) => plan
            .landlock
            .as_ref()
            .and_then(|l| l.rule_path(index))
            .map(|p| format!("rule for {}", p.display())),
        (Step::Rlimit, Some(index)) => Some(plan.rlimits.name(index).to_owned()),
        _ => None,
    };
    SandboxError::Setup {
        step: failure.step.describe(),
        detail: detail.map(|d| format!(" ({d})")).unwrap_or_default(),
        errno: failure.errno,
    }
}

/// Runs a prepared run to completion.
pub(crate) async fn run_prepared(mut prepared: Prepared) -> Result<Outcome, SandboxError> {
    let mut report = ReportPipe::new()?;
    let mut command = tokio::process::Command::from(build_command(&prepared, report.write_fd()));
    command.kill_on_drop(true);
    let started = Instant::now();
    let spawned = tokio::task::spawn_blocking(move || command.spawn())
        .await
        .map_err(|e| SandboxError::Io(io::Error::other(e)))?;
    report.close_write_end();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return Err(spawn_error(&prepared, error, &report.collect())),
    };
    let stop_draining = CancellationToken::new();
    let stdout = spawn_drain(child.stdout.take(), "stdout", &prepared, &stop_draining)?;
    let stderr = spawn_drain(child.stderr.take(), "stderr", &prepared, &stop_draining)?;
    let (relay_status, backstop_fired) = wait_with_backstop(&mut child, &prepared).await?;
    let duration = started.elapsed();
    if let Some(cgroup) = &prepared.cgroup {
        cgroup.kill();
    }
    let ((stdout, stdout_cut), (stderr, stderr_cut)) =
        finish_draining(stdout, stderr, stop_draining).await?;
    let child_report = report.collect();
    if let Some(failure) = child_report.setup_failure {
        return Err(setup_error(&prepared, failure));
    }
    let mut confinement = prepared.confinement;
    confinement.landlock = child_report.landlock;
    confinement.pid_max = child_report.pid_max;
    // Removing the run's temp dir and its cgroup may wait for killed
    // stragglers to leave (rmdir EBUSY): off the async worker.
    let (run_tmp, cgroup) = (prepared.run_tmp.take(), prepared.cgroup.take());
    let oom_killed = tokio::task::spawn_blocking(move || {
        drop(run_tmp);
        cgroup.is_some_and(RunCgroup::finish)
    })
    .await
    .unwrap_or(false);
    Ok(Outcome {
        termination: termination(&child_report, backstop_fired, relay_status),
        stdout,
        stderr,
        duration,
        confinement,
        oom_killed,
        output_incomplete: stdout_cut || stderr_cut,
    })
}

/// Starts draining one of the child's output pipes into a capped buffer.
fn spawn_drain<R: AsyncRead + Unpin + Send + 'static>(
    stream: Option<R>,
    name: &str,
    prepared: &Prepared,
    stop: &CancellationToken,
) -> io::Result<JoinHandle<Drained>> {
    let stream = stream.ok_or_else(|| io::Error::other(format!("{name} was not piped")))?;
    Ok(tokio::spawn(output::drain(
        stream,
        prepared.output,
        stop.clone(),
    )))
}

/// Waits for the relay; past the child's own deadline plus a grace, kills the whole run.
/// Returns the relay's status and whether the backstop had to act.
pub(super) async fn wait_with_backstop(
    child: &mut tokio::process::Child,
    prepared: &Prepared,
) -> Result<(ExitStatus, bool), SandboxError> {
    if let Ok(status) = tokio::time::timeout(prepared.timeout + BACKSTOP_GRACE, child.wait()).await
    {
        return Ok((status?, false));
    }
    if let Some(pid) = child.id() {
        // SAFETY: the relay leads its own session and process group; kill has no memory effects.
        unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
    }
    if let Some(cgroup) = &prepared.cgroup {
        cgroup.kill();
    }
    child.start_kill().ok();
    Ok((child.wait().await?, true))
}

type Drained = (CapturedStream, bool);

/// Collects both streams, cutting them off when a process outside the killed tree keeps a pipe
/// open past the grace period.
async fn finish_draining(
    stdout: JoinHandle<Drained>,
    stderr: JoinHandle<Drained>,
    stop: CancellationToken,
) -> Result<(Drained, Drained), SandboxError> {
    let both = async { (stdout.await, stderr.await) };
    tokio::pin!(both);
    let (stdout, stderr) = tokio::select! {
        streams = &mut both => streams,
        () = tokio::time::sleep(OUTPUT_DRAIN_GRACE) => {
            stop.cancel();
            both.await
        }
    };
    let joined = |r: Result<Drained, tokio::task::JoinError>| {
        r.map_err(|e| SandboxError::Io(io::Error::other(e)))
    };
    Ok((joined(stdout)?, joined(stderr)?))
}

pub(super) fn termination(
    report: &ChildReport,
    backstop_fired: bool,
    relay_status: ExitStatus,
) -> Termination {
    match (report.exit, backstop_fired) {
        _ if report.flags & FLAG_TIMED_OUT != 0 => Termination::TimedOut,
        (_, true) => Termination::TimedOut,
        (Some(ChildExit::Exited(code)), false) => Termination::Exited(code),
        (Some(ChildExit::Signaled(signal)), false) => Termination::Signaled(signal),
        (None, false) => relay_termination(relay_status),
    }
}

/// Without a record from init (it was killed), the relay's status is the best evidence.
fn relay_termination(status: ExitStatus) -> Termination {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) if code > 128 => Termination::Signaled(code - 128),
        (Some(code), _) => Termination::Exited(code),
        (None, Some(signal)) => Termination::Signaled(signal),
        (None, None) => Termination::Signaled(libc::SIGKILL),
    }
}

/// Runs a prepared run synchronously; succeeds with the chain's report when it set up and
/// exited 0 (the capability probe's trial runs).
pub(crate) fn trial(prepared: &Prepared) -> Result<ChildReport, SandboxError> {
    let mut report = ReportPipe::new()?;
    let mut command = build_command(prepared, report.write_fd());
    command.stdout(Stdio::null()).stderr(Stdio::null());
    let spawned = command.spawn();
    report.close_write_end();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return Err(spawn_error(prepared, error, &report.collect())),
    };
    let status = child.wait()?;
    let child_report = report.collect();
    if let Some(failure) = child_report.setup_failure {
        return Err(setup_error(prepared, failure));
    }
    match child_report.exit {
        Some(ChildExit::Exited(0)) => Ok(child_report),
        other => Err(SandboxError::Io(io::Error::other(format!(
            "trial command did not exit cleanly: {other:?} (relay {status})"
        )))),
    }
}
