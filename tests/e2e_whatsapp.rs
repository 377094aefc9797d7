//! WhatsApp end to end: the real `pincer gateway` process (built with the
//! `whatsapp` feature, its chat socket pointed at the socket-level fake
//! server `tests/support/fake_whatsapp.rs` through `PINCER_WHATSAPP_WS_URL`)
//! answers through the fake OpenAI provider. Proves: an unlinked device
//! shows `waitingForScan` in `channels.status`; once linked (in the
//! gateway's own store) it shows connected with its number; an allowed DM
//! is answered through the model, end-to-end encrypted; an unknown sender
//! gets a pairing code and never reaches the model; a device removed on the
//! phone shows `loggedOut`. Media (the CDN of `fake_whatsapp_media.rs`,
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
