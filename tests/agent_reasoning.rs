//! Reasoning visibility end to end. Through the tool loop: OpenAI-compatible
//! `reasoning_content` deltas and Anthropic thinking blocks are dropped when
//! the level is off, streamed as they arrive when `stream`, and delivered as
//! one block after the answer when `on`; thinking levels become OpenAI's
//! `reasoning_effort`. Through the real gateway: `sessions.patch
//! reasoningLevel` decides what a WebSocket client sees (`agent` events on
//! stream `thinking`, a separate `isReasoning` payload, or nothing at all).

mod support;

use pincer::agent::{ReasoningLevel, RunEvent};
use serde_json::{json, Value};
use support::agent_loop::{done_text, LoopHarness};
use support::fake_anthropic::{AnthropicReply, FakeAnthropic};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::{config_with_provider, GatewayProcess};
use support::ws_client::{Device, Read, TestClient};
use tokio_util::sync::CancellationToken;

const SECRET: &str = "secret-plan";

fn openai_config(fake: &FakeOpenAi, model: &str, thinking: &str) -> Value {
    json!({
        "models": {"providers": {"fake": {"baseUrl": fake.base_url(), "apiKey": "sk-test",
            "api": "openai-completions", "models": [{"id": model, "contextWindow": 128000}]}}},
        "agents": {"defaults": {"thinkingDefault": thinking,
            "model": {"primary": format!("fake/{model}")}}},
    })
}

fn reasoned() -> FakeReply {
    FakeReply::Reasoning {
        thinking: vec![format!("{SECRET} step one. "), "step two.".into()],
        chunks: vec!["The ".into(), "answer.".into()],
    }
}

/// What a run showed of its thinking, in event order: `d:<delta>` for
/// streamed deltas, `b:<text>` for the block, `a` for each answer delta.
fn trace(events: &[RunEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ReasoningDelta { delta, .. } => Some(format!("d:{delta}")),
            RunEvent::ReasoningBlock { text } => Some(format!("b:{text}")),
            RunEvent::Delta { .. } => Some("a".into()),
            _ => None,
        })
        .collect()
}

