//! Background runs: the same sandboxed start as [`super::run`], but the caller gets the run back
//! while it is going — a stdin pipe, live output and a kill switch — instead of waiting for it.
//!
//! The layers, rlimits, timeout and whole-tree kill are the ones of a foreground run (plan.rs and
//! the child chain decide them; this file reuses runner.rs to spawn and supervise). Output of
//! both streams goes into one bounded [`LiveOutput`] (head kept, tail as a ring), readable from
//! any byte offset while the run goes on. This file must not decide policy and must not keep a
//! byte of output past its caps.

use std::collections::VecDeque;
use std::io;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::ChildStdin;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::output::OutputLimits;
use super::plan::{self, Prepared};
use super::runner::{self, ReportPipe, OUTPUT_DRAIN_GRACE};
use super::{probe, SandboxError, SandboxSpec, Termination};

/// Size of one read from an output pipe.
const READ_CHUNK_BYTES: usize = 8 * 1024;

/// Output of a running command (stdout and stderr interleaved as they arrive), bounded: the
/// first `head_bytes` and the last `tail_bytes` are kept; bytes between are counted and dropped.
#[derive(Debug)]
pub struct LiveOutput {
    limits: OutputLimits,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total_bytes: u64,
}

/// A slice of live output read from an offset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputSlice {
    /// The bytes still held from the requested offset on (head part, then tail part).
    pub text: String,
    /// Bytes after the offset that were dropped before they could be read.
    pub missed_bytes: u64,
    /// The offset to read from next time (total bytes written so far).
    pub next_offset: u64,
}

impl LiveOutput {
    /// An empty buffer with the given caps.
    pub fn new(limits: OutputLimits) -> Self {
        Self {
            limits,
            head: Vec::new(),
            tail: VecDeque::new(),
            total_bytes: 0,
        }
    }

    /// Appends bytes; memory never grows past `head_bytes + tail_bytes`.
    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total_bytes += bytes.len() as u64;
        let head_room = self.limits.head_bytes.saturating_sub(self.head.len());
        if head_room > 0 {
            let taken = head_room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..taken]);
            bytes = &bytes[taken..];
        }
        let cap = self.limits.tail_bytes;
        if cap == 0 || bytes.is_empty() {
            return;
        }
        let bytes = &bytes[bytes.len().saturating_sub(cap)..];
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(cap);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// Bytes written so far.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Everything still held from byte `offset` on, and how much after `offset` was dropped.
    pub fn read_from(&self, offset: u64) -> OutputSlice {
        let head_len = self.head.len() as u64;
        let tail_start = self.total_bytes - self.tail.len() as u64;
        let mut bytes = Vec::new();
        if offset < head_len {
            bytes.extend_from_slice(&self.head[offset as usize..]);
        }
        let from_tail = offset.max(tail_start).max(head_len);
        let skip = (from_tail - tail_start) as usize;
        bytes.extend(self.tail.iter().skip(skip));
        let wanted = self.total_bytes.saturating_sub(offset);
        OutputSlice {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            missed_bytes: wanted - bytes.len() as u64,
            next_offset: self.total_bytes,
        }
    }
}

/// Where a background run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunState {
    /// Still going.
    Running,
    /// Ended this way (a kill through [`BackgroundRun::kill`] ends as `Signaled`).
    Ended(Termination),
    /// Supervising the run failed after it started (the process tree was killed).
    Failed,
}

/// A command started in the background. Dropping it does not stop the command; call
/// [`BackgroundRun::kill`] (the owner's registry does, on reset and shutdown).
#[derive(Debug)]
pub struct BackgroundRun {
    stdin: tokio::sync::Mutex<Option<ChildStdin>>,
    output: Arc<Mutex<LiveOutput>>,
    kill: CancellationToken,
    state: watch::Receiver<RunState>,
    started: Instant,
    /// When the run ended (set just before the state changes).
    ended_at: Arc<Mutex<Option<Instant>>>,
    /// The run's cgroup OOM killer acted (set just before the state changes).
    oom_killed: Arc<AtomicBool>,
}

