//! Each fake in `tests/support/` refuses a malformed request the way the real
//! service does, with the service's error shape, and accepts the well-formed
//! request next to it (the control): so every test that drives pincer against
//! a fake also checks that pincer's requests would pass the real service.
//! The requests are sent straight to the fakes over HTTP / WebSocket.

mod support;

#[path = "support/fake_discord.rs"]
mod fake_discord;
#[path = "support/fake_matrix.rs"]
mod fake_matrix;
#[path = "support/fake_slack.rs"]
mod fake_slack;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use support::fake_anthropic::{AnthropicReply, FakeAnthropic};
use support::fake_ollama::FakeOllama;
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::fake_telegram::FakeTelegram;

/// Status and parsed JSON body of one POST.
async fn post(
    url: &str,
    headers: &[(&str, &str)],
    content_type: &str,
    body: &str,
) -> (u16, String, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", content_type)
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("the fake answers");
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let text = response.text().await.expect("body");
    (
        status,
        kind,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn post_json(url: &str, headers: &[(&str, &str)], body: Value) -> (u16, String, Value) {
    post(url, headers, "application/json", &body.to_string()).await
}

#[tokio::test]
async fn fake_slack_refuses_what_the_web_api_refuses() {
    let fake = fake_slack::FakeSlack::start().await;
    let url = |method: &str| format!("{}/{method}", fake.api_url());
    let bot = format!("Bearer {}", fake_slack::BOT_TOKEN);
    let auth = [("authorization", bot.as_str())];
    let slack_error = |answer: (u16, String, Value)| {
        assert_eq!(answer.0, 200, "Slack answers errors with 200: {answer:?}");
        assert_eq!(answer.2["ok"], false, "{answer:?}");
        answer.2["error"].as_str().unwrap_or("").to_string()
    };
    // A scripted success is not handed to a malformed request.
    fake.script_web(fake_slack::WebReply {
        status: 200,
        headers: Vec::new(),
        body: json!({"ok": true, "channel": "C1", "ts": "1.1"}),
    });
    let post_message = url("chat.postMessage");
    let no_text = post_json(&post_message, &auth, json!({"channel": "C1"})).await;
    assert_eq!(slack_error(no_text), "no_text");
    let no_channel = post_json(&post_message, &auth, json!({"text": "hi"})).await;
    assert_eq!(slack_error(no_channel), "channel_not_found");
    let unauthed = post_json(&post_message, &[], json!({"channel": "C1", "text": "hi"})).await;
    assert_eq!(slack_error(unauthed), "not_authed");
    let wrong = [("authorization", "Bearer xoxb-not-the-token")];
    let wrong = post_json(
        &post_message,
        &wrong,
        json!({"channel": "C1", "text": "hi"}),
    )
    .await;
    assert_eq!(slack_error(wrong), "invalid_auth");
    let broken = post(&post_message, &auth, "application/json", "{\"channel\": ").await;
    assert_eq!(slack_error(broken), "invalid_json");
    let untyped = post(&post_message, &auth, "text/csv", "channel,text").await;
    assert_eq!(slack_error(untyped), "invalid_post_type");
    let update = json!({"channel": "C1", "ts": "1699999999.000001", "text": "x"});
    let unknown = post_json(&url("chat.update"), &auth, update).await;
    assert_eq!(slack_error(unknown), "message_not_found");
    let reaction = json!({"channel": "C1", "timestamp": "1699999999.000001"});
    let unnamed = post_json(&url("reactions.add"), &auth, reaction).await;
    assert_eq!(slack_error(unnamed), "invalid_name");

    // The control: the scripted answer is still queued for the first valid call.
    let valid = json!({"channel": "C1", "text": "hi"});
    let (status, _, body) = post_json(&post_message, &auth, valid).await;
    assert_eq!((status, &body["ts"]), (200, &json!("1.1")), "{body}");
    let form = "channel=C1&text=hello+there";
    let (_, _, posted) = post(
        &post_message,
        &auth,
        "application/x-www-form-urlencoded",
        form,
    )
    .await;
    assert_eq!(posted["ok"], true, "{posted}");
    let ts = posted["ts"].as_str().expect("ts").to_string();
    let edit = json!({"channel": "C1", "ts": ts, "text": "edited"});
    let (_, _, edited) = post_json(&url("chat.update"), &auth, edit).await;
    assert_eq!(edited["ok"], true, "{edited}");
}

/// One client-server API call to the fake homeserver: status and body.
async fn matrix_call(
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method, url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.expect("the fake answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

#[tokio::test]
async fn fake_matrix_refuses_what_a_homeserver_refuses() {
    use reqwest::Method;
    let fake = fake_matrix::FakeMatrix::start().await;
    fake.add_room("!r:localhost", None, &["@ann:localhost"]);
    let api = |path: &str| format!("{}/_matrix/client/v3{path}", fake.homeserver());
    let token = Some(fake_matrix::ACCESS_TOKEN);
    let errcode = |answer: &(u16, Value)| answer.1["errcode"].as_str().unwrap_or("").to_string();
    // A scripted /sync answer is not handed to a malformed request.
    fake.script_sync(200, r#"{"next_batch": "scripted"}"#);

    let whoami = api("/account/whoami");
    let none = matrix_call(Method::GET, &whoami, None, None).await;
    assert_eq!((none.0, errcode(&none)), (401, "M_MISSING_TOKEN".into()));
    let wrong = matrix_call(Method::GET, &whoami, Some("syt_wrong"), None).await;
    assert_eq!((wrong.0, errcode(&wrong)), (401, "M_UNKNOWN_TOKEN".into()));
    let send = api("/rooms/%21r%3Alocalhost/send/m.room.message/t1");
    let no_body = matrix_call(Method::PUT, &send, token, Some(r#"{"msgtype":"m.text"}"#)).await;
    assert_eq!((no_body.0, errcode(&no_body)), (400, "M_BAD_JSON".into()));
    let not_json = matrix_call(Method::PUT, &send, token, Some("{\"body\": ")).await;
    assert_eq!((not_json.0, errcode(&not_json)), (400, "M_NOT_JSON".into()));
    let big = json!({"msgtype": "m.text", "body": "x".repeat(fake_matrix::MAX_EVENT_BYTES)});
    let too_large = matrix_call(Method::PUT, &send, token, Some(&big.to_string())).await;
    assert_eq!(
        (too_large.0, errcode(&too_large)),
        (413, "M_TOO_LARGE".into())
    );
    let elsewhere = api("/rooms/%21other%3Alocalhost/send/m.room.message/t2");
    let text = r#"{"msgtype":"m.text","body":"hi"}"#;
    let outside = matrix_call(Method::PUT, &elsewhere, token, Some(text)).await;
    assert_eq!((outside.0, errcode(&outside)), (403, "M_FORBIDDEN".into()));
    let typing = api("/rooms/%21r%3Alocalhost/typing/%40ann%3Alocalhost");
    let theirs = matrix_call(
        Method::PUT,
        &typing,
        token,
        Some(r#"{"typing":true,"timeout":1000}"#),
    )
    .await;
    assert_eq!((theirs.0, errcode(&theirs)), (403, "M_FORBIDDEN".into()));
    let sync = |query: &str| api(&format!("/sync?{query}"));
    let bad_since = matrix_call(Method::GET, &sync("since=s999&timeout=0"), token, None).await;
    assert_eq!(
        (bad_since.0, errcode(&bad_since)),
        (400, "M_INVALID_PARAM".into())
    );
    let bad_filter = matrix_call(Method::GET, &sync("filter=%7Bnope&timeout=0"), token, None).await;
    assert_eq!(
        (bad_filter.0, errcode(&bad_filter)),
        (400, "M_INVALID_PARAM".into())
    );
    let login = api("/login");
    let body = json!({"type": "m.login.password", "identifier": {"type": "m.id.user", "user": "pincer"},
        "password": "wrong"});
    let refused = matrix_call(Method::POST, &login, None, Some(&body.to_string())).await;
    assert_eq!((refused.0, errcode(&refused)), (403, "M_FORBIDDEN".into()));

    // The controls: the scripted answer is still queued for the first valid
    // /sync; a valid send is answered with an event id, twice the same for
    // one transaction id.
    let scripted = matrix_call(Method::GET, &sync("timeout=0"), token, None).await;
    assert_eq!(scripted, (200, json!({"next_batch": "scripted"})));
    let sent = matrix_call(Method::PUT, &send.replace("t1", "t3"), token, Some(text)).await;
    let again = matrix_call(Method::PUT, &send.replace("t1", "t3"), token, Some(text)).await;
    assert_eq!(sent.0, 200, "{sent:?}");
    assert!(sent.1["event_id"]
        .as_str()
        .is_some_and(|id| id.starts_with('$')));
    assert_eq!(sent, again);
    let initial = matrix_call(Method::GET, &sync("timeout=0"), token, None).await;
    let timeline = &initial.1["rooms"]["join"]["!r:localhost"]["timeline"]["events"];
    assert_eq!(timeline.as_array().map(Vec::len), Some(1), "{initial:?}");
    let body = json!({"type": "m.login.password", "identifier": {"type": "m.id.user", "user": "pincer"},
        "password": fake_matrix::BOT_PASSWORD});
    let logged_in = matrix_call(Method::POST, &login, None, Some(&body.to_string())).await;
    assert_eq!(
        logged_in.1["user_id"],
        fake_matrix::BOT_USER_ID,
        "{logged_in:?}"
    );
}

#[tokio::test]
async fn fake_discord_refuses_what_discord_refuses() {
    let fake = fake_discord::FakeDiscord::start(45_000).await;
    let messages = format!("{}/channels/500/messages", fake.api_base_url());
    let bot = format!("Bot {}", fake_discord::TOKEN);
    let auth = [("authorization", bot.as_str())];
    // A scripted answer does not skip the token check.
    fake.script_rest(fake_discord::RestReply {
        status: 200,
        headers: Vec::new(),
        body: json!({"id": "1", "channel_id": "500", "content": "scripted"}),
    });
    let (status, _, body) = post_json(&messages, &[], json!({"content": "hi"})).await;
    assert_eq!(status, 401);
    assert_eq!(body, json!({"message": "401: Unauthorized", "code": 0}));
    let (status, _, body) = post_json(&messages, &auth, json!({"content": ""})).await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        json!({"code": 50006, "message": "Cannot send an empty message"})
    );
    let long = "x".repeat(2001);
    let (status, _, body) = post_json(&messages, &auth, json!({"content": long})).await;
    assert_eq!((status, &body["code"]), (400, &json!(50035)), "{body}");
    let (status, _, body) = post(&messages, &auth, "application/json", "{\"content\"").await;
    assert_eq!((status, &body["code"]), (400, &json!(50109)), "{body}");
    let edit = format!("{}/channels/500/messages/404404", fake.api_base_url());
    let patched = reqwest::Client::new()
        .patch(&edit)
        .header("authorization", &bot)
        .json(&json!({"content": "x"}))
        .send()
        .await
        .expect("answer");
    assert_eq!(patched.status().as_u16(), 404);
    let body: Value = patched.json().await.expect("json");
    assert_eq!(body["code"], 10008);
    // The control: the scripted answer is still queued for the first valid call.
    let (status, _, body) = post_json(&messages, &auth, json!({"content": "hi"})).await;
    assert_eq!((status, &body["content"]), (200, &json!("scripted")));

    // The gateway: IDENTIFY with a wrong token is closed 4004, without intents 4013.
    let identify = |token: &str, intents: Value| {
        json!({"op": 2, "d": {"token": token, "intents": intents,
            "properties": {"os": "linux", "browser": "pincer", "device": "pincer"}}})
    };
    let url = format!("ws://{}/?v=10&encoding=json", fake.gateway_addr);
    let close_code = |frame: Value| {
        let url = url.clone();
        async move {
            let (mut ws, _) = tokio_tungstenite::connect_async(url)
                .await
                .expect("connect");
            let hello = ws.next().await.expect("hello").expect("frame");
            assert!(hello.to_text().expect("text").contains("\"op\":10"));
            ws.send(Message::text(frame.to_string()))
                .await
                .expect("send");
            loop {
                match ws.next().await {
                    Some(Ok(Message::Close(Some(frame)))) => {
                        return (u16::from(frame.code), frame.reason.to_string())
                    }
                    Some(Ok(Message::Text(text))) => return (0, text.to_string()),
                    Some(Ok(_)) => continue,
                    other => panic!("no close frame: {other:?}"),
                }
            }
        }
    };
    let (code, reason) = close_code(identify("not-the-token", json!(513))).await;
    assert_eq!((code, reason.as_str()), (4004, "Authentication failed."));
    let (code, _) = close_code(identify(fake_discord::TOKEN, Value::Null)).await;
    assert_eq!(code, 4013);
    let (code, ready) = close_code(identify(fake_discord::TOKEN, json!(513))).await;
    assert_eq!(code, 0, "a valid IDENTIFY is answered");
    assert!(ready.contains("READY"), "{ready}");
}

#[tokio::test]
async fn fake_openai_refuses_what_openai_refuses() {
    let fake = FakeOpenAi::start().await;
    let url = format!("{}/chat/completions", fake.base_url());
    let key = [("authorization", "Bearer sk-test")];
    fake.push_reply(FakeReply::Text {
        chunks: vec!["scripted".into()],
        delay_ms: 0,
    });
    let user = json!([{"role": "user", "content": "hi"}]);
    let (status, _, body) = post_json(&url, &[], json!({"model": "m", "messages": user})).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "invalid_api_key");
    let refused = |answer: (u16, String, Value)| {
        assert_eq!(answer.0, 400, "{answer:?}");
        assert_eq!(answer.2["error"]["type"], "invalid_request_error");
        answer.2["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let no_model = post_json(&url, &key, json!({"messages": user})).await;
    assert!(refused(no_model).contains("model"));
    let calls = json!([{"id": "call_1", "type": "function",
        "function": {"name": "read", "arguments": "{}"}}]);
    let no_id = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": calls},
        {"role": "tool", "content": "done"}]});
    assert!(refused(post_json(&url, &key, no_id).await).contains("tool_call_id"));
    let unanswered = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": calls},
        {"role": "user", "content": "and?"}]});
    assert!(refused(post_json(&url, &key, unanswered).await).contains("call_1"));
    let bad_role = json!({"model": "m", "messages": [{"role": "robot", "content": "hi"}]});
    assert!(refused(post_json(&url, &key, bad_role).await).contains("robot"));
    let options =
        json!({"model": "m", "messages": user, "stream_options": {"include_usage": true}});
    assert!(refused(post_json(&url, &key, options).await).contains("stream_options"));

    // The control: the scripted reply is still queued for the first valid call.
    let valid = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": null, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"}]});
    let (status, _, body) = post_json(&url, &key, valid).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "scripted");
}

