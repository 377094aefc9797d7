//! A fake Telegram Bot API server for integration tests, on 127.0.0.1.
//!
//! It answers `POST /bot<token>/<method>` with the Bot API's JSON envelope
//! (`{"ok":true,"result":…}` or `{"ok":false,"error_code":…,"description":…,
//! "parameters":{"retry_after":…}}`) and serves `GET /file/bot<token>/<path>`.
//! `getUpdates` is a real long poll: it confirms updates below `offset`
//! (they are gone for good, as on Telegram), answers at once when updates
//! are pending and otherwise waits up to `timeout` seconds for one; a poll
//! the client abandons is counted. `sendMessage` / `editMessageText` check
//! HTML markup as Telegram does (unknown or unbalanced tags → "can't parse
//! entities") and the 4,096-character cap. Failures can be scripted per
//! method (429 with `retry_after`, 5xx, 409 Conflict, parse errors).
//! `setWebhook` checks the URL and secret as Telegram does, and while a
//! webhook is set `getUpdates` answers 409. Every call is recorded.
//!
//! Parameters are read as the Bot API reads them: from the query string, a
//! JSON body sent as `application/json`, or a URL-encoded form; a body of
//! any other type (or JSON that does not parse) carries no parameters, so
//! the method then fails on the missing ones. The checks run before any
//! scripted failure: a wrong token in `/bot<token>/` is 401 "Unauthorized";
//! `sendMessage` needs a `chat_id` (integer or string) and non-empty `text`
//! (a string) within 4,096 characters; `editMessageText`, `deleteMessage`
//! and `setMessageReaction` need `chat_id` + `message_id` ("message
//! identifier is not specified"); `sendChatAction` needs a known `action`;
//! reactions are `{type: "emoji", emoji}` or `{type: "custom_emoji",
//! custom_emoji_id}` ("REACTION_INVALID"); integer parameters (`message_id`,
//! `message_thread_id`, `offset`, `timeout`, `limit`) must be integers; a
//! `reply_parameters` needs a `message_id`.
//!
//! Uploads (`sendPhoto`, `sendDocument`, `sendVoice`, `sendAudio`, `sendVideo`)
//! are `multipart/form-data` bodies parsed strictly (a malformed body, or a
//! `Content-Length` that differs from the body, is 400): text parts are the
//! parameters, the file part must be under the method's field name (`photo`,
//! `document`, …) or the call fails with "there is no photo in the request";
//! a photo must be an image (JPEG, PNG, WebP; else `IMAGE_PROCESS_FAILED`) of
//! at most 10 MB, any other file at most 50 MB ("file is too big"); a voice
//! note named `.ogg` must be an Ogg stream; a caption is checked like a
//! message's text (HTML markup, 1,024 characters). Each file is recorded with
//! its call ([`RecordedCall::files`]).
//! Product code must never use this.

#[allow(dead_code)]
#[allow(clippy::duplicate_mod)]
#[path = "multipart_form.rs"]
mod multipart_form;
#[path = "platform_text.rs"]
mod platform_text;

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

/// Telegram's cap on a message's visible text.
const MAX_MESSAGE_CHARS: usize = 4096;
/// How long `wait_for_*` helpers wait before failing the test (a hang guard).
const WAIT_GUARD: Duration = Duration::from_secs(30);
/// First message id the fake hands out.
const FIRST_MESSAGE_ID: i64 = 1000;

/// A scripted failure for the next call of a method.
#[derive(Debug, Clone)]
pub enum Failure {
    /// 429 "Too Many Requests: retry after N" with `parameters.retry_after`.
    RateLimited { retry_after_secs: u64 },
    /// 400 "can't parse entities" even for valid markup.
    ParseEntities,
    /// This 5xx status with a Bot API body.
    Server(u16),
    /// 409 "Conflict: terminated by other getUpdates request".
    Conflict,
    /// 400 with this description.
    BadRequest(String),
}

/// One API call as received.
#[derive(Debug, Clone)]
pub struct RecordedCall {
    pub method: String,
    /// The bot token in the call's path.
    pub token: String,
    pub body: Value,
    /// The files uploaded with the call (multipart file parts).
    pub files: Vec<UploadedFile>,
    /// When the fake received the call (for "not before" ordering checks).
    pub at: std::time::Instant,
}

