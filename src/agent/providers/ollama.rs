//! The Ollama native chat provider (`POST {baseUrl}/api/chat`, streamed as
//! newline-delimited JSON): text, thinking and whole tool calls per line.
//!
//! It owns the HTTP call, a bounded NDJSON line splitter and the mapping of
//! Ollama's messages onto ours (tool results name their tool, since Ollama
//! matches results by name). It holds no retry policy (see `failover.rs`),
//! and cancelling drops the response and so the connection.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::http;
use super::openai::{MAX_COMPLETION_TEXT_BYTES, MAX_TOOL_CALLS, STREAM_IDLE_TIMEOUT_MS};
use super::provider::{
    BoxFuture, ChatMessage, Completion, Provider, ProviderError, ProviderRequest, Role,
    StreamEvent, ToolCall,
};
use crate::agent::failover::ThinkingLevel;

/// The most bytes one NDJSON line may hold.
pub const MAX_NDJSON_LINE_BYTES: usize = 1024 * 1024;

/// Streams replies from one Ollama server.
#[derive(Debug, Clone)]
pub struct OllamaProvider {
    endpoint: String,
    headers: Result<HeaderMap, String>,
    http: reqwest::Client,
    idle_timeout: Duration,
    thinking: ThinkingLevel,
}

impl OllamaProvider {
    /// A provider for `base_url` (`http://127.0.0.1:11434`; a trailing `/v1`
    /// or `/api` is tolerated); requests go to `{root}/api/chat`.
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        headers: BTreeMap<String, String>,
        http: reqwest::Client,
    ) -> Self {
        let mut root = base_url.trim_end_matches('/');
        for suffix in ["/v1", "/api"] {
            root = root.strip_suffix(suffix).unwrap_or(root);
        }
        OllamaProvider {
            endpoint: format!("{root}/api/chat"),
            headers: build_headers(api_key.as_deref(), &headers),
            http,
            idle_timeout: Duration::from_millis(STREAM_IDLE_TIMEOUT_MS),
            thinking: ThinkingLevel::Off,
        }
    }

    /// The same provider asking for this thinking level (Ollama's `think`).
    pub fn with_thinking(mut self, thinking: ThinkingLevel) -> Self {
        self.thinking = thinking;
        self
    }

    pub fn set_stream_idle_timeout(&mut self, timeout: Duration) {
        self.idle_timeout = timeout;
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    async fn run(
        &self,
        request: ProviderRequest,
        events: mpsc::Sender<StreamEvent>,
    ) -> Result<Completion, ProviderError> {
        let headers = self.headers.clone().map_err(ProviderError::Protocol)?;
        log::debug!("POST {} model={}", self.endpoint, request.model);
        let body = request_body(&request, self.thinking);
        let builder = self.http.post(&self.endpoint).headers(headers).json(&body);
        let response = http::send(builder, self.idle_timeout).await?;
        if !response.status().is_success() {
            return Err(http::error_from_response(response, self.idle_timeout).await);
        }
        let mut decoder = BodyDecoder::new(events);
        let mut stream = response.bytes_stream();
        loop {
            let next = tokio::time::timeout(self.idle_timeout, stream.next())
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

/// Decodes a streamed reply's body (NDJSON), chunk by chunk as it arrives, into stream events and the
/// completion: the part of reading a reply that does not touch the network (the fuzz target `llm_stream`
/// drives it too).
pub struct BodyDecoder {
    lines: LineSplitter,
    reply: ReplyState,
}

impl BodyDecoder {
    pub fn new(events: mpsc::Sender<StreamEvent>) -> Self {
        BodyDecoder {
            lines: LineSplitter::new(MAX_NDJSON_LINE_BYTES),
            reply: ReplyState::new(events),
        }
    }

    /// Feeds one chunk of the body; `Some` once a line said `done`.
    pub async fn feed(&mut self, bytes: &[u8]) -> Result<Option<Completion>, ProviderError> {
        for line in self.lines.feed(bytes)? {
            if self.reply.apply(&line).await? {
                return Ok(Some(std::mem::take(&mut self.reply.completion)));
            }
        }
        Ok(None)
    }

    /// The body ended: the completion when its last line said `done`, else why not.
    pub async fn end(mut self) -> Result<Completion, ProviderError> {
        if let Some(line) = self.lines.finish() {
            if self.reply.apply(&line).await? {
                return Ok(self.reply.completion);
            }
        }
        Err(ProviderError::Protocol(
            "stream ended early: no line with done=true".to_string(),
        ))
    }
}

impl Provider for OllamaProvider {
    fn stream<'a>(
        &'a self,
        request: ProviderRequest,
        events: mpsc::Sender<StreamEvent>,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Completion, ProviderError>> {
        Box::pin(async move {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => Err(ProviderError::Cancelled),
                result = self.run(request, events) => result,
            }
        })
    }
}

fn build_headers(
    api_key: Option<&str>,
    configured: &BTreeMap<String, String>,
) -> Result<HeaderMap, String> {
    let mut base = HeaderMap::new();
    base.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(key) = api_key.filter(|k| !k.is_empty()) {
        let value = HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|_| "the API key is not a valid HTTP header value".to_string())?;
        base.insert(AUTHORIZATION, value);
    }
    http::configured_headers(base, configured)
}

/// The `/api/chat` body. Thinking maps to `think`: left out when off, `true`
/// for every other level (Ollama has no budgets).
pub fn request_body(request: &ProviderRequest, thinking: ThinkingLevel) -> Value {
    let mut body = json!({
        "model": request.model,
        "messages": messages_json(&request.messages),
        "stream": true,
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect();
    }
    if thinking != ThinkingLevel::Off {
        body["think"] = json!(true);
    }
    if let Some(max) = request.max_tokens {
        body["options"] = json!({"num_predict": max});
    }
    body
}

fn messages_json(messages: &[ChatMessage]) -> Vec<Value> {
    let mut names: HashMap<&str, &str> = HashMap::new();
    let mut out = Vec::with_capacity(messages.len());
    for message in messages {
        let mut entry = json!({"role": message.role.as_str(), "content": message.content});
        if message.role == Role::Assistant && !message.tool_calls.is_empty() {
            entry["tool_calls"] = message
                .tool_calls
                .iter()
                .map(|call| {
                    names.insert(&call.id, &call.name);
                    let arguments = serde_json::from_str::<Value>(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    json!({"function": {"name": call.name, "arguments": arguments}})
                })
                .collect();
        }
        if let Some(name) = message.tool_call_id.as_deref().and_then(|id| names.get(id)) {
            entry["tool_name"] = json!(name);
        }
        if !message.images.is_empty() {
            // Ollama's chat API takes a message's images as bare base64 strings.
            entry["images"] = message.images.iter().map(|i| json!(&*i.base64)).collect();
        }
        out.push(entry);
    }
    out
}

/// The reply being assembled from NDJSON lines.
struct ReplyState {
    completion: Completion,
    thinking_bytes: usize,
    events: Option<mpsc::Sender<StreamEvent>>,
}

impl ReplyState {
    fn new(events: mpsc::Sender<StreamEvent>) -> Self {
        ReplyState {
            completion: Completion::default(),
            thinking_bytes: 0,
            events: Some(events),
        }
    }

    /// Applies one line; true once the line said `done`.
    async fn apply(&mut self, line: &str) -> Result<bool, ProviderError> {
        if line.trim().is_empty() {
            return Ok(false);
        }
        let chunk: Value = serde_json::from_str(line)
            .map_err(|e| ProviderError::Protocol(format!("stream line is not valid JSON: {e}")))?;
        if let Some(error) = chunk.get("error") {
            return Err(ProviderError::Http {
                status: 502,
                message: error.as_str().unwrap_or("error in stream").to_string(),
                retry_after_ms: None,
            });
        }
        let message = &chunk["message"];
        if let Some(thinking) = message["thinking"].as_str().filter(|t| !t.is_empty()) {
            self.thinking_bytes += thinking.len();
            self.check_size()?;
            if let Some(events) = &self.events {
                let delta = StreamEvent::ReasoningDelta(thinking.to_string());
                if events.send(delta).await.is_err() {
                    self.events = None;
                }
            }
        }
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            self.push_tool_call(call)?;
        }
        if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
            self.push_text(text.to_string()).await?;
        }
        self.check_size()?;
        if chunk["done"].as_bool() != Some(true) {
            return Ok(false);
        }
        self.completion.usage.input_tokens = chunk["prompt_eval_count"].as_u64().unwrap_or(0);
        self.completion.usage.output_tokens = chunk["eval_count"].as_u64().unwrap_or(0);
        let reason = chunk["done_reason"].as_str().unwrap_or("stop");
        self.completion.stop_reason = Some(if self.completion.tool_calls.is_empty() {
            reason.to_string()
        } else {
            "tool_calls".to_string()
        });
        Ok(true)
    }

    fn push_tool_call(&mut self, call: &Value) -> Result<(), ProviderError> {
        let calls = &mut self.completion.tool_calls;
        if calls.len() >= MAX_TOOL_CALLS {
            return Err(ProviderError::Protocol(format!(
                "more than {MAX_TOOL_CALLS} tool calls in one reply"
            )));
        }
        let function = &call["function"];
        let arguments = match &function["arguments"] {
            Value::String(text) => text.clone(),
            Value::Null => "{}".to_string(),
            other => other.to_string(),
        };
        let id = call["id"]
            .as_str()
            .filter(|id| !id.is_empty())
            .map(String::from)
            .unwrap_or_else(|| format!("call_{}", calls.len() + 1));
        calls.push(ToolCall {
            id,
            name: function["name"].as_str().unwrap_or_default().to_string(),
            arguments,
        });
        Ok(())
    }

    fn check_size(&self) -> Result<(), ProviderError> {
        if self.completion.text.len() + self.thinking_bytes > MAX_COMPLETION_TEXT_BYTES {
            return Err(ProviderError::Protocol(format!(
                "reply text longer than {MAX_COMPLETION_TEXT_BYTES} bytes"
            )));
        }
        Ok(())
    }

    async fn push_text(&mut self, text: String) -> Result<(), ProviderError> {
        self.completion.text.push_str(&text);
        if let Some(events) = &self.events {
            if events.send(StreamEvent::TextDelta(text)).await.is_err() {
                self.events = None;
            }
        }
        Ok(())
    }
}

/// Splits a byte stream into LF-terminated UTF-8 lines of bounded length.
#[derive(Debug)]
pub struct LineSplitter {
    line: Vec<u8>,
    max_line_bytes: usize,
}

impl LineSplitter {
    pub fn new(max_line_bytes: usize) -> Self {
        LineSplitter {
            line: Vec::new(),
            max_line_bytes,
        }
    }

    /// Consumes `bytes` and returns every line they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<String>, ProviderError> {
        let mut lines = Vec::new();
        for piece in bytes.split_inclusive(|b| *b == b'\n') {
            let (content, ends) = match piece.strip_suffix(b"\n") {
                Some(content) => (content, true),
                None => (piece, false),
            };
            if self.line.len() + content.len() > self.max_line_bytes {
                return Err(ProviderError::Protocol(format!(
                    "stream line longer than {} bytes",
                    self.max_line_bytes
                )));
            }
            self.line.extend_from_slice(content);
            if ends {
                lines.push(self.take()?);
            }
        }
        Ok(lines)
    }

    /// The last line when the stream ended without a final newline.
    pub fn finish(&mut self) -> Option<String> {
        (!self.line.is_empty()).then(|| self.take().ok()).flatten()
    }

    fn take(&mut self) -> Result<String, ProviderError> {
        let line = std::mem::take(&mut self.line);
        String::from_utf8(line)
            .map(|l| l.trim_end_matches('\r').to_string())
            .map_err(|_| ProviderError::Protocol("stream line is not valid UTF-8".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::providers::ToolSpec;

    #[test]
    fn a_user_message_with_images_carries_them_as_base64_strings() {
        use crate::agent::providers::ImagePart;
        let mut user = ChatMessage::user("what is this?");
        user.images = vec![ImagePart {
            mime: "image/png".into(),
            base64: "iVBORw==".into(),
        }];
        let request = ProviderRequest {
            model: "llava".into(),
            messages: vec![user],
            max_tokens: None,
            tools: std::sync::Arc::from(Vec::new()),
        };
        let body = request_body(&request, ThinkingLevel::Off);
        assert_eq!(body["messages"][0]["content"], "what is this?");
        assert_eq!(body["messages"][0]["images"], json!(["iVBORw=="]));
    }

    #[test]
    fn lines_split_anywhere_are_reassembled_and_capped() {
        let input = "{\"a\":\"\u{1f980}\"}\n{\"b\":2}\n";
        let bytes = input.as_bytes();
        for cut in 1..bytes.len() {
            let mut lines = LineSplitter::new(64);
            let mut out = lines.feed(&bytes[..cut]).expect("first piece");
            out.extend(lines.feed(&bytes[cut..]).expect("second piece"));
            assert_eq!(out, vec!["{\"a\":\"\u{1f980}\"}", "{\"b\":2}"], "cut {cut}");
        }
        let mut small = LineSplitter::new(4);
        assert!(small.feed(b"12345").is_err());
    }

    #[test]
    fn endpoint_strips_openai_suffix() {
        let http = reqwest::Client::new();
        let provider = OllamaProvider::new("http://h:11434/v1/", None, BTreeMap::new(), http);
        assert_eq!(provider.endpoint(), "http://h:11434/api/chat");
    }

    #[test]
    fn tool_results_carry_the_tool_name_and_thinking_maps_to_think() {
        let mut assistant = ChatMessage::assistant("");
        assistant.tool_calls = vec![ToolCall {
            id: "call_1".into(),
            name: "read".into(),
            arguments: r#"{"path":"a"}"#.into(),
        }];
        let request = ProviderRequest {
            model: "qwen3:4b".into(),
            messages: vec![
                ChatMessage::user("hi"),
                assistant,
                ChatMessage::tool_result("call_1", "A"),
            ],
            max_tokens: Some(100),
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }]
            .into(),
        };
        let body = request_body(&request, ThinkingLevel::Low);
        assert_eq!(
            body["messages"][1]["tool_calls"][0]["function"]["arguments"]["path"],
            "a"
        );
        assert_eq!(body["messages"][2]["tool_name"], "read");
        assert_eq!(body["think"], true);
        assert_eq!(body["options"]["num_predict"], 100);
        assert!(request_body(&request, ThinkingLevel::Off)
            .get("think")
            .is_none());
    }

    #[tokio::test]
    async fn final_line_gives_usage_and_tool_calls_get_ids() {
        let (events, _rx) = mpsc::channel(4);
        let mut reply = ReplyState::new(events);
        let call = r#"{"message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"read","arguments":{"path":"x"}}}]},"done":false}"#;
        assert!(!reply.apply(call).await.expect("line"));
        let last = r#"{"message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","prompt_eval_count":7,"eval_count":3}"#;
        assert!(reply.apply(last).await.expect("line"));
        assert_eq!(reply.completion.tool_calls[0].id, "call_1");
        assert_eq!(reply.completion.tool_calls[0].arguments, r#"{"path":"x"}"#);
        assert_eq!(reply.completion.usage.input_tokens, 7);
        assert_eq!(reply.completion.stop_reason.as_deref(), Some("tool_calls"));
    }
}
