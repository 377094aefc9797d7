//! Failover through the tool loop against the provider fakes: 429 with
//! `retry-after` then success (backoff recorded, not slept), a refused key
//! rotating to the next auth profile, fallback to the next model, a rejected
//! thinking level lowered, a context overflow stopping without fallback, and
//! no retry once text reached the user.

mod support;

use std::time::Duration;

use pincer::agent::LoopResult;
use serde_json::{json, Value};
use support::agent_loop::{done_text, LoopHarness};
use support::fake_anthropic::{AnthropicReply, FakeAnthropic};
use support::fake_ollama::{FakeOllama, OllamaReply};
use tokio_util::sync::CancellationToken;

/// Anthropic (two keys) as primary, Ollama as fallback.
fn config(anthropic: &FakeAnthropic, ollama: &FakeOllama, thinking: &str) -> Value {
    json!({
        "models": {"providers": {
            "anthropic": {"baseUrl": anthropic.base_url(), "api": "anthropic-messages",
                "apiKey": "key-one", "authProfiles": [{"id": "anthropic:second", "apiKey": "key-two"}],
                "models": [{"id": "claude-test"}]},
            "ollama": {"baseUrl": ollama.base_url(), "api": "ollama", "models": [{"id": "qwen3:4b"}]}}},
        "agents": {"defaults": {"thinkingDefault": thinking, "model": {
            "primary": "anthropic/claude-test", "fallbacks": ["ollama/qwen3:4b"]}}}
    })
}

fn error(status: u16, kind: &str, message: &str, retry_after_secs: Option<u64>) -> AnthropicReply {
    AnthropicReply::Error {
        status,
        kind: kind.into(),
        message: message.into(),
        retry_after_secs,
    }
}

async fn setup(thinking: &str) -> (FakeAnthropic, FakeOllama, LoopHarness) {
    let anthropic = FakeAnthropic::start().await;
    let ollama = FakeOllama::start().await;
    let harness = LoopHarness::new(config(&anthropic, &ollama, thinking));
    (anthropic, ollama, harness)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_waits_for_retry_after_then_succeeds() {
    let (anthropic, ollama, harness) = setup("off").await;
    anthropic.push_reply(error(429, "rate_limit_error", "slow down", Some(7)));
    anthropic.push_reply(AnthropicReply::Text(vec!["done".into()]));
    let (result, _) = harness
        .run(&harness.models(), "hi", &CancellationToken::new())
        .await;
    assert_eq!(done_text(&result), "done");
    let delays = harness.sleeper.delays.lock().expect("lock").clone();
    assert_eq!(delays.len(), 1);
    assert!(delays[0] >= Duration::from_secs(7), "{delays:?}");
    assert!(delays[0] <= Duration::from_millis(7_700), "{delays:?}");
    let requests = anthropic.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].headers["x-api-key"], "key-one");
    assert!(ollama.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_key_rotates_to_the_second_auth_profile() {
    let (anthropic, ollama, harness) = setup("off").await;
    anthropic.push_reply(error(
        401,
        "authentication_error",
        "invalid x-api-key",
        None,
    ));
    anthropic.push_reply(AnthropicReply::Text(vec!["hello".into()]));
    let (result, _) = harness
        .run(&harness.models(), "hi", &CancellationToken::new())
        .await;
    assert_eq!(done_text(&result), "hello");
    let keys: Vec<String> = anthropic
        .requests()
        .iter()
        .map(|r| r.headers["x-api-key"].clone())
        .collect();
    assert_eq!(keys, vec!["key-one", "key-two"]);
    assert!(
        harness.sleeper.delays.lock().expect("lock").is_empty(),
        "auth errors do not back off"
    );
    assert!(ollama.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_keys_fall_back_to_the_next_model() {
    let (anthropic, ollama, harness) = setup("off").await;
    anthropic.push_reply(error(
        401,
        "authentication_error",
        "invalid x-api-key",
        None,
    ));
    anthropic.push_reply(error(403, "permission_error", "no access", None));
    ollama.push_reply(OllamaReply::Text(vec!["from ollama".into()]));
    let (result, _) = harness
        .run(&harness.models(), "hi", &CancellationToken::new())
        .await;
    assert_eq!(done_text(&result), "from ollama");
    match &result {
        LoopResult::Done { model, .. } => assert_eq!(model.provider_id, "ollama"),
        _ => unreachable!("done_text passed"),
    }
    assert_eq!(anthropic.requests().len(), 2);
    assert_eq!(ollama.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_model_is_retried_with_growing_backoff_then_left() {
    let (anthropic, ollama, harness) = setup("off").await;
    for _ in 0..3 {
        anthropic.push_reply(error(529, "overloaded_error", "Overloaded", None));
    }
    let (result, _) = harness
        .run(&harness.models(), "ping", &CancellationToken::new())
        .await;
    assert_eq!(done_text(&result), "echo: ping");
    let delays = harness.sleeper.delays.lock().expect("lock").clone();
    assert_eq!(delays.len(), 2, "three attempts, two waits");
    assert!(delays[1] > delays[0], "{delays:?}");
    assert_eq!(anthropic.requests().len(), 3);
    assert_eq!(ollama.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_thinking_level_is_lowered_and_retried() {
    let (anthropic, ollama, harness) = setup("high").await;
    anthropic.push_reply(error(
        400,
        "invalid_request_error",
        "thinking.budget_tokens: must be at most 8192",
        None,
    ));
    anthropic.push_reply(AnthropicReply::Text(vec!["ok".into()]));
    let (result, _) = harness
        .run(&harness.models(), "hi", &CancellationToken::new())
        .await;
    assert_eq!(done_text(&result), "ok");
    let budgets: Vec<Value> = anthropic
        .requests()
        .iter()
        .map(|r| r.body["thinking"]["budget_tokens"].clone())
        .collect();
    assert_eq!(budgets, vec![json!(16384), json!(8192)]);
    assert!(ollama.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_overflow_stops_without_trying_the_fallback() {
    let (anthropic, ollama, harness) = setup("off").await;
    anthropic.push_reply(error(
        400,
        "invalid_request_error",
        "prompt is too long: 250000 tokens > 200000 maximum",
        None,
    ));
    let (result, _) = harness
        .run(&harness.models(), "hi", &CancellationToken::new())
        .await;
    match result {
        LoopResult::Failed { message, .. } => {
            assert!(message.starts_with("context overflow:"), "{message}")
        }
        _ => panic!("expected a context overflow failure"),
    }
    assert_eq!(anthropic.requests().len(), 1);
    assert!(ollama.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_retry_or_fallback_after_text_reached_the_user() {
    let (anthropic, ollama, harness) = setup("off").await;
    anthropic.push_reply(AnthropicReply::TextThenError {
        text: "Half an ans".into(),
        kind: "overloaded_error".into(),
    });
    let (result, _) = harness
        .run(&harness.models(), "hi", &CancellationToken::new())
        .await;
    match result {
        LoopResult::Failed { partial, .. } => assert_eq!(partial, "Half an ans"),
        _ => panic!("expected the run to fail"),
    }
    assert_eq!(anthropic.requests().len(), 1);
    assert!(ollama.requests().is_empty());
    assert!(harness.sleeper.delays.lock().expect("lock").is_empty());
}
