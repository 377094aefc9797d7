//! HTTP plumbing shared by every provider (OpenAI-compatible, Anthropic, Ollama): sending
//! with a bounded wait for headers, turning a non-2xx answer into a
//! [`ProviderError::Http`] from its bounded body and its `retry-after`, and
//! describing reqwest errors with their causes.
//!
//! It reads at most [`MAX_ERROR_BODY_BYTES`] of an error body and knows no
//! provider's success format.

use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use reqwest::header::HeaderMap;

use crate::agent::providers::ProviderError;

/// The most bytes of a non-2xx body read to find the error message.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// Error messages are cut to this many characters.
pub const MAX_ERROR_MESSAGE_CHARS: usize = 500;

/// Sends the request, failing with [`ProviderError::Network`] when no
/// response headers arrive within `idle`.
pub(crate) async fn send(
    request: reqwest::RequestBuilder,
    idle: Duration,
) -> Result<reqwest::Response, ProviderError> {
    tokio::time::timeout(idle, request.send())
        .await
        .map_err(|_| idle_error(idle, "waiting for response headers"))?
        .map_err(|e| ProviderError::Network(describe_reqwest_error(&e)))
}

pub(crate) fn idle_error(idle: Duration, phase: &str) -> ProviderError {
    ProviderError::Network(format!(
        "stream idle for {} ms while {phase}",
        idle.as_millis()
    ))
}

/// Builds the error for a non-2xx answer from its headers and bounded body.
pub(crate) async fn error_from_response(
    response: reqwest::Response,
    idle: Duration,
) -> ProviderError {
    let status = response.status().as_u16();
    let retry_after_ms = retry_after_ms(response.headers(), SystemTime::now());
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while body.len() < MAX_ERROR_BODY_BYTES {
        match tokio::time::timeout(idle, stream.next()).await {
            Err(_) => return idle_error(idle, "reading error body"),
            Ok(Some(Ok(bytes))) => {
                let room = MAX_ERROR_BODY_BYTES - body.len();
                body.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            Ok(Some(Err(e))) => return ProviderError::Network(describe_reqwest_error(&e)),
            Ok(None) => break,
        }
    }
    let message = error_message(&body).unwrap_or_else(|| {
        let text = String::from_utf8_lossy(&body);
        match text.trim() {
            "" => format!("empty body with status {status}"),
            text => text.chars().take(MAX_ERROR_MESSAGE_CHARS).collect(),
        }
    });
    ProviderError::Http {
        status,
        message,
        retry_after_ms,
    }
}

/// `error.message`, a string `error`, or a top-level `message` of a JSON body.
pub(crate) fn error_message(body: &[u8]) -> Option<String> {
    let json: serde_json::Value = serde_json::from_slice(body).ok()?;
    let message = match &json["error"] {
        serde_json::Value::String(text) => Some(text.as_str()),
        error => error["message"].as_str(),
    }
    .or_else(|| json["message"].as_str())?;
    Some(message.chars().take(MAX_ERROR_MESSAGE_CHARS).collect())
}

/// The wait a provider asked for: `retry-after-ms`, else `retry-after` in
/// seconds or as an HTTP date (relative to `now`).
pub(crate) fn retry_after_ms(headers: &HeaderMap, now: SystemTime) -> Option<u64> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let non_negative = |text: &str| {
        text.parse::<f64>()
            .ok()
            .filter(|n| n.is_finite() && *n >= 0.0)
    };
    if let Some(ms) = header("retry-after-ms").and_then(non_negative) {
        return Some(ms.round() as u64);
    }
    let value = header("retry-after")?;
    if let Some(seconds) = non_negative(value) {
        return Some((seconds * 1000.0).round() as u64);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let wait = at.duration_since(now).unwrap_or(Duration::ZERO);
    Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
}

/// reqwest's top-level message plus its causes (`connection refused` etc.).
pub(crate) fn describe_reqwest_error(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Header map from configured pairs, naming the first invalid one.
pub(crate) fn configured_headers(
    base: HeaderMap,
    configured: &std::collections::BTreeMap<String, String>,
) -> Result<HeaderMap, String> {
    use reqwest::header::{HeaderName, HeaderValue};
    let mut map = base;
    for (name, value) in configured {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header name {name:?} is not valid HTTP"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("value of header {name:?} is not valid HTTP"))?;
        map.insert(header, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn retry_after_forms_are_read() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("date");
        let mut map = HeaderMap::new();
        map.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after_ms(&map, now), Some(2000));
        map.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after_ms(&map, now), Some(150));
        let mut dated = HeaderMap::new();
        dated.insert(
            "retry-after",
            HeaderValue::from_static("Sun, 06 Nov 1994 08:49:47 GMT"),
        );
        assert_eq!(retry_after_ms(&dated, now), Some(10_000));
    }

    #[test]
    fn anthropic_and_ollama_error_bodies_give_their_message() {
        let anthropic =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(error_message(anthropic).as_deref(), Some("Overloaded"));
        let ollama = br#"{"error":"model 'x' not found"}"#;
        assert_eq!(
            error_message(ollama).as_deref(),
            Some("model 'x' not found")
        );
    }
}
