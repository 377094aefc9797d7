//! The function the future `exec` tool wraps one to one: a shell command string run with
//! `/bin/sh -c` in the sandbox of a workspace, under the agent's policy and limits.
//!
//! This file validates the command text, builds the [`SandboxSpec`], and turns the [`Outcome`]
//! into text for the model (stdout, stderr, elision markers, a status line). It must not spawn
//! anything itself: [`super::run`] is the only way a process starts.

use std::path::PathBuf;
use std::time::Duration;

use super::{
    run, Confinement, Outcome, SandboxError, SandboxPolicy, SandboxSpec, SessionScope, Termination,
};

/// Longest command text accepted.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// The shell commands run with.
const SHELL: &str = "/bin/sh";

/// A shell command the agent asked to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecRequest {
    /// The command text, run as `/bin/sh -c <command>`.
    pub command: String,
    /// Host directory of the agent's workspace.
    pub workspace: PathBuf,
    /// A directory visible read-only beside the workspace (see [`SandboxSpec::read_only_workspace`]).
    pub read_only_workspace: Option<PathBuf>,
    /// Working directory relative to the workspace.
    pub workdir: Option<PathBuf>,
    /// Extra environment variables for this call.
    pub env: Vec<(String, String)>,
    /// Timeout for this call (capped at the policy's maximum).
    pub timeout: Option<Duration>,
    /// Kind of session asking (for `non-main` mode).
    pub session: SessionScope,
    /// The agent's sandbox policy.
    pub policy: SandboxPolicy,
}

impl ExecRequest {
    /// A request running `command` in `workspace` under the default policy.
    pub fn new(command: impl Into<String>, workspace: impl Into<PathBuf>) -> Self {
        Self {
            command: command.into(),
            workspace: workspace.into(),
            read_only_workspace: None,
            workdir: None,
            env: Vec::new(),
            timeout: None,
            session: SessionScope::default(),
            policy: SandboxPolicy::default(),
        }
    }
}

/// What the command did, ready for the tool result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecOutcome {
    /// Exit code, when the command exited.
    pub exit_code: Option<i32>,
    /// Signal, when one killed it.
    pub signal: Option<i32>,
    /// The wall-clock timeout killed the process tree.
    pub timed_out: bool,
    /// Standard output as text, with an elision marker where the middle was dropped.
    pub stdout: String,
    /// Standard error as text, likewise.
    pub stderr: String,
    /// Bytes written to stdout in total.
    pub stdout_bytes: u64,
    /// Bytes written to stderr in total.
    pub stderr_bytes: u64,
    /// Part of the output was elided or cut off.
    pub truncated: bool,
    /// Wall-clock duration.
    pub duration: Duration,
    /// The confinement the command ran under.
    pub confinement: Confinement,
    /// The cgroup's OOM killer acted.
    pub oom_killed: bool,
}

impl ExecOutcome {
    fn from_outcome(outcome: Outcome) -> Self {
        let (exit_code, signal, timed_out) = match outcome.termination {
            Termination::Exited(code) => (Some(code), None, false),
            Termination::Signaled(signal) => (None, Some(signal), false),
            Termination::TimedOut => (None, None, true),
        };
        Self {
            exit_code,
            signal,
            timed_out,
            truncated: outcome.stdout.is_truncated()
                || outcome.stderr.is_truncated()
                || outcome.output_incomplete,
            stdout: outcome.stdout.to_text(),
            stderr: outcome.stderr.to_text(),
            stdout_bytes: outcome.stdout.total_bytes,
            stderr_bytes: outcome.stderr.total_bytes,
            duration: outcome.duration,
            confinement: outcome.confinement,
            oom_killed: outcome.oom_killed,
        }
    }

    /// One line on how the command ended.
    pub fn status_line(&self) -> String {
        let mut line = match (self.exit_code, self.signal, self.timed_out) {
            (_, _, true) => format!(
                "timed out after {:.1} s; the process tree was killed",
                self.duration.as_secs_f64()
            ),
            (Some(code), _, _) => format!("exit code {code}"),
            (_, Some(signal), _) => format!("killed by signal {signal}"),
            _ => "ended".to_owned(),
        };
        if self.oom_killed {
            line.push_str(" (memory limit reached)");
        }
        line
    }

