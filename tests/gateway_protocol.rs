//! The gateway's WebSocket protocol as OpenClaw defines it: handshake,
//! refusals with upstream's errors and close codes, scopes, idempotency and
//! streamed runs — each failure closing one connection while the gateway keeps
//! serving others.

mod support;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::{config_with_provider, GatewayProcess};
use support::ws_client::{Device, Read, TestClient};

const TOKEN: &str = "protocol-test-token";

fn start(fake: &FakeOpenAi) -> GatewayProcess {
    GatewayProcess::start(
        &config_with_provider(&fake.base_url()),
        &["--port", "0", "--token", TOKEN],
    )
}

/// A still-working gateway answers `health` to a fresh client.
async fn assert_still_serving(gateway: &GatewayProcess) {
    let (mut client, _) = TestClient::connect(&gateway.url(), Some(TOKEN), &[], None).await;
    let res = client.call("health", json!({})).await;
    assert_eq!(res["ok"], true, "health after a refused client: {res}");
}

#[tokio::test]
async fn hello_ok_carries_protocol_methods_snapshot_policy_and_device_token() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let device = Device::new(1);
    let (_client, hello) = TestClient::connect(
        &gateway.url(),
        Some(TOKEN),
        &["operator.read", "operator.write"],
        Some(&device),
    )
    .await;
    assert_eq!(hello["type"], "hello-ok");
    assert_eq!(hello["protocol"], 4);
    let methods: Vec<&str> = hello["features"]["methods"]
        .as_array()
        .expect("methods")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for m in [
        "health",
        "chat.send",
        "agent",
        "sessions.list",
        "device.pair.approve",
    ] {
        assert!(methods.contains(&m), "{m} advertised");
    }
    assert_eq!(hello["policy"]["maxPayload"], 26_214_400);
    assert!(hello["policy"]["tickIntervalMs"].as_u64().is_some());
    assert_eq!(
        hello["snapshot"]["sessionDefaults"]["mainSessionKey"],
        "agent:main:main"
    );
    assert_eq!(
        hello["auth"]["scopes"],
        json!(["operator.read", "operator.write"])
    );
    assert!(
        hello["auth"]["deviceToken"]
            .as_str()
            .is_some_and(|t| t.len() >= 32),
        "device token issued"
    );
}

#[tokio::test]
async fn protocol_three_client_negotiates_three_and_too_old_gets_1002() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = TestClient::open(&gateway.url()).await;
    let mut params = client.connect_params(Some(TOKEN), &[], None);
    params["minProtocol"] = json!(3);
    params["maxProtocol"] = json!(3);
    let id = client.request("connect", params).await;
    assert_eq!(client.response(&id).await["payload"]["protocol"], 3);

    let mut old = TestClient::open(&gateway.url()).await;
    let mut params = old.connect_params(Some(TOKEN), &[], None);
    params["minProtocol"] = json!(1);
    params["maxProtocol"] = json!(2);
    let id = old.request("connect", params).await;
    let res = old.response(&id).await;
    assert_eq!(res["error"]["code"], "INVALID_REQUEST");
    assert_eq!(res["error"]["message"], "protocol mismatch");
    assert_eq!(res["error"]["details"]["expectedProtocol"], 4);
    assert_eq!(old.closed().await, (1002, "protocol mismatch".to_string()));
}

#[tokio::test]
async fn wrong_token_is_refused_with_1008_and_others_keep_working() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = TestClient::open(&gateway.url()).await;
    let params = client.connect_params(Some("wrong"), &[], None);
    let id = client.request("connect", params).await;
    let res = client.response(&id).await;
    assert_eq!(res["ok"], false);
    assert_eq!(res["error"]["code"], "INVALID_REQUEST");
    assert_eq!(res["error"]["details"]["code"], "AUTH_TOKEN_MISMATCH");
    assert!(res["error"]["message"]
        .as_str()
        .expect("message")
        .contains("token mismatch"));
    assert_eq!(client.closed().await.0, 1008);

    let mut missing = TestClient::open(&gateway.url()).await;
    let params = missing.connect_params(None, &[], None);
    let id = missing.request("connect", params).await;
    assert_eq!(
        missing.response(&id).await["error"]["details"]["code"],
        "AUTH_TOKEN_MISSING"
    );
    assert_still_serving(&gateway).await;
}

