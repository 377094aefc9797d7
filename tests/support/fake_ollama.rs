//! A fake Ollama server for integration tests: `POST /api/chat` answered in
//! Ollama's real NDJSON stream format (one `{"model","created_at","message",
//! "done":false}` object per line, then a `done:true` line with
//! `done_reason` and eval counts) or with Ollama's `{"error": …}` JSON.
//! Replies are scripted with [`OllamaReply`] (FIFO; when none is queued it
//! echoes the last user message). Loopback only; never used by product code.
//!
//! It checks each request as Ollama's server does before any scripted reply
//! is used: a JSON body (else 400 with Go's decode error), a non-empty
//! `model` ("model is required"), `messages` as objects with a known role and
//! string `content` (no messages at all only loads the model, as on Ollama;
//! Ollama decodes into Go structs: an array content or
//! string tool-call arguments fail to decode), boolean `stream` and `think`,
//! tools of type `function` with a name, and `options` an object. A refusal
//! is 400 `{"error": …}`. It streams NDJSON unless `"stream": false`, when
//! the answer is the one final object.

use bytes::Bytes;
use serde_json::{json, Value};

use super::wire_server::{Answer, RecordedRequest, WireServer};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum OllamaReply {
    /// One line per piece, then the `done` line.
    Text(Vec<String>),
    /// One line with these whole tool calls `(name, arguments)`, then `done`.
    ToolCalls(Vec<(String, Value)>),
    /// `{"error": message}` with this status.
    Error { status: u16, message: String },
    /// One text line, then the stream stays open until the client leaves.
    Hang(String),
}

pub struct FakeOllama {
    server: WireServer<OllamaReply>,
}

impl FakeOllama {
    pub async fn start() -> FakeOllama {
        FakeOllama {
            server: WireServer::start(refuse, render).await,
        }
    }

    /// `http://127.0.0.1:PORT`, Ollama's usual `baseUrl`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    pub fn push_reply(&self, reply: OllamaReply) {
        self.server.push_reply(reply);
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.server.requests()
    }

    pub async fn wait_for_disconnects(&self, count: usize) {
        self.server.wait_for_disconnects(count).await;
    }
}

/// Ollama's refusal of a malformed request: the route, then [`check_request`].
fn refuse(request: &RecordedRequest) -> Option<Answer> {
    if request.method != "POST" || request.path != "/api/chat" {
        return Some(error_answer(404, "404 page not found"));
    }
    check_request(&request.body)
        .err()
        .map(|message| error_answer(400, &message))
}

fn render(request: &RecordedRequest, reply: Option<OllamaReply>) -> Answer {
    let model = request.body["model"].clone();
    if request.body["messages"]
        .as_array()
        .is_none_or(|m| m.is_empty())
    {
        // As Ollama: no messages only loads the model.
        let loaded = json!({"model": model, "created_at": "2025-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": ""}, "done_reason": "load", "done": true});
        return whole_answer(&[Bytes::from(format!("{loaded}\n"))]);
    }
    let line = |message: Value, done: bool| {
        let mut object = json!({"model": model, "created_at": "2025-01-01T00:00:00Z", "message": message, "done": done});
        if done {
            object["done_reason"] = json!("stop");
            object["prompt_eval_count"] = json!(13);
            object["eval_count"] = json!(5);
        }
        Bytes::from(format!("{object}\n"))
    };
    let reply = reply.unwrap_or_else(|| {
        let last = request.body["messages"]
            .as_array()
            .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default();
        OllamaReply::Text(vec![format!("echo: {last}")])
    });
    let mut lines = Vec::new();
    let hang = match reply {
        OllamaReply::Error { status, message } => return error_answer(status, &message),
        OllamaReply::Text(pieces) => {
            if request.body["think"] == true {
                lines.push(line(
                    json!({"role": "assistant", "content": "", "thinking": "hmm"}),
                    false,
                ));
            }
            for piece in pieces {
                lines.push(line(json!({"role": "assistant", "content": piece}), false));
            }
            false
        }
        OllamaReply::ToolCalls(calls) => {
            let calls: Vec<Value> = calls
                .into_iter()
                .map(
                    |(name, arguments)| json!({"function": {"name": name, "arguments": arguments}}),
                )
                .collect();
            lines.push(line(
                json!({"role": "assistant", "content": "", "tool_calls": calls}),
                false,
            ));
            false
        }
        OllamaReply::Hang(first) => {
            lines.push(line(json!({"role": "assistant", "content": first}), false));
            true
        }
    };
    if !hang {
        lines.push(line(json!({"role": "assistant", "content": ""}), true));
    }
    if request.body["stream"] == false {
        return whole_answer(&lines);
    }
    Answer {
        status: 200,
        headers: vec![("content-type".into(), "application/x-ndjson".into())],
        pieces: lines,
        piece_delay_ms: 2,
        hang,
    }
}

