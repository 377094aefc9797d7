//! The web chat goes through the same command queue as the chat channels:
//! `chat.send` while a run is busy follows `messages.queue` (collect merges
//! the waiting messages into one turn, interrupt aborts the running turn),
//! observed over the real WebSocket protocol against the real binary; chat
//! commands are answered by the command handlers, never by the agent.

mod support;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::GatewayProcess;
use support::ws_client::{Device, Read, TestClient};

const TOKEN: &str = "webchat-queue-token";

fn start(fake: &FakeOpenAi, queue: &str) -> GatewayProcess {
    GatewayProcess::start(&config(fake, queue), &["--port", "0", "--token", TOKEN])
}

fn config(fake: &FakeOpenAi, queue: &str) -> String {
    config_with_defaults(fake, queue, "")
}

/// The config with extra `agents.defaults` keys (`extra` ends with a comma when set).
fn config_with_defaults(fake: &FakeOpenAi, queue: &str, extra: &str) -> String {
    format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
                                   models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ {extra} model: {{ primary: "fake/gpt-test" }} }} }},
  messages: {{ queue: {queue} }},
}}"#,
        fake.base_url()
    )
}

async fn client(gateway: &GatewayProcess, seed: u8) -> TestClient {
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

fn send(key: &str, message: &str) -> Value {
    json!({"sessionKey": "main", "message": message, "idempotencyKey": key})
}

/// Reads until a `chat` event of `run_id` in `state`; returns its payload.
async fn chat_event(client: &mut TestClient, run_id: &str, state: &str) -> Value {
    client
        .event_where("chat", |p| p["runId"] == run_id && p["state"] == state)
        .await
}

/// Sends `message` and reads until both its `res` and its `chat` final came
/// (a command's answer can be broadcast before the request's `res` is
/// written: they travel on different tasks).
async fn send_and_final(client: &mut TestClient, key: &str, message: &str) -> (Value, Value) {
    let id = client.request("chat.send", send(key, message)).await;
    let (mut ack, mut last) = (None, None);
    while ack.is_none() || last.is_none() {
        match client.read().await {
            Read::Frame(f) if f["type"] == "res" && f["id"] == id.as_str() => ack = Some(f),
            Read::Frame(f)
                if f["event"] == "chat"
                    && f["payload"]["runId"] == key
                    && f["payload"]["state"] == "final" =>
            {
                // A client may start listening on the `res`: it comes first.
                assert!(ack.is_some(), "the final of {key} came before its res");
                last = Some(f["payload"].clone())
            }
            Read::Frame(_) => {}
            Read::Closed { code, reason } => panic!("closed ({code} {reason})"),
        }
    }
    (ack.expect("res"), last.expect("final"))
}

fn user_text(fake: &FakeOpenAi, index: usize) -> String {
    let messages = fake.requests()[index].body["messages"]
        .as_array()
        .expect("messages")
        .clone();
    let user = messages
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .expect("a user message");
    user["content"]
        .as_str()
        .map_or_else(|| user["content"].to_string(), str::to_string)
}

#[tokio::test]
async fn collect_mode_merges_chat_sends_made_while_busy() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Working ".into(), "on ".into(), "it.".into()],
        delay_ms: 400,
    });
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Both noted.".into()],
        delay_ms: 0,
    });
    let gateway = start(&fake, r#"{ mode: "collect", debounceMs: 100 }"#);
    let mut client = client(&gateway, 31).await;
    let ack = client.call("chat.send", send("c-1", "first task")).await;
    assert_eq!(ack["payload"], json!({"runId": "c-1", "status": "started"}));
    chat_event(&mut client, "c-1", "delta").await;
    for (key, text) in [("c-2", "second task"), ("c-3", "third task")] {
        let ack = client.call("chat.send", send(key, text)).await;
        assert_eq!(ack["payload"]["status"], "started", "{ack}");
    }
    let first = chat_event(&mut client, "c-1", "final").await;
    assert_eq!(first["message"]["content"][0]["text"], "Working on it.");
    let merged = chat_event(&mut client, "c-3", "final").await;
    assert_eq!(merged["message"]["content"][0]["text"], "Both noted.");
    assert_eq!(fake.requests().len(), 2, "two waiting messages, one turn");
    let prompt = user_text(&fake, 1);
    assert!(
        prompt.contains("[Queued messages while agent was busy]")
            && prompt.contains("second task")
            && prompt.contains("third task"),
        "{prompt}"
    );
    // The merged message's own key is settled too (just after the final
    // event goes out), so a retry does not run it again.
    let mut replay = Value::Null;
    for _ in 0..50 {
        replay = client.call("chat.send", send("c-2", "second task")).await;
        if replay["payload"]["status"] != "in_flight" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(replay["payload"]["status"], "ok", "{replay}");
    assert_eq!(fake.requests().len(), 2, "the replay did not run again");
}

#[tokio::test]
async fn interrupt_mode_aborts_the_running_chat_turn() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Hang {
        first_chunk: "Let me think".into(),
    });
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Fresh answer.".into()],
        delay_ms: 0,
    });
    let gateway = start(&fake, r#"{ mode: "interrupt" }"#);
    let mut client = client(&gateway, 32).await;
    client.call("chat.send", send("i-1", "slow question")).await;
    chat_event(&mut client, "i-1", "delta").await;
    // The interrupted run's `aborted` event and this request's `res` travel on different tasks:
    // either may come first.
    let id = client
        .request("chat.send", send("i-2", "never mind, quick one"))
        .await;
    let (mut ack, mut aborted) = (None, false);
    while ack.is_none() || !aborted {
        match client.read().await {
            Read::Frame(f) if f["type"] == "res" && f["id"] == id.as_str() => ack = Some(f),
            Read::Frame(f)
                if f["event"] == "chat"
                    && f["payload"]["runId"] == "i-1"
                    && f["payload"]["state"] == "aborted" =>
            {
                aborted = true
            }
            Read::Frame(_) => {}
            Read::Closed { code, reason } => panic!("closed ({code} {reason})"),
        }
    }
    assert_eq!(ack.expect("res")["payload"]["status"], "started");
    let fresh = chat_event(&mut client, "i-2", "final").await;
    assert_eq!(fresh["message"]["content"][0]["text"], "Fresh answer.");
    fake.wait_for_disconnects(1).await;
    assert!(user_text(&fake, 1).contains("quick one"));
}

