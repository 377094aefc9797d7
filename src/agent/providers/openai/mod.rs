//! The OpenAI-compatible chat-completions provider (OpenAI, OpenRouter, Ollama,
//! llama.cpp, vLLM and anything else serving `POST {baseUrl}/chat/completions`).
//!
//! It owns the HTTP request, the streamed SSE reply and the mapping of that
//! wire format onto [`StreamEvent`]s, [`Completion`] and [`ProviderError`]. It
//! holds no retry or failover policy (the caller decides from the error), never
//! buffers more than one bounded SSE event at a time, and never outlives its
//! cancellation token: cancelling drops the response and so the connection.

mod body;
mod sse;

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::provider::{
    BoxFuture, Completion, Provider, ProviderError, ProviderRequest, StreamEvent, ToolCall, Usage,
};
use crate::agent::failover::ThinkingLevel;
pub use sse::{SseError, SseParser, MAX_SSE_EVENT_BYTES};

use super::http::{configured_headers, describe_reqwest_error, error_from_response, idle_error};
#[cfg(test)]
use super::http::{error_message, retry_after_ms};
use body::request_body;

/// How long a stream may go without a single byte before it is given up.
pub const STREAM_IDLE_TIMEOUT_MS: u64 = 120_000;
/// Connect timeout of the client built by [`OpenAiCompatProvider::http_client`].
pub const CONNECT_TIMEOUT_MS: u64 = 10_000;
/// The most bytes of assistant text one completion may accumulate.
pub const MAX_COMPLETION_TEXT_BYTES: usize = 8 * 1024 * 1024;
/// The most tool calls one reply may make.
pub const MAX_TOOL_CALLS: usize = 32;
/// The most bytes of arguments one tool call may carry.
pub const MAX_TOOL_ARGUMENT_BYTES: usize = 1024 * 1024;
/// Status reported for an `{"error":…}` object inside a 200 stream whose
/// `code` is not an HTTP status: the upstream failed mid-reply.
const MID_STREAM_ERROR_STATUS: u16 = 502;

/// Streams chat completions from one OpenAI-compatible endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiCompatProvider {
    endpoint: String,
    /// Authorization plus configured headers, or why they are not valid HTTP.
    headers: Result<HeaderMap, String>,
    http: reqwest::Client,
    idle_timeout: Duration,
    /// Sent as `reasoning_effort` (omitted when off).
    thinking: ThinkingLevel,
}

impl OpenAiCompatProvider {
    /// A provider for `base_url` as OpenClaw's `models.providers.<id>.baseUrl`
    /// spells it (`https://api.openai.com/v1`); requests go to
    /// `{base_url}/chat/completions`. Invalid header names or values make
    /// every call fail with a message naming the header.
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        headers: BTreeMap<String, String>,
        http: reqwest::Client,
    ) -> Self {
        OpenAiCompatProvider {
            endpoint: format!("{}/chat/completions", base_url.trim_end_matches('/')),
            headers: build_headers(api_key.as_deref(), &headers),
            http,
            idle_timeout: Duration::from_millis(STREAM_IDLE_TIMEOUT_MS),
            thinking: ThinkingLevel::Off,
        }
    }

    /// The same provider asking for this thinking level (`reasoning_effort`).
    pub fn with_thinking(mut self, thinking: ThinkingLevel) -> Self {
        self.thinking = thinking;
        self
    }

    /// A shared HTTP client with the provider's connect timeout.
    pub fn http_client() -> Result<reqwest::Client, ProviderError> {
        reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
            .build()
            .map_err(|e| ProviderError::Network(describe_reqwest_error(&e)))
    }

    /// Changes how long a stream (or the wait for response headers) may stay
    /// silent before the call fails with [`ProviderError::Network`].
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
        log::debug!("POST {} model={}", self.endpoint, request.model);
        let send = self
            .http
            .post(&self.endpoint)
            .headers(headers)
            .json(&request_body(&request, self.thinking))
            .send();
        let response = tokio::time::timeout(self.idle_timeout, send)
            .await
            .map_err(|_| idle_error(self.idle_timeout, "waiting for response headers"))?
            .map_err(|e| ProviderError::Network(describe_reqwest_error(&e)))?;
        if !response.status().is_success() {
            return Err(error_from_response(response, self.idle_timeout).await);
        }
        if let Some(kind) = non_sse_content_type(response.headers()) {
            return Err(ProviderError::Protocol(format!(
                "expected a text/event-stream reply, got {kind}"
            )));
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
                .map_err(|_| idle_error(self.idle_timeout, "streaming"))?;
            match next {
                Some(Ok(bytes)) => {
                    if let Some(completion) = decoder.feed(&bytes).await? {
                        return Ok(completion);
                    }
                }
                Some(Err(e)) => return Err(ProviderError::Network(describe_reqwest_error(&e))),
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
        for payload in self.parser.feed(bytes).map_err(sse_error)? {
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
        if self.reply.completion.stop_reason.is_some() {
            return Ok(self.reply.completion);
        }
        Err(ProviderError::Protocol(
            "stream ended early: no [DONE] and no finish_reason".to_string(),
        ))
    }
}

impl Provider for OpenAiCompatProvider {
    fn stream<'a>(
        &'a self,
        request: ProviderRequest,
        events: mpsc::Sender<StreamEvent>,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<Completion, ProviderError>> {
        Box::pin(async move {
            // Every await of the call lives inside `run`: losing this race
            // drops the request or response, which closes the connection.
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    log::debug!("provider call to {} cancelled", self.endpoint);
                    Err(ProviderError::Cancelled)
                }
                result = self.run(request, events) => result,
            }
        })
    }
}

