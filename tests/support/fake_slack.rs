//! A fake Slack on 127.0.0.1: the Web API under `/api/{method}` (`auth.test`,
//! `apps.connections.open`, `chat.postMessage`, `chat.update`,
//! `chat.delete`, `reactions.add`, `conversations.open`) answering
//! `{"ok": …}` JSON with token checks, and the Socket Mode WebSocket
//! (`hello`, `events_api` envelopes that must be acked by `envelope_id`,
//! `disconnect`). Every request, connection and ack is recorded; scripted
//! Web API answers (429s, errors) come first. Shared files are served at
//! `/files-pri/<team>-<id>/download/<name>` to the bot token only (counted).
//! For HTTP events mode it plays Slack's side of the request URL: it POSTs
//! `event_callback` / `url_verification` bodies to the gateway signed as
//! Slack signs them (`X-Slack-Request-Timestamp`, `X-Slack-Signature` =
//! `v0=` + hex HMAC-SHA256 of `v0:<timestamp>:<body>`), and retries a 503
//! with `X-Slack-Retry-Num` as Slack does.
//!
//! It checks requests as Slack does, before any scripted answer: the token
//! (`Authorization: Bearer`, or `token` in a form body; none → `not_authed`,
//! a wrong one → `invalid_auth`, the other kind of token →
//! `not_allowed_token_type`), the content type (JSON or a URL-encoded form,
//! else `invalid_post_type`), a JSON body that parses (`invalid_json`), and
//! each method's arguments: `chat.postMessage` needs a channel
//! (`channel_not_found`) and text or blocks (`no_text`, `msg_too_long` past
//! 40,000 characters); `chat.update` / `chat.delete` need the channel and the
//! `ts` of a message the bot posted there (`message_not_found`);
//! `reactions.add` needs `channel` + `timestamp` (`no_item_specified`) of a
//! known message and a `name` (`invalid_name`), and a second identical
//! reaction is `already_reacted`; `conversations.open` needs `users`.
//! Messages delivered by [`FakeSlack::send_event`] / [`FakeSlack::event_callback`]
//! and the bot's own posts are the known messages.
//!
//! File uploads follow Slack's external flow: `files.getUploadURLExternal`
//! takes form fields only (`filename`, `length` > 0, else
//! `invalid_arguments`; over 1 GB `file_size_exceeded`) and grants an upload
//! URL on this server and a file id; the URL takes the bytes (raw or a
//! multipart `file` part) whose length must be the one announced (else 400);
//! `files.completeUploadExternal` needs `files` naming granted, uploaded ids
//! (`file_not_found`, `file_upload_not_complete`) and a conversation id as
//! `channel_id` (a user id is `invalid_channel`; `thread_ts` without it is
//! `invalid_arguments`); shared files are recorded
//! ([`FakeSlack::shared_files`]).
//!
//! Tests include it with `#[path = "support/fake_slack.rs"] mod fake_slack;`.
#![allow(dead_code)]

#[allow(clippy::duplicate_mod)]
#[path = "multipart_form.rs"]
mod multipart_form;

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::server::{
    ErrorResponse, Request as WsRequest, Response as WsResponse,
};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

pub const BOT_TOKEN: &str = "xoxb-fake-bot-token";
pub const APP_TOKEN: &str = "xapp-fake-app-token";
pub const BOT_USER_ID: &str = "UBOT1";
pub const BOT_ID: &str = "BBOT1";
pub const TEAM_ID: &str = "T0TEAM";
/// The app's signing secret for HTTP events mode.
pub const SIGNING_SECRET: &str = "fake-signing-secret";
/// Deliveries of one event when the request URL keeps answering 503
/// (Slack gives up after its third retry).
const MAX_EVENT_DELIVERIES: u32 = 4;

/// What the gateway answered a POSTed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventAnswer {
    pub status: u16,
    pub body: String,
}

/// One signed request as Slack sends it to a request URL.
#[derive(Debug, Clone)]
pub struct SignedRequest {
    pub body: String,
    /// Unix seconds (`X-Slack-Request-Timestamp`).
    pub timestamp: u64,
    pub secret: String,
    /// `X-Slack-Retry-Num` (absent on the first delivery).
    pub retry_num: Option<u32>,
}