/// One file part of an upload.
#[derive(Debug, Clone)]
pub struct UploadedFile {
    /// The form field (`photo`, `voice`, `document`, …).
    pub field: String,
    pub file_name: String,
    pub content_type: String,
    pub bytes: Vec<u8>,
}

/// Telegram's cap on an uploaded photo.
const MAX_PHOTO_BYTES: usize = 10 * 1024 * 1024;
/// Telegram's cap on any other uploaded file.
const MAX_FILE_BYTES: usize = 50 * 1024 * 1024;
/// Telegram's cap on a caption.
const MAX_CAPTION_CHARS: usize = 1024;

struct FakeFile {
    path: String,
    bytes: Vec<u8>,
    report_size: bool,
}

#[derive(Default)]
struct Inner {
    pending: Vec<Value>,
    next_update_id: i64,
    next_message_id: i64,
    calls: Vec<RecordedCall>,
    failures: HashMap<String, VecDeque<Failure>>,
    files: HashMap<String, FakeFile>,
    downloads: Vec<String>,
    texts: HashMap<(String, i64), String>,
    polls_waiting: usize,
    polls_abandoned: usize,
    webhook_url: Option<String>,
}

struct State {
    token: String,
    /// Further tokens accepted for the same bot (`accept_token`: a rotated token).
    more_tokens: Mutex<Vec<String>>,
    bot_id: i64,
    bot_username: String,
    inner: Mutex<Inner>,
    updates_changed: Notify,
    changed: Notify,
    shutdown: CancellationToken,
}

type Body = BoxBody<Bytes, Infallible>;

/// The running fake; it stops when dropped.
pub struct FakeTelegram {
    pub addr: SocketAddr,
    state: Arc<State>,
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        self.state.shutdown.cancel();
    }
}

impl FakeTelegram {
    /// Starts a fake bot `@<username>` (id `bot_id`) accepting `token`.
    pub async fn start(token: &str, bot_id: i64, username: &str) -> FakeTelegram {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake telegram on loopback");
        let addr = listener.local_addr().expect("listener address");
        let state = Arc::new(State {
            token: token.to_string(),
            more_tokens: Mutex::new(Vec::new()),
            bot_id,
            bot_username: username.to_string(),
            inner: Mutex::new(Inner {
                next_update_id: 500_000,
                next_message_id: FIRST_MESSAGE_ID,
                ..Inner::default()
            }),
            updates_changed: Notify::new(),
            changed: Notify::new(),
            shutdown: CancellationToken::new(),
        });
        tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        FakeTelegram { addr, state }
    }

    /// Accepts `token` too, as Telegram does for a bot's new token before the
    /// owner revokes the old one.
    pub fn accept_token(&self, token: &str) {
        self.state
            .more_tokens
            .lock()
            .expect("fake token lock")
            .push(token.to_string());
    }

    /// The `apiRoot` to configure.
    pub fn api_root(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.state.inner.lock().expect("fake state lock")
    }

    /// Queues an update (`update_id` assigned); returns its id.
    pub fn push_update(&self, mut update: Value) -> i64 {
        let id = {
            let mut inner = self.lock();
            inner.next_update_id += 1;
            let id = inner.next_update_id;
            update["update_id"] = json!(id);
            inner.pending.push(update);
            id
        };
        self.state.updates_changed.notify_waiters();
        id
    }

    /// Queues `{"message": message}`, filling `message_id` and `date`.
    pub fn push_message(&self, mut message: Value) -> i64 {
        if message.get("message_id").is_none() {
            let mut inner = self.lock();
            inner.next_message_id += 1;
            message["message_id"] = json!(inner.next_message_id);
        }
        if message.get("date").is_none() {
            message["date"] = json!(1_767_000_000);
        }
        self.push_update(json!({ "message": message }))
    }

    /// Scripts `failure` for the next call of `method`.
    pub fn fail_next(&self, method: &str, failure: Failure) {
        self.lock()
            .failures
            .entry(method.to_string())
            .or_default()
            .push_back(failure);
    }

    /// Serves a file for `getFile` + download. `report_size` false leaves
    /// `file_size` out of `getFile`'s answer.
    pub fn add_file(&self, file_id: &str, path: &str, bytes: Vec<u8>, report_size: bool) {
        self.lock().files.insert(
            file_id.to_string(),
            FakeFile {
                path: path.to_string(),
                bytes,
                report_size,
            },
        );
    }