/// Whether the stream goes on after one event.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    More,
    Done,
}

/// The reply being assembled from stream chunks.
struct ReplyState {
    completion: Completion,
    /// Bytes of thinking seen (counted against the text cap).
    reasoning_bytes: usize,
    /// `None` once the receiver is gone: text is still accumulated.
    events: Option<mpsc::Sender<StreamEvent>>,
}

impl ReplyState {
    fn new(events: mpsc::Sender<StreamEvent>) -> Self {
        ReplyState {
            completion: Completion::default(),
            reasoning_bytes: 0,
            events: Some(events),
        }
    }

    /// Applies one SSE payload: a chunk object, an error object or `[DONE]`.
    async fn apply(&mut self, payload: &str) -> Result<Flow, ProviderError> {
        let payload = payload.trim();
        if payload.is_empty() {
            return Ok(Flow::More);
        }
        if payload == "[DONE]" {
            return Ok(Flow::Done);
        }
        let chunk: ChunkWire = serde_json::from_str(payload)
            .map_err(|e| ProviderError::Protocol(format!("stream chunk is not valid JSON: {e}")))?;
        if let Some(error) = chunk.error {
            return Err(error.into_provider_error(MID_STREAM_ERROR_STATUS, None));
        }
        if let Some(usage) = chunk.usage {
            self.completion.usage = Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
            };
        }
        let Some(choice) = chunk.choices.into_iter().next() else {
            return Ok(Flow::More);
        };
        if let Some(reason) = choice.finish_reason {
            self.completion.stop_reason = Some(reason);
        }
        let Some(delta) = choice.delta else {
            return Ok(Flow::More);
        };
        for call in delta.tool_calls {
            self.push_tool_call(call)?;
        }
        // `reasoning_content` (DeepSeek, vLLM, llama.cpp) or `reasoning` (OpenRouter).
        match delta.reasoning_content.or(delta.reasoning) {
            Some(thinking) if !thinking.is_empty() => self.push_reasoning(thinking).await?,
            _ => {}
        }
        match delta.content {
            Some(text) if !text.is_empty() => self.push_text(text).await?,
            _ => {}
        }
        Ok(Flow::More)
    }

    /// Folds one streamed tool-call fragment into the call at its index.
    fn push_tool_call(&mut self, fragment: ToolCallWire) -> Result<(), ProviderError> {
        let calls = &mut self.completion.tool_calls;
        let index = fragment
            .index
            .unwrap_or(calls.len().saturating_sub(1) as u32) as usize;
        if index >= MAX_TOOL_CALLS {
            return Err(ProviderError::Protocol(format!(
                "more than {MAX_TOOL_CALLS} tool calls in one reply"
            )));
        }
        while calls.len() <= index {
            calls.push(ToolCall::default());
        }
        let call = &mut calls[index];
        if let Some(id) = fragment.id.filter(|id| !id.is_empty()) {
            call.id = id;
        }
        if let Some(function) = fragment.function {
            if let Some(name) = function.name.filter(|n| !n.is_empty()) {
                call.name.push_str(&name);
            }
            if let Some(arguments) = function.arguments {
                if call.arguments.len() + arguments.len() > MAX_TOOL_ARGUMENT_BYTES {
                    return Err(ProviderError::Protocol(format!(
                        "tool call arguments longer than {MAX_TOOL_ARGUMENT_BYTES} bytes"
                    )));
                }
                call.arguments.push_str(&arguments);
            }
        }
        Ok(())
    }

    async fn push_reasoning(&mut self, thinking: String) -> Result<(), ProviderError> {
        self.reasoning_bytes += thinking.len();
        if self.completion.text.len() + self.reasoning_bytes > MAX_COMPLETION_TEXT_BYTES {
            return Err(ProviderError::Protocol(format!(
                "completion text longer than {MAX_COMPLETION_TEXT_BYTES} bytes"
            )));
        }
        if let Some(events) = &self.events {
            if events
                .send(StreamEvent::ReasoningDelta(thinking))
                .await
                .is_err()
            {
                self.events = None;
            }
        }
        Ok(())
    }

    async fn push_text(&mut self, text: String) -> Result<(), ProviderError> {
        if self.completion.text.len() + self.reasoning_bytes + text.len()
            > MAX_COMPLETION_TEXT_BYTES
        {
            return Err(ProviderError::Protocol(format!(
                "completion text longer than {MAX_COMPLETION_TEXT_BYTES} bytes"
            )));
        }
        self.completion.text.push_str(&text);
        if let Some(events) = &self.events {
            if events.send(StreamEvent::TextDelta(text)).await.is_err() {
                log::debug!("stream event receiver gone; still collecting the reply");
                self.events = None;
            }
        }
        Ok(())
    }
}