impl BackgroundRun {
    /// Writes to the command's stdin; `close` closes it afterwards (end of input).
    pub async fn write_stdin(&self, data: &[u8], close: bool) -> io::Result<()> {
        use tokio::io::AsyncWriteExt;
        let mut stdin = self.stdin.lock().await;
        let pipe = stdin
            .as_mut()
            .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "stdin is closed"))?;
        pipe.write_all(data).await?;
        pipe.flush().await?;
        if close {
            *stdin = None;
        }
        Ok(())
    }

    /// Reads the held output from `offset` on.
    pub fn read_output(&self, offset: u64) -> OutputSlice {
        self.output.lock().read_from(offset)
    }

    /// The run's current state.
    pub fn state(&self) -> RunState {
        *self.state.borrow()
    }

    /// Time since the run started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether the cgroup's OOM killer acted (known once the run has ended).
    pub fn oom_killed(&self) -> bool {
        self.oom_killed.load(Ordering::Acquire)
    }

    /// Time since the run ended (`None` while it runs).
    pub fn ended_ago(&self) -> Option<Duration> {
        self.ended_at.lock().map(|at| at.elapsed())
    }

    /// Kills the whole process tree (no-op once ended).
    pub fn kill(&self) {
        self.kill.cancel();
    }

    /// Waits, however long it takes, until the run has ended; returns how it ended.
    pub async fn finished(&self) -> RunState {
        let mut state = self.state.clone();
        let _ = state.wait_for(|s| *s != RunState::Running).await;
        self.state()
    }

    /// Waits until the run has ended (or `limit` passed) and returns the state then.
    pub async fn wait(&self, limit: Duration) -> RunState {
        let mut state = self.state.clone();
        let ended = state.wait_for(|s| *s != RunState::Running);
        let _ = tokio::time::timeout(limit, ended).await;
        self.state()
    }
}

/// Starts one command under the policy of its spec and returns while it runs. Same layers,
/// limits and timeout as [`super::run`]; stdin is a pipe the caller writes to.
pub async fn spawn(spec: SandboxSpec) -> Result<BackgroundRun, SandboxError> {
    let prepared = tokio::task::spawn_blocking(move || {
        let capabilities = probe::cached();
        plan::prepare_for_host(&spec, capabilities)
    })
    .await
    .map_err(|e| SandboxError::Io(io::Error::other(e)))??;
    start(prepared).await
}

async fn start(prepared: Prepared) -> Result<BackgroundRun, SandboxError> {
    let mut report = ReportPipe::new()?;
    let mut command = runner::build_command(&prepared, report.write_fd());
    command.stdin(Stdio::piped());
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    let started = Instant::now();
    let spawned = tokio::task::spawn_blocking(move || command.spawn())
        .await
        .map_err(|e| SandboxError::Io(io::Error::other(e)))?;
    report.close_write_end();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return Err(runner::spawn_error(&prepared, error, &report.collect())),
    };
    let output = Arc::new(Mutex::new(LiveOutput::new(prepared.output)));
    let stop = CancellationToken::new();
    let pipes = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn AsyncRead + Unpin + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn AsyncRead + Unpin + Send>),
    ];
    let mut drains = Vec::new();
    for pipe in pipes.into_iter().flatten() {
        drains.push(tokio::spawn(drain_into(pipe, output.clone(), stop.clone())));
    }
    let stdin = child.stdin.take();
    let kill = CancellationToken::new();
    let (state_tx, state) = watch::channel(RunState::Running);
    let supervision = Supervision {
        prepared,
        report,
        drains,
        stop,
        kill: kill.clone(),
    };
    let ended_at = Arc::new(Mutex::new(None));
    let mark_end = ended_at.clone();
    let oom_killed = Arc::new(AtomicBool::new(false));
    let mark_oom = oom_killed.clone();
    tokio::spawn(async move {
        let (ended, oom) = supervision.supervise(child).await;
        mark_oom.store(oom, Ordering::Release);
        *mark_end.lock() = Some(Instant::now());
        let _ = state_tx.send(ended);
    });
    Ok(BackgroundRun {
        stdin: tokio::sync::Mutex::new(stdin),
        output,
        kill,
        state,
        started,
        ended_at,
        oom_killed,
    })
}

