//! OpenClaw's own clients, unmodified, against the pincer gateway.
//!
//! Each test starts the fake OpenAI server, writes a config whose only model
//! is served by it, spawns the real `pincer gateway` binary on a free port and
//! drives it with a published client: the `openclaw-node` library (0.14.0,
//! protocol 4, and 0.1.0, protocol 3) through `tests/clients/openclaw_node.mjs`,
//! and the `openclaw` CLI (2026.9.6, Node 24). The drivers only report what the
//! clients returned; every assertion about the gateway's behaviour is here.
//! Client runtimes come from `scripts/setup node cli`; their paths can be
//! overridden with `PINCER_NODE` (Node for openclaw-node, default `node`),
//! `PINCER_NODE24`, `PINCER_OPENCLAW_CLI` and `PINCER_CLIENTS_DIR`.
//! This file must not fake the gateway: a test here fails when pincer does.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::{config_with_provider, GatewayProcess};

/// Upper bound for one client driver run (its own steps time out sooner).
const DRIVER_TIMEOUT: Duration = Duration::from_secs(90);
/// How long the gateway may take to drop the upstream stream after an abort.
const ABORT_PROPAGATION_TIMEOUT: Duration = Duration::from_secs(20);
const TOKEN: &str = "test-token-0123456789abcdef";

/// A gateway whose only model is served by `fake`.
fn start_gateway(fake: &FakeOpenAi) -> GatewayProcess {
    GatewayProcess::start(
        &config_with_provider(&fake.base_url()),
        &["--port", "0", "--token", TOKEN],
    )
}

fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// An installed client runtime, from its env var or its scripts/setup location.
fn client_path(env_var: &str, default: PathBuf) -> PathBuf {
    let path = std::env::var_os(env_var).map_or(default, PathBuf::from);
    assert!(
        path.exists(),
        "{} not found (set {env_var} or run `scripts/setup node cli`)",
        path.display()
    );
    path
}

fn clients_dir() -> PathBuf {
    let dir = client_path("PINCER_CLIENTS_DIR", manifest_path("tests/clients"));
    client_path(
        "PINCER_CLIENTS_DIR",
        dir.join("node_modules/openclaw-node-v4"),
    );
    dir
}

fn node20() -> PathBuf {
    std::env::var_os("PINCER_NODE").map_or_else(|| PathBuf::from("node"), PathBuf::from)
}

fn node24() -> PathBuf {
    client_path(
        "PINCER_NODE24",
        manifest_path(".tools/node24/node_modules/.bin/node"),
    )
}

fn openclaw_cli() -> PathBuf {
    client_path(
        "PINCER_OPENCLAW_CLI",
        manifest_path(".tools/openclaw-cli/node_modules/openclaw/openclaw.mjs"),
    )
}

/// What a finished client process left behind.
struct ClientRun {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
}

impl ClientRun {
    /// The JSON document on stdout; panics with the whole run when there is none.
    fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|err| {
            panic!(
                "client printed no JSON ({err}); status {}\nstdout:\n{}\nstderr:\n{}",
                self.status, self.stdout, self.stderr
            )
        })
    }

    fn expect_success(&self, what: &str) -> Value {
        assert!(
            self.status.success(),
            "{what} failed with {}\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self.json()
    }
}

/// Runs a client to completion without blocking the runtime (the fake
/// OpenAI server answers on it meanwhile).
async fn run_client(mut command: tokio::process::Command) -> ClientRun {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(DRIVER_TIMEOUT, command.output())
        .await
        .unwrap_or_else(|_| panic!("client {command:?} still running after {DRIVER_TIMEOUT:?}"))
        .expect("spawn client");
    ClientRun {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// One phase of `openclaw_node.mjs` with library `lib` ("v3" or "v4").
async fn openclaw_node(
    lib: &str,
    phase: &str,
    gateway: &GatewayProcess,
    session: &str,
    message: &str,
) -> ClientRun {
    let clients = clients_dir();
    let home = gateway.dir.path().join(format!("home-{lib}"));
    std::fs::create_dir_all(&home).expect("client home");
    let mut command = tokio::process::Command::new(node20());
    command
        .current_dir(&clients)
        .arg(clients.join("openclaw_node.mjs"))
        .args(["--lib", lib, "--phase", phase, "--url", &gateway.url()])
        .args(["--token", TOKEN, "--session", session, "--message", message])
        .arg("--identity")
        .arg(home.join("device-identity.json"))
        .env("HOME", &home);
    run_client(command).await
}

/// `openclaw gateway call METHOD --url … --token … --json [extra]` on Node 24.
async fn openclaw_gateway_call(
    gateway: &GatewayProcess,
    method: &str,
    extra: &[&str],
) -> ClientRun {
    let home = gateway.dir.path().join("home-cli");
    std::fs::create_dir_all(&home).expect("cli home");
    let mut command = tokio::process::Command::new(node24());
    command
        .arg(openclaw_cli())
        .args(["gateway", "call", method, "--url", &gateway.url()])
        .args(["--token", TOKEN, "--json"])
        .args(extra)
        .env("HOME", &home)
        .env("NO_COLOR", "1")
        .env_remove("OPENCLAW_GATEWAY_URL")
        .env_remove("OPENCLAW_GATEWAY_TOKEN")
        .env_remove("OPENCLAW_GATEWAY_PASSWORD")
        .env_remove("OPENCLAW_STATE_DIR")
        .env_remove("OPENCLAW_CONFIG_PATH");
    run_client(command).await
}

/// The text of a transcript message: a plain string or OpenClaw's content parts.
fn message_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|part| part["type"] == "text")
            .filter_map(|part| part["text"].as_str())
            .collect(),
        _ => String::new(),
    }
}

