//! `POST /v1/chat/completions` through the real binary: off by default, on
//! through `gateway.http.endpoints.chatCompletions.enabled`, bearer-guarded,
//! answering in OpenAI's wire format (whole or as SSE chunks) from the agent
//! whose provider is the fake OpenAI server, with `user` keeping a session.

mod support;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::{config_with_provider, GatewayProcess};

const TOKEN: &str = "openai-http-test-token";

/// A gateway with the chat-completions endpoint switched on.
fn start_enabled(fake: &FakeOpenAi) -> GatewayProcess {
    let config = config_with_provider(&fake.base_url()).replacen(
        "{",
        "{\n  gateway: { http: { endpoints: { chatCompletions: { enabled: true } } } },",
        1,
    );
    GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN])
}

async fn post(gateway: &GatewayProcess, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(gateway.http("/v1/chat/completions"))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .await
        .expect("POST /v1/chat/completions")
}

/// A non-streaming call that must succeed; returns the completion object.
async fn complete(gateway: &GatewayProcess, body: Value) -> Value {
    let response = post(gateway, body).await;
    assert_eq!(response.status(), 200);
    response.json().await.expect("completion JSON")
}

/// `(role, content)` of the messages the provider received in request `index`,
/// after pincer's system prompt (checked by `system_prompt_of`).
fn provider_messages(fake: &FakeOpenAi, index: usize) -> Vec<(String, String)> {
    let requests = fake.requests();
    requests[index].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            let role = m["role"].as_str().expect("role").to_string();
            (role, m["content"].as_str().expect("content").to_string())
        })
        .collect()
}

fn message(role: &str, content: &str) -> (String, String) {
    (role.to_string(), content.to_string())
}

#[tokio::test]
async fn chat_completions_is_not_found_unless_enabled() {
    let fake = FakeOpenAi::start().await;
    let gateway = GatewayProcess::start(
        &config_with_provider(&fake.base_url()),
        &["--port", "0", "--token", TOKEN],
    );
    let body = json!({"model": "openclaw", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(post(&gateway, body).await.status(), 404);
    assert!(fake.requests().is_empty(), "no run started");
}

#[tokio::test]
async fn chat_completions_without_a_bearer_is_unauthorized() {
    let fake = FakeOpenAi::start().await;
    let gateway = start_enabled(&fake);
    let response = reqwest::Client::new()
        .post(gateway.http("/v1/chat/completions"))
        .json(&json!({"model": "openclaw", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .expect("POST");
    assert_eq!(response.status(), 401);
    assert!(fake.requests().is_empty(), "no run started");
}

#[tokio::test]
async fn max_body_bytes_caps_the_request_body() {
    let fake = FakeOpenAi::start().await;
    let config = config_with_provider(&fake.base_url()).replacen(
        "{",
        "{\n  gateway: { http: { endpoints: { chatCompletions: { enabled: true, maxBodyBytes: 2000 } } } },",
        1,
    );
    let gateway = GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN]);
    let long = "x".repeat(3000);
    let body = json!({"model": "openclaw", "messages": [{"role": "user", "content": long}]});
    let response = post(&gateway, body).await;
    assert_eq!(response.status(), 413);
    let error: Value = response.json().await.expect("error JSON");
    assert!(error.to_string().contains("exceeds 2000 bytes"), "{error}");
    assert!(fake.requests().is_empty(), "no run started");
}

#[tokio::test]
async fn non_streaming_answer_has_openai_shape_with_the_model_text() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Paris ".into(), "is the capital.".into()],
        delay_ms: 0,
    });
    let gateway = start_enabled(&fake);
    let completion = complete(
        &gateway,
        json!({"model": "openclaw", "messages": [{"role": "user", "content": "Capital of France?"}]}),
    )
    .await;
    assert_eq!(completion["object"], "chat.completion");
    assert!(completion["id"].as_str().is_some_and(|id| !id.is_empty()));
    assert!(completion["created"].as_u64().is_some());
    assert_eq!(completion["model"], "openclaw");
    let choice = &completion["choices"][0];
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], "Paris is the capital.");
    assert_eq!(choice["finish_reason"], "stop");
    let usage = &completion["usage"];
    assert_eq!(usage["completion_tokens"], 2, "{usage}");
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["prompt_tokens"].as_u64().expect("prompt_tokens") + 2)
    );
}

#[tokio::test]
async fn streaming_answer_is_chunks_ending_in_done_that_add_up_to_the_text() {
    let fake = FakeOpenAi::start().await;
    let pieces = ["Once ", "upon ", "a ", "time."];
    fake.push_reply(FakeReply::Text {
        chunks: pieces.iter().map(|p| p.to_string()).collect(),
        delay_ms: 5,
    });
    let gateway = start_enabled(&fake);
    let response = post(
        &gateway,
        json!({"model": "openclaw", "stream": true, "messages": [{"role": "user", "content": "A story"}]}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].to_str().expect("ascii");
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    let body = response.text().await.expect("SSE body");

    let data: Vec<&str> = body
        .split("\n\n")
        .filter(|event| !event.trim().is_empty())
        .map(|event| event.strip_prefix("data: ").expect("a data: event"))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{body}");
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).expect("chunk JSON"))
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk"),
        "{body}"
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, pieces.concat());
    let last = chunks.last().expect("chunks");
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn user_field_keeps_one_session_across_calls() {
    let fake = FakeOpenAi::start().await;
    let gateway = start_enabled(&fake);
    let ask = |content: &str, user: Option<&str>| {
        let mut body =
            json!({"model": "openclaw", "messages": [{"role": "user", "content": content}]});
        if let Some(user) = user {
            body["user"] = json!(user);
        }
        body
    };
    let first = complete(&gateway, ask("first question", Some("alice"))).await;
    assert_eq!(
        first["choices"][0]["message"]["content"],
        "echo: first question"
    );
    complete(&gateway, ask("second question", Some("alice"))).await;
    complete(&gateway, ask("unrelated", None)).await;

    assert_eq!(
        provider_messages(&fake, 1),
        vec![
            message("user", "first question"),
            message("assistant", "echo: first question"),
            message("user", "second question"),
        ]
    );
    // Without `user` a call starts from nothing.
    assert_eq!(
        provider_messages(&fake, 2),
        vec![message("user", "unrelated")]
    );
}

#[tokio::test]
async fn model_that_names_no_agent_is_a_bad_request() {
    let fake = FakeOpenAi::start().await;
    let gateway = start_enabled(&fake);
    let response = post(
        &gateway,
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.expect("error JSON");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(
        error["error"]["message"]
            .as_str()
            .expect("message")
            .contains("gpt-4o"),
        "{error}"
    );
    assert!(fake.requests().is_empty(), "no run started");
}

#[tokio::test]
async fn system_messages_reach_the_provider_as_a_system_message() {
    let fake = FakeOpenAi::start().await;
    let gateway = start_enabled(&fake);
    complete(
        &gateway,
        json!({"model": "openclaw", "messages": [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "Hello"},
        ]}),
    )
    .await;
    let requests = fake.requests();
    let system = &requests[0].body["messages"][0];
    assert_eq!(system["role"], "system");
    assert!(system["content"]
        .as_str()
        .is_some_and(|c| c.contains("Answer in French.")));
    assert_eq!(provider_messages(&fake, 0), vec![message("user", "Hello")]);
}