    /// A DM from Ann (id 7) carrying a voice note as the Bot API delivers one (`voice`: Ogg/Opus,
    /// `audio/ogg`), its bytes served under `voice/<file_id>.oga`.
    pub fn voice_message(&self, file_id: &str, bytes: Vec<u8>, duration_secs: u64) -> Value {
        let size = bytes.len();
        self.add_file(file_id, &format!("voice/{file_id}.oga"), bytes, true);
        json!({
            "chat": { "id": 7, "type": "private", "first_name": "Ann" },
            "from": Self::user(7, "Ann", Some("ann")),
            "voice": { "file_id": file_id, "file_unique_id": format!("u-{file_id}"),
                       "duration": duration_secs, "mime_type": "audio/ogg", "file_size": size },
        })
    }

    /// A DM from Ann carrying a photo: a 90 px thumbnail size and the full size (`photo` lists
    /// both, as Telegram does), served under `photos/`.
    pub fn photo_message(
        &self,
        file_id: &str,
        bytes: Vec<u8>,
        (width, height): (u32, u32),
        caption: Option<&str>,
    ) -> Value {
        let size = bytes.len();
        let thumb_id = format!("{file_id}-thumb");
        self.add_file(
            &thumb_id,
            &format!("photos/{thumb_id}.jpg"),
            bytes.clone(),
            true,
        );
        self.add_file(file_id, &format!("photos/{file_id}.jpg"), bytes, true);
        let mut message = json!({
            "chat": { "id": 7, "type": "private", "first_name": "Ann" },
            "from": Self::user(7, "Ann", Some("ann")),
            "photo": [
                { "file_id": thumb_id, "file_unique_id": format!("u-{thumb_id}"),
                  "width": 90, "height": 90 * height / width.max(1), "file_size": size },
                { "file_id": file_id, "file_unique_id": format!("u-{file_id}"),
                  "width": width, "height": height, "file_size": size },
            ],
        });
        if let Some(caption) = caption {
            message["caption"] = json!(caption);
        }
        message
    }

    /// A DM from Ann carrying a document (`document` with its name and type as the sender's
    /// client announced them), served under `documents/` unless `served` is false (a file the
    /// test never offers: the announced size must keep it from being fetched).
    pub fn document_message(
        &self,
        file_id: &str,
        file_name: &str,
        mime: &str,
        bytes: Vec<u8>,
        served: bool,
    ) -> Value {
        let size = bytes.len();
        if served {
            self.add_file(file_id, &format!("documents/{file_id}.bin"), bytes, true);
        }
        json!({
            "chat": { "id": 7, "type": "private", "first_name": "Ann" },
            "from": Self::user(7, "Ann", Some("ann")),
            "document": { "file_id": file_id, "file_unique_id": format!("u-{file_id}"),
                          "file_name": file_name, "mime_type": mime, "file_size": size },
        })
    }

    /// The webhook URL registered with `setWebhook`, if any.
    pub fn webhook_url(&self) -> Option<String> {
        self.lock().webhook_url.clone()
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.lock().calls.clone()
    }

