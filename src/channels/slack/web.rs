//! Slack's Web API as the adapter uses it: `auth.test`,
//! `apps.connections.open` (app token), `chat.postMessage`, `chat.update`,
//! `chat.delete`, `reactions.add` and `conversations.open` (bot token).
//! Failures are classified for the hub's retry policy: HTTP 429 or
//! `ok:false` + `ratelimited` → rate limited after `Retry-After`; 5xx,
//! network errors and Slack's own transient errors → transient; any other
//! `ok:false` error → permanent.
//!
//! It must not retry or split text, and tokens appear only in the
//! `Authorization` header: never in a URL, log line or error.

use std::time::Duration;

use futures_util::StreamExt;
use reqwest::header::HeaderMap;
use reqwest::{StatusCode, Url};
use serde_json::{json, Value};

use crate::channels::media::{fetch_remote, MediaLimits, MediaOutcome, RemoteFile};
use crate::channels::SendError;

/// File name prefix of downloaded files.
const FILE_PREFIX: &str = "sl";

/// Longest wait for one Web API call.
pub const WEB_API_TIMEOUT_MS: u64 = 30_000;
/// Most bytes read from a Web API response.
pub const MAX_WEB_BODY_BYTES: usize = 1024 * 1024;
/// Wait assumed when a rate limit names none.
pub const DEFAULT_RETRY_AFTER_MS: u64 = 1_000;

/// `ok:false` errors Slack documents as temporary.
const TRANSIENT_ERRORS: &[&str] = &[
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
    "team_added_to_org",
];

/// `ok:false` errors that mean the token itself is unusable.
pub const AUTH_ERRORS: &[&str] = &[
    "invalid_auth",
    "not_authed",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "not_allowed_token_type",
];

/// Who the bot is (`auth.test`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackIdentity {
    pub user_id: String,
    pub bot_id: Option<String>,
    pub team_id: Option<String>,
    pub username: String,
}

/// A message Slack accepted: its channel (a DM resolves to `D…`) and `ts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    pub channel: String,
    pub ts: String,
}

/// A Web API client for one Slack app.
#[derive(Clone)]
pub struct SlackWeb {
    pub(super) http: reqwest::Client,
    base: Url,
    pub(super) bot_auth: String,
    app_auth: String,
}

impl std::fmt::Debug for SlackWeb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackWeb")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

impl SlackWeb {
    /// Downloads a shared file with the bot token, within `limits`.
    pub async fn fetch_file(&self, limits: &MediaLimits, file: &RemoteFile) -> MediaOutcome {
        fetch_remote(&self.http, limits, file, Some(&self.bot_auth), FILE_PREFIX).await
    }

    /// A client for `api_url` (e.g. `https://slack.com/api`) over the
    /// process's shared HTTP client.
    pub fn new(
        api_url: &str,
        bot_token: &str,
        app_token: &str,
        http: reqwest::Client,
    ) -> Result<SlackWeb, String> {
        let base =
            Url::parse(api_url).map_err(|e| format!("channels.slack apiUrl {api_url:?}: {e}"))?;
        if base.cannot_be_a_base() {
            return Err(format!(
                "channels.slack apiUrl {api_url:?} is not a base URL"
            ));
        }
        Ok(SlackWeb {
            http,
            base,
            bot_auth: format!("Bearer {}", bot_token.trim()),
            app_auth: format!("Bearer {}", app_token.trim()),
        })
    }

    /// `auth.test` with the bot token.
    pub async fn auth_test(&self) -> Result<SlackIdentity, SendError> {
        let body = self.call(&self.bot_auth, "auth.test", None).await?;
        let text = |key: &str| body.get(key).and_then(Value::as_str).map(str::to_string);
        Ok(SlackIdentity {
            user_id: text("user_id")
                .ok_or_else(|| SendError::Transient("auth.test without user_id".into()))?,
            bot_id: text("bot_id"),
            team_id: text("team_id"),
            username: text("user").unwrap_or_default(),
        })
    }

