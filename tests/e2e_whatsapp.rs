//! WhatsApp end to end: the real `pincer gateway` process (built with the
//! `whatsapp` feature, its chat socket pointed at the socket-level fake
//! server `tests/support/fake_whatsapp.rs` through `PINCER_WHATSAPP_WS_URL`)
//! answers through the fake OpenAI provider. Proves: an unlinked device
//! shows `waitingForScan` in `channels.status`; once linked (in the
//! gateway's own store) it shows connected with its number; an allowed DM
//! is answered through the model, end-to-end encrypted; an unknown sender
//! gets a pairing code and never reaches the model; a device removed on the
//! phone shows `loggedOut`. Groups: a message is answered in the group (read
//! by every member) only when it mentions or quotes the bot and its sender
//! is allowed; read receipts as configured; `groupPolicy: disabled`;
//! oversized and undecryptable group messages skipped with the next one
//! answered; "message yourself" answered without the answer looping back,
//! and ignored with `selfChatMode: false`.
//! Media (the CDN of `fake_whatsapp_media.rs`,
//! reached through `PINCER_WHATSAPP_MEDIA_URL`): a photo with a caption
//! reaches the model as an image; a reply's `MEDIA:` image reaches the
//! contact as an image message she decrypts, a `[[audio_as_voice]]` reply as
//! a push-to-talk voice note; a photo that fails its MAC gets the sender a
//! clear message and the next text is still answered.

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
#[path = "support/media_files.rs"]
mod media_files;
#[allow(dead_code)]
#[path = "support/ws_client.rs"]
mod ws_client;

use std::time::Duration;

use fake_openai::{FakeOpenAi, FakeReply};
use fake_whatsapp::media::{self as cdn, FakeMediaCdn};
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
        media_base: None,
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

const BOB: &str = "15553334444";
const GROUP: &str = "120363000000000002@g.us";

/// A gateway on `config` whose device is linked and connected.
async fn linked_gateway(fake: &FakeWhatsApp, config: &str) -> GatewayProcess {
    let url = fake.url();
    let env = [
        ("PINCER_WHATSAPP_WS_URL", url.as_str()),
        ("PINCER_WHATSAPP_VERSION", "2.3000.1023456789"),
    ];
    let args = ["--port", "0", "--token", GATEWAY_TOKEN];
    let mut gateway =
        tokio::task::block_in_place(|| GatewayProcess::start_with_env(config, &args, &env));
    wait_for_status(&gateway, "waitingForScan", |s| {
        s["stateReason"] == "waitingForScan"
    })
    .await;
    tokio::task::block_in_place(|| gateway.terminate());
    link_in_store(fake, &gateway.data_dir().join("store")).await;
    tokio::task::block_in_place(|| gateway.crash_and_restart_with_env(config, &args, &env));
    wait_for_status(&gateway, "connected", |s| s["connected"] == true).await;
    gateway
}

