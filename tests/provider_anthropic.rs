//! The Anthropic Messages provider against the fake Anthropic server: a
//! multi-step tool-using turn through the tool loop (every request asking
//! for a stream), and an abort mid-stream that closes the connection.

mod support;

use pincer::agent::{LoopResult, RunEvent, RunStatus};
use serde_json::json;
use support::agent_loop::{done_text, LoopHarness};
use support::fake_anthropic::{AnthropicReply, FakeAnthropic};
use tokio_util::sync::CancellationToken;

fn harness(fake: &FakeAnthropic, thinking: &str) -> LoopHarness {
    LoopHarness::new(json!({
        "models": {"providers": {"anthropic": {
            "baseUrl": fake.base_url(), "api": "anthropic-messages", "apiKey": "sk-ant-1",
            "models": [{"id": "claude-test", "contextWindow": 200000, "maxTokens": 2048}]}}},
        "agents": {"defaults": {"model": {"primary": "anthropic/claude-test"}, "thinkingDefault": thinking}}
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_using_turn_reads_the_file_and_answers() {
    let fake = FakeAnthropic::start().await;
    fake.push_reply(AnthropicReply::ToolUse(vec![(
        "toolu_1".into(),
        "read".into(),
        json!({"path": "todo.md"}),
    )]));
    fake.push_reply(AnthropicReply::Text(vec![
        "You must ".into(),
        "buy milk.".into(),
    ]));
    let harness = harness(&fake, "medium");
    std::fs::write(harness.env.workspace.join("todo.md"), "- buy milk\n").expect("todo");
    let cancel = CancellationToken::new();
    let (result, events) = harness
        .run(&harness.models(), "what is on my list?", &cancel)
        .await;
    assert_eq!(done_text(&result), "You must buy milk.");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].headers["x-api-key"], "sk-ant-1");
    assert_eq!(requests[0].headers["anthropic-version"], "2023-06-01");
    // The fake streams only when asked, as Anthropic does: pincer asks.
    assert!(
        requests.iter().all(|r| r.body["stream"] == true),
        "every Messages request streams"
    );
    assert_eq!(requests[0].body["system"], "You are a test.");
    assert_eq!(requests[0].body["thinking"]["budget_tokens"], 8192);
    assert!(requests[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .any(|t| t["name"] == "read"));
    let turns = requests[1].body["messages"].as_array().expect("messages");
    assert_eq!(turns[1]["content"][0]["type"], "tool_use");
    let result_block = &turns[2]["content"][0];
    assert_eq!(result_block["type"], "tool_result");
    assert_eq!(result_block["tool_use_id"], "toolu_1");
    assert!(result_block["content"]
        .as_str()
        .expect("text")
        .contains("buy milk"));
    // Thinking text is never streamed as reply text.
    let deltas: String = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::Delta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "You must buy milk.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_mid_stream_stops_the_run_and_closes_the_connection() {
    let fake = FakeAnthropic::start().await;
    fake.push_reply(AnthropicReply::Hang("Once upon".into()));
    let harness = harness(&fake, "off");
    let cancel = CancellationToken::new();
    let models = harness.models();
    let abort_on_first_delta = |event: &RunEvent| {
        if matches!(event, RunEvent::Delta { .. }) {
            cancel.cancel();
        }
    };
    let run = harness.run_watching(&models, "tell a story", &cancel, abort_on_first_delta);
    let disconnected = async {
        fake.wait_for_disconnects(1).await;
    };
    let ((result, _), ()) = tokio::join!(run, disconnected);
    match result {
        LoopResult::Stopped { partial, status } => {
            assert_eq!(status, RunStatus::Aborted);
            assert_eq!(partial, "Once upon");
        }
        _ => panic!("expected an aborted run"),
    }
    assert_eq!(fake.requests().len(), 1, "an aborted call is not retried");
}

/// The fake answers a request without `"stream": true` with one JSON
/// message, as Anthropic does: pincer reads SSE, so it must ask for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_requests_ask_for_a_stream() {
    let fake = FakeAnthropic::start().await;
    fake.push_reply(AnthropicReply::Text(vec!["Hello ".into(), "there.".into()]));
    let harness = harness(&fake, "off");
    let cancel = CancellationToken::new();
    let (result, _) = harness.run(&harness.models(), "hi", &cancel).await;
    assert_eq!(done_text(&result), "Hello there.");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["stream"], true);
}

/// `models.providers.*.authHeader: true`: the key goes out as
/// `Authorization: Bearer`, not `x-api-key` (for proxies that forward only
/// the Authorization header).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_header_sends_the_key_as_authorization_bearer() {
    let fake = FakeAnthropic::start().await;
    fake.push_reply(AnthropicReply::Text(vec!["hi".into()]));
    let harness = LoopHarness::new(json!({
        "models": {"providers": {"anthropic": {
            "baseUrl": fake.base_url(), "api": "anthropic-messages", "apiKey": "sk-ant-1",
            "authHeader": true,
            "models": [{"id": "claude-test", "contextWindow": 200000, "maxTokens": 2048}]}}},
        "agents": {"defaults": {"model": {"primary": "anthropic/claude-test"}}}
    }));
    let cancel = CancellationToken::new();
    let (result, _) = harness.run(&harness.models(), "hello", &cancel).await;
    assert_eq!(done_text(&result), "hi");
    let requests = fake.requests();
    assert_eq!(requests[0].headers["authorization"], "Bearer sk-ant-1");
    assert!(
        !requests[0].headers.contains_key("x-api-key"),
        "{:?}",
        requests[0].headers
    );
}
