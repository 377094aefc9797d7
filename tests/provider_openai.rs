//! Integration tests of the OpenAI-compatible provider against the fake OpenAI
//! server: streaming, usage, errors, malformed streams, cancellation, headers.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use pincer::agent::providers::openai::{OpenAiCompatProvider, MAX_SSE_EVENT_BYTES};
use pincer::agent::providers::{
    ChatMessage, Completion, Provider, ProviderError, ProviderRequest, StreamEvent,
};
use support::fake_openai::{FakeOpenAi, FakeReply};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A bound on how long any one test step may take, so a regression fails the
/// test instead of hanging it. Not a timing claim.
const TEST_DEADLINE: Duration = Duration::from_secs(10);
const EVENT_QUEUE_CAPACITY: usize = 64;

fn provider(fake: &FakeOpenAi) -> OpenAiCompatProvider {
    provider_with(fake, Some("sk-test".to_string()), BTreeMap::new())
}

fn provider_with(
    fake: &FakeOpenAi,
    api_key: Option<String>,
    headers: BTreeMap<String, String>,
) -> OpenAiCompatProvider {
    let http = OpenAiCompatProvider::http_client().expect("client builds");
    OpenAiCompatProvider::new(&fake.base_url(), api_key, headers, http)
}

fn request(text: &str) -> ProviderRequest {
    ProviderRequest {
        model: "gpt-test".to_string(),
        messages: vec![
            ChatMessage::system("You are terse."),
            ChatMessage::user(text),
        ],
        max_tokens: None,
        tools: Vec::new().into(),
    }
}

/// Runs one call to the end and returns its result plus every delta sent.
async fn run(
    provider: &OpenAiCompatProvider,
    request: ProviderRequest,
) -> (Result<Completion, ProviderError>, Vec<String>) {
    let (events, mut receiver) = mpsc::channel(EVENT_QUEUE_CAPACITY);
    let call = provider.stream(request, events, CancellationToken::new());
    let result = tokio::time::timeout(TEST_DEADLINE, call)
        .await
        .expect("call finishes");
    let mut deltas = Vec::new();
    while let Ok(StreamEvent::TextDelta(text)) = receiver.try_recv() {
        deltas.push(text);
    }
    (result, deltas)
}

fn raw_sse(chunks: Vec<Vec<u8>>) -> FakeReply {
    FakeReply::Raw {
        status: 200,
        headers: vec![("content-type".to_string(), "text/event-stream".to_string())],
        chunks,
    }
}

fn chunk_json(content: &str, finish_reason: Option<&str>) -> String {
    serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test",
        "choices": [{ "index": 0, "delta": { "content": content }, "finish_reason": finish_reason }],
    })
    .to_string()
}

#[tokio::test]
async fn streamed_deltas_arrive_in_order_and_concatenate_to_the_completion() {
    let fake = FakeOpenAi::start().await;
    let pieces = ["Hel", "lo, ", "wörl", "d 🦀"].map(String::from).to_vec();
    fake.push_reply(FakeReply::Text {
        chunks: pieces.clone(),
        delay_ms: 5,
    });
    let (result, deltas) = run(&provider(&fake), request("say hello")).await;
    let completion = result.expect("stream succeeds");
    assert_eq!(deltas, pieces);
    assert_eq!(completion.text, pieces.concat());
}

#[tokio::test]
async fn usage_and_stop_reason_are_parsed() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec!["a".into(), "b".into(), "c".into()],
        delay_ms: 0,
    });
    let (result, _) = run(&provider(&fake), request("two words")).await;
    let completion = result.expect("stream succeeds");
    // The fake counts prompt words (3 system + 2 user) and one token per piece.
    assert_eq!(completion.usage.input_tokens, 5);
    assert_eq!(completion.usage.output_tokens, 3);
    assert_eq!(completion.stop_reason.as_deref(), Some("stop"));
}

#[tokio::test]
async fn default_reply_echoes_the_last_user_message() {
    let fake = FakeOpenAi::start().await;
    let (result, deltas) = run(&provider(&fake), request("ping pong")).await;
    assert_eq!(result.expect("stream succeeds").text, "echo: ping pong");
    assert!(deltas.len() > 1, "echo is streamed in pieces: {deltas:?}");
}

#[tokio::test]
async fn request_posts_the_openai_streaming_body() {
    let fake = FakeOpenAi::start().await;
    let mut with_limit = request("hi");
    with_limit.max_tokens = Some(64);
    let (result, _) = run(&provider(&fake), with_limit).await;
    result.expect("stream succeeds");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let seen = &requests[0];
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(seen.body["model"], "gpt-test");
    assert_eq!(seen.body["stream"], true);
    assert_eq!(seen.body["stream_options"]["include_usage"], true);
    assert_eq!(seen.body["max_tokens"], 64);
    let messages = serde_json::json!([
        { "role": "system", "content": "You are terse." },
        { "role": "user", "content": "hi" },
    ]);
    assert_eq!(seen.body["messages"], messages);
}