#[tokio::test]
async fn fake_anthropic_refuses_what_anthropic_refuses_and_streams_only_when_asked() {
    let fake = FakeAnthropic::start().await;
    let url = format!("{}/v1/messages", fake.base_url());
    let headers = [("x-api-key", "sk-ant"), ("anthropic-version", "2023-06-01")];
    fake.push_reply(AnthropicReply::Text(vec!["scripted".into()]));
    let user = json!([{"role": "user", "content": "hi"}]);
    let valid = json!({"model": "claude", "max_tokens": 64, "messages": user});
    let (status, _, body) = post_json(&url, &headers[1..], valid.clone()).await;
    assert_eq!(status, 401);
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "authentication_error");
    let refused = |answer: (u16, String, Value)| {
        assert_eq!(answer.0, 400, "{answer:?}");
        assert_eq!(answer.2["error"]["type"], "invalid_request_error");
        answer.2["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let no_max = json!({"model": "claude", "messages": user});
    assert!(refused(post_json(&url, &headers, no_max).await).contains("max_tokens"));
    let stray_result = json!({"model": "claude", "max_tokens": 64, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "let me look"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]});
    assert!(refused(post_json(&url, &headers, stray_result).await).contains("toolu_9"));
    let unanswered = json!({"model": "claude", "max_tokens": 64, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}]},
        {"role": "user", "content": "well?"}]});
    assert!(refused(post_json(&url, &headers, unanswered).await).contains("toolu_1"));
    let empty_text = json!({"model": "claude", "max_tokens": 64, "messages": [
        {"role": "user", "content": [{"type": "text", "text": ""}]}]});
    assert!(refused(post_json(&url, &headers, empty_text).await).contains("non-empty"));
    let system_role = json!({"model": "claude", "max_tokens": 64, "messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]});
    assert!(refused(post_json(&url, &headers, system_role).await).contains("role"));

    // Without `stream: true` the answer is one message object, not SSE.
    let (status, kind, body) = post_json(&url, &headers, valid.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert!(kind.starts_with("application/json"), "{kind}");
    assert_eq!(body["type"], "message");
    assert_eq!(body["content"][0]["text"], "scripted");
    let mut streamed = valid;
    streamed["stream"] = json!(true);
    let (status, kind, body) = post_json(&url, &headers, streamed).await;
    assert_eq!(status, 200);
    assert!(kind.starts_with("text/event-stream"), "{kind}");
    assert!(body
        .as_str()
        .expect("SSE text")
        .contains("event: message_start"));
}

#[tokio::test]
async fn fake_ollama_refuses_what_ollama_refuses() {
    let fake = FakeOllama::start().await;
    let url = format!("{}/api/chat", fake.base_url());
    let user = json!([{"role": "user", "content": "hi"}]);
    let (status, _, body) = post_json(&url, &[], json!({"messages": user})).await;
    assert_eq!((status, body), (400, json!({"error": "model is required"})));
    let parts = json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]});
    let (status, _, body) = post_json(&url, &[], parts).await;
    assert_eq!(status, 400);
    assert!(body["error"]
        .as_str()
        .expect("error text")
        .contains("cannot unmarshal array"));
    let string_arguments = json!({"model": "m", "messages": [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "read", "arguments": "{}"}}]}]});
    let (status, _, _) = post_json(&url, &[], string_arguments).await;
    assert_eq!(status, 400);
    // The control, unstreamed: one object with the whole reply.
    let whole = json!({"model": "m", "messages": user, "stream": false});
    let (status, _, body) = post_json(&url, &[], whole).await;
    assert_eq!(status, 200);
    assert_eq!(body["message"]["content"], "echo: hi");
    assert_eq!(body["done"], true);
}

