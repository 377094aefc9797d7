//! The two memory flushes, end to end with the fake OpenAI server:
//! - `/new` (`sessions.reset`) saves the closing session's last messages to `memory/YYYY-MM-DD-<slug>.md`
//!   in the agent's workspace, the slug named by the model, through a real `pincer gateway`;
//! - near auto-compaction the agent first gets one silent turn with the flush prompt; its `NO_REPLY` answer
//!   is swallowed and never recorded, the user's turn then runs as usual, and the flush does not repeat
//!   within the same compaction cycle.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::GatewayProcess;
use support::turn_harness::{Harness, SESSION_ID};
use support::ws_client::{Device, TestClient};

const TOKEN: &str = "memory-flush-test-token";

fn text(reply: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![reply.to_string()],
        delay_ms: 0,
    }
}

async fn run_agent(client: &mut TestClient, message: &str) {
    let id = client
        .request(
            "agent",
            json!({"message": message, "sessionKey": "main", "idempotencyKey": uuid::Uuid::new_v4().to_string()}),
        )
        .await;
    loop {
        let res = client.response(&id).await;
        if res["payload"]["status"] != "accepted" {
            assert_eq!(res["ok"], true, "the turn succeeded: {res}");
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_saves_the_closing_session_to_a_dated_memory_note_named_by_the_model() {
    let fake = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let workspace = dir.path().join("ws");
    let config = format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
                                   models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }}, workspace: "{}" }} }},
}}"#,
        fake.base_url(),
        workspace.display()
    );
    let gateway = GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN]);
    let device = Device::new(7);
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(TOKEN),
        &["operator.admin", "operator.read", "operator.write"],
        Some(&device),
    )
    .await;
    fake.push_reply(text("The ferry leaves at nine."));
    run_agent(&mut client, "When does the ferry to Hydra leave?").await;
    fake.push_reply(text("  Hydra Ferry!\n"));
    let res = client
        .call(
            "chat.send",
            json!({"sessionKey": "main", "message": "/new", "idempotencyKey": "n1"}),
        )
        .await;
    assert_eq!(res["ok"], true, "{res}");

    let memory = workspace.join("memory");
    let mut note: Option<(String, String)> = None;
    for _ in 0..80 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let entries: Vec<_> = std::fs::read_dir(&memory)
            .map(|d| d.filter_map(Result::ok).collect())
            .unwrap_or_default();
        if let Some(entry) = entries.first() {
            let name = entry.file_name().to_string_lossy().into_owned();
            note = Some((
                name,
                std::fs::read_to_string(entry.path()).expect("read note"),
            ));
            break;
        }
    }
    let (name, text) = note.unwrap_or_else(|| panic!("no note written; {}", gateway.stderr()));
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    assert_eq!(name, format!("{today}-hydra-ferry.md"));
    assert!(text.starts_with(&format!("# Session: {today} ")), "{text}");
    assert!(
        text.contains("- **Session Key**: agent:main:main\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "user: When does the ferry to Hydra leave?\nassistant: The ferry leaves at nine.\n"
        ),
        "{text}"
    );
    assert!(!text.contains("/new"), "commands are left out: {text}");
    let slug_request: Vec<Value> = fake
        .requests()
        .iter()
        .map(|r| r.body["messages"].clone())
        .filter(|m| m.to_string().contains("Name this conversation"))
        .collect();
    assert_eq!(slug_request.len(), 1, "one slug call");
}

fn earlier_turns(count: usize, size: usize) -> Vec<(&'static str, String, Option<Value>)> {
    (0..count)
        .flat_map(|i| {
            [
                ("user", format!("Q{i} {}", "q".repeat(size)), None),
                ("assistant", format!("A{i} {}", "a".repeat(size)), None),
            ]
        })
        .collect()
}

fn all_text(messages: &Value) -> String {
    messages.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_compaction_the_agent_gets_one_silent_flush_turn_per_cycle() {
    // Window 16k, reserve 4k: compaction past 12k tokens, the flush from 10k (soft threshold 2k).
    let h = Harness::start(
        ", contextTokens: 16000, compaction: { reserveTokensFloor: 4000, memoryFlush: { softThresholdTokens: 2000 } }",
    )
    .await;
    // ~11k tokens of history (4 characters a token): past the flush point, short of compaction.
    h.seed(&earlier_turns(11, 2_000));
    h.fake.push_reply(text("NO_REPLY"));
    h.fake.push_reply(text("Here is the answer."));
    let outcome = h.turn("r1", "What did we decide?").await;
    assert_eq!(outcome.text, "Here is the answer.", "{outcome:?}");

    let requests = h.fake.requests();
    assert_eq!(requests.len(), 2, "a flush turn, then the user's turn");
    let flush = &requests[0].body["messages"];
    let last = flush.as_array().and_then(|m| m.last()).expect("messages");
    assert_eq!(last["role"], "user");
    let prompt = last["content"].as_str().expect("text");
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    assert!(prompt.contains(&format!("memory/{today}.md")), "{prompt}");
    assert!(
        h.system_prompt(0).contains("memory flush turn"),
        "flush system prompt"
    );
    assert!(
        !all_text(flush).contains("What did we decide?"),
        "the user's message waits"
    );
    let real = &requests[1].body["messages"];
    assert!(all_text(real).contains("What did we decide?"));
    assert!(!all_text(real).contains("Pre-compaction memory flush"));

    let transcript = h
        .env
        .store
        .transcript_tail(SESSION_ID, 100)
        .expect("transcript");
    assert!(
        transcript
            .iter()
            .all(|(_, e)| !e.text.contains("NO_REPLY") && !e.text.contains("memory flush")),
        "the flush turn leaves nothing in the session"
    );

    h.fake.push_reply(text("Second answer."));
    let again = h.turn("r2", "And then?").await;
    assert_eq!(again.text, "Second answer.");
    assert_eq!(
        h.fake.requests().len(),
        3,
        "no second flush in the same cycle"
    );
}
