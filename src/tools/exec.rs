//! `exec`: a shell command in the agent's workspace, always through the
//! sandbox runner (`sandbox::exec::run_command`, or `sandbox::spawn` through
//! the process registry with `background: true`) — never a bare spawn.
//!
//! Before anything runs, the exec approval policy (`tools.exec.ask`,
//! `security`, `allowlist`) decides: run, refuse, or wait for an operator's
//! decision through the context's approval gate.
//!
//! `tools.exec.host` picks where: `auto` (the default) in the sandbox when it
//! confines the session, `sandbox` only there (refused in a session no sandbox
//! confines), `gateway` on the host outside the sandbox in the agent's
//! workspace, as upstream's hosts; upstream's `node` hosts do not exist here.
//!
//! A foreground command that is still running after its yield window (`yieldMs`, else
//! `tools.exec.backgroundMs`, else 10 s; kept within 10 ms..120 s, as upstream) is not waited
//! for: it becomes a background run in the process registry and the tool answers "still
//! running" with its id, as upstream's exec does. Backgrounded runs announce their exit when
//! `tools.exec.notifyOnExit` is on (see `process.rs`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::config::ExecHost;
use crate::sandbox::exec::{validate_command, ExecRequest};
use crate::sandbox::{BackgroundRun, RunState, SandboxPolicy, Termination};

use super::approval::{
    ApprovalDecision, ApprovalError, ApprovalRequest, ExecApprovalPolicy, ExecGate,
    DEFAULT_EXEC_APPROVAL_TIMEOUT_MS,
};
use super::process::ExitNotice;
use super::{
    arg_str, arg_u64, sandbox_workspace, Tool, ToolContext, ToolError, ToolFuture, ToolOutput,
};

/// How long a foreground command runs before it yields, unless `tools.exec.backgroundMs` or
/// the call's `yieldMs` says otherwise (upstream's default).
pub const DEFAULT_BACKGROUND_MS: u64 = 10_000;
/// The yield window is kept within these bounds (upstream's).
pub const MIN_BACKGROUND_MS: u64 = 10;
pub const MAX_BACKGROUND_MS: u64 = 120_000;
/// Characters of output so far a "still running" answer carries in its details.
const YIELD_TAIL_CHARS: usize = 2_000;

/// The sandbox policy for an agent: its own `sandbox` block, else
/// `agents.defaults.sandbox`, else pincer's default (everything confined),
/// with limits from the board profile unless the config sets them.
pub fn policy_for(config: &crate::config::Config, agent_id: &str) -> SandboxPolicy {
    use crate::config::SandboxMode as ConfigMode;
    use crate::sandbox::SandboxMode;
    let agent = config
        .agents
        .list
        .iter()
        .find(|a| a.id == agent_id)
        .and_then(|a| a.sandbox.as_ref());
    let defaults = config.agents.defaults.sandbox.as_ref();
    let mode = match agent.and_then(|s| s.mode).or(defaults.and_then(|s| s.mode)) {
        Some(ConfigMode::Off) => SandboxMode::Off,
        Some(ConfigMode::NonMain) => SandboxMode::NonMain,
        Some(ConfigMode::All) | None => SandboxMode::All,
    };
    let mut policy = SandboxPolicy {
        mode,
        ..SandboxPolicy::default()
    };
    if agent
        .and_then(|s| s.network)
        .or(defaults.and_then(|s| s.network))
        == Some(crate::config::SandboxNetwork::Host)
    {
        policy.network = crate::sandbox::NetworkPolicy::Host;
    }
    let required = agent
        .map(|s| &s.require)
        .filter(|r| !r.is_empty())
        .or(defaults.map(|s| &s.require));
    if let Some(required) = required {
        use crate::config::SandboxLayer;
        use crate::sandbox::Layer;
        policy.require = required
            .iter()
            .map(|layer| match layer {
                SandboxLayer::Namespaces => Layer::Namespaces,
                SandboxLayer::Landlock => Layer::Landlock,
                SandboxLayer::Seccomp => Layer::Seccomp,
                SandboxLayer::Cgroup => Layer::Cgroup,
            })
            .collect();
    }
    let board = crate::system::board::detect();
    policy.limits.memory_bytes = board.sandbox.memory_mb * 1024 * 1024;
    policy.limits.max_processes = board.sandbox.pids;
    let limits = agent
        .and_then(|s| s.docker.as_ref())
        .or(defaults.and_then(|s| s.docker.as_ref()));
    if let Some(limits) = limits {
        if let Some(bytes) = limits.memory_bytes() {
            policy.limits.memory_bytes = bytes;
        }
        if let Some(pids) = limits.pids_limit {
            policy.limits.max_processes = u64::from(pids);
        }
        policy.env.extend(limits.env.clone());
        apply_docker_cpu_and_ulimits(&mut policy, limits);
        // `docker.user`: the ids the command has inside the user namespace; only that layer can
        // give them, so a run without it is refused rather than run as the service user.
        if let Some(user) = limits
            .user
            .as_deref()
            .and_then(crate::config::parse_sandbox_user)
        {
            policy.user = Some(user);
            if !policy.require.contains(&crate::sandbox::Layer::Namespaces) {
                policy.require.push(crate::sandbox::Layer::Namespaces);
            }
        }
    }
    let exec = exec_settings(config, agent_id);
    if let Some(secs) = exec.pick(|e| e.timeout_sec) {
        policy.timeout_secs = u64::from(secs);
        policy.max_timeout_secs = policy.max_timeout_secs.max(u64::from(secs));
    }
    policy.path_prepend = exec.pick(|e| e.path_prepend.clone()).unwrap_or_default();
    policy
}

