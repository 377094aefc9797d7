//! The Anthropic Messages wire format: the request body built from our
//! [`ChatMessage`]s (system prompt apart, tool calls as `tool_use` blocks,
//! tool results as `tool_result` blocks in a user turn, same-role turns
//! merged), the thinking budget per level, and the stream state that folds
//! `message_start` / `content_block_*` / `message_delta` / `error` events into
//! a [`Completion`].
//!
//! Everything it accumulates is capped; it does no I/O besides sending text
//! deltas on the bounded event channel.

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::agent::failover::ThinkingLevel;
use crate::agent::providers::{
    ChatMessage, Completion, ProviderError, ProviderRequest, Role, StreamEvent, ToolCall,
};

/// `max_tokens` is required by the API; used when the model sets none.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// Output room kept beside the thinking budget.
pub const MIN_ANSWER_TOKENS: u32 = 1024;
/// The most content blocks one reply may open.
pub const MAX_CONTENT_BLOCKS: usize = 64;
/// The most bytes of text (answer plus thinking) one reply may carry.
pub const MAX_REPLY_TEXT_BYTES: usize = 8 * 1024 * 1024;
/// The most bytes of JSON input one tool call may carry.
pub const MAX_TOOL_INPUT_BYTES: usize = 1024 * 1024;

/// Thinking budget tokens per level; `None` for off.
pub fn thinking_budget_tokens(level: ThinkingLevel) -> Option<u32> {
    match level {
        ThinkingLevel::Off => None,
        ThinkingLevel::Minimal => Some(1024),
        ThinkingLevel::Low => Some(2048),
        ThinkingLevel::Medium => Some(8192),
        ThinkingLevel::High => Some(16_384),
        ThinkingLevel::XHigh => Some(32_768),
    }
}

/// The JSON body of one streamed Messages call. Thinking is left out when
/// the prompt ends in tool results: the API then wants the signed thinking
/// blocks of the previous assistant turn, which the transcript does not keep.
pub fn request_body(request: &ProviderRequest, thinking: ThinkingLevel) -> Value {
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.content.as_str())
        .collect();
    let mut max_tokens = request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    let mut body = json!({
        "model": request.model,
        "messages": messages_json(&request.messages),
        "stream": true,
    });
    if !system.is_empty() {
        body["system"] = Value::String(system.join("\n\n"));
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
    }
    let ends_in_tool_round = request
        .messages
        .last()
        .is_some_and(|m| m.role == Role::Tool);
    if let Some(budget) = thinking_budget_tokens(thinking).filter(|_| !ends_in_tool_round) {
        max_tokens = max_tokens.max(budget + MIN_ANSWER_TOKENS);
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
    }
    body["max_tokens"] = json!(max_tokens);
    body
}

fn messages_json(messages: &[ChatMessage]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message.role {
            Role::System => continue,
            Role::User => ("user", user_blocks(message)),
            Role::Tool => (
                "user",
                vec![json!({
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id.clone().unwrap_or_default(),
                    "content": message.content,
                })],
            ),
            Role::Assistant => ("assistant", assistant_blocks(message)),
        };
        // The API refuses empty text blocks: a turn with nothing in it is left out.
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// Image blocks (base64 sources) first, as Anthropic suggests, then the text.
fn user_blocks(message: &ChatMessage) -> Vec<Value> {
    let mut blocks: Vec<Value> = message
        .images
        .iter()
        .map(|image| {
            json!({
                "type": "image",
                "source": {"type": "base64", "media_type": image.mime, "data": &*image.base64},
            })
        })
        .collect();
    blocks.extend(text_blocks(&message.content));
    blocks
}

fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// One text block, or none for blank text.
fn text_blocks(text: &str) -> Vec<Value> {
    if text.trim().is_empty() {
        Vec::new()
    } else {
        vec![text_block(text)]
    }
}

fn assistant_blocks(message: &ChatMessage) -> Vec<Value> {
    let mut blocks = text_blocks(&message.content);
    for call in &message.tool_calls {
        let input = serde_json::from_str::<Value>(&call.arguments)
            .ok()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    blocks
}

/// Whether the stream goes on after one event.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    More,
    Done,
}

/// What one open content block is collecting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    Thinking,
    /// A tool call: its position in `completion.tool_calls`.
    ToolUse(usize),
    Other,
}

/// The reply being assembled from stream events.
pub struct ReplyState {
    pub completion: Completion,
    blocks: Vec<Block>,
    /// Input given whole in `content_block_start`, used when no deltas come.
    start_inputs: Vec<String>,
    thinking_bytes: usize,
    /// `None` once the receiver is gone: text is still accumulated.
    events: Option<mpsc::Sender<StreamEvent>>,
}

impl ReplyState {
    pub fn new(events: mpsc::Sender<StreamEvent>) -> Self {
        ReplyState {
            completion: Completion::default(),
            blocks: Vec::new(),
            start_inputs: Vec::new(),
            thinking_bytes: 0,
            events: Some(events),
        }
    }

