//! The Bot API client: one JSON POST per method to `<apiRoot>/bot<token>/<method>`,
//! the `{"ok":…}` envelope unwrapped, failures classified (`ApiError`), file
//! downloads from `<apiRoot>/file/bot<token>/<path>`.
//!
//! The token is part of every URL, so it must never reach a log line or an
//! error text: reqwest errors lose their URL and every text passes through
//! `redact`. This file must not interpret updates or decide retries.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::wire::{Envelope, File, Message, User};
use crate::channels::SendError;

/// The public Bot API (upstream's `DEFAULT_TELEGRAM_API_ROOT`).
pub const DEFAULT_API_ROOT: &str = "https://api.telegram.org";
/// Long-poll timeout of `getUpdates`, in seconds.
pub const POLL_TIMEOUT_SECS: u64 = 30;
/// Extra time a long poll's HTTP request gets beyond the poll timeout.
const POLL_REQUEST_MARGIN_SECS: u64 = 15;
/// Timeout of every other request unless `timeoutSeconds` says otherwise.
pub const DEFAULT_REQUEST_TIMEOUT_SECS: u64 = 30;
/// Updates fetched per `getUpdates` (the Bot API's maximum).
const UPDATES_PER_POLL: u32 = 100;
/// Update types asked for: upstream's defaults that pincer reads, plus
/// reactions and channel posts as upstream adds them.
pub const ALLOWED_UPDATES: &[&str] = &[
    "message",
    "edited_message",
    "channel_post",
    "callback_query",
    "message_reaction",
];
/// Wait used when a 429 carries no `retry_after`.
const DEFAULT_RETRY_AFTER_SECS: u64 = 1;
/// Largest API answer read into memory (a full `getUpdates` batch fits).
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// What replaces the token in any text.
const REDACTED: &str = "<redacted>";

/// A failed Bot API call. Texts never contain the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// Flood control: wait `retry_after_secs` before repeating.
    #[error("telegram {method}: too many requests, retry after {retry_after_secs} s")]
    RateLimited {
        method: &'static str,
        retry_after_secs: u64,
    },
    /// The API answered `ok:false` (or an HTTP error status) with this code.
    #[error("telegram {method}: error {code}: {description}")]
    Refused {
        method: &'static str,
        code: i64,
        description: String,
    },
    /// The request never got an answer (connect, timeout, reset).
    #[error("telegram {method}: network error: {message}")]
    Network {
        method: &'static str,
        message: String,
    },
    /// The answer was not the Bot API's JSON.
    #[error("telegram {method}: unreadable answer: {message}")]
    Malformed {
        method: &'static str,
        message: String,
    },
}

impl ApiError {
    fn code(&self) -> Option<i64> {
        match self {
            ApiError::Refused { code, .. } => Some(*code),
            ApiError::RateLimited { .. } => Some(429),
            _ => None,
        }
    }

    fn description(&self) -> &str {
        match self {
            ApiError::Refused { description, .. } => description,
            _ => "",
        }
    }

    /// 409: another `getUpdates` poller or a webhook holds the bot.
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// 409 because a webhook is set (polling needs it removed).
    pub fn is_webhook_conflict(&self) -> bool {
        self.is_conflict() && self.description().contains("webhook is active")
    }

    /// 401/404: the token is wrong or revoked; retrying cannot help.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self.code(), Some(401) | Some(404))
    }

    /// The HTML (or Markdown) markup was rejected.
    pub fn is_parse_entities(&self) -> bool {
        let text = self.description().to_lowercase();
        self.code() == Some(400)
            && (text.contains("can't parse entities") || text.contains("can't find end of"))
    }

    /// An edit that would not change the message.
    pub fn is_not_modified(&self) -> bool {
        self.code() == Some(400) && self.description().contains("message is not modified")
    }

    /// The classification the outbound retry policy works with.
    pub fn into_send_error(self) -> SendError {
        match &self {
            ApiError::RateLimited {
                retry_after_secs, ..
            } => SendError::RateLimited {
                retry_after_ms: retry_after_secs.saturating_mul(1000),
            },
            ApiError::Refused { code, .. } if *code >= 500 => {
                SendError::Transient(self.to_string())
            }
            ApiError::Refused { .. } => SendError::Permanent(self.to_string()),
            ApiError::Network { .. } | ApiError::Malformed { .. } => {
                SendError::Transient(self.to_string())
            }
        }
    }
}