#[tokio::test]
async fn api_key_and_configured_headers_are_sent() {
    let fake = FakeOpenAi::start().await;
    let headers = BTreeMap::from([
        ("X-Title".to_string(), "pincer".to_string()),
        (
            "HTTP-Referer".to_string(),
            "https://example.test".to_string(),
        ),
    ]);
    let provider = provider_with(&fake, Some("sk-secret".to_string()), headers);
    run(&provider, request("hi"))
        .await
        .0
        .expect("stream succeeds");
    let seen = &fake.requests()[0];
    assert_eq!(seen.headers["authorization"], "Bearer sk-secret");
    assert_eq!(seen.headers["x-title"], "pincer");
    assert_eq!(seen.headers["http-referer"], "https://example.test");
}

#[tokio::test]
async fn no_authorization_header_without_an_api_key() {
    let fake = FakeOpenAi::start().await;
    let provider = provider_with(&fake, None, BTreeMap::new());
    // OpenAI itself refuses a request without a key (a keyless local server
    // would answer it); the point is that no header is made up.
    let refused = run(&provider, request("hi")).await.0.expect_err("401");
    assert!(
        matches!(refused, ProviderError::Http { status: 401, .. }),
        "{refused:?}"
    );
    assert!(!fake.requests()[0].headers.contains_key("authorization"));
}

#[tokio::test]
async fn base_url_with_trailing_slash_reaches_chat_completions() {
    let fake = FakeOpenAi::start().await;
    let http = OpenAiCompatProvider::http_client().expect("client builds");
    let provider = OpenAiCompatProvider::new(
        &format!("{}/", fake.base_url()),
        Some("sk-test".to_string()),
        BTreeMap::new(),
        http,
    );
    run(&provider, request("hi"))
        .await
        .0
        .expect("stream succeeds");
    assert_eq!(fake.requests()[0].path, "/v1/chat/completions");
}

#[tokio::test]
async fn rate_limit_with_retry_after_maps_to_http_429() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Error {
        status: 429,
        message: "Rate limit reached for gpt-test".to_string(),
        retry_after_secs: Some(7),
    });
    let (result, _) = run(&provider(&fake), request("hi")).await;
    match result {
        Err(ProviderError::Http {
            status: 429,
            message,
            retry_after_ms: Some(7000),
        }) => assert_eq!(message, "Rate limit reached for gpt-test"),
        other => panic!("expected HTTP 429 with retry-after, got {other:?}"),
    }
}

#[tokio::test]
async fn retry_after_ms_header_is_honoured() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Raw {
        status: 503,
        headers: vec![("retry-after-ms".to_string(), "1500".to_string())],
        chunks: vec![b"overloaded".to_vec()],
    });
    let (result, _) = run(&provider(&fake), request("hi")).await;
    assert!(
        matches!(
            result,
            Err(ProviderError::Http {
                status: 503,
                retry_after_ms: Some(1500),
                ..
            })
        ),
        "{result:?}"
    );
}

#[tokio::test]
async fn unauthorized_error_message_is_extracted() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Error {
        status: 401,
        message: "Incorrect API key provided: sk-test.".to_string(),
        retry_after_secs: None,
    });
    let (result, _) = run(&provider(&fake), request("hi")).await;
    match result {
        Err(ProviderError::Http {
            status: 401,
            message,
            retry_after_ms: None,
        }) => assert_eq!(message, "Incorrect API key provided: sk-test."),
        other => panic!("expected HTTP 401, got {other:?}"),
    }
}

#[tokio::test]
async fn non_json_error_body_is_truncated_to_500_characters() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Raw {
        status: 502,
        headers: vec![("content-type".to_string(), "text/html".to_string())],
        chunks: vec!["é".repeat(2000).into_bytes()],
    });
    let (result, _) = run(&provider(&fake), request("hi")).await;
    match result {
        Err(ProviderError::Http {
            status: 502,
            message,
            ..
        }) => {
            assert_eq!(message, "é".repeat(500));
        }
        other => panic!("expected HTTP 502, got {other:?}"),
    }
}

