//! The whole message path in the real binary: the fake Telegram Bot API
//! delivers a DM through long polling, the Telegram adapter hands it to the
//! hub, the pipeline admits (or pairs) the sender, the queue runs the turn
//! against the fake OpenAI server, and the answer comes back as a
//! `sendMessage` call — with streaming previews as `editMessageText`.

mod support;

use serde_json::Value;
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::fake_telegram::FakeTelegram;
use support::gateway::GatewayProcess;
use support::telegram_harness::{dm, BOT_ID, BOT_USERNAME, TOKEN};

const GATEWAY_TOKEN: &str = "telegram-e2e-token";

fn start(fake: &FakeOpenAi, telegram: &FakeTelegram, keys: &str) -> GatewayProcess {
    let config = format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
                                   models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }} }} }},
  channels: {{ telegram: {{ botToken: "{TOKEN}", apiRoot: "{}", {keys} }} }},
}}"#,
        fake.base_url(),
        telegram.api_root()
    );
    GatewayProcess::start(&config, &["--port", "0", "--token", GATEWAY_TOKEN])
}

fn text_of(call: &Value) -> String {
    call["text"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn unpaired_telegram_dm_gets_a_pairing_code_and_no_run() {
    let fake = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let _gateway = start(&fake, &telegram, r#"streaming: "off""#);
    telegram.push_message(dm("hello, who are you?"));
    let sent = telegram.wait_for_calls("sendMessage", 1).await;
    let text = text_of(&sent[0].body);
    assert!(text.contains("Pairing code:"), "{text}");
    assert_eq!(sent[0].body["chat_id"].to_string().trim_matches('"'), "7");
    assert!(
        fake.requests().is_empty(),
        "an unpaired sender never reaches the model"
    );
}

#[tokio::test]
async fn allowed_telegram_dm_is_answered_through_the_gateway() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Hello ".into(), "Ann!".into()],
        delay_ms: 5,
    });
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let _gateway = start(&fake, &telegram, r#"allowFrom: [7], streaming: "off""#);
    telegram.push_message(dm("hi there"));
    let sent = telegram.wait_for_calls("sendMessage", 1).await;
    assert_eq!(text_of(&sent[0].body), "Hello Ann!");
    let request = &fake.requests()[0].body;
    let asked = request["messages"].to_string();
    assert!(asked.contains("hi there"), "{asked}");
    assert!(
        !telegram.calls_of("sendChatAction").is_empty(),
        "typing was shown"
    );
}

#[tokio::test]
async fn telegram_streaming_preview_is_edited_to_the_final_text() {
    let fake = FakeOpenAi::start().await;
    let pieces: Vec<String> = (1..=6)
        .map(|i| format!("Part {i} of a longer streamed answer. "))
        .collect();
    let full = pieces.concat();
    fake.push_reply(FakeReply::Text {
        chunks: pieces,
        delay_ms: 400,
    });
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let _gateway = start(&fake, &telegram, r#"allowFrom: [7], streaming: "partial""#);
    telegram.push_message(dm("tell me a long story"));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let edits = telegram.calls_of("editMessageText");
        if edits
            .last()
            .is_some_and(|e| text_of(&e.body) == full.trim_end())
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "final edit never came: {edits:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let sends = telegram.calls_of("sendMessage");
    assert_eq!(sends.len(), 1, "one preview message: {sends:?}");
    assert!(text_of(&sends[0].body).len() < full.len());
}

#[tokio::test]
async fn telegram_429_is_retried_after_the_requested_delay() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Worth the wait.".into()],
        delay_ms: 0,
    });
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let _gateway = start(&fake, &telegram, r#"allowFrom: [7], streaming: "off""#);
    telegram.fail_next(
        "sendMessage",
        support::fake_telegram::Failure::RateLimited {
            retry_after_secs: 1,
        },
    );
    telegram.push_message(dm("anything new?"));
    let first = telegram.wait_for_calls("sendMessage", 1).await;
    let refused_at = std::time::Instant::now();
    assert_eq!(text_of(&first[0].body), "Worth the wait.");
    let sent = telegram.wait_for_calls("sendMessage", 2).await;
    assert!(
        refused_at.elapsed() >= std::time::Duration::from_millis(900),
        "the retry waited for retry_after"
    );
    assert_eq!(text_of(&sent[1].body), "Worth the wait.");
}

#[tokio::test]
async fn a_heartbeat_alert_reaches_the_chat_the_user_last_wrote_from() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Noted.".into()],
        delay_ms: 0,
    });
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Reminder: the boiler service is today.".into()],
        delay_ms: 0,
    });
    let telegram = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
    let gateway = start(&fake, &telegram, r#"allowFrom: [7], streaming: "off""#);
    telegram.push_message(dm("remind me about the boiler"));
    let first = telegram.wait_for_calls("sendMessage", 1).await;
    assert_eq!(text_of(&first[0].body), "Noted.");

    // The turn has recorded the DM as the main session's last route; a
    // heartbeat with a message that is not HEARTBEAT_OK goes there.
    let (mut client, _) = support::ws_client::TestClient::connect(
        &gateway.url(),
        Some(GATEWAY_TOKEN),
        &["operator.read", "operator.write", "operator.admin"],
        None,
    )
    .await;
    let mut recorded = false;
    for _ in 0..100 {
        let list = client.call("sessions.list", serde_json::json!({})).await;
        let sessions = list["payload"]["sessions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if sessions
            .iter()
            .any(|s| s["lastTo"] == "7" && s["lastChannel"] == "telegram")
        {
            recorded = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        recorded,
        "the DM's route was never recorded: {}",
        gateway.stderr()
    );
    let res = client
        .call(
            "wake",
            serde_json::json!({"mode": "now", "text": "check the calendar"}),
        )
        .await;
    assert_eq!(res["ok"], true, "{res}");
    let sent = telegram.wait_for_calls("sendMessage", 2).await;
    assert_eq!(
        text_of(&sent[1].body),
        "Reminder: the boiler service is today.",
        "{}",
        gateway.stderr()
    );
    assert_eq!(sent[1].body["chat_id"].to_string().trim_matches('"'), "7");
}