#[tokio::test]
async fn expired_signature_and_wrong_nonce_are_refused() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = TestClient::open(&gateway.url()).await;
    let mut stale = Device::new(2);
    stale.signed_at = Some(client.challenge_ts - 3 * 60 * 1000);
    let params = client.connect_params(Some(TOKEN), &["operator.read"], Some(&stale));
    let id = client.request("connect", params).await;
    let res = client.response(&id).await;
    assert_eq!(res["error"]["message"], "device signature expired");
    assert_eq!(
        res["error"]["details"]["code"],
        "DEVICE_AUTH_SIGNATURE_EXPIRED"
    );
    assert_eq!(client.closed().await.0, 1008);

    let mut client = TestClient::open(&gateway.url()).await;
    let mut wrong = Device::new(3);
    wrong.nonce = Some("not-the-challenge".into());
    let params = client.connect_params(Some(TOKEN), &["operator.read"], Some(&wrong));
    let id = client.request("connect", params).await;
    let res = client.response(&id).await;
    assert_eq!(
        res["error"]["details"]["code"],
        "DEVICE_AUTH_NONCE_MISMATCH"
    );
    assert_eq!(client.closed().await.0, 1008);
    assert_still_serving(&gateway).await;
}

#[tokio::test]
async fn first_frame_must_be_connect_and_garbage_closes_the_socket() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = TestClient::open(&gateway.url()).await;
    let id = client.request("health", json!({})).await;
    let res = client.response(&id).await;
    assert_eq!(
        res["error"]["message"],
        "invalid handshake: first request must be connect"
    );
    assert_eq!(
        client.closed().await,
        (1008, "invalid handshake".to_string())
    );

    let mut client = TestClient::open(&gateway.url()).await;
    client.send_text("{not json".into()).await;
    assert_eq!(
        client.closed().await,
        (1008, "invalid request frame".to_string())
    );

    let mut client = TestClient::open(&gateway.url()).await;
    let id = client
        .request(
            "connect",
            json!({"minProtocol": 3, "maxProtocol": 4, "client": {"id": "nope"}}),
        )
        .await;
    let res = client.response(&id).await;
    let message = res["error"]["message"].as_str().expect("message");
    assert!(
        message.starts_with("invalid connect params: client.id must be one of"),
        "{message}"
    );
    assert_still_serving(&gateway).await;
}

#[tokio::test]
async fn oversize_preauth_frame_closes_with_1009() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = TestClient::open(&gateway.url()).await;
    let padding = "x".repeat(70 * 1024);
    client
        .send_text(
            json!({"type": "req", "id": "1", "method": "connect", "params": {"pad": padding}})
                .to_string(),
        )
        .await;
    assert_eq!(
        client.closed().await,
        (1009, "preauth payload too large".to_string())
    );

    let mut huge = TestClient::open(&gateway.url()).await;
    // A frame far past the budget is cut off while it is still arriving.
    huge.send_big("y".repeat(4 * 1024 * 1024)).await;
    let (code, _) = huge.closed().await;
    assert!(
        code == 1009 || code == 1006,
        "huge pre-auth frame closed: {code}"
    );
    assert_still_serving(&gateway).await;
}

