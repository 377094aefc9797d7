//! A fake Anthropic Messages server for integration tests: `POST
//! /v1/messages` answered in Anthropic's real SSE format (`message_start`,
//! `content_block_start/delta/stop`, `message_delta`, `message_stop`, `ping`,
//! `error` events) or with Anthropic error JSON. Replies are scripted with
//! [`AnthropicReply`] (FIFO; when none is queued it echoes the last user
//! text). Loopback only; never used by product code.

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
            server: WireServer::start(render).await,
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

fn render(request: &RecordedRequest, reply: Option<AnthropicReply>) -> Answer {
    if request.method != "POST" || request.path != "/v1/messages" {
        return error_answer(404, "not_found_error", "Not found", None);
    }
    if request
        .headers
        .get("x-api-key")
        .is_none_or(|k| k.is_empty())
    {
        return error_answer(
            401,
            "authentication_error",
            "x-api-key header is required",
            None,
        );
    }
    if !request.headers.contains_key("anthropic-version") {
        return error_answer(
            400,
            "invalid_request_error",
            "anthropic-version header is required",
            None,
        );
    }
    if request.body["max_tokens"].as_u64().is_none() {
        return error_answer(
            400,
            "invalid_request_error",
            "max_tokens: Field required",
            None,
        );
    }
    let reply = reply.unwrap_or_else(|| {
        AnthropicReply::Text(vec![format!("echo: {}", last_user_text(&request.body))])
    });
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
