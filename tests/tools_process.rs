//! Background exec runs and the `process` tool, through the real gateway binary: `exec` with
//! `background: true` starts a sandboxed run, `process` polls its output, writes its stdin and
//! kills it; a session holds a bounded number of runs; reset and gateway shutdown kill them.
//! The sandbox's background entry point is also exercised directly.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::{config_with_provider, GatewayProcess};
use support::process_tree::{survivors_after_wait, wait_for_marked, Proc};
use support::ws_client::TestClient;

use pincer::sandbox::{spawn, RunState, SandboxSpec, Termination};
use pincer::tools::process::MAX_BACKGROUND_RUNS_PER_SESSION;

const TOKEN: &str = "process-test-token";
/// A config that lets `/tools/invoke` run `exec` (denied over HTTP by default).
const HTTP_EXEC_CONFIG: &str = r#"{ gateway: { tools: { allow: ["exec", "process"] } } }"#;

async fn invoke(gateway: &GatewayProcess, tool: &str, session: &str, args: Value) -> Value {
    let res = reqwest::Client::new()
        .post(gateway.http("/tools/invoke"))
        .bearer_auth(TOKEN)
        .json(&json!({"tool": tool, "sessionKey": session, "args": args}))
        .send()
        .await
        .expect("invoke");
    res.json().await.expect("json body")
}

