//! The `process` tool and the registry of background runs (`exec` with `background: true`):
//! list, poll new output, read the log, write stdin, kill, remove, clear.
//!
//! Every run is a [`crate::sandbox::BackgroundRun`] — started by `sandbox::spawn`, never here —
//! owned by one session. A session holds at most [`MAX_BACKGROUND_RUNS_PER_SESSION`] runs
//! (running or finished; the oldest finished one makes room), sees only its own, and loses all
//! of them, killed, when it is reset or deleted or the gateway stops. This file must not spawn
//! processes and must not keep output beyond each run's caps.
//!
//! A run that ends on its own while backgrounded (`background: true`, or a foreground `exec`
//! that outlived `tools.exec.backgroundMs`) is announced through an [`ExecExitNotifier`] when
//! `tools.exec.notifyOnExit` is on (upstream's exec-exit system event): one line naming the run,
//! how it ended and the tail of its output. A run the agent killed or removed, or that a reset
//! or shutdown killed, is not announced.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::sandbox::exec::ExecRequest;
use crate::sandbox::{BackgroundRun, RunState, SandboxError, Termination};

use super::{arg_str, arg_u64, Tool, ToolContext, ToolError, ToolFuture, ToolOutput};

/// Background runs one session may hold (a Pi Zero has 512 MB: a few shells, not a farm).
pub const MAX_BACKGROUND_RUNS_PER_SESSION: usize = 4;
/// Longest a `poll` waits for the run to end, in milliseconds.
pub const MAX_POLL_WAIT_MS: u64 = 30_000;
/// How long a finished run is kept for `poll` and `log` unless `tools.exec.cleanupMs` says
/// otherwise (upstream's default, 30 minutes).
pub const DEFAULT_CLEANUP_MS: u64 = 30 * 60_000;
/// Characters of output tail an exit notice looks at (upstream's figure).
pub const NOTIFY_TAIL_CHARS: usize = 400;
/// Longest output snippet in an exit notice, whitespace collapsed (upstream's figure).
pub const NOTIFY_SNIPPET_CHARS: usize = 180;

/// Where the exec-exit system event goes: the gateway queues it for the heartbeat and asks for
/// a heartbeat at once (a port: the heartbeat lives above the tools).
pub trait ExecExitNotifier: Send + Sync {
    /// A backgrounded run of `session_key` ended; `text` is the event line.
    fn exec_exited(&self, session_key: &str, text: &str);
}

/// How a backgrounded run announces its exit (`tools.exec.notifyOnExit` on).
#[derive(Clone)]
pub struct ExitNotice {
    pub notifier: Arc<dyn ExecExitNotifier>,
    /// `tools.exec.notifyOnExitEmptySuccess`: announce a successful exit with no output too.
    pub empty_success: bool,
}

/// Why a background action failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("this session already has {MAX_BACKGROUND_RUNS_PER_SESSION} running background processes; kill or remove one first")]
    TooMany,
    #[error("no background process {0} in this session")]
    Unknown(String),
    #[error("could not start the background process: {0}")]
    Start(#[from] SandboxError),
    #[error("could not write to stdin: {0}")]
    Stdin(std::io::Error),
}

struct Entry {
    session_key: String,
    command: String,
    run: Arc<BackgroundRun>,
    /// Output offset the next `poll` reads from.
    polled: u64,
    serial: u64,
    /// How long the run is kept once it has ended (`tools.exec.cleanupMs`).
    keep_finished: Duration,
    /// Cleared when the run is killed or forgotten on purpose: its exit is then not announced.
    announce: Arc<AtomicBool>,
}

impl Entry {
    fn expired(&self) -> bool {
        self.run
            .ended_ago()
            .is_some_and(|ago| ago >= self.keep_finished)
    }

    /// Kills the run without announcing its exit.
    fn kill_quietly(&self) {
        self.announce.store(false, Ordering::Release);
        self.run.kill();
    }
}

/// Forgets runs that ended longer ago than their owner's `cleanupMs`.
fn forget_expired(runs: &mut BTreeMap<String, Entry>) {
    runs.retain(|_, e| !e.expired());
}

/// All background runs of the gateway, by id.
#[derive(Default)]
pub struct ProcessRegistry {
    runs: Mutex<BTreeMap<String, Entry>>,
    /// Serialises starts so the per-session cap holds across concurrent calls.
    starting: tokio::sync::Mutex<u64>,
}

