//! A fake Anthropic Messages server for integration tests: `POST
//! /v1/messages` answered in Anthropic's real SSE format (`message_start`,
//! `content_block_start/delta/stop`, `message_delta`, `message_stop`, `ping`,
//! `error` events) or with Anthropic error JSON. Replies are scripted with
//! [`AnthropicReply`] (FIFO; when none is queued it echoes the last user
//! text). Loopback only; never used by product code.
//!
//! It checks each request as Anthropic does before any scripted reply is
//! used: a non-empty `x-api-key`, or an `Authorization: Bearer` token as the
//! API also takes (else 401 `authentication_error`), a known
//! `anthropic-version`, and a body with `model`, `max_tokens` ≥ 1 and
//! `messages` of `user` / `assistant` turns (consecutive same-role turns
//! merged, as the API does) whose content is a non-empty string or
//! well-formed blocks: non-empty text, `tool_use` only from the assistant,
//! every `tool_use` answered by a `tool_result` at the start of the next turn
//! and every `tool_result` naming a `tool_use` of the turn before; the final
//! assistant turn must not end in whitespace; a thinking budget of at least
//! 1,024 tokens and below `max_tokens`; `system` a string or text blocks;
//! tools named `^[a-zA-Z0-9_-]{1,64}$` with an `input_schema`. A refusal is 400
//! `invalid_request_error`. It streams only when the body says
//! `"stream": true`; otherwise the answer is one `message` JSON object.

use bytes::Bytes;
use serde_json::{json, Value};

use super::wire_server::{Answer, RecordedRequest, WireServer};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum AnthropicReply {
    /// A thinking block (when the request enabled thinking), then one text
    /// block streamed in these pieces, `stop_reason: "end_turn"`.
    Text(Vec<String>),
    /// Optional text, then `tool_use` blocks `(id, name, input JSON)` whose
    /// input streams as `input_json_delta` fragments; `stop_reason: "tool_use"`.
    ToolUse(Vec<(String, String, Value)>),
    /// An Anthropic error body with this status, error type and message.
    Error {
        status: u16,
        kind: String,
        message: String,
        retry_after_secs: Option<u64>,
    },
    /// Text pieces, then an `error` event of this type mid-stream.
    TextThenError { text: String, kind: String },
    /// One text delta, then the stream stays open until the client leaves.
    Hang(String),
}

/// A running fake; stops when dropped.
pub struct FakeAnthropic {
    server: WireServer<AnthropicReply>,
}

impl FakeAnthropic {
    pub async fn start() -> FakeAnthropic {
        FakeAnthropic {
            server: WireServer::start(refuse, render).await,
        }
    }

    /// What `models.providers.<id>.baseUrl` holds (`https://api.anthropic.com` style).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    pub fn push_reply(&self, reply: AnthropicReply) {
        self.server.push_reply(reply);
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.server.requests()
    }

    pub async fn wait_for_disconnects(&self, count: usize) {
        self.server.wait_for_disconnects(count).await;
    }
}

