//! The Matrix client-server API client of one account: password login and
//! `whoami`, `/sync` long polls, sending room events (messages, edits,
//! reactions), typing, read receipts, redactions, joins, room state and
//! membership reads, alias resolution, `m.direct` and room creation for
//! direct rooms, uploads to the media repository, and the authenticated
//! media download URL.
//!
//! Every answer is read with a size cap; failures are classified
//! (`ApiError`: rate limited with `retry_after_ms`, refused with the
//! homeserver's `errcode`, network, malformed). The access token travels in
//! the `Authorization` header only and never reaches a log line or an
//! error text. This file must not interpret events or decide retries.

use std::time::Duration;

use serde_json::{json, Value};

use crate::channels::SendError;

/// Long-poll timeout of `/sync`, in milliseconds.
pub const SYNC_TIMEOUT_MS: u64 = 30_000;
/// Extra time a long poll's HTTP request gets beyond its timeout.
const SYNC_REQUEST_MARGIN_SECS: u64 = 15;
/// Timeout of every other request.
pub const REQUEST_TIMEOUT_SECS: u64 = 30;
/// Largest `/sync` answer read into memory.
pub const MAX_SYNC_BYTES: usize = 16 * 1024 * 1024;
/// Largest answer of any other call.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
/// How long one upload may take (a large file on a slow uplink).
const UPLOAD_TIMEOUT_SECS: u64 = 300;
/// Wait used when a 429 names no `retry_after_ms`.
const DEFAULT_RETRY_AFTER_MS: u64 = 1_000;

/// A failed client-server API call. Texts never contain the access token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("matrix {call}: rate limited, retry after {retry_after_ms} ms")]
    RateLimited {
        call: &'static str,
        retry_after_ms: u64,
    },
    /// The homeserver answered with an error status and `errcode`.
    #[error("matrix {call}: HTTP {status} {errcode}: {message}")]
    Refused {
        call: &'static str,
        status: u16,
        errcode: String,
        message: String,
    },
    #[error("matrix {call}: network error: {message}")]
    Network { call: &'static str, message: String },
    #[error("matrix {call}: unreadable answer: {message}")]
    Malformed { call: &'static str, message: String },
}

impl ApiError {
    /// The token was refused (`M_UNKNOWN_TOKEN`, `M_MISSING_TOKEN`, 401).
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, ApiError::Refused { status: 401, .. })
            || matches!(self, ApiError::Refused { errcode, .. }
                if errcode == "M_UNKNOWN_TOKEN" || errcode == "M_MISSING_TOKEN")
    }

    /// A wrong user id or password at login.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, ApiError::Refused { status: 403, .. })
    }

    /// A state event the room does not have (404 `M_NOT_FOUND`).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::Refused { status: 404, .. })
    }

    /// The classification the outbound retry policy works with.
    pub fn into_send_error(self) -> SendError {
        match &self {
            ApiError::RateLimited { retry_after_ms, .. } => SendError::RateLimited {
                retry_after_ms: *retry_after_ms,
            },
            ApiError::Refused { status, .. } if *status >= 500 => {
                SendError::Transient(self.to_string())
            }
            ApiError::Refused { .. } | ApiError::Malformed { .. } => {
                SendError::Permanent(self.to_string())
            }
            ApiError::Network { .. } => SendError::Transient(self.to_string()),
        }
    }
}

/// Who an access token belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whoami {
    pub user_id: String,
    pub device_id: Option<String>,
}

/// What a password login returned.
#[derive(Clone, PartialEq, Eq)]
pub struct Login {
    pub user_id: String,
    pub device_id: String,
    pub access_token: String,
}

/// The client of one account.
#[derive(Clone)]
pub struct MatrixApi {
    http: reqwest::Client,
    homeserver: String,
    token: String,
}

impl std::fmt::Debug for MatrixApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatrixApi")
            .field("homeserver", &self.homeserver)
            .finish_non_exhaustive()
    }
}