/// Copies one pipe into the shared output until its end or `stop`.
async fn drain_into(
    mut pipe: Box<dyn AsyncRead + Unpin + Send>,
    output: Arc<Mutex<LiveOutput>>,
    stop: CancellationToken,
) {
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    loop {
        tokio::select! {
            read = pipe.read(&mut chunk) => match read {
                Ok(0) | Err(_) => return,
                Ok(read) => output.lock().push(&chunk[..read]),
            },
            () = stop.cancelled() => return,
        }
    }
}

/// What the supervising task owns for the life of the run.
struct Supervision {
    prepared: Prepared,
    report: ReportPipe,
    drains: Vec<tokio::task::JoinHandle<()>>,
    stop: CancellationToken,
    kill: CancellationToken,
}

impl Supervision {
    /// How the run ended, and whether the cgroup's OOM killer acted.
    async fn supervise(mut self, mut child: tokio::process::Child) -> (RunState, bool) {
        let waited = tokio::select! {
            waited = runner::wait_with_backstop(&mut child, &self.prepared) => waited,
            () = self.kill.cancelled() => {
                kill_tree(&child, &self.prepared);
                child.wait().await.map(|status| (status, false)).map_err(SandboxError::Io)
            }
        };
        if let Some(cgroup) = &self.prepared.cgroup {
            cgroup.kill();
        }
        let drains = futures_util::future::join_all(self.drains.drain(..));
        if tokio::time::timeout(OUTPUT_DRAIN_GRACE, drains)
            .await
            .is_err()
        {
            self.stop.cancel();
        }
        let report = self.report.collect();
        drop(self.prepared.run_tmp.take());
        let oom = self
            .prepared
            .cgroup
            .take()
            .is_some_and(|cgroup| cgroup.finish());
        let state = match waited {
            Ok((status, backstop_fired)) => {
                RunState::Ended(runner::termination(&report, backstop_fired, status))
            }
            Err(error) => {
                log::warn!("background run supervision failed: {error}");
                RunState::Failed
            }
        };
        (state, oom)
    }
}

/// Asks the run's init to end the whole tree: SIGTERM to the relay's process group reaches the
/// init, which kills every process of the run (its PID namespace, or its group and orphans).
fn kill_tree(child: &tokio::process::Child, prepared: &Prepared) {
    if let Some(pid) = child.id() {
        // SAFETY: the relay leads its own session and process group; kill has no memory effects.
        unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGTERM) };
    }
    if let Some(cgroup) = &prepared.cgroup {
        cgroup.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(head_bytes: usize, tail_bytes: usize) -> LiveOutput {
        LiveOutput::new(OutputLimits {
            head_bytes,
            tail_bytes,
        })
    }

    #[test]
    fn reading_from_an_offset_returns_only_newer_bytes() {
        let mut live = output(4, 4);
        live.push(b"abc");
        let first = live.read_from(0);
        assert_eq!(first.text, "abc");
        live.push(b"de");
        let second = live.read_from(first.next_offset);
        assert_eq!(second.text, "de");
        assert_eq!(second.missed_bytes, 0);
        assert_eq!(second.next_offset, 5);
    }

    #[test]
    fn bytes_dropped_between_head_and_tail_are_reported_as_missed() {
        let mut live = output(2, 3);
        live.push(b"0123456789");
        let all = live.read_from(0);
        assert_eq!(all.text, "01789");
        assert_eq!(all.missed_bytes, 5);
        let late = live.read_from(8);
        assert_eq!(late.text, "89");
        assert_eq!(late.missed_bytes, 0);
    }

    #[test]
    fn memory_stays_within_the_caps() {
        let mut live = output(16, 16);
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..32 {
            live.push(&chunk);
        }
        assert_eq!(live.head.len(), 16);
        assert_eq!(live.tail.len(), 16);
        assert_eq!(live.total_bytes(), 32 * 64 * 1024);
    }
}