impl SignedRequest {
    /// `body` signed with the app's secret, now.
    pub fn now(body: &str) -> SignedRequest {
        SignedRequest {
            body: body.to_string(),
            timestamp: unix_now(),
            secret: SIGNING_SECRET.to_string(),
            retry_num: None,
        }
    }

    /// `X-Slack-Signature` for this request.
    pub fn signature(&self) -> String {
        use hmac::Mac;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(self.secret.as_bytes())
            .expect("any key length");
        mac.update(format!("v0:{}:{}", self.timestamp, self.body).as_bytes());
        format!("v0={}", hex::encode(mac.finalize().into_bytes()))
    }

    /// POSTs it to `url`.
    pub async fn post(&self, url: &str) -> EventAnswer {
        let mut request = reqwest::Client::new()
            .post(url)
            .header("content-type", "application/json")
            .header("x-slack-request-timestamp", self.timestamp.to_string())
            .header("x-slack-signature", self.signature());
        if let Some(retry) = self.retry_num {
            request = request
                .header("x-slack-retry-num", retry.to_string())
                .header("x-slack-retry-reason", "http_error");
        }
        let response = request
            .body(self.body.clone())
            .send()
            .await
            .expect("the gateway answers");
        EventAnswer {
            status: response.status().as_u16(),
            body: response.text().await.unwrap_or_default(),
        }
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// A Web API request as the fake received it.
#[derive(Debug, Clone)]
pub struct WebRequest {
    pub method: String,
    pub authorization: String,
    /// The `Content-Type` header as sent (empty when absent).
    pub content_type: String,
    /// The `Host` header (the fake's own address, for upload URLs).
    pub host: String,
    /// The parsed body: JSON, or a form's fields as strings (`Null` when it
    /// did not parse).
    pub body: Value,
    /// When the fake received it (for "not before" ordering checks).
    pub at: std::time::Instant,
}

/// A scripted Web API answer.
#[derive(Debug, Clone)]
pub struct WebReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

/// One Socket Mode connection as the fake saw it.
#[derive(Debug, Clone, Default)]
pub struct SocketConnection {
    /// The ticket in the URL `apps.connections.open` handed out.
    pub ticket: String,
    /// Every text frame the client sent, parsed (the acks).
    pub frames: Vec<Value>,
    pub client_close: Option<u16>,
}

#[derive(Default)]
struct Inner {
    web: Vec<WebRequest>,
    scripted: VecDeque<WebReply>,
    /// Scripted answers for the next call of one Web API method.
    scripted_on: Vec<(String, WebReply)>,
    tickets_issued: u64,
    connections: Vec<SocketConnection>,
    live: Option<mpsc::UnboundedSender<String>>,
    next_ts: u64,
    envelopes_sent: u64,
    /// Shared files by name: bytes and type; downloads per name.
    files: std::collections::HashMap<String, (Vec<u8>, String)>,
    file_fetches: std::collections::HashMap<String, usize>,
    /// Messages that exist, as (channel, ts): delivered events and the bot's posts.
    messages: std::collections::HashSet<(String, String)>,
    /// Reactions added, as (channel, ts, name).
    reactions: std::collections::HashSet<(String, String, String)>,
    /// Files granted an upload URL: id → (filename, announced length, bytes once uploaded).
    pending_uploads: std::collections::HashMap<String, (String, u64, Option<Vec<u8>>)>,
    /// The content type of each upload's file part.
    upload_types: std::collections::HashMap<String, String>,
    /// Files shared by `files.completeUploadExternal`.
    shared_files: Vec<SharedFile>,
    next_file: u64,
}

/// A file the bot uploaded and shared.
#[derive(Debug, Clone)]
pub struct SharedFile {
    pub id: String,
    pub filename: String,
    /// The multipart part's content type at the upload URL.
    pub content_type: String,
    pub bytes: Vec<u8>,
    pub channel_id: String,
    pub thread_ts: Option<String>,
    pub initial_comment: Option<String>,
    pub title: Option<String>,
}

/// Slack's cap on a message's `text`.
const MAX_TEXT_CHARS: usize = 40_000;
/// Slack's cap on one file.
const MAX_FILE_BYTES: u64 = 1024 * 1024 * 1024;

struct State {
    inner: Mutex<Inner>,
    socket_addr: SocketAddr,
}

/// The running fake; stops when dropped.
pub struct FakeSlack {
    pub web_addr: SocketAddr,
    state: Arc<State>,
    shutdown: CancellationToken,
}

impl FakeSlack {
    pub async fn start() -> FakeSlack {
        let web = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind Web API on loopback");
        let socket = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind socket on loopback");
        let web_addr = web.local_addr().expect("web address");
        let state = Arc::new(State {
            inner: Mutex::new(Inner {
                next_ts: 100,
                ..Inner::default()
            }),
            socket_addr: socket.local_addr().expect("socket address"),
        });
        let shutdown = CancellationToken::new();
        tokio::spawn(web_loop(web, state.clone(), shutdown.clone()));
        tokio::spawn(socket_loop(socket, state.clone(), shutdown.clone()));
        FakeSlack {
            web_addr,
            state,
            shutdown,
        }
    }

    /// The `apiUrl` pointing at this fake.
    pub fn api_url(&self) -> String {
        format!("http://{}/api", self.web_addr)
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.state.inner.lock().expect("fake state")
    }

    /// Sends an `events_api` envelope carrying `event`; returns its id.
    pub fn send_event(&self, event: Value) -> String {
        let mut inner = self.inner();
        inner.remember_message(&event);
        inner.envelopes_sent += 1;
        let id = format!("env-{}", inner.envelopes_sent);
        let envelope = json!({
            "envelope_id": id, "type": "events_api", "accepts_response_payload": false,
            "retry_attempt": 0, "retry_reason": "",
            "payload": {"token": "verification", "team_id": TEAM_ID, "api_app_id": "A1",
                "type": "event_callback", "event_id": format!("Ev{}", inner.envelopes_sent),
                "event_time": 1_700_000_000, "event": event}
        });
        if let Some(live) = &inner.live {
            let _ = live.send(envelope.to_string());
        }
        id
    }

    /// The `event_callback` body Slack POSTs to a request URL for `event`
    /// (a fresh event id each call).
    pub fn event_callback(&self, event: Value) -> String {
        let mut inner = self.inner();
        inner.remember_message(&event);
        inner.envelopes_sent += 1;
        json!({"token": "verification", "team_id": TEAM_ID, "api_app_id": "A1",
            "type": "event_callback", "event_id": format!("Ev{}", inner.envelopes_sent),
            "event_time": 1_700_000_000, "authorizations": [], "event": event})
        .to_string()
    }

    /// Delivers `body` to the request URL as Slack does: signed now, and
    /// again (with `X-Slack-Retry-Num`, signed anew) while it answers 503.
    /// Returns every answer in order.
    pub async fn deliver_to(&self, url: &str, body: &str) -> Vec<EventAnswer> {
        let mut answers = Vec::new();
        for attempt in 0..MAX_EVENT_DELIVERIES {
            let mut request = SignedRequest::now(body);
            request.retry_num = (attempt > 0).then_some(attempt);
            let answer = request.post(url).await;
            let again = answer.status == 503;
            answers.push(answer);
            if !again {
                break;
            }
            // Slack waits a minute, then five; a fake need not.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        answers
    }

    /// Sends `{"type": "disconnect", "reason": reason}`.
    pub fn send_disconnect(&self, reason: &str) {
        if let Some(live) = &self.inner().live {
            let frame = json!({"type": "disconnect", "reason": reason,
                "debug_info": {"host": "fake-slack"}});
            let _ = live.send(frame.to_string());
        }
    }

    pub fn script_web(&self, reply: WebReply) {
        self.inner().scripted.push_back(reply);
    }

    /// Queues an answer for the next call of `method` only.
    pub fn script_web_on(&self, method: &str, reply: WebReply) {
        self.inner().scripted_on.push((method.to_string(), reply));
    }

    /// Shares `bytes` as file `name`; returns the file object a message's
    /// `files[]` carries (`url_private_download` needs the bot token).
    pub fn add_file(&self, name: &str, bytes: Vec<u8>, mimetype: &str) -> Value {
        let id = format!("F{}", name.len() + self.inner().files.len());
        let base = format!("http://{}/files-pri/{TEAM_ID}-{id}", self.web_addr);
        let size = bytes.len();
        self.inner()
            .files
            .insert(name.to_string(), (bytes, mimetype.to_string()));
        json!({"id": id, "name": name, "title": name, "mimetype": mimetype,
            "filetype": "binary", "size": size, "mode": "hosted",
            "url_private": format!("{base}/{name}"),
            "url_private_download": format!("{base}/download/{name}")})
    }

    /// How often file `name` was downloaded (with the right token).
    pub fn file_fetches(&self, name: &str) -> usize {
        self.inner().file_fetches.get(name).copied().unwrap_or(0)
    }

    /// Files shared in conversations, in order.
    pub fn shared_files(&self) -> Vec<SharedFile> {
        self.inner().shared_files.clone()
    }

    pub fn web_requests(&self) -> Vec<WebRequest> {
        self.inner().web.clone()
    }

    pub fn connections(&self) -> Vec<SocketConnection> {
        self.inner().connections.clone()
    }

    /// Envelope ids the client acked, in order, across connections.
    pub fn acks(&self) -> Vec<String> {
        self.inner()
            .connections
            .iter()
            .flat_map(|c| c.frames.iter())
            .filter_map(|f| f["envelope_id"].as_str().map(str::to_string))
            .collect()
    }
}

impl Inner {
    /// Records the message an event carries (its channel and `ts`), so
    /// reactions, edits and deletes of it find it as on Slack.
    fn remember_message(&mut self, event: &Value) {
        if let (Some(channel), Some(ts)) = (event["channel"].as_str(), event["ts"].as_str()) {
            self.messages.insert((channel.to_string(), ts.to_string()));
        }
    }
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn socket_loop(listener: TcpListener, state: Arc<State>, shutdown: CancellationToken) {
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        tokio::spawn(serve_socket(stream, state.clone(), shutdown.clone()));
    }
}

async fn serve_socket(stream: TcpStream, state: Arc<State>, shutdown: CancellationToken) {
    let mut ticket = String::new();
    // tungstenite's callback signature fixes the error type.
    #[allow(clippy::result_large_err)]
    let capture =
        |request: &WsRequest, response: WsResponse| -> Result<WsResponse, ErrorResponse> {
            let query = request.uri().query().unwrap_or("");
            ticket = query.strip_prefix("ticket=").unwrap_or(query).to_string();
            Ok(response)
        };
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, capture).await else {
        return;
    };
    let (sender, mut outgoing) = mpsc::unbounded_channel();
    let index = {
        let mut inner = state.inner.lock().expect("fake state");
        inner.connections.push(SocketConnection {
            ticket,
            ..SocketConnection::default()
        });
        inner.live = Some(sender);
        inner.connections.len() - 1
    };
    let hello = json!({"type": "hello", "num_connections": 1,
        "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
        "connection_info": {"app_id": "A1"}});
    if ws.send(Message::text(hello.to_string())).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            frame = outgoing.recv() => match frame {
                Some(frame) => if ws.send(Message::text(frame)).await.is_err() { return },
                None => return,
            },
            message = ws.next() => {
                let mut inner = state.inner.lock().expect("fake state");
                match message {
                    Some(Ok(Message::Text(text))) => {
                        let frame = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
                        inner.connections[index].frames.push(frame);
                    }
                    Some(Ok(Message::Close(frame))) => {
                        inner.connections[index].client_close = frame.map(|f| u16::from(f.code));
                        return;
                    }
                    Some(Ok(_)) => {}
                    _ => return,
                }
            }
        }
    }
}