#[tokio::test]
async fn unknown_method_and_missing_scope_get_upstream_errors() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let admin = Device::new(4);
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(TOKEN),
        &["operator.admin"],
        Some(&admin),
    )
    .await;
    let res = client.call("no.such.method", json!({})).await;
    assert_eq!(res["error"]["code"], "INVALID_REQUEST");
    assert_eq!(res["error"]["message"], "unknown method: no.such.method");

    let reader = Device::new(5);
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(TOKEN),
        &["operator.read"],
        Some(&reader),
    )
    .await;
    let res = client
        .call(
            "chat.send",
            json!({"sessionKey": "main", "message": "hi", "idempotencyKey": "k"}),
        )
        .await;
    assert_eq!(res["error"]["code"], "FORBIDDEN", "v4 spelling: {res}");
    assert_eq!(res["error"]["message"], "missing scope: operator.write");
    assert_eq!(res["error"]["details"]["missingScope"], "operator.write");
    // The connection stays usable after a refused call.
    assert_eq!(client.call("sessions.list", json!({})).await["ok"], true);
}

#[tokio::test]
async fn agent_streams_events_then_final_and_replayed_key_does_not_rerun() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Hel".into(), "lo ".into(), "there".into()],
        delay_ms: 5,
    });
    let gateway = start(&fake);
    let device = Device::new(6);
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(TOKEN),
        &["operator.read", "operator.write"],
        Some(&device),
    )
    .await;
    let params = json!({"message": "say hello", "idempotencyKey": "run-1", "sessionKey": "main"});
    let id = client.request("agent", params.clone()).await;
    let mut deltas = String::new();
    let mut phases = Vec::new();
    let mut accepted = false;
    let final_res = loop {
        let Read::Frame(frame) = client.read().await else {
            panic!("closed during the run")
        };
        match (frame["type"].as_str(), frame["event"].as_str()) {
            (Some("res"), _) if frame["id"] == id && frame["payload"]["status"] == "accepted" => {
                accepted = true
            }
            (Some("res"), _) if frame["id"] == id => break frame,
            (_, Some("agent")) => {
                assert_eq!(frame["payload"]["runId"], "run-1");
                match frame["payload"]["stream"].as_str() {
                    Some("assistant") => {
                        deltas.push_str(frame["payload"]["data"]["delta"].as_str().expect("delta"))
                    }
                    Some("lifecycle") => phases.push(
                        frame["payload"]["data"]["phase"]
                            .as_str()
                            .expect("phase")
                            .to_string(),
                    ),
                    _ => {}
                }
            }
            _ => {}
        }
    };
    assert!(accepted, "accepted ack first");
    assert_eq!(deltas, "Hello there");
    assert_eq!(phases, vec!["start", "end"]);
    assert_eq!(final_res["ok"], true);
    assert_eq!(
        final_res["payload"]["result"]["payloads"][0]["text"],
        "Hello there"
    );

    let replay = client.call("agent", params).await;
    assert_eq!(
        replay["payload"]["result"]["payloads"][0]["text"], "Hello there",
        "cached answer"
    );
    assert_eq!(
        fake.requests().len(),
        1,
        "the replayed key did not reach the model again"
    );

    let history = client
        .call("chat.history", json!({"sessionKey": "main"}))
        .await;
    let messages = history["payload"]["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[1]["content"][0]["text"], "Hello there");
}

#[tokio::test]
async fn chat_send_in_flight_key_answers_in_flight_and_abort_stops_the_provider() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Hang {
        first_chunk: "thinking…".into(),
    });
    let gateway = start(&fake);
    let device = Device::new(7);
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(TOKEN),
        &["operator.read", "operator.write"],
        Some(&device),
    )
    .await;
    let params = json!({"sessionKey": "main", "message": "long one", "idempotencyKey": "chat-1"});
    let ack = client.call("chat.send", params.clone()).await;
    assert_eq!(
        ack["payload"],
        json!({"runId": "chat-1", "status": "started"})
    );
    // Wait for the first delta so the provider stream is open.
    loop {
        if let Read::Frame(frame) = client.read().await {
            if frame["event"] == "chat" && frame["payload"]["state"] == "delta" {
                assert_eq!(frame["payload"]["deltaText"], "thinking…");
                break;
            }
        }
    }
    let again = client.call("chat.send", params).await;
    assert_eq!(again["payload"]["status"], "in_flight");
    // The run's `aborted` event and the `res` travel on different tasks: either may come first.
    let id = client
        .request("chat.abort", json!({"sessionKey": "main"}))
        .await;
    let (mut answer, mut aborted_event) = (None, false);
    while answer.is_none() || !aborted_event {
        if let Read::Frame(frame) = client.read().await {
            if frame["type"] == "res" && frame["id"] == id.as_str() {
                answer = Some(frame);
            } else if frame["event"] == "chat" && frame["payload"]["state"] == "aborted" {
                aborted_event = true;
            }
        }
    }
    let aborted = answer.expect("the chat.abort res");
    assert_eq!(aborted["payload"]["aborted"], true, "{aborted}");
    assert_eq!(aborted["payload"]["runIds"], json!(["chat-1"]));
    fake.wait_for_disconnects(1).await;
}

