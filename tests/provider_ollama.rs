//! The Ollama native provider against the fake Ollama server: a multi-step
//! tool-using turn through the tool loop, and an abort mid-stream that closes
//! the connection.

mod support;

use pincer::agent::{LoopResult, RunEvent, RunStatus};
use serde_json::json;
use support::agent_loop::{done_text, LoopHarness};
use support::fake_ollama::{FakeOllama, OllamaReply};
use tokio_util::sync::CancellationToken;

fn harness(fake: &FakeOllama, thinking: &str) -> LoopHarness {
    LoopHarness::new(json!({
        "models": {"providers": {"ollama": {
            "baseUrl": fake.base_url(), "api": "ollama",
            "models": [{"id": "qwen3:4b", "contextWindow": 32768}]}}},
        "agents": {"defaults": {"model": {"primary": "ollama/qwen3:4b"}, "thinkingDefault": thinking}}
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_using_turn_reads_the_file_and_answers() {
    let fake = FakeOllama::start().await;
    fake.push_reply(OllamaReply::ToolCalls(vec![(
        "read".into(),
        json!({"path": "todo.md"}),
    )]));
    fake.push_reply(OllamaReply::Text(vec!["Buy ".into(), "milk.".into()]));
    let harness = harness(&fake, "low");
    std::fs::write(harness.env.workspace.join("todo.md"), "- buy milk\n").expect("todo");
    let cancel = CancellationToken::new();
    let (result, _) = harness
        .run(&harness.models(), "what is on my list?", &cancel)
        .await;
    assert_eq!(done_text(&result), "Buy milk.");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body["stream"], true);
    assert_eq!(requests[0].body["think"], true);
    assert_eq!(requests[0].body["tools"][0]["type"], "function");
    let messages = requests[1].body["messages"].as_array().expect("messages");
    let call = &messages[2]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "read");
    assert_eq!(call["arguments"]["path"], "todo.md");
    assert_eq!(messages[3]["role"], "tool");
    assert_eq!(messages[3]["tool_name"], "read");
    assert!(messages[3]["content"]
        .as_str()
        .expect("text")
        .contains("buy milk"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_mid_stream_stops_the_run_and_closes_the_connection() {
    let fake = FakeOllama::start().await;
    fake.push_reply(OllamaReply::Hang("Once".into()));
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
            assert_eq!(partial, "Once");
        }
        _ => panic!("expected an aborted run"),
    }
    assert!(fake.requests()[0].body.get("think").is_none());
}
