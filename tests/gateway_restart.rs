//! Restart in place, against the real binary: `/restart` and a config change
//! that needs a restart drain the gateway and re-exec it — the same process
//! (PID), serving again on its port, telling systemd `RELOADING=1` then
//! `READY=1`, with no store descriptor leaked into the new image — and a
//! message acknowledged before the restart is answered after it. A chat
//! channel whose credentials change restarts alone, with the new token.

mod support;

use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::fake_telegram::FakeTelegram;
use support::gateway::GatewayProcess;
use support::telegram_harness::{dm, BOT_ID, BOT_USERNAME, TOKEN as BOT_TOKEN_A};
use support::ws_client::{Device, Read, TestClient};

const TOKEN: &str = "restart-test-token";
const ADMIN: &[&str] = &["operator.admin", "operator.read", "operator.write"];
/// Hang guard for the polling loops below (never a timing claim).
const WAIT_GUARD: Duration = Duration::from_secs(40);

fn config(fake: &FakeOpenAi, extra: &str) -> String {
    format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
                                   models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }}, timeoutSeconds: 60 }} }},
  {extra}
}}"#,
        fake.base_url()
    )
}

async fn admin(gateway: &GatewayProcess, seed: u8) -> TestClient {
    let device = Device::new(seed);
    TestClient::connect(&gateway.url(), Some(TOKEN), ADMIN, Some(&device))
        .await
        .0
}

/// Sends a chat message and reads until both its `res` and its `chat` final.
async fn send_and_final(client: &mut TestClient, session: &str, key: &str, text: &str) -> Value {
    let params = json!({"sessionKey": session, "message": text, "idempotencyKey": key});
    let id = client.request("chat.send", params).await;
    let (mut ack, mut last) = (false, None);
    while !ack || last.is_none() {
        match client.read().await {
            Read::Frame(f) if f["type"] == "res" && f["id"] == id.as_str() => {
                assert_eq!(f["ok"], true, "{f}");
                ack = true;
            }
            Read::Frame(f)
                if f["event"] == "chat"
                    && f["payload"]["runId"] == key
                    && f["payload"]["state"] == "final" =>
            {
                last = Some(f["payload"].clone())
            }
            Read::Frame(_) => {}
            Read::Closed { code, reason } => panic!("closed ({code} {reason})"),
        }
    }
    last.expect("final")
}

/// The last user message's text of every request the model got.
fn asked(fake: &FakeOpenAi) -> Vec<String> {
    fake.requests()
        .iter()
        .filter_map(|r| {
            let messages = r.body["messages"].as_array()?;
            let user = messages.iter().rev().find(|m| m["role"] == "user")?;
            Some(
                user["content"]
                    .as_str()
                    .map_or_else(|| user["content"].to_string(), str::to_string),
            )
        })
        .collect()
}

async fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "waited for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Descriptors of process `pid` open on the store's LMDB files.
fn store_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the gateway's descriptors")
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().ends_with(".mdb"))
        .count()
}

/// A port nobody listens on right now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

async fn health_ok(gateway: &GatewayProcess, seed: u8) {
    let mut client = admin(gateway, seed).await;
    let health = client.call("health", json!({})).await;
    assert_eq!(health["ok"], true, "{health}");
}