#[tokio::test]
async fn fake_telegram_refuses_what_the_bot_api_refuses() {
    let token = "123456:secret";
    let fake = FakeTelegram::start(token, 4242, "PincerBot").await;
    let url = |token: &str, method: &str| format!("{}/bot{token}/{method}", fake.api_root());
    let send = url(token, "sendMessage");
    let (status, _, body) = post_json(
        &url("123456:wrong", "sendMessage"),
        &[],
        json!({"chat_id": 1, "text": "hi"}),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(
        body,
        json!({"ok": false, "error_code": 401, "description": "Unauthorized"})
    );
    let (status, _, body) = post_json(&send, &[], json!({"chat_id": 1, "text": ""})).await;
    assert_eq!(status, 400);
    assert_eq!(body["description"], "Bad Request: message text is empty");
    let (_, _, body) = post_json(&send, &[], json!({"text": "hi"})).await;
    assert_eq!(body["description"], "Bad Request: chat_id is empty");
    let long = "x".repeat(4097);
    let (status, _, _) = post_json(&send, &[], json!({"chat_id": 1, "text": long})).await;
    assert_eq!(status, 400);
    // JSON sent as text/plain carries no parameters.
    let (_, _, body) = post(&send, &[], "text/plain", r#"{"chat_id": 1, "text": "hi"}"#).await;
    assert_eq!(body["description"], "Bad Request: chat_id is empty");
    let delete = url(token, "deleteMessage");
    let (_, _, body) = post_json(&delete, &[], json!({"chat_id": 1})).await;
    assert_eq!(
        body["description"],
        "Bad Request: message identifier is not specified"
    );
    let action = url(token, "sendChatAction");
    let (_, _, body) = post_json(&action, &[], json!({"chat_id": 1, "action": "dancing"})).await;
    assert_eq!(
        body["description"],
        "Bad Request: wrong parameter action in request"
    );
    // The control: the same message, well formed, as JSON and as a form.
    let (status, _, body) = post_json(&send, &[], json!({"chat_id": 1, "text": "hi"})).await;
    assert_eq!((status, &body["ok"]), (200, &json!(true)), "{body}");
    let form = "chat_id=1&text=hi+there";
    let (_, _, body) = post(&send, &[], "application/x-www-form-urlencoded", form).await;
    assert_eq!(body["result"]["text"], "hi there");
}

/// A multipart body by hand: `(name, file name, content type, bytes)` parts.
fn form(boundary: &str, parts: &[(&str, Option<&str>, &str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, file_name, content_type, bytes) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        match file_name {
            Some(file) => body.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{file}\"\r\nContent-Type: {content_type}\r\n\r\n").as_bytes(),
            ),
            None => body.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
            ),
        }
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    body
}

