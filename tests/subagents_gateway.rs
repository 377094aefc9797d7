//! Sub-agents through a real gateway process and the fake OpenAI provider: a parent's `sessions_spawn`
//! starts a child whose result is announced back into the parent's transcript; a kill from the parent
//! stops the child and its own child; a `kill -9` while a child runs leaves it failed with a reason after
//! the restart.
//!
//! Children that must stay busy use a second fake provider (model `slow/gpt-slow`) that hangs, so the
//! order of requests to the parent's provider stays deterministic.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::GatewayProcess;
use support::ws_client::{Device, TestClient};

const TOKEN: &str = "subagents-test-token";
const SCOPES: &[&str] = &["operator.admin", "operator.read", "operator.write"];
const ARGS: &[&str] = &["--port", "0", "--token", TOKEN];
/// Polls of `chat.history` / `sessions.list` before a test gives up (100 ms apart).
const MAX_POLLS: usize = 300;

fn config(main_url: &str, slow_url: &str, max_spawn_depth: u32) -> String {
    format!(
        r#"{{
  models: {{ providers: {{
    fake: {{ baseUrl: "{main_url}", apiKey: "sk-test", api: "openai-completions",
            models: [{{ id: "gpt-test", contextWindow: 128000 }}] }},
    slow: {{ baseUrl: "{slow_url}", apiKey: "sk-test", api: "openai-completions",
            models: [{{ id: "gpt-slow", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }},
                          subagents: {{ maxSpawnDepth: {max_spawn_depth} }} }} }},
}}"#
    )
}

async fn operator(gateway: &GatewayProcess) -> TestClient {
    TestClient::connect(&gateway.url(), Some(TOKEN), SCOPES, Some(&Device::new(9)))
        .await
        .0
}

fn tool_call(id: &str, name: &str, args: Value) -> FakeReply {
    FakeReply::ToolCalls {
        calls: vec![(id.into(), name.into(), args.to_string())],
    }
}

fn hang() -> FakeReply {
    FakeReply::Hang {
        first_chunk: "working".into(),
    }
}

/// `(role, text)` of every message in a session's history.
async fn history(client: &mut TestClient, key: &str) -> Vec<(String, String)> {
    let res = client
        .call("chat.history", json!({"sessionKey": key}))
        .await;
    res["payload"]["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let text = m["content"][0]["text"].as_str().unwrap_or_default();
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                text.to_string(),
            )
        })
        .collect()
}