/// One `chat.completion.chunk` (or an error object) as it arrives.
#[derive(Debug, Deserialize)]
struct ChunkWire {
    #[serde(default)]
    choices: Vec<ChoiceWire>,
    #[serde(default)]
    usage: Option<UsageWire>,
    #[serde(default)]
    error: Option<ErrorWire>,
}

#[derive(Debug, Deserialize)]
struct ChoiceWire {
    #[serde(default)]
    delta: Option<DeltaWire>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct DeltaWire {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCallWire>,
}

#[derive(Debug, Deserialize)]
struct ToolCallWire {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionWire>,
}

#[derive(Debug, Deserialize)]
struct FunctionWire {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Debug, Deserialize)]
struct UsageWire {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// OpenAI's error object: `{"message", "type", "param", "code"}`.
#[derive(Debug, Deserialize)]
struct ErrorWire {
    #[serde(default)]
    message: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    code: Option<serde_json::Value>,
}

impl ErrorWire {
    fn into_provider_error(
        self,
        fallback_status: u16,
        retry_after_ms: Option<u64>,
    ) -> ProviderError {
        let status = self
            .code
            .as_ref()
            .and_then(serde_json::Value::as_u64)
            .and_then(|code| u16::try_from(code).ok())
            .filter(|code| (400..=599).contains(code))
            .unwrap_or(fallback_status);
        let message = self
            .message
            .filter(|m| !m.is_empty())
            .or(self.kind)
            .unwrap_or_else(|| "provider reported an error without a message".to_string());
        ProviderError::Http {
            status,
            message,
            retry_after_ms,
        }
    }
}

/// The request body: streaming on, usage requested in the final chunk,
/// `reasoning_effort` from the thinking level.
fn build_headers(
    api_key: Option<&str>,
    configured: &BTreeMap<String, String>,
) -> Result<HeaderMap, String> {
    let mut headers = configured_headers(HeaderMap::new(), configured)?;
    if let Some(key) = api_key {
        let mut value = HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|_| "the API key contains characters not allowed in a header".to_string())?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    Ok(headers)
}

/// A content type that is clearly not SSE (a JSON body from a server that
/// ignored `stream: true`); a missing content type is given the benefit of doubt.
fn non_sse_content_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(CONTENT_TYPE)?.to_str().ok()?;
    let media_type = value.split(';').next().unwrap_or("").trim();
    (media_type.eq_ignore_ascii_case("application/json")).then(|| value.to_string())
}

fn sse_error(error: SseError) -> ProviderError {
    ProviderError::Protocol(error.to_string())
}

#[cfg(test)]
mod tests;