/// `docker.cpus` is the run's cgroup CPU quota (`cpu.max`, as Docker sets it), so a run needs the
/// cgroup layer: without one the command is refused rather than run unthrottled.
/// `docker.ulimits` become the rlimits of the same names (validation allows only the ones the
/// sandbox sets: `cpu`, `fsize`, `nofile`, `nproc`, each one value for soft and hard).
fn apply_docker_cpu_and_ulimits(policy: &mut SandboxPolicy, limits: &crate::config::SandboxLimits) {
    use crate::config::Ulimit;
    if let Some(cpus) = limits.cpus {
        policy.limits.cpu_quota_percent = (cpus * 100.0).round().max(1.0) as u32;
        if !policy.require.contains(&crate::sandbox::Layer::Cgroup) {
            policy.require.push(crate::sandbox::Layer::Cgroup);
        }
    }
    for (name, value) in &limits.ulimits {
        let value = match *value {
            Ulimit::Both(v) => v,
            Ulimit::Pair { soft, hard } => match soft.or(hard) {
                Some(v) => v,
                None => continue,
            },
        };
        let field = match name.as_str() {
            "cpu" => &mut policy.limits.cpu_seconds,
            "fsize" => &mut policy.limits.max_file_bytes,
            "nofile" => &mut policy.limits.max_open_files,
            "nproc" => &mut policy.limits.max_processes,
            // Refused by validation; a config built in code may still hold one.
            _ => continue,
        };
        *field = value;
    }
}

/// `tools.exec` for one agent: its own block's keys over the global ones.
pub(crate) struct ExecSettings<'a> {
    agent: Option<&'a crate::config::ExecToolConfig>,
    global: &'a crate::config::ExecToolConfig,
}

impl ExecSettings<'_> {
    /// The agent's value of a key, else the global one.
    pub(crate) fn pick<T>(
        &self,
        key: impl Fn(&crate::config::ExecToolConfig) -> Option<T>,
    ) -> Option<T> {
        self.agent.and_then(&key).or_else(|| key(self.global))
    }
}

pub(crate) fn exec_settings<'a>(
    config: &'a crate::config::Config,
    agent_id: &str,
) -> ExecSettings<'a> {
    ExecSettings {
        agent: config
            .agents
            .list
            .iter()
            .find(|a| a.id == agent_id)
            .and_then(|a| a.tools.as_ref())
            .and_then(|t| t.exec.as_ref()),
        global: &config.tools.exec,
    }
}

pub struct ExecTool;