/// One line of `list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessSummary {
    pub id: String,
    pub command: String,
    pub state: RunState,
    pub runtime_ms: u64,
}

impl ProcessRegistry {
    /// Starts `request` in the background for `session_key`; returns the run's id. Once ended,
    /// the run is forgotten after `keep_finished`; `notice` announces its exit.
    pub async fn start(
        &self,
        session_key: &str,
        request: ExecRequest,
        keep_finished: Duration,
        notice: Option<ExitNotice>,
    ) -> Result<String, ProcessError> {
        let mut serial = self.starting.lock().await;
        self.make_room(session_key)?;
        crate::sandbox::exec::validate_command(&request.command)?;
        let command = request.command.clone();
        let run = Arc::new(crate::sandbox::spawn(request.into_spec()).await?);
        *serial += 1;
        let serial = *serial;
        let id = self.insert(session_key, command, run, serial, keep_finished, notice);
        Ok(id)
    }

    /// Takes over a run `exec` started in the foreground and that outlived its yield window
    /// (`tools.exec.backgroundMs`): from now on it is a background run of `session_key`, its
    /// output readable from the start. Errs (handing the run back) when the session is at its cap.
    pub async fn adopt(
        &self,
        session_key: &str,
        command: String,
        run: Arc<BackgroundRun>,
        keep_finished: Duration,
        notice: Option<ExitNotice>,
    ) -> Result<String, (ProcessError, Arc<BackgroundRun>)> {
        let mut serial = self.starting.lock().await;
        if let Err(error) = self.make_room(session_key) {
            return Err((error, run));
        }
        *serial += 1;
        let serial = *serial;
        Ok(self.insert(session_key, command, run, serial, keep_finished, notice))
    }

    fn insert(
        &self,
        session_key: &str,
        command: String,
        run: Arc<BackgroundRun>,
        serial: u64,
        keep_finished: Duration,
        notice: Option<ExitNotice>,
    ) -> String {
        let id = format!(
            "bg{serial}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..6]
        );
        let announce = Arc::new(AtomicBool::new(notice.is_some()));
        if let Some(notice) = notice {
            tokio::spawn(announce_exit(
                run.clone(),
                id.clone(),
                session_key.to_owned(),
                announce.clone(),
                notice,
            ));
        }
        self.runs.lock().insert(
            id.clone(),
            Entry {
                session_key: session_key.to_owned(),
                command,
                run,
                polled: 0,
                serial,
                keep_finished,
                announce,
            },
        );
        id
    }

    /// Drops the session's oldest finished run when it is at the cap; errs when all are running.
    fn make_room(&self, session_key: &str) -> Result<(), ProcessError> {
        let mut runs = self.runs.lock();
        forget_expired(&mut runs);
        let own: Vec<(&String, &Entry)> = runs
            .iter()
            .filter(|(_, e)| e.session_key == session_key)
            .collect();
        if own.len() < MAX_BACKGROUND_RUNS_PER_SESSION {
            return Ok(());
        }
        let oldest_finished = own
            .iter()
            .filter(|(_, e)| e.run.state() != RunState::Running)
            .min_by_key(|(_, e)| e.serial)
            .map(|(id, _)| (*id).clone());
        match oldest_finished {
            Some(id) => {
                runs.remove(&id);
                Ok(())
            }
            None => Err(ProcessError::TooMany),
        }
    }

    fn run(&self, session_key: &str, id: &str) -> Result<Arc<BackgroundRun>, ProcessError> {
        let mut runs = self.runs.lock();
        forget_expired(&mut runs);
        runs.get(id)
            .filter(|e| e.session_key == session_key)
            .map(|e| e.run.clone())
            .ok_or_else(|| ProcessError::Unknown(id.to_owned()))
    }

    /// The session's runs, oldest first.
    pub fn list(&self, session_key: &str) -> Vec<ProcessSummary> {
        let mut runs = self.runs.lock();
        forget_expired(&mut runs);
        let mut list: Vec<(u64, ProcessSummary)> = runs
            .iter()
            .filter(|(_, e)| e.session_key == session_key)
            .map(|(id, e)| {
                (
                    e.serial,
                    ProcessSummary {
                        id: id.clone(),
                        command: e.command.clone(),
                        state: e.run.state(),
                        runtime_ms: e.run.elapsed().as_millis() as u64,
                    },
                )
            })
            .collect();
        list.sort_by_key(|(serial, _)| *serial);
        list.into_iter().map(|(_, s)| s).collect()
    }