    /// The calls of one method so far.
    pub fn calls_of(&self, method: &str) -> Vec<RecordedCall> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .collect()
    }

    /// File paths downloaded so far.
    pub fn downloads(&self) -> Vec<String> {
        self.lock().downloads.clone()
    }

    /// Long polls the client walked away from before they were answered.
    pub fn abandoned_polls(&self) -> usize {
        self.lock().polls_abandoned
    }

    /// Updates not yet confirmed by a later offset.
    pub fn unconfirmed_updates(&self) -> usize {
        self.lock().pending.len()
    }

    /// The ids of the updates not yet confirmed by a later offset.
    pub fn unconfirmed_update_ids(&self) -> Vec<i64> {
        self.lock()
            .pending
            .iter()
            .filter_map(|u| u["update_id"].as_i64())
            .collect()
    }

    async fn wait_until<T>(&self, what: &str, mut check: impl FnMut(&Inner) -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + WAIT_GUARD;
        loop {
            let changed = self.state.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if let Some(found) = check(&self.lock()) {
                return found;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!("fake telegram: gave up waiting for {what}");
            }
        }
    }

    /// Waits until `method` has been called `count` times; returns those calls.
    pub async fn wait_for_calls(&self, method: &str, count: usize) -> Vec<RecordedCall> {
        self.wait_until(&format!("{count} {method} calls"), |inner| {
            let calls: Vec<RecordedCall> = inner
                .calls
                .iter()
                .filter(|c| c.method == method)
                .cloned()
                .collect();
            (calls.len() >= count).then_some(calls)
        })
        .await
    }

    /// Waits until a `getUpdates` long poll is parked with nothing to return.
    pub async fn wait_for_parked_poll(&self) {
        self.wait_until("a parked long poll", |inner| {
            (inner.polls_waiting > 0).then_some(())
        })
        .await
    }

    /// Waits until `count` long polls were abandoned by the client.
    pub async fn wait_for_abandoned_polls(&self, count: usize) {
        self.wait_until("abandoned long polls", |inner| {
            (inner.polls_abandoned >= count).then_some(())
        })
        .await
    }

    /// A user object.
    pub fn user(id: i64, first_name: &str, username: Option<&str>) -> Value {
        let mut user = json!({ "id": id, "is_bot": false, "first_name": first_name });
        if let Some(username) = username {
            user["username"] = json!(username);
        }
        user
    }

    /// The bot's own user object (for replies to the bot).
    pub fn bot_user(&self) -> Value {
        json!({
            "id": self.state.bot_id, "is_bot": true, "first_name": "Pincer",
            "username": self.state.bot_username,
        })
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>) {
    loop {
        let stream = tokio::select! {
            _ = state.shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let service = service_fn(|request| handle(Arc::clone(&state), request));
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = state.shutdown.cancelled() => {}
                _ = connection => {}
            }
        });
    }
}

