//! Signal end to end: the real `pincer gateway` process talks to a fake
//! signal-cli HTTP daemon (JSON-RPC 2.0 + SSE, `tests/support/fake_signal.rs`)
//! and answers through the fake OpenAI provider. Proves: a photo fetched by
//! `getAttachment` reaches the model and a reply's file goes out as a `send`
//! attachment (one over the cap is not fetched); a DM answered
//! (typing shown, a read receipt sent as configured); an unknown sender
//! paired through the CLI; a group message answered only when it mentions
//! the bot; the event stream reconnected after the daemon dies, with the
//! status saying so in between; malformed and oversized events skipped
//! while the channel keeps answering; a flood held to the queue cap; and a
//! managed daemon (`transport.cliPath`) started with upstream's command
//! line, its output logged, restarted after it is killed and stopped with
//! the gateway.
//!
//! The managed-daemon test runs a small shell script in place of
//! signal-cli: it records its arguments and pid, writes two lines to
//! stderr and sleeps. The daemon's HTTP side is the in-process fake bound
//! to the port the script is told to use: what is proven is pincer's
//! supervision of the process and its use of that port, not signal-cli.

#[allow(dead_code)]
#[path = "support/fake_openai.rs"]
mod fake_openai;
#[path = "support/fake_signal.rs"]
mod fake_signal;
#[allow(dead_code)]
#[path = "support/gateway.rs"]
mod gateway;
#[allow(dead_code)]
#[path = "support/media_files.rs"]
mod media_files;
#[allow(dead_code)]
#[path = "support/ws_client.rs"]
mod ws_client;

use std::process::Command;
use std::time::Duration;

use fake_openai::{FakeOpenAi, FakeReply};
use fake_signal::{bot_mention, dm, group, FakeSignal, BOT_NUMBER};
use gateway::GatewayProcess;
use pincer::channels::inbox;
use pincer::store::{Store, StoreOptions};
use serde_json::{json, Value};
use ws_client::TestClient;

const GATEWAY_TOKEN: &str = "e2e-signal-operator-token";
/// Hang guard for waits (never a timing claim).
const WAIT_GUARD: Duration = Duration::from_secs(40);
const ANN: &str = "+15550000101";
const ANN_UUID: &str = "a0a0a0a0-0000-4000-8000-000000000101";
const BOB: &str = "+15550000102";
const BOB_UUID: &str = "a0a0a0a0-0000-4000-8000-000000000102";
const GROUP_ID: &str = "T3BzR3JvdXBJZEJhc2U2NA==";
/// pincer's cap on one SSE event (`MAX_SSE_EVENT_BYTES` in src/channels/signal/sse.rs).
const MAX_SSE_EVENT_BYTES: usize = 256 * 1024;

struct Rig {
    signal: FakeSignal,
    provider: FakeOpenAi,
}

impl Rig {
    async fn new() -> Rig {
        let signal = FakeSignal::start().await;
        signal.add_group(GROUP_ID, "Ops");
        Rig {
            signal,
            provider: FakeOpenAi::start().await,
        }
    }

