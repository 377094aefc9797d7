//! Discord's REST API as the adapter uses it: messages (create, edit,
//! delete), typing, reactions, DM channels, channel lookups and the gateway
//! URL. Every failure is classified for the hub's retry policy: HTTP 429
//! with its `retry_after` → rate limited, 5xx and network errors →
//! transient, other 4xx → permanent.
//!
//! It must not retry or split text (the hub does both), and the bot token
//! appears only in the `Authorization` header: never in a URL, log line or
//! error.

use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode, Url};
use serde_json::{json, Value};

use crate::channels::media::{fetch_remote, MediaLimits, MediaOutcome, RemoteFile};
use crate::channels::SendError;

/// File name prefix of downloaded attachments.
const ATTACHMENT_FILE_PREFIX: &str = "dc";
/// Longest wait for one REST call, headers and body together.
pub const REST_TIMEOUT_MS: u64 = 30_000;
/// How long one file upload may take.
const UPLOAD_TIMEOUT_MS: u64 = 300_000;
/// Most bytes read from any REST response body.
pub const MAX_REST_BODY_BYTES: usize = 1024 * 1024;
/// Wait assumed when a 429 names none.
pub const DEFAULT_RETRY_AFTER_MS: u64 = 1_000;
/// Discord asks bots to name themselves this way.
const USER_AGENT: &str = concat!(
    "DiscordBot (https://github.com/pincer, ",
    env!("CARGO_PKG_VERSION"),
    ")"
);
/// Error messages are cut to this many characters.
const MAX_ERROR_CHARS: usize = 300;

/// A REST client for one bot account.
#[derive(Clone)]
pub struct DiscordRest {
    http: reqwest::Client,
    base: Url,
    authorization: String,
}

impl std::fmt::Debug for DiscordRest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordRest")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

impl DiscordRest {
    /// A client for `api_base_url` (e.g. `https://discord.com/api/v10`)
    /// over the process's shared HTTP client.
    pub fn new(
        api_base_url: &str,
        token: &str,
        http: reqwest::Client,
    ) -> Result<DiscordRest, String> {
        let base = Url::parse(api_base_url)
            .map_err(|e| format!("channels.discord apiBaseUrl {api_base_url:?}: {e}"))?;
        if base.cannot_be_a_base() {
            return Err(format!(
                "channels.discord apiBaseUrl {api_base_url:?} is not a base URL"
            ));
        }
        Ok(DiscordRest {
            http,
            base,
            authorization: format!("Bot {}", token.trim()),
        })
    }