fn json_response(status: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(status).expect("valid status"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .expect("valid response")
}

fn ok(result: Value) -> Response<Body> {
    json_response(200, &json!({ "ok": true, "result": result }))
}

fn error(code: u16, description: &str) -> Response<Body> {
    json_response(
        code,
        &json!({ "ok": false, "error_code": code, "description": description }),
    )
}

fn failure_response(failure: Failure) -> Response<Body> {
    match failure {
        Failure::RateLimited { retry_after_secs } => json_response(
            429,
            &json!({
                "ok": false, "error_code": 429,
                "description": format!("Too Many Requests: retry after {retry_after_secs}"),
                "parameters": { "retry_after": retry_after_secs },
            }),
        ),
        Failure::ParseEntities => error(
            400,
            "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 0",
        ),
        Failure::Server(status) => error(status, "Internal Server Error"),
        Failure::Conflict => error(
            409,
            "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
        ),
        Failure::BadRequest(description) => error(400, &format!("Bad Request: {description}")),
    }
}

async fn handle(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or("").to_string();
    let full_content_type = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let content_length = request
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let content_type = full_content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let bytes = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    if content_length.is_some_and(|length| length != bytes.len()) {
        return Ok(error(
            400,
            "Bad Request: the body's length differs from its Content-Length",
        ));
    }
    if let Some(rest) = path.strip_prefix("/file/bot") {
        return Ok(download(&state, rest));
    }
    let Some((token, method)) = path
        .strip_prefix("/bot")
        .and_then(|rest| rest.split_once('/'))
    else {
        return Ok(error(404, "Not Found"));
    };
    let known = token == state.token
        || state
            .more_tokens
            .lock()
            .expect("fake token lock")
            .iter()
            .any(|t| t == token);
    if !known {
        return Ok(error(401, "Unauthorized"));
    }
    let (body, files) = match parameters(&query, &content_type, &full_content_type, &bytes) {
        Ok(parsed) => parsed,
        Err(description) => return Ok(error(400, &format!("Bad Request: {description}"))),
    };
    let checked =
        check_parameters(method, &body).and_then(|()| check_upload(method, &body, &files));
    if let Err(description) = checked {
        eprintln!("fake telegram: refused {method}: {description}");
        state
            .inner
            .lock()
            .expect("fake state lock")
            .calls
            .push(RecordedCall {
                method: method.to_string(),
                token: token.to_string(),
                body,
                files,
                at: std::time::Instant::now(),
            });
        state.changed.notify_waiters();
        return Ok(error(400, &format!("Bad Request: {description}")));
    }
    let scripted = {
        let mut inner = state.inner.lock().expect("fake state lock");
        inner.calls.push(RecordedCall {
            method: method.to_string(),
            token: token.to_string(),
            body: body.clone(),
            files: files.clone(),
            at: std::time::Instant::now(),
        });
        inner.failures.get_mut(method).and_then(VecDeque::pop_front)
    };
    state.changed.notify_waiters();
    if let Some(failure) = scripted {
        return Ok(failure_response(failure));
    }
    Ok(match method {
        "getMe" => ok(json!({
            "id": state.bot_id, "is_bot": true, "first_name": "Pincer",
            "username": state.bot_username, "can_join_groups": true,
        })),
        "getUpdates" => {
            if state
                .inner
                .lock()
                .expect("fake state lock")
                .webhook_url
                .is_some()
            {
                error(409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first")
            } else {
                get_updates(state, &body)
            }
        }
        "setWebhook" => set_webhook(&state, &body),
        "deleteWebhook" => {
            state.inner.lock().expect("fake state lock").webhook_url = None;
            ok(json!(true))
        }
        "sendMessage" => send_message(&state, &body),
        "editMessageText" => edit_message(&state, &body),
        "deleteMessage" | "sendChatAction" | "setMessageReaction" => match body.get("chat_id") {
            Some(_) => ok(json!(true)),
            None => error(400, "Bad Request: chat_id is empty"),
        },
        "getFile" => get_file(&state, &body),
        "sendPhoto" | "sendDocument" | "sendVoice" | "sendAudio" | "sendVideo" => {
            send_file(&state, method, &body, &files)
        }
        _ => error(404, "Not Found: method not found"),
    })
}

/// The call's parameters as the Bot API reads them: the query string, then
/// a JSON object body (`application/json`), URL-encoded form fields or a
/// multipart form's text parts (its file parts are returned apart).
fn parameters(
    query: &str,
    content_type: &str,
    full_content_type: &str,
    bytes: &[u8],
) -> Result<(Value, Vec<UploadedFile>), String> {
    let mut fields = form_fields(query.as_bytes());
    let mut files = Vec::new();
    if content_type == "multipart/form-data" {
        let boundary = multipart_form::boundary(full_content_type)
            .ok_or("multipart body without a boundary")?;
        for part in multipart_form::parts(bytes, &boundary)? {
            match part.file_name {
                Some(file_name) => files.push(UploadedFile {
                    field: part.name,
                    file_name,
                    content_type: part.content_type,
                    bytes: part.body,
                }),
                None => {
                    let text = String::from_utf8(part.body)
                        .map_err(|_| format!("field {} is not UTF-8", part.name))?;
                    // Structured parameters arrive JSON-serialized in forms.
                    let value = if part.name == "reply_parameters" {
                        serde_json::from_str(&text).unwrap_or(Value::String(text))
                    } else {
                        Value::String(text)
                    };
                    fields.insert(part.name, value);
                }
            }
        }
        return Ok((Value::Object(fields), files));
    }
    let from_body = match content_type {
        "application/json" => serde_json::from_slice::<Value>(bytes)
            .ok()
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default(),
        "application/x-www-form-urlencoded" => form_fields(bytes),
        _ => serde_json::Map::new(),
    };
    fields.extend(from_body);
    Ok((Value::Object(fields), files))
}

/// The file field of an upload method.
fn file_field(method: &str) -> Option<&'static str> {
    Some(match method {
        "sendPhoto" => "photo",
        "sendDocument" => "document",
        "sendVoice" => "voice",
        "sendAudio" => "audio",
        "sendVideo" => "video",
        _ => return None,
    })
}

/// The Bot API's checks of an upload: the file under its field, its type and
/// size, the caption.
fn check_upload(method: &str, body: &Value, files: &[UploadedFile]) -> Result<(), String> {
    let Some(field) = file_field(method) else {
        return Ok(());
    };
    if body.get("chat_id").is_none_or(Value::is_null) {
        return Err("chat_id is empty".into());
    }
    let file = files.iter().find(|f| f.field == field);
    let by_reference = body.get(field).and_then(Value::as_str).is_some();
    let Some(file) = file else {
        return if by_reference {
            Ok(())
        } else {
            Err(format!("there is no {field} in the request"))
        };
    };
    let cap = if field == "photo" {
        MAX_PHOTO_BYTES
    } else {
        MAX_FILE_BYTES
    };
    if file.bytes.len() > cap {
        return Err("file is too big".into());
    }
    if file.bytes.is_empty() {
        return Err("file must be non-empty".into());
    }
    let b = &file.bytes;
    if field == "photo" {
        let image = b.starts_with(&[0xff, 0xd8, 0xff])
            || b.starts_with(b"\x89PNG\r\n\x1a\n")
            || (b.starts_with(b"RIFF") && b.get(8..12) == Some(b"WEBP"));
        if !image {
            return Err("IMAGE_PROCESS_FAILED".into());
        }
    }
    if field == "voice" && file.file_name.ends_with(".ogg") && !b.starts_with(b"OggS") {
        return Err("VOICE_MESSAGES_FORBIDDEN: the voice note is not an Ogg stream".into());
    }
    if let Some(caption) = body.get("caption") {
        let text = caption.as_str().ok_or("caption must be a string")?;
        let visible = match body.get("parse_mode").and_then(Value::as_str) {
            Some("HTML") => platform_text::telegram_html_visible(text)?,
            Some(other) => return Err(format!("unsupported parse_mode {other}")),
            None => text.to_string(),
        };
        if visible.chars().count() > MAX_CAPTION_CHARS {
            return Err("message caption is too long".into());
        }
    }
    Ok(())
}

/// An accepted upload: the message Telegram would return.
fn send_file(state: &State, method: &str, body: &Value, files: &[UploadedFile]) -> Response<Body> {
    let chat = chat_key(body).unwrap_or_default();
    let field = file_field(method).unwrap_or("document");
    let size = files
        .iter()
        .find(|f| f.field == field)
        .map_or(0, |f| f.bytes.len());
    let mut inner = state.inner.lock().expect("fake state lock");
    inner.next_message_id += 1;
    let id = inner.next_message_id;
    let file = json!({"file_id": format!("sent-{id}"), "file_unique_id": format!("u{id}"), "file_size": size});
    let media = if field == "photo" {
        json!([file])
    } else {
        file
    };
    let mut message = json!({
        "message_id": id, "date": 1_767_000_000,
        "chat": { "id": chat.parse::<i64>().unwrap_or(0), "type": "private" },
        "from": { "id": state.bot_id, "is_bot": true, "first_name": "Pincer" },
    });
    message[field] = media;
    if let Some(caption) = body.get("caption").and_then(Value::as_str) {
        message["caption"] =
            json!(platform_text::telegram_html_visible(caption)
                .unwrap_or_else(|_| caption.to_string()));
    }
    ok(message)
}

/// URL-encoded `key=value` pairs as string fields.
fn form_fields(bytes: &[u8]) -> serde_json::Map<String, Value> {
    let decode = |text: &str| {
        let text = text.replace('+', " ");
        let mut out = Vec::new();
        let raw = text.as_bytes();
        let mut at = 0;
        while at < raw.len() {
            let hex = raw
                .get(at + 1..at + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            match (raw[at], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
                (b'%', Some(byte)) => {
                    out.push(byte);
                    at += 3;
                }
                (byte, _) => {
                    out.push(byte);
                    at += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    String::from_utf8_lossy(bytes)
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), Value::String(decode(value)))
        })
        .collect()
}

/// Chat actions `sendChatAction` accepts.
const CHAT_ACTIONS: &[&str] = &[
    "typing",
    "upload_photo",
    "record_video",
    "upload_video",
    "record_voice",
    "upload_voice",
    "upload_document",
    "choose_sticker",
    "find_location",
    "record_video_note",
    "upload_video_note",
];

/// Whether an integer parameter holds an integer (a form sends it as text).
fn integer(value: &Value) -> bool {
    value.is_i64()
        || value
            .as_str()
            .is_some_and(|s| s.trim().parse::<i64>().is_ok())
}

/// The Bot API's parameter checks; `Err(description)` after "Bad Request: ".
fn check_parameters(method: &str, body: &Value) -> Result<(), String> {
    for key in [
        "message_id",
        "message_thread_id",
        "offset",
        "timeout",
        "limit",
    ] {
        if let Some(value) = body.get(key).filter(|v| !v.is_null()) {
            if !integer(value) {
                return Err(format!("invalid {key} specified"));
            }
        }
    }
    if let Some(chat) = body.get("chat_id").filter(|v| !v.is_null()) {
        if !integer(chat)
            && !chat
                .as_str()
                .is_some_and(|c| c.starts_with('@') && c.len() > 1)
        {
            return Err("chat not found".into());
        }
    }
    if let Some(reply) = body.get("reply_parameters").filter(|v| !v.is_null()) {
        if !reply.get("message_id").is_some_and(integer) {
            return Err("message to be replied not found".into());
        }
    }
    let needs_chat = [
        "sendMessage",
        "editMessageText",
        "deleteMessage",
        "sendChatAction",
        "setMessageReaction",
    ];
    if needs_chat.contains(&method) && body.get("chat_id").is_none_or(Value::is_null) {
        return Err("chat_id is empty".into());
    }
    let needs_message = ["editMessageText", "deleteMessage", "setMessageReaction"];
    if needs_message.contains(&method) && body.get("message_id").is_none_or(Value::is_null) {
        return Err("message identifier is not specified".into());
    }
    if matches!(method, "sendMessage" | "editMessageText")
        && body.get("text").is_some_and(|t| !t.is_string())
    {
        return Err("message text is empty".into());
    }
    match method {
        "sendChatAction" => {
            let action = body.get("action").and_then(Value::as_str).unwrap_or("");
            if !CHAT_ACTIONS.contains(&action) {
                return Err("wrong parameter action in request".into());
            }
        }
        "setMessageReaction" => {
            let reactions = match body.get("reaction") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(reactions)) => reactions.clone(),
                Some(_) => return Err("REACTION_INVALID".into()),
            };
            let valid = reactions.iter().all(|r| match r["type"].as_str() {
                Some("emoji") => r["emoji"].as_str().is_some_and(|e| !e.is_empty()),
                Some("custom_emoji") => r["custom_emoji_id"].is_string(),
                Some("paid") => true,
                _ => false,
            });
            if !valid {
                return Err("REACTION_INVALID".into());
            }
        }
        _ => {}
    }
    Ok(())
}