    /// Output since the last poll and the state, after waiting up to `wait` for the run to end.
    pub async fn poll(
        &self,
        session_key: &str,
        id: &str,
        wait: Duration,
    ) -> Result<(crate::sandbox::OutputSlice, RunState), ProcessError> {
        let run = self.run(session_key, id)?;
        let state = run.wait(wait).await;
        let mut runs = self.runs.lock();
        let entry = runs
            .get_mut(id)
            .ok_or_else(|| ProcessError::Unknown(id.to_owned()))?;
        let slice = entry.run.read_output(entry.polled);
        entry.polled = slice.next_offset;
        Ok((slice, state))
    }

    /// All output still held, and the state.
    pub fn log(
        &self,
        session_key: &str,
        id: &str,
    ) -> Result<(crate::sandbox::OutputSlice, RunState), ProcessError> {
        let run = self.run(session_key, id)?;
        Ok((run.read_output(0), run.state()))
    }

    /// Writes to the run's stdin, closing it after when `eof`.
    pub async fn write(
        &self,
        session_key: &str,
        id: &str,
        data: &str,
        eof: bool,
    ) -> Result<(), ProcessError> {
        let run = self.run(session_key, id)?;
        run.write_stdin(data.as_bytes(), eof)
            .await
            .map_err(ProcessError::Stdin)
    }

    /// Kills the run's process tree and waits briefly for it to end.
    pub async fn kill(&self, session_key: &str, id: &str) -> Result<RunState, ProcessError> {
        let run = self.run(session_key, id)?;
        self.silence(id);
        run.kill();
        Ok(run.wait(Duration::from_secs(5)).await)
    }

    /// Kills (if needed) and forgets the run.
    pub fn remove(&self, session_key: &str, id: &str) -> Result<(), ProcessError> {
        let run = self.run(session_key, id)?;
        self.silence(id);
        run.kill();
        self.runs.lock().remove(id);
        Ok(())
    }

    /// The run's exit will not be announced (the agent or the gateway ended it on purpose).
    fn silence(&self, id: &str) {
        if let Some(entry) = self.runs.lock().get(id) {
            entry.announce.store(false, Ordering::Release);
        }
    }

    /// Forgets the session's finished runs; returns how many.
    pub fn clear(&self, session_key: &str) -> usize {
        let mut runs = self.runs.lock();
        let before = runs.len();
        runs.retain(|_, e| e.session_key != session_key || e.run.state() == RunState::Running);
        before - runs.len()
    }

    /// Kills and forgets every run of a session (reset, delete); returns how many.
    pub fn kill_session(&self, session_key: &str) -> usize {
        let mut runs = self.runs.lock();
        let before = runs.len();
        runs.retain(|_, e| {
            let own = e.session_key == session_key;
            if own {
                e.kill_quietly();
            }
            !own
        });
        before - runs.len()
    }

    /// Kills and forgets every run (gateway shutdown), then waits up to `limit` for the
    /// killed process trees to end; returns how many were still running.
    pub async fn kill_all(&self, limit: Duration) -> usize {
        let runs = std::mem::take(&mut *self.runs.lock());
        let running: Vec<Arc<BackgroundRun>> = runs
            .into_values()
            .filter(|e| e.run.state() == RunState::Running)
            .map(|e| {
                e.kill_quietly();
                e.run
            })
            .collect();
        let deadline = tokio::time::Instant::now() + limit;
        for run in &running {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            run.wait(left).await;
        }
        running.len()
    }
}

/// Waits for a backgrounded run to end and announces it, unless it was silenced meanwhile or
/// it succeeded without output and `empty_success` is off (upstream's rule: "completed" is a
/// normal exit other than 126/127, whatever the code; anything else "failed").
async fn announce_exit(
    run: Arc<BackgroundRun>,
    id: String,
    session_key: String,
    announce: Arc<AtomicBool>,
    notice: ExitNotice,
) {
    let state = run.finished().await;
    if !announce.load(Ordering::Acquire) {
        return;
    }
    if let Some(text) = exit_notice_text(&id, state, &run.read_output(0).text, notice.empty_success)
    {
        notice.notifier.exec_exited(&session_key, &text);
    }
}