#[tokio::test]
async fn run_without_a_model_fails_with_a_message_naming_the_keys() {
    let gateway = GatewayProcess::start("{}", &["--port", "0", "--token", TOKEN]);
    let device = Device::new(8);
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(TOKEN),
        &["operator.write"],
        Some(&device),
    )
    .await;
    let id = client
        .request(
            "agent",
            json!({"message": "hi", "idempotencyKey": "nomodel"}),
        )
        .await;
    let final_res = loop {
        let res = client.response(&id).await;
        if res["payload"]["status"] != "accepted" {
            break res;
        }
    };
    assert_eq!(final_res["ok"], false);
    let message = final_res["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("agents.defaults.model.primary") && message.contains("models.providers"),
        "{message}"
    );
}

#[test]
fn non_loopback_bind_without_auth_refuses_to_start() {
    let (status, stderr) = GatewayProcess::refuse("{}", &["--port", "0", "--bind", "lan"]);
    assert!(!status.success());
    assert!(
        stderr.contains("refusing to bind gateway") && stderr.contains("OPENCLAW_GATEWAY_TOKEN"),
        "{stderr}"
    );
}

#[tokio::test]
async fn http_health_ready_and_limits() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let http = reqwest::Client::new();
    let health = http
        .get(gateway.http("/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), 200);
    assert_eq!(
        health.json::<Value>().await.expect("json"),
        json!({"ok": true, "status": "live"})
    );
    assert_eq!(
        http.get(gateway.http("/readyz"))
            .send()
            .await
            .expect("ready")
            .status(),
        200
    );
    assert_eq!(
        http.post(gateway.http("/health"))
            .send()
            .await
            .expect("post")
            .status(),
        405
    );
    assert_eq!(
        http.get(gateway.http("/nope"))
            .send()
            .await
            .expect("404")
            .status(),
        404
    );
    let unauthorized = http
        .post(gateway.http("/tools/invoke"))
        .json(&json!({"tool": "read"}))
        .send()
        .await
        .expect("401");
    assert_eq!(unauthorized.status(), 401);
    // A body over the cap is refused from its Content-Length, before it is read.
    let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", gateway.port))
        .await
        .expect("tcp");
    let head = format!(
        "POST /tools/invoke HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{\"tool\":",
        3 * 1024 * 1024
    );
    tokio::io::AsyncWriteExt::write_all(&mut raw, head.as_bytes())
        .await
        .expect("write head");
    let mut answer = vec![0u8; 512];
    let n = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio::io::AsyncReadExt::read(&mut raw, &mut answer),
    )
    .await
    .expect("an answer before the body is complete")
    .expect("read");
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let unknown = http
        .post(gateway.http("/tools/invoke"))
        .bearer_auth(TOKEN)
        .json(&json!({"tool": "no_such_tool"}))
        .send()
        .await
        .expect("404");
    assert_eq!(unknown.status(), 404);
    assert_eq!(
        unknown.json::<Value>().await.expect("json")["error"]["type"],
        "not_found"
    );
    let denied = http
        .post(gateway.http("/tools/invoke"))
        .bearer_auth(TOKEN)
        .json(&json!({"tool": "exec"}))
        .send()
        .await
        .expect("403");
    assert_eq!(denied.status(), 403);
}

