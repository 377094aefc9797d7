//! The heartbeat through a real gateway process and the fake OpenAI provider: `wake {mode: now}` runs a
//! heartbeat turn in the main session; a `HEARTBEAT_OK` reply is swallowed (no `chat` event reaches
//! clients) while any other reply is delivered to them as a `chat` final event; `last-heartbeat` and the
//! `heartbeat` event report what happened; `set-heartbeats` pauses the interval.

mod support;

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
