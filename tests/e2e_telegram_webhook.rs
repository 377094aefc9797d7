//! Telegram webhook mode on the gateway's own port, through the real
//! `pincer gateway` process: with `webhookUrl` and no `webhookHost` /
//! `webhookPort`, `POST /telegram-webhook` (upstream's default path) on the
//! gateway port is the account's webhook — registered with Telegram, an
//! update with the right secret accepted (200) and answered, a wrong or
//! missing secret refused (401) and never answered; a `webhookPath` that is
//! one of the gateway's own routes refuses the channel's start by name.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::fake_telegram::FakeTelegram;
use support::gateway::GatewayProcess;
use support::telegram_harness::{dm, BOT_ID, BOT_USERNAME, TOKEN};

/// Hang guard for waits (never a timing claim).
const WAIT_GUARD: Duration = Duration::from_secs(30);
const SECRET: &str = "hook-secret-1";
const GATEWAY_TOKEN: &str = "e2e-webhook-operator-token";

fn config(telegram: &FakeTelegram, provider: &FakeOpenAi, extra: Value) -> String {
    let mut channel = json!({
        "botToken": TOKEN, "apiRoot": telegram.api_root(),
        "webhookUrl": "https://bot.example.net/telegram-webhook", "webhookSecret": SECRET,
        "streaming": "off", "dmPolicy": "open", "allowFrom": ["*"],
    });
    if let (Some(base), Value::Object(extra)) = (channel.as_object_mut(), extra) {
        base.extend(extra);
    }
    json!({
        "models": { "providers": { "fake": {
            "baseUrl": provider.base_url(), "apiKey": "sk-test", "api": "openai-completions",
            "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
        "agents": { "defaults": { "model": { "primary": "fake/gpt-test" } } },
        "channels": { "telegram": channel },
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

fn update(update_id: i64, text: &str) -> Value {
    let mut message = dm(text);
    message["message_id"] = json!(update_id - 8000);
    message["date"] = json!(1_767_000_000);
    json!({ "update_id": update_id, "message": message })
}

async fn post(gateway: &GatewayProcess, secret: Option<&str>, body: &Value) -> u16 {
    let mut request = reqwest::Client::new()
        .post(gateway.http("/telegram-webhook"))
        .json(body);
    if let Some(secret) = secret {
        request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
    }
    request.send().await.expect("answer").status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_on_the_gateway_port_accepts_the_secret_and_refuses_others() {
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let provider = FakeOpenAi::start().await;
    let config = config(&telegram, &provider, json!({}));
    let gateway = tokio::task::block_in_place(|| {
        GatewayProcess::start(&config, &["--port", "0", "--token", GATEWAY_TOKEN])
    });
    eventually("the webhook registered", || {
        telegram.webhook_url().is_some()
    })
    .await;
    assert_eq!(
        telegram.webhook_url().as_deref(),
        Some("https://bot.example.net/telegram-webhook")
    );

    let refused = post(&gateway, Some("wrong"), &update(9001, "intruder")).await;
    assert_eq!(refused, 401);
    assert_eq!(post(&gateway, None, &update(9002, "intruder")).await, 401);

    provider.push_reply(FakeReply::Text {
        chunks: vec!["Hello over the webhook.".into()],
        delay_ms: 0,
    });
    // Until the bot is identified the route answers 503 (Telegram retries).
    let mut status = post(&gateway, Some(SECRET), &update(9003, "via webhook")).await;
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    while status == 503 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        status = post(&gateway, Some(SECRET), &update(9003, "via webhook")).await;
    }
    assert_eq!(status, 200);
    eventually("the answer sent", || {
        !telegram.calls_of("sendMessage").is_empty()
    })
    .await;
    let sent = telegram.calls_of("sendMessage");
    assert_eq!(sent[0].body["text"], "Hello over the webhook.");
    let asked: Vec<String> = provider
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert_eq!(asked.len(), 1, "only the update with the secret ran");
    assert!(asked[0].contains("via webhook"));
    assert!(!asked[0].contains("intruder"));
    assert!(
        telegram.calls_of("getUpdates").is_empty(),
        "webhook mode never polls"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_path_of_the_gateway_itself_refuses_the_channel_start() {
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let provider = FakeOpenAi::start().await;
    let config = config(&telegram, &provider, json!({"webhookPath": "/health"}));
    let gateway = tokio::task::block_in_place(|| {
        GatewayProcess::start(&config, &["--port", "0", "--token", GATEWAY_TOKEN])
    });
    eventually("the refusal logged", || {
        gateway
            .stderr()
            .contains("HTTP path /health is one of the gateway's own routes")
    })
    .await;
    let health = reqwest::get(gateway.http("/health")).await.expect("health");
    assert_eq!(health.status().as_u16(), 200);
    assert!(telegram.webhook_url().is_none());
}