/// The exec-exit event line, or `None` when a silent success is not announced.
pub fn exit_notice_text(
    id: &str,
    state: RunState,
    output: &str,
    empty_success: bool,
) -> Option<String> {
    let (completed, label) = match state {
        RunState::Running => return None,
        RunState::Ended(Termination::Exited(code)) => {
            (code != 126 && code != 127, format!("code {code}"))
        }
        RunState::Ended(Termination::Signaled(signal)) => (false, format!("signal {signal}")),
        RunState::Ended(Termination::TimedOut) => (false, "timed out".to_owned()),
        RunState::Failed => (false, "supervision failed".to_owned()),
    };
    let tail_start = output
        .char_indices()
        .rev()
        .nth(NOTIFY_TAIL_CHARS - 1)
        .map_or(0, |(at, _)| at);
    let collapsed = output[tail_start..]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let snippet = if collapsed.chars().count() > NOTIFY_SNIPPET_CHARS {
        let kept: String = collapsed.chars().take(NOTIFY_SNIPPET_CHARS - 1).collect();
        format!("{kept}…")
    } else {
        collapsed
    };
    if completed && snippet.is_empty() && !empty_success {
        return None;
    }
    // Upstream shows the first 8 characters of its word-pair ids; pincer's ids are as short and
    // the agent polls them in full, so the whole id is shown.
    let status = if completed { "completed" } else { "failed" };
    Some(if snippet.is_empty() {
        format!("Exec {status} ({id}, {label})")
    } else {
        format!("Exec {status} ({id}, {label}) :: {snippet}")
    })
}

/// One word for a run's state.
pub fn describe_state(state: RunState) -> String {
    match state {
        RunState::Running => "running".to_owned(),
        RunState::Ended(Termination::Exited(code)) => format!("exited with code {code}"),
        RunState::Ended(Termination::Signaled(signal)) => format!("killed by signal {signal}"),
        RunState::Ended(Termination::TimedOut) => "timed out (process tree killed)".to_owned(),
        RunState::Failed => "failed".to_owned(),
    }
}

fn state_json(state: RunState) -> Value {
    match state {
        RunState::Running => json!({"status": "running"}),
        RunState::Ended(Termination::Exited(code)) => {
            json!({"status": "completed", "exitCode": code})
        }
        RunState::Ended(Termination::Signaled(signal)) => {
            json!({"status": "killed", "signal": signal})
        }
        RunState::Ended(Termination::TimedOut) => json!({"status": "timed-out"}),
        RunState::Failed => json!({"status": "failed"}),
    }
}

fn slice_text(slice: &crate::sandbox::OutputSlice, state: RunState) -> String {
    let mut text = String::new();
    if slice.missed_bytes > 0 {
        text.push_str(&format!("[… {} bytes dropped …]\n", slice.missed_bytes));
    }
    text.push_str(&slice.text);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&format!("[{}]", describe_state(state)));
    text
}

/// `process`: manage the session's background exec runs.
pub struct ProcessTool;

