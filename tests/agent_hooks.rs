//! Tool hooks through the tool loop against the fake OpenAI server: hooks run
//! in registration order, a rewrite changes what the tool runs with, a block
//! becomes the call's error result for the model (the tool never runs), and
//! the standard loop-detection hook stops a repeated call. Also: a Gemini
//! model behind an OpenAI-compatible endpoint gets cleaned tool schemas.

mod support;

use std::sync::{Arc, Mutex};

use pincer::tools::hooks::{BeforeDecision, CallOutcome, HookCall, ToolHook, ToolHooks};
use serde_json::{json, Value};
use support::agent_loop::{done_text, LoopHarness};
use support::fake_openai::{FakeOpenAi, FakeReply};
use tokio_util::sync::CancellationToken;

fn config(fake: &FakeOpenAi, model: &str, extra_tools: Value) -> Value {
    json!({
        "models": {"providers": {"fake": {"baseUrl": fake.base_url(), "apiKey": "sk-test",
            "api": "openai-completions", "models": [{"id": model, "contextWindow": 128000}]}}},
        "agents": {"defaults": {"model": {"primary": format!("fake/{model}")}}},
        "tools": extra_tools,
    })
}

fn read_call(id: &str, path: &str) -> FakeReply {
    FakeReply::ToolCalls {
        calls: vec![(id.into(), "read".into(), json!({"path": path}).to_string())],
    }
}

fn answer(text: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![text.into()],
        delay_ms: 0,
    }
}

/// Records what it saw into a shared log; optionally rewrites or blocks.
struct Recorder {
    label: &'static str,
    log: Arc<Mutex<Vec<String>>>,
    decide: fn(&Value) -> BeforeDecision,
}

impl ToolHook for Recorder {
    fn name(&self) -> &'static str {
        self.label
    }
    fn before(&self, call: &HookCall<'_>, args: &Value) -> BeforeDecision {
        self.log.lock().expect("log").push(format!(
            "{} before {} {}",
            self.label, call.tool, args["path"]
        ));
        (self.decide)(args)
    }
    fn after(&self, call: &HookCall<'_>, outcome: &CallOutcome<'_>) {
        self.log.lock().expect("log").push(format!(
            "{} after {} {} error={}",
            self.label, call.tool, outcome.args["path"], outcome.is_error
        ));
    }
}

fn harness_with(fake: &FakeOpenAi, hooks: Vec<Arc<dyn ToolHook>>) -> LoopHarness {
    let mut harness = LoopHarness::new(config(fake, "gpt-test", json!({})));
    let mut registry = ToolHooks::default();
    for hook in hooks {
        registry.register(hook);
    }
    harness.env.services.hooks = Arc::new(registry);
    std::fs::write(harness.env.workspace.join("real.md"), "the real notes").expect("file");
    harness
}