/// The `"stream": false` answer: the lines folded into the one final object
/// (content and thinking concatenated, tool calls collected).
fn whole_answer(lines: &[Bytes]) -> Answer {
    let parsed: Vec<Value> = lines
        .iter()
        .filter_map(|line| serde_json::from_slice(line).ok())
        .collect();
    let mut last = parsed.last().cloned().unwrap_or_else(|| json!({}));
    let text = |key: &str| -> String {
        parsed
            .iter()
            .filter_map(|l| l["message"][key].as_str())
            .collect()
    };
    let calls: Vec<Value> = parsed
        .iter()
        .filter_map(|l| l["message"]["tool_calls"].as_array())
        .flatten()
        .cloned()
        .collect();
    let mut message = json!({"role": "assistant", "content": text("content")});
    let thinking = text("thinking");
    if !thinking.is_empty() {
        message["thinking"] = json!(thinking);
    }
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    last["message"] = message;
    Answer {
        status: 200,
        headers: vec![(
            "content-type".into(),
            "application/json; charset=utf-8".into(),
        )],
        pieces: vec![Bytes::from(last.to_string())],
        piece_delay_ms: 0,
        hang: false,
    }
}

/// Ollama's checks of a `/api/chat` body; `Err(message)` as its server
/// words it (Go's JSON decoding errors for wrong types).
fn check_request(body: &Value) -> Result<(), String> {
    if !body.is_object() {
        return Err("invalid character looking for beginning of value".into());
    }
    if body["model"].as_str().is_none_or(str::is_empty) {
        return Err("model is required".into());
    }
    let decode = |field: &str, go_type: &str, value: &Value| {
        let kind = match value {
            Value::Array(_) => "array",
            Value::Object(_) => "object",
            Value::String(_) => "string",
            Value::Number(_) => "number",
            Value::Bool(_) => "bool",
            Value::Null => "null",
        };
        format!("json: cannot unmarshal {kind} into Go struct field {field} of type {go_type}")
    };
    for key in ["stream", "think"] {
        if let Some(value) = body.get(key).filter(|v| !v.is_boolean() && !v.is_null()) {
            if key == "think" && value.is_string() {
                continue;
            }
            return Err(decode(&format!("ChatRequest.{key}"), "bool", value));
        }
    }
    if let Some(options) = body
        .get("options")
        .filter(|o| !o.is_object() && !o.is_null())
    {
        return Err(decode(
            "ChatRequest.options",
            "map[string]interface {}",
            options,
        ));
    }
    let messages = match &body["messages"] {
        Value::Null => &Vec::new(),
        Value::Array(messages) => messages,
        other => return Err(decode("ChatRequest.messages", "[]api.Message", other)),
    };
    for message in messages {
        if !message.is_object() {
            return Err(decode("ChatRequest.messages", "api.Message", message));
        }
        let role = message["role"].as_str().unwrap_or("");
        if !matches!(role, "system" | "user" | "assistant" | "tool") {
            return Err(format!(
                "invalid role {role:?}: expected system, user, assistant or tool"
            ));
        }
        let content = &message["content"];
        if !content.is_string() && !content.is_null() {
            return Err(decode("ChatRequest.messages.content", "string", content));
        }
        if let Some(images) = message.get("images").filter(|i| !i.is_null()) {
            if !images
                .as_array()
                .is_some_and(|i| i.iter().all(Value::is_string))
            {
                return Err(decode(
                    "ChatRequest.messages.images",
                    "api.ImageData",
                    images,
                ));
            }
        }
        if let Some(calls) = message.get("tool_calls").filter(|c| !c.is_null()) {
            let Some(calls) = calls.as_array() else {
                return Err(decode(
                    "ChatRequest.messages.tool_calls",
                    "[]api.ToolCall",
                    calls,
                ));
            };
            for call in calls {
                let arguments = &call["function"]["arguments"];
                if !arguments.is_object() {
                    return Err(decode(
                        "ChatRequest.messages.tool_calls.function.arguments",
                        "api.ToolCallFunctionArguments",
                        arguments,
                    ));
                }
                if !call["function"]["name"].is_string() {
                    return Err(decode(
                        "ChatRequest.messages.tool_calls.function.name",
                        "string",
                        &call["function"]["name"],
                    ));
                }
            }
        }
    }
    if let Some(tools) = body.get("tools").filter(|t| !t.is_null()) {
        let Some(tools) = tools.as_array() else {
            return Err(decode("ChatRequest.tools", "api.Tools", tools));
        };
        for tool in tools {
            if tool["type"] != "function" || !tool["function"]["name"].is_string() {
                return Err(format!("invalid tool definition: {tool}"));
            }
        }
    }
    Ok(())
}

fn error_answer(status: u16, message: &str) -> Answer {
    Answer {
        status,
        headers: vec![(
            "content-type".into(),
            "application/json; charset=utf-8".into(),
        )],
        pieces: vec![Bytes::from(json!({"error": message}).to_string())],
        piece_delay_ms: 0,
        hang: false,
    }
}