fn download(state: &State, rest: &str) -> Response<Body> {
    let Some((token, file_path)) = rest.split_once('/') else {
        return error(404, "Not Found");
    };
    if token != state.token {
        return error(401, "Unauthorized");
    }
    let mut inner = state.inner.lock().expect("fake state lock");
    let found = inner
        .files
        .values()
        .find(|f| f.path == file_path)
        .map(|f| f.bytes.clone());
    match found {
        Some(bytes) => {
            inner.downloads.push(file_path.to_string());
            drop(inner);
            state.changed.notify_waiters();
            Response::builder()
                .status(200)
                .header("content-type", "application/octet-stream")
                .body(Full::new(Bytes::from(bytes)).boxed())
                .expect("valid response")
        }
        None => error(404, "Not Found"),
    }
}

/// As Telegram: an HTTPS URL on a port it delivers to, a secret token of
/// 1-256 characters from `A-Za-z0-9_-`.
fn set_webhook(state: &State, body: &Value) -> Response<Body> {
    let url = body.get("url").and_then(Value::as_str).unwrap_or("");
    if url.is_empty() {
        state.inner.lock().expect("fake state lock").webhook_url = None;
        return ok(json!(true));
    }
    if !url.starts_with("https://") {
        return error(
            400,
            "Bad Request: bad webhook: An HTTPS URL must be provided for webhook",
        );
    }
    let secret = body
        .get("secret_token")
        .and_then(Value::as_str)
        .unwrap_or("");
    let secret_ok = secret.len() <= 256
        && secret
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !secret_ok {
        return error(
            400,
            "Bad Request: secret token contains unallowed characters",
        );
    }
    state.inner.lock().expect("fake state lock").webhook_url = Some(url.to_string());
    ok(json!(true))
}