    /// Applies one SSE data payload.
    pub async fn apply(&mut self, payload: &str) -> Result<Flow, ProviderError> {
        if payload.trim().is_empty() {
            return Ok(Flow::More);
        }
        let event: Value = serde_json::from_str(payload)
            .map_err(|e| ProviderError::Protocol(format!("stream event is not valid JSON: {e}")))?;
        match event["type"].as_str().unwrap_or("") {
            "message_start" => {
                let usage = &event["message"]["usage"];
                self.completion.usage.input_tokens = usage["input_tokens"].as_u64().unwrap_or(0)
                    + usage["cache_read_input_tokens"].as_u64().unwrap_or(0)
                    + usage["cache_creation_input_tokens"].as_u64().unwrap_or(0);
            }
            "content_block_start" => self.start_block(&event).await?,
            "content_block_delta" => self.apply_delta(&event).await?,
            "content_block_stop" => self.stop_block(&event),
            "message_delta" => {
                if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                    self.completion.stop_reason = Some(reason.to_string());
                }
                if let Some(output) = event["usage"]["output_tokens"].as_u64() {
                    self.completion.usage.output_tokens = output;
                }
            }
            "message_stop" => return Ok(Flow::Done),
            "error" => return Err(stream_error(&event["error"])),
            _ => {}
        }
        Ok(Flow::More)
    }

    fn block_index(event: &Value) -> Result<usize, ProviderError> {
        let index = event["index"]
            .as_u64()
            .ok_or_else(|| ProviderError::Protocol("content block event without index".into()))?;
        usize::try_from(index)
            .ok()
            .filter(|i| *i < MAX_CONTENT_BLOCKS)
            .ok_or_else(|| {
                ProviderError::Protocol(format!("more than {MAX_CONTENT_BLOCKS} content blocks"))
            })
    }

    async fn start_block(&mut self, event: &Value) -> Result<(), ProviderError> {
        let index = Self::block_index(event)?;
        let content = &event["content_block"];
        let block = match content["type"].as_str().unwrap_or("") {
            "text" => Block::Text,
            "thinking" | "redacted_thinking" => Block::Thinking,
            "tool_use" | "server_tool_use" => {
                self.completion.tool_calls.push(ToolCall {
                    id: content["id"].as_str().unwrap_or_default().to_string(),
                    name: content["name"].as_str().unwrap_or_default().to_string(),
                    arguments: String::new(),
                });
                Block::ToolUse(self.completion.tool_calls.len() - 1)
            }
            _ => Block::Other,
        };
        while self.blocks.len() <= index {
            self.blocks.push(Block::Other);
            self.start_inputs.push(String::new());
        }
        self.blocks[index] = block;
        self.start_inputs[index] = match &content["input"] {
            Value::Object(map) if !map.is_empty() => content["input"].to_string(),
            _ => String::new(),
        };
        if let Some(text) = content["text"].as_str().filter(|t| !t.is_empty()) {
            self.push_text(text.to_string()).await?;
        }
        Ok(())
    }

    async fn apply_delta(&mut self, event: &Value) -> Result<(), ProviderError> {
        let index = Self::block_index(event)?;
        let delta = &event["delta"];
        let block = self.blocks.get(index).copied().unwrap_or(Block::Other);
        match (delta["type"].as_str().unwrap_or(""), block) {
            ("text_delta", _) => {
                let text = delta["text"].as_str().unwrap_or_default().to_string();
                if !text.is_empty() {
                    self.push_text(text).await?;
                }
            }
            ("input_json_delta", Block::ToolUse(call)) => {
                let part = delta["partial_json"].as_str().unwrap_or_default();
                let arguments = &mut self.completion.tool_calls[call].arguments;
                if arguments.len() + part.len() > MAX_TOOL_INPUT_BYTES {
                    return Err(ProviderError::Protocol(format!(
                        "tool input longer than {MAX_TOOL_INPUT_BYTES} bytes"
                    )));
                }
                arguments.push_str(part);
            }
            ("thinking_delta", _) => {
                let thinking = delta["thinking"].as_str().unwrap_or_default();
                self.thinking_bytes += thinking.len();
                self.check_size()?;
                self.send(StreamEvent::ReasoningDelta(thinking.to_string()))
                    .await;
            }
            _ => {}
        }
        Ok(())
    }

    fn stop_block(&mut self, event: &Value) {
        let Ok(index) = Self::block_index(event) else {
            return;
        };
        if let Some(Block::ToolUse(call)) = self.blocks.get(index).copied() {
            let arguments = &mut self.completion.tool_calls[call].arguments;
            if arguments.trim().is_empty() {
                *arguments = match self.start_inputs[index].as_str() {
                    "" => "{}".to_string(),
                    whole => whole.to_string(),
                };
            }
        }
    }

    fn check_size(&self) -> Result<(), ProviderError> {
        if self.completion.text.len() + self.thinking_bytes > MAX_REPLY_TEXT_BYTES {
            return Err(ProviderError::Protocol(format!(
                "reply text longer than {MAX_REPLY_TEXT_BYTES} bytes"
            )));
        }
        Ok(())
    }

    async fn push_text(&mut self, text: String) -> Result<(), ProviderError> {
        self.completion.text.push_str(&text);
        self.check_size()?;
        self.send(StreamEvent::TextDelta(text)).await;
        Ok(())
    }

    /// Passes an event on; once the receiver is gone the reply is still collected.
    async fn send(&mut self, event: StreamEvent) {
        if let Some(events) = &self.events {
            if events.send(event).await.is_err() {
                log::debug!("stream event receiver gone; still collecting the reply");
                self.events = None;
            }
        }
    }
}

/// Maps an Anthropic error object (in a 200 stream) to an HTTP-like error.
fn stream_error(error: &Value) -> ProviderError {
    let kind = error["type"].as_str().unwrap_or("api_error");
    let status = match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        _ => 500,
    };
    let message = error["message"].as_str().unwrap_or(kind);
    ProviderError::Http {
        status,
        message: message.chars().take(500).collect(),
        retry_after_ms: None,
    }
}
