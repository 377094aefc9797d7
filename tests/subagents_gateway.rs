//! Sub-agents through a real gateway process and the fake OpenAI provider: a parent's `sessions_spawn`
//! starts a child whose result is announced back into the parent's transcript; a kill from the parent
//! stops the child and its own child; a `kill -9` while a child runs leaves it failed with a reason after
//! the restart; a steer reaches a running child before its next model call (or, after its last one,
//! restarts it with the message), from the `subagents` tool and from `/subagents steer`.
//!
//! Children that must stay busy use a second fake provider (model `slow/gpt-slow`) that hangs, so the
//! order of requests to the parent's provider stays deterministic.

mod support;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::GatewayProcess;
use support::ws_client::{Device, Read, TestClient};
use tokio::sync::Notify;

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

/// Polls the parent's history until a sub-agent announcement and the reply to it are there;
/// returns the announcement's text. The announcement may share a turn with other messages
/// queued for the parent at the same moment (the queue's collect mode merges them, e.g. a
/// web chat message replayed after a restart), so it is looked for line by line.
async fn announcement(client: &mut TestClient) -> String {
    let mut messages = Vec::new();
    for _ in 0..MAX_POLLS {
        messages = history(client, "main").await;
        let found = messages.iter().enumerate().find_map(|(at, (role, text))| {
            let start = text.find("[sub-agent]")?;
            let at_line_start = start == 0 || text[..start].ends_with('\n');
            (role == "user" && at_line_start).then(|| (at, text[start..].to_string()))
        });
        if let Some((at, text)) = found {
            if messages[at + 1..]
                .iter()
                .any(|(role, _)| role == "assistant")
            {
                return text;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no sub-agent announcement reached the parent session; its history: {messages:#?}");
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

/// A reply the fake holds back until the test releases `gate`.
fn held(gate: &Arc<Notify>, then: FakeReply) -> FakeReply {
    FakeReply::Held {
        gate: gate.clone(),
        then: Box::new(then),
    }
}

fn final_text(text: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![text.to_string()],
        delay_ms: 0,
    }
}

/// Polls until `fake` has received `count` requests.
async fn requests_reach(fake: &FakeOpenAi, count: usize) {
    for _ in 0..MAX_POLLS {
        if fake.requests().len() >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the fake provider never received {count} request(s)");
}

/// Polls until some request to `fake` carries a tool result containing `needle`.
async fn tool_result_seen(fake: &FakeOpenAi, needle: &str) -> String {
    for _ in 0..MAX_POLLS {
        for request in fake.requests() {
            let messages = request.body["messages"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if let Some(found) = messages.iter().find(|m| {
                m["role"] == "tool" && m["content"].as_str().is_some_and(|t| t.contains(needle))
            }) {
                return found["content"].as_str().unwrap_or_default().to_string();
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no tool result containing {needle:?} reached the provider");
}

/// `(role, content)` of a request's messages.
fn request_messages(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// The one sub-agent's session key.
async fn child_key(client: &mut TestClient) -> String {
    let rows = children_with_status(client, 1, "done").await;
    rows[0]["key"].as_str().expect("child key").to_string()
}

/// Starts a gateway whose parent spawns one child ("gardener") on the slow provider, and waits until the
/// child's first model call is in flight.
async fn spawn_gardener(fake: &FakeOpenAi, slow: &FakeOpenAi) -> (GatewayProcess, TestClient) {
    fake.push_reply(tool_call(
        "call-1",
        "sessions_spawn",
        json!({"task": "survey the garden", "label": "gardener", "model": "slow/gpt-slow"}),
    ));
    let gateway = GatewayProcess::start(&config(&fake.base_url(), &slow.base_url(), 1), ARGS);
    let mut client = operator(&gateway).await;
    let sent = json!({"sessionKey": "main", "message": "please delegate", "idempotencyKey": "p1"});
    assert_eq!(client.call("chat.send", sent).await["ok"], true);
    requests_reach(slow, 1).await;
    (gateway, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steer_reaches_the_running_child_before_its_next_model_call() {
    let fake = FakeOpenAi::start().await;
    let slow = FakeOpenAi::start().await;
    let gate = Arc::new(Notify::new());
    // The child's first model call answers (once released) with a tool call; its second call echoes.
    slow.push_reply(held(
        &gate,
        tool_call("call-c1", "read", json!({"path": "NOTES.md"})),
    ));
    let (_gateway, mut client) = spawn_gardener(&fake, &slow).await;

    fake.push_reply(tool_call(
        "call-2",
        "subagents",
        json!({"action": "steer", "target": "gardener", "message": "STEER-ONLY-ROSES"}),
    ));
    let sent = json!({"sessionKey": "main", "message": "focus on roses", "idempotencyKey": "p2"});
    assert_eq!(client.call("chat.send", sent).await["ok"], true);
    let answer = tool_result_seen(&fake, "Steered").await;
    assert!(answer.contains("before its next step"), "{answer}");
    gate.notify_one();

    let announced = announcement(&mut client).await;
    assert!(announced.contains("echo: STEER-ONLY-ROSES"), "{announced}");
    let child_requests: Vec<Value> = slow.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(
        child_requests.len(),
        2,
        "the child ran exactly two model calls"
    );
    let second = request_messages(&child_requests[1]);
    let tool_at = second
        .iter()
        .position(|(role, _)| role == "tool")
        .expect("the read result");
    assert_eq!(
        second[tool_at + 1..],
        [("user".to_string(), "STEER-ONLY-ROSES".to_string())],
        "the steer follows the tool result as the newest message"
    );
    let key = child_key(&mut client).await;
    let transcript = history(&mut client, &key).await;
    let steers = transcript
        .iter()
        .filter(|(role, text)| role == "user" && text == "STEER-ONLY-ROSES")
        .count();
    assert_eq!(steers, 1, "{transcript:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_steer_after_the_childs_last_model_call_restarts_it_with_the_message() {
    let fake = FakeOpenAi::start().await;
    let slow = FakeOpenAi::start().await;
    let gate = Arc::new(Notify::new());
    // The child's first model call is its last (a plain answer): it never takes the steer.
    slow.push_reply(held(&gate, final_text("FIRST-DRAFT all plants")));
    let (_gateway, mut client) = spawn_gardener(&fake, &slow).await;

    let id = client
        .request(
            "chat.send",
            json!({"sessionKey": "main", "message": "/subagents steer #1 STEER-ONLY-ROSES",
                   "idempotencyKey": "cmd-1"}),
        )
        .await;
    let answer = command_answer(&mut client, &id, "cmd-1").await;
    assert!(answer.contains("Steered gardener"), "{answer}");
    gate.notify_one();

    let announced = announcement(&mut client).await;
    assert!(announced.contains("echo: STEER-ONLY-ROSES"), "{announced}");
    assert!(!announced.contains("FIRST-DRAFT"), "{announced}");
    let child_requests: Vec<Value> = slow.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(child_requests.len(), 2, "one new turn, not more");
    let second = request_messages(&child_requests[1]);
    assert_eq!(
        second.last(),
        Some(&("user".to_string(), "STEER-ONLY-ROSES".to_string()))
    );
    assert!(second
        .iter()
        .any(|(_, text)| text == "FIRST-DRAFT all plants"));
    let info = client
        .request(
            "chat.send",
            json!({"sessionKey": "main", "message": "/subagents info gardener",
                   "idempotencyKey": "cmd-2"}),
        )
        .await;
    let info = command_answer(&mut client, &info, "cmd-2").await;
    assert!(info.contains("gardener — done"), "{info}");
    let log = client
        .request(
            "chat.send",
            json!({"sessionKey": "main", "message": "/subagents log gardener",
                   "idempotencyKey": "cmd-3"}),
        )
        .await;
    let log = command_answer(&mut client, &log, "cmd-3").await;
    assert!(log.contains("user: STEER-ONLY-ROSES"), "{log}");
    assert!(fake
        .requests()
        .iter()
        .all(|r| !r.body.to_string().contains("/subagents")));
}

/// Reads until the `res` of request `id` and the `chat` final of run `run_id`; returns the final's text.
async fn command_answer(client: &mut TestClient, id: &str, run_id: &str) -> String {
    let (mut acked, mut text) = (false, None);
    while !acked || text.is_none() {
        match client.read().await {
            Read::Frame(f) if f["type"] == "res" && f["id"] == id => acked = true,
            Read::Frame(f)
                if f["event"] == "chat"
                    && f["payload"]["runId"] == run_id
                    && f["payload"]["state"] == "final" =>
            {
                text = f["payload"]["message"]["content"][0]["text"]
                    .as_str()
                    .map(str::to_string);
            }
            Read::Frame(_) => {}
            Read::Closed { code, reason } => panic!("closed ({code} {reason})"),
        }
    }
    text.unwrap_or_default()
}
