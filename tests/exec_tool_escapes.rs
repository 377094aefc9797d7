//! The escape attempts of the sandbox suite, made through the `exec` tool
//! itself (the path the agent uses), with the containment asserted.
//! The full suite (`sandbox_escape_*.rs`) runs the same attacks and more
//! through `sandbox::exec::run_command`, which this tool wraps.

use std::sync::Arc;

use pincer::config::Config;
use pincer::store::{Store, StoreOptions};
use pincer::tools::{exec::ExecTool, Tool, ToolContext};
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[path = "support/skip.rs"]
mod skip;

struct Setup {
    _dir: tempfile::TempDir,
    outside: std::path::PathBuf,
    ctx: ToolContext,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let outside = dir.path().join("gateway-data");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(
        outside.join("pincer.json5"),
        "{ gateway: { auth: { token: \"s3cret-token\" } } }",
    )
    .expect("secret");
    let store = Store::open(&dir.path().join("store"), StoreOptions::default()).expect("store");
    let ctx = ToolContext {
        agent_id: "main".into(),
        session_key: "agent:main:telegram:direct:42".into(),
        workspace,
        store,
        http: reqwest::Client::new(),
        cancel: CancellationToken::new(),
        config: Arc::new(Config::default()),
        services: Default::default(),
    };
    Setup {
        _dir: dir,
        outside,
        ctx,
    }
}

/// What the last line of every command prints, so a test sees that the command ran.
const RAN: &str = "command-ran-to-its-end";

/// Runs `command` through the exec tool, then `echo` [`RAN`]; fails the test unless the tool
/// ran it to its end (an attack that never runs proves nothing about containment).
async fn exec(ctx: &ToolContext, command: &str) -> String {
    let output = ExecTool
        .execute(
            json!({"command": format!("{command}\necho {RAN}"), "timeout": 20}),
            ctx,
        )
        .await
        .unwrap_or_else(|e| panic!("the exec tool did not run {command:?}: {e}"));
    assert!(
        output.text.contains(RAN),
        "{command:?} did not run to its end:\n{}",
        output.text
    );
    output.text
}

/// The exec tool's refusal of `command`; fails the test when the tool ran it.
async fn exec_refused(ctx: &ToolContext, command: &str) -> String {
    match ExecTool
        .execute(json!({"command": command, "timeout": 20}), ctx)
        .await
    {
        Ok(output) => panic!("{command:?} ran instead of being refused:\n{}", output.text),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_outside_the_workspace_cannot_be_read() {
    let s = setup();
    let out = exec(
        &s.ctx,
        &format!(
            "cat {}/pincer.json5; cat /etc/shadow; ls ~/.ssh",
            s.outside.display()
        ),
    )
    .await;
    assert!(!out.contains("s3cret-token"), "{out}");
    assert!(!out.contains("root:"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_outside_the_workspace_do_not_land() {
    let s = setup();
    let target = s.outside.join("planted");
    let out = exec(
        &s.ctx,
        &format!(
            "echo x > {0}; ln -s {0} link && echo y > link; echo z > ../planted; echo attack-finished",
            target.display()
        ),
    )
    .await;
    // stdout and stderr share the output: the shell writes an error's text and its newline
    // apart, so the marker may follow an error on the same line.
    assert!(
        out.contains("attack-finished"),
        "the attack did not reach its last step:\n{out}"
    );
    assert!(
        !target.exists(),
        "a file appeared outside the workspace: {out}"
    );
    assert!(!s.outside.parent().expect("parent").join("planted").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_loopback_is_unreachable_and_the_env_is_clean() {
    let s = setup();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("addr").port();
    std::env::set_var("PINCER_TEST_SECRET_KEY", "sk-should-not-leak");
    let connect = format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>&1 && echo CONNECTED");
    // Control: the same command on the host does connect.
    let host = std::process::Command::new("sh")
        .args(["-c", &connect])
        .output()
        .expect("host control");
    assert!(
        String::from_utf8_lossy(&host.stdout).contains("CONNECTED"),
        "control failed: the check could not tell"
    );
    let out = exec(&s.ctx, &format!("{connect}; env")).await;
    assert!(out.contains("PATH="), "env did not run:\n{out}");
    assert!(!out.contains("CONNECTED"), "{out}");
    assert!(!out.contains("sk-should-not-leak"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_command_is_killed_at_its_timeout() {
    let s = setup();
    let started = std::time::Instant::now();
    let out = match ExecTool
        .execute(
            json!({"command": "while :; do :; done", "timeout": 1}),
            &s.ctx,
        )
        .await
    {
        Ok(output) => output.text,
        Err(e) => format!("refused: {e}"),
    };
    assert!(out.contains("timed out"), "{out}");
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_sandbox_network_host_reaches_the_host_loopback() {
    let mut s = setup();
    let config = pincer::config::parse_str(
        "{ agents: { defaults: { sandbox: { network: \"host\" } } } }",
        "test",
    )
    .expect("config with the host-network opt-out");
    s.ctx.config = Arc::new(config);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("addr").port();
    let out = exec(
        &s.ctx,
        &format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>&1 && echo CONNECTED"),
    )
    .await;
    assert!(out.contains("CONNECTED"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_required_layer_the_host_lacks_refuses_exec_by_name() {
    let mut s = setup();
    // This host has no delegated cgroup v2 (checked: the probe must agree, or the test says so).
    let caps = pincer::sandbox::probe();
    let cgroup = caps.status(pincer::sandbox::Layer::Cgroup).to_string();
    if cgroup.starts_with("available") {
        skip::skip(
            "a_required_layer_the_host_lacks_refuses_exec_by_name",
            "this host delegates a cgroup, so requiring it cannot fail here",
        );
        return;
    }
    let config = pincer::config::parse_str(
        "{ agents: { defaults: { sandbox: { require: [\"cgroup\"] } } } }",
        "test",
    )
    .expect("config requiring a cgroup");
    s.ctx.config = Arc::new(config);
    let refusal = exec_refused(&s.ctx, "echo should-not-run").await;
    assert!(refusal.contains("cgroup"), "{refusal}");
}