#[tokio::test]
async fn crlf_comments_and_multiline_data_are_parsed() {
    let fake = FakeOpenAi::start().await;
    let first = chunk_json("Hi ", None).replace(",\"model\"", "\r\ndata: ,\"model\"");
    let stream = format!(
        ": OPENROUTER PROCESSING\r\n\r\nevent: message\r\nid: 1\r\ndata: {first}\r\n\r\ndata: {}\r\n\r\ndata: [DONE]\r\n\r\n",
        chunk_json("there", Some("stop"))
    );
    let bytes = stream.into_bytes();
    // Cut mid-line so the parser has to carry state between reads.
    let (head, tail) = bytes.split_at(bytes.len() / 2);
    fake.push_reply(raw_sse(vec![head.to_vec(), tail.to_vec()]));
    let (result, deltas) = run(&provider(&fake), request("hi")).await;
    let completion = result.expect("stream succeeds");
    assert_eq!(deltas, vec!["Hi ", "there"]);
    assert_eq!(completion.text, "Hi there");
    assert_eq!(completion.stop_reason.as_deref(), Some("stop"));
}

#[tokio::test]
async fn oversize_event_is_a_protocol_error() {
    let fake = FakeOpenAi::start().await;
    let mut huge = b"data: ".to_vec();
    huge.resize(MAX_SSE_EVENT_BYTES + 16, b'x');
    fake.push_reply(raw_sse(vec![huge]));
    let (result, _) = run(&provider(&fake), request("hi")).await;
    match result {
        Err(ProviderError::Protocol(message)) => {
            assert!(message.contains("longer than"), "{message}")
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[tokio::test]
async fn stream_ending_without_done_or_finish_reason_is_a_protocol_error() {
    let fake = FakeOpenAi::start().await;
    let event = format!("data: {}\n\n", chunk_json("partial", None));
    fake.push_reply(raw_sse(vec![event.into_bytes()]));
    let (result, deltas) = run(&provider(&fake), request("hi")).await;
    assert_eq!(deltas, vec!["partial"]);
    match result {
        Err(ProviderError::Protocol(message)) => {
            assert!(message.contains("ended early"), "{message}")
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[tokio::test]
async fn stream_with_finish_reason_but_no_done_completes() {
    let fake = FakeOpenAi::start().await;
    let event = format!("data: {}\n\n", chunk_json("whole", Some("length")));
    fake.push_reply(raw_sse(vec![event.into_bytes()]));
    let (result, _) = run(&provider(&fake), request("hi")).await;
    let completion = result.expect("finish_reason ends the reply");
    assert_eq!(completion.text, "whole");
    assert_eq!(completion.stop_reason.as_deref(), Some("length"));
}

#[tokio::test]
async fn error_object_inside_the_stream_is_an_http_error() {
    let fake = FakeOpenAi::start().await;
    let stream = format!(
        "data: {}\n\ndata: {{\"error\":{{\"message\":\"upstream overloaded\",\"type\":\"server_error\"}}}}\n\n",
        chunk_json("so far", None)
    );
    fake.push_reply(raw_sse(vec![stream.into_bytes()]));
    let (result, _) = run(&provider(&fake), request("hi")).await;
    match result {
        Err(ProviderError::Http { message, .. }) => assert_eq!(message, "upstream overloaded"),
        other => panic!("expected an HTTP-like error, got {other:?}"),
    }
}

#[tokio::test]
async fn json_reply_to_a_streaming_request_is_a_protocol_error() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Raw {
        status: 200,
        headers: vec![("content-type".to_string(), "application/json".to_string())],
        chunks: vec![b"{\"object\":\"chat.completion\"}".to_vec()],
    });
    let (result, _) = run(&provider(&fake), request("hi")).await;
    assert!(
        matches!(result, Err(ProviderError::Protocol(_))),
        "{result:?}"
    );
}

#[tokio::test]
async fn cancel_mid_stream_returns_cancelled_and_closes_the_connection() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Hang {
        first_chunk: "thinking".to_string(),
    });
    let provider = provider(&fake);
    let cancel = CancellationToken::new();
    let (events, mut receiver) = mpsc::channel(EVENT_QUEUE_CAPACITY);
    let call = tokio::spawn({
        let cancel = cancel.clone();
        async move { provider.stream(request("hi"), events, cancel).await }
    });
    // The first delta arrives while the server still holds the stream open.
    let first = tokio::time::timeout(TEST_DEADLINE, receiver.recv())
        .await
        .expect("first delta");
    assert_eq!(first, Some(StreamEvent::TextDelta("thinking".to_string())));
    assert_eq!(fake.disconnects(), 0);
    cancel.cancel();
    let result = tokio::time::timeout(TEST_DEADLINE, call)
        .await
        .expect("cancel ends the call")
        .expect("call task did not panic");
    assert!(
        matches!(result, Err(ProviderError::Cancelled)),
        "{result:?}"
    );
    tokio::time::timeout(TEST_DEADLINE, fake.wait_for_disconnects(1))
        .await
        .expect("the fake sees the client go away");
}

#[tokio::test]
async fn already_cancelled_call_sends_no_request() {
    let fake = FakeOpenAi::start().await;
    let cancel = CancellationToken::new();
    cancel.cancel();
    let (events, _receiver) = mpsc::channel(EVENT_QUEUE_CAPACITY);
    let result = provider(&fake).stream(request("hi"), events, cancel).await;
    assert!(
        matches!(result, Err(ProviderError::Cancelled)),
        "{result:?}"
    );
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn silent_stream_fails_with_idle_network_error() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Hang {
        first_chunk: "a".to_string(),
    });
    let mut provider = provider(&fake);
    provider.set_stream_idle_timeout(Duration::from_millis(200));
    let (result, deltas) = run(&provider, request("hi")).await;
    assert_eq!(deltas, vec!["a"]);
    match result {
        Err(ProviderError::Network(message)) => assert!(message.contains("idle"), "{message}"),
        other => panic!("expected an idle network error, got {other:?}"),
    }
}

#[tokio::test]
async fn unreachable_provider_is_a_network_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    drop(listener);
    let http = OpenAiCompatProvider::http_client().expect("client builds");
    let provider = OpenAiCompatProvider::new(
        &format!("http://127.0.0.1:{port}/v1"),
        None,
        BTreeMap::new(),
        http,
    );
    let (events, _receiver) = mpsc::channel(EVENT_QUEUE_CAPACITY);
    let result = provider
        .stream(request("hi"), events, CancellationToken::new())
        .await;
    assert!(
        matches!(result, Err(ProviderError::Network(_))),
        "{result:?}"
    );
}