#[tokio::test]
async fn followup_mode_answers_each_waiting_message_in_its_own_turn() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec!["One ".into(), "moment.".into()],
        delay_ms: 400,
    });
    let gateway = start(&fake, r#"{ mode: "followup", debounceMs: 50 }"#);
    let mut client = client(&gateway, 33).await;
    client.call("chat.send", send("f-1", "first")).await;
    chat_event(&mut client, "f-1", "delta").await;
    client.call("chat.send", send("f-2", "second")).await;
    client.call("chat.send", send("f-3", "third")).await;
    for key in ["f-1", "f-2", "f-3"] {
        chat_event(&mut client, key, "final").await;
    }
    let prompts: Vec<String> = (0..3).map(|i| user_text(&fake, i)).collect();
    assert_eq!(fake.requests().len(), 3, "{prompts:?}");
    assert!(prompts[1].contains("second") && !prompts[1].contains("third"));
    assert!(prompts[2].contains("third"));
    // Nothing else is left running once the last run is recorded as done.
    let waited = client
        .call("agent.wait", json!({"runId": "f-3", "timeoutMs": 10_000}))
        .await;
    assert_eq!(waited["payload"]["status"], "ok", "{waited}");
    let status = client
        .call("chat.abort", json!({"sessionKey": "main"}))
        .await;
    assert_eq!(status["payload"]["aborted"], false, "{status}");
}