/// Polls the parent's history until a sub-agent announcement and the reply to it are there.
async fn announcement(client: &mut TestClient) -> String {
    for _ in 0..MAX_POLLS {
        let messages = history(client, "main").await;
        if let Some(at) = messages
            .iter()
            .position(|(role, text)| role == "user" && text.starts_with("[sub-agent]"))
        {
            if messages[at + 1..]
                .iter()
                .any(|(role, _)| role == "assistant")
            {
                return messages[at].1.clone();
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no sub-agent announcement reached the parent session");
}

/// Polls `sessions.list` until the parent's descendants all have `status`; returns their rows.
async fn children_with_status(client: &mut TestClient, count: usize, status: &str) -> Vec<Value> {
    let mut last = Vec::new();
    for _ in 0..MAX_POLLS {
        let res = client.call("sessions.list", json!({})).await;
        let rows: Vec<Value> = res["payload"]["sessions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r["key"].as_str().is_some_and(|k| k.contains(":subagent:")))
            .collect();
        if rows.len() == count && rows.iter().all(|r| r["status"] == status) {
            return rows;
        }
        last = rows;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the sub-agent sessions never reached status {status}: {last:?}");
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
}

fn system_prompt(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawned_child_result_is_announced_in_the_parent_session() {
    let fake = FakeOpenAi::start().await;
    let slow = FakeOpenAi::start().await;
    fake.push_reply(tool_call(
        "call-1",
        "sessions_spawn",
        json!({"task": "CHILD-TASK name three fruits", "label": "fruits"}),
    ));
    let gateway = GatewayProcess::start(&config(&fake.base_url(), &slow.base_url(), 1), ARGS);
    let mut client = operator(&gateway).await;
    let sent = json!({"sessionKey": "main", "message": "please delegate", "idempotencyKey": "p1"});
    let ack = client.call("chat.send", sent).await;
    assert_eq!(ack["ok"], true, "{ack}");

    let announced = announcement(&mut client).await;
    // The child echoes its task: that is its result.
    assert!(
        announced.contains("\"fruits\" completed successfully"),
        "{announced}"
    );
    assert!(
        announced.contains("CHILD-TASK name three fruits"),
        "{announced}"
    );
    assert!(announced.contains("Stats: runtime"), "{announced}");
    assert!(announced.contains("tokens"), "{announced}");

    let rows = children_with_status(&mut client, 1, "done").await;
    assert_eq!(rows[0]["spawnedBy"], "agent:main:main");
    assert_eq!(rows[0]["spawnDepth"], 1);
    assert_eq!(rows[0]["label"], "fruits");

    let requests: Vec<Value> = fake.requests().into_iter().map(|r| r.body).collect();
    let parent = &requests[0];
    assert!(tool_names(parent).contains(&"sessions_spawn".to_string()));
    let child = requests
        .iter()
        .find(|r| system_prompt(r).contains("Sub-agent context"))
        .expect("the child's model request");
    assert!(system_prompt(child).contains("CHILD-TASK"));
    let child_tools = tool_names(child);
    assert!(child_tools.contains(&"read".to_string()), "{child_tools:?}");
    for denied in ["sessions_spawn", "subagents", "cron", "session_status"] {
        assert!(
            !child_tools.contains(&denied.to_string()),
            "{child_tools:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_child_stops_its_own_child_too() {
    let fake = FakeOpenAi::start().await;
    let slow = FakeOpenAi::start().await;
    fake.push_reply(tool_call(
        "call-1",
        "sessions_spawn",
        json!({"task": "orchestrate", "label": "boss", "model": "slow/gpt-slow"}),
    ));
    // The child (depth 1 of 2) spawns a grandchild on the slow provider; both then hang.
    slow.push_reply(tool_call(
        "call-2",
        "sessions_spawn",
        json!({"task": "dig", "label": "worker", "model": "slow/gpt-slow"}),
    ));
    slow.push_reply(hang());
    slow.push_reply(hang());
    let gateway = GatewayProcess::start(&config(&fake.base_url(), &slow.base_url(), 2), ARGS);
    let mut client = operator(&gateway).await;
    let sent = json!({"sessionKey": "main", "message": "start the team", "idempotencyKey": "p1"});
    assert_eq!(client.call("chat.send", sent).await["ok"], true);
    let running = children_with_status(&mut client, 2, "running").await;
    assert!(running.iter().any(|r| r["spawnDepth"] == 2), "{running:?}");
    // Both hanging streams are open before the parent asks for the kill.
    for _ in 0..MAX_POLLS {
        if slow.requests().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    fake.push_reply(tool_call(
        "call-3",
        "subagents",
        json!({"action": "kill", "target": "all"}),
    ));
    let kill = json!({"sessionKey": "main", "message": "stop them", "idempotencyKey": "p2"});
    assert_eq!(client.call("chat.send", kill).await["ok"], true);
    children_with_status(&mut client, 2, "killed").await;
    slow.wait_for_disconnects(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_interrupted_by_kill_9_is_failed_with_a_reason_after_restart() {
    let fake = FakeOpenAi::start().await;
    let slow = FakeOpenAi::start().await;
    fake.push_reply(tool_call(
        "call-1",
        "sessions_spawn",
        json!({"task": "take your time", "model": "slow/gpt-slow"}),
    ));
    slow.push_reply(hang());
    let config = config(&fake.base_url(), &slow.base_url(), 1);
    let mut gateway = GatewayProcess::start(&config, ARGS);
    let mut client = operator(&gateway).await;
    let sent = json!({"sessionKey": "main", "message": "delegate", "idempotencyKey": "p1"});
    assert_eq!(client.call("chat.send", sent).await["ok"], true);
    children_with_status(&mut client, 1, "running").await;
    for _ in 0..MAX_POLLS {
        if !slow.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    gateway.crash_and_restart(&config, ARGS);
    let mut client = operator(&gateway).await;
    children_with_status(&mut client, 1, "failed").await;
    let announced = announcement(&mut client).await;
    assert!(announced.contains("failed"), "{announced}");
    assert!(
        announced.contains("the gateway stopped while this sub-agent was running"),
        "{announced}"
    );
}
