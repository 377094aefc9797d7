//! A fake Ollama server for integration tests: `POST /api/chat` answered in
//! Ollama's real NDJSON stream format (one `{"model","created_at","message",
//! "done":false}` object per line, then a `done:true` line with
//! `done_reason` and eval counts) or with Ollama's `{"error": …}` JSON.
//! Replies are scripted with [`OllamaReply`] (FIFO; when none is queued it
//! echoes the last user message). Loopback only; never used by product code.

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
            server: WireServer::start(render).await,
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

fn render(request: &RecordedRequest, reply: Option<OllamaReply>) -> Answer {
    if request.method != "POST" || request.path != "/api/chat" {
        return error_answer(404, "404 page not found");
    }
    let model = request.body["model"].clone();
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
    Answer {
        status: 200,
        headers: vec![("content-type".into(), "application/x-ndjson".into())],
        pieces: lines,
        piece_delay_ms: 2,
        hang,
    }
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
