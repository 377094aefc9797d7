//! The Anthropic Messages provider (`POST {baseUrl}/v1/messages`, streamed as
//! server-sent events): text, `tool_use` / `tool_result` blocks and extended
//! thinking with a budget per thinking level.
//!
//! It owns the HTTP call and the stream reading; the wire mapping lives in
//! `anthropic/wire.rs`. SSE framing reuses the bounded parser of the OpenAI
//! provider. It holds no retry policy (see `failover.rs`), and cancelling
//! drops the response and so the connection.

pub mod wire;

use super::http;
use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::openai::{SseParser, MAX_SSE_EVENT_BYTES, STREAM_IDLE_TIMEOUT_MS};
use super::provider::{
    BoxFuture, Completion, Provider, ProviderError, ProviderRequest, StreamEvent,
};
use crate::agent::failover::ThinkingLevel;
use wire::{Flow, ReplyState};

/// The API version every request names.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Streams replies from one Anthropic Messages endpoint with one key.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    endpoint: String,
    /// `x-api-key`, version and configured headers, or why they are invalid.
    headers: Result<HeaderMap, String>,
    http: reqwest::Client,
    idle_timeout: Duration,
    thinking: ThinkingLevel,
}

impl AnthropicProvider {
    /// A provider for `base_url` (`https://api.anthropic.com`, with or
    /// without a trailing `/v1`); requests go to `…/v1/messages`.
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        headers: BTreeMap<String, String>,
        http: reqwest::Client,
    ) -> Self {
        Self::with_key_header(base_url, api_key, headers, http, KeyHeader::ApiKey)
    }

    /// As `new`, the key sent as `key_header` says (`models.providers.*.authHeader`).
    pub fn with_key_header(
        base_url: &str,
        api_key: Option<String>,
        headers: BTreeMap<String, String>,
        http: reqwest::Client,
        key_header: KeyHeader,
    ) -> Self {
        let base = base_url.trim_end_matches('/');
        let endpoint = if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        };
        AnthropicProvider {
            endpoint,
            headers: build_headers(api_key.as_deref(), key_header, &headers),
            http,
            idle_timeout: Duration::from_millis(STREAM_IDLE_TIMEOUT_MS),
            thinking: ThinkingLevel::Off,
        }
    }

    /// The same provider asking for this thinking level.
    pub fn with_thinking(mut self, thinking: ThinkingLevel) -> Self {
        self.thinking = thinking;
        self
    }

    /// Changes how long the stream may stay silent before the call fails.
    pub fn set_stream_idle_timeout(&mut self, timeout: Duration) {
        self.idle_timeout = timeout;
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn run(
        &self,
        request: ProviderRequest,
        events: mpsc::Sender<StreamEvent>,
    ) -> Result<Completion, ProviderError> {
        let headers = self.headers.clone().map_err(ProviderError::Protocol)?;
        log::debug!(
            "POST {} model={} thinking={}",
            self.endpoint,
            request.model,
            self.thinking.as_str()
        );
        let body = wire::request_body(&request, self.thinking);
        let builder = self.http.post(&self.endpoint).headers(headers).json(&body);
        let response = http::send(builder, self.idle_timeout).await?;
        if !response.status().is_success() {
            return Err(http::error_from_response(response, self.idle_timeout).await);
        }
        self.read_stream(response, events).await
    }

    async fn read_stream(
        &self,
        response: reqwest::Response,
        events: mpsc::Sender<StreamEvent>,
    ) -> Result<Completion, ProviderError> {
        let mut decoder = BodyDecoder::new(events);
        let mut body = response.bytes_stream();
        loop {
            let next = tokio::time::timeout(self.idle_timeout, body.next())
                .await
                .map_err(|_| http::idle_error(self.idle_timeout, "streaming"))?;
            match next {
                Some(Ok(bytes)) => {
                    if let Some(completion) = decoder.feed(&bytes).await? {
                        return Ok(completion);
                    }
                }
                Some(Err(e)) => {
                    return Err(ProviderError::Network(http::describe_reqwest_error(&e)))
                }
                None => return decoder.end().await,
            }
        }
    }
}

/// Decodes a streamed reply's body, chunk by chunk as it arrives, into stream events and the completion: the
/// part of reading a reply that does not touch the network (the fuzz target `llm_stream` drives it too).
pub struct BodyDecoder {
    parser: SseParser,
    reply: ReplyState,
}

impl BodyDecoder {
    pub fn new(events: mpsc::Sender<StreamEvent>) -> Self {
        BodyDecoder {
            parser: SseParser::new(MAX_SSE_EVENT_BYTES),
            reply: ReplyState::new(events),
        }
    }