async fn post_form(
    url: &str,
    headers: &[(&str, &str)],
    boundary: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("the fake answers");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn fake_telegram_refuses_malformed_uploads() {
    let fake = FakeTelegram::start("9:tok", 9, "pincer_bot").await;
    let url = |method: &str| format!("{}/bot9:tok/{method}", fake.api_root());
    let jpeg: &[u8] = &[0xff, 0xd8, 0xff, 0xe0, 1, 2, 3];
    let refused = |answer: (u16, Value)| {
        assert_eq!(answer.0, 400, "{answer:?}");
        assert_eq!(answer.1["ok"], false);
        answer.1["description"].as_str().unwrap_or("").to_string()
    };
    let b = "xyz";
    let no_photo = post_form(
        &url("sendPhoto"),
        &[],
        b,
        form(b, &[("chat_id", None, "", b"7")]),
    )
    .await;
    assert_eq!(
        refused(no_photo),
        "Bad Request: there is no photo in the request"
    );
    let wrong_field = form(
        b,
        &[
            ("chat_id", None, "", b"7"),
            ("document", Some("a.jpg"), "image/jpeg", jpeg),
        ],
    );
    let answer = post_form(&url("sendPhoto"), &[], b, wrong_field).await;
    assert_eq!(
        refused(answer),
        "Bad Request: there is no photo in the request"
    );
    let not_image = form(
        b,
        &[
            ("chat_id", None, "", b"7"),
            ("photo", Some("a.jpg"), "image/jpeg", b"PK\x03\x04zip"),
        ],
    );
    let answer = post_form(&url("sendPhoto"), &[], b, not_image).await;
    assert_eq!(refused(answer), "Bad Request: IMAGE_PROCESS_FAILED");
    let mut truncated = form(
        b,
        &[
            ("chat_id", None, "", b"7"),
            ("photo", Some("a.jpg"), "image/jpeg", jpeg),
        ],
    );
    truncated.truncate(truncated.len() - 12);
    let answer = post_form(&url("sendPhoto"), &[], b, truncated).await;
    assert!(refused(answer).contains("truncated"));
    let long_caption = "x".repeat(1025);
    let answer = post_form(
        &url("sendDocument"),
        &[],
        b,
        form(
            b,
            &[
                ("chat_id", None, "", b"7"),
                ("caption", None, "", long_caption.as_bytes()),
                ("document", Some("a.pdf"), "application/pdf", b"%PDF-1.4"),
            ],
        ),
    )
    .await;
    assert_eq!(refused(answer), "Bad Request: message caption is too long");
    let ok = form(
        b,
        &[
            ("chat_id", None, "", b"7"),
            ("caption", None, "", b"<b>hi</b>"),
            ("parse_mode", None, "", b"HTML"),
            ("photo", Some("a.jpg"), "image/jpeg", jpeg),
        ],
    );
    let answer = post_form(&url("sendPhoto"), &[], b, ok).await;
    assert_eq!(answer.0, 200, "the control: {answer:?}");
    assert_eq!(answer.1["result"]["caption"], "hi");
    let sent = fake.calls_of("sendPhoto");
    assert_eq!(sent.last().expect("recorded").files[0].bytes, jpeg);
}

#[tokio::test]
async fn fake_discord_and_slack_refuse_malformed_uploads() {
    let discord = fake_discord::FakeDiscord::start(45_000).await;
    let auth = format!("Bot {}", fake_discord::TOKEN);
    let url = format!("{}/channels/500/messages", discord.api_base_url());
    let b = "d1";
    let unnamed = form(
        b,
        &[
            ("payload_json", None, "", br#"{"content":"x"}"#),
            ("files[0]", Some("a.txt"), "text/plain", b"hi"),
        ],
    );
    let answer = post_form(&url, &[("authorization", &auth)], b, unnamed).await;
    assert_eq!(
        (answer.0, answer.1["code"].clone()),
        (400, json!(50035)),
        "{answer:?}"
    );
    let bad_json = form(
        b,
        &[
            ("payload_json", None, "", b"{nope"),
            ("files[0]", Some("a.txt"), "text/plain", b"hi"),
        ],
    );
    let answer = post_form(&url, &[("authorization", &auth)], b, bad_json).await;
    assert_eq!(
        (answer.0, answer.1["code"].clone()),
        (400, json!(50109)),
        "{answer:?}"
    );
    let named = form(
        b,
        &[
            (
                "payload_json",
                None,
                "",
                br#"{"attachments":[{"id":0,"filename":"a.txt"}]}"#,
            ),
            ("files[0]", Some("a.txt"), "text/plain", b"hi"),
        ],
    );
    let answer = post_form(&url, &[("authorization", &auth)], b, named).await;
    assert_eq!(answer.0, 200, "the control: {answer:?}");

    let slack = fake_slack::FakeSlack::start().await;
    let bot = format!("Bearer {}", fake_slack::BOT_TOKEN);
    let auth = [("authorization", bot.as_str())];
    let method = |name: &str| format!("{}/{name}", slack.api_url());
    let json_body = post_json(
        &method("files.getUploadURLExternal"),
        &auth,
        json!({"filename": "a.txt", "length": 2}),
    )
    .await;
    assert_eq!(
        json_body.2["error"], "invalid_arguments",
        "form fields only: {json_body:?}"
    );
    let granted = post(
        &method("files.getUploadURLExternal"),
        &auth,
        "application/x-www-form-urlencoded",
        "filename=a.txt&length=2",
    )
    .await;
    assert_eq!(granted.2["ok"], true, "{granted:?}");
    let upload_url = granted.2["upload_url"].as_str().expect("url").to_string();
    let file_id = granted.2["file_id"].as_str().expect("id").to_string();
    let early = post_json(
        &method("files.completeUploadExternal"),
        &auth,
        json!({"files": [{"id": file_id}], "channel_id": "C1"}),
    )
    .await;
    assert_eq!(early.2["error"], "file_upload_not_complete", "{early:?}");
    let short = post_form(
        &upload_url,
        &[],
        b,
        form(b, &[("file", Some("a.txt"), "text/plain", b"h")]),
    )
    .await;
    assert_eq!(short.0, 400, "the announced length: {short:?}");
    let whole = post_form(
        &upload_url,
        &[],
        b,
        form(b, &[("file", Some("a.txt"), "text/plain", b"hi")]),
    )
    .await;
    assert_eq!(whole.0, 200, "{whole:?}");
    let to_user = post_json(
        &method("files.completeUploadExternal"),
        &auth,
        json!({"files": [{"id": file_id}], "channel_id": "U42"}),
    )
    .await;
    assert_eq!(to_user.2["error"], "invalid_channel", "{to_user:?}");
    let unknown = post_json(
        &method("files.completeUploadExternal"),
        &auth,
        json!({"files": [{"id": "F404"}], "channel_id": "C1"}),
    )
    .await;
    assert_eq!(unknown.2["error"], "file_not_found");
    let done = post_json(
        &method("files.completeUploadExternal"),
        &auth,
        json!({"files": [{"id": file_id, "title": "a"}], "channel_id": "C1"}),
    )
    .await;
    assert_eq!(done.2["ok"], true, "the control: {done:?}");
    assert_eq!(slack.shared_files()[0].bytes, b"hi");
}
