//! WhatsApp end to end: the real `pincer gateway` process (built with the
//! `whatsapp` feature, its chat socket pointed at the socket-level fake
//! server `tests/support/fake_whatsapp.rs` through `PINCER_WHATSAPP_WS_URL`)
//! answers through the fake OpenAI provider. Proves: an unlinked device
//! shows `waitingForScan` in `channels.status`; once linked (in the
//! gateway's own store) it shows connected with its number; an allowed DM
//! is answered through the model, end-to-end encrypted; an unknown sender
//! gets a pairing code and never reaches the model; a device removed on the
//! phone shows `loggedOut`.

#[allow(dead_code)]
#[path = "support/fake_openai.rs"]
mod fake_openai;
#[allow(dead_code)]
#[path = "support/fake_whatsapp.rs"]
mod fake_whatsapp;
#[allow(dead_code)]
#[path = "support/gateway.rs"]
mod gateway;
#[allow(dead_code)]
#[path = "support/ws_client.rs"]
mod ws_client;

use std::time::Duration;

use fake_openai::{FakeOpenAi, FakeReply};
use fake_whatsapp::FakeWhatsApp;
use gateway::GatewayProcess;
use pincer::channels::whatsapp::{LinkState, SealedBackend, SessionOptions, WhatsAppSession};
use pincer::store::{Store, StoreOptions};
use serde_json::{json, Value};
use ws_client::TestClient;

const GATEWAY_TOKEN: &str = "e2e-whatsapp-operator-token";
/// Hang guard for waits (never a timing claim).
const WAIT_GUARD: Duration = Duration::from_secs(40);
const ALICE: &str = "15557654321";
const STRANGER: &str = "15550000999";