/// The largest file `getFile` hands out (the Bot API's limit).
const MAX_GET_FILE_BYTES: usize = 20 * 1024 * 1024;

fn get_file(state: &State, body: &Value) -> Response<Body> {
    let file_id = body.get("file_id").and_then(Value::as_str).unwrap_or("");
    let inner = state.inner.lock().expect("fake state lock");
    match inner.files.get(file_id) {
        // The Bot API serves files up to 20 MB.
        Some(file) if file.bytes.len() > MAX_GET_FILE_BYTES => {
            error(400, "Bad Request: file is too big")
        }
        Some(file) => {
            let mut result = json!({
                "file_id": file_id, "file_unique_id": format!("u-{file_id}"),
                "file_path": file.path,
            });
            if file.report_size {
                result["file_size"] = json!(file.bytes.len());
            }
            ok(result)
        }
        None => error(400, "Bad Request: invalid file_id"),
    }
}

/// Answers a long poll: headers at once, the body when updates arrive or
/// the timeout ends; a client that leaves first is counted as abandoning.
fn get_updates(state: Arc<State>, body: &Value) -> Response<Body> {
    let offset = body.get("offset").and_then(Value::as_i64);
    let timeout_secs = body.get("timeout").and_then(Value::as_u64).unwrap_or(0);
    let limit = body.get("limit").and_then(Value::as_u64).unwrap_or(100) as usize;
    let (sender, receiver) = mpsc::channel::<Bytes>(1);
    let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let bytes = receiver.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(bytes)), receiver))
    });
    tokio::spawn(async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout_secs);
        let mut parked = false;
        let batch = loop {
            let arrived = state.updates_changed.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let batch = take_batch(&state, offset, limit);
            if !batch.is_empty() || tokio::time::Instant::now() >= deadline {
                break batch;
            }
            if !parked {
                parked = true;
                set_parked(&state, 1);
            }
            tokio::select! {
                _ = state.shutdown.cancelled() => return,
                _ = &mut arrived => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = sender.closed() => {
                    set_parked(&state, -1);
                    state.inner.lock().expect("fake state lock").polls_abandoned += 1;
                    state.changed.notify_waiters();
                    return;
                }
            }
        };
        if parked {
            set_parked(&state, -1);
        }
        let answer = json!({ "ok": true, "result": batch }).to_string();
        let _ = sender.send(Bytes::from(answer)).await;
    });
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(StreamBody::new(frames).boxed())
        .expect("valid response")
}

