//! The `tools.exec` and `sandbox.docker` settings pincer honours, through the `exec` tool as an
//! agent calls it: `timeoutSec` (the default time before a command is killed), `pathPrepend`
//! (directories in front of `PATH`), `docker.ulimits` (the rlimits of those names) and
//! `docker.cpus` (the run's cgroup CPU quota: refused, naming the cgroup, where no delegated
//! cgroup exists), `cleanupMs` (how long a finished background run stays for `process`),
//! `backgroundMs` (a foreground command still running after it continues in the background),
//! `notifyOnExit` (a backgrounded run's exit is announced as a system event) and
//! `notifyOnExitEmptySuccess` (a silent success is announced too).
//!
//! Timeout, PATH and rlimits apply to every run, sandboxed or not, so those tests run with
//! `sandbox.mode: "off"` on any host; the `cpus` test needs the sandbox and reports a skip
//! where it cannot run (tests/sandbox_support).

mod sandbox_support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use pincer::sandbox::Layer;
use pincer::store::{Store, StoreOptions};
use pincer::tools::exec::ExecTool;
use pincer::tools::process::{ExecExitNotifier, ProcessTool};
use pincer::tools::{Tool, ToolContext, ToolOutput};
use sandbox_support::{capabilities, confined_modes, report};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

struct Setup {
    _dir: tempfile::TempDir,
    workspace: PathBuf,
    ctx: ToolContext,
}

/// Agent `main` in a group session, with `config` written around the workspace path (`{ws}`).
fn setup(config: &str) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().canonicalize().expect("canonical");
    let workspace = base.join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let config = config.replace("{ws}", &workspace.display().to_string());
    let config = pincer::config::parse_str(&config, "test").expect("config");
    let store = Store::open(&base.join("store"), StoreOptions::default()).expect("store");
    let ctx = ToolContext {
        agent_id: "main".into(),
        session_key: "agent:main:telegram:group:-100".into(),
        workspace: workspace.clone(),
        store,
        http: reqwest::Client::new(),
        cancel: CancellationToken::new(),
        config: Arc::new(config),
        services: Default::default(),
    };
    Setup {
        _dir: dir,
        workspace,
        ctx,
    }
}

