//! Protocol frames: the `req` / `res` / `event` JSON objects of OpenClaw's
//! gateway protocol, the error shape and its codes.
//!
//! Parsing is strict about what identifies a frame (type, id, method) and
//! lenient about extra fields, as upstream's clients send a few. Nothing here
//! touches a socket.

use serde::Serialize;
use serde_json::{json, Map, Value};

/// The newest protocol version pincer speaks.
pub const PROTOCOL_VERSION: u32 = 4;
/// The oldest protocol version pincer still accepts.
pub const MIN_PROTOCOL_VERSION: u32 = 3;

/// Error codes of the protocol (`ErrorShape.code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    NotLinked,
    NotPaired,
    AgentTimeout,
    InvalidRequest,
    ApprovalNotFound,
    Unavailable,
    /// v4 only; v3 clients get `INVALID_REQUEST` instead.
    Forbidden,
}

impl ErrorCode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::NotLinked => "NOT_LINKED",
            ErrorCode::NotPaired => "NOT_PAIRED",
            ErrorCode::AgentTimeout => "AGENT_TIMEOUT",
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::ApprovalNotFound => "APPROVAL_NOT_FOUND",
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::Forbidden => "FORBIDDEN",
        }
    }
}

/// `ErrorShape`: what a failed `res` carries.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorShape {
    pub code: ErrorCode,
    pub message: String,
    pub details: Option<Value>,
    pub retryable: Option<bool>,
    pub retry_after_ms: Option<u64>,
}

impl ErrorShape {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorShape {
            code,
            message: message.into(),
            details: None,
            retryable: None,
            retry_after_ms: None,
        }
    }

    /// An `INVALID_REQUEST` error, the most common kind.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// An `UNAVAILABLE` error.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Unavailable, message)
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn retry_after(mut self, ms: u64) -> Self {
        self.retryable = Some(true);
        self.retry_after_ms = Some(ms);
        self
    }

    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("code".into(), json!(self.code.as_str()));
        map.insert("message".into(), json!(self.message));
        if let Some(details) = &self.details {
            map.insert("details".into(), details.clone());
        }
        if let Some(retryable) = self.retryable {
            map.insert("retryable".into(), json!(retryable));
        }
        if let Some(ms) = self.retry_after_ms {
            map.insert("retryAfterMs".into(), json!(ms));
        }
        Value::Object(map)
    }
}

/// A request frame from a client.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: String,
    pub method: String,
    pub params: Value,
}

/// What a client may send.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientFrame {
    Request(Request),
    /// v4: abort a pending request by id.
    Cancel {
        id: String,
    },
}

impl ClientFrame {
    /// The frame as a client writes it: [`parse_client_frame`] of its text gives back an equal frame.
    pub fn to_json(&self) -> Value {
        match self {
            ClientFrame::Request(r) => {
                json!({"type": "req", "id": r.id, "method": r.method, "params": r.params})
            }
            ClientFrame::Cancel { id } => json!({"type": "cancel", "id": id}),
        }
    }
}

/// Why a client frame was refused; the message is what the client is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError {
    pub message: String,
    /// The request id, when the frame had a usable one.
    pub id: Option<String>,
}

/// Parses one text frame.
pub fn parse_client_frame(text: &str) -> Result<ClientFrame, FrameError> {
    let value: Value = serde_json::from_str(text).map_err(|e| FrameError {
        message: format!("invalid request frame: not JSON ({e})"),
        id: None,
    })?;
    let Value::Object(mut obj) = value else {
        return Err(frame_error("invalid request frame: not an object", None));
    };
    let id = match obj.get("id") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("req") => {}
        Some("cancel") => {
            return match id {
                Some(id) => Ok(ClientFrame::Cancel { id }),
                None => Err(frame_error(
                    "invalid request frame: cancel needs an id",
                    None,
                )),
            }
        }
        Some(other) => {
            return Err(frame_error(
                &format!("invalid request frame: type must be \"req\", got {other:?}"),
                id,
            ))
        }
        None => return Err(frame_error("invalid request frame: missing type", id)),
    }
    let Some(id) = id else {
        return Err(frame_error(
            "invalid request frame: id must be a non-empty string",
            None,
        ));
    };
    let method = match obj.get("method") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => {
            return Err(frame_error(
                "invalid request frame: method must be a non-empty string",
                Some(id),
            ))
        }
    };
    let params = obj.remove("params").unwrap_or(Value::Null);
    Ok(ClientFrame::Request(Request { id, method, params }))
}

fn frame_error(message: &str, id: Option<String>) -> FrameError {
    FrameError {
        message: message.to_string(),
        id,
    }
}

/// A successful `res` frame.
pub fn response_ok(id: &str, payload: Value) -> String {
    encode(&ResponseFrame {
        kind: "res",
        id,
        ok: true,
        error: None,
        payload: Some(&payload),
    })
}

/// A failed `res` frame, optionally with a payload (upstream's `agent` sends one).
pub fn response_err(id: &str, error: &ErrorShape, payload: Option<Value>) -> String {
    encode(&ResponseFrame {
        kind: "res",
        id,
        ok: false,
        error: Some(&error.to_json()),
        payload: payload.as_ref(),
    })
}