/// The tool result the model got back in request `index`.
fn tool_result(fake: &FakeOpenAi, index: usize) -> String {
    let requests = fake.requests();
    let messages = requests[index].body["messages"]
        .as_array()
        .expect("messages")
        .clone();
    messages
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .expect("a tool result was sent")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_run_in_order_and_a_rewrite_changes_what_the_tool_reads() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(read_call("c1", "decoy.md"));
    fake.push_reply(answer("done"));
    let log = Arc::new(Mutex::new(Vec::new()));
    let first = Recorder {
        label: "first",
        log: log.clone(),
        decide: |_| BeforeDecision::Rewrite(json!({"path": "real.md"})),
    };
    let second = Recorder {
        label: "second",
        log: log.clone(),
        decide: |_| BeforeDecision::Continue,
    };
    let harness = harness_with(&fake, vec![Arc::new(first), Arc::new(second)]);
    let (result, events) = harness
        .run(&harness.models(), "read it", &CancellationToken::new())
        .await;
    assert_eq!(done_text(&result), "done");
    assert!(tool_result(&fake, 1).contains("the real notes"));
    assert_eq!(
        log.lock().expect("log").clone(),
        vec![
            "first before read \"decoy.md\"",
            "second before read \"real.md\"",
            "first after read \"real.md\" error=false",
            "second after read \"real.md\" error=false",
        ]
    );
    let started = events.iter().find_map(|e| match e {
        pincer::agent::RunEvent::Tool {
            phase: "start",
            args,
            ..
        } => Some(args.clone()),
        _ => None,
    });
    assert_eq!(
        started,
        Some(json!({"path": "real.md"})),
        "clients see the rewritten call"
    );
    let offered = fake.requests()[0].body["tools"].to_string();
    assert!(
        offered.contains("\"minimum\""),
        "a GPT model keeps the schema keywords"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_call_is_an_error_result_for_the_model_and_never_runs() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(read_call("c1", "real.md"));
    fake.push_reply(answer("understood"));
    let log = Arc::new(Mutex::new(Vec::new()));
    let blocker = Recorder {
        label: "blocker",
        log: log.clone(),
        decide: |_| BeforeDecision::Block("reading is paused by the operator".into()),
    };
    let later = Recorder {
        label: "later",
        log: log.clone(),
        decide: |_| BeforeDecision::Continue,
    };
    let harness = harness_with(&fake, vec![Arc::new(blocker), Arc::new(later)]);
    let (result, events) = harness
        .run(&harness.models(), "read it", &CancellationToken::new())
        .await;
    assert_eq!(done_text(&result), "understood");
    let sent = tool_result(&fake, 1);
    assert!(sent.starts_with("Error:"), "{sent}");
    assert!(sent.contains("reading is paused by the operator"), "{sent}");
    assert!(!sent.contains("the real notes"), "the tool did not run");
    assert_eq!(
        log.lock().expect("log").clone(),
        vec!["blocker before read \"real.md\""],
        "later hooks are not asked and no after hook sees a call that never ran"
    );
    let errored = events.iter().any(|e| {
        matches!(
            e,
            pincer::agent::RunEvent::Tool {
                phase: "result",
                is_error: true,
                ..
            }
        )
    });
    assert!(errored, "clients see the blocked call as an error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standard_loop_detection_hook_stops_a_repeated_call() {
    let fake = FakeOpenAi::start().await;
    for i in 0..4 {
        fake.push_reply(read_call(&format!("c{i}"), "real.md"));
    }
    fake.push_reply(answer("giving up"));
    let loops =
        json!({"loopDetection": {"enabled": true, "warningThreshold": 2, "criticalThreshold": 3}});
    let harness = LoopHarness::new(config(&fake, "gpt-test", loops));
    std::fs::write(harness.env.workspace.join("real.md"), "the real notes").expect("file");
    let names = harness.env.services.hooks.names();
    assert_eq!(names, vec!["loop-detection", "call-log"]);
    let (result, _) = harness
        .run(
            &harness.models(),
            "read again and again",
            &CancellationToken::new(),
        )
        .await;
    assert_eq!(done_text(&result), "giving up");
    for round in 1..=3 {
        assert!(
            tool_result(&fake, round).contains("the real notes"),
            "call {round} ran"
        );
    }
    let fourth = tool_result(&fake, 4);
    assert!(
        fourth.starts_with("Error:") && fourth.contains("loop detected"),
        "{fourth}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_model_behind_an_openai_endpoint_gets_cleaned_tool_schemas() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(answer("hi"));
    let harness = LoopHarness::new(config(&fake, "gemini-2.5-flash", json!({})));
    let (result, _) = harness
        .run(&harness.models(), "hello", &CancellationToken::new())
        .await;
    assert_eq!(done_text(&result), "hi");
    let body = &fake.requests()[0].body;
    let read = body["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["function"]["name"] == "read"))
        .expect("read offered");
    let text = read["function"]["parameters"].to_string();
    assert!(read["function"]["parameters"]["type"] == "object", "{text}");
    for keyword in ["minimum", "maximum", "additionalProperties", "format"] {
        assert!(
            !text.contains(&format!("\"{keyword}\"")),
            "{keyword} left in {text}"
        );
    }
}