impl Tool for ExecTool {
    fn name(&self) -> &'static str {
        "exec"
    }
    fn description(&self) -> &'static str {
        "Run a shell command (/bin/sh -c) in the workspace, inside the sandbox. Optional workdir and timeout (seconds); background=true returns a sessionId for the process tool at once, and a command still running after yieldMs (default 10000) continues in the background the same way."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "command": {"type": "string"}, "workdir": {"type": "string"},
            "timeout": {"type": "integer", "minimum": 1},
            "yieldMs": {"type": "integer", "minimum": 0},
            "background": {"type": "boolean"}}, "required": ["command"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let command = arg_str(&args, "command")?;
            let session =
                sandbox_workspace::session_scope(&ctx.config, &ctx.agent_id, &ctx.session_key);
            let mut policy = policy_for(&ctx.config, &ctx.agent_id);
            let host = exec_settings(&ctx.config, &ctx.agent_id)
                .pick(|e| e.host)
                .unwrap_or_default();
            let (root, read_only) = match host {
                ExecHost::Sandbox if !policy.confines(session) => {
                    return Err(ToolError::Denied(
                        "exec host=sandbox (tools.exec.host) needs a sandbox for this session: set agents.defaults.sandbox.mode to \"non-main\" or \"all\", or tools.exec.host to \"auto\" or \"gateway\"".to_owned(),
                    ));
                }
                // On the gateway's host, outside the sandbox, in the agent's workspace (upstream's
                // `gateway` host; the approval policy still decides first).
                ExecHost::Gateway => {
                    policy.mode = crate::sandbox::SandboxMode::Off;
                    (ctx.workspace.clone(), None)
                }
                ExecHost::Auto | ExecHost::Sandbox | ExecHost::Node => {
                    let view = sandbox_workspace::for_context(ctx)?;
                    (view.root, view.read_only)
                }
            };
            let mut request = ExecRequest::new(command, root);
            request.read_only_workspace = read_only;
            request.workdir = args.get("workdir").and_then(Value::as_str).map(Into::into);
            request.timeout = arg_u64(&args, "timeout")?.map(Duration::from_secs);
            request.session = session;
            request.policy = policy;
            tokio::select! {
                checked = check_approval(ctx, &request) => checked?,
                _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            }
            if args.get("background").and_then(Value::as_bool) == Some(true) {
                return start_background(ctx, request).await;
            }
            let window = yield_window(&args, ctx)?;
            run_foreground(ctx, request, window).await
        })
    }
}

/// The call's `yieldMs`, else the agent's `backgroundMs`, else the default; within bounds.
fn yield_window(args: &Value, ctx: &ToolContext) -> Result<Duration, ToolError> {
    let ms = arg_u64(args, "yieldMs")?
        .or_else(|| exec_settings(&ctx.config, &ctx.agent_id).pick(|e| e.background_ms))
        .unwrap_or(DEFAULT_BACKGROUND_MS)
        .clamp(MIN_BACKGROUND_MS, MAX_BACKGROUND_MS);
    Ok(Duration::from_millis(ms))
}

/// How long a finished background run of this agent is kept (`tools.exec.cleanupMs`).
fn keep_finished(ctx: &ToolContext) -> Duration {
    Duration::from_millis(
        exec_settings(&ctx.config, &ctx.agent_id)
            .pick(|e| e.cleanup_ms)
            .unwrap_or(super::process::DEFAULT_CLEANUP_MS),
    )
}

/// The exit announcement for this agent's backgrounded runs: `notifyOnExit` (default on) with
/// a notifier to reach, and `notifyOnExitEmptySuccess` (default off).
fn exit_notice(ctx: &ToolContext) -> Option<ExitNotice> {
    let settings = exec_settings(&ctx.config, &ctx.agent_id);
    if !settings.pick(|e| e.notify_on_exit).unwrap_or(true) {
        return None;
    }
    Some(ExitNotice {
        notifier: ctx.services.exec_exits.clone()?,
        empty_success: settings
            .pick(|e| e.notify_on_exit_empty_success)
            .unwrap_or(false),
    })
}

fn refused(error: impl std::fmt::Display) -> ToolError {
    ToolError::Denied(format!("exec refused: {error}"))
}

