//! `sessions_send` through the real gateway: the model of one session sends a
//! message into another session, which runs its own turn (seen by `chat`
//! readers like a `chat.send` run), and the reply comes back as the tool
//! result; with `timeoutSeconds: 0` the tool answers `accepted` at once.

mod support;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::{config_with_provider, GatewayProcess};
use support::ws_client::{Device, Read, TestClient};

const TOKEN: &str = "sessions-send-token";

fn send_call(id: &str, args: Value) -> FakeReply {
    FakeReply::ToolCalls {
        calls: vec![(id.into(), "sessions_send".into(), args.to_string())],
    }
}

fn text(t: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![t.into()],
        delay_ms: 0,
    }
}

fn start(fake: &FakeOpenAi) -> GatewayProcess {
    let config = config_with_provider(&fake.base_url()).replacen(
        '{',
        "{ tools: { sessions: { visibility: \"agent\" } },",
        1,
    );
    GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN])
}

async fn connect(gateway: &GatewayProcess, seed: u8) -> TestClient {
    let device = Device::new(seed);
    let (client, _) = TestClient::connect(
        &gateway.url(),
        Some(TOKEN),
        &["operator.read", "operator.write"],
        Some(&device),
    )
    .await;
    client
}

/// Runs an `agent` turn in the main session; returns the final `res` and
/// every `chat` final event seen meanwhile, by session key.
async fn run(client: &mut TestClient, key: &str) -> (Value, Vec<(String, String)>) {
    let id = client
        .request(
            "agent",
            json!({"message": "ask ops", "idempotencyKey": key}),
        )
        .await;
    let mut finals = Vec::new();
    loop {
        let Read::Frame(frame) = client.read().await else {
            panic!("closed during the run")
        };
        let payload = &frame["payload"];
        if frame["event"] == "chat" && payload["state"] == "final" {
            finals.push((
                payload["sessionKey"].as_str().unwrap_or("").to_string(),
                payload["message"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            ));
        }
        if frame["type"] == "res" && frame["id"] == id.as_str() && payload["status"] != "accepted" {
            return (frame, finals);
        }
    }
}

fn tool_result(request: &Value) -> Value {
    let content = request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "tool"))
        .and_then(|m| m["content"].as_str())
        .expect("a tool result");
    serde_json::from_str(content).expect("the result is JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_to_another_session_runs_there_and_its_reply_comes_back() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(send_call(
        "c1",
        json!({"sessionKey": "ops", "message": "ping", "timeoutSeconds": 30}),
    ));
    fake.push_reply(text("pong"));
    fake.push_reply(text("ops said pong"));
    let gateway = start(&fake);
    let mut client = connect(&gateway, 40).await;
    let (res, finals) = run(&mut client, "send-1").await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(
        res["payload"]["result"]["payloads"][0]["text"],
        "ops said pong"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    let target = &requests[1].body["messages"];
    let system = target[0]["content"].as_str().expect("system prompt");
    assert!(
        system.contains("agent:main:main"),
        "the target knows the sender"
    );
    let last = target.as_array().and_then(|m| m.last()).expect("messages");
    assert_eq!(
        (last["role"].as_str(), last["content"].as_str()),
        (Some("user"), Some("ping"))
    );
    let result = tool_result(&requests[2].body);
    assert_eq!(result["status"], "ok", "{result}");
    assert_eq!(result["reply"], "pong");
    assert_eq!(result["sessionKey"], "agent:main:ops");
    assert!(
        finals.contains(&("agent:main:ops".into(), "pong".into())),
        "chat readers saw the target's run: {finals:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fire_and_forget_answers_accepted_and_sending_to_itself_is_refused() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![
            (
                "c1".into(),
                "sessions_send".into(),
                json!({"sessionKey": "main", "message": "me?"}).to_string(),
            ),
            (
                "c2".into(),
                "sessions_send".into(),
                json!({"sessionKey": "ops", "message": "later", "timeoutSeconds": 0}).to_string(),
            ),
        ],
    });
    // Whichever asks next: the ops run or the requester's second step.
    fake.push_reply(text("noted"));
    fake.push_reply(text("noted"));
    let gateway = start(&fake);
    let mut client = connect(&gateway, 41).await;
    let (res, _) = run(&mut client, "send-2").await;
    assert_eq!(res["ok"], true, "{res}");
    // The fire-and-forget run may still be on its way to the model.
    for _ in 0..200 {
        if fake.requests().len() >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let requests = fake.requests();
    let step = requests
        .iter()
        .find(|r| {
            r.body["messages"]
                .to_string()
                .contains("\"tool_call_id\":\"c2\"")
        })
        .expect("the requester's second step");
    let results: Vec<Value> = step.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap_or("")).expect("JSON"))
        .collect();
    assert_eq!(results[0]["status"], "error");
    assert!(results[0]["error"]
        .as_str()
        .is_some_and(|e| e.contains("current session")));
    assert_eq!(results[1]["status"], "accepted");
    let ops = requests
        .iter()
        .filter(|r| {
            r.body["messages"]
                .to_string()
                .contains("\"content\":\"later\"")
        })
        .count();
    let me = requests
        .iter()
        .filter(|r| {
            r.body["messages"]
                .to_string()
                .contains("\"content\":\"me?\"")
        })
        .count();
    assert_eq!((ops, me), (1, 0), "only the ops session ran a turn");
}