impl Tool for ProcessTool {
    fn name(&self) -> &'static str {
        "process"
    }
    fn description(&self) -> &'static str {
        "Manage background exec sessions (started with exec background=true): list, poll (new output; optional timeout ms to wait for exit), log, write (data to stdin, eof closes it), kill, remove, clear."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": ["list", "poll", "log", "write", "kill", "remove", "clear"]},
            "sessionId": {"type": "string"}, "data": {"type": "string"}, "eof": {"type": "boolean"},
            "timeout": {"type": "integer", "minimum": 0}}, "required": ["action"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let action = arg_str(&args, "action")?;
            let registry = &ctx.services.processes;
            let key = ctx.session_key.as_str();
            let failed = |e: ProcessError| ToolError::Failed(e.to_string());
            if action == "list" {
                return Ok(list_output(registry.list(key)));
            }
            if action == "clear" {
                let cleared = registry.clear(key);
                return Ok(ToolOutput::text(format!(
                    "cleared {cleared} finished background process(es)"
                )));
            }
            let id = arg_str(&args, "sessionId")?;
            let (text, details) = match action {
                "poll" => {
                    let wait = arg_u64(&args, "timeout")?.unwrap_or(0).min(MAX_POLL_WAIT_MS);
                    let (slice, state) = tokio::select! {
                        polled = registry.poll(key, id, Duration::from_millis(wait)) => polled.map_err(failed)?,
                        () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
                    };
                    (slice_text(&slice, state), state_json(state))
                }
                "log" => {
                    let (slice, state) = registry.log(key, id).map_err(failed)?;
                    (slice_text(&slice, state), state_json(state))
                }
                "write" => {
                    let data = args.get("data").and_then(Value::as_str).unwrap_or("");
                    let eof = args.get("eof").and_then(Value::as_bool).unwrap_or(false);
                    registry.write(key, id, data, eof).await.map_err(failed)?;
                    (format!("wrote {} bytes to {id}{}", data.len(), if eof { " and closed stdin" } else { "" }), json!({"status": "running"}))
                }
                "kill" => {
                    let state = registry.kill(key, id).await.map_err(failed)?;
                    (format!("killed {id}: {}", describe_state(state)), state_json(state))
                }
                "remove" => {
                    registry.remove(key, id).map_err(failed)?;
                    (format!("removed {id}"), json!({"status": "removed"}))
                }
                other => {
                    return Err(ToolError::InvalidArguments(format!(
                        "action must be one of list, poll, log, write, kill, remove, clear; got {other:?}"
                    )))
                }
            };
            let mut details = details;
            details["sessionId"] = json!(id);
            Ok(ToolOutput {
                text,
                details: Some(details),
            })
        })
    }
}

fn list_output(list: Vec<ProcessSummary>) -> ToolOutput {
    if list.is_empty() {
        return ToolOutput::text("no background processes in this session");
    }
    let lines: Vec<String> = list
        .iter()
        .map(|p| {
            format!(
                "{}  {}  {:.1} s  {}",
                p.id,
                describe_state(p.state),
                p.runtime_ms as f64 / 1000.0,
                p.command
            )
        })
        .collect();
    let details: Vec<Value> = list
        .iter()
        .map(|p| {
            let mut v = state_json(p.state);
            v["sessionId"] = json!(p.id);
            v["command"] = json!(p.command);
            v["runtimeMs"] = json!(p.runtime_ms);
            v
        })
        .collect();
    ToolOutput {
        text: lines.join("\n"),
        details: Some(json!({"sessions": details})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DONE: RunState = RunState::Ended(Termination::Exited(0));

    #[test]
    fn an_exit_notice_carries_the_collapsed_tail_of_the_output() {
        let text = exit_notice_text("bg1-abc", DONE, "  one\n\ttwo  \n", false);
        assert_eq!(
            text.as_deref(),
            Some("Exec completed (bg1-abc, code 0) :: one two")
        );
        let long = format!("{}END", "x".repeat(1_000));
        let text = exit_notice_text("bg1-abc", DONE, &long, false).expect("notice");
        let snippet = text.split(" :: ").nth(1).expect("snippet");
        assert_eq!(snippet.chars().count(), NOTIFY_SNIPPET_CHARS);
        assert!(snippet.ends_with('…'), "{snippet}");
        // Only the last NOTIFY_TAIL_CHARS characters are looked at.
        let text =
            exit_notice_text("bg1-abc", DONE, &format!("HEAD{long}"), false).expect("notice");
        assert!(!text.contains("HEAD"), "{text}");
    }

    #[test]
    fn silent_successes_are_announced_only_when_asked_and_failures_always() {
        assert_eq!(exit_notice_text("bg1", DONE, " \n", false), None);
        assert_eq!(
            exit_notice_text("bg1", DONE, "", true).as_deref(),
            Some("Exec completed (bg1, code 0)")
        );
        let not_found = RunState::Ended(Termination::Exited(127));
        assert_eq!(
            exit_notice_text("bg1", not_found, "", false).as_deref(),
            Some("Exec failed (bg1, code 127)")
        );
        let killed = RunState::Ended(Termination::Signaled(9));
        assert_eq!(
            exit_notice_text("bg1", killed, "", false).as_deref(),
            Some("Exec failed (bg1, signal 9)")
        );
        let timed_out = RunState::Ended(Termination::TimedOut);
        assert_eq!(
            exit_notice_text("bg1", timed_out, "x", false).as_deref(),
            Some("Exec failed (bg1, timed out) :: x")
        );
        assert_eq!(exit_notice_text("bg1", RunState::Running, "x", true), None);
    }
}
