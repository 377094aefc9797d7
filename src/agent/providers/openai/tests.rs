//! Unit tests of the parent module, kept apart so the module stays readable.
use super::*;
use std::time::SystemTime;

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, HeaderValue::from_static(value));
    }
    map
}

#[test]
fn retry_after_seconds_become_milliseconds() {
    let now = SystemTime::now();
    assert_eq!(
        retry_after_ms(&headers(&[("retry-after", "7")]), now),
        Some(7000)
    );
    assert_eq!(
        retry_after_ms(&headers(&[("retry-after", "1.5")]), now),
        Some(1500)
    );
}

#[test]
fn retry_after_ms_header_wins_over_seconds() {
    let map = headers(&[("retry-after", "7"), ("retry-after-ms", "250")]);
    assert_eq!(retry_after_ms(&map, SystemTime::now()), Some(250));
}

#[test]
fn retry_after_http_date_is_relative_to_now() {
    let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("valid date");
    let map = headers(&[("retry-after", "Sun, 06 Nov 1994 08:50:07 GMT")]);
    assert_eq!(retry_after_ms(&map, now), Some(30_000));
    let past = headers(&[("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT")]);
    assert_eq!(retry_after_ms(&past, now), Some(0));
}

#[test]
fn unusable_retry_after_is_ignored() {
    let now = SystemTime::now();
    assert_eq!(
        retry_after_ms(&headers(&[("retry-after", "soon")]), now),
        None
    );
    assert_eq!(
        retry_after_ms(&headers(&[("retry-after", "-3")]), now),
        None
    );
    assert_eq!(retry_after_ms(&HeaderMap::new(), now), None);
}

#[test]
fn error_message_prefers_openai_error_object() {
    let body = br#"{"error":{"message":"Incorrect API key","type":"invalid_request_error"}}"#;
    assert_eq!(error_message(body).as_deref(), Some("Incorrect API key"));
    assert_eq!(
        error_message(br#"{"error":"model not found"}"#).as_deref(),
        Some("model not found")
    );
    assert_eq!(
        error_message(br#"{"message":"busy"}"#).as_deref(),
        Some("busy")
    );
    assert_eq!(error_message(b"<html>502</html>"), None);
}

#[test]
fn request_body_asks_for_a_stream_with_usage() {
    let request = ProviderRequest {
        model: "gpt-4o-mini".to_string(),
        messages: vec![super::super::provider::ChatMessage::user("hi")],
        max_tokens: None,
        tools: Vec::new().into(),
    };
    let body = serde_json::to_value(request_body(&request, ThinkingLevel::Off)).expect("json");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["messages"][0]["role"], "user");
    assert!(body.get("max_tokens").is_none());
}

#[test]
fn request_body_carries_tools_calls_and_results_in_openai_form() {
    use super::super::provider::{ChatMessage, Role, ToolCall, ToolSpec};
    let call = ToolCall {
        id: "call_1".into(),
        name: "read".into(),
        arguments: r#"{"path":"a.md"}"#.into(),
    };
    let request = ProviderRequest {
        model: "o3-mini".to_string(),
        messages: vec![
            ChatMessage::system("be brief"),
            ChatMessage::user("read a.md"),
            ChatMessage {
                role: Role::Assistant,
                content: String::new(),
                tool_calls: vec![call],
                tool_call_id: None,
                images: Vec::new(),
            },
            ChatMessage {
                role: Role::Tool,
                content: "hello".into(),
                tool_calls: Vec::new(),
                tool_call_id: Some("call_1".into()),
                images: Vec::new(),
            },
        ],
        max_tokens: Some(256),
        tools: vec![ToolSpec {
            name: "read".into(),
            description: "Read a file".into(),
            parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }]
        .into(),
    };
    let body = serde_json::to_value(request_body(&request, ThinkingLevel::High)).expect("json");
    assert_eq!(
        body,
        serde_json::json!({
            "model": "o3-mini",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "read a.md"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.md\"}"}}
                ]},
                {"role": "tool", "content": "hello", "tool_call_id": "call_1"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 256,
            "reasoning_effort": "high",
            "tools": [{"type": "function", "function": {
                "name": "read", "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            }}],
        })
    );
}

#[test]
fn invalid_configured_header_is_named() {
    let configured = BTreeMap::from([("bad header".to_string(), "x".to_string())]);
    let error = build_headers(None, &configured).expect_err("space in name");
    assert!(error.contains("bad header"), "{error}");
}

#[test]
fn trailing_slash_in_base_url_is_tolerated() {
    let http = reqwest::Client::new();
    let provider = OpenAiCompatProvider::new("http://h/v1/", None, BTreeMap::new(), http);
    assert_eq!(provider.endpoint(), "http://h/v1/chat/completions");
}

#[tokio::test]
async fn chunks_after_the_receiver_is_gone_are_still_collected() {
    let (events, receiver) = mpsc::channel(1);
    drop(receiver);
    let mut reply = ReplyState::new(events);
    let chunk = r#"{"choices":[{"index":0,"delta":{"content":"ab"},"finish_reason":null}]}"#;
    assert_eq!(reply.apply(chunk).await.expect("valid chunk"), Flow::More);
    assert_eq!(reply.apply(chunk).await.expect("valid chunk"), Flow::More);
    assert_eq!(reply.completion.text, "abab");
}

#[tokio::test]
async fn error_object_with_numeric_code_keeps_that_status() {
    let (events, _receiver) = mpsc::channel(1);
    let mut reply = ReplyState::new(events);
    let error = reply
        .apply(r#"{"error":{"code":429,"message":"slow down"}}"#)
        .await
        .expect_err("error object");
    assert!(
        matches!(error, ProviderError::Http { status: 429, ref message, .. } if message == "slow down")
    );
}