/// Replaces `token` (and any `/bot<…>/` URL segment) in `text`.
pub fn redact(text: &str, token: &str) -> String {
    let mut out = if token.is_empty() {
        text.to_string()
    } else {
        text.replace(token, REDACTED)
    };
    let mut search_from = 0;
    while let Some(found) = out[search_from..].find("/bot") {
        let start = search_from + found + "/bot".len();
        let end = out[start..]
            .find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == ')')
            .map_or(out.len(), |i| start + i);
        let segment = &out[start..end];
        if segment.contains(':') && segment != REDACTED {
            out.replace_range(start..end, REDACTED);
        }
        search_from = start;
    }
    out
}

/// One bot account's API client. Cheap to clone.
#[derive(Clone)]
pub struct BotApi {
    http: reqwest::Client,
    api_root: String,
    token: String,
    request_timeout: Duration,
}

impl std::fmt::Debug for BotApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BotApi")
            .field("api_root", &self.api_root)
            .field("token", &REDACTED)
            .finish()
    }
}

impl BotApi {
    /// A client for `token` against `api_root` (default when empty).
    pub fn new(
        http: reqwest::Client,
        api_root: Option<&str>,
        token: &str,
        request_timeout: Duration,
    ) -> BotApi {
        let root = api_root
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .unwrap_or(DEFAULT_API_ROOT)
            .trim_end_matches('/')
            .to_string();
        BotApi {
            http,
            api_root: root,
            token: token.trim().to_string(),
            request_timeout,
        }
    }

    /// `text` with this account's token removed.
    pub fn redact(&self, text: &str) -> String {
        redact(text, &self.token)
    }