    /// A config with the fake provider and `channels.signal` on the fake
    /// daemon (external) plus `extra`, and `top` merged at the top level.
    fn config_with(&self, extra: Value, top: Value) -> String {
        let mut signal = json!({
            "account": BOT_NUMBER,
            "transport": { "kind": "external-native", "url": self.signal.url() },
        });
        if let (Some(base), Value::Object(extra)) = (signal.as_object_mut(), extra) {
            base.extend(extra);
        }
        let mut config = json!({
            "models": { "providers": { "fake": {
                "baseUrl": self.provider.base_url(), "apiKey": "sk-test",
                "api": "openai-completions",
                "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
            "agents": { "defaults": { "model": { "primary": "fake/gpt-test" } } },
            "session": { "dmScope": "per-channel-peer" },
            "channels": { "signal": signal },
        });
        if let (Some(base), Value::Object(top)) = (config.as_object_mut(), top) {
            base.extend(top);
        }
        config.to_string()
    }

    fn config(&self, extra: Value) -> String {
        self.config_with(extra, json!({}))
    }

    fn open_config(&self) -> String {
        self.config(json!({ "dmPolicy": "open", "allowFrom": ["*"] }))
    }

    fn start(&self, config: &str) -> GatewayProcess {
        tokio::task::block_in_place(|| {
            GatewayProcess::start(config, &["--port", "0", "--token", GATEWAY_TOKEN])
        })
    }

    async fn wait_for_stream(&self) {
        eventually("an open event stream", || self.signal.open_streams() >= 1).await;
    }

    async fn wait_for_sent(&self, to: &str, count: usize) -> Vec<String> {
        eventually(&format!("{count} messages to {to}"), || {
            self.signal.sent_to(to).len() >= count
        })
        .await;
        self.signal.sent_to(to)
    }
}

async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn text_reply(text: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![text.to_string()],
        delay_ms: 0,
    }
}

fn asked(provider: &FakeOpenAi) -> Vec<String> {
    provider
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect()
}

/// The Signal row of `channels.status`.
async fn signal_status(gateway: &GatewayProcess) -> Value {
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(GATEWAY_TOKEN),
        &["operator.read"],
        None,
    )
    .await;
    let listed = client.call("channels.status", json!({})).await;
    listed["payload"]["channelAccounts"]["signal"][0].clone()
}

/// Waits until every message the gateway took in has been handled.
async fn wait_until_nothing_in_flight(gateway: &GatewayProcess) {
    let store = Store::open(&gateway.data_dir().join("store"), StoreOptions::default())
        .expect("open the gateway's store");
    let in_flight = || {
        store
            .meta_with_prefix(inbox::RECORD_PREFIX, 1)
            .expect("read the inbox")
            .len()
    };
    eventually("the gateway's inbox empty", || in_flight() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_dm_is_answered_with_typing_and_a_read_receipt() {
    let rig = Rig::new().await;
    let gateway = rig.start(&rig.config(json!({
        "dmPolicy": "open", "allowFrom": ["*"], "sendReadReceipts": true,
    })));
    rig.wait_for_stream().await;

    rig.provider
        .push_reply(text_reply("Hello Ann, from the model."));
    rig.signal.push_receive(&dm(
        ANN,
        ANN_UUID,
        "Ann",
        "hi there, bot",
        1_700_000_000_001,
    ));
    let sent = rig.wait_for_sent(ANN, 1).await;
    assert_eq!(sent, vec!["Hello Ann, from the model."]);
    let asked = asked(&rig.provider);
    assert_eq!(asked.len(), 1);
    assert!(asked[0].contains("hi there, bot"), "{}", asked[0]);
    // Every call named the daemon's account; typing went to Ann.
    for call in rig.signal.calls() {
        assert_eq!(call.params["account"], BOT_NUMBER, "{call:?}");
    }
    let typing = rig.signal.calls_of("sendTyping");
    assert!(
        typing.iter().any(|p| p["recipient"] == json!([ANN])),
        "{typing:?}"
    );
    eventually("the read receipt", || {
        rig.signal.calls_of("sendReceipt").iter().any(|p| {
            p["recipient"] == ANN
                && p["targetTimestamp"] == json!([1_700_000_000_001u64])
                && p["type"] == "read"
        })
    })
    .await;
    let status = signal_status(&gateway).await;
    assert_eq!(status["connected"], true, "{status}");
    assert_eq!(status["identity"], BOT_NUMBER, "{status}");
    assert_eq!(status["baseUrl"], rig.signal.url().as_str(), "{status}");
    assert!(status["lastInboundAt"].is_u64(), "{status}");
}

fn approve_with_cli(gateway: &GatewayProcess, code: &str) -> String {
    let output = tokio::task::block_in_place(|| {
        Command::new(env!("CARGO_BIN_EXE_pincer"))
            .args(["pairing", "approve", "signal", code, "--url"])
            .arg(gateway.url())
            .args(["--token", GATEWAY_TOKEN, "--data-dir"])
            .arg(gateway.data_dir())
            .output()
            .expect("run pincer pairing approve")
    });
    assert!(
        output.status.success(),
        "pairing approve failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_dm_gets_a_pairing_code_and_after_cli_approval_is_answered() {
    let rig = Rig::new().await;
    // dmPolicy defaults to pairing, as upstream.
    let gateway = rig.start(&rig.config(json!({ "sendReadReceipts": true })));
    rig.wait_for_stream().await;

    rig.signal.push_receive(&dm(
        ANN,
        ANN_UUID,
        "Ann",
        "hello, who are you?",
        1_700_000_000_010,
    ));
    let sent = rig.wait_for_sent(ANN, 1).await;
    let code = sent[0]
        .split("pincer pairing approve signal")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(|code| code.trim_matches(|c: char| !c.is_ascii_alphanumeric()))
        .unwrap_or_else(|| panic!("no approve command in {:?}", sent[0]))
        .to_string();
    assert!(
        sent[0].contains(ANN),
        "the sender's id is named: {}",
        sent[0]
    );
    assert!(
        rig.provider.requests().is_empty(),
        "an unpaired sender must not reach the model"
    );
    assert!(
        rig.signal.calls_of("sendReceipt").is_empty(),
        "no read receipt for a message the bot did not admit"
    );
    let printed = approve_with_cli(&gateway, &code);
    assert!(printed.contains(ANN), "{printed}");

    rig.provider.push_reply(text_reply("Paired and answering."));
    rig.signal.push_receive(&dm(
        ANN,
        ANN_UUID,
        "Ann",
        "now can we talk?",
        1_700_000_000_011,
    ));
    let sent = rig.wait_for_sent(ANN, 2).await;
    assert_eq!(sent[1], "Paired and answering.");
    assert_eq!(rig.provider.requests().len(), 1);
    let receipts = rig.signal.calls_of("sendReceipt");
    assert_eq!(receipts.len(), 1, "{receipts:?}");
    assert_eq!(
        receipts[0]["targetTimestamp"],
        json!([1_700_000_000_011u64])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_message_is_answered_only_when_it_mentions_the_bot() {
    let rig = Rig::new().await;
    let gateway = rig.start(&rig.config(json!({
        "groupPolicy": "allowlist", "groupAllowFrom": [format!("group:{GROUP_ID}")],
    })));
    rig.wait_for_stream().await;
    let target = format!("group:{GROUP_ID}");

    rig.signal.push_receive(&group(
        GROUP_ID,
        BOB,
        BOB_UUID,
        "talking among ourselves",
        json!([]),
        1_700_000_000_020,
    ));
    // Taken in (the status has its time), handled to the end, never run.
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    while !signal_status(&gateway).await["lastInboundAt"].is_u64() {
        assert!(tokio::time::Instant::now() < deadline, "never taken in");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_until_nothing_in_flight(&gateway).await;
    assert!(rig.provider.requests().is_empty(), "no mention, no run");
    assert!(rig.signal.sent_to(&target).is_empty());

    rig.provider.push_reply(text_reply("You called?"));
    rig.signal.push_receive(&group(
        GROUP_ID,
        ANN,
        ANN_UUID,
        "\u{FFFC} what is the plan?",
        json!([bot_mention(0)]),
        1_700_000_000_021,
    ));
    let sent = rig.wait_for_sent(&target, 1).await;
    assert_eq!(sent, vec!["You called?"]);
    let asked = asked(&rig.provider);
    assert_eq!(asked.len(), 1, "only the mention reaches the model");
    assert!(
        asked[0].contains("@Pincer what is the plan?"),
        "{}",
        asked[0]
    );
    assert!(
        rig.signal
            .calls_of("send")
            .iter()
            .all(|p| p["groupId"] == GROUP_ID && p.get("recipient").is_none()),
        "group replies go by groupId"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_reconnects_after_the_daemon_dies() {
    let rig = Rig::new().await;
    let gateway = rig.start(&rig.open_config());
    rig.wait_for_stream().await;
    rig.provider.push_reply(text_reply("Before."));
    rig.signal
        .push_receive(&dm(ANN, ANN_UUID, "Ann", "one", 1_700_000_000_030));
    rig.wait_for_sent(ANN, 1).await;

    let port = rig.signal.port();
    rig.signal.shutdown();
    let mut status = Value::Null;
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    while status["connected"] != false {
        assert!(tokio::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        status = signal_status(&gateway).await;
    }
    assert!(
        status["lastError"].as_str().is_some_and(|e| !e.is_empty()),
        "{status}"
    );
    assert_eq!(
        status["running"], true,
        "the account keeps trying: {status}"
    );

    let revived = FakeSignal::start_on(port).await;
    eventually("the stream reopened", || revived.open_streams() >= 1).await;
    rig.provider.push_reply(text_reply("After."));
    revived.push_receive(&dm(ANN, ANN_UUID, "Ann", "two", 1_700_000_000_031));
    eventually("the answer after the reconnect", || {
        revived.sent_to(ANN) == vec!["After.".to_string()]
    })
    .await;
    let status = signal_status(&gateway).await;
    assert_eq!(status["connected"], true, "{status}");
    assert!(status["reconnectAttempts"].is_u64(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_events_are_skipped_and_the_channel_keeps_answering() {
    let rig = Rig::new().await;
    let mut gateway = rig.start(&rig.open_config());
    rig.wait_for_stream().await;

    rig.signal
        .push_raw(b"event:receive\ndata:{\"envelope\": {\"sourceNumber\": \n\n");
    rig.signal
        .push_receive(&json!({"envelope": {"timestamp": 5, "dataMessage": {"message": "who?"}}}));
    let huge = "x".repeat(MAX_SSE_EVENT_BYTES + 1024);
    rig.signal
        .push_receive(&dm(ANN, ANN_UUID, "Ann", &huge, 1_700_000_000_040));
    rig.provider.push_reply(text_reply("Still here."));
    rig.signal.push_receive(&dm(
        ANN,
        ANN_UUID,
        "Ann",
        "are you alive?",
        1_700_000_000_041,
    ));

    let sent = rig.wait_for_sent(ANN, 1).await;
    assert_eq!(sent, vec!["Still here."]);
    let asked = asked(&rig.provider);
    assert_eq!(asked.len(), 1, "only the good message reached the model");
    assert!(
        !asked[0].contains("xxxxxxxx"),
        "the oversized one was dropped"
    );
    assert_eq!(rig.signal.streams_opened(), 1, "the stream never broke");
    let status = signal_status(&gateway).await;
    assert_eq!(status["connected"], true, "{status}");
    let last = status["lastError"].as_str().unwrap_or_default().to_string();
    assert!(last.contains("skipped"), "{status}");
    let log = gateway.stderr();
    assert!(log.contains("a malformed event was skipped"), "{log}");
    assert!(log.contains("without source"), "{log}");
    assert!(log.contains("bytes was skipped"), "{log}");
    assert!(gateway.alive());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_messages_is_held_to_the_queue_cap() {
    let rig = Rig::new().await;
    let _gateway = rig.start(&rig.config_with(
        json!({ "dmPolicy": "open", "allowFrom": ["*"] }),
        json!({ "messages": { "queue": { "mode": "followup", "cap": 3, "drop": "new" } } }),
    ));
    rig.wait_for_stream().await;
    // The first turn is held by a slow model while the flood arrives.
    rig.provider.push_reply(FakeReply::Text {
        chunks: vec!["first".into()],
        delay_ms: 1_500,
    });
    for _ in 0..5 {
        rig.provider.push_reply(text_reply("later"));
    }
    rig.signal
        .push_receive(&dm(ANN, ANN_UUID, "Ann", "message 0", 1_700_000_000_100));
    eventually("the first turn running", || {
        rig.provider.requests().len() == 1
    })
    .await;
    for i in 1..=40u64 {
        rig.signal.push_receive(&dm(
            ANN,
            ANN_UUID,
            "Ann",
            &format!("message {i}"),
            1_700_000_000_100 + i,
        ));
    }
    eventually("three queued turns after the first", || {
        rig.provider.requests().len() >= 4
    })
    .await;
    // Whatever else was queued would run within the debounce; nothing does.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let asked = asked(&rig.provider);
    assert_eq!(asked.len(), 4, "the queue holds 3 behind the running turn");
    for i in 1..=3 {
        let text = format!("message {i}");
        assert!(asked.iter().any(|a| a.contains(&text)), "{text} ran");
    }
    assert!(
        asked.iter().all(|a| !a.contains("message 40")),
        "drop new: the newest were dropped"
    );
}

/// A stand-in for signal-cli: records `pid args` and sleeps (see the
/// file's doc).
fn stand_in_cli(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("signal-cli");
    let argv = dir.join("argv");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$$ $*\" >> '{}'\necho 'INFO DaemonCommand - Started HTTP server' >&2\n\
             echo 'ERROR stand-in failure line' >&2\nexec sleep 600\n",
            argv.display()
        ),
    )
    .expect("write the stand-in");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    script
}

fn started(dir: &std::path::Path) -> Vec<(i32, String)> {
    std::fs::read_to_string(dir.join("argv"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (pid, args) = line.split_once(' ')?;
            Some((pid.parse().ok()?, args.to_string()))
        })
        .collect()
}

/// Whether `pid` runs (a zombie left for a reaper does not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the command name's closing parenthesis.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_managed_daemon_is_started_restarted_and_stopped_with_the_gateway() {
    let rig = Rig::new().await;
    let dir = tempfile::tempdir().expect("dir");
    let cli = stand_in_cli(dir.path());
    let port = rig.signal.port();
    let config = rig.config(json!({
        "dmPolicy": "open", "allowFrom": ["*"],
        "transport": { "kind": "managed-native", "cliPath": cli.display().to_string(),
                       "httpHost": "127.0.0.1", "httpPort": port, "startupTimeoutMs": 5000 },
    }));
    let mut gateway = rig.start(&config);
    eventually("the daemon started", || !started(dir.path()).is_empty()).await;
    let (first_pid, args) = started(dir.path())[0].clone();
    assert_eq!(
        args,
        format!("-a {BOT_NUMBER} daemon --http 127.0.0.1:{port} --no-receive-stdout")
    );
    rig.wait_for_stream().await;
    rig.provider.push_reply(text_reply("Managed hello."));
    rig.signal
        .push_receive(&dm(ANN, ANN_UUID, "Ann", "hi", 1_700_000_000_200));
    assert_eq!(rig.wait_for_sent(ANN, 1).await, vec!["Managed hello."]);
    let status = signal_status(&gateway).await;
    assert_eq!(
        status["stateReason"],
        format!("signal-cli daemon running (pid {first_pid})"),
        "{status}"
    );
    eventually("the daemon's stderr in the log", || {
        gateway
            .stderr()
            .contains("signal-cli: ERROR stand-in failure line")
    })
    .await;

    // SAFETY: the stand-in's pid, recorded by the stand-in itself.
    unsafe {
        libc::kill(first_pid, libc::SIGKILL);
    }
    eventually("a restarted daemon", || started(dir.path()).len() >= 2).await;
    assert!(gateway.stderr().contains("signal-cli daemon exited"));
    let (second_pid, _) = started(dir.path())[1].clone();
    assert_ne!(first_pid, second_pid);
    assert!(alive(second_pid));

    // A gateway killed outright takes its daemon along, and the next start runs its own.
    tokio::task::block_in_place(|| {
        gateway.crash_and_restart(&config, &["--port", "0", "--token", GATEWAY_TOKEN])
    });
    eventually("the killed gateway's daemon gone", || !alive(second_pid)).await;
    eventually("a daemon for the restarted gateway", || {
        started(dir.path()).len() >= 3
    })
    .await;
    let (third_pid, _) = started(dir.path())[2].clone();
    assert!(alive(third_pid));

    let status = tokio::task::block_in_place(|| gateway.terminate());
    assert!(status.success(), "{status:?}");
    eventually("the daemon stopped with the gateway", || !alive(third_pid)).await;
}

/// The fake refuses what signal-cli refuses, so a wrong call from pincer
/// could not pass unnoticed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_daemon_refuses_what_signal_cli_refuses() {
    let signal = FakeSignal::start().await;
    signal.add_group(GROUP_ID, "Ops");
    let url = signal.url();
    let call = |body: Value| {
        let url = url.clone();
        async move {
            let (status, text) =
                fake_signal::raw_post(&url, "application/json", &body.to_string()).await;
            assert_eq!(status, 200, "{text}");
            serde_json::from_str::<Value>(&text).expect("a JSON-RPC answer")
        }
    };
    let code = |answer: &Value| answer["error"]["code"].as_i64();
    let request = |method: &str, params: Value| json!({"jsonrpc": "2.0", "method": method, "params": params, "id": "1"});
    assert_eq!(fake_signal::raw_post(&url, "text/plain", "{}").await.0, 415);
    assert_eq!(
        code(&call(json!({"jsonrpc": "1.0", "method": "send", "id": 1})).await),
        Some(-32600)
    );
    assert_eq!(
        code(&call(request("sendMessage", json!({}))).await),
        Some(-32601)
    );
    let wrong_account = call(request(
        "send",
        json!({"account": "+19999", "recipient": [ANN], "message": "x"}),
    ))
    .await;
    assert_eq!(
        wrong_account["error"]["message"],
        "Specified account does not exist"
    );
    assert_eq!(
        code(&call(request("send", json!({"message": "x"}))).await),
        Some(-1)
    );
    assert_eq!(
        code(
            &call(request(
                "send",
                json!({"recipient": ["ann"], "message": "x"})
            ))
            .await
        ),
        Some(-1)
    );
    assert_eq!(
        code(&call(request("send", json!({"groupId": "nope", "message": "x"}))).await),
        Some(-1)
    );
    assert_eq!(
        code(&call(request("send", json!({"recipient": [ANN]}))).await),
        Some(-1)
    );
    assert_eq!(
        code(
            &call(request(
                "sendReceipt",
                json!({"recipient": [ANN], "targetTimestamp": [1]})
            ))
            .await
        ),
        Some(-32602)
    );
    let sent = call(request(
        "send",
        json!({"account": BOT_NUMBER, "groupId": GROUP_ID, "message": "ok"}),
    ))
    .await;
    assert!(sent["result"]["timestamp"].is_u64(), "{sent}");
    // A notification (no id) is answered 201 without a body.
    let (status, body) = fake_signal::raw_post(
        &url,
        "application/json",
        &json!({"jsonrpc": "2.0", "method": "sendTyping", "params": {"recipient": [ANN]}})
            .to_string(),
    )
    .await;
    assert_eq!((status, body.as_str()), (201, ""));
    assert_eq!(fake_signal::open_events(&url, "+19999").await, 400);
    assert_eq!(fake_signal::open_events(&url, BOT_NUMBER).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_photo_comes_in_by_get_attachment_and_a_reply_file_goes_out_attached() {
    let rig = Rig::new().await;
    let vision = json!({ "providers": { "fake": {
        "baseUrl": rig.provider.base_url(), "apiKey": "sk-test", "api": "openai-completions",
        "models": [{ "id": "gpt-test", "contextWindow": 128000, "input": ["text", "image"] }] } } });
    let gateway = rig.start(&rig.config_with(
        json!({ "dmPolicy": "open", "allowFrom": ["*"] }),
        json!({ "models": vision }),
    ));
    rig.wait_for_stream().await;
    let photo = media_files::jpeg(64, 48);
    rig.signal.add_attachment("att-photo", photo.clone());
    let chart = media_files::jpeg(40, 30);
    let workspace = gateway.data_dir().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("chart.jpg"), &chart).expect("chart");
    rig.provider
        .push_reply(text_reply("Here is the chart.\nMEDIA: ./chart.jpg"));
    let mut message = dm(ANN, ANN_UUID, "Ann", "what is this?", 1_700_000_000_070);
    message["envelope"]["dataMessage"]["attachments"] = json!([
        {"id": "att-photo", "contentType": "image/jpeg", "filename": "cat.jpg",
         "size": photo.len(), "width": 64, "height": 48},
        {"id": "att-huge", "contentType": "video/mp4", "filename": "film.mp4",
         "size": 900_000_000u64},
    ]);
    rig.signal.push_receive(&message);
    eventually("a send with an attachment", || {
        rig.signal.sent().iter().any(|m| !m.attachments.is_empty())
    })
    .await;
    let fetched = rig.signal.calls_of("getAttachment");
    assert_eq!(
        fetched.len(),
        1,
        "the one over the cap is not asked for: {fetched:?}"
    );
    assert_eq!(fetched[0]["id"], "att-photo");
    assert_eq!(
        fetched[0]["recipient"], ANN,
        "the sender names the attachment"
    );
    let images = rig.provider.image_parts();
    assert_eq!(images.len(), 1, "the photo reached the model");
    assert_eq!(images[0], ("image/jpeg".to_string(), photo));
    let asked = asked(&rig.provider);
    assert!(
        asked[0].contains("film.mp4") && asked[0].contains("not downloaded"),
        "the model is told of the file over the cap: {}",
        asked[0]
    );
    let sent = rig.signal.sent();
    let with_file = sent
        .iter()
        .find(|m| !m.attachments.is_empty())
        .expect("the reply's file");
    assert_eq!(with_file.recipients, vec![ANN.to_string()]);
    assert_eq!(
        with_file.message, "Here is the chart.",
        "the text as its caption"
    );
    assert_eq!(with_file.attachments.len(), 1);
    assert_eq!(with_file.attachments[0].bytes, chart, "the file as it is");
    assert!(
        std::path::Path::new(&with_file.attachments[0].source).is_absolute(),
        "{}",
        with_file.attachments[0].source
    );
}