    /// Feeds one chunk of the body; `Some` once the stream said it is done.
    pub async fn feed(&mut self, bytes: &[u8]) -> Result<Option<Completion>, ProviderError> {
        let payloads = self
            .parser
            .feed(bytes)
            .map_err(|e| ProviderError::Protocol(e.to_string()))?;
        for payload in payloads {
            if self.reply.apply(&payload).await? == Flow::Done {
                return Ok(Some(std::mem::take(&mut self.reply.completion)));
            }
        }
        Ok(None)
    }

    /// The body ended: the completion when the stream had finished it, else why not.
    pub async fn end(mut self) -> Result<Completion, ProviderError> {
        if let Some(payload) = self.parser.finish() {
            if self.reply.apply(&payload).await? == Flow::Done {
                return Ok(self.reply.completion);
            }
        }
        Err(ProviderError::Protocol(
            "stream ended early: no message_stop".to_string(),
        ))
    }
}

impl Provider for AnthropicProvider {
    fn stream<'a>(
        &'a self,
        request: ProviderRequest,
        events: mpsc::Sender<StreamEvent>,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Completion, ProviderError>> {
        Box::pin(async move {
            // Losing this race drops the request or response mid-flight.
            tokio::select! {
                biased;
                _ = cancel.cancelled() => Err(ProviderError::Cancelled),
                result = self.run(request, events) => result,
            }
        })
    }
}

/// Where the key goes: Anthropic's own `x-api-key`, or `Authorization:
/// Bearer` for proxies that forward only that (`authHeader: true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHeader {
    ApiKey,
    AuthorizationBearer,
}