    /// Calls `method` with a JSON body and returns its `result`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &'static str,
        body: &Value,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let url = format!("{}/bot{}/{method}", self.api_root, self.token);
        let request = self.http.post(url).timeout(timeout).json(body);
        self.send_request(method, request).await
    }

    /// Calls `method` with a `multipart/form-data` body (file uploads,
    /// streamed from disk) and returns its `result`.
    pub async fn call_form<T: DeserializeOwned>(
        &self,
        method: &'static str,
        form: crate::media::multipart::Multipart,
        timeout: Duration,
    ) -> Result<T, ApiError> {
        let url = format!("{}/bot{}/{method}", self.api_root, self.token);
        let request = form.attach(self.http.post(url).timeout(timeout));
        self.send_request(method, request).await
    }

    async fn send_request<T: DeserializeOwned>(
        &self,
        method: &'static str,
        request: reqwest::RequestBuilder,
    ) -> Result<T, ApiError> {
        let response = request.send().await.map_err(|e| self.network(method, e))?;
        let status = response.status().as_u16();
        let retry_after_header = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let bytes = read_capped(response, MAX_RESPONSE_BYTES)
            .await
            .map_err(|e| self.network(method, e))?;
        let envelope: Envelope<T> = match serde_json::from_slice(&bytes) {
            Ok(envelope) => envelope,
            Err(error) => return Err(self.non_json(method, status, retry_after_header, &error)),
        };
        self.unwrap_envelope(method, status, envelope)
    }

    fn unwrap_envelope<T>(
        &self,
        method: &'static str,
        status: u16,
        envelope: Envelope<T>,
    ) -> Result<T, ApiError> {
        if envelope.ok {
            return envelope.result.ok_or_else(|| ApiError::Malformed {
                method,
                message: "ok without a result".to_string(),
            });
        }
        let code = envelope.error_code.unwrap_or(i64::from(status));
        let parameters = envelope.parameters.unwrap_or_default();
        if code == 429 {
            return Err(ApiError::RateLimited {
                method,
                retry_after_secs: parameters.retry_after.unwrap_or(DEFAULT_RETRY_AFTER_SECS),
            });
        }
        let mut description = envelope
            .description
            .unwrap_or_else(|| "no description".to_string());
        if let Some(new_id) = parameters.migrate_to_chat_id {
            description.push_str(&format!(" (group migrated to chat {new_id})"));
        }
        Err(ApiError::Refused {
            method,
            code,
            description: self.redact(&description),
        })
    }

    fn non_json(
        &self,
        method: &'static str,
        status: u16,
        retry_after: Option<u64>,
        error: &serde_json::Error,
    ) -> ApiError {
        match status {
            429 => ApiError::RateLimited {
                method,
                retry_after_secs: retry_after.unwrap_or(DEFAULT_RETRY_AFTER_SECS),
            },
            400..=599 => ApiError::Refused {
                method,
                code: i64::from(status),
                description: format!("HTTP {status} without a Bot API body"),
            },
            _ => ApiError::Malformed {
                method,
                message: self.redact(&error.to_string()),
            },
        }
    }

    fn network(&self, method: &'static str, error: reqwest::Error) -> ApiError {
        let kind = if error.is_timeout() {
            "timed out"
        } else if error.is_connect() {
            "cannot connect"
        } else {
            "request failed"
        };
        let detail = error.without_url().to_string();
        ApiError::Network {
            method,
            message: self.redact(&format!("{kind}: {detail}")),
        }
    }

    fn short_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// `getMe`: the bot's own user (id and username).
    pub async fn get_me(&self) -> Result<User, ApiError> {
        self.call("getMe", &json!({}), self.short_timeout()).await
    }

    /// `getUpdates` long poll from `offset`; each update as raw JSON so one
    /// malformed update cannot hide the others.
    pub async fn get_updates(
        &self,
        offset: Option<i64>,
        timeout_secs: u64,
    ) -> Result<Vec<Value>, ApiError> {
        let mut body = json!({
            "timeout": timeout_secs,
            "limit": UPDATES_PER_POLL,
            "allowed_updates": ALLOWED_UPDATES,
        });
        if let Some(offset) = offset {
            body["offset"] = json!(offset);
        }
        let timeout = Duration::from_secs(timeout_secs + POLL_REQUEST_MARGIN_SECS);
        self.call("getUpdates", &body, timeout).await
    }

    /// `sendMessage` with a prepared body.
    pub async fn send_message(&self, body: &Value) -> Result<Message, ApiError> {
        self.call("sendMessage", body, self.short_timeout()).await
    }

    /// `editMessageText`: the edited message (or `true` for inline messages).
    pub async fn edit_message_text(&self, body: &Value) -> Result<Value, ApiError> {
        self.call("editMessageText", body, self.short_timeout())
            .await
    }

    /// `deleteMessage`.
    pub async fn delete_message(&self, chat_id: &str, message_id: i64) -> Result<bool, ApiError> {
        let body = json!({ "chat_id": chat_id, "message_id": message_id });
        self.call("deleteMessage", &body, self.short_timeout())
            .await
    }

    /// `sendChatAction typing`.
    pub async fn send_typing(&self, chat_id: &str, thread: Option<i64>) -> Result<bool, ApiError> {
        let mut body = json!({ "chat_id": chat_id, "action": "typing" });
        if let Some(thread) = thread {
            body["message_thread_id"] = json!(thread);
        }
        self.call("sendChatAction", &body, self.short_timeout())
            .await
    }

    /// `setMessageReaction` with one emoji.
    pub async fn set_reaction(
        &self,
        chat_id: &str,
        message_id: i64,
        emoji: &str,
    ) -> Result<bool, ApiError> {
        let body = json!({
            "chat_id": chat_id,
            "message_id": message_id,
            "reaction": [{ "type": "emoji", "emoji": emoji }],
        });
        self.call("setMessageReaction", &body, self.short_timeout())
            .await
    }

    /// `setWebhook`: Telegram posts updates to `url` with `secret` in the
    /// secret-token header, over at most `max_connections` connections.
    pub async fn set_webhook(
        &self,
        url: &str,
        secret: &str,
        max_connections: usize,
    ) -> Result<bool, ApiError> {
        let body = json!({
            "url": url,
            "secret_token": secret,
            "allowed_updates": ALLOWED_UPDATES,
            "max_connections": max_connections,
        });
        self.call("setWebhook", &body, self.short_timeout()).await
    }

    /// `deleteWebhook`, keeping the updates Telegram queued meanwhile.
    pub async fn delete_webhook(&self) -> Result<bool, ApiError> {
        let body = json!({ "drop_pending_updates": false });
        self.call("deleteWebhook", &body, self.short_timeout())
            .await
    }

    /// `getFile`: where a file can be downloaded.
    pub async fn get_file(&self, file_id: &str) -> Result<File, ApiError> {
        let body = json!({ "file_id": file_id });
        self.call("getFile", &body, self.short_timeout()).await
    }

    /// Starts downloading a file `getFile` described.
    pub async fn download(&self, file_path: &str) -> Result<reqwest::Response, ApiError> {
        const METHOD: &str = "file download";
        let url = format!(
            "{}/file/bot{}/{}",
            self.api_root,
            self.token,
            file_path.trim_start_matches('/')
        );
        let response = self
            .http
            .get(url)
            .timeout(self.request_timeout)
            .send()
            .await
            .map_err(|e| self.network(METHOD, e))?;
        let status = response.status().as_u16();
        if status >= 400 {
            return Err(ApiError::Refused {
                method: METHOD,
                code: i64::from(status),
                description: format!("HTTP {status}"),
            });
        }
        Ok(response)
    }

    /// A network error of a download stream, redacted.
    pub fn stream_error(&self, error: reqwest::Error) -> ApiError {
        self.network("file download", error)
    }
}

