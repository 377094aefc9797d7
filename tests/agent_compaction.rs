//! Compaction end to end with the fake OpenAI server: a context-length refusal
//! compacts once and the retry succeeds, the prompt passing the target
//! compacts before the call, the summary entry is persisted and starts the
//! next turn's prompt (with AGENTS.md's refresh sections), and `/compact` /
//! `sessions.compact` run it on demand through the gateway.

mod support;

use pincer::agent::RunStatus;
use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::{config_with_provider, GatewayProcess};
use support::ws_client::{Device, Read, TestClient};

use support::turn_harness::{Harness, SESSION_ID};

fn text(reply: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![reply.to_string()],
        delay_ms: 0,
    }
}

fn earlier_turns(count: usize, size: usize) -> Vec<(&'static str, String, Option<Value>)> {
    (0..count)
        .flat_map(|i| {
            [
                ("user", format!("EARLY-Q{i} {}", "q".repeat(size)), None),
                (
                    "assistant",
                    format!("EARLY-A{i} {}", "a".repeat(size)),
                    None,
                ),
            ]
        })
        .collect()
}

fn non_system_text(messages: &[Value]) -> String {
    messages
        .iter()
        .filter(|m| m["role"] != "system")
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

const AGENTS_MD: &str = "# Rules\n## Session Startup\nGreet by name.\n## Red Lines\nNEVER-SHARE-SECRETS\n## Style\nSTYLE-NOT-REFRESHED\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_compacts_once_and_the_retry_succeeds() {
    let h = Harness::start(", contextTokens: 16000").await;
    h.write("AGENTS.md", AGENTS_MD);
    h.seed(&earlier_turns(3, 100));
    h.fake.push_reply(FakeReply::Error {
        status: 400,
        message: "This model's maximum context length is 16000 tokens. However, your messages resulted in 17000 tokens.".into(),
        retry_after_secs: None,
    });
    h.fake.push_reply(text("SUMMARY-OF-EARLY-TURNS"));
    h.fake.push_reply(text("final answer"));
    let outcome = h.turn("r1", "current question").await;
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    assert_eq!(outcome.text, "final answer");
    assert_eq!(h.fake.requests().len(), 3);
    // The summary call saw the early turns, not the current question.
    let summary_call = non_system_text(&h.request_messages(1));
    assert!(summary_call.contains("EARLY-Q0") && summary_call.contains("EARLY-A2"));
    assert!(!summary_call.contains("current question"));
    // The retry starts from the summary and the refresh, then the question.
    let retry = h.request_messages(2);
    let system = retry[0]["content"].as_str().expect("system");
    assert!(system.contains("SUMMARY-OF-EARLY-TURNS"));
    assert!(system.contains("[Post-compaction context refresh]"));
    assert!(system.contains("NEVER-SHARE-SECRETS") && system.contains("Greet by name."));
    let rest = non_system_text(&retry);
    assert!(!rest.contains("EARLY-Q0"), "{rest}");
    assert!(rest.contains("current question"));
    // The summary is persisted and counted.
    let stored = h.env.store.transcript_tail(SESSION_ID, 50).expect("tail");
    let summary = stored
        .iter()
        .find(|(_, e)| e.role == "system")
        .expect("summary entry");
    assert_eq!(summary.1.text, "SUMMARY-OF-EARLY-TURNS");
    let extra: Value =
        serde_json::from_str(summary.1.extra_json.as_deref().expect("extra")).expect("json");
    assert_eq!(extra["type"], "compaction");
    assert_eq!(extra["reason"], "overflow");
    let session = h.session();
    assert_eq!(session.compaction_count, 1);
    // The next turn builds on the summary too.
    let next = h.turn("r2", "follow-up").await;
    assert_eq!(next.status, RunStatus::Ok);
    let next_messages = h.request_messages(3);
    assert!(next_messages[0]["content"]
        .as_str()
        .is_some_and(|s| s.contains("SUMMARY-OF-EARLY-TURNS")));
    let next_rest = non_system_text(&next_messages);
    assert!(!next_rest.contains("EARLY-A1"));
    assert!(next_rest.contains("current question") && next_rest.contains("final answer"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_overflow_in_one_run_fails_instead_of_looping() {
    let h = Harness::start(", contextTokens: 16000").await;
    h.seed(&earlier_turns(2, 50));
    let overflow = FakeReply::Error {
        status: 400,
        message: "maximum context length exceeded".into(),
        retry_after_secs: None,
    };
    h.fake.push_reply(overflow.clone());
    h.fake.push_reply(text("SUMMARY"));
    h.fake.push_reply(overflow);
    let outcome = h.turn("r1", "q").await;
    assert_eq!(outcome.status, RunStatus::Error);
    assert!(outcome
        .error
        .expect("error")
        .contains("maximum context length"));
    assert_eq!(h.fake.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_past_the_target_is_compacted_before_the_call() {
    // Window 16k tokens, reserve clamped to 8k: the target is 8k tokens. (The pre-compaction memory flush
    // is off here: tests/memory_flush.rs covers it.)
    let h =
        Harness::start(", contextTokens: 16000, compaction: { memoryFlush: { enabled: false } }")
            .await;
    h.seed(&earlier_turns(4, 5_000));
    h.fake.push_reply(text("PART-SUMMARY"));
    h.fake.push_reply(text("AUTO-SUMMARY"));
    h.fake.push_reply(text("answer"));
    let outcome = h.turn("r1", "now").await;
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    // 30k chars to summarise in chunks of 0.4 × 16k / 1.2 tokens: two calls,
    // the second merging the first's summary.
    assert_eq!(h.fake.requests().len(), 3);
    let first_chunk = non_system_text(&h.request_messages(0));
    assert!(first_chunk.contains("EARLY-Q0") && !first_chunk.contains("EARLY-A2"));
    let second_chunk = non_system_text(&h.request_messages(1));
    assert!(second_chunk.contains("PART-SUMMARY") && second_chunk.contains("EARLY-A2"));
    assert!(
        !second_chunk.contains("EARLY-Q3"),
        "recent turns stay verbatim"
    );
    let call = h.request_messages(2);
    assert!(call[0]["content"]
        .as_str()
        .is_some_and(|s| s.contains("AUTO-SUMMARY")));
    assert!(non_system_text(&call).contains("EARLY-Q3"));
    let size: usize = call
        .iter()
        .filter_map(|m| m["content"].as_str())
        .map(str::len)
        .sum();
    assert!(size < 8_000 * 4, "prompt still {size} chars");
}

const TOKEN: &str = "compaction-test-token";

async fn connect(gateway: &GatewayProcess, seed: u8) -> TestClient {
    let mut client = TestClient::open(&gateway.url()).await;
    let device = Device::new(seed);
    let params = client.connect_params(
        Some(TOKEN),
        &["operator.read", "operator.write", "operator.admin"],
        Some(&device),
    );
    let id = client.request("connect", params).await;
    assert_eq!(client.response(&id).await["ok"], true);
    client
}

async fn agent_turn(client: &mut TestClient, key: &str, message: &str) -> Value {
    let id = client
        .request("agent", json!({"message": message, "idempotencyKey": key}))
        .await;
    loop {
        let Read::Frame(frame) = client.read().await else {
            panic!("closed during the run")
        };
        if frame["type"] == "res"
            && frame["id"] == id.as_str()
            && frame["payload"]["status"] != "accepted"
        {
            return frame;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_compact_summarises_and_the_next_turn_uses_the_summary() {
    let fake = FakeOpenAi::start().await;
    let gateway = GatewayProcess::start(
        &config_with_provider(&fake.base_url()),
        &["--port", "0", "--token", TOKEN],
    );
    let mut client = connect(&gateway, 41).await;
    for (i, question) in ["FIRST-QUESTION", "SECOND-QUESTION"].iter().enumerate() {
        let res = agent_turn(&mut client, &format!("k{i}"), question).await;
        assert_eq!(res["ok"], true, "{res}");
    }
    fake.push_reply(text("MANUAL-SUMMARY"));
    let compacted = client
        .call(
            "chat.send",
            json!({"sessionKey": "main", "message": "/compact keep the questions", "idempotencyKey": "c1"}),
        )
        .await;
    assert_eq!(compacted["ok"], true, "{compacted}");
    assert_eq!(compacted["payload"]["compacted"], true, "{compacted}");
    let summary_request = fake.requests().pop().expect("summary call");
    let instructions = summary_request.body["messages"][0]["content"]
        .as_str()
        .expect("instructions");
    assert!(instructions.contains("keep the questions"));
    let history = client
        .call("chat.history", json!({"sessionKey": "main"}))
        .await;
    let messages = history["payload"]["messages"].as_array().expect("messages");
    let last = messages.last().expect("summary entry");
    assert_eq!(last["role"], "system");
    assert_eq!(last["content"][0]["text"], "MANUAL-SUMMARY");
    let res = agent_turn(&mut client, "k3", "THIRD-QUESTION").await;
    assert_eq!(res["ok"], true, "{res}");
    let next = fake.requests().pop().expect("next turn");
    let sent = next.body["messages"].as_array().expect("messages").clone();
    assert!(sent[0]["content"]
        .as_str()
        .is_some_and(|s| s.contains("MANUAL-SUMMARY")));
    let rest = non_system_text(&sent);
    assert!(!rest.contains("FIRST-QUESTION"), "{rest}");
    assert!(rest.contains("THIRD-QUESTION"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_compact_reports_when_there_is_nothing_to_compact() {
    let fake = FakeOpenAi::start().await;
    let gateway = GatewayProcess::start(
        &config_with_provider(&fake.base_url()),
        &["--port", "0", "--token", TOKEN],
    );
    let mut client = connect(&gateway, 42).await;
    let res = agent_turn(&mut client, "only", "just one question").await;
    assert_eq!(res["ok"], true, "{res}");
    let before = fake.requests().len();
    let answer = client
        .call("sessions.compact", json!({"key": "main"}))
        .await;
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(answer["payload"]["compacted"], false, "{answer}");
    assert_eq!(fake.requests().len(), before, "no summary call");
}

/// `compaction.model` writes the summary, not the agent's model; `compaction.timeoutSeconds` bounds a
/// summary request that never ends (the compaction fails naming the setting instead of hanging).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_uses_compaction_model_and_gives_up_after_timeout_seconds() {
    let fake = FakeOpenAi::start().await;
    let config = format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
      models: [{{ id: "gpt-test", contextWindow: 128000 }}, {{ id: "gpt-summary", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }},
      compaction: {{ model: "fake/gpt-summary", timeoutSeconds: 2 }} }} }},
}}"#,
        fake.base_url()
    );
    let gateway = GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN]);
    let mut client = connect(&gateway, 43).await;
    for (i, question) in ["FIRST-QUESTION", "SECOND-QUESTION"].iter().enumerate() {
        let res = agent_turn(&mut client, &format!("m{i}"), question).await;
        assert_eq!(res["ok"], true, "{res}");
    }
    assert_eq!(fake.requests()[0].body["model"], "gpt-test");
    fake.push_reply(text("SUMMARY-BY-THE-SUMMARY-MODEL"));
    let compacted = client
        .call("sessions.compact", json!({"key": "main"}))
        .await;
    assert_eq!(compacted["payload"]["compacted"], true, "{compacted}");
    let summary_request = fake.requests().pop().expect("summary call");
    assert_eq!(summary_request.body["model"], "gpt-summary");

    for (i, question) in ["THIRD-QUESTION", "FOURTH-QUESTION"].iter().enumerate() {
        let res = agent_turn(&mut client, &format!("n{i}"), question).await;
        assert_eq!(res["ok"], true, "{res}");
    }
    fake.push_reply(FakeReply::Hang {
        first_chunk: "never finished".into(),
    });
    let started = std::time::Instant::now();
    let stalled = client
        .call("sessions.compact", json!({"key": "main"}))
        .await;
    assert_eq!(stalled["ok"], false, "{stalled}");
    let message = stalled["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("timeoutSeconds") && message.contains("2 s"),
        "{stalled}"
    );
    assert!(started.elapsed() >= std::time::Duration::from_secs(2));
    fake.wait_for_disconnects(1).await;
}