async fn exec(ctx: &ToolContext, args: Value) -> Result<ToolOutput, String> {
    ExecTool.execute(args, ctx).await.map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_sec_is_the_default_time_before_a_command_is_killed() {
    let s = setup(
        "{ agents: { defaults: { sandbox: { mode: 'off' } } }, tools: { exec: { timeoutSec: 1 } } }",
    );
    let out = exec(&s.ctx, json!({"command": "sleep 8; echo finished"}))
        .await
        .expect("exec ran");
    assert!(!out.text.contains("finished"), "{}", out.text);
    assert_eq!(
        out.details.as_ref().and_then(|d| d["timedOut"].as_bool()),
        Some(true),
        "{}",
        out.text
    );
    // A per-call timeout still wins.
    let out = exec(
        &s.ctx,
        json!({"command": "sleep 2; echo finished", "timeout": 20}),
    )
    .await
    .expect("exec ran");
    assert!(out.text.contains("finished"), "{}", out.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_prepend_directories_come_first_in_path() {
    let s = setup(
        "{ agents: { defaults: { sandbox: { mode: 'off' } } }, \
           tools: { exec: { pathPrepend: ['{ws}/bin'] } } }",
    );
    let bin = s.workspace.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let tool = bin.join("hello-pp");
    std::fs::write(&tool, "#!/bin/sh\necho prepended-tool-ran\n").expect("tool");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = exec(&s.ctx, json!({"command": "hello-pp; echo \"PATH=$PATH\""}))
        .await
        .expect("exec ran");
    assert!(out.text.contains("prepended-tool-ran"), "{}", out.text);
    assert!(
        out.text
            .contains(&format!("PATH={}:/usr/local/bin", bin.display())),
        "{}",
        out.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_ulimits_are_the_commands_rlimits() {
    let s = setup(
        "{ agents: { defaults: { sandbox: { mode: 'off', docker: { ulimits: { nofile: 77, fsize: 4096 } } } } } }",
    );
    let out = exec(
        &s.ctx,
        json!({"command": "ulimit -n; ulimit -f; head -c 8192 /dev/zero > big; wc -c < big"}),
    )
    .await
    .expect("exec ran");
    let lines: Vec<&str> = out.text.lines().map(str::trim).collect();
    assert_eq!(lines.first(), Some(&"77"), "{}", out.text);
    // `ulimit -f` counts 512-byte blocks: 4096 bytes.
    assert_eq!(lines.get(1), Some(&"8"), "{}", out.text);
    let written = std::fs::metadata(s.workspace.join("big"))
        .expect("big")
        .len();
    assert!(
        written <= 4096,
        "wrote {written} bytes past fsize: {}",
        out.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_cpus_needs_the_cgroup_and_is_refused_without_one() {
    let test = "docker_cpus_needs_the_cgroup_and_is_refused_without_one";
    if confined_modes(test).is_empty() {
        report(&format!(
            "SKIPPED {test}: neither namespaces nor Landlock is available on this host"
        ));
        return;
    }
    let s = setup("{ agents: { defaults: { sandbox: { mode: 'all', docker: { cpus: 0.5 } } } } }");
    let result = exec(
        &s.ctx,
        json!({"command": "echo throttled-run", "timeout": 20}),
    )
    .await;
    if capabilities().status(Layer::Cgroup).is_available() {
        let out = result.expect("exec ran in its cgroup");
        assert!(out.text.contains("throttled-run"), "{}", out.text);
    } else {
        let error = result.expect_err("no cgroup: the quota cannot hold, the command is refused");
        assert!(error.contains("cgroup"), "{error}");
    }
}

/// `docker.user`: the command has those ids inside the sandbox (the workspace stays writable: the
/// ids map to the service's own outside); without the namespaces layer the run is refused, never run
/// as the service user instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_user_sets_the_ids_inside_the_sandbox_or_is_refused() {
    let test = "docker_user_sets_the_ids_inside_the_sandbox_or_is_refused";
    if confined_modes(test).is_empty() {
        report(&format!(
            "SKIPPED {test}: neither namespaces nor Landlock is available on this host"
        ));
        return;
    }
    let s = setup(
        "{ agents: { defaults: { sandbox: { mode: 'all', workspaceAccess: 'rw', docker: { user: '1234:5678' } } } } }",
    );
    let result = exec(
        &s.ctx,
        json!({"command": "echo \"ids $(id -u):$(id -g)\" && touch made-by-user", "timeout": 20}),
    )
    .await;
    if capabilities().status(Layer::Namespaces).is_available() {
        let out = result.expect("exec ran");
        assert!(out.text.contains("ids 1234:5678"), "{}", out.text);
        assert!(s.workspace.join("made-by-user").exists(), "{}", out.text);
    } else {
        let error = result.expect_err("no user namespace: the ids cannot be given");
        assert!(error.contains("namespaces"), "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_ms_forgets_finished_background_runs() {
    let s = setup(
        "{ agents: { defaults: { sandbox: { mode: 'off' } } }, tools: { exec: { cleanupMs: 300 } } }",
    );
    let started = exec(
        &s.ctx,
        json!({"command": "echo background-done", "background": true}),
    )
    .await
    .expect("started");
    let id = started.details.expect("details")["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned();
    let process = |args: Value| ProcessTool.execute(args, &s.ctx);
    let polled = process(json!({"action": "poll", "sessionId": id, "timeout": 10_000}))
        .await
        .expect("poll");
    assert!(polled.text.contains("background-done"), "{}", polled.text);
    // Just finished: still listed for the agent to read.
    let listed = process(json!({"action": "list"})).await.expect("list");
    assert!(listed.text.contains(&id), "{}", listed.text);
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let listed = process(json!({"action": "list"})).await.expect("list");
    assert!(!listed.text.contains(&id), "{}", listed.text);
    let log = process(json!({"action": "log", "sessionId": id})).await;
    assert!(
        log.is_err(),
        "the run was kept past cleanupMs: {:?}",
        log.map(|o| o.text)
    );
}

/// Records the exec-exit events, as the gateway's heartbeat queue would receive them.
#[derive(Default)]
struct Recorder(parking_lot::Mutex<Vec<(String, String)>>);

impl ExecExitNotifier for Recorder {
    fn exec_exited(&self, session_key: &str, text: &str) {
        self.0
            .lock()
            .push((session_key.to_owned(), text.to_owned()));
    }
}

impl Recorder {
    fn events(&self) -> Vec<(String, String)> {
        self.0.lock().clone()
    }

    /// Waits (up to 10 s) for `count` events.
    async fn wait_for(&self, count: usize) -> Vec<(String, String)> {
        for _ in 0..200 {
            if self.events().len() >= count {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        self.events()
    }
}

/// `setup` with a recorder as the exec-exit notifier.
fn setup_notified(config: &str) -> (Setup, Arc<Recorder>) {
    let mut s = setup(config);
    let recorder = Arc::new(Recorder::default());
    s.ctx.services.exec_exits = Some(recorder.clone());
    (s, recorder)
}

fn session_id(out: &ToolOutput) -> String {
    out.details.as_ref().expect("details")["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned()
}

/// Waits for a background run to end (through `process poll`); its output since the last poll.
async fn poll_to_end(ctx: &ToolContext, id: &str) -> ToolOutput {
    ProcessTool
        .execute(
            json!({"action": "poll", "sessionId": id, "timeout": 20_000}),
            ctx,
        )
        .await
        .expect("poll")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_ms_is_how_long_a_foreground_command_runs_before_it_yields() {
    let s = setup(
        "{ agents: { defaults: { sandbox: { mode: 'off' } } }, tools: { exec: { backgroundMs: 300 } } }",
    );
    let started = std::time::Instant::now();
    let out = exec(
        &s.ctx,
        json!({"command": "echo first-part; sleep 3; echo second-part"}),
    )
    .await
    .expect("exec ran");
    assert!(
        started.elapsed() < std::time::Duration::from_millis(2_500),
        "the call waited for the command: {:?}",
        started.elapsed()
    );
    assert!(out.text.contains("Command still running"), "{}", out.text);
    let details = out.details.clone().expect("details");
    assert_eq!(details["status"], "running", "{details}");
    assert!(
        details["tail"]
            .as_str()
            .unwrap_or("")
            .contains("first-part"),
        "{details}"
    );
    let id = session_id(&out);
    assert!(out.text.contains(&id), "{}", out.text);
    // The command went on in the background: all its output, from the start, through `process`.
    let polled = poll_to_end(&s.ctx, &id).await;
    assert!(
        polled.text.contains("first-part") && polled.text.contains("second-part"),
        "{}",
        polled.text
    );
    assert_eq!(polled.details.expect("details")["exitCode"], 0);
    // A command ending within the window answers in full, as before.
    let out = exec(&s.ctx, json!({"command": "echo quick-one"}))
        .await
        .expect("exec ran");
    assert!(out.text.contains("quick-one"), "{}", out.text);
    assert!(out.text.contains("[exit code 0]"), "{}", out.text);
    // The call's yieldMs wins over the setting.
    let out = exec(
        &s.ctx,
        json!({"command": "sleep 1; echo waited-for", "yieldMs": 20_000}),
    )
    .await
    .expect("exec ran");
    assert!(out.text.contains("waited-for"), "{}", out.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_background_ms_wins_over_the_global_one() {
    let s = setup(
        "{ agents: { defaults: { sandbox: { mode: 'off' } }, \
             list: [ { id: 'main', tools: { exec: { backgroundMs: 200 } } } ] }, \
           tools: { exec: { backgroundMs: 60000 } } }",
    );
    let out = exec(&s.ctx, json!({"command": "sleep 3"}))
        .await
        .expect("exec ran");
    assert!(out.text.contains("Command still running"), "{}", out.text);
    let killed = ProcessTool
        .execute(
            json!({"action": "kill", "sessionId": session_id(&out)}),
            &s.ctx,
        )
        .await
        .expect("kill");
    assert!(killed.text.contains("killed"), "{}", killed.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_on_exit_announces_a_backgrounded_runs_exit_to_its_session() {
    let (s, recorder) = setup_notified(
        "{ agents: { defaults: { sandbox: { mode: 'off' } } }, tools: { exec: { backgroundMs: 200 } } }",
    );
    // On by default: a yielded foreground command, and an explicit background one that fails.
    let yielded = exec(
        &s.ctx,
        json!({"command": "sleep 1; echo   yielded   output"}),
    )
    .await
    .expect("exec ran");
    let yielded_id = session_id(&yielded);
    let failed = exec(
        &s.ctx,
        json!({"command": "echo no-such-thing; exit 127", "background": true}),
    )
    .await
    .expect("started");
    let failed_id = session_id(&failed);
    let events = recorder.wait_for(2).await;
    let key = s.ctx.session_key.clone();
    assert!(
        events.contains(&(
            key.clone(),
            format!("Exec completed ({yielded_id}, code 0) :: yielded output")
        )),
        "{events:?}"
    );
    assert!(
        events.contains(&(
            key,
            format!("Exec failed ({failed_id}, code 127) :: no-such-thing")
        )),
        "{events:?}"
    );
    // A run the agent kills is not announced, nor a foreground command that ended in its window.
    let killed = exec(&s.ctx, json!({"command": "sleep 30", "background": true}))
        .await
        .expect("started");
    ProcessTool
        .execute(
            json!({"action": "kill", "sessionId": session_id(&killed)}),
            &s.ctx,
        )
        .await
        .expect("kill");
    exec(&s.ctx, json!({"command": "echo in-the-window"}))
        .await
        .expect("exec ran");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(recorder.events().len(), 2, "{:?}", recorder.events());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_on_exit_false_keeps_background_exits_quiet() {
    let (s, recorder) = setup_notified(
        "{ agents: { defaults: { sandbox: { mode: 'off' } }, \
             list: [ { id: 'main', tools: { exec: { notifyOnExit: false } } } ] } }",
    );
    let out = exec(
        &s.ctx,
        json!({"command": "echo would-be-announced", "background": true}),
    )
    .await
    .expect("started");
    let polled = poll_to_end(&s.ctx, &session_id(&out)).await;
    assert!(
        polled.text.contains("would-be-announced"),
        "{}",
        polled.text
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(recorder.events().is_empty(), "{:?}", recorder.events());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_on_exit_empty_success_announces_silent_successes_too() {
    // Off by default: a successful exit without output is not announced...
    let (s, recorder) = setup_notified("{ agents: { defaults: { sandbox: { mode: 'off' } } } }");
    let out = exec(&s.ctx, json!({"command": "true", "background": true}))
        .await
        .expect("started");
    poll_to_end(&s.ctx, &session_id(&out)).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(recorder.events().is_empty(), "{:?}", recorder.events());
    // ...and with the key on it is, without an output part.
    let (s, recorder) = setup_notified(
        "{ agents: { defaults: { sandbox: { mode: 'off' } } }, \
           tools: { exec: { notifyOnExitEmptySuccess: true } } }",
    );
    let out = exec(&s.ctx, json!({"command": "true", "background": true}))
        .await
        .expect("started");
    let id = session_id(&out);
    let events = recorder.wait_for(1).await;
    assert_eq!(
        events,
        vec![(
            s.ctx.session_key.clone(),
            format!("Exec completed ({id}, code 0)")
        )]
    );
}