fn group_config(provider: &FakeOpenAi, whatsapp: Value) -> String {
    json!({
        "models": { "providers": { "fake": {
            "baseUrl": provider.base_url(), "apiKey": "sk-test",
            "api": "openai-completions",
            "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
        "agents": { "defaults": { "model": { "primary": "fake/gpt-test" } } },
        "session": { "dmScope": "per-channel-peer" },
        "channels": { "whatsapp": whatsapp },
    })
    .to_string()
}

fn reply(text: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![text.into()],
        delay_ms: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_messages_are_answered_in_the_group_only_when_the_bot_is_mentioned() {
    let fake = FakeWhatsApp::start().await;
    let provider = FakeOpenAi::start().await;
    // groupPolicy allowlist (the default), senders from allowFrom, every group admitted.
    let config = group_config(
        &provider,
        json!({ "allowFrom": [format!("+{ALICE}")], "groups": { "*": {} } }),
    );
    let gateway = linked_gateway(&fake, &config).await;
    fake.add_group(GROUP, &[ALICE, BOB]);
    let own = fake.own_jid();

    // Alice without a mention: kept as context, the model is not asked.
    fake.send_group_text(GROUP, ALICE, "3EB0E2G0001", "lunch at noon?", &[], None)
        .await
        .expect("group text");
    // Bob mentions the bot, but he is not an allowed group sender.
    fake.send_group_text(
        GROUP,
        BOB,
        "3EB0E2G0002",
        "@bot hi from Bob",
        std::slice::from_ref(&own),
        None,
    )
    .await
    .expect("bob");
    // Alice mentions the bot: answered in the group, readable by both members.
    provider.push_reply(reply("Noon works."));
    fake.send_group_text(
        GROUP,
        ALICE,
        "3EB0E2G0003",
        "@bot can you join?",
        std::slice::from_ref(&own),
        None,
    )
    .await
    .expect("mention");
    eventually("the answer in the group", || {
        let read = fake.group_texts();
        [ALICE, BOB].iter().all(|m| {
            read.iter()
                .any(|(g, who, _, text)| g == GROUP && who == m && text == "Noon works.")
        })
    })
    .await;
    let asked: Vec<String> = provider
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert_eq!(
        asked.len(),
        1,
        "only the mention reached the model: {asked:?}"
    );
    assert!(asked[0].contains("can you join?"), "{}", asked[0]);
    assert!(
        !asked[0].contains("hi from Bob"),
        "Bob is not an allowed sender: {}",
        asked[0]
    );

    // A reply quoting the bot counts as a mention.
    provider.push_reply(reply("Yes, see you."));
    fake.send_group_text(
        GROUP,
        ALICE,
        "3EB0E2G0004",
        "great, you too?",
        &[],
        Some(&own),
    )
    .await
    .expect("reply");
    eventually("the answer to the reply", || {
        fake.group_texts()
            .iter()
            .any(|(_, who, _, text)| who == ALICE && text == "Yes, see you.")
    })
    .await;
    assert_eq!(provider.requests().len(), 2);
    assert!(
        fake.sent_texts()
            .iter()
            .all(|(to, _, _)| !to.starts_with(ALICE)),
        "nothing went to Alice's DM"
    );

    // sendReadReceipts (default on): the accepted messages are marked read, naming their sender.
    let alice = format!("{ALICE}@s.whatsapp.net");
    eventually("read receipts for the answered messages", || {
        let receipts = fake.receipts();
        ["3EB0E2G0003", "3EB0E2G0004"].iter().all(|id| {
            receipts.iter().any(|r| {
                r.kind == "read"
                    && r.id == *id
                    && r.to == GROUP
                    && r.participant.as_deref() == Some(&alice)
            })
        })
    })
    .await;
    let read: Vec<String> = fake
        .receipts()
        .into_iter()
        .filter(|r| r.kind == "read")
        .map(|r| r.id)
        .collect();
    assert!(
        !read.iter().any(|id| id == "3EB0E2G0002"),
        "Bob's refused message is not marked read: {read:?}"
    );
    drop(gateway);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_undecryptable_group_messages_are_skipped_and_the_next_is_answered() {
    use whatsapp_rust::wacore_binary::builder::NodeBuilder;
    let fake = FakeWhatsApp::start().await;
    let provider = FakeOpenAi::start().await;
    let config = group_config(
        &provider,
        json!({ "groupPolicy": "open", "groups": { "*": { "requireMention": false } } }),
    );
    let mut gateway = linked_gateway(&fake, &config).await;
    let connections = fake.log().connections;
    fake.add_group(GROUP, &[ALICE]);
    let huge = "x".repeat(pincer::channels::whatsapp::channel::MAX_INBOUND_TEXT_CHARS + 1);
    fake.send_group_text(GROUP, ALICE, "3EB0E2B0001", &huge, &[], None)
        .await
        .expect("huge");
    let garbage = NodeBuilder::new("message")
        .attrs([
            ("from", GROUP.to_string()),
            ("participant", format!("{ALICE}@s.whatsapp.net")),
            ("type", "text".to_string()),
            ("id", "3EB0E2B0002".to_string()),
            ("t", "1750000100".to_string()),
        ])
        .children([NodeBuilder::new("enc")
            .attrs([("v", "2".to_string()), ("type", "skmsg".to_string())])
            .bytes(vec![0x33, 1, 2, 3])
            .build()])
        .build();
    fake.send_stanza(garbage).await.expect("garbage");
    provider.push_reply(reply("Still here."));
    fake.send_group_text(GROUP, ALICE, "3EB0E2B0003", "are you alive?", &[], None)
        .await
        .expect("text");
    eventually("the answer after the bad messages", || {
        fake.group_texts()
            .iter()
            .any(|(_, _, _, text)| text == "Still here.")
    })
    .await;
    let asked: Vec<String> = provider
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert_eq!(asked.len(), 1, "only the good message reached the model");
    assert!(
        !asked[0].contains("xxxxxxxx"),
        "the oversized one was dropped"
    );
    let status = whatsapp_status(&gateway).await;
    assert_eq!(status["connected"], true, "{status}");
    assert!(
        status["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("was skipped")),
        "{status}"
    );
    assert_eq!(
        fake.log().connections,
        connections,
        "the gateway's connection was never dropped"
    );
    assert!(gateway.alive());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_chat_is_answered_without_looping_and_receipts_and_groups_can_be_switched_off() {
    let fake = FakeWhatsApp::start().await;
    let provider = FakeOpenAi::start().await;
    let config = group_config(
        &provider,
        json!({ "allowFrom": [format!("+{ALICE}")], "sendReadReceipts": false,
                "groupPolicy": "disabled", "groups": { "*": {} } }),
    );
    let gateway = linked_gateway(&fake, &config).await;
    fake.add_group(GROUP, &[ALICE]);
    let own = fake.own_jid();

    // A DM answered, and not marked read (sendReadReceipts: false).
    provider.push_reply(reply("Hi Alice."));
    fake.send_dm(ALICE, "3EB0E2S0001", "hello")
        .await
        .expect("dm");
    let alice = format!("{ALICE}@s.whatsapp.net");
    eventually("the DM answer", || {
        fake.sent_texts()
            .iter()
            .any(|(to, _, text)| *to == alice && text == "Hi Alice.")
    })
    .await;
    // groupPolicy disabled: a mention in a group is not answered.
    fake.send_group_text(
        GROUP,
        ALICE,
        "3EB0E2S0002",
        "@bot there?",
        std::slice::from_ref(&own),
        None,
    )
    .await
    .expect("mention");
    // The owner writes in "message yourself": answered there (selfChatMode unset admits it).
    provider.push_reply(reply("Noted, owner."));
    fake.send_self_chat("3EB0E2S0003", "remind me to call mum")
        .await
        .expect("self chat");
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    let (answer_id, _) = loop {
        if let Some((_, id, text)) = fake
            .sent_texts()
            .into_iter()
            .find(|(to, _, text)| *to == own && text == "Noted, owner.")
        {
            break (id, text);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no self-chat answer; sent {:?}; unreadable {:?}; stderr:\n{}",
            fake.sent_texts(),
            fake.unreadable(),
            gateway.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The answer comes back to the device as the phone relays it: not a new message.
    fake.send_self_chat(&answer_id, "Noted, owner.")
        .await
        .expect("echo");
    provider.push_reply(reply("Bye Alice."));
    fake.send_dm(ALICE, "3EB0E2S0004", "bye").await.expect("dm");
    eventually("the second DM answer", || {
        fake.sent_texts()
            .iter()
            .any(|(to, _, text)| *to == alice && text == "Bye Alice.")
    })
    .await;
    let asked: Vec<String> = provider
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert_eq!(
        asked.len(),
        3,
        "the DM, the self chat, the second DM: no group, no echo: {asked:?}"
    );
    assert!(asked[1].contains("remind me to call mum"), "{}", asked[1]);
    assert!(
        fake.group_texts().is_empty(),
        "nothing sent to the disabled group"
    );
    let read: Vec<_> = fake
        .receipts()
        .into_iter()
        .filter(|r| r.kind == "read")
        .collect();
    assert!(read.is_empty(), "no read receipts when off: {read:?}");
    drop(gateway);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_chat_mode_false_ignores_the_owners_notes() {
    let fake = FakeWhatsApp::start().await;
    let provider = FakeOpenAi::start().await;
    let config = group_config(
        &provider,
        json!({ "allowFrom": [format!("+{ALICE}")], "selfChatMode": false }),
    );
    let gateway = linked_gateway(&fake, &config).await;
    fake.send_self_chat("3EB0E2F0001", "note to self")
        .await
        .expect("self chat");
    provider.push_reply(reply("Hi Alice."));
    fake.send_dm(ALICE, "3EB0E2F0002", "hello")
        .await
        .expect("dm");
    let alice = format!("{ALICE}@s.whatsapp.net");
    eventually("the DM answer", || {
        fake.sent_texts()
            .iter()
            .any(|(to, _, text)| *to == alice && text == "Hi Alice.")
    })
    .await;
    assert_eq!(provider.requests().len(), 1, "the self chat was ignored");
    assert!(
        !fake
            .sent_texts()
            .iter()
            .any(|(to, _, _)| *to == fake.own_jid()),
        "nothing answered in the self chat"
    );
    // Read receipts are on by default: the DM is marked read.
    eventually("the DM's read receipt", || {
        fake.receipts()
            .iter()
            .any(|r| r.kind == "read" && r.id == "3EB0E2F0002" && r.to.starts_with(ALICE))
    })
    .await;
    drop(gateway);
}

/// An image message from a contact for `enc`, stored on the CDN at `direct_path`.
fn image_message(
    enc: &cdn::EncryptedMedia,
    direct_path: &str,
    caption: &str,
) -> whatsapp_rust::waproto::whatsapp::Message {
    use whatsapp_rust::waproto::whatsapp as wa;
    wa::Message {
        image_message: whatsapp_rust::buffa::MessageField::some(wa::message::ImageMessage {
            url: Some(format!("https://{}{direct_path}", cdn::MEDIA_HOST)),
            direct_path: Some(direct_path.to_string()),
            mimetype: Some("image/jpeg".into()),
            caption: Some(caption.to_string()),
            media_key: Some(enc.media_key.to_vec()),
            file_sha256: Some(enc.file_sha256.to_vec()),
            file_enc_sha256: Some(enc.file_enc_sha256.to_vec()),
            file_length: Some(enc.file_length),
            media_key_timestamp: Some(1_750_000_000),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn photos_reach_the_model_and_media_replies_reach_the_contact_encrypted() {
    let fake = FakeWhatsApp::start().await;
    let media_cdn = FakeMediaCdn::start().await;
    let provider = FakeOpenAi::start().await;
    let config = json!({
        "models": { "providers": { "fake": {
            "baseUrl": provider.base_url(), "apiKey": "sk-test",
            "api": "openai-completions",
            "models": [{ "id": "gpt-test", "contextWindow": 128000, "input": ["text", "image"] }] } } },
        "agents": { "defaults": { "model": { "primary": "fake/gpt-test" } } },
        "session": { "dmScope": "per-channel-peer" },
        "channels": { "whatsapp": { "allowFrom": [format!("+{ALICE}")] } },
    })
    .to_string();
    let url = fake.url();
    let media_url = media_cdn.base_url();
    let env = [
        ("PINCER_WHATSAPP_WS_URL", url.as_str()),
        ("PINCER_WHATSAPP_VERSION", "2.3000.1023456789"),
        ("PINCER_WHATSAPP_MEDIA_URL", media_url.as_str()),
    ];
    let args = ["--port", "0", "--token", GATEWAY_TOKEN];
    let mut gateway =
        tokio::task::block_in_place(|| GatewayProcess::start_with_env(&config, &args, &env));
    tokio::task::block_in_place(|| gateway.terminate());
    link_in_store(&fake, &gateway.data_dir().join("store")).await;
    tokio::task::block_in_place(|| gateway.crash_and_restart_with_env(&config, &args, &env));
    wait_for_status(&gateway, "connected", |s| s["connected"] == true).await;
    assert!(
        gateway.stderr().contains("PINCER_WHATSAPP_MEDIA_URL"),
        "the test hook is never silent"
    );
    let workspace = gateway.data_dir().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let chart = media_files::jpeg(40, 30);
    std::fs::write(workspace.join("chart.jpg"), &chart).expect("chart");
    let voice = media_files::voice_note(2);
    std::fs::write(workspace.join("note.ogg"), &voice).expect("note");
    let to_alice = format!("{ALICE}@s.whatsapp.net");

    // A photo with a caption reaches the model as an image; the reply's file reaches Alice as an image
    // message she decrypts.
    provider.push_reply(FakeReply::Text {
        chunks: vec!["Here is the chart.\nMEDIA: ./chart.jpg".into()],
        delay_ms: 0,
    });
    let photo = media_files::jpeg(64, 48);
    let enc = cdn::encrypt(&photo, cdn::IMAGE_KEYS);
    media_cdn.put("/v/t62.7118-24/cat.enc", enc.blob.clone());
    fake.send_dm_message(
        ALICE,
        "3EB0E2EPHOTO1",
        image_message(&enc, "/v/t62.7118-24/cat.enc", "what is this?"),
    )
    .await
    .expect("photo");
    let sent_image = |fake: &FakeWhatsApp| {
        fake.sent_messages()
            .into_iter()
            .filter(|(to, _, _)| *to == to_alice)
            .find_map(|(_, _, m)| m.image_message.as_option().cloned())
    };
    eventually("an image message to Alice", || sent_image(&fake).is_some()).await;
    let image = sent_image(&fake).expect("image");
    assert_eq!(image.caption.as_deref(), Some("Here is the chart."));
    let opened = media_cdn
        .open(
            image.direct_path.as_deref().expect("direct path"),
            image.media_key.as_deref().expect("key"),
            image.file_enc_sha256.as_deref().expect("enc hash"),
            image.file_sha256.as_deref().expect("hash"),
            cdn::IMAGE_KEYS,
        )
        .expect("Alice decrypts the chart");
    assert_eq!(opened, chart);
    let images = provider.image_parts();
    assert_eq!(
        images.first(),
        Some(&("image/jpeg".to_string(), photo.clone())),
        "the photo reached the model"
    );
    let asked: Vec<String> = provider
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(asked[0].contains("what is this?"), "{}", asked[0]);

    // A voice-note reply goes out push-to-talk.
    provider.push_reply(FakeReply::Text {
        chunks: vec!["Listen:\nMEDIA: ./note.ogg\n[[audio_as_voice]]".into()],
        delay_ms: 0,
    });
    fake.send_dm(ALICE, "3EB0E2EVOICE1", "say it")
        .await
        .expect("dm");
    let sent_audio = |fake: &FakeWhatsApp| {
        fake.sent_messages()
            .into_iter()
            .filter(|(to, _, _)| *to == to_alice)
            .find_map(|(_, _, m)| m.audio_message.as_option().cloned())
    };
    eventually("a voice note to Alice", || sent_audio(&fake).is_some()).await;
    let audio = sent_audio(&fake).expect("audio");
    assert_eq!(audio.ptt, Some(true), "push-to-talk");
    assert_eq!(audio.mimetype.as_deref(), Some("audio/ogg; codecs=opus"));
    let opened = media_cdn
        .open(
            audio.direct_path.as_deref().expect("direct path"),
            audio.media_key.as_deref().expect("key"),
            audio.file_enc_sha256.as_deref().expect("enc hash"),
            audio.file_sha256.as_deref().expect("hash"),
            cdn::AUDIO_KEYS,
        )
        .expect("Alice decrypts the voice note");
    assert_eq!(opened, voice);

    // A photo that fails its MAC: Alice is told clearly; the next text is still answered.
    let mut broken = enc.blob.clone();
    let last = broken.len() - 1;
    broken[last] ^= 0xFF;
    media_cdn.put("/v/t62.7118-24/broken.enc", broken);
    provider.push_reply(FakeReply::Text {
        chunks: vec!["I could not see that one.".into()],
        delay_ms: 0,
    });
    fake.send_dm_message(
        ALICE,
        "3EB0E2EPHOTO2",
        image_message(&enc, "/v/t62.7118-24/broken.enc", "and this?"),
    )
    .await
    .expect("broken photo");
    eventually("Alice told about the broken photo", || {
        fake.sent_texts().iter().any(|(to, _, text)| {
            *to == to_alice && text.contains("not used") && text.contains("MAC mismatch")
        })
    })
    .await;
    provider.push_reply(FakeReply::Text {
        chunks: vec!["Still here.".into()],
        delay_ms: 0,
    });
    fake.send_dm(ALICE, "3EB0E2ETEXT9", "are you there?")
        .await
        .expect("dm");
    eventually("the next text answered", || {
        fake.sent_texts()
            .iter()
            .any(|(to, _, text)| *to == to_alice && text == "Still here.")
    })
    .await;
    assert!(media_cdn.refused().is_empty(), "{:?}", media_cdn.refused());
}
