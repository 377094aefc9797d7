//! The heartbeat through a real gateway process and the fake OpenAI provider: `wake {mode: now}` runs a
//! heartbeat turn in the main session; a `HEARTBEAT_OK` reply is swallowed (no `chat` event reaches
//! clients) while any other reply is delivered to them as a `chat` final event; `last-heartbeat` and the
//! `heartbeat` event report what happened; `set-heartbeats` pauses the interval. An acknowledged heartbeat
//! leaves the main transcript and its `updatedAt` as they were; `isolatedSession` keeps heartbeats out of
//! the main session altogether; `lightContext` gives the heartbeat only HEARTBEAT.md of the bootstrap files;
//! `includeReasoning` delivers the model's reasoning as its own message. A background `exec` run's exit
//! (`tools.exec.notifyOnExit`) is queued as a system event and runs a heartbeat at once.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::{config_with_provider, GatewayProcess};
use support::ws_client::{Device, Read, TestClient};

const TOKEN: &str = "heartbeat-test-token";
const SCOPES: &[&str] = &["operator.admin", "operator.read", "operator.write"];

fn text(reply: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![reply.to_string()],
        delay_ms: 0,
    }
}

/// Reads until the next `heartbeat` event; returns it with the `chat` events that came before it.
async fn next_heartbeat(client: &mut TestClient) -> (Value, Vec<Value>) {
    let mut chats = Vec::new();
    loop {
        match client.read().await {
            Read::Frame(frame) if frame["event"] == "heartbeat" => {
                return (frame["payload"].clone(), chats)
            }
            Read::Frame(frame) if frame["event"] == "chat" => chats.push(frame["payload"].clone()),
            Read::Frame(_) => continue,
            Read::Closed { code, reason } => panic!("closed ({code} {reason}) before a heartbeat"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ok_heartbeat_is_swallowed_and_other_replies_reach_clients() {
    let fake = FakeOpenAi::start().await;
    let gateway = GatewayProcess::start(
        &config_with_provider(&fake.base_url()),
        &["--port", "0", "--token", TOKEN],
    );
    let workspace = gateway.data_dir().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(
        workspace.join("HEARTBEAT.md"),
        "- water the plants when dry\n",
    )
    .expect("write");
    let (mut client, hello) =
        TestClient::connect(&gateway.url(), Some(TOKEN), SCOPES, Some(&Device::new(5))).await;
    let methods = hello["features"]["methods"].as_array().expect("methods");
    assert!(
        methods.contains(&json!("last-heartbeat")) && methods.contains(&json!("set-heartbeats"))
    );
    let none = client.call("last-heartbeat", json!({})).await;
    assert_eq!(none["payload"], Value::Null, "{none}");

    fake.push_reply(text("HEARTBEAT_OK"));
    let woke = client
        .call(
            "wake",
            json!({"mode": "now", "text": "The backup finished"}),
        )
        .await;
    assert_eq!(woke["ok"], true, "{woke}");
    let (event, chats) = next_heartbeat(&mut client).await;
    assert_eq!(event["status"], "ok-token", "{event}");
    assert!(
        chats.is_empty(),
        "an acknowledgement reached clients: {chats:?}"
    );
    let prompt = fake.requests()[0].body["messages"]
        .as_array()
        .and_then(|m| m.last().cloned())
        .expect("the heartbeat prompt");
    let prompt = prompt["content"].as_str().unwrap_or_default().to_string();
    assert!(prompt.contains("HEARTBEAT.md"), "{prompt}");
    assert!(prompt.contains("The backup finished"), "{prompt}");

    fake.push_reply(text("The basil looks dry: water it today."));
    client.call("wake", json!({"mode": "now"})).await;
    let (event, chats) = next_heartbeat(&mut client).await;
    assert_eq!(event["status"], "sent", "{event}");
    assert_eq!(event["sessionKey"], "agent:main:main");
    let delivered = chats
        .iter()
        .find(|c| c["state"] == "final")
        .expect("a chat final event");
    assert_eq!(
        delivered["message"]["content"][0]["text"],
        "The basil looks dry: water it today."
    );
    let last = client.call("last-heartbeat", json!({})).await;
    assert_eq!(last["payload"]["status"], "sent", "{last}");

    let paused = client
        .call("set-heartbeats", json!({"enabled": false}))
        .await;
    assert_eq!(paused["payload"], json!({"ok": true, "enabled": false}));
    let bad = client.call("set-heartbeats", json!({})).await;
    assert_eq!(bad["ok"], false, "{bad}");
    let bad_mode = client.call("wake", json!({"mode": "later"})).await;
    assert_eq!(bad_mode["ok"], false, "{bad_mode}");
}

/// Polls before a test gives up (100 ms apart).
const MAX_POLLS: usize = 300;

/// A gateway on the fake provider with `heartbeat` as `agents.defaults.heartbeat`, a HEARTBEAT.md with
/// one task, and an operator connection.
async fn start_with_heartbeat(fake: &FakeOpenAi, heartbeat: &str) -> (GatewayProcess, TestClient) {
    let config = format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
                                   models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }}, heartbeat: {heartbeat} }} }},
}}"#,
        fake.base_url()
    );
    let gateway = GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN]);
    let workspace = gateway.data_dir().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(
        workspace.join("HEARTBEAT.md"),
        "- water the basil when dry\n",
    )
    .expect("write");
    std::fs::write(workspace.join("AGENTS.md"), "AGENTS-RULES: be brief\n").expect("write");
    let (client, _) =
        TestClient::connect(&gateway.url(), Some(TOKEN), SCOPES, Some(&Device::new(6))).await;
    (gateway, client)
}