#[tokio::test]
async fn sigterm_sends_shutdown_and_exits_cleanly() {
    let fake = FakeOpenAi::start().await;
    let mut gateway = start(&fake);
    let (mut client, _) = TestClient::connect(&gateway.url(), Some(TOKEN), &[], None).await;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(gateway.child.id() as i32, libc::SIGTERM) };
    let mut saw_shutdown = false;
    loop {
        match client.read().await {
            Read::Frame(frame) if frame["event"] == "shutdown" => saw_shutdown = true,
            Read::Frame(_) => {}
            Read::Closed { .. } => break,
        }
    }
    assert!(saw_shutdown, "shutdown event before the close");
    assert!(gateway.terminate().success(), "exit status 0");
}

#[tokio::test]
async fn a_silent_socket_is_closed_at_the_10_s_handshake_timeout() {
    const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
    /// Room for a loaded machine past the deadline; well under a second timeout period.
    const LATE_BY_AT_MOST: std::time::Duration = std::time::Duration::from_secs(5);
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    // Timed from before the connection: the gateway's deadline starts after it accepted.
    let started = std::time::Instant::now();
    let mut client = TestClient::open(&gateway.url()).await;
    let (code, reason) = client.closed().await;
    let elapsed = started.elapsed();
    assert_eq!((code, reason.as_str()), (1008, "handshake timeout"));
    assert!(elapsed >= TIMEOUT, "closed early, after {elapsed:?}");
    assert!(
        elapsed < TIMEOUT + LATE_BY_AT_MOST,
        "closed late, after {elapsed:?}"
    );
}

#[tokio::test]
async fn acknowledged_turns_and_idempotency_keys_survive_a_crash() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec!["kept ".into(), "safe".into()],
        delay_ms: 1,
    });
    let config = config_with_provider(&fake.base_url());
    let args = ["--port", "0", "--token", TOKEN];
    let mut gateway = GatewayProcess::start(&config, &args);
    let device = Device::new(9);
    let params =
        json!({"message": "remember this", "idempotencyKey": "durable-1", "sessionKey": "main"});
    {
        let (mut client, _) = TestClient::connect(
            &gateway.url(),
            Some(TOKEN),
            &["operator.write"],
            Some(&device),
        )
        .await;
        let id = client.request("agent", params.clone()).await;
        loop {
            let res = client.response(&id).await;
            if res["payload"]["status"] != "accepted" {
                assert_eq!(res["ok"], true);
                break;
            }
        }
    }
    gateway.crash_and_restart(&config, &args);
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(TOKEN),
        &["operator.write"],
        Some(&device),
    )
    .await;
    let history = client
        .call("chat.history", json!({"sessionKey": "main"}))
        .await;
    let texts: Vec<&str> = history["payload"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"][0]["text"].as_str())
        .collect();
    assert_eq!(texts, vec!["remember this", "kept safe"]);
    let replay = client.call("agent", params).await;
    assert_eq!(
        replay["payload"]["result"]["payloads"][0]["text"], "kept safe",
        "answered from the persisted key"
    );
    assert_eq!(
        fake.requests().len(),
        1,
        "the retried key did not run the turn again after the restart"
    );
}