fn set_parked(state: &State, delta: i64) {
    {
        let mut inner = state.inner.lock().expect("fake state lock");
        inner.polls_waiting = (inner.polls_waiting as i64 + delta).max(0) as usize;
    }
    state.changed.notify_waiters();
}

/// Confirms updates below `offset` (dropping them) and returns the next batch.
fn take_batch(state: &State, offset: Option<i64>, limit: usize) -> Vec<Value> {
    let mut inner = state.inner.lock().expect("fake state lock");
    if let Some(offset) = offset {
        inner
            .pending
            .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
    }
    inner.pending.iter().take(limit).cloned().collect()
}

fn chat_key(body: &Value) -> Option<String> {
    match body.get("chat_id")? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The visible text of a message, checking markup as Telegram does.
fn visible_text(body: &Value) -> Result<String, String> {
    let text = body.get("text").and_then(Value::as_str).unwrap_or("");
    let visible = match body.get("parse_mode").and_then(Value::as_str) {
        Some("HTML") => platform_text::telegram_html_visible(text)?,
        Some(other) => return Err(format!("unsupported parse_mode {other}")),
        None => text.to_string(),
    };
    if visible.trim().is_empty() {
        return Err("message text is empty".to_string());
    }
    if visible.chars().count() > MAX_MESSAGE_CHARS {
        return Err("message is too long".to_string());
    }
    Ok(visible)
}

fn send_message(state: &State, body: &Value) -> Response<Body> {
    let Some(chat) = chat_key(body) else {
        return error(400, "Bad Request: chat_id is empty");
    };
    let visible = match visible_text(body) {
        Ok(visible) => visible,
        Err(reason) => return error(400, &format!("Bad Request: {reason}")),
    };
    let mut inner = state.inner.lock().expect("fake state lock");
    inner.next_message_id += 1;
    let id = inner.next_message_id;
    inner.texts.insert((chat.clone(), id), visible.clone());
    ok(json!({
        "message_id": id, "date": 1_767_000_000,
        "chat": { "id": chat.parse::<i64>().unwrap_or(0), "type": "private" },
        "from": { "id": state.bot_id, "is_bot": true, "first_name": "Pincer" },
        "text": visible,
    }))
}

fn edit_message(state: &State, body: &Value) -> Response<Body> {
    let chat = chat_key(body).unwrap_or_default();
    let id = body.get("message_id").and_then(Value::as_i64).unwrap_or(0);
    let visible = match visible_text(body) {
        Ok(visible) => visible,
        Err(reason) => return error(400, &format!("Bad Request: {reason}")),
    };
    let mut inner = state.inner.lock().expect("fake state lock");
    match inner.texts.get(&(chat.clone(), id)) {
        None => error(400, "Bad Request: message to edit not found"),
        Some(current) if *current == visible => error(
            400,
            "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
        ),
        Some(_) => {
            inner.texts.insert((chat, id), visible.clone());
            ok(json!({ "message_id": id, "date": 1_767_000_000, "chat": {"id": 0, "type": "private"}, "text": visible }))
        }
    }
}