    /// `GET /gateway/bot`: the WebSocket URL to connect to.
    pub async fn gateway_url(&self) -> Result<String, SendError> {
        let body = self.call(Method::GET, &["gateway", "bot"], None).await?;
        body.get("url")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| SendError::Transient("GET /gateway/bot returned no url".into()))
    }

    /// Downloads a message attachment (the CDN needs no token) within `limits`.
    pub async fn fetch_attachment(&self, limits: &MediaLimits, file: &RemoteFile) -> MediaOutcome {
        fetch_remote(&self.http, limits, file, None, ATTACHMENT_FILE_PREFIX).await
    }

    /// `POST /channels/{id}/messages`; returns the new message's id.
    pub async fn create_message(
        &self,
        channel_id: &str,
        content: &str,
        reply_to: Option<&str>,
    ) -> Result<String, SendError> {
        let mut body = json!({"content": content});
        if let Some(message_id) = reply_to {
            body["message_reference"] =
                json!({"message_id": message_id, "fail_if_not_exists": false});
        }
        let sent = self
            .call(
                Method::POST,
                &["channels", channel_id, "messages"],
                Some(body),
            )
            .await?;
        message_id(&sent)
    }

    /// `POST /channels/{id}/messages` as `multipart/form-data`: the message
    /// in the `payload_json` part (its `attachments` naming the file as id 0)
    /// and the file, streamed from disk, as `files[0]`; returns the new
    /// message's id.
    pub async fn create_message_with_file(
        &self,
        channel_id: &str,
        content: Option<&str>,
        reply_to: Option<&str>,
        file: &crate::channels::Upload<'_>,
    ) -> Result<String, SendError> {
        let mut payload = json!({
            "attachments": [{"id": 0, "filename": file.file_name}],
        });
        if let Some(content) = content.filter(|c| !c.trim().is_empty()) {
            payload["content"] = json!(content);
        }
        if let Some(message_id) = reply_to {
            payload["message_reference"] =
                json!({"message_id": message_id, "fail_if_not_exists": false});
        }
        let form = crate::media::multipart::Multipart::new()
            .text("payload_json", &payload.to_string())
            .file("files[0]", file.file_name, file.mime, file.path)
            .map_err(|e| SendError::Permanent(format!("{} cannot be read: {e}", file.file_name)))?;
        let request = self
            .http
            .post(self.url(&["channels", channel_id, "messages"]))
            .timeout(Duration::from_millis(UPLOAD_TIMEOUT_MS))
            .header(reqwest::header::USER_AGENT, USER_AGENT)
            .header(reqwest::header::AUTHORIZATION, &self.authorization);
        let sent = self.answer(form.attach(request)).await?;
        message_id(&sent)
    }

    /// `PATCH /channels/{id}/messages/{mid}`.
    pub async fn edit_message(
        &self,
        channel_id: &str,
        message_id: &str,
        content: &str,
    ) -> Result<(), SendError> {
        let path = ["channels", channel_id, "messages", message_id];
        self.call(Method::PATCH, &path, Some(json!({"content": content})))
            .await
            .map(drop)
    }

    /// `DELETE /channels/{id}/messages/{mid}`.
    pub async fn delete_message(
        &self,
        channel_id: &str,
        message_id: &str,
    ) -> Result<(), SendError> {
        let path = ["channels", channel_id, "messages", message_id];
        self.call(Method::DELETE, &path, None).await.map(drop)
    }

    /// `POST /channels/{id}/typing` (shows "typing…" for about 10 s).
    pub async fn trigger_typing(&self, channel_id: &str) -> Result<(), SendError> {
        self.call(Method::POST, &["channels", channel_id, "typing"], None)
            .await
            .map(drop)
    }

    /// `PUT /channels/{id}/messages/{mid}/reactions/{emoji}/@me`; the emoji
    /// (unicode or `name:id`) is percent-encoded as one path segment.
    pub async fn add_reaction(
        &self,
        channel_id: &str,
        message_id: &str,
        emoji: &str,
    ) -> Result<(), SendError> {
        let path = [
            "channels",
            channel_id,
            "messages",
            message_id,
            "reactions",
            emoji,
            "@me",
        ];
        self.call(Method::PUT, &path, None).await.map(drop)
    }

    /// `GET /channels/{id}`: the channel object (type, parent, name).
    pub async fn get_channel(&self, channel_id: &str) -> Result<Value, SendError> {
        self.call(Method::GET, &["channels", channel_id], None)
            .await
    }

    /// `POST /users/@me/channels`: the DM channel with a user.
    pub async fn open_dm(&self, user_id: &str) -> Result<String, SendError> {
        let body = json!({"recipient_id": user_id});
        let channel = self
            .call(Method::POST, &["users", "@me", "channels"], Some(body))
            .await?;
        channel
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| SendError::Transient("DM channel without id".into()))
    }

    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("checked in new: the base URL can be a base")
            .pop_if_empty()
            .extend(segments);
        url
    }

    async fn call(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<Value>,
    ) -> Result<Value, SendError> {
        let mut request = self
            .http
            .request(method, self.url(segments))
            .timeout(Duration::from_millis(REST_TIMEOUT_MS))
            .header(reqwest::header::USER_AGENT, USER_AGENT)
            .header(reqwest::header::AUTHORIZATION, &self.authorization);
        request = match body {
            Some(body) => request.json(&body),
            None => request.header(reqwest::header::CONTENT_LENGTH, "0"),
        };
        self.answer(request).await
    }

    /// Sends `request` and reads Discord's answer.
    async fn answer(&self, request: reqwest::RequestBuilder) -> Result<Value, SendError> {
        let response = request.send().await.map_err(network_error)?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = read_capped(response).await?;
        if status.is_success() {
            if bytes.is_empty() {
                return Ok(Value::Null);
            }
            return serde_json::from_slice(&bytes)
                .map_err(|e| SendError::Transient(format!("unreadable response: {e}")));
        }
        Err(classify(status, &headers, &bytes))
    }
}