/// The test client itself: an event a request causes may be written before the request's
/// `res` (they travel on different tasks in the gateway). `call` must keep such an event for
/// the next read instead of dropping it, or a test waiting for it after the `res` hangs.
#[tokio::test]
async fn the_test_client_keeps_an_event_that_comes_before_the_response() {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio_tungstenite::tungstenite::Message;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listener");
    let url = format!("ws://{}", listener.local_addr().expect("address"));
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        let mut socket = tokio_tungstenite::accept_async(tcp).await.expect("upgrade");
        let challenge = json!({"type": "event", "event": "connect.challenge",
                               "payload": {"nonce": "n-1", "ts": 1}});
        socket
            .send(Message::text(challenge.to_string()))
            .await
            .expect("challenge");
        let request = loop {
            match socket.next().await.expect("a request").expect("a frame") {
                Message::Text(text) => break serde_json::from_str::<Value>(&text).expect("JSON"),
                _ => continue,
            }
        };
        // The event the request caused first, its answer second.
        let event = json!({"type": "event", "event": "chat",
                           "payload": {"runId": "r-1", "state": "final"}});
        let res = json!({"type": "res", "id": request["id"], "ok": true, "payload": {}});
        for frame in [event, res] {
            socket
                .send(Message::text(frame.to_string()))
                .await
                .expect("send");
        }
        // Held open until the client is done.
        let _ = socket.next().await;
    });
    let mut client = TestClient::open(&url).await;
    let res = client.call("chat.send", json!({})).await;
    assert_eq!(res["ok"], true, "{res}");
    let event = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        client.event_where("chat", |p| p["runId"] == "r-1" && p["state"] == "final"),
    )
    .await
    .expect("the event that came before the res was kept");
    assert_eq!(event["state"], "final");
    drop(client);
    server.await.expect("server task");
}

#[tokio::test]
async fn hello_ok_names_the_global_main_session_under_global_scope() {
    let fake = FakeOpenAi::start().await;
    let config = config_with_provider(&fake.base_url()).replacen(
        '{',
        r#"{ session: { scope: "global" },"#,
        1,
    );
    let gateway = GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN]);
    let (_client, hello) =
        TestClient::connect(&gateway.url(), Some(TOKEN), &["operator.read"], None).await;
    let defaults = &hello["snapshot"]["sessionDefaults"];
    assert_eq!(
        (
            defaults["scope"].as_str(),
            defaults["mainSessionKey"].as_str()
        ),
        (Some("global"), Some("global")),
        "{defaults}"
    );
}

#[tokio::test]
async fn chat_deltas_and_history_show_no_media_lines_or_voice_tags() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec![
            "Here is the chart.\nME".into(),
            "DIA: ./chart".into(),
            ".png\n[[audio_as".into(),
            "_voice]]Enjoy!".into(),
        ],
        delay_ms: 200,
    });
    let gateway = start(&fake);
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(TOKEN),
        &["operator.read", "operator.write"],
        None,
    )
    .await;
    let params =
        json!({"sessionKey": "main", "message": "chart please", "idempotencyKey": "media-1"});
    client.call("chat.send", params).await;
    let (mut shown, mut deltas) = (String::new(), 0);
    let final_event = loop {
        let Read::Frame(frame) = client.read().await else {
            panic!("closed during the run")
        };
        if frame["event"] != "chat" {
            continue;
        }
        let payload = &frame["payload"];
        if payload["state"] == "delta" {
            deltas += 1;
            let text = payload["message"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default();
            let delta = payload["deltaText"].as_str().unwrap_or_default();
            for seen in [text, delta] {
                assert!(
                    !seen.contains("MEDIA") && !seen.contains("[[") && !seen.ends_with("ME"),
                    "a directive in a delta: {payload}"
                );
            }
            if payload["replace"] == true {
                shown = delta.to_string();
            } else {
                shown.push_str(delta);
            }
            assert_eq!(shown, text, "deltaText adds up to the message");
        } else {
            break payload.clone();
        }
    };
    assert!(deltas >= 2, "the reply streamed ({deltas} deltas)");
    assert_eq!(shown, "Here is the chart.\nEnjoy!");
    let final_text = final_event["message"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        final_text.starts_with("Here is the chart.\nEnjoy!") && !final_text.contains("MEDIA"),
        "{final_event}"
    );
    let history = client
        .call("chat.history", json!({"sessionKey": "main"}))
        .await;
    let messages = history["payload"]["messages"].as_array().expect("messages");
    let answer = messages[1]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(answer, "Here is the chart.\nEnjoy!\n📎 ./chart.png");
}