/// Runs the command, waiting up to `window` for it to end; past that it continues as a
/// background run (unless the session is at its cap of them: then it is waited for to the end,
/// and the answer says why).
async fn run_foreground(
    ctx: &ToolContext,
    request: ExecRequest,
    window: Duration,
) -> Result<ToolOutput, ToolError> {
    validate_command(&request.command).map_err(refused)?;
    let command = request.command.clone();
    let run = Arc::new(
        crate::sandbox::spawn(request.into_spec())
            .await
            .map_err(refused)?,
    );
    // A foreground command reads end-of-input, as from /dev/null.
    let _ = run.write_stdin(b"", true).await;
    let state = tokio::select! {
        state = run.wait(window) => state,
        () = ctx.cancel.cancelled() => {
            run.kill();
            return Err(ToolError::Cancelled);
        }
    };
    let mut note = None;
    let run = if state == RunState::Running {
        let tail = output_tail(&run.read_output(0).text);
        let adopted = ctx
            .services
            .processes
            .adopt(
                &ctx.session_key,
                command,
                run,
                keep_finished(ctx),
                exit_notice(ctx),
            )
            .await;
        match adopted {
            Ok(id) => return Ok(still_running(&id, tail)),
            Err((error, run)) => {
                note = Some(format!(
                    "[still running after {} ms but not backgrounded: {error}]",
                    window.as_millis()
                ));
                run
            }
        }
    } else {
        run
    };
    let state = tokio::select! {
        state = run.finished() => state,
        () = ctx.cancel.cancelled() => {
            run.kill();
            return Err(ToolError::Cancelled);
        }
    };
    finished_output(&run, state, note)
}

/// The last [`YIELD_TAIL_CHARS`] characters of `text`.
fn output_tail(text: &str) -> String {
    let start = text
        .char_indices()
        .rev()
        .nth(YIELD_TAIL_CHARS - 1)
        .map_or(0, |(at, _)| at);
    text[start..].to_owned()
}

/// Upstream's answer for a command that yielded: its id for the `process` tool, and the tail
/// of its output so far in the details (`poll` reads all of it from the start).
fn still_running(id: &str, tail: String) -> ToolOutput {
    ToolOutput {
        text: format!(
            "Command still running (session {id}). Use process (list/poll/log/write/kill/clear/remove) for follow-up."
        ),
        details: Some(json!({"status": "running", "sessionId": id, "tail": tail})),
    }
}

/// A finished foreground run: its output (stdout and stderr as they came), then how it ended.
fn finished_output(
    run: &BackgroundRun,
    state: RunState,
    note: Option<String>,
) -> Result<ToolOutput, ToolError> {
    let (status, exit_code, timed_out) = match state {
        RunState::Ended(Termination::Exited(code)) => {
            (format!("exit code {code}"), Some(code), false)
        }
        RunState::Ended(Termination::Signaled(signal)) => {
            (format!("killed by signal {signal}"), None, false)
        }
        RunState::Ended(Termination::TimedOut) => (
            format!(
                "timed out after {:.1} s; the process tree was killed",
                run.elapsed().as_secs_f64()
            ),
            None,
            true,
        ),
        RunState::Running | RunState::Failed => {
            return Err(ToolError::Failed(
                "exec: supervising the command failed; its process tree was killed".to_owned(),
            ))
        }
    };
    let status = if run.oom_killed() {
        format!("{status} (memory limit reached)")
    } else {
        status
    };
    let slice = run.read_output(0);
    let mut text = String::new();
    if slice.missed_bytes > 0 {
        text.push_str(&format!(
            "[… {} bytes of output dropped between the first and last part …]\n",
            slice.missed_bytes
        ));
    }
    text.push_str(&slice.text);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if let Some(note) = note {
        text.push_str(&note);
        text.push('\n');
    }
    text.push_str(&format!("[{status}]"));
    Ok(ToolOutput {
        text,
        details: Some(json!({"exitCode": exit_code, "timedOut": timed_out})),
    })
}

async fn start_background(
    ctx: &ToolContext,
    request: ExecRequest,
) -> Result<ToolOutput, ToolError> {
    let id = ctx
        .services
        .processes
        .start(
            &ctx.session_key,
            request,
            keep_finished(ctx),
            exit_notice(ctx),
        )
        .await
        .map_err(|e| ToolError::Denied(e.to_string()))?;
    Ok(ToolOutput {
        text: format!(
            "Command running in the background (session {id}). Use the process tool to poll, write, or kill it."
        ),
        details: Some(json!({"status": "running", "sessionId": id})),
    })
}