    /// `apps.connections.open` with the app token: a Socket Mode URL.
    pub async fn open_socket_url(&self) -> Result<String, SendError> {
        let body = self
            .call(&self.app_auth, "apps.connections.open", None)
            .await?;
        body.get("url")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| SendError::Transient("apps.connections.open without url".into()))
    }

    /// `chat.postMessage`, in the thread `thread_ts` when given.
    pub async fn post_message(
        &self,
        channel: &str,
        text: &str,
        thread_ts: Option<&str>,
        mrkdwn: bool,
    ) -> Result<Posted, SendError> {
        let mut body = json!({"channel": channel, "text": text, "mrkdwn": mrkdwn});
        if let Some(ts) = thread_ts {
            body["thread_ts"] = json!(ts);
        }
        let sent = self
            .call(&self.bot_auth, "chat.postMessage", Some(body))
            .await?;
        let field = |key: &str| sent.get(key).and_then(Value::as_str).map(str::to_string);
        Ok(Posted {
            channel: field("channel").unwrap_or_else(|| channel.to_string()),
            ts: field("ts")
                .ok_or_else(|| SendError::Transient("chat.postMessage without ts".into()))?,
        })
    }

    /// `chat.update` of the message `ts`.
    pub async fn update_message(
        &self,
        channel: &str,
        ts: &str,
        text: &str,
    ) -> Result<(), SendError> {
        let body = json!({"channel": channel, "ts": ts, "text": text});
        self.call(&self.bot_auth, "chat.update", Some(body))
            .await
            .map(drop)
    }

    /// `chat.delete` of the message `ts`.
    pub async fn delete_message(&self, channel: &str, ts: &str) -> Result<(), SendError> {
        let body = json!({"channel": channel, "ts": ts});
        self.call(&self.bot_auth, "chat.delete", Some(body))
            .await
            .map(drop)
    }

    /// `reactions.add` (`name` without colons); an existing reaction is fine.
    pub async fn add_reaction(&self, channel: &str, ts: &str, name: &str) -> Result<(), SendError> {
        let body = json!({"channel": channel, "timestamp": ts, "name": name});
        match self.call(&self.bot_auth, "reactions.add", Some(body)).await {
            Err(SendError::Permanent(error)) if error == "already_reacted" => Ok(()),
            other => other.map(drop),
        }
    }

    /// `conversations.open` with one user: the DM channel id.
    pub async fn open_dm(&self, user_id: &str) -> Result<String, SendError> {
        let body = json!({"users": user_id});
        let opened = self
            .call(&self.bot_auth, "conversations.open", Some(body))
            .await?;
        opened
            .pointer("/channel/id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| SendError::Transient("conversations.open without channel".into()))
    }

    /// The URL of a Web API method.
    pub(super) fn method_url(&self, method: &str) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("checked in new: the base URL can be a base")
            .pop_if_empty()
            .push(method);
        url
    }

    pub(super) async fn call(
        &self,
        authorization: &str,
        method: &str,
        body: Option<Value>,
    ) -> Result<Value, SendError> {
        let request = self
            .http
            .post(self.method_url(method))
            .timeout(Duration::from_millis(WEB_API_TIMEOUT_MS))
            .header(reqwest::header::AUTHORIZATION, authorization)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/json; charset=utf-8",
            )
            .body(body.unwrap_or_else(|| json!({})).to_string());
        self.answer(request).await
    }

    /// Sends `request` and reads Slack's answer (`ok:false` is an error).
    pub(super) async fn answer(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<Value, SendError> {
        let response = request.send().await.map_err(network_error)?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = read_capped(response).await?;
        let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        match classify(status, &headers, &json) {
            Some(error) => Err(error),
            None => Ok(json),
        }
    }
}

fn network_error(error: reqwest::Error) -> SendError {
    SendError::Transient(format!("network: {}", error.without_url()))
}

async fn read_capped(response: reqwest::Response) -> Result<Vec<u8>, SendError> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(network_error)?;
        let room = MAX_WEB_BODY_BYTES.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if room <= chunk.len() {
            break;
        }
    }
    Ok(body)
}

/// `None` for `ok:true`; otherwise the classified failure.
pub fn classify(status: StatusCode, headers: &HeaderMap, body: &Value) -> Option<SendError> {
    let error = body.get("error").and_then(Value::as_str).unwrap_or("");
    if status == StatusCode::TOO_MANY_REQUESTS || error == "ratelimited" {
        let retry_after_ms = headers
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| (s * 1000.0).ceil() as u64)
            .unwrap_or(DEFAULT_RETRY_AFTER_MS);
        return Some(SendError::RateLimited { retry_after_ms });
    }
    if status.is_server_error() {
        return Some(SendError::Transient(format!("HTTP {}", status.as_u16())));
    }
    if !status.is_success() {
        return Some(SendError::Permanent(format!("HTTP {}", status.as_u16())));
    }
    if body.get("ok").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    let error = if error.is_empty() {
        "unknown_error"
    } else {
        error
    };
    if TRANSIENT_ERRORS.contains(&error) {
        Some(SendError::Transient(error.to_string()))
    } else {
        Some(SendError::Permanent(error.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry_after(seconds: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", seconds.parse().expect("header"));
        headers
    }

    #[test]
    fn http_429_and_ratelimited_error_wait_for_retry_after() {
        assert_eq!(
            classify(
                StatusCode::TOO_MANY_REQUESTS,
                &retry_after("7"),
                &Value::Null
            ),
            Some(SendError::RateLimited {
                retry_after_ms: 7_000
            })
        );
        let body = json!({"ok": false, "error": "ratelimited"});
        assert_eq!(
            classify(StatusCode::OK, &HeaderMap::new(), &body),
            Some(SendError::RateLimited {
                retry_after_ms: DEFAULT_RETRY_AFTER_MS
            })
        );
    }

    #[test]
    fn slack_errors_are_split_into_transient_and_permanent() {
        let ok = json!({"ok": true, "ts": "1.2"});
        assert_eq!(classify(StatusCode::OK, &HeaderMap::new(), &ok), None);
        let missing = json!({"ok": false, "error": "channel_not_found"});
        assert_eq!(
            classify(StatusCode::OK, &HeaderMap::new(), &missing),
            Some(SendError::Permanent("channel_not_found".into()))
        );
        let internal = json!({"ok": false, "error": "internal_error"});
        assert!(matches!(
            classify(StatusCode::OK, &HeaderMap::new(), &internal),
            Some(SendError::Transient(_))
        ));
        assert!(matches!(
            classify(
                StatusCode::SERVICE_UNAVAILABLE,
                &HeaderMap::new(),
                &Value::Null
            ),
            Some(SendError::Transient(_))
        ));
    }
}