async fn web_loop(listener: TcpListener, state: Arc<State>, shutdown: CancellationToken) {
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        let state = state.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(|request| web_handle(state.clone(), request));
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = connection => {}
            }
        });
    }
}

async fn web_handle(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = request.uri().path().trim_start_matches("/api/").to_string();
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default()
    };
    let authorization = header("authorization");
    let content_type = header("content-type");
    let host = header("host");
    if let Some(file) = request.uri().path().strip_prefix("/files-pri/") {
        let name = file.rsplit('/').next().unwrap_or("");
        return Ok(serve_file(&state, name, &authorization));
    }
    let upload_id = request
        .uri()
        .path()
        .strip_prefix("/upload/v1/")
        .map(str::to_string);
    let content_length = header("content-length");
    let bytes = request
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    if let Some(id) = upload_id {
        return Ok(receive_upload(
            &state,
            &id,
            &content_type,
            &content_length,
            &bytes,
        ));
    }
    let parsed = parse_body(&content_type, &bytes);
    let recorded = WebRequest {
        method,
        authorization,
        host,
        content_type,
        body: parsed.clone().unwrap_or(Value::Null),
        at: std::time::Instant::now(),
    };
    let reply = {
        let mut inner = state.inner.lock().expect("fake state");
        inner.web.push(recorded.clone());
        match parsed.and_then(|_| check_request(&inner, &recorded)) {
            Err(error) => {
                eprintln!("fake slack: refused {}: {error}", recorded.method);
                slack_error(error)
            }
            Ok(()) => {
                let targeted = inner
                    .scripted_on
                    .iter()
                    .position(|(method, _)| *method == recorded.method);
                let targeted = targeted.map(|at| inner.scripted_on.remove(at).1);
                match targeted.or_else(|| inner.scripted.pop_front()) {
                    Some(reply) => reply,
                    None => route(&mut inner, &state, &recorded),
                }
            }
        }
    };
    let mut builder = Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let body = Bytes::from(reply.body.to_string());
    let response = builder
        .header("content-type", "application/json")
        .body(Full::new(body));
    Ok(response.expect("valid response"))
}

