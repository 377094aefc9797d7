//! The `tools.exec` and `sandbox.docker` settings pincer honours, through the `exec` tool as an
//! agent calls it: `timeoutSec` (the default time before a command is killed), `pathPrepend`
//! (directories in front of `PATH`), `docker.ulimits` (the rlimits of those names) and
//! `docker.cpus` (the run's cgroup CPU quota: refused, naming the cgroup, where no delegated
//! cgroup exists), `cleanupMs` (how long a finished background run stays for `process`).
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
use pincer::tools::process::ProcessTool;
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