fn config(provider: &FakeOpenAi) -> String {
    json!({
        "models": { "providers": { "fake": {
            "baseUrl": provider.base_url(), "apiKey": "sk-test",
            "api": "openai-completions",
            "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
        "agents": { "defaults": { "model": { "primary": "fake/gpt-test" } } },
        "session": { "dmScope": "per-channel-peer" },
        "channels": { "whatsapp": { "allowFrom": [format!("+{ALICE}")] } },
    })
    .to_string()
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

/// The WhatsApp row of `channels.status`.
async fn whatsapp_status(gateway: &GatewayProcess) -> Value {
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(GATEWAY_TOKEN),
        &["operator.read"],
        None,
    )
    .await;
    let listed = client.call("channels.status", json!({})).await;
    listed["payload"]["channelAccounts"]["whatsapp"][0].clone()
}

async fn wait_for_status(
    gateway: &GatewayProcess,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    loop {
        let status = whatsapp_status(gateway).await;
        if pred(&status) {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}; status {status}; stderr:\n{}",
            gateway.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Links a device into the gateway's stopped store, as the phone scanning its QR code.
async fn link_in_store(fake: &FakeWhatsApp, store_dir: &std::path::Path) {
    let store = Store::open(store_dir, StoreOptions::default()).expect("open the gateway's store");
    let session = WhatsAppSession::start(SessionOptions {
        url: fake.url(),
        version: Some((2, 3000, 1_023_456_789)),
        http: reqwest::Client::new(),
        backend: SealedBackend::new(store.sealed("whatsapp/default").expect("sealed records")),
        inbound: None,
    })
    .await
    .expect("start");
    let mut status = session.watch();
    let qr = tokio::time::timeout(WAIT_GUARD, status.wait_for(|s| s.qr.is_some()))
        .await
        .expect("a QR code")
        .expect("status")
        .qr
        .clone()
        .expect("qr");
    fake.scan_qr(&qr).await.expect("scan");
    tokio::time::timeout(
        WAIT_GUARD,
        status.wait_for(|s| s.state == LinkState::Connected),
    )
    .await
    .expect("connected")
    .expect("status");
    eventually("pre-keys uploaded", || fake.bundle().is_some()).await;
    session.stop().await;
    drop(store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_device_answers_allowed_dms_pairs_strangers_and_reports_its_link() {
    let fake = FakeWhatsApp::start().await;
    let provider = FakeOpenAi::start().await;
    let config = config(&provider);
    let url = fake.url();
    let env = [
        ("PINCER_WHATSAPP_WS_URL", url.as_str()),
        ("PINCER_WHATSAPP_VERSION", "2.3000.1023456789"),
    ];
    let args = ["--port", "0", "--token", GATEWAY_TOKEN];
    let mut gateway =
        tokio::task::block_in_place(|| GatewayProcess::start_with_env(&config, &args, &env));

    // No device stored: the session waits for a scan, and the status says so.
    let status = wait_for_status(&gateway, "waitingForScan", |s| {
        s["stateReason"] == "waitingForScan"
    })
    .await;
    assert_eq!(status["connected"], false, "{status}");

    // Link in the gateway's own store while it is down, then start it again.
    tokio::task::block_in_place(|| gateway.terminate());
    link_in_store(&fake, &gateway.data_dir().join("store")).await;
    tokio::task::block_in_place(|| gateway.crash_and_restart_with_env(&config, &args, &env));
    let status = wait_for_status(&gateway, "connected", |s| s["connected"] == true).await;
    assert_eq!(status["stateReason"], "connected", "{status}");
    assert!(
        status["identity"]
            .as_str()
            .is_some_and(|id| id.starts_with('+')),
        "{status}"
    );
    // What the Control UI's WhatsApp card reads: linked, the number, when it connected.
    assert_eq!(status["linked"], true, "{status}");
    assert_eq!(status["self"]["e164"], status["identity"], "{status}");
    assert!(status["lastConnectedAt"].as_u64().is_some(), "{status}");

    // An allowed sender is answered through the model, encrypted to the contact.
    provider.push_reply(FakeReply::Text {
        chunks: vec!["Hello Alice, from the model.".into()],
        delay_ms: 0,
    });
    fake.send_dm(ALICE, "3EB0E2E0001", "hi pincer")
        .await
        .expect("dm");
    let to_alice = format!("{ALICE}@s.whatsapp.net");
    eventually("the answer to Alice", || {
        fake.sent_texts()
            .iter()
            .any(|(to, _, text)| *to == to_alice && text == "Hello Alice, from the model.")
    })
    .await;
    let asked: Vec<String> = provider
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert_eq!(asked.len(), 1);
    assert!(asked[0].contains("hi pincer"), "{}", asked[0]);

    // A stranger gets a pairing code; the model is not asked.
    fake.send_dm(STRANGER, "3EB0E2E0002", "who are you?")
        .await
        .expect("dm");
    let to_stranger = format!("{STRANGER}@s.whatsapp.net");
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    let pairing = loop {
        let sent = fake.sent_texts();
        if let Some((_, _, text)) = sent.iter().find(|(to, _, _)| *to == to_stranger) {
            break text.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing sent to the stranger; sent {sent:?}; unreadable {:?}; stderr:\n{}",
            fake.unreadable(),
            gateway.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        pairing.contains("pincer pairing approve whatsapp"),
        "{pairing}"
    );
    assert_eq!(
        provider.requests().len(),
        1,
        "the stranger never reached the model"
    );

    // The device removed on the phone: loggedOut, with the reason.
    fake.log_out().await;
    let status = wait_for_status(&gateway, "loggedOut", |s| s["stateReason"] == "loggedOut").await;
    assert_eq!(status["connected"], false, "{status}");
    assert!(
        status["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("logged out")),
        "{status}"
    );
    assert_eq!(status["linked"], false, "{status}");
    // `health` reports the same: not linked, logged out, why.
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(GATEWAY_TOKEN),
        &["operator.read"],
        None,
    )
    .await;
    let health = client.call("health", json!({})).await;
    let whatsapp = &health["payload"]["channels"]["whatsapp"];
    assert_eq!(whatsapp["linked"], false, "{health}");
    assert_eq!(whatsapp["connected"], false, "{health}");
    assert_eq!(whatsapp["stateReason"], "loggedOut", "{health}");
    assert!(
        whatsapp["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("logged out")),
        "{health}"
    );
}