/// Reads a response body, refusing more than `cap` bytes.
async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > cap {
            break;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_and_bot_url_segments_are_redacted() {
        let token = "123456:ABC-secret_token";
        let text = format!(
            "error sending request for url (https://api.telegram.org/bot{token}/getUpdates) {token}"
        );
        let clean = redact(&text, token);
        assert!(!clean.contains("ABC-secret"), "{clean}");
        assert_eq!(
            clean,
            "error sending request for url (https://api.telegram.org/bot<redacted>/getUpdates) <redacted>"
        );
        // A token this client does not know is still cut out of a URL.
        let other = redact("http://h/bot999:zzz/file/x", "");
        assert_eq!(other, "http://h/bot<redacted>/file/x");
        // Words that merely start with "bot" stay.
        assert_eq!(redact("/botany/x", "t:k"), "/botany/x");
    }

    #[test]
    fn errors_are_classified_for_the_retry_policy() {
        let limited = ApiError::RateLimited {
            method: "sendMessage",
            retry_after_secs: 7,
        };
        assert_eq!(
            limited.into_send_error(),
            SendError::RateLimited {
                retry_after_ms: 7_000
            }
        );
        let server = ApiError::Refused {
            method: "sendMessage",
            code: 502,
            description: "Bad Gateway".into(),
        };
        assert!(matches!(server.into_send_error(), SendError::Transient(_)));
        let bad = ApiError::Refused {
            method: "sendMessage",
            code: 400,
            description: "Bad Request: chat not found".into(),
        };
        assert!(
            matches!(bad.into_send_error(), SendError::Permanent(t) if t.contains("chat not found"))
        );
        let net = ApiError::Network {
            method: "sendMessage",
            message: "cannot connect".into(),
        };
        assert!(matches!(net.into_send_error(), SendError::Transient(_)));
    }

    #[test]
    fn parse_entity_and_conflict_errors_are_recognised() {
        let parse = ApiError::Refused {
            method: "sendMessage",
            code: 400,
            description: "Bad Request: can't parse entities: Unsupported start tag \"foo\"".into(),
        };
        assert!(parse.is_parse_entities());
        let conflict = ApiError::Refused {
            method: "getUpdates",
            code: 409,
            description: "Conflict: terminated by other getUpdates request".into(),
        };
        assert!(conflict.is_conflict());
        assert!(!conflict.is_parse_entities());
    }

    #[test]
    fn debug_output_hides_the_token() {
        let api = BotApi::new(
            reqwest::Client::new(),
            Some("http://127.0.0.1:9/"),
            "42:secret",
            Duration::from_secs(1),
        );
        let shown = format!("{api:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("http://127.0.0.1:9\""), "{shown}");
    }
}