/// The notifications a gateway sent to `socket`, read until one contains `until`.
fn notifications_until(socket: &UnixDatagram, seen: &mut Vec<String>, until: &str) {
    let mut buf = [0u8; 512];
    loop {
        let n = socket.recv(&mut buf).expect("sd_notify datagram");
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        seen.push(text.clone());
        if text.contains(until) {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_command_comes_back_in_place_and_answers_the_waiting_message() {
    let fake = FakeOpenAi::start().await;
    let (gate, side_gate) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    for (gate, text) in [(&gate, "First answer."), (&side_gate, "Side answer.")] {
        fake.push_reply(FakeReply::Held {
            gate: gate.clone(),
            then: Box::new(FakeReply::Text {
                chunks: vec![text.into()],
                delay_ms: 0,
            }),
        });
    }
    let notify_dir = tempfile::tempdir().expect("tempdir");
    let notify_path = notify_dir.path().join("notify.sock");
    let systemd = UnixDatagram::bind(&notify_path).expect("bind the notify socket");
    systemd
        .set_read_timeout(Some(WAIT_GUARD))
        .expect("read timeout");
    let notify_env = notify_path.to_str().expect("utf-8 path");
    let mut gateway = GatewayProcess::start_with_env(
        &config(&fake, ""),
        &["--port", "0", "--token", TOKEN],
        &[("NOTIFY_SOCKET", notify_env)],
    );
    let mut notes = Vec::new();
    notifications_until(&systemd, &mut notes, "READY=1");
    let pid = gateway.child.id();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("exe link");
    let port = gateway.port;
    let store_fds = store_descriptors(pid);
    assert!(store_fds > 0, "the store is open");

    let mut client = admin(&gateway, 51).await;
    let params =
        json!({"sessionKey": "main", "message": "first question", "idempotencyKey": "r-1"});
    let ack = client.call("chat.send", params).await;
    assert_eq!(ack["payload"]["status"], "started", "{ack}");
    wait_until("the first turn to reach the model", || {
        !fake.requests().is_empty()
    })
    .await;
    // A turn in another session keeps the drain going after the first ends.
    let params = json!({"sessionKey": "side", "message": "side question", "idempotencyKey": "s-1"});
    let ack = client.call("chat.send", params).await;
    assert_eq!(ack["payload"]["status"], "started", "{ack}");
    wait_until("the side turn to reach the model", || {
        fake.requests().len() >= 2
    })
    .await;
    // Queued behind the running turn: acknowledged, not yet run.
    let params =
        json!({"sessionKey": "main", "message": "second question", "idempotencyKey": "r-2"});
    let ack = client.call("chat.send", params).await;
    assert_eq!(ack["payload"]["status"], "started", "{ack}");

    let answer = send_and_final(&mut client, "ops", "r-3", "/restart").await;
    assert!(
        answer.to_string().contains("Restarting"),
        "the command answers: {answer}"
    );
    let shutdown = client.event_where("shutdown", |_| true).await;
    assert!(
        shutdown["restartExpectedMs"].as_u64().is_some(),
        "clients are told to come back: {shutdown}"
    );
    // The drain lets the running turns finish; the waiting message's turn
    // comes up meanwhile and is not started.
    gate.notify_one();
    wait_until("the waiting turn to come up during the drain", || {
        gateway.stderr().contains("turn for agent:main:main")
    })
    .await;
    side_gate.notify_one();

    let new_port = gateway.wait_for_ready_line(2).await;
    assert_eq!(new_port, port, "serves again on the same port");
    assert!(gateway.alive(), "the same process serves again");
    assert_eq!(gateway.child.id(), pid);
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/exe")).expect("exe link"),
        exe
    );
    notifications_until(&systemd, &mut notes, "READY=1");
    let reloading = notes
        .iter()
        .position(|n| n.contains("RELOADING=1") && n.contains("MONOTONIC_USEC="))
        .unwrap_or_else(|| panic!("RELOADING=1 with MONOTONIC_USEC was sent: {notes:?}"));
    assert!(
        notes[reloading + 1..].iter().any(|n| n.contains("READY=1")),
        "READY=1 again after the restart: {notes:?}"
    );
    assert!(
        !notes.iter().any(|n| n.contains("STOPPING=1")),
        "a restart is not a stop: {notes:?}"
    );
    health_ok(&gateway, 52).await;

    // The message acknowledged before the restart is answered after it, once.
    wait_until("the waiting message to run", || {
        asked(&fake).iter().any(|t| t == "second question")
    })
    .await;
    let mut reader = admin(&gateway, 53).await;
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    let history = loop {
        let history = reader
            .call("chat.history", json!({"sessionKey": "main"}))
            .await;
        let answers = history["payload"]["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
        if answers >= 2 || tokio::time::Instant::now() > deadline {
            break history;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    let text = history.to_string();
    assert!(text.contains("First answer."), "{text}");
    let side = reader
        .call("chat.history", json!({"sessionKey": "side"}))
        .await;
    assert!(side.to_string().contains("Side answer."), "{side}");
    assert!(text.contains("second question"), "{text}");
    let answers = history["payload"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    assert_eq!(answers, 2, "both questions answered: {text}");
    assert_eq!(
        asked(&fake)
            .iter()
            .filter(|t| *t == "second question")
            .count(),
        1,
        "the waiting message ran once"
    );
    assert_eq!(
        store_descriptors(pid),
        store_fds,
        "the old image's store descriptors were closed on exec"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_gateway_port_restarts_in_place_on_the_new_port() {
    let fake = FakeOpenAi::start().await;
    let (old_port, new_port) = (free_port(), free_port());
    let text = config(&fake, &format!("gateway: {{ port: {old_port} }},"));
    let mut gateway = GatewayProcess::start(&text, &["--token", TOKEN]);
    assert_eq!(gateway.port, old_port);
    let pid = gateway.child.id();
    health_ok(&gateway, 61).await;
    // gateway.port is one of the paths upstream restarts the gateway for
    // (the default reload mode, hybrid).
    let edited = gateway
        .read_config()
        .replace(&format!("port: {old_port}"), &format!("port: {new_port}"));
    std::fs::write(gateway.config_path(), edited).expect("edit the config");
    assert_eq!(gateway.wait_for_ready_line(2).await, new_port);
    assert!(gateway.alive());
    assert_eq!(gateway.child.id(), pid);
    health_ok(&gateway, 62).await;
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", old_port)).is_err(),
        "the old port is closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_mode_restarts_for_a_change_hybrid_would_hot_apply() {
    let fake = FakeOpenAi::start().await;
    let text = config(&fake, r#"gateway: { reload: { mode: "restart" } },"#);
    let mut gateway = GatewayProcess::start(&text, &["--port", "0", "--token", TOKEN]);
    let (pid, port) = (gateway.child.id(), gateway.port);
    let edited = gateway
        .read_config()
        .replace("timeoutSeconds: 60", "timeoutSeconds: 90");
    std::fs::write(gateway.config_path(), edited).expect("edit the config");
    assert_eq!(gateway.wait_for_ready_line(2).await, port);
    assert_eq!(gateway.child.id(), pid);
    assert!(gateway.alive());
    health_ok(&gateway, 71).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_restarts_in_place_unless_restarts_are_disabled() {
    let fake = FakeOpenAi::start().await;
    let mut gateway = GatewayProcess::start(&config(&fake, ""), &["--port", "0", "--token", TOKEN]);
    let (pid, port) = (gateway.child.id(), gateway.port);
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(pid as i32, libc::SIGUSR1) };
    assert_eq!(gateway.wait_for_ready_line(2).await, port);
    assert_eq!(gateway.child.id(), pid);
    assert!(gateway.alive());
    health_ok(&gateway, 91).await;

    let text = config(&fake, "commands: { restart: false },");
    let mut gateway = GatewayProcess::start(&text, &["--port", "0", "--token", TOKEN]);
    // SAFETY: as above.
    unsafe { libc::kill(gateway.child.id() as i32, libc::SIGUSR1) };
    wait_until("the signal to be handled", || {
        gateway.stderr().contains("SIGUSR1 ignored")
    })
    .await;
    assert!(gateway.alive());
    assert_eq!(gateway.ready_lines(), 1, "no restart");
    health_ok(&gateway, 92).await;
}

const BOT_TOKEN_B: &str = "123456789:BBB-rotated_TOKEN_value";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_bot_token_restarts_only_the_telegram_adapter() {
    let fake = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(BOT_TOKEN_A, BOT_ID, BOT_USERNAME).await;
    let extra = format!(
        r#"channels: {{ telegram: {{ botToken: "{BOT_TOKEN_A}", apiRoot: "{}", allowFrom: [7], streaming: "off" }} }},"#,
        telegram.api_root()
    );
    let mut gateway =
        GatewayProcess::start(&config(&fake, &extra), &["--port", "0", "--token", TOKEN]);
    telegram.push_message(dm("before the rotation"));
    let sent = telegram.wait_for_calls("sendMessage", 1).await;
    assert_eq!(sent[0].token, BOT_TOKEN_A);

    telegram.accept_token(BOT_TOKEN_B);
    let mut client = admin(&gateway, 81).await;
    let current = client.call("config.get", json!({})).await;
    let hash = current["payload"]["hash"]
        .as_str()
        .expect("hash")
        .to_string();
    let raw = format!(r#"{{ channels: {{ telegram: {{ botToken: "{BOT_TOKEN_B}" }} }} }}"#);
    let patched = client
        .call("config.patch", json!({"raw": raw, "baseHash": hash}))
        .await;
    assert_eq!(patched["ok"], true, "{patched}");

    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    let first_b = loop {
        let calls = telegram.calls_of("getUpdates");
        if let Some(i) = calls.iter().position(|c| c.token == BOT_TOKEN_B) {
            break i;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no getUpdates with the new token"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    telegram.push_message(dm("after the rotation"));
    let sent = telegram.wait_for_calls("sendMessage", 2).await;
    assert_eq!(
        sent[1].token, BOT_TOKEN_B,
        "the answer goes out with the new token"
    );
    assert!(asked(&fake)
        .iter()
        .any(|t| t.contains("after the rotation")));
    let polls = telegram.calls_of("getUpdates");
    assert!(
        polls[first_b..].iter().all(|c| c.token == BOT_TOKEN_B),
        "the old token is not used once the new adapter polls"
    );
    // The watcher saw the written file too, and hot-applied it.
    wait_until("the watcher's hot reload", || {
        gateway.stderr().contains("config reloaded from")
    })
    .await;
    assert_eq!(
        gateway.ready_lines(),
        1,
        "the gateway itself did not restart"
    );
    assert!(gateway.alive());
}