/// `(role, text)` of the main session's history.
async fn main_history(client: &mut TestClient) -> Vec<(String, String)> {
    let res = client
        .call("chat.history", json!({"sessionKey": "main"}))
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

/// The `sessions.list` row of `key`.
async fn session_row(client: &mut TestClient, key: &str) -> Option<Value> {
    let res = client.call("sessions.list", json!({})).await;
    res["payload"]["sessions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .find(|row| row["key"] == key)
}

/// One ordinary exchange in the main session (the fake echoes), finished.
async fn chat_once(client: &mut TestClient) {
    let sent = json!({"sessionKey": "main", "message": "hello there", "idempotencyKey": "c1"});
    assert_eq!(client.call("chat.send", sent).await["ok"], true);
    for _ in 0..MAX_POLLS {
        if main_history(client).await.len() == 2 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the chat turn never finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_heartbeat_leaves_the_main_session_as_it_was_and_a_message_stays() {
    let fake = FakeOpenAi::start().await;
    let (_gateway, mut client) = start_with_heartbeat(&fake, "{}").await;
    chat_once(&mut client).await;
    let before = main_history(&mut client).await;
    let updated_before = session_row(&mut client, "agent:main:main")
        .await
        .expect("row")["updatedAt"]
        .clone();
    // Apart from the clock tick, the session's updatedAt would move with any write.
    tokio::time::sleep(Duration::from_millis(20)).await;

    fake.push_reply(text("HEARTBEAT_OK"));
    client.call("wake", json!({"mode": "now"})).await;
    let (event, _) = next_heartbeat(&mut client).await;
    assert_eq!(event["status"], "ok-token", "{event}");
    assert_eq!(main_history(&mut client).await, before);
    let row = session_row(&mut client, "agent:main:main")
        .await
        .expect("row");
    assert_eq!(row["updatedAt"], updated_before, "{row}");

    // Without includeReasoning the model's reasoning never reaches anyone.
    fake.push_reply(FakeReply::Reasoning {
        thinking: vec!["SECRET-THOUGHT".into()],
        chunks: vec!["The basil is dry: water it.".into()],
    });
    client.call("wake", json!({"mode": "now"})).await;
    let (event, chats) = next_heartbeat(&mut client).await;
    assert_eq!(event["status"], "sent", "{event}");
    assert!(
        !format!("{chats:?}").contains("SECRET-THOUGHT"),
        "{chats:?}"
    );
    let after = main_history(&mut client).await;
    assert_eq!(after.len(), before.len() + 2, "{after:?}");
    assert_eq!(after[..before.len()], before[..]);
    assert_eq!(
        after.last().map(|(_, t)| t.as_str()),
        Some("The basil is dry: water it.")
    );
    let row = session_row(&mut client, "agent:main:main")
        .await
        .expect("row");
    assert!(row["updatedAt"].as_u64() > updated_before.as_u64(), "{row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_heartbeat_runs_without_history_and_never_touches_the_main_transcript() {
    let fake = FakeOpenAi::start().await;
    let (_gateway, mut client) = start_with_heartbeat(&fake, "{ isolatedSession: true }").await;
    chat_once(&mut client).await;
    let before = main_history(&mut client).await;

    for reply in ["The basil is dry.", "Still dry."] {
        fake.push_reply(text(reply));
        client.call("wake", json!({"mode": "now"})).await;
        let (event, chats) = next_heartbeat(&mut client).await;
        assert_eq!(event["status"], "sent", "{event}");
        assert_eq!(event["sessionKey"], "agent:main:main:heartbeat");
        let shown = chats
            .iter()
            .find(|c| c["state"] == "final")
            .expect("delivered");
        assert_eq!(shown["sessionKey"], "agent:main:main");
    }
    assert_eq!(main_history(&mut client).await, before);
    let requests = fake.requests();
    let second_beat = &requests[requests.len() - 1].body["messages"];
    let roles: Vec<&str> = second_beat
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(
        roles,
        ["system", "user"],
        "no history reaches an isolated heartbeat"
    );
    assert!(!second_beat.to_string().contains("hello there"));
    assert!(session_row(&mut client, "agent:main:main:heartbeat")
        .await
        .is_some());
}

/// The system prompt of one request the fake received.
fn system_prompt_of(fake: &FakeOpenAi, index: usize) -> String {
    fake.requests()[index].body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_light_context_heartbeat_sees_heartbeat_md_but_not_the_other_bootstrap_files() {
    let fake = FakeOpenAi::start().await;
    let (_gateway, mut client) = start_with_heartbeat(&fake, "{ lightContext: true }").await;
    chat_once(&mut client).await;
    let chat_prompt = system_prompt_of(&fake, 0);
    assert!(chat_prompt.contains("AGENTS-RULES"), "{chat_prompt}");

    fake.push_reply(text("HEARTBEAT_OK"));
    client.call("wake", json!({"mode": "now"})).await;
    let (event, _) = next_heartbeat(&mut client).await;
    assert_eq!(event["status"], "ok-token", "{event}");
    let beat_prompt = system_prompt_of(&fake, 1);
    assert!(
        beat_prompt.contains("water the basil when dry"),
        "{beat_prompt}"
    );
    assert!(!beat_prompt.contains("AGENTS-RULES"), "{beat_prompt}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn include_reasoning_delivers_the_reasoning_before_the_reply() {
    let fake = FakeOpenAi::start().await;
    let (_gateway, mut client) = start_with_heartbeat(&fake, "{ includeReasoning: true }").await;
    fake.push_reply(FakeReply::Reasoning {
        thinking: vec!["The soil ".into(), "looks dry.".into()],
        chunks: vec!["Water the basil today.".into()],
    });
    client.call("wake", json!({"mode": "now"})).await;
    let (event, chats) = next_heartbeat(&mut client).await;
    assert_eq!(event["status"], "sent", "{event}");
    let shown: Vec<&str> = chats
        .iter()
        .filter(|c| c["state"] == "final")
        .filter_map(|c| c["message"]["content"][0]["text"].as_str())
        .collect();
    assert_eq!(
        shown,
        [
            "Reasoning:\n_The soil looks dry._",
            "Water the basil today."
        ],
        "{chats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_execs_exit_runs_a_heartbeat_with_the_event() {
    let fake = FakeOpenAi::start().await;
    let (_gateway, mut client) = start_with_heartbeat(&fake, "{}").await;
    let args = json!({"command": "sleep 1; echo notify-wired", "background": true});
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![("c1".into(), "exec".into(), args.to_string())],
    });
    fake.push_reply(text("started it"));
    let sent = json!({"sessionKey": "main", "message": "run it", "idempotencyKey": "bg-exit"});
    assert_eq!(client.call("chat.send", sent).await["ok"], true);
    // No wake from anyone: the run's exit alone brings the heartbeat, with the event in its prompt.
    let (event, _) = tokio::time::timeout(Duration::from_secs(30), next_heartbeat(&mut client))
        .await
        .expect("no heartbeat followed the run's exit");
    assert_ne!(event["status"], "skipped", "{event}");
    let requests = fake.requests();
    let heartbeat = requests
        .iter()
        .find(|r| {
            r.body
                .to_string()
                .contains("System events since the last heartbeat")
        })
        .expect("a heartbeat request");
    let body = heartbeat.body.to_string();
    assert!(
        body.contains("Exec completed (bg") && body.contains("code 0) :: notify-wired"),
        "{body}"
    );
}