fn build_headers(
    api_key: Option<&str>,
    key_header: KeyHeader,
    configured: &BTreeMap<String, String>,
) -> Result<HeaderMap, String> {
    let mut base = HeaderMap::new();
    base.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    base.insert(
        "anthropic-version",
        HeaderValue::from_static(ANTHROPIC_VERSION),
    );
    if let Some(key) = api_key.filter(|k| !k.is_empty()) {
        let (name, text) = match key_header {
            KeyHeader::ApiKey => ("x-api-key", key.to_string()),
            KeyHeader::AuthorizationBearer => ("authorization", format!("Bearer {key}")),
        };
        let mut value = HeaderValue::from_str(&text)
            .map_err(|_| "the API key is not a valid HTTP header value".to_string())?;
        value.set_sensitive(true);
        base.insert(name, value);
    }
    http::configured_headers(base, configured)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::wire::{request_body, Flow, ReplyState};
    use super::*;
    use crate::agent::providers::{ChatMessage, ToolCall, ToolSpec};

    #[test]
    fn a_user_message_with_images_becomes_image_blocks_then_text() {
        use crate::agent::providers::ImagePart;
        let mut user = ChatMessage::user("what is this?");
        user.images = vec![ImagePart {
            mime: "image/jpeg".into(),
            base64: "/9j/AA==".into(),
        }];
        let request = ProviderRequest {
            model: "claude".into(),
            messages: vec![user],
            max_tokens: Some(100),
            tools: std::sync::Arc::from(Vec::new()),
        };
        let body = request_body(&request, ThinkingLevel::Off);
        assert_eq!(
            body["messages"][0]["content"],
            json!([
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/AA=="}},
                {"type": "text", "text": "what is this?"},
            ])
        );
    }

    fn request(messages: Vec<ChatMessage>) -> ProviderRequest {
        ProviderRequest {
            model: "claude-x".into(),
            messages,
            max_tokens: Some(2000),
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "read a file".into(),
                parameters: json!({"type": "object"}),
            }]
            .into(),
        }
    }

    #[test]
    fn endpoint_accepts_base_with_or_without_v1() {
        let http = reqwest::Client::new();
        let plain = AnthropicProvider::new("http://h/", None, BTreeMap::new(), http.clone());
        assert_eq!(plain.endpoint(), "http://h/v1/messages");
        let versioned = AnthropicProvider::new("http://h/v1", None, BTreeMap::new(), http);
        assert_eq!(versioned.endpoint(), "http://h/v1/messages");
    }

    #[test]
    fn tool_rounds_become_tool_use_and_merged_tool_result_blocks() {
        let mut assistant = ChatMessage::assistant("let me look");
        assistant.tool_calls = vec![
            ToolCall {
                id: "t1".into(),
                name: "read".into(),
                arguments: r#"{"path":"a"}"#.into(),
            },
            ToolCall {
                id: "t2".into(),
                name: "read".into(),
                arguments: String::new(),
            },
        ];
        let messages = vec![
            ChatMessage::system("be brief"),
            ChatMessage::user("hi"),
            assistant,
            ChatMessage::tool_result("t1", "A"),
            ChatMessage::tool_result("t2", "B"),
        ];
        let body = request_body(&request(messages), ThinkingLevel::High);
        assert_eq!(body["system"], "be brief");
        let turns = body["messages"].as_array().expect("messages");
        assert_eq!(turns.len(), 3);
        assert_eq!(turns[1]["content"][1]["type"], "tool_use");
        assert_eq!(turns[1]["content"][1]["input"]["path"], "a");
        assert_eq!(turns[1]["content"][2]["input"], json!({}));
        assert_eq!(turns[2]["role"], "user");
        assert_eq!(turns[2]["content"][1]["tool_use_id"], "t2");
        assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
        // Ends in tool results: no thinking without the signed blocks.
        assert!(body.get("thinking").is_none());
        assert_eq!(body["max_tokens"], 2000);
    }

    /// The API refuses empty text blocks ("text content blocks must be non-empty"): an empty turn left by
    /// an aborted run is left out, and the user turns around it merge.
    #[test]
    fn empty_turns_send_no_empty_text_blocks() {
        let messages = vec![
            ChatMessage::user("first"),
            ChatMessage::assistant(""),
            ChatMessage::user("second"),
            ChatMessage::assistant("  "),
            ChatMessage::user(""),
            ChatMessage::user("third"),
        ];
        let body = request_body(&request(messages), ThinkingLevel::Off);
        let turns = body["messages"].as_array().expect("messages");
        assert_eq!(turns.len(), 1, "{body}");
        assert_eq!(turns[0]["role"], "user");
        let texts: Vec<&str> = turns[0]["content"]
            .as_array()
            .expect("blocks")
            .iter()
            .map(|block| block["text"].as_str().expect("text"))
            .collect();
        assert_eq!(texts, ["first", "second", "third"]);
    }

    #[test]
    fn thinking_level_sets_budget_and_room_for_the_answer() {
        let body = request_body(
            &request(vec![ChatMessage::user("hi")]),
            ThinkingLevel::Medium,
        );
        assert_eq!(body["thinking"]["type"], "enabled");
        assert_eq!(body["thinking"]["budget_tokens"], 8192);
        assert!(body["max_tokens"].as_u64().expect("max") > 8192);
        let off = request_body(&request(vec![ChatMessage::user("hi")]), ThinkingLevel::Off);
        assert!(off.get("thinking").is_none());
    }

    #[tokio::test]
    async fn streamed_blocks_fold_into_text_tool_calls_and_usage() {
        let (events, mut received) = mpsc::channel(8);
        let mut reply = ReplyState::new(events);
        let stream = [
            json!({"type":"message_start","message":{"usage":{"input_tokens":12,"output_tokens":1}}}),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}),
            json!({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}),
            json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"tu1","name":"read","input":{}}}),
            json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"pa"}}),
            json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"th\":\"x\"}"}}),
            json!({"type":"content_block_stop","index":2}),
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":30}}),
        ];
        for event in stream {
            assert_eq!(
                reply.apply(&event.to_string()).await.expect("event"),
                Flow::More
            );
        }
        let done = reply
            .apply(r#"{"type":"message_stop"}"#)
            .await
            .expect("stop");
        assert_eq!(done, Flow::Done);
        assert_eq!(
            received.recv().await,
            Some(StreamEvent::ReasoningDelta("hmm".into())),
            "thinking is reported apart from the answer"
        );
        assert_eq!(
            received.recv().await,
            Some(StreamEvent::TextDelta("Hi".into()))
        );
        let completion = reply.completion;
        assert_eq!(completion.text, "Hi");
        assert_eq!(completion.tool_calls[0].arguments, r#"{"path":"x"}"#);
        assert_eq!(completion.usage.input_tokens, 12);
        assert_eq!(completion.usage.output_tokens, 30);
        assert_eq!(completion.stop_reason.as_deref(), Some("tool_use"));
    }

    #[tokio::test]
    async fn error_event_mid_stream_keeps_its_kind() {
        let (events, _received) = mpsc::channel(1);
        let mut reply = ReplyState::new(events);
        let error = reply
            .apply(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#)
            .await
            .expect_err("error event");
        assert!(
            matches!(error, ProviderError::Http { status: 529, .. }),
            "{error}"
        );
    }
}