    /// The text returned to the model: stdout, then stderr if any, then the status line.
    pub fn render(&self) -> String {
        let mut text = self.stdout.clone();
        if !self.stderr.is_empty() {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str("[stderr]\n");
            text.push_str(&self.stderr);
        }
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push('[');
        text.push_str(&self.status_line());
        text.push(']');
        text
    }
}

/// Refuses empty, oversized or NUL-carrying command text (before anything starts).
pub fn validate_command(command: &str) -> Result<(), SandboxError> {
    let invalid = |reason: String| SandboxError::InvalidRequest {
        field: "command",
        reason,
    };
    if command.trim().is_empty() {
        return Err(invalid("must not be empty".to_owned()));
    }
    if command.len() > MAX_COMMAND_BYTES {
        return Err(invalid(format!(
            "is {} bytes; at most {MAX_COMMAND_BYTES} are accepted",
            command.len()
        )));
    }
    if command.contains('\0') {
        return Err(invalid("must not contain NUL bytes".to_owned()));
    }
    Ok(())
}

impl ExecRequest {
    /// The sandbox spec running this command as `/bin/sh -c <command>` (not validated: see
    /// [`validate_command`]).
    pub fn into_spec(self) -> SandboxSpec {
        SandboxSpec {
            argv: vec![SHELL.to_owned(), "-c".to_owned(), self.command],
            workspace: self.workspace,
            read_only_workspace: self.read_only_workspace,
            workdir: self.workdir,
            env: self.env,
            timeout: self.timeout,
            session: self.session,
            policy: self.policy,
        }
    }
}

/// Runs a shell command in the sandbox.
pub async fn run_command(request: ExecRequest) -> Result<ExecOutcome, SandboxError> {
    validate_command(&request.command)?;
    run(request.into_spec())
        .await
        .map(ExecOutcome::from_outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::CapturedStream;

    fn outcome(termination: Termination, stdout: &[u8], stderr: &[u8]) -> Outcome {
        let stream = |bytes: &[u8]| CapturedStream {
            head: bytes.to_vec(),
            tail: Vec::new(),
            elided_bytes: 0,
            total_bytes: bytes.len() as u64,
        };
        Outcome {
            termination,
            stdout: stream(stdout),
            stderr: stream(stderr),
            duration: Duration::from_millis(1500),
            confinement: Confinement::default(),
            oom_killed: false,
            output_incomplete: false,
        }
    }

    #[test]
    fn empty_oversized_and_nul_commands_are_rejected() {
        for command in ["", "   ", "echo \0"] {
            assert!(validate_command(command).is_err(), "{command:?} accepted");
        }
        let huge = "x".repeat(MAX_COMMAND_BYTES + 1);
        let message = validate_command(&huge).expect_err("too long").to_string();
        assert!(
            message.contains("command") && message.contains(&MAX_COMMAND_BYTES.to_string()),
            "{message}"
        );
        assert!(validate_command("echo hi").is_ok());
    }

    #[test]
    fn render_labels_stderr_and_ends_with_the_status() {
        let exec = ExecOutcome::from_outcome(outcome(Termination::Exited(2), b"out", b"err\n"));
        assert_eq!(exec.render(), "out\n[stderr]\nerr\n[exit code 2]");
    }

    #[test]
    fn timeout_and_signals_have_their_own_status_lines() {
        let timed_out = ExecOutcome::from_outcome(outcome(Termination::TimedOut, b"", b""));
        assert!(timed_out.timed_out);
        assert_eq!(
            timed_out.render(),
            "[timed out after 1.5 s; the process tree was killed]"
        );
        let killed = ExecOutcome::from_outcome(outcome(Termination::Signaled(9), b"", b""));
        assert_eq!(killed.status_line(), "killed by signal 9");
    }
}
