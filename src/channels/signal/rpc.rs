//! signal-cli's HTTP daemon as a client sees it: JSON-RPC 2.0 requests
//! at `POST /api/v1/rpc`, the liveness check at `GET /api/v1/check`, and
//! the `GET /api/v1/events` stream opened for the SSE reader. Answers are
//! read up to [`MAX_RPC_RESPONSE_BYTES`]; errors are classified for the
//! retry policy by signal-cli's error codes (-1 user error, -3 I/O error,
//! -4 untrusted key, the JSON-RPC -326xx codes).
//!
//! It knows the wire only: what a method means is the adapter's business.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::channels::SendError;

/// Largest JSON-RPC answer read (a `send` result lists one entry per
/// recipient; far below this).
pub const MAX_RPC_RESPONSE_BYTES: usize = 1024 * 1024;
/// How long one request may take.
pub const RPC_TIMEOUT_MS: u64 = 30_000;
/// signal-cli's own codes (`SignalJsonRpcCommandHandler`).
const USER_ERROR: i64 = -1;
const UNTRUSTED_KEY_ERROR: i64 = -4;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// The daemon could not be reached or answered out of protocol.
    #[error("signal-cli daemon: {0}")]
    Transport(String),
    /// A JSON-RPC error object.
    #[error("signal-cli {method} failed ({code}): {message}")]
    Rpc {
        method: String,
        code: i64,
        message: String,
    },
}

impl RpcError {
    pub fn into_send_error(self) -> SendError {
        match &self {
            RpcError::Transport(_) => SendError::Transient(self.to_string()),
            RpcError::Rpc { code, .. }
                if *code == USER_ERROR
                    || *code == UNTRUSTED_KEY_ERROR
                    || (-32602..=-32600).contains(code)
                    || *code == -32700 =>
            {
                SendError::Permanent(self.to_string())
            }
            RpcError::Rpc { .. } => SendError::Transient(self.to_string()),
        }
    }
}

/// One daemon, as one account talks to it.
#[derive(Clone)]
pub struct SignalRpc {
    http: reqwest::Client,
    base_url: String,
    /// The account's number, sent as `account` (a multi-account daemon
    /// needs it; a single-account one ignores it).
    account: String,
}

impl SignalRpc {
    pub fn new(http: reqwest::Client, base_url: &str, account: &str) -> SignalRpc {
        SignalRpc {
            http,
            base_url: base_url.trim_end_matches('/').to_string(),
            account: account.to_string(),
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Calls `method` with `params` (an object; `account` is added).
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        match self
            .call_raw(method, params, MAX_RPC_RESPONSE_BYTES)
            .await?
        {
            Some(bytes) => parse_answer(method, &bytes),
            None => Ok(Value::Null),
        }
    }

    /// [`call`](Self::call)'s HTTP exchange: the answer's body read up to
    /// `cap` bytes (`None`: a 201 without one), for callers that parse a
    /// large answer themselves (`getAttachment`).
    pub async fn call_raw(
        &self,
        method: &str,
        mut params: Value,
        cap: usize,
    ) -> Result<Option<Vec<u8>>, RpcError> {
        if let Some(object) = params.as_object_mut() {
            object.insert("account".into(), json!(self.account));
        }
        let id = uuid::Uuid::new_v4().to_string();
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id});
        let response = self
            .http
            .post(format!("{}/api/v1/rpc", self.base_url))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .timeout(Duration::from_millis(RPC_TIMEOUT_MS))
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| RpcError::Transport(format!("{method}: {e}")))?;
        let status = response.status();
        if status == reqwest::StatusCode::CREATED {
            return Ok(None);
        }
        let bytes = read_capped(response, cap)
            .await
            .map_err(|e| RpcError::Transport(format!("{method}: {e}")))?;
        if !status.is_success() {
            return Err(RpcError::Transport(format!("{method}: HTTP {status}")));
        }
        Ok(Some(bytes))
    }

    /// `GET /api/v1/check`: whether the daemon answers.
    pub async fn check(&self) -> Result<(), String> {
        let response = self
            .http
            .get(format!("{}/api/v1/check", self.base_url))
            .timeout(Duration::from_millis(2_000))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("HTTP {}", response.status()))
        }
    }

    /// Opens `GET /api/v1/events?account=…` (no timeout: the stream lives
    /// as long as the connection).
    pub async fn events(&self) -> Result<reqwest::Response, String> {
        let response = self
            .http
            .get(format!("{}/api/v1/events", self.base_url))
            .query(&[("account", self.account.as_str())])
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("event stream refused: HTTP {}", response.status()));
        }
        Ok(response)
    }
}

/// A JSON-RPC answer's result, or its error.
pub fn parse_answer(method: &str, bytes: &[u8]) -> Result<Value, RpcError> {
    let answer: Value = serde_json::from_slice(bytes)
        .map_err(|e| RpcError::Transport(format!("{method}: malformed JSON-RPC answer: {e}")))?;
    if let Some(error) = answer.get("error").filter(|e| !e.is_null()) {
        return Err(error_of(method, error));
    }
    match answer.get("result") {
        Some(result) => Ok(result.clone()),
        None => Err(RpcError::Transport(format!(
            "{method}: a JSON-RPC answer with neither result nor error"
        ))),
    }
}

/// A JSON-RPC error object as an [`RpcError`].
pub fn error_of(method: &str, error: &Value) -> RpcError {
    RpcError::Rpc {
        method: method.to_string(),
        code: error["code"].as_i64().unwrap_or(0),
        message: error["message"]
            .as_str()
            .unwrap_or("no message")
            .to_string(),
    }
}

/// A response body, refused past `cap` bytes.
async fn read_capped(response: reqwest::Response, cap: usize) -> Result<Vec<u8>, String> {
    if response
        .content_length()
        .is_some_and(|len| len > cap as u64)
    {
        return Err(format!("answer larger than {cap} bytes"));
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        if body.len() + chunk.len() > cap {
            return Err(format!("answer larger than {cap} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_classified_by_signal_cli_code() {
        let rpc = |code| RpcError::Rpc {
            method: "send".into(),
            code,
            message: "m".into(),
        };
        assert!(matches!(rpc(-1).into_send_error(), SendError::Permanent(_)));
        assert!(matches!(
            rpc(-32602).into_send_error(),
            SendError::Permanent(_)
        ));
        assert!(matches!(rpc(-3).into_send_error(), SendError::Transient(_)));
        assert!(matches!(
            rpc(-32603).into_send_error(),
            SendError::Transient(_)
        ));
        assert!(matches!(
            RpcError::Transport("down".into()).into_send_error(),
            SendError::Transient(_)
        ));
    }
}