/// Percent-encodes one path segment (room ids, event ids, user ids, aliases).
pub fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl MatrixApi {
    /// A client for `homeserver` (no trailing slash) with `token` (empty
    /// until a login sets one).
    pub fn new(http: reqwest::Client, homeserver: &str, token: &str) -> MatrixApi {
        MatrixApi {
            http,
            homeserver: homeserver.trim_end_matches('/').to_string(),
            token: token.to_string(),
        }
    }

    pub fn homeserver(&self) -> &str {
        &self.homeserver
    }

    /// The same client with another access token.
    pub fn with_token(&self, token: &str) -> MatrixApi {
        MatrixApi {
            token: token.to_string(),
            ..self.clone()
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/_matrix/client/v3{path}", self.homeserver)
    }

    /// The URL an `mxc://server/media` file downloads from (authenticated
    /// media, `Authorization: Bearer` required); `None` for other URLs.
    pub fn media_url(&self, mxc: &str) -> Option<String> {
        let rest = mxc.strip_prefix("mxc://")?;
        let (server, media) = rest.split_once('/')?;
        if server.is_empty() || media.is_empty() || media.contains('/') {
            return None;
        }
        Some(format!(
            "{}/_matrix/client/v1/media/download/{}/{}",
            self.homeserver,
            segment(server),
            segment(media)
        ))
    }

    /// The `Authorization` header value of this account.
    pub fn authorization(&self) -> String {
        format!("Bearer {}", self.token)
    }

    async fn call(
        &self,
        call: &'static str,
        request: reqwest::RequestBuilder,
        timeout: Duration,
        cap: usize,
    ) -> Result<Value, ApiError> {
        let mut request = request.timeout(timeout);
        if !self.token.is_empty() {
            request = request.header(reqwest::header::AUTHORIZATION, self.authorization());
        }
        let response = request.send().await.map_err(|e| ApiError::Network {
            call,
            message: e.without_url().to_string(),
        })?;
        let status = response.status().as_u16();
        let body = read_capped(call, response, cap).await?;
        let value: Value = if body.is_empty() {
            json!({})
        } else {
            serde_json::from_slice(&body).map_err(|e| ApiError::Malformed {
                call,
                message: e.to_string(),
            })?
        };
        if (200..300).contains(&status) {
            return Ok(value);
        }
        let errcode = value["errcode"].as_str().unwrap_or("").to_string();
        if status == 429 || errcode == "M_LIMIT_EXCEEDED" {
            return Err(ApiError::RateLimited {
                call,
                retry_after_ms: value["retry_after_ms"]
                    .as_u64()
                    .unwrap_or(DEFAULT_RETRY_AFTER_MS),
            });
        }
        Err(ApiError::Refused {
            call,
            status,
            errcode,
            message: value["error"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(300)
                .collect(),
        })
    }

    async fn get(&self, call: &'static str, path: &str) -> Result<Value, ApiError> {
        let request = self.http.get(self.url(path));
        self.call(call, request, request_timeout(), MAX_RESPONSE_BYTES)
            .await
    }

    async fn send_json(
        &self,
        call: &'static str,
        method: reqwest::Method,
        path: &str,
        body: &Value,
    ) -> Result<Value, ApiError> {
        let request = self.http.request(method, self.url(path)).json(body);
        self.call(call, request, request_timeout(), MAX_RESPONSE_BYTES)
            .await
    }

    /// `POST /login` with a user id and password.
    pub async fn login(
        &self,
        user_id: &str,
        password: &str,
        device_id: Option<&str>,
        device_name: Option<&str>,
    ) -> Result<Login, ApiError> {
        let mut body = json!({
            "type": "m.login.password",
            "identifier": { "type": "m.id.user", "user": user_id },
            "password": password,
        });
        if let Some(device) = device_id {
            body["device_id"] = json!(device);
        }
        if let Some(name) = device_name {
            body["initial_device_display_name"] = json!(name);
        }
        let answer = self
            .send_json("login", reqwest::Method::POST, "/login", &body)
            .await?;
        let field = |name: &str| answer[name].as_str().map(str::to_string);
        match (field("user_id"), field("device_id"), field("access_token")) {
            (Some(user_id), Some(device_id), Some(access_token)) => Ok(Login {
                user_id,
                device_id,
                access_token,
            }),
            _ => Err(ApiError::Malformed {
                call: "login",
                message: "no user_id, device_id or access_token".into(),
            }),
        }
    }

    /// `GET /account/whoami`.
    pub async fn whoami(&self) -> Result<Whoami, ApiError> {
        let answer = self.get("whoami", "/account/whoami").await?;
        let user_id = answer["user_id"]
            .as_str()
            .ok_or(ApiError::Malformed {
                call: "whoami",
                message: "no user_id".into(),
            })?
            .to_string();
        Ok(Whoami {
            user_id,
            device_id: answer["device_id"].as_str().map(str::to_string),
        })
    }

    /// `GET /profile/{user}/displayname`: `None` when the user has none.
    pub async fn display_name(&self, user_id: &str) -> Result<Option<String>, ApiError> {
        let path = format!("/profile/{}/displayname", segment(user_id));
        match self.get("displayname", &path).await {
            Ok(answer) => Ok(answer["displayname"].as_str().map(str::to_string)),
            Err(error) if error.is_not_found() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// `GET /sync` from `since` with an inline `filter`, waiting up to
    /// `timeout_ms` for news.
    pub async fn sync(
        &self,
        since: Option<&str>,
        filter: &str,
        timeout_ms: u64,
    ) -> Result<Value, ApiError> {
        let mut query: Vec<(&str, String)> = vec![
            ("filter", filter.to_string()),
            ("timeout", timeout_ms.to_string()),
        ];
        if let Some(since) = since {
            query.push(("since", since.to_string()));
        }
        let request = self.http.get(self.url("/sync")).query(&query);
        let timeout =
            Duration::from_millis(timeout_ms) + Duration::from_secs(SYNC_REQUEST_MARGIN_SECS);
        self.call("sync", request, timeout, MAX_SYNC_BYTES).await
    }

    /// `PUT /rooms/{room}/send/{type}/{txn}`: the new event's id.
    pub async fn send_event(
        &self,
        room_id: &str,
        event_type: &str,
        content: &Value,
    ) -> Result<String, ApiError> {
        let txn = uuid::Uuid::new_v4().simple().to_string();
        let path = format!(
            "/rooms/{}/send/{}/{txn}",
            segment(room_id),
            segment(event_type)
        );
        let answer = self
            .send_json("send", reqwest::Method::PUT, &path, content)
            .await?;
        answer["event_id"]
            .as_str()
            .map(str::to_string)
            .ok_or(ApiError::Malformed {
                call: "send",
                message: "no event_id".into(),
            })
    }

    /// `POST /_matrix/media/v3/upload?filename=…`: the file streamed from
    /// disk with its MIME type; returns its `content_uri` (`mxc://…`).
    pub async fn upload(
        &self,
        path: &std::path::Path,
        file_name: &str,
        mime: &str,
        bytes: u64,
    ) -> Result<String, ApiError> {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| ApiError::Malformed {
                call: "upload",
                message: format!("{file_name} cannot be read: {e}"),
            })?;
        let request = self
            .http
            .post(format!("{}/_matrix/media/v3/upload", self.homeserver))
            .query(&[("filename", file_name)])
            .header(reqwest::header::CONTENT_TYPE, mime)
            .header(reqwest::header::CONTENT_LENGTH, bytes)
            .body(crate::media::multipart::file_body(file));
        let timeout = Duration::from_secs(UPLOAD_TIMEOUT_SECS);
        let answer = self
            .call("upload", request, timeout, MAX_RESPONSE_BYTES)
            .await?;
        answer["content_uri"]
            .as_str()
            .filter(|uri| uri.starts_with("mxc://"))
            .map(str::to_string)
            .ok_or(ApiError::Malformed {
                call: "upload",
                message: "no mxc:// content_uri".into(),
            })
    }

    /// `PUT /rooms/{room}/redact/{event}/{txn}`.
    pub async fn redact(&self, room_id: &str, event_id: &str) -> Result<(), ApiError> {
        let txn = uuid::Uuid::new_v4().simple().to_string();
        let path = format!(
            "/rooms/{}/redact/{}/{txn}",
            segment(room_id),
            segment(event_id)
        );
        self.send_json("redact", reqwest::Method::PUT, &path, &json!({}))
            .await
            .map(drop)
    }

    /// `PUT /rooms/{room}/typing/{user}`.
    pub async fn typing(
        &self,
        room_id: &str,
        user_id: &str,
        timeout_ms: u64,
    ) -> Result<(), ApiError> {
        let path = format!("/rooms/{}/typing/{}", segment(room_id), segment(user_id));
        let body = json!({ "typing": true, "timeout": timeout_ms });
        self.send_json("typing", reqwest::Method::PUT, &path, &body)
            .await
            .map(drop)
    }

    /// `POST /rooms/{room}/read_markers`: the event is read and fully read.
    pub async fn read_markers(&self, room_id: &str, event_id: &str) -> Result<(), ApiError> {
        let path = format!("/rooms/{}/read_markers", segment(room_id));
        let body = json!({ "m.fully_read": event_id, "m.read": event_id });
        self.send_json("read_markers", reqwest::Method::POST, &path, &body)
            .await
            .map(drop)
    }

    /// `POST /join/{room id or alias}`: the joined room's id.
    pub async fn join(&self, room: &str) -> Result<String, ApiError> {
        let path = format!("/join/{}", segment(room));
        let answer = self
            .send_json("join", reqwest::Method::POST, &path, &json!({}))
            .await?;
        Ok(answer["room_id"].as_str().unwrap_or(room).to_string())
    }

    /// `GET /directory/room/{alias}`: the room an alias points to.
    pub async fn resolve_alias(&self, alias: &str) -> Result<String, ApiError> {
        let path = format!("/directory/room/{}", segment(alias));
        let answer = self.get("resolve_alias", &path).await?;
        answer["room_id"]
            .as_str()
            .map(str::to_string)
            .ok_or(ApiError::Malformed {
                call: "resolve_alias",
                message: "no room_id".into(),
            })
    }

    /// `GET /rooms/{room}/state/{type}/{state_key}`: the content of a state
    /// event; `None` when the room has none.
    pub async fn state(
        &self,
        room_id: &str,
        event_type: &str,
        state_key: &str,
    ) -> Result<Option<Value>, ApiError> {
        let path = format!(
            "/rooms/{}/state/{}/{}",
            segment(room_id),
            segment(event_type),
            segment(state_key)
        );
        match self.get("state", &path).await {
            Ok(content) => Ok(Some(content)),
            Err(error) if error.is_not_found() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// `GET /rooms/{room}/joined_members`: how many members have joined.
    pub async fn joined_member_count(&self, room_id: &str) -> Result<usize, ApiError> {
        let path = format!("/rooms/{}/joined_members", segment(room_id));
        let answer = self.get("joined_members", &path).await?;
        Ok(answer["joined"].as_object().map_or(0, |m| m.len()))
    }

    /// `GET /user/{user}/account_data/m.direct`: user id → direct rooms.
    pub async fn direct_rooms(&self, user_id: &str) -> Result<Value, ApiError> {
        let path = format!("/user/{}/account_data/m.direct", segment(user_id));
        match self.get("m.direct", &path).await {
            Ok(value) => Ok(value),
            Err(error) if error.is_not_found() => Ok(json!({})),
            Err(error) => Err(error),
        }
    }

    /// `PUT /user/{user}/account_data/m.direct`.
    pub async fn set_direct_rooms(&self, user_id: &str, direct: &Value) -> Result<(), ApiError> {
        let path = format!("/user/{}/account_data/m.direct", segment(user_id));
        self.send_json("m.direct", reqwest::Method::PUT, &path, direct)
            .await
            .map(drop)
    }

    /// `POST /createRoom`: a private direct room with `user_id` invited.
    pub async fn create_direct_room(&self, user_id: &str) -> Result<String, ApiError> {
        let body = json!({
            "preset": "trusted_private_chat",
            "is_direct": true,
            "invite": [user_id],
        });
        let answer = self
            .send_json("createRoom", reqwest::Method::POST, "/createRoom", &body)
            .await?;
        answer["room_id"]
            .as_str()
            .map(str::to_string)
            .ok_or(ApiError::Malformed {
                call: "createRoom",
                message: "no room_id".into(),
            })
    }
}

fn request_timeout() -> Duration {
    Duration::from_secs(REQUEST_TIMEOUT_SECS)
}

/// The body of `response`, refused past `cap` bytes.
async fn read_capped(
    call: &'static str,
    mut response: reqwest::Response,
    cap: usize,
) -> Result<Vec<u8>, ApiError> {
    if response
        .content_length()
        .is_some_and(|len| len > cap as u64)
    {
        return Err(ApiError::Malformed {
            call,
            message: format!("answer larger than {cap} bytes"),
        });
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| ApiError::Network {
        call,
        message: e.without_url().to_string(),
    })? {
        if body.len() + chunk.len() > cap {
            return Err(ApiError::Malformed {
                call,
                message: format!("answer larger than {cap} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(segment("!abc:hs.example"), "%21abc%3Ahs.example");
        assert_eq!(segment("$ev/+="), "%24ev%2F%2B%3D");
        assert_eq!(segment("#ops:hs"), "%23ops%3Ahs");
    }

    #[test]
    fn mxc_urls_map_to_authenticated_downloads() {
        let api = MatrixApi::new(reqwest::Client::new(), "https://hs.example/", "t");
        assert_eq!(
            api.media_url("mxc://hs.example/AbC123").as_deref(),
            Some("https://hs.example/_matrix/client/v1/media/download/hs.example/AbC123")
        );
        assert_eq!(api.media_url("https://evil.example/x"), None);
        assert_eq!(api.media_url("mxc://hs.example/a/b"), None);
        assert_eq!(api.media_url("mxc:///x"), None);
    }

    #[test]
    fn errors_classify_for_retries_and_never_show_the_token() {
        let limited = ApiError::RateLimited {
            call: "send",
            retry_after_ms: 2500,
        };
        assert_eq!(
            limited.into_send_error(),
            SendError::RateLimited {
                retry_after_ms: 2500
            }
        );
        let refused = ApiError::Refused {
            call: "send",
            status: 401,
            errcode: "M_UNKNOWN_TOKEN".into(),
            message: "Invalid access token passed.".into(),
        };
        assert!(refused.is_unauthorized());
        assert!(matches!(refused.into_send_error(), SendError::Permanent(_)));
        let busy = ApiError::Refused {
            call: "send",
            status: 502,
            errcode: String::new(),
            message: String::new(),
        };
        assert!(matches!(busy.into_send_error(), SendError::Transient(_)));
        let api = MatrixApi::new(reqwest::Client::new(), "https://hs", "syt_secret");
        assert!(!format!("{api:?}").contains("syt_secret"));
    }
}