async fn start_background(gateway: &GatewayProcess, session: &str, command: &str) -> String {
    let started = invoke(
        gateway,
        "exec",
        session,
        json!({"command": command, "background": true}),
    )
    .await;
    assert_eq!(started["ok"], true, "{started}");
    started["result"]["details"]["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_string()
}

fn start_gateway(config: &str) -> GatewayProcess {
    let gateway = GatewayProcess::start(config, &["--port", "0", "--token", TOKEN]);
    std::fs::create_dir_all(gateway.data_dir().join("workspace")).expect("workspace");
    gateway
}

/// A command that appends to `ticks` in the workspace forever; `marker` in its command line
/// (inherited by the subshells it forks) finds its processes on the host.
fn ticker(marker: &str) -> String {
    format!("while true; do : {marker}; echo t >> ticks; sleep 0.05; done")
}

/// A marker unique to one test run.
fn new_marker(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .subsec_nanos();
    format!("pincer-{name}-{}-{nanos}", std::process::id())
}

/// Asserts every one of `procs` dies (bounded poll of their PIDs).
async fn assert_all_die(procs: &[Proc], what: &str) {
    let survivors = survivors_after_wait(procs).await;
    assert!(
        survivors.is_empty(),
        "{what}: {survivors:?} of {procs:?} still alive"
    );
}

async fn wait_for_file(path: &Path) {
    for _ in 0..200 {
        if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{} never appeared", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_run_echoes_stdin_and_ends_when_stdin_closes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = SandboxSpec::new(
        vec!["/bin/sh".into(), "-c".into(), "cat; echo done".into()],
        dir.path(),
    );
    let run = spawn(spec).await.expect("spawned");
    assert_eq!(run.state(), RunState::Running);
    run.write_stdin(b"hello\n", true).await.expect("stdin");
    let state = run.wait(Duration::from_secs(20)).await;
    assert_eq!(state, RunState::Ended(Termination::Exited(0)));
    assert_eq!(run.read_output(0).text, "hello\ndone\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_background_run_kills_its_whole_tree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = new_marker("tree");
    let spec = SandboxSpec::new(
        vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("({}) & wait", ticker(&marker)),
        ],
        dir.path(),
    );
    let run = spawn(spec).await.expect("spawned");
    wait_for_file(&dir.path().join("ticks")).await;
    // The shell and the ticking subshell it forked.
    let tree = wait_for_marked(&marker, 2).await;
    run.kill();
    let state = run.wait(Duration::from_secs(10)).await;
    assert!(matches!(state, RunState::Ended(_)), "{state:?}");
    assert_all_die(&tree, "the killed run's tree").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_tool_polls_writes_and_kills_a_background_exec() {
    let gateway = start_gateway(HTTP_EXEC_CONFIG);
    let id = start_background(
        &gateway,
        "work",
        "echo ready; read line; echo got:$line; sleep 300",
    )
    .await;
    let poll = |timeout: u64| {
        invoke(
            &gateway,
            "process",
            "work",
            json!({"action": "poll", "sessionId": id, "timeout": timeout}),
        )
    };
    let mut first = poll(0).await;
    for _ in 0..100 {
        if first["result"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("ready"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        first = poll(0).await;
    }
    assert!(
        first["result"]["text"]
            .as_str()
            .unwrap_or("")
            .contains("ready"),
        "{first}"
    );
    assert_eq!(first["result"]["details"]["status"], "running");
    let wrote = invoke(
        &gateway,
        "process",
        "work",
        json!({"action": "write", "sessionId": id, "data": "ping\n"}),
    )
    .await;
    assert_eq!(wrote["ok"], true, "{wrote}");
    let mut second = poll(0).await;
    for _ in 0..100 {
        if second["result"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("got:ping"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        second = poll(0).await;
    }
    let text = second["result"]["text"].as_str().unwrap_or("");
    assert!(text.contains("got:ping"), "{second}");
    assert!(!text.contains("ready"), "poll repeats old output: {text}");
    let other = invoke(
        &gateway,
        "process",
        "elsewhere",
        json!({"action": "poll", "sessionId": id}),
    )
    .await;
    assert_eq!(other["ok"], false, "another session saw the run: {other}");
    let killed = invoke(
        &gateway,
        "process",
        "work",
        json!({"action": "kill", "sessionId": id}),
    )
    .await;
    assert_eq!(killed["result"]["details"]["status"], "killed", "{killed}");
    let log = invoke(
        &gateway,
        "process",
        "work",
        json!({"action": "log", "sessionId": id}),
    )
    .await;
    assert!(
        log["result"]["text"]
            .as_str()
            .unwrap_or("")
            .starts_with("ready\ngot:ping\n"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_holds_at_most_its_cap_of_running_background_processes() {
    let gateway = start_gateway(HTTP_EXEC_CONFIG);
    let mut ids = Vec::new();
    for _ in 0..MAX_BACKGROUND_RUNS_PER_SESSION {
        ids.push(start_background(&gateway, "busy", "sleep 300").await);
    }
    let refused = invoke(
        &gateway,
        "exec",
        "busy",
        json!({"command": "sleep 300", "background": true}),
    )
    .await;
    assert_eq!(refused["ok"], false, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("background"),
        "{refused}"
    );
    let elsewhere = start_background(&gateway, "calm", "true").await;
    assert!(!elsewhere.is_empty());
    invoke(
        &gateway,
        "process",
        "busy",
        json!({"action": "kill", "sessionId": ids[0]}),
    )
    .await;
    start_background(&gateway, "busy", "sleep 300").await;
    let list = invoke(&gateway, "process", "busy", json!({"action": "list"})).await;
    let sessions = list["result"]["details"]["sessions"]
        .as_array()
        .expect("list");
    assert_eq!(sessions.len(), MAX_BACKGROUND_RUNS_PER_SESSION, "{list}");
    assert!(
        sessions.iter().all(|s| s["sessionId"] != ids[0].as_str()),
        "the killed run made room"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_reset_kills_the_sessions_background_processes() {
    let gateway = start_gateway(HTTP_EXEC_CONFIG);
    let marker = new_marker("reset");
    start_background(&gateway, "resettable", &ticker(&marker)).await;
    let ticks = gateway.data_dir().join("workspace/ticks");
    wait_for_file(&ticks).await;
    let tree = wait_for_marked(&marker, 1).await;
    let mut client = TestClient::open(&gateway.url()).await;
    let params = client.connect_params(Some(TOKEN), &["operator.admin"], None);
    let id = client.request("connect", params).await;
    assert_eq!(client.response(&id).await["ok"], true);
    let reset = client
        .call("sessions.reset", json!({"key": "resettable"}))
        .await;
    assert_eq!(reset["ok"], true, "{reset}");
    assert_all_die(&tree, "the background run after the reset").await;
    let list = invoke(&gateway, "process", "resettable", json!({"action": "list"})).await;
    assert_eq!(
        list["result"]["text"],
        "no background processes in this session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_shutdown_kills_background_processes() {
    let mut gateway = start_gateway(HTTP_EXEC_CONFIG);
    let marker = new_marker("shutdown");
    start_background(&gateway, "main", &ticker(&marker)).await;
    let ticks = gateway.data_dir().join("workspace/ticks");
    wait_for_file(&ticks).await;
    let tree = wait_for_marked(&marker, 1).await;
    let status = gateway.terminate();
    assert!(status.success(), "gateway exit: {status}");
    assert_all_die(&tree, "the background run after the gateway stopped").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_starts_a_background_run_and_lists_it() {
    let fake = FakeOpenAi::start().await;
    let call =
        |id: &str, name: &str, args: Value| (id.to_string(), name.to_string(), args.to_string());
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![call(
            "c1",
            "exec",
            json!({"command": "echo from-background; sleep 300", "background": true}),
        )],
    });
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![call("c2", "process", json!({"action": "list"}))],
    });
    fake.push_reply(FakeReply::Text {
        chunks: vec!["done".into()],
        delay_ms: 1,
    });
    let gateway = start_gateway(&config_with_provider(&fake.base_url()));
    let mut client = TestClient::open(&gateway.url()).await;
    let params = client.connect_params(Some(TOKEN), &["operator.read", "operator.write"], None);
    let id = client.request("connect", params).await;
    assert_eq!(client.response(&id).await["ok"], true);
    let run = client
        .request("agent", json!({"message": "go", "idempotencyKey": "bg-1"}))
        .await;
    let res = loop {
        let frame = client.response(&run).await;
        if frame["payload"]["status"] != "accepted" {
            break frame;
        }
    };
    assert_eq!(res["ok"], true, "{res}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    let tool_results: Vec<String> = requests[2].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        tool_results[0].contains("running in the background"),
        "{tool_results:?}"
    );
    assert!(
        tool_results[1].contains("running") && tool_results[1].contains("echo from-background"),
        "{tool_results:?}"
    );
}