#[tokio::test]
async fn chat_commands_are_answered_without_the_agent() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake, r#"{ mode: "collect" }"#);
    let mut client = client(&gateway, 34).await;
    let (ack, status) = send_and_final(&mut client, "cmd-1", "/status").await;
    assert_eq!(
        ack["payload"],
        json!({"runId": "cmd-1", "status": "started"})
    );
    let text = status["message"]["content"][0]["text"]
        .as_str()
        .expect("text")
        .to_string();
    assert!(text.contains("Session: agent:main:main"), "{text}");
    let (_, think) = send_and_final(&mut client, "cmd-2", "/think low").await;
    assert_eq!(
        think["message"]["content"][0]["text"],
        "Thinking level set to low."
    );
    assert!(fake.requests().is_empty(), "no command reached the model");
}

#[tokio::test]
async fn steer_mode_puts_a_message_into_the_running_turn_before_its_next_model_call() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![(
            "t1".into(),
            "exec".into(),
            json!({"command": "sleep 2"}).to_string(),
        )],
    });
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Switching to the blue one.".into()],
        delay_ms: 0,
    });
    let gateway = start(&fake, r#"{ mode: "steer" }"#);
    let mut client = client(&gateway, 34).await;
    let ack = client
        .call("chat.send", send("s-1", "paint the fence"))
        .await;
    assert_eq!(ack["payload"]["status"], "started", "{ack}");
    for _ in 0..200 {
        if !fake.requests().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(fake.requests().len(), 1, "{}", gateway.stderr());
    // The model asked for a tool: the run is busy with it now.
    let ack = client
        .call("chat.send", send("s-2", "actually, use the blue paint"))
        .await;
    assert_eq!(ack["payload"]["status"], "started", "{ack}");
    let last = chat_event(&mut client, "s-1", "final").await;
    assert_eq!(
        last["message"]["content"][0]["text"], "Switching to the blue one.",
        "{last}"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "{}", gateway.stderr());
    let messages = requests[1].body["messages"].as_array().expect("messages");
    let tool_at = messages
        .iter()
        .position(|m| m["role"] == "tool")
        .expect("the tool result");
    let steered_at = messages
        .iter()
        .position(|m| m["role"] == "user" && m["content"].to_string().contains("blue paint"))
        .expect("the steered message reached the model");
    assert!(steered_at > tool_at, "after the tool result: {messages:?}");
    // Barrier: a later message runs after whatever the session still holds, so once its
    // final came a follow-up run of the steered message would have asked the model first.
    send_and_final(&mut client, "s-3", "thanks").await;
    assert_eq!(
        fake.requests().len(),
        3,
        "a steered message is not run again as a follow-up"
    );
    assert_eq!(user_text(&fake, 2), "thanks", "the third request is s-3's");
    let history = client
        .call("chat.history", json!({"sessionKey": "main"}))
        .await;
    assert!(
        history.to_string().contains("actually, use the blue paint"),
        "the steered message is in the transcript: {history}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_message_survives_a_crash_and_is_answered_once_after_the_restart() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Hello.".into()],
        delay_ms: 0,
    });
    fake.push_reply(FakeReply::Hang {
        first_chunk: "Let me ".into(),
    });
    let config = config(&fake, r#"{ mode: "collect" }"#);
    let args = ["--port", "0", "--token", TOKEN];
    let mut gateway = GatewayProcess::start(&config, &args);
    let mut first = client(&gateway, 35).await;
    // A finished turn leaves nothing to replay.
    send_and_final(&mut first, "dur-0", "hello").await;
    let ack = first.call("chat.send", send("dur-1", "buy oat milk")).await;
    assert_eq!(ack["payload"]["status"], "started", "{ack}");
    for _ in 0..400 {
        if fake.requests().len() >= 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(fake.requests().len(), 2, "the run reached the model");
    drop(first);
    gateway.crash_and_restart(&config, &args);
    // The replayed run gets the fake's default echo answer.
    for _ in 0..400 {
        if fake.requests().len() >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let mut reader = client(&gateway, 36).await;
    let mut history = Value::Null;
    for _ in 0..200 {
        history = reader
            .call("chat.history", json!({"sessionKey": "main"}))
            .await;
        let done = history["payload"]["messages"]
            .as_array()
            .is_some_and(|m| m.iter().filter(|m| m["role"] == "assistant").count() >= 2);
        if done {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let messages = history["payload"]["messages"].as_array().expect("messages");
    let users = messages.iter().filter(|m| m["role"] == "user").count();
    assert_eq!(users, 2, "each user turn is recorded once: {history}");
    let answers = messages.iter().filter(|m| m["role"] == "assistant").count();
    assert_eq!(answers, 2, "answered after the restart: {history}");
    // Barrier: a new message runs after whatever the session still holds, so once its final
    // came a second replay of the unfinished message would have asked the model first.
    send_and_final(&mut reader, "dur-2", "and bread").await;
    assert_eq!(fake.requests().len(), 4, "run again once after the restart");
    assert_eq!(user_text(&fake, 2), "buy oat milk");
    assert_eq!(user_text(&fake, 3), "and bread");
    // Nothing is left to replay: after another crash the inbox holds no web chat message.
    drop(reader);
    // SAFETY: kill only signals the gateway child this test started.
    unsafe { libc::kill(gateway.child.id() as i32, libc::SIGKILL) };
    gateway.child.wait().expect("the crashed gateway is reaped");
    let store = pincer::store::Store::open(
        &gateway.data_dir().join("store"),
        pincer::store::StoreOptions::default(),
    )
    .expect("the crashed gateway's store opens");
    let left = pincer::channels::inbox::pending_webchat(&store).await;
    assert!(
        left.is_empty(),
        "web chat messages left to replay: {:?}",
        left.iter().map(|(key, _)| key).collect::<Vec<_>>()
    );
}

/// The web chat's fold: a message to an idle session is kept (its inbox record) with its turn's user entry in
/// one commit made before the `res`, so a SIGKILL right after the ack finds both on disk, and the turn after
/// the restart answers it without recording it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_to_an_idle_session_is_on_disk_with_its_user_turn_when_acknowledged() {
    let fake = FakeOpenAi::start().await;
    // Slow enough that the killed gateway never records a reply; the run after the restart gets it (or
    // the fake's default answer, when the first run had taken it).
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Watered.".into()],
        delay_ms: 1_000,
    });
    let config = config(&fake, r#"{ mode: "collect" }"#);
    let args = ["--port", "0", "--token", TOKEN];
    let mut gateway = GatewayProcess::start(&config, &args);
    let mut first = client(&gateway, 38).await;
    let ack = first
        .call("chat.send", send("fold-1", "water the plants"))
        .await;
    assert_eq!(ack["payload"]["status"], "started", "{ack}");
    // SAFETY: kill only signals the gateway child this test started.
    unsafe { libc::kill(gateway.child.id() as i32, libc::SIGKILL) };
    gateway.child.wait().expect("the killed gateway is reaped");
    drop(first);
    let store = pincer::store::Store::open(
        &gateway.data_dir().join("store"),
        pincer::store::StoreOptions::default(),
    )
    .expect("the killed gateway's store opens");
    let kept = pincer::channels::inbox::pending_webchat(&store).await;
    assert_eq!(kept.len(), 1, "the acknowledged message is kept");
    let session = store
        .session("agent:main:main")
        .expect("read")
        .expect("the session was created with the message");
    let tail = store
        .transcript_tail(&session.session_id, 5)
        .expect("transcript");
    let users: Vec<_> = tail
        .iter()
        .map(|(_, entry)| {
            (
                entry.role.as_str(),
                entry.text.as_str(),
                entry.run_id.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        users,
        vec![("user", "water the plants", Some("fold-1"))],
        "the user turn was committed with the ack"
    );
    drop(store);
    gateway.crash_and_restart(&config, &args);
    let mut reader = client(&gateway, 39).await;
    let mut history = Value::Null;
    for _ in 0..200 {
        history = reader
            .call("chat.history", json!({"sessionKey": "main"}))
            .await;
        let answered = history["payload"]["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "assistant"));
        if answered {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let messages = history["payload"]["messages"].as_array().expect("messages");
    let roles: Vec<_> = messages.iter().map(|m| m["role"].clone()).collect();
    assert_eq!(roles, ["user", "assistant"], "answered once: {history}");
}

/// One gate for every run: with `agents.defaults.maxConcurrent: 1` a web chat turn in one session waits
/// for an `agent` run in another session (the board's own main lane would let both run), and starts as
/// soon as that run ends.
#[tokio::test]
async fn max_concurrent_one_makes_an_agent_run_and_a_chat_turn_take_turns() {
    let fake = FakeOpenAi::start().await;
    let held = std::sync::Arc::new(tokio::sync::Notify::new());
    fake.push_reply(FakeReply::Held {
        gate: held.clone(),
        then: Box::new(FakeReply::Text {
            chunks: vec!["Agent done.".into()],
            delay_ms: 0,
        }),
    });
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Chat done.".into()],
        delay_ms: 0,
    });
    let config = config_with_defaults(&fake, r#"{ mode: "collect" }"#, "maxConcurrent: 1,");
    let gateway = GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN]);
    let mut client = client(&gateway, 36).await;
    let agent =
        json!({"message": "long job", "sessionKey": "agent:main:other", "idempotencyKey": "a-1"});
    let accepted = client.call("agent", agent).await;
    assert_eq!(accepted["payload"]["status"], "accepted", "{accepted}");
    for _ in 0..200 {
        if !fake.requests().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(fake.requests().len(), 1, "the agent run reached the model");
    let ack = client.call("chat.send", send("w-1", "hello")).await;
    assert_eq!(ack["payload"]["status"], "started", "{ack}");
    // The gate reports the chat turn waiting for the main lane's one slot (health's lane figures);
    // only then is "the model was not asked again" a statement about the gate.
    let mut waiting = json!(null);
    for _ in 0..500 {
        let health = client.call("health", json!({})).await;
        let main = health["payload"]["queues"]["lanes"]
            .as_array()
            .and_then(|lanes| lanes.iter().find(|lane| lane["lane"] == "main"))
            .cloned()
            .unwrap_or_default();
        if main["waiting"] == 1 {
            waiting = main;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        waiting["busy"], 1,
        "the chat turn never waited for the main lane: {waiting}"
    );
    assert_eq!(
        fake.requests().len(),
        1,
        "the chat turn waits for the one main-lane slot"
    );
    held.notify_one();
    let done = chat_event(&mut client, "w-1", "final").await;
    assert_eq!(done["message"]["content"][0]["text"], "Chat done.");
    assert_eq!(fake.requests().len(), 2);
}

/// The main session's id as `sessions.list` shows it.
async fn main_session_id(client: &mut TestClient) -> String {
    let res = client.call("sessions.list", json!({})).await;
    res["payload"]["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|row| row["key"] == "agent:main:main")
        .and_then(|row| row["sessionId"].as_str())
        .expect("the main session is listed")
        .to_string()
}

#[tokio::test]
async fn a_reset_trigger_in_chat_send_starts_a_new_session_with_the_rest_as_its_message() {
    let fake = FakeOpenAi::start().await;
    let config =
        config(&fake, "{}").replacen('{', r#"{ session: { resetTriggers: ["start over"] },"#, 1);
    let gateway = GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN]);
    let mut client = client(&gateway, 31).await;
    send_and_final(&mut client, "t-1", "remember the word pelican").await;
    let first = main_session_id(&mut client).await;

    send_and_final(&mut client, "t-2", "Start over what was the word?").await;
    assert_ne!(main_session_id(&mut client).await, first);
    let turn = fake
        .requests()
        .into_iter()
        .map(|r| r.body["messages"].to_string())
        .rfind(|m| m.contains("what was the word?"))
        .expect("the rest of the message ran");
    assert!(!turn.contains("pelican"), "a fresh transcript: {turn}");
    assert!(!turn.to_lowercase().contains("start over"), "{turn}");
}