/// The `stateVersion` counters attached to presence and health events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StateVersion {
    pub presence: u64,
    pub health: u64,
}

/// An `event` frame.
pub fn event_frame(
    event: &str,
    payload: &Value,
    seq: Option<u64>,
    state_version: Option<StateVersion>,
) -> String {
    encode(&EventFrame {
        kind: "event",
        event,
        payload,
        seq,
        state_version,
    })
}

/// A `res` frame as written (borrowed: the payload is not copied).
#[derive(Serialize)]
struct ResponseFrame<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a str,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a Value>,
}

/// An `event` frame as written.
#[derive(Serialize)]
struct EventFrame<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    event: &'a str,
    payload: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
    #[serde(rename = "stateVersion", skip_serializing_if = "Option::is_none")]
    state_version: Option<StateVersion>,
}

/// A frame's JSON text. Serializing a `Value` or these structs cannot fail
/// (string keys only).
fn encode(frame: &impl Serialize) -> String {
    serde_json::to_string(frame).expect("frames serialize: string keys, no failing Serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_frame_parses_with_params() {
        let frame = parse_client_frame(
            r#"{"type":"req","id":"1","method":"health","params":{"probe":true}}"#,
        )
        .expect("valid frame");
        assert_eq!(
            frame,
            ClientFrame::Request(Request {
                id: "1".into(),
                method: "health".into(),
                params: json!({"probe": true})
            })
        );
    }

    #[test]
    fn frame_without_method_names_the_field_and_keeps_the_id() {
        let err = parse_client_frame(r#"{"type":"req","id":"7"}"#).expect_err("no method");
        assert!(err.message.contains("method"), "{}", err.message);
        assert_eq!(err.id.as_deref(), Some("7"));
    }

    #[test]
    fn non_json_and_wrong_type_are_refused() {
        assert!(parse_client_frame("hello").is_err());
        assert!(parse_client_frame("[1]").is_err());
        let err =
            parse_client_frame(r#"{"type":"event","id":"1","method":"x"}"#).expect_err("type");
        assert!(err.message.contains("\"event\""));
    }

    /// Found by the fuzz target `gateway_frame`: without serde_json's exact float parsing a number came back
    /// one unit in the last place off when the frame was written out and read again.
    #[test]
    fn a_parsed_frame_reencodes_to_the_same_frame() {
        let text = r#"{"type":"req","id":"1","method":"connect","params":{"signedAt":1.767000000000667e+60,"n":[0.1,1e-300,3]}}"#;
        let frame = parse_client_frame(text).expect("a frame");
        let again = parse_client_frame(&frame.to_json().to_string()).expect("re-encoded");
        assert_eq!(again, frame);
        let cancel = ClientFrame::Cancel { id: "7".into() };
        assert_eq!(
            parse_client_frame(&cancel.to_json().to_string()),
            Ok(cancel)
        );
    }

    #[test]
    fn cancel_frame_parses() {
        assert_eq!(
            parse_client_frame(r#"{"type":"cancel","id":"9"}"#).expect("cancel"),
            ClientFrame::Cancel { id: "9".into() }
        );
    }

    fn parsed(text: &str) -> Value {
        serde_json::from_str(text).expect("a frame is JSON")
    }

    #[test]
    fn frames_carry_exactly_their_fields() {
        let payload = json!({"runId": "r1", "text": "a \"quoted\" line\n"});
        assert_eq!(
            parsed(&response_ok("7", payload.clone())),
            json!({"type": "res", "id": "7", "ok": true, "payload": payload})
        );
        let err = ErrorShape::invalid("bad");
        assert_eq!(
            parsed(&response_err("8", &err, Some(payload.clone()))),
            json!({"type": "res", "id": "8", "ok": false, "error": err.to_json(), "payload": payload})
        );
        assert_eq!(
            parsed(&event_frame("chat", &payload, None, None)),
            json!({"type": "event", "event": "chat", "payload": payload})
        );
        let sv = StateVersion {
            presence: 2,
            health: 3,
        };
        assert_eq!(
            parsed(&event_frame("presence", &payload, Some(9), Some(sv))),
            json!({"type": "event", "event": "presence", "payload": payload, "seq": 9,
                "stateVersion": {"presence": 2, "health": 3}})
        );
    }

    #[test]
    fn error_response_carries_code_details_and_retry() {
        let err = ErrorShape::unavailable("busy")
            .with_details(json!({"reason": "x"}))
            .retry_after(500);
        let frame: Value = serde_json::from_str(&response_err("3", &err, None)).expect("json");
        assert_eq!(frame["ok"], json!(false));
        assert_eq!(frame["error"]["code"], json!("UNAVAILABLE"));
        assert_eq!(frame["error"]["retryAfterMs"], json!(500));
        assert_eq!(frame["error"]["retryable"], json!(true));
        assert_eq!(frame["error"]["details"]["reason"], json!("x"));
    }
}
