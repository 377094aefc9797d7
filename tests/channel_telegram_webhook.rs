//! Webhook mode of the Telegram adapter against the fake Bot API, with the
//! test playing Telegram's side of the webhook: registration with
//! `setWebhook`, the secret header, 503 until the sink accepts, the body
//! cap, a missing secret, and switching back to polling.

mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use pincer::channels::Channel;
use serde_json::{json, Value};
use support::telegram_harness::*;

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

fn webhook_config(port: u16, secret: Option<&str>) -> Value {
    let mut config = json!({
        "webhookUrl": "https://bot.example.net/tg",
        "webhookHost": "127.0.0.1",
        "webhookPort": port,
        "webhookPath": "/tg-hook",
    });
    if let Some(secret) = secret {
        config["webhookSecret"] = json!(secret);
    }
    config
}

fn webhook_update(update_id: i64, text: &str) -> Value {
    let mut message = dm(text);
    message["message_id"] = json!(update_id - 8000);
    message["date"] = json!(1_767_000_000);
    json!({ "update_id": update_id, "message": message })
}

async fn post_update(port: u16, path: &str, secret: Option<&str>, update: &Value) -> u16 {
    let mut request = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}{path}"))
        .json(update);
    if let Some(secret) = secret {
        request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
    }
    request
        .send()
        .await
        .expect("webhook answers")
        .status()
        .as_u16()
}

#[tokio::test]
async fn webhook_mode_registers_with_telegram_and_accepts_only_posts_bearing_the_secret() {
    let h = Harness::new().await;
    let store = h.store();
    let port = free_port();
    let secret = "s3cret-Token_1";
    let channel = h.channel(&store, webhook_config(port, Some(secret)));
    let sink = Arc::new(RecordingSink::default());
    channel.start(sink.clone()).await.expect("start");
    let registered = h.fake.wait_for_calls("setWebhook", 1).await;
    let body = &registered[0].body;
    assert_eq!(body["url"], json!("https://bot.example.net/tg"));
    assert_eq!(body["secret_token"], json!(secret));
    assert!(body["allowed_updates"]
        .as_array()
        .is_some_and(|a| a.contains(&json!("message"))));
    assert_eq!(
        h.fake.webhook_url().as_deref(),
        Some("https://bot.example.net/tg")
    );
    wait_for_status(&channel, "connected", |s| s.connected).await;

    let update = webhook_update(9001, "via webhook");
    assert_eq!(post_update(port, "/tg-hook", None, &update).await, 401);
    assert_eq!(
        post_update(port, "/tg-hook", Some("guess"), &update).await,
        401
    );
    assert_eq!(
        post_update(port, "/elsewhere", Some(secret), &update).await,
        404
    );
    assert!(sink.events().is_empty());
    assert_eq!(
        post_update(port, "/tg-hook", Some(secret), &update).await,
        200
    );
    channel.stop().await;

    assert_eq!(sink.bodies(), ["via webhook"]);
    assert!(
        h.fake.calls_of("getUpdates").is_empty(),
        "webhook mode never polls"
    );
    assert_eq!(store.telegram_offset("default").expect("offset"), None);
}

#[tokio::test]
async fn a_webhook_update_the_sink_refuses_gets_503_so_telegram_delivers_it_again() {
    let h = Harness::new().await;
    let store = h.store();
    let port = free_port();
    let channel = h.channel(&store, webhook_config(port, Some("abc")));
    let sink = RecordingSink::refusing(1);
    channel.start(sink.clone()).await.expect("start");
    h.fake.wait_for_calls("setWebhook", 1).await;
    let update = webhook_update(9002, "retry me");
    assert_eq!(
        post_update(port, "/tg-hook", Some("abc"), &update).await,
        503
    );
    assert_eq!(
        post_update(port, "/tg-hook", Some("abc"), &update).await,
        200
    );
    channel.stop().await;
    assert_eq!(sink.refused.load(Ordering::SeqCst), 1);
    assert_eq!(sink.bodies(), ["retry me"]);
}

#[tokio::test]
async fn webhook_mode_without_a_secret_is_refused_with_a_clear_status() {
    let h = Harness::new().await;
    let store = h.store();
    let channel = h.channel(&store, webhook_config(free_port(), None));
    channel
        .start(Arc::new(RecordingSink::default()))
        .await
        .expect("start");
    let status = wait_for_status(&channel, "the missing secret", |s| s.last_error.is_some()).await;
    channel.stop().await;
    assert!(status
        .last_error
        .is_some_and(|e| e.contains("webhookSecret")));
    assert!(h.fake.calls_of("setWebhook").is_empty());
    assert!(h.fake.calls_of("getUpdates").is_empty());
}

#[tokio::test]
async fn polling_after_webhook_mode_removes_the_webhook_and_keeps_queued_updates() {
    let h = Harness::new().await;
    let store = h.store();
    let port = free_port();
    let webhook = h.channel(&store, webhook_config(port, Some("abc")));
    webhook
        .start(Arc::new(RecordingSink::default()))
        .await
        .expect("start webhook");
    h.fake.wait_for_calls("setWebhook", 1).await;
    webhook.stop().await;
    h.fake.push_message(dm("queued while switching"));
    let polling = h.channel(&store, json!({}));
    let sink = Arc::new(RecordingSink::default());
    polling.start(sink.clone()).await.expect("start polling");
    sink.wait_for_events(1).await;
    let status = polling.status();
    polling.stop().await;
    assert_eq!(sink.bodies(), ["queued while switching"]);
    let removed = h.fake.calls_of("deleteWebhook");
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0].body["drop_pending_updates"], json!(false));
    assert!(h.fake.webhook_url().is_none());
    let error = status[0]
        .last_error
        .clone()
        .expect("the conflict is on record");
    assert!(
        error.contains("409") && error.contains("webhook is active"),
        "{error}"
    );
}

#[tokio::test]
async fn webhook_bodies_over_one_mebibyte_are_refused_unread() {
    let h = Harness::new().await;
    let store = h.store();
    let port = free_port();
    let channel = h.channel(&store, webhook_config(port, Some("abc")));
    let sink = Arc::new(RecordingSink::default());
    channel.start(sink.clone()).await.expect("start");
    h.fake.wait_for_calls("setWebhook", 1).await;
    let mut update = webhook_update(9003, "big");
    update["message"]["text"] = json!("x".repeat(1024 * 1024 + 1));
    assert_eq!(
        post_update(port, "/tg-hook", Some("abc"), &update).await,
        413
    );
    channel.stop().await;
    assert!(sink.events().is_empty());
}