/// The session's row in a `sessions.list` payload, under its key or its
/// canonical `agent:<id>:<key>` form.
fn find_session<'a>(list: &'a Value, key: &str) -> Option<&'a Value> {
    let suffix = format!(":{key}");
    list["sessions"].as_array()?.iter().find(|row| {
        row["key"]
            .as_str()
            .is_some_and(|k| k == key || k.ends_with(&suffix))
    })
}

fn history_has(history: &Value, role: &str, text: &str) -> bool {
    history["messages"].as_array().is_some_and(|messages| {
        messages
            .iter()
            .any(|m| m["role"] == role && message_text(m) == text)
    })
}

/// The whole openclaw-node scenario for one library version.
async fn openclaw_node_scenario(lib: &str, expected_protocol: u64) {
    let fake = FakeOpenAi::start().await;
    let gateway = start_gateway(&fake);
    let session = format!("oc-node-{lib}");
    // Long enough that the fake's 4-character echo chunks span several deltas.
    let message = format!(
        "Tell me about pincer ({lib}), a gateway for small boards that speaks the OpenClaw protocol to real clients."
    );

    let report = openclaw_node(lib, "chat", &gateway, &session, &message)
        .await
        .expect_success("openclaw-node chat phase");
    assert_eq!(report["hello"]["type"], "hello-ok", "{report}");
    assert_eq!(report["hello"]["protocol"], expected_protocol, "{report}");
    assert_eq!(
        report["health"]["ok"], true,
        "health(): {}",
        report["health"]
    );
    let echo = format!("echo: {message}");
    assert_eq!(report["text"], echo.as_str(), "streamed text: {report}");
    let text_chunks = report["chunks"]
        .as_array()
        .map_or(0, |c| c.iter().filter(|c| c["type"] == "text").count());
    assert!(text_chunks >= 2, "reply was not streamed: {report}");
    assert!(
        find_session(&report["sessions"], &session).is_some(),
        "sessions.list lacks {session}: {}",
        report["sessions"]
    );
    let history = &report["history"];
    assert!(history_has(history, "user", &message), "history: {history}");
    assert!(
        history_has(history, "assistant", &echo),
        "history: {history}"
    );
    assert_eq!(report["clientErrors"], serde_json::json!([]), "{report}");

    fake.push_reply(FakeReply::Hang {
        first_chunk: "thinking about it".into(),
    });
    let aborted = openclaw_node(lib, "abort", &gateway, &session, "Please never finish.")
        .await
        .expect_success("openclaw-node abort phase");
    assert_eq!(aborted["ended"], true, "{aborted}");
    assert_eq!(aborted["abort"]["aborted"], true, "chat.abort: {aborted}");
    tokio::time::timeout(ABORT_PROPAGATION_TIMEOUT, fake.wait_for_disconnects(1))
        .await
        .unwrap_or_else(|_| panic!("gateway kept the upstream stream open after chat.abort"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openclaw_node_0_14_protocol_4_chats_lists_history_and_aborts() {
    openclaw_node_scenario("v4", 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openclaw_node_0_1_protocol_3_chats_lists_history_and_aborts() {
    openclaw_node_scenario("v3", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openclaw_cli_gateway_call_health_agent_and_sessions_list() {
    let fake = FakeOpenAi::start().await;
    let gateway = start_gateway(&fake);

    let health = openclaw_gateway_call(&gateway, "health", &[])
        .await
        .expect_success("openclaw gateway call health");
    assert_eq!(health["ok"], true, "health: {health}");

    let params =
        r#"{"message":"hello from the CLI","sessionKey":"oc-cli","idempotencyKey":"cli-run-1"}"#;
    let run = openclaw_gateway_call(&gateway, "agent", &["--expect-final", "--params", params])
        .await
        .expect_success("openclaw gateway call agent --expect-final");
    assert_eq!(run["status"], "ok", "agent final: {run}");
    assert_eq!(run["runId"], "cli-run-1", "agent final: {run}");
    assert_eq!(
        run["result"]["payloads"][0]["text"], "echo: hello from the CLI",
        "agent final: {run}"
    );

    let sessions = openclaw_gateway_call(&gateway, "sessions.list", &[])
        .await
        .expect_success("openclaw gateway call sessions.list");
    assert!(
        find_session(&sessions, "oc-cli").is_some(),
        "sessions.list lacks oc-cli: {sessions}"
    );
    assert!(
        sessions["count"].as_u64().is_some_and(|n| n >= 1),
        "{sessions}"
    );
}
