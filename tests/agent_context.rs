//! Prompt assembly and context management, proved on what the model (the fake
//! OpenAI server) received: workspace files in order with their caps, the
//! first-run BOOTSTRAP.md, skills, the runtime line, the window guard, pruning
//! shapes (in memory only) and the per-tool-result cap.

mod support;

use pincer::agent::RunStatus;
use serde_json::{json, Value};
use support::fake_openai::FakeReply;

use support::turn_harness::{Harness, SESSION_ID};

fn position(text: &str, needle: &str) -> usize {
    text.find(needle)
        .unwrap_or_else(|| panic!("{needle:?} missing from the prompt:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_prompt_has_workspace_files_in_order_skills_and_runtime() {
    let h = Harness::start("").await;
    for name in [
        "BOOTSTRAP.md",
        "HEARTBEAT.md",
        "USER.md",
        "IDENTITY.md",
        "TOOLS.md",
        "SOUL.md",
        "AGENTS.md",
    ] {
        h.write(name, &format!("content of {name}"));
    }
    h.write(
        "skills/weather/SKILL.md",
        "---\nname: weather\ndescription: Forecasts for a city\n---\nSKILL-BODY-NOT-IN-PROMPT\n",
    );
    let first = h.turn("r1", "hello").await;
    assert_eq!(first.status, RunStatus::Ok, "{:?}", first.error);
    let prompt = h.system_prompt(0);
    let order: Vec<usize> = [
        "content of AGENTS.md",
        "content of SOUL.md",
        "content of TOOLS.md",
        "content of IDENTITY.md",
        "content of USER.md",
        "content of HEARTBEAT.md",
        "content of BOOTSTRAP.md",
        "EXTRA-INSTRUCTIONS",
        "Runtime: agent=main",
    ]
    .iter()
    .map(|needle| position(&prompt, needle))
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    assert!(position(&prompt, "<name>weather</name>") < order[0]);
    assert!(prompt.contains("Forecasts for a city"));
    assert!(!prompt.contains("SKILL-BODY-NOT-IN-PROMPT"));
    assert!(prompt.contains("model=fake/gpt-test"));
    assert!(prompt.contains(&format!("host={}", pincer::system::host_name())));
    // BOOTSTRAP.md is for the first run only.
    let second = h.turn("r2", "again").await;
    assert_eq!(second.status, RunStatus::Ok);
    let later = h.system_prompt(1);
    assert!(later.contains("content of AGENTS.md"));
    assert!(!later.contains("content of BOOTSTRAP.md"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_files_are_capped_per_file_and_in_total() {
    let h = Harness::start(", bootstrapMaxChars: 2000, bootstrapTotalMaxChars: 3000").await;
    h.write(
        "AGENTS.md",
        &format!("AGENTS-HEAD {} AGENTS-TAIL", "a".repeat(100_000)),
    );
    h.write("SOUL.md", &format!("SOUL-HEAD {}", "s".repeat(5_000)));
    h.write("USER.md", "USER-NEVER-FITS");
    assert_eq!(h.turn("r1", "hi").await.status, RunStatus::Ok);
    let prompt = h.system_prompt(0);
    assert!(prompt.contains("AGENTS-HEAD") && prompt.contains("AGENTS-TAIL"));
    assert!(prompt.contains("SOUL-HEAD"));
    assert!(!prompt.contains("USER-NEVER-FITS"));
    assert!(prompt.len() < 5_000, "prompt is {} bytes", prompt.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_below_16k_tokens_refuses_the_run() {
    let h = Harness::start(", contextTokens: 15000").await;
    let outcome = h.turn("r1", "hi").await;
    assert_eq!(outcome.status, RunStatus::Error);
    let error = outcome.error.expect("error text");
    assert!(
        error.contains("16000") && error.contains("15000"),
        "{error}"
    );
    assert!(h.fake.requests().is_empty(), "no model call was made");
    let ok = Harness::start(", contextTokens: 20000").await;
    assert_eq!(ok.turn("r1", "hi").await.status, RunStatus::Ok);
}

fn tool_round(id: &str, size: usize) -> Vec<(&'static str, String, Option<Value>)> {
    vec![
        (
            "assistant",
            String::new(),
            Some(json!({"toolCalls": [{"id": id, "name": "read", "arguments": "{}"}]})),
        ),
        (
            "tool",
            format!("{id}-START{}{id}-END", "r".repeat(size)),
            Some(json!({"toolCallId": id, "name": "read"})),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruning_soft_trims_old_tool_results_in_the_prompt_only() {
    let h = Harness::start(", contextTokens: 25000").await;
    let mut history = vec![("user", "look around".to_string(), None)];
    for id in ["old1", "old2", "new1", "new2"] {
        history.extend(tool_round(id, 9_000));
    }
    history.push(("assistant", "looked".to_string(), None));
    h.seed(&history);
    assert_eq!(
        h.turn("r1", "what did you see?").await.status,
        RunStatus::Ok
    );
    let tools: Vec<String> = h
        .request_messages(0)
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().expect("text").to_string())
        .collect();
    assert_eq!(tools.len(), 4);
    for old in &tools[..2] {
        assert!(old.contains("[Tool result trimmed"), "{}", old.len());
        assert!(old.len() < 4_000);
        assert!(old.contains("-START") && old.contains("-END"));
    }
    // The last three assistant messages keep their results whole.
    assert!(tools[2].len() > 9_000 && tools[3].len() > 9_000);
    // The transcript is never rewritten by pruning.
    let stored = h.env.store.transcript_tail(SESSION_ID, 50).expect("tail");
    let old = stored
        .iter()
        .find(|(_, e)| e.text.starts_with("old1-START"))
        .expect("old result kept");
    assert!(old.1.text.len() > 9_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recent_cache_defers_pruning_until_the_ttl_passes() {
    // (The pre-compaction memory flush is off: this history is near the compaction point and its extra
    // model call would shift the request indexes; tests/memory_flush.rs covers it.)
    let h = Harness::start(
        ", contextTokens: 25000, contextPruning: { ttl: \"1h\" }, compaction: { memoryFlush: { enabled: false } }",
    )
    .await;
    let mut history = vec![("user", "look".to_string(), None)];
    for id in ["a", "b", "c", "d"] {
        history.extend(tool_round(id, 9_000));
    }
    h.seed(&history);
    // The seeded calls are decades old: the cache has expired, prune.
    assert_eq!(h.turn("r1", "first").await.status, RunStatus::Ok);
    // r1 answered just now: within the TTL the cached prefix stays as it was.
    assert_eq!(h.turn("r2", "second").await.status, RunStatus::Ok);
    let tool_sizes = |index: usize| -> Vec<usize> {
        h.request_messages(index)
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().expect("text").len())
            .collect()
    };
    let first = tool_sizes(0);
    assert!(first[0] < 4_000, "{first:?}");
    let second = tool_sizes(1);
    assert!(second.iter().all(|len| *len > 9_000), "{second:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tool_result_is_capped_at_half_the_window() {
    let h =
        Harness::start(", contextTokens: 16000, compaction: { reserveTokensFloor: 1000 }").await;
    let line = format!("{}\n", "x".repeat(59));
    h.write("big.txt", &line.repeat(1_000));
    h.fake.push_reply(FakeReply::ToolCalls {
        calls: vec![(
            "c1".into(),
            "read".into(),
            json!({"path": "big.txt"}).to_string(),
        )],
    });
    h.fake.push_reply(FakeReply::Text {
        chunks: vec!["read it".into()],
        delay_ms: 0,
    });
    let outcome = h.turn("r1", "read big.txt").await;
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    let result = h
        .request_messages(1)
        .into_iter()
        .find(|m| m["role"] == "tool")
        .expect("tool result sent");
    let text = result["content"].as_str().expect("text");
    assert!(text.len() <= 16_000 * 4 / 2, "{}", text.len());
    assert!(text.contains("tool result cut"));
}