/// A POST to an upload URL: the bytes as a multipart `file` part (or raw),
/// their length the one announced to `files.getUploadURLExternal`; Slack
/// answers 200 `OK - <length>`, else 400 / 404 with a reason.
fn receive_upload(
    state: &State,
    id: &str,
    content_type: &str,
    content_length: &str,
    bytes: &[u8],
) -> Response<Full<Bytes>> {
    let answer = |status: u16, text: String| {
        Response::builder()
            .status(status)
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from(text)))
            .expect("valid response")
    };
    if !content_length.is_empty() && content_length.parse::<usize>().ok() != Some(bytes.len()) {
        return answer(
            400,
            "the body's length differs from its Content-Length".into(),
        );
    }
    let (file, part_type) = match multipart_form::boundary(content_type) {
        Some(boundary) => match multipart_form::parts(bytes, &boundary) {
            Ok(parts) => match parts
                .into_iter()
                .find(|p| p.name == "file" && p.file_name.is_some())
            {
                Some(part) => (part.body, part.content_type),
                None => return answer(400, "no file part named \"file\"".into()),
            },
            Err(message) => return answer(400, message),
        },
        None => (bytes.to_vec(), content_type.to_string()),
    };
    let mut inner = state.inner.lock().expect("fake state");
    let Some(pending) = inner.pending_uploads.get_mut(id) else {
        return answer(404, "unknown upload URL".into());
    };
    if file.len() as u64 != pending.1 {
        return answer(
            400,
            format!("uploaded {} bytes, announced {}", file.len(), pending.1),
        );
    }
    let length = file.len();
    pending.2 = Some(file);
    inner.upload_types.insert(id.to_string(), part_type);
    answer(200, format!("OK - {length}"))
}