/// Applies the exec approval policy; `Ok` means the command may run.
async fn check_approval(ctx: &ToolContext, request: &ExecRequest) -> Result<(), ToolError> {
    let policy = ExecApprovalPolicy::for_agent(&ctx.config, &ctx.agent_id);
    let approvals = &ctx.services.approvals;
    let extra = approvals.allowlisted(&ctx.agent_id, &request.command);
    match policy.gate(&request.command, extra) {
        ExecGate::Run => return Ok(()),
        ExecGate::Refuse(reason) => {
            return Err(ToolError::Denied(format!("exec refused: {reason}")))
        }
        ExecGate::Ask => {}
    }
    let spell = |v: Option<String>| v.map(|s| s.trim_matches('"').to_owned());
    let asked = ApprovalRequest {
        command: request.command.clone(),
        cwd: Some(request.workspace.display().to_string()),
        host: Some("sandbox".to_owned()),
        security: spell(policy.security.and_then(|s| serde_json::to_string(&s).ok())),
        ask: spell(policy.ask.and_then(|a| serde_json::to_string(&a).ok())),
        agent_id: Some(ctx.agent_id.clone()),
        session_key: Some(ctx.session_key.clone()),
    };
    let timeout = Duration::from_millis(DEFAULT_EXEC_APPROVAL_TIMEOUT_MS);
    match approvals.decide(asked, timeout).await {
        Ok(ApprovalDecision::AllowOnce | ApprovalDecision::AllowAlways) => Ok(()),
        Ok(ApprovalDecision::Deny) => Err(ToolError::Denied(
            "exec denied: an operator denied this command".to_owned(),
        )),
        Err(error @ (ApprovalError::TimedOut(_) | ApprovalError::NoApprover)) => Err(
            ToolError::Denied(format!("exec denied: approval required, {error}")),
        ),
        Err(error) => Err(ToolError::Denied(format!("exec denied: {error}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::Layer;

    fn policy(config: &str) -> SandboxPolicy {
        policy_for(
            &crate::config::parse_str(config, "test").expect("config"),
            "main",
        )
    }

    #[test]
    fn docker_cpus_is_the_cgroup_quota_and_requires_the_cgroup() {
        let plain = policy("{}");
        assert!(!plain.require.contains(&Layer::Cgroup));
        let limited = policy("{ agents: { defaults: { sandbox: { docker: { cpus: 0.5 } } } } }");
        assert_eq!(limited.limits.cpu_quota_percent, 50);
        assert!(limited.require.contains(&Layer::Cgroup));
    }

    #[test]
    fn docker_ulimits_become_the_rlimits_of_the_same_name() {
        let limits = policy(
            "{ agents: { defaults: { sandbox: { docker: { ulimits: \
               { nofile: 77, nproc: { soft: 9, hard: 9 }, fsize: 4096, cpu: '5:5' } } } } } }",
        )
        .limits;
        assert_eq!(
            (
                limits.max_open_files,
                limits.max_processes,
                limits.max_file_bytes,
                limits.cpu_seconds
            ),
            (77, 9, 4096, 5)
        );
    }

    #[test]
    fn exec_timeout_and_path_come_from_the_agent_over_the_global_block() {
        let global = policy("{ tools: { exec: { timeoutSec: 3600, pathPrepend: ['/opt/g'] } } }");
        assert_eq!((global.timeout_secs, global.max_timeout_secs), (3600, 3600));
        assert_eq!(global.path_prepend, vec!["/opt/g".to_string()]);
        let agent = policy(
            "{ tools: { exec: { timeoutSec: 3600, pathPrepend: ['/opt/g'] } }, \
               agents: { list: [ { id: 'main', tools: { exec: { timeoutSec: 5 } } } ] } }",
        );
        assert_eq!((agent.timeout_secs, agent.max_timeout_secs), (5, 1800));
        assert_eq!(agent.path_prepend, vec!["/opt/g".to_string()]);
    }
}