fn message_id(message: &Value) -> Result<String, SendError> {
    message
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| SendError::Transient("message created without id".into()))
}

fn network_error(error: reqwest::Error) -> SendError {
    SendError::Transient(format!("network: {}", error.without_url()))
}

async fn read_capped(response: reqwest::Response) -> Result<Vec<u8>, SendError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(network_error)?;
        let room = MAX_REST_BODY_BYTES.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if room <= chunk.len() {
            break;
        }
    }
    Ok(body)
}

/// Classifies a non-2xx answer: 429 → [`SendError::RateLimited`] after the
/// body's `retry_after` (seconds, fractional), else the
/// `X-RateLimit-Reset-After` or `Retry-After` header; 5xx → transient;
/// other 4xx → permanent, with Discord's message and error code.
pub fn classify(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> SendError {
    let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    if status == StatusCode::TOO_MANY_REQUESTS {
        let seconds = json
            .get("retry_after")
            .and_then(Value::as_f64)
            .or_else(|| header_seconds(headers, "x-ratelimit-reset-after"))
            .or_else(|| header_seconds(headers, "retry-after"));
        let retry_after_ms = seconds
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| (s * 1000.0).ceil() as u64)
            .unwrap_or(DEFAULT_RETRY_AFTER_MS);
        return SendError::RateLimited { retry_after_ms };
    }
    let mut detail = format!("HTTP {}", status.as_u16());
    if let Some(message) = json.get("message").and_then(Value::as_str) {
        detail.push_str(": ");
        detail.extend(message.chars().take(MAX_ERROR_CHARS));
    }
    if let Some(code) = json.get("code").and_then(Value::as_u64) {
        detail.push_str(&format!(" (code {code})"));
    }
    if status.is_server_error() {
        SendError::Transient(detail)
    } else {
        SendError::Permanent(detail)
    }
}

fn header_seconds(headers: &HeaderMap, name: &str) -> Option<f64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().expect("header value"));
        }
        map
    }

    #[test]
    fn rate_limit_prefers_the_body_then_the_reset_after_header() {
        let body =
            br#"{"message":"You are being rate limited.","retry_after":0.641,"global":false}"#;
        let reset = headers(&[("x-ratelimit-reset-after", "5.5")]);
        assert_eq!(
            classify(StatusCode::TOO_MANY_REQUESTS, &reset, body),
            SendError::RateLimited {
                retry_after_ms: 641
            }
        );
        assert_eq!(
            classify(StatusCode::TOO_MANY_REQUESTS, &reset, b""),
            SendError::RateLimited {
                retry_after_ms: 5_500
            }
        );
        assert_eq!(
            classify(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new(), b""),
            SendError::RateLimited {
                retry_after_ms: DEFAULT_RETRY_AFTER_MS
            }
        );
    }

    #[test]
    fn server_errors_are_transient_and_client_errors_permanent() {
        let missing = br#"{"message":"Missing Access","code":50001}"#;
        assert_eq!(
            classify(StatusCode::FORBIDDEN, &HeaderMap::new(), missing),
            SendError::Permanent("HTTP 403: Missing Access (code 50001)".into())
        );
        assert!(matches!(
            classify(StatusCode::BAD_GATEWAY, &HeaderMap::new(), b"<html>"),
            SendError::Transient(_)
        ));
    }

    #[test]
    fn emoji_and_ids_are_single_encoded_path_segments() {
        let rest = DiscordRest::new(
            "http://127.0.0.1:9/api/v10/",
            "secret",
            reqwest::Client::new(),
        )
        .expect("client");
        let url = rest.url(&["channels", "1", "messages", "2", "reactions", "👍", "@me"]);
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:9/api/v10/channels/1/messages/2/reactions/%F0%9F%91%8D/@me"
        );
        assert_eq!(
            rest.url(&["channels", "a/b"]).path(),
            "/api/v10/channels/a%2Fb"
        );
        assert!(!format!("{rest:?}").contains("secret"));
    }
}