/// Anthropic's refusal of a malformed request: the route, the key, then
/// [`check_request`].
fn refuse(request: &RecordedRequest) -> Option<Answer> {
    if request.method != "POST" || request.path != "/v1/messages" {
        return Some(error_answer(404, "not_found_error", "Not found", None));
    }
    let api_key = request
        .headers
        .get("x-api-key")
        .is_some_and(|k| !k.trim().is_empty());
    let bearer = request
        .headers
        .get("authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| !t.trim().is_empty());
    if !api_key && !bearer {
        return Some(error_answer(
            401,
            "authentication_error",
            "x-api-key header is required",
            None,
        ));
    }
    check_request(request)
        .err()
        .map(|message| error_answer(400, "invalid_request_error", &message, None))
}

fn render(request: &RecordedRequest, reply: Option<AnthropicReply>) -> Answer {
    let reply = reply.unwrap_or_else(|| {
        AnthropicReply::Text(vec![format!("echo: {}", last_user_text(&request.body))])
    });
    if request.body["stream"] != true {
        return message_answer(&request.body, reply);
    }
    let thinking = request.body["thinking"]["type"] == "enabled";
    let mut events = vec![event(
        "message_start",
        json!({"type": "message_start", "message": {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": request.body["model"],
        "content": [], "stop_reason": null, "usage": {"input_tokens": 11, "output_tokens": 1}}}),
    )];
    events.push(event("ping", json!({"type": "ping"})));
    let mut index = 0;
    if thinking {
        events.extend(block(
            index,
            json!({"type": "thinking", "thinking": ""}),
            vec![
                json!({"type": "thinking_delta", "thinking": "Let me think."}),
                json!({"type": "signature_delta", "signature": "c2ln"}),
            ],
        ));
        index += 1;
    }
    let (stop, hang) = match reply {
        AnthropicReply::Error {
            status,
            kind,
            message,
            retry_after_secs,
        } => return error_answer(status, &kind, &message, retry_after_secs),
        AnthropicReply::Text(pieces) => {
            let deltas = pieces
                .iter()
                .map(|p| json!({"type": "text_delta", "text": p}))
                .collect();
            events.extend(block(index, json!({"type": "text", "text": ""}), deltas));
            ("end_turn", false)
        }
        AnthropicReply::ToolUse(calls) => {
            for (id, name, input) in calls {
                let text = input.to_string();
                let (head, tail) = text.split_at(text.len() / 2);
                let deltas = [head, tail]
                    .iter()
                    .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
                    .collect();
                events.extend(block(
                    index,
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    deltas,
                ));
                index += 1;
            }
            ("tool_use", false)
        }
        AnthropicReply::TextThenError { text, kind } => {
            events.push(event("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
            events.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}})));
            events.push(event(
                "error",
                json!({"type": "error", "error": {"type": kind, "message": "stream failed"}}),
            ));
            return sse_answer(events, false);
        }
        AnthropicReply::Hang(first) => {
            events.push(event("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})));
            events.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": first}})));
            return sse_answer(events, true);
        }
    };
    events.push(event("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 9}})));
    events.push(event("message_stop", json!({"type": "message_stop"})));
    sse_answer(events, hang)
}

/// The answer without `stream: true`: one `message` object (an error reply
/// stays an error; a mid-stream failure is an `api_error`).
fn message_answer(body: &Value, reply: AnthropicReply) -> Answer {
    let (content, stop) = match reply {
        AnthropicReply::Error {
            status,
            kind,
            message,
            retry_after_secs,
        } => return error_answer(status, &kind, &message, retry_after_secs),
        AnthropicReply::TextThenError { kind, .. } => {
            return error_answer(500, &kind, "stream failed", None)
        }
        AnthropicReply::Text(pieces) => (
            vec![json!({"type": "text", "text": pieces.concat()})],
            "end_turn",
        ),
        AnthropicReply::Hang(first) => (vec![json!({"type": "text", "text": first})], "end_turn"),
        AnthropicReply::ToolUse(calls) => (
            calls
                .into_iter()
                .map(|(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}))
                .collect(),
            "tool_use",
        ),
    };
    let message = json!({"id": "msg_fake", "type": "message", "role": "assistant",
        "model": body["model"], "content": content, "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 11, "output_tokens": 9}});
    Answer {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        pieces: vec![Bytes::from(message.to_string())],
        piece_delay_ms: 0,
        hang: false,
    }
}

/// API versions the Messages API accepts in `anthropic-version`.
const VERSIONS: &[&str] = &["2023-06-01", "2023-01-01"];
/// The smallest thinking budget the API takes.
const MIN_THINKING_BUDGET: u64 = 1024;

/// Anthropic's checks of headers and body; `Err(message)` as the API words it.
fn check_request(request: &RecordedRequest) -> Result<(), String> {
    match request.headers.get("anthropic-version") {
        None => return Err("anthropic-version: header is required".into()),
        Some(version) if !VERSIONS.contains(&version.as_str()) => {
            return Err(format!("anthropic-version: invalid version {version}"))
        }
        Some(_) => {}
    }
    let body = &request.body;
    if !body.is_object() {
        return Err("The request body is not valid JSON.".into());
    }
    if body["model"].as_str().is_none_or(str::is_empty) {
        return Err("model: Field required".into());
    }
    let Some(max_tokens) = body["max_tokens"].as_u64() else {
        return Err("max_tokens: Field required".into());
    };
    if max_tokens < 1 {
        return Err("max_tokens: Input should be greater than or equal to 1".into());
    }
    if body.get("stream").is_some_and(|s| !s.is_boolean()) {
        return Err("stream: Input should be a valid boolean".into());
    }
    check_system(&body["system"])?;
    check_thinking(body, max_tokens)?;
    check_tools(&body["tools"])?;
    let Some(messages) = body["messages"].as_array() else {
        return Err("messages: Field required".into());
    };
    check_messages(messages)
}

fn check_system(system: &Value) -> Result<(), String> {
    match system {
        Value::Null | Value::String(_) => Ok(()),
        Value::Array(blocks)
            if blocks
                .iter()
                .all(|b| b["type"] == "text" && b["text"].is_string()) =>
        {
            Ok(())
        }
        _ => Err("system: Input should be a valid string or a list of text blocks".into()),
    }
}

fn check_thinking(body: &Value, max_tokens: u64) -> Result<(), String> {
    let thinking = &body["thinking"];
    match thinking["type"].as_str() {
        None if thinking.is_null() => Ok(()),
        Some("disabled") => Ok(()),
        Some("enabled") => {
            let Some(budget) = thinking["budget_tokens"].as_u64() else {
                return Err("thinking.enabled.budget_tokens: Field required".into());
            };
            if budget < MIN_THINKING_BUDGET {
                return Err(format!("thinking.enabled.budget_tokens: Input should be greater than or equal to {MIN_THINKING_BUDGET}"));
            }
            if budget >= max_tokens {
                return Err("`max_tokens` must be greater than `thinking.budget_tokens`".into());
            }
            if body.get("temperature").is_some_and(|t| t.as_f64() != Some(1.0)) {
                return Err("`temperature` may only be set to 1 when thinking is enabled".into());
            }
            Ok(())
        }
        _ => Err("thinking: Input tag found using 'type' does not match any of the expected tags: 'disabled', 'enabled'".into()),
    }
}

fn check_tools(tools: &Value) -> Result<(), String> {
    let tools = match tools {
        Value::Null => return Ok(()),
        Value::Array(tools) => tools,
        _ => return Err("tools: Input should be a valid list".into()),
    };
    for (index, tool) in tools.iter().enumerate() {
        let name = tool["name"].as_str().unwrap_or("");
        let named = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !named {
            return Err(format!(
                "tools.{index}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            ));
        }
        if !tool["input_schema"].is_object() {
            return Err(format!("tools.{index}.custom.input_schema: Field required"));
        }
    }
    Ok(())
}

/// One content block's shape (`Err` names what is wrong).
fn check_block(role: &str, block: &Value) -> Result<(), String> {
    let kind = block["type"].as_str().unwrap_or("");
    let ok = match kind {
        "text" => {
            if block["text"].as_str().is_some_and(str::is_empty) {
                return Err("messages: text content blocks must be non-empty".into());
            }
            block["text"].is_string()
        }
        "image" | "document" => block["source"].is_object(),
        "tool_use" if role == "assistant" => {
            block["id"].as_str().is_some_and(|id| !id.is_empty())
                && block["name"].as_str().is_some_and(|n| !n.is_empty())
                && block["input"].is_object()
        }
        "tool_result" if role == "user" => {
            let content_ok = match &block["content"] {
                Value::Null | Value::String(_) => true,
                Value::Array(parts) => parts
                    .iter()
                    .all(|p| matches!(p["type"].as_str(), Some("text" | "image"))),
                _ => false,
            };
            block["tool_use_id"]
                .as_str()
                .is_some_and(|id| !id.is_empty())
                && content_ok
        }
        "thinking" if role == "assistant" => {
            block["thinking"].is_string() && block["signature"].is_string()
        }
        "redacted_thinking" if role == "assistant" => block["data"].is_string(),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "messages: invalid `{kind}` content block in a `{role}` turn: {block}"
        ))
    }
}

fn check_messages(messages: &[Value]) -> Result<(), String> {
    if messages.is_empty() {
        return Err("messages: at least one message is required".into());
    }
    // Turns after merging consecutive same-role messages: (role, blocks).
    let mut turns: Vec<(String, Vec<Value>)> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        if role != "user" && role != "assistant" {
            return Err(format!(
                "messages.{index}.role: Input should be 'user' or 'assistant'"
            ));
        }
        let blocks = match &message["content"] {
            Value::String(text) if text.is_empty() && index + 1 < messages.len() => {
                return Err(format!("messages.{index}: all messages must have non-empty content except for the optional final assistant message"));
            }
            Value::String(text) => vec![json!({"type": "text", "text": text})],
            Value::Array(blocks) if blocks.is_empty() && index + 1 < messages.len() => {
                return Err(format!("messages.{index}: all messages must have non-empty content except for the optional final assistant message"));
            }
            Value::Array(blocks) => blocks.clone(),
            _ => return Err(format!("messages.{index}.content: Field required")),
        };
        for block in &blocks {
            check_block(role, block)?;
        }
        match turns.last_mut() {
            Some((last, merged)) if last == role => merged.extend(blocks),
            _ => turns.push((role.to_string(), blocks)),
        }
    }
    let ids = |blocks: &[Value], kind: &str, key: &str| -> Vec<String> {
        blocks
            .iter()
            .filter(|b| b["type"] == kind)
            .filter_map(|b| b[key].as_str().map(str::to_string))
            .collect()
    };
    for (at, (role, blocks)) in turns.iter().enumerate() {
        if role == "user" {
            let answered = ids(blocks, "tool_result", "tool_use_id");
            let asked = match at.checked_sub(1).map(|before| &turns[before]) {
                Some((_, before)) => ids(before, "tool_use", "id"),
                None => Vec::new(),
            };
            if let Some(stray) = answered.iter().find(|id| !asked.contains(id)) {
                return Err(format!("messages.{at}.content: unexpected `tool_use_id` found in `tool_result` blocks: {stray}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."));
            }
            let leading = blocks
                .iter()
                .take_while(|b| b["type"] == "tool_result")
                .count();
            if blocks[leading..].iter().any(|b| b["type"] == "tool_result") {
                return Err(format!("messages.{at}.content: `tool_result` blocks must come first in the content array, before any other content"));
            }
        } else {
            let asked = ids(blocks, "tool_use", "id");
            let answered = turns
                .get(at + 1)
                .map(|(_, next)| ids(next, "tool_result", "tool_use_id"))
                .unwrap_or_default();
            let unanswered: Vec<&String> =
                asked.iter().filter(|id| !answered.contains(id)).collect();
            if at + 1 < turns.len() && !unanswered.is_empty() {
                let list: Vec<&str> = unanswered.iter().map(|s| s.as_str()).collect();
                return Err(format!("messages.{at}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", list.join(", ")));
            }
            let last_text = blocks.last().and_then(|b| b["text"].as_str());
            if at + 1 == turns.len() && last_text.is_some_and(|t| t != t.trim_end()) {
                return Err(
                    "messages: final assistant content cannot end with trailing whitespace".into(),
                );
            }
        }
    }
    Ok(())
}

fn block(index: usize, start: Value, deltas: Vec<Value>) -> Vec<Bytes> {
    let mut out = vec![event(
        "content_block_start",
        json!({"type": "content_block_start", "index": index, "content_block": start}),
    )];
    for delta in deltas {
        out.push(event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
    }
    out.push(event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": index}),
    ));
    out
}

fn event(name: &str, data: Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

fn sse_answer(pieces: Vec<Bytes>, hang: bool) -> Answer {
    Answer {
        status: 200,
        headers: vec![(
            "content-type".into(),
            "text/event-stream; charset=utf-8".into(),
        )],
        pieces,
        piece_delay_ms: 2,
        hang,
    }
}

fn error_answer(status: u16, kind: &str, message: &str, retry_after_secs: Option<u64>) -> Answer {
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    if let Some(seconds) = retry_after_secs {
        headers.push(("retry-after".into(), seconds.to_string()));
    }
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    Answer {
        status,
        headers,
        pieces: vec![Bytes::from(body.to_string())],
        piece_delay_ms: 0,
        hang: false,
    }
}

fn last_user_text(body: &Value) -> String {
    let Some(turn) = body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
    else {
        return String::new();
    };
    match &turn["content"] {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
        _ => String::new(),
    }
}