#[tokio::test]
async fn dropped_event_receiver_does_not_fail_the_run() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec!["one ".into(), "two ".into(), "three".into()],
        delay_ms: 0,
    });
    let (events, receiver) = mpsc::channel(1);
    drop(receiver);
    let result = provider(&fake)
        .stream(request("hi"), events, CancellationToken::new())
        .await;
    assert_eq!(result.expect("run completes").text, "one two three");
}

#[tokio::test]
async fn fake_answers_non_streaming_requests_with_a_chat_completion() {
    let fake = FakeOpenAi::start().await;
    let body =
        serde_json::json!({ "model": "m", "messages": [{ "role": "user", "content": "hey" }] });
    let response = reqwest::Client::new()
        .post(format!("{}/chat/completions", fake.base_url()))
        .bearer_auth("sk-test")
        .json(&body)
        .send()
        .await
        .expect("fake answers");
    assert_eq!(response.status(), 200);
    let completion: serde_json::Value = response.json().await.expect("JSON body");
    assert_eq!(completion["object"], "chat.completion");
    assert_eq!(completion["choices"][0]["message"]["content"], "echo: hey");
    assert_eq!(completion["choices"][0]["finish_reason"], "stop");
    assert_eq!(completion["usage"]["prompt_tokens"], 1);
}

#[tokio::test]
async fn streamed_tool_calls_are_assembled_and_tools_are_offered() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![
            (
                "call_1".into(),
                "read".into(),
                r#"{"path":"notes/todo.md"}"#.into(),
            ),
            (
                "call_2".into(),
                "web_fetch".into(),
                r#"{"url":"https://example.com/a?b=c"}"#.into(),
            ),
        ],
    });
    let provider = provider(&fake);
    let mut req = request("what is on my list?");
    req.tools = vec![pincer::agent::providers::ToolSpec {
        name: "read".into(),
        description: "Read a file".into(),
        parameters: serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }]
    .into();
    req.messages.push(ChatMessage {
        role: pincer::agent::providers::Role::Assistant,
        content: String::new(),
        tool_calls: vec![pincer::agent::providers::ToolCall {
            id: "c0".into(),
            name: "read".into(),
            arguments: "{}".into(),
        }],
        tool_call_id: None,
        images: Vec::new(),
    });
    req.messages
        .push(ChatMessage::tool_result("c0", "earlier result"));
    let (tx, _rx) = mpsc::channel(16);
    let completion = provider
        .stream(req, tx, CancellationToken::new())
        .await
        .expect("completion");
    assert_eq!(completion.stop_reason.as_deref(), Some("tool_calls"));
    assert_eq!(completion.tool_calls.len(), 2);
    assert_eq!(completion.tool_calls[0].id, "call_1");
    assert_eq!(completion.tool_calls[0].name, "read");
    assert_eq!(
        completion.tool_calls[0].arguments,
        r#"{"path":"notes/todo.md"}"#
    );
    assert_eq!(
        completion.tool_calls[1].arguments,
        r#"{"url":"https://example.com/a?b=c"}"#
    );
    let sent = &fake.requests()[0].body;
    assert_eq!(sent["tools"][0]["type"], "function");
    assert_eq!(sent["tools"][0]["function"]["name"], "read");
    assert_eq!(sent["messages"][2]["tool_calls"][0]["id"], "c0");
    assert_eq!(sent["messages"][3]["role"], "tool");
    assert_eq!(sent["messages"][3]["tool_call_id"], "c0");
}