async fn openai_run(level: ReasoningLevel) -> (String, Vec<String>) {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(reasoned());
    let mut harness = LoopHarness::new(openai_config(&fake, "deepseek-reasoner", "off"));
    harness.reasoning = level;
    let (result, events) = harness
        .run(&harness.models(), "think", &CancellationToken::new())
        .await;
    (done_text(&result), trace(&events))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_reasoning_content_is_hidden_streamed_or_delivered_after_the_answer() {
    let (answer, off) = openai_run(ReasoningLevel::Off).await;
    assert_eq!(
        answer, "The answer.",
        "thinking is never part of the answer"
    );
    assert_eq!(off, vec!["a", "a"]);

    let (_, stream) = openai_run(ReasoningLevel::Stream).await;
    assert_eq!(
        stream,
        vec![
            format!("d:{SECRET} step one. "),
            "d:step two.".into(),
            "a".into(),
            "a".into()
        ]
    );

    let (answer, on) = openai_run(ReasoningLevel::On).await;
    assert_eq!(answer, "The answer.");
    assert_eq!(
        on,
        vec![
            "a".into(),
            "a".into(),
            format!("b:{SECRET} step one. step two.")
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_thinking_blocks_feed_the_same_visibility() {
    for (level, expected) in [
        (ReasoningLevel::Off, vec!["a"]),
        (ReasoningLevel::Stream, vec!["d:Let me think.", "a"]),
        (ReasoningLevel::On, vec!["a", "b:Let me think."]),
    ] {
        let fake = FakeAnthropic::start().await;
        fake.push_reply(AnthropicReply::Text(vec!["Hi".into()]));
        let mut harness = LoopHarness::new(json!({
            "models": {"providers": {"anthropic": {"baseUrl": fake.base_url(),
                "api": "anthropic-messages", "apiKey": "k", "models": [{"id": "claude-test"}]}}},
            "agents": {"defaults": {"thinkingDefault": "low",
                "model": {"primary": "anthropic/claude-test"}}},
        }));
        harness.reasoning = level;
        let (result, events) = harness
            .run(&harness.models(), "hi", &CancellationToken::new())
            .await;
        assert_eq!(done_text(&result), "Hi");
        assert_eq!(trace(&events), expected, "{level:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_levels_become_openai_reasoning_effort() {
    for (model, thinking, effort) in [
        ("gpt-5", "off", None),
        ("gpt-5", "minimal", Some("minimal")),
        ("gpt-5", "high", Some("high")),
        ("gpt-5", "xhigh", Some("high")),
        ("gpt-5.2", "xhigh", Some("xhigh")),
    ] {
        let fake = FakeOpenAi::start().await;
        fake.push_reply(FakeReply::Text {
            chunks: vec!["ok".into()],
            delay_ms: 0,
        });
        let harness = LoopHarness::new(openai_config(&fake, model, thinking));
        let (result, _) = harness
            .run(&harness.models(), "hi", &CancellationToken::new())
            .await;
        assert_eq!(done_text(&result), "ok");
        let sent = fake.requests()[0].body.get("reasoning_effort").cloned();
        assert_eq!(sent, effort.map(Value::from), "{model} at {thinking}");
    }
}

async fn connect(gateway: &GatewayProcess) -> TestClient {
    let device = Device::new(50);
    let (client, _) = TestClient::connect(
        &gateway.url(),
        Some("reasoning-token"),
        &["operator.read", "operator.write", "operator.admin"],
        Some(&device),
    )
    .await;
    client
}

/// Runs one `agent` turn; returns the final `res` and every frame before it.
async fn turn(client: &mut TestClient, key: &str) -> (Value, Vec<Value>) {
    let id = client
        .request("agent", json!({"message": "think", "idempotencyKey": key}))
        .await;
    let mut frames = Vec::new();
    loop {
        let Read::Frame(frame) = client.read().await else {
            panic!("closed during the run")
        };
        if frame["type"] == "res"
            && frame["id"] == id.as_str()
            && frame["payload"]["status"] != "accepted"
        {
            return (frame, frames);
        }
        frames.push(frame);
    }
}

async fn set_level(client: &mut TestClient, level: &str) {
    let res = client
        .call(
            "sessions.patch",
            json!({"key": "main", "reasoningLevel": level}),
        )
        .await;
    assert_eq!(res["ok"], true, "{res}");
}

fn thinking_events(frames: &[Value]) -> Vec<Value> {
    frames
        .iter()
        .filter(|f| f["event"] == "agent" && f["payload"]["stream"] == "thinking")
        .map(|f| f["payload"]["data"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_reasoning_level_decides_what_websocket_clients_see() {
    let fake = FakeOpenAi::start().await;
    for _ in 0..3 {
        fake.push_reply(reasoned());
    }
    let gateway = GatewayProcess::start(
        &config_with_provider(&fake.base_url()),
        &["--port", "0", "--token", "reasoning-token"],
    );
    let mut client = connect(&gateway).await;

    set_level(&mut client, "stream").await;
    let (res, frames) = turn(&mut client, "r-stream").await;
    assert_eq!(res["ok"], true, "{res}");
    let thinking = thinking_events(&frames);
    assert_eq!(thinking.len(), 2, "{thinking:?}");
    assert_eq!(thinking[1]["text"], format!("{SECRET} step one. step two."));
    assert_eq!(thinking[1]["delta"], "step two.");
    assert_eq!(
        res["payload"]["result"]["payloads"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );

    set_level(&mut client, "on").await;
    let (res, frames) = turn(&mut client, "r-on").await;
    let payloads = res["payload"]["result"]["payloads"]
        .as_array()
        .expect("payloads")
        .clone();
    assert_eq!(payloads.len(), 2, "{payloads:?}");
    assert_eq!(payloads[0]["text"], "The answer.");
    assert_eq!(payloads[1]["isReasoning"], true);
    assert_eq!(
        payloads[1]["text"],
        format!("Reasoning:\n_{SECRET} step one. step two._")
    );
    let final_chat = frames
        .iter()
        .find(|f| f["event"] == "chat" && f["payload"]["state"] == "final")
        .expect("chat final");
    assert_eq!(
        final_chat["payload"]["message"]["content"][1]["type"],
        "thinking"
    );

    set_level(&mut client, "off").await;
    let (res, frames) = turn(&mut client, "r-off").await;
    assert_eq!(
        res["payload"]["result"]["payloads"][0]["text"],
        "The answer."
    );
    let everything = format!("{res}{}", Value::Array(frames));
    assert!(
        !everything.contains(SECRET),
        "thinking never leaves the gateway when off"
    );
    let history = client
        .call("chat.history", json!({"sessionKey": "main"}))
        .await;
    assert_eq!(history["ok"], true, "{history}");
    assert!(history.to_string().contains("The answer."), "{history}");
    assert!(!history.to_string().contains(SECRET), "and is never stored");
}