/// The body as Slack reads it: JSON (`invalid_json` when it does not parse)
/// or a URL-encoded form (fields as strings); no body is no arguments; any
/// other content type is `invalid_post_type`.
fn parse_body(content_type: &str, bytes: &[u8]) -> Result<Value, &'static str> {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match mime.as_str() {
        "application/json" => match serde_json::from_slice::<Value>(bytes) {
            Ok(body) if body.is_object() => Ok(body),
            _ => Err("invalid_json"),
        },
        "application/x-www-form-urlencoded" => {
            let text = String::from_utf8_lossy(bytes);
            let fields = text
                .split('&')
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                    (form_decode(key), Value::String(form_decode(value)))
                })
                .collect::<serde_json::Map<String, Value>>();
            Ok(Value::Object(fields))
        }
        "" if bytes.is_empty() => Ok(json!({})),
        _ => Err("invalid_post_type"),
    }
}

/// One `application/x-www-form-urlencoded` component, decoded.
fn form_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'+' => out.push(b' '),
            b'%' if at + 2 < bytes.len() && text.is_char_boundary(at + 3) => {
                match u8::from_str_radix(&text[at + 1..at + 3], 16) {
                    Ok(byte) => {
                        out.push(byte);
                        at += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        at += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Slack's checks of a parsed request: the token, then the method's
/// arguments (the same for scripted and routed answers).
fn check_request(inner: &Inner, request: &WebRequest) -> Result<(), &'static str> {
    let app_method = request.method == "apps.connections.open";
    let body = &request.body;
    let token = match request.authorization.strip_prefix("Bearer ") {
        Some(token) => token.trim(),
        None if request.authorization.is_empty() => body["token"].as_str().unwrap_or(""),
        None => "",
    };
    let (expected, other) = if app_method {
        (APP_TOKEN, BOT_TOKEN)
    } else {
        (BOT_TOKEN, APP_TOKEN)
    };
    if token.is_empty() {
        return Err("not_authed");
    }
    if token == other {
        return Err("not_allowed_token_type");
    }
    if token != expected {
        return Err("invalid_auth");
    }
    let text = |key: &str| body[key].as_str().unwrap_or("");
    let has_content = |body: &Value| {
        !text("text").is_empty()
            || body["blocks"].as_array().is_some_and(|b| !b.is_empty())
            || body["blocks"].as_str().is_some_and(|b| !b.is_empty())
            || body["attachments"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
    };
    let known = |channel: &str, ts: &str| {
        inner
            .messages
            .contains(&(channel.to_string(), ts.to_string()))
    };
    match request.method.as_str() {
        "chat.postMessage" => {
            if !valid_channel(text("channel")) {
                return Err("channel_not_found");
            }
            if !has_content(body) {
                return Err("no_text");
            }
            if text("text").chars().count() > MAX_TEXT_CHARS {
                return Err("msg_too_long");
            }
        }
        "chat.update" | "chat.delete" => {
            if !valid_channel(text("channel")) {
                return Err("channel_not_found");
            }
            if !known(text("channel"), text("ts")) {
                return Err("message_not_found");
            }
            if request.method == "chat.update" && !has_content(body) {
                return Err("no_text");
            }
            if text("text").chars().count() > MAX_TEXT_CHARS {
                return Err("msg_too_long");
            }
        }
        "reactions.add" => {
            if text("channel").is_empty() || text("timestamp").is_empty() {
                return Err("no_item_specified");
            }
            if text("name").is_empty() || text("name").contains(':') {
                return Err("invalid_name");
            }
            if !known(text("channel"), text("timestamp")) {
                return Err("message_not_found");
            }
        }
        "conversations.open" if text("users").is_empty() && text("channel").is_empty() => {
            return Err("users_list_not_supplied");
        }
        "files.getUploadURLExternal" => {
            // The method reads form fields only (a JSON body carries no arguments).
            if !request
                .content_type
                .starts_with("application/x-www-form-urlencoded")
            {
                return Err("invalid_arguments");
            }
            let length = text("length").parse::<u64>().unwrap_or(0);
            if text("filename").is_empty() || length == 0 {
                return Err("invalid_arguments");
            }
            if length > MAX_FILE_BYTES {
                return Err("file_size_exceeded");
            }
        }
        "files.completeUploadExternal" => {
            let files = match &body["files"] {
                Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
                other => other.clone(),
            };
            let Some(files) = files.as_array().filter(|f| !f.is_empty()) else {
                return Err("invalid_arguments");
            };
            for file in files {
                let id = file["id"].as_str().unwrap_or("");
                match inner.pending_uploads.get(id) {
                    None => return Err("file_not_found"),
                    Some((_, _, None)) => return Err("file_upload_not_complete"),
                    Some(_) => {}
                }
            }
            let channel = text("channel_id");
            if !channel.is_empty() && (!valid_channel(channel) || channel.starts_with(['U', 'W'])) {
                return Err("invalid_channel");
            }
            if !text("thread_ts").is_empty() && channel.is_empty() {
                return Err("invalid_arguments");
            }
        }
        _ => {}
    }
    Ok(())
}

/// A channel id (`C…`, `G…`, `D…`; a user id `U…`/`W…` opens the DM) or a
/// `#name`, as `chat.*` accept them.
fn valid_channel(channel: &str) -> bool {
    if let Some(name) = channel.strip_prefix('#') {
        return !name.is_empty();
    }
    let mut chars = channel.chars();
    matches!(chars.next(), Some('C' | 'G' | 'D' | 'U' | 'W'))
        && channel.len() > 1
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

/// A file download: the bytes to the bot token, else 403 (as Slack refuses
/// a download without the token).
fn serve_file(state: &State, name: &str, authorization: &str) -> Response<Full<Bytes>> {
    let mut inner = state.inner.lock().expect("fake state");
    let file = inner.files.get(name).cloned();
    let response = match file {
        Some(_) if authorization != format!("Bearer {BOT_TOKEN}") => Response::builder()
            .status(403)
            .body(Full::new(Bytes::new())),
        Some((bytes, mimetype)) => {
            *inner.file_fetches.entry(name.to_string()).or_default() += 1;
            Response::builder()
                .status(200)
                .header("content-type", mimetype)
                .body(Full::new(Bytes::from(bytes)))
        }
        None => Response::builder()
            .status(404)
            .body(Full::new(Bytes::new())),
    };
    response.expect("valid response")
}

fn ok(body: Value) -> WebReply {
    let mut body = body;
    body["ok"] = json!(true);
    WebReply {
        status: 200,
        headers: Vec::new(),
        body,
    }
}

fn slack_error(error: &str) -> WebReply {
    WebReply {
        status: 200,
        headers: Vec::new(),
        body: json!({"ok": false, "error": error}),
    }
}

/// Slack's Web API methods as the adapter uses them (the request passed
/// [`check_request`]).
fn route(inner: &mut Inner, state: &State, request: &WebRequest) -> WebReply {
    let body = &request.body;
    let text = |key: &str| body[key].as_str().unwrap_or("").to_string();
    match request.method.as_str() {
        "auth.test" => ok(
            json!({"url": "https://fake.slack.com/", "team": "Fake", "user": "pincer",
            "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID}),
        ),
        "apps.connections.open" => {
            inner.tickets_issued += 1;
            let url = format!(
                "ws://{}/link/?ticket={}",
                state.socket_addr, inner.tickets_issued
            );
            ok(json!({"url": url}))
        }
        "chat.postMessage" => {
            inner.next_ts += 1;
            let channel = text("channel");
            let channel = match channel.strip_prefix('U') {
                Some(user) => format!("D{user}"),
                None => channel,
            };
            let ts = format!("1700000000.{:06}", inner.next_ts);
            inner.messages.insert((channel.clone(), ts.clone()));
            ok(json!({"channel": channel, "ts": ts, "message": {"text": body["text"], "ts": ts}}))
        }
        "chat.update" => {
            ok(json!({"channel": body["channel"], "ts": body["ts"], "text": body["text"]}))
        }
        "chat.delete" => {
            inner.messages.remove(&(text("channel"), text("ts")));
            ok(json!({"channel": body["channel"], "ts": body["ts"]}))
        }
        "reactions.add" => {
            let reaction = (text("channel"), text("timestamp"), text("name"));
            if inner.reactions.insert(reaction) {
                ok(json!({}))
            } else {
                slack_error("already_reacted")
            }
        }
        "files.getUploadURLExternal" => {
            inner.next_file += 1;
            let id = format!("F{:08}", inner.next_file);
            let length = text("length").parse::<u64>().unwrap_or(0);
            inner
                .pending_uploads
                .insert(id.clone(), (text("filename"), length, None));
            let host = request.host.clone();
            ok(json!({"upload_url": format!("http://{host}/upload/v1/{id}"), "file_id": id}))
        }
        "files.completeUploadExternal" => {
            let files = match &body["files"] {
                Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
                other => other.clone(),
            };
            let mut shared = Vec::new();
            for file in files.as_array().cloned().unwrap_or_default() {
                let id = file["id"].as_str().unwrap_or("").to_string();
                let Some((filename, _, Some(bytes))) = inner.pending_uploads.remove(&id) else {
                    continue;
                };
                let content_type = inner.upload_types.remove(&id).unwrap_or_default();
                let optional = |key: &str| body[key].as_str().map(str::to_string);
                inner.shared_files.push(SharedFile {
                    id: id.clone(),
                    filename: filename.clone(),
                    content_type,
                    bytes,
                    channel_id: text("channel_id"),
                    thread_ts: optional("thread_ts"),
                    initial_comment: optional("initial_comment"),
                    title: file["title"].as_str().map(str::to_string),
                });
                shared.push(json!({"id": id, "title": file["title"], "name": filename}));
            }
            ok(json!({"files": shared}))
        }
        "conversations.open" => {
            let user = text("users");
            ok(json!({"channel": {"id": format!("D{}", user.trim_start_matches('U'))}}))
        }
        _ => slack_error("unknown_method"),
    }
}
