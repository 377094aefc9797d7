//! `sessions_send` through the real gateway: the model of one session sends a
//! message into another session, which runs its own turn (seen by `chat`
//! readers like a `chat.send` run), and the reply comes back as the tool
//! result; with `timeoutSeconds: 0` the tool answers `accepted` at once.
//! Afterwards the two sessions answer each other for up to
//! `session.agentToAgent.maxPingPongTurns` rounds, then the target runs an
//! announce step.

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
    start_with(fake, "")
}

fn start_with(fake: &FakeOpenAi, extra: &str) -> GatewayProcess {
    let config = config_with_provider(&fake.base_url()).replacen(
        '{',
        &format!("{{ tools: {{ sessions: {{ visibility: \"agent\" }} }}, {extra}"),
        1,
    );
    GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN])
}

const REPLY_STEP: &str = "Agent-to-agent reply step";
const ANNOUNCE_STEP: &str = "Agent-to-agent announce step";

/// Ends the flow after a send at once: the first reply round answers
/// `REPLY_SKIP`, the announce step `ANNOUNCE_SKIP`.
fn skip_the_flow(fake: &FakeOpenAi) {
    fake.push_reply_for_system(REPLY_STEP, text("REPLY_SKIP"));
    fake.push_reply_for_system(ANNOUNCE_STEP, text("ANNOUNCE_SKIP"));
}

/// Waits until the fake has seen `count` requests; returns them.
async fn requests_when(
    fake: &FakeOpenAi,
    count: usize,
) -> Vec<support::fake_openai::RecordedRequest> {
    for _ in 0..400 {
        if fake.requests().len() >= count {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let requests = fake.requests();
    assert!(requests.len() >= count, "only {} requests", requests.len());
    requests
}

fn system_of(request: &support::fake_openai::RecordedRequest) -> String {
    request.body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

fn last_user_text(request: &support::fake_openai::RecordedRequest) -> String {
    request.body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string()
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

/// The barrier before checking the fake's request log once an agent-to-agent flow with `ops`
/// ran: the final of its announce step (answered `ANNOUNCE_SKIP`, which posts nothing), the
/// last step the flow waits for. `finals` are those [`run`] already read.
async fn flow_ended(client: &mut TestClient, finals: &[(String, String)]) {
    let announce =
        |session: &str, text: &str| session == "agent:main:ops" && text == "ANNOUNCE_SKIP";
    if finals.iter().any(|(session, text)| announce(session, text)) {
        return;
    }
    client
        .event_where("chat", |p| {
            p["state"] == "final"
                && announce(
                    p["sessionKey"].as_str().unwrap_or(""),
                    p["message"]["content"][0]["text"].as_str().unwrap_or(""),
                )
        })
        .await;
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
    skip_the_flow(&fake);
    let gateway = start(&fake);
    let mut client = connect(&gateway, 40).await;
    let (res, finals) = run(&mut client, "send-1").await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(
        res["payload"]["result"]["payloads"][0]["text"],
        "ops said pong"
    );
    // Then one reply round (the requester answers REPLY_SKIP) and the
    // target's announce step (ANNOUNCE_SKIP): five model calls in all.
    let requests = requests_when(&fake, 5).await;
    assert_eq!(requests.len(), 5);
    assert!(system_of(&requests[3]).contains("Turn 1 of 5"));
    assert_eq!(last_user_text(&requests[3]), "pong");
    assert!(system_of(&requests[4]).contains("Original request: ping"));
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
    skip_the_flow(&fake);
    let gateway = start(&fake);
    let mut client = connect(&gateway, 41).await;
    let (res, finals) = run(&mut client, "send-2").await;
    assert_eq!(res["ok"], true, "{res}");
    // The fire-and-forget run and the flow after it: every request they make comes before the
    // flow's announce step ends.
    flow_ended(&mut client, &finals).await;
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
        .filter(|r| last_user_text(r) == "later")
        .count();
    let me = requests
        .iter()
        .filter(|r| last_user_text(r) == "me?")
        .count();
    assert_eq!((ops, me), (1, 0), "only the ops session ran a turn");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_reply_the_sessions_answer_each_other_then_the_target_announces() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(send_call(
        "c1",
        json!({"sessionKey": "ops", "message": "status?", "timeoutSeconds": 30}),
    ));
    fake.push_reply(text("all green"));
    fake.push_reply(text("ops is green"));
    // Round 1: the requester answers; round 2: ops answers; the limit is 2.
    fake.push_reply_for_system("Turn 1 of 2", text("thanks, any alerts?"));
    fake.push_reply_for_system("Turn 2 of 2", text("none"));
    fake.push_reply_for_system(ANNOUNCE_STEP, text("ANNOUNCE_SKIP"));
    let gateway = start_with(&fake, "session: { agentToAgent: { maxPingPongTurns: 2 } },");
    let mut client = connect(&gateway, 42).await;
    let (res, finals) = run(&mut client, "send-3").await;
    assert_eq!(res["ok"], true, "{res}");
    let requests = requests_when(&fake, 6).await;
    let steps: Vec<(String, String)> = requests[3..]
        .iter()
        .map(|r| {
            let system = system_of(r);
            let kind = if system.contains("Turn 1 of 2") {
                "round 1"
            } else if system.contains("Turn 2 of 2") {
                "round 2"
            } else if system.contains(ANNOUNCE_STEP) {
                "announce"
            } else {
                "other"
            };
            (kind.to_string(), last_user_text(r))
        })
        .collect();
    assert_eq!(
        steps,
        vec![
            ("round 1".to_string(), "all green".to_string()),
            ("round 2".to_string(), "thanks, any alerts?".to_string()),
            (
                "announce".to_string(),
                "Agent-to-agent announce step.".to_string()
            ),
        ]
    );
    assert!(system_of(&requests[5]).contains("Latest reply: none"));
    assert!(system_of(&requests[3]).contains("Agent 1 (requester) session: agent:main:main"));
    // Nothing more: the flow is over.
    flow_ended(&mut client, &finals).await;
    assert_eq!(fake.requests().len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_pong_limit_above_five_is_refused_naming_the_key() {
    let fake = FakeOpenAi::start().await;
    let config = config_with_provider(&fake.base_url()).replacen(
        '{',
        "{ session: { agentToAgent: { maxPingPongTurns: 9 } },",
        1,
    );
    let (status, stderr) = GatewayProcess::refuse(&config, &["--port", "0", "--token", TOKEN]);
    assert!(!status.success());
    assert!(
        stderr.contains("session.agentToAgent.maxPingPongTurns"),
        "{stderr}"
    );
}
