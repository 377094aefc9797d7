//! A fake Discord on 127.0.0.1: the gateway (WebSocket, API v10 JSON
//! frames: HELLO, heartbeat ACK, IDENTIFY → READY, dispatches with
//! sequence numbers, RESUME → replay + RESUMED, close codes) and the REST
//! API under `/api/v10` (messages, typing, reactions, channels, DM
//! channels, `GET /gateway/bot`), recording everything it is sent and
//! answering scripted replies (429s, errors) first; attachment files under
//! `/attachments/…` as Discord's CDN serves them (no token), counted.
//!
//! It checks what it is sent as Discord does. The gateway: the upgrade must
//! ask for `v=10` (else close 4012) and JSON encoding; a frame that is not a
//! JSON object closes 4002, an unknown opcode 4001, anything but a heartbeat
//! before IDENTIFY / RESUME 4003, a second IDENTIFY 4005; IDENTIFY needs this
//! token (else close 4004 "Authentication failed"), integer `intents` (4013)
//! and `properties` with `os`, `browser`, `device` (4002). REST, before any
//! scripted answer: `Authorization: Bot <token>` (401 `{"message": "401:
//! Unauthorized", "code": 0}`), a body with a JSON content type that parses
//! (50109); a message must carry content, embeds, stickers, components, a
//! poll or files (50006 "Cannot send an empty message") and content of at
//! most 2,000 characters (50035 "Invalid Form Body"); edits, deletes and
//! reactions need a message that exists in that channel (10008 "Unknown
//! Message"): one the bot created, one dispatched as `MESSAGE_CREATE`, or one
//! added with [`FakeDiscord::add_message`].
//!
//! A message with files is `multipart/form-data`, parsed strictly as Discord
//! does: the message JSON in the `payload_json` part (unparseable: 50109),
//! files in `files[n]` parts, each named by an `attachments` entry with id
//! `n` (else 50035 "Invalid Form Body"), at most 10 MiB each (else 413, code
//! 40005 "Request entity too large"); a malformed body or a
//! `Content-Length` that differs from it is 400. Files are recorded with
//! their request ([`RestRequest::files`]).
//!
//! Tests include it with `#[path = "support/fake_discord.rs"] mod fake_discord;`.
#![allow(dead_code)]

#[allow(clippy::duplicate_mod)]
#[path = "multipart_form.rs"]
mod multipart_form;

use std::collections::{BTreeMap, HashMap, VecDeque};
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
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

/// The bot user the fake's READY announces.
pub const BOT_USER_ID: &str = "900100";
pub const BOT_USERNAME: &str = "pincer";
/// The token the fake's REST API accepts.
pub const TOKEN: &str = "fake-discord-token.secret";

/// A REST request as the fake received it.
#[derive(Debug, Clone)]
pub struct RestRequest {
    pub method: String,
    /// The raw (still percent-encoded) path.
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Value,
    /// Files of a multipart message: (field, file name, content type, bytes).
    pub files: Vec<(String, String, String, Vec<u8>)>,
    /// When the fake received it (for "not before" ordering checks).
    pub at: std::time::Instant,
}

/// Discord's cap on one attachment for a bot outside boosted servers.
const MAX_ATTACHMENT_BYTES: usize = 10 * 1024 * 1024;

/// A scripted REST answer.
#[derive(Debug, Clone)]
pub struct RestReply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

/// One gateway connection as the fake saw it.
#[derive(Debug, Clone, Default)]
pub struct GatewayConnection {
    /// The path and query string of the upgrade request.
    pub path: String,
    pub query: String,
    /// Every frame the client sent, parsed.
    pub frames: Vec<Value>,
    /// The close code the client sent, if it closed.
    pub client_close: Option<u16>,
}

enum Command {
    Send(String),
    Close(u16),
}

/// Discord's reason text for a gateway close code.
fn close_reason(code: u16) -> &'static str {
    match code {
        4001 => "Unknown opcode.",
        4002 => "Error while decoding payload.",
        4003 => "Not authenticated.",
        4004 => "Authentication failed.",
        4005 => "Already authenticated.",
        4012 => "Invalid API version.",
        4013 => "Invalid intent(s).",
        _ => "",
    }
}

/// What the client may send on a connection, as the gateway tracks it.
#[derive(Default)]
struct ConnectionState {
    identified: bool,
}

#[derive(Default)]
struct Session {
    id: String,
    seq: u64,
    /// Every dispatch of the session (seq, frame), for RESUME replay.
    history: Vec<(u64, String)>,
}

#[derive(Default)]
struct Inner {
    hello_interval_ms: u64,
    connections: Vec<GatewayConnection>,
    live: Option<(usize, mpsc::UnboundedSender<Command>)>,
    /// The live connection neither acks nor delivers any more.
    zombie: bool,
    close_on_identify: Option<u16>,
    session: Session,
    sessions_started: u64,
    rest: Vec<RestRequest>,
    scripted: VecDeque<RestReply>,
    /// Scripted answers for the next request of one method whose path ends so.
    scripted_on: Vec<(String, String, RestReply)>,
    channels: HashMap<String, Value>,
    next_message_id: u64,
    /// CDN files by name: bytes and content type; and how often each was fetched.
    files: HashMap<String, (Vec<u8>, String)>,
    file_fetches: HashMap<String, usize>,
    /// Messages that exist, as (channel id, message id).
    messages: std::collections::HashSet<(String, String)>,
}

/// Discord's cap on a message's `content`.
const MAX_CONTENT_CHARS: usize = 2000;

struct State {
    inner: Mutex<Inner>,
    gateway_addr: Mutex<Option<SocketAddr>>,
}

/// The running fake; stops when dropped.
pub struct FakeDiscord {
    pub rest_addr: SocketAddr,
    pub gateway_addr: SocketAddr,
    state: Arc<State>,
    shutdown: CancellationToken,
}

impl FakeDiscord {
    /// Starts both servers; HELLO announces `hello_interval_ms`.
    pub async fn start(hello_interval_ms: u64) -> FakeDiscord {
        let rest = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind REST on loopback");
        let gateway = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind gateway on loopback");
        let rest_addr = rest.local_addr().expect("REST address");
        let gateway_addr = gateway.local_addr().expect("gateway address");
        let state = Arc::new(State {
            inner: Mutex::new(Inner {
                hello_interval_ms,
                next_message_id: 7_000,
                ..Inner::default()
            }),
            gateway_addr: Mutex::new(Some(gateway_addr)),
        });
        let shutdown = CancellationToken::new();
        tokio::spawn(rest_loop(rest, state.clone(), shutdown.clone()));
        tokio::spawn(gateway_loop(gateway, state.clone(), shutdown.clone()));
        FakeDiscord {
            rest_addr,
            gateway_addr,
            state,
            shutdown,
        }
    }

    /// The `apiBaseUrl` pointing at this fake.
    pub fn api_base_url(&self) -> String {
        format!("http://{}/api/v10", self.rest_addr)
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.state.inner.lock().expect("fake state")
    }

    /// Sends a dispatch (`op 0`) with the next sequence number to the live
    /// connection; a zombie connection only records it for RESUME replay.
    pub fn dispatch(&self, event: &str, d: Value) -> u64 {
        let mut inner = self.inner();
        inner.session.seq += 1;
        let seq = inner.session.seq;
        if event == "MESSAGE_CREATE" {
            if let (Some(channel), Some(id)) = (d["channel_id"].as_str(), d["id"].as_str()) {
                inner.messages.insert((channel.to_string(), id.to_string()));
            }
        }
        let frame = json!({"op": 0, "t": event, "s": seq, "d": d}).to_string();
        inner.session.history.push((seq, frame.clone()));
        if !inner.zombie {
            if let Some((_, live)) = &inner.live {
                let _ = live.send(Command::Send(frame));
            }
        }
        seq
    }

    /// Sends any raw frame to the live connection.
    pub fn send_raw(&self, frame: Value) {
        if let Some((_, live)) = &self.inner().live {
            let _ = live.send(Command::Send(frame.to_string()));
        }
    }

    /// From now on the live connection stops acking heartbeats and
    /// delivering dispatches.
    pub fn go_zombie(&self) {
        self.inner().zombie = true;
    }

    /// Closes the live connection with `code`.
    pub fn close_live(&self, code: u16) {
        if let Some((_, live)) = &self.inner().live {
            let _ = live.send(Command::Close(code));
        }
    }

    /// The next IDENTIFY is answered by closing with `code`.
    pub fn close_on_identify(&self, code: u16) {
        self.inner().close_on_identify = Some(code);
    }

    /// A message that exists in `channel` (for edits, deletes, reactions)
    /// without a dispatch.
    pub fn add_message(&self, channel: &str, id: &str) {
        self.inner()
            .messages
            .insert((channel.to_string(), id.to_string()));
    }

    /// A channel `GET /channels/{id}` returns.
    pub fn add_channel(&self, channel: Value) {
        let id = channel["id"].as_str().expect("channel id").to_string();
        self.inner().channels.insert(id, channel);
    }

    /// Queues a REST answer given before the normal routes.
    pub fn script_rest(&self, reply: RestReply) {
        self.inner().scripted.push_back(reply);
    }

    /// Queues a REST answer for the next `method` request whose path ends
    /// with `path_suffix` (other requests keep their normal answers).
    pub fn script_rest_on(&self, method: &str, path_suffix: &str, reply: RestReply) {
        self.inner()
            .scripted_on
            .push((method.to_string(), path_suffix.to_string(), reply));
    }

    /// Serves `bytes` as CDN file `name`; returns the attachment object
    /// (`id`, `filename`, `size`, `url`, `proxy_url`, `content_type`).
    pub fn add_attachment(&self, name: &str, bytes: Vec<u8>, content_type: &str) -> Value {
        let url = format!("http://{}/attachments/500/1/{name}", self.rest_addr);
        let size = bytes.len();
        self.inner()
            .files
            .insert(name.to_string(), (bytes, content_type.to_string()));
        json!({"id": format!("att-{name}"), "filename": name, "size": size, "url": url,
            "proxy_url": url, "content_type": content_type})
    }

    /// How often the CDN file `name` was downloaded.
    pub fn file_fetches(&self, name: &str) -> usize {
        self.inner().file_fetches.get(name).copied().unwrap_or(0)
    }

    pub fn connections(&self) -> Vec<GatewayConnection> {
        self.inner().connections.clone()
    }

    pub fn session_id(&self) -> String {
        self.inner().session.id.clone()
    }

    pub fn rest_requests(&self) -> Vec<RestRequest> {
        self.inner().rest.clone()
    }

    /// Every frame with this opcode the client sent, across connections.
    pub fn client_frames(&self, op: u64) -> Vec<Value> {
        self.inner()
            .connections
            .iter()
            .flat_map(|c| c.frames.iter())
            .filter(|f| f["op"] == op)
            .cloned()
            .collect()
    }
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn gateway_loop(listener: TcpListener, state: Arc<State>, shutdown: CancellationToken) {
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        tokio::spawn(serve_gateway(stream, state.clone(), shutdown.clone()));
    }
}

async fn serve_gateway(stream: TcpStream, state: Arc<State>, shutdown: CancellationToken) {
    let (mut path, mut query) = (String::new(), String::new());
    // tungstenite's callback signature fixes the error type.
    #[allow(clippy::result_large_err)]
    let capture =
        |request: &WsRequest, response: WsResponse| -> Result<WsResponse, ErrorResponse> {
            path = request.uri().path().to_string();
            query = request.uri().query().unwrap_or("").to_string();
            Ok(response)
        };
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(stream, capture).await else {
        return;
    };
    let (sender, mut commands) = mpsc::unbounded_channel();
    let mut connection = ConnectionState::default();
    let asked_version = query_value(&query, "v");
    let asked_encoding = query_value(&query, "encoding");
    let (index, interval) = {
        let mut inner = state.inner.lock().expect("fake state");
        inner.connections.push(GatewayConnection {
            path,
            query,
            ..GatewayConnection::default()
        });
        let index = inner.connections.len() - 1;
        inner.live = Some((index, sender.clone()));
        inner.zombie = false;
        (index, inner.hello_interval_ms)
    };
    if asked_version.as_deref() != Some("10")
        || asked_encoding.as_deref().unwrap_or("json") != "json"
    {
        let code = if asked_version.as_deref() != Some("10") {
            4012
        } else {
            4002
        };
        let frame = CloseFrame {
            code: CloseCode::from(code),
            reason: close_reason(code).into(),
        };
        let _ = ws.close(Some(frame)).await;
        return;
    }
    let hello = json!({"op": 10, "d": {"heartbeat_interval": interval}}).to_string();
    if ws.send(Message::text(hello)).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            command = commands.recv() => match command {
                Some(Command::Send(frame)) => {
                    if ws.send(Message::text(frame)).await.is_err() { return; }
                }
                Some(Command::Close(code)) => {
                    let frame = CloseFrame { code: CloseCode::from(code), reason: close_reason(code).into() };
                    let _ = ws.close(Some(frame)).await;
                    return;
                }
                None => return,
            },
            message = ws.next() => match message {
                Some(Ok(Message::Text(text))) => {
                    let frame: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
                    let replies = on_client_frame(&state, index, &mut connection, frame, &sender);
                    for reply in replies {
                        if ws.send(Message::text(reply)).await.is_err() { return; }
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    let mut inner = state.inner.lock().expect("fake state");
                    inner.connections[index].client_close = frame.map(|f| u16::from(f.code));
                    return;
                }
                Some(Ok(_)) => {}
                _ => return,
            },
        }
    }
}

/// Records a client frame and returns the fake's answers to it.
fn on_client_frame(
    state: &State,
    index: usize,
    connection: &mut ConnectionState,
    frame: Value,
    sender: &mpsc::UnboundedSender<Command>,
) -> Vec<String> {
    let mut inner = state.inner.lock().expect("fake state");
    inner.connections[index].frames.push(frame.clone());
    let zombie = inner.zombie && inner.live.as_ref().is_some_and(|(i, _)| *i == index);
    if let Err(code) = check_client_frame(connection, &frame) {
        eprintln!("fake discord: closing {code} over op {}", frame["op"]);
        let _ = sender.send(Command::Close(code));
        return Vec::new();
    }
    match frame["op"].as_u64() {
        Some(1) if !zombie => vec![json!({"op": 11}).to_string()],
        Some(2) => {
            connection.identified = true;
            if let Some(code) = inner.close_on_identify.take() {
                let _ = sender.send(Command::Close(code));
                return Vec::new();
            }
            inner.sessions_started += 1;
            let session_id = format!("session-{}", inner.sessions_started);
            inner.session = Session {
                id: session_id.clone(),
                seq: 1,
                history: Vec::new(),
            };
            let resume_url = format!(
                "ws://{}/resume",
                state
                    .gateway_addr
                    .lock()
                    .expect("addr")
                    .expect("gateway bound")
            );
            let ready = json!({"op": 0, "t": "READY", "s": 1, "d": {
                "v": 10, "session_id": session_id, "resume_gateway_url": resume_url,
                "user": {"id": BOT_USER_ID, "username": BOT_USERNAME, "bot": true},
                "guilds": [], "application": {"id": BOT_USER_ID}
            }});
            vec![ready.to_string()]
        }
        Some(6) => {
            let d = &frame["d"];
            if d["session_id"] != inner.session.id.as_str() || d["token"] != TOKEN {
                return vec![json!({"op": 9, "d": false}).to_string()];
            }
            connection.identified = true;
            let after = d["seq"].as_u64().unwrap_or(0);
            let mut replies: Vec<String> = inner
                .session
                .history
                .iter()
                .filter(|(seq, _)| *seq > after)
                .map(|(_, frame)| frame.clone())
                .collect();
            inner.session.seq += 1;
            let seq = inner.session.seq;
            replies.push(json!({"op": 0, "t": "RESUMED", "s": seq, "d": null}).to_string());
            replies
        }
        _ => Vec::new(),
    }
}

/// The gateway's checks of one client frame: `Err(close code)` when Discord
/// would close the connection over it.
fn check_client_frame(connection: &ConnectionState, frame: &Value) -> Result<(), u16> {
    let Some(op) = frame.get("op").and_then(Value::as_u64) else {
        return Err(4002);
    };
    let d = &frame["d"];
    match op {
        1 => Ok(()),
        2 | 6 if connection.identified => Err(4005),
        2 => {
            if d["token"].as_str() != Some(TOKEN) {
                return Err(4004);
            }
            if d["intents"].as_u64().is_none() {
                return Err(4013);
            }
            let properties = &d["properties"];
            let named = ["os", "browser", "device"]
                .iter()
                .all(|key| properties[*key].is_string());
            if named {
                Ok(())
            } else {
                Err(4002)
            }
        }
        6 => {
            let fields = d["token"].is_string() && d["session_id"].is_string();
            if !fields || !(d["seq"].is_u64() || d["seq"].is_null()) {
                return Err(4002);
            }
            Ok(())
        }
        3 | 4 | 8 if !connection.identified => Err(4003),
        3 | 4 | 8 => Ok(()),
        _ => Err(4001),
    }
}

/// The first value of `key` in a query string.
fn query_value(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| v.to_string())
    })
}

async fn rest_loop(listener: TcpListener, state: Arc<State>, shutdown: CancellationToken) {
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
            let service = service_fn(|request| rest_handle(state.clone(), request));
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = connection => {}
            }
        });
    }
}

async fn rest_handle(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    if let Some(file) = path.strip_prefix("/attachments/") {
        return Ok(serve_file(&state, file.rsplit('/').next().unwrap_or("")));
    }
    let headers: BTreeMap<String, String> = request
        .headers()
        .iter()
        .map(|(n, v)| {
            (
                n.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let bytes = request
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let content_type = headers.get("content-type").cloned().unwrap_or_default();
    let length_ok = headers
        .get("content-length")
        .is_none_or(|l| l.parse::<usize>().ok() == Some(bytes.len()));
    let (body, body_ok, files) = match multipart_form::boundary(&content_type) {
        Some(boundary) => match multipart_message(&bytes, &boundary) {
            Ok((body, files)) => (body, length_ok, files),
            Err(refusal) => {
                eprintln!("fake discord: refused {method} {path}: {}", refusal.body);
                return Ok(respond(refusal));
            }
        },
        None => {
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let ok = bytes.is_empty()
                || (content_type.starts_with("application/json") && !body.is_null());
            (body, ok && length_ok, Vec::new())
        }
    };
    let recorded = RestRequest {
        method,
        path,
        headers,
        body,
        files,
        at: std::time::Instant::now(),
    };
    let reply = {
        let mut inner = state.inner.lock().expect("fake state");
        inner.rest.push(recorded.clone());
        let checked = check_rest(&inner, &recorded, body_ok).err();
        if let Some(refusal) = checked {
            drop(inner);
            eprintln!(
                "fake discord: refused {} {}: {}",
                recorded.method, recorded.path, refusal.body
            );
            return Ok(respond(refusal));
        }
        let targeted = inner.scripted_on.iter().position(|(method, suffix, _)| {
            *method == recorded.method && recorded.path.ends_with(suffix.as_str())
        });
        let targeted = targeted.map(|at| inner.scripted_on.remove(at).2);
        match targeted.or_else(|| inner.scripted.pop_front()) {
            Some(reply) => reply,
            None => route(&mut inner, &state, &recorded),
        }
    };
    Ok(respond(reply))
}

/// A multipart message: `payload_json` as the body (with `files` listing the
/// file parts' names, as Discord counts them for "empty message"), each
/// `files[n]` part checked against `attachments` and the size cap.
#[allow(clippy::type_complexity)]
fn multipart_message(
    raw: &[u8],
    boundary: &str,
) -> Result<(Value, Vec<(String, String, String, Vec<u8>)>), RestReply> {
    let invalid_json = || {
        reply(
            400,
            json!({"message": "The request body contains invalid JSON.", "code": 50109}),
        )
    };
    let parts = multipart_form::parts(raw, boundary).map_err(|message| {
        reply(
            400,
            json!({"message": format!("Malformed multipart body: {message}"), "code": 0}),
        )
    })?;
    let mut body = Value::Null;
    let mut files = Vec::new();
    for part in parts {
        match (part.name.as_str(), part.file_name) {
            ("payload_json", _) => {
                body = serde_json::from_slice(&part.body).map_err(|_| invalid_json())?;
            }
            (name, Some(file_name)) if name.starts_with("files[") && name.ends_with(']') => {
                if part.body.len() > MAX_ATTACHMENT_BYTES {
                    return Err(reply(
                        413,
                        json!({"message": "Request entity too large", "code": 40005}),
                    ));
                }
                files.push((name.to_string(), file_name, part.content_type, part.body));
            }
            (name, _) => {
                return Err(reply(
                    400,
                    json!({"message": "Invalid Form Body", "code": 50035, "errors": {name: {"_errors": [
                        {"code": "UNKNOWN_FIELD", "message": "Unknown field"}]}}}),
                ))
            }
        }
    }
    if !body.is_object() {
        return Err(invalid_json());
    }
    let attachments = body["attachments"].as_array().cloned().unwrap_or_default();
    for (name, file_name, _, _) in &files {
        let index = &name["files[".len()..name.len() - 1];
        let named = attachments.iter().any(|a| {
            a["id"].to_string().trim_matches('"') == index
                && a["filename"].as_str().is_none_or(|f| f == file_name)
        });
        if !named {
            return Err(reply(
                400,
                json!({"message": "Invalid Form Body", "code": 50035, "errors": {"attachments": {"_errors": [
                    {"code": "ATTACHMENT_NOT_FOUND", "message": format!("No attachment entry for {name}")}]}}}),
            ));
        }
    }
    body["files"] = json!(files.iter().map(|f| f.1.clone()).collect::<Vec<_>>());
    Ok((body, files))
}

fn respond(reply: RestReply) -> Response<Full<Bytes>> {
    let mut builder = Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let body = if reply.body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(reply.body.to_string())
    };
    if !body.is_empty() {
        builder = builder.header("content-type", "application/json");
    }
    builder.body(Full::new(body)).expect("valid response")
}

/// A CDN download: the file's bytes with its content type, or 404.
fn serve_file(state: &State, name: &str) -> Response<Full<Bytes>> {
    let mut inner = state.inner.lock().expect("fake state");
    *inner.file_fetches.entry(name.to_string()).or_default() += 1;
    match inner.files.get(name) {
        Some((bytes, content_type)) => Response::builder()
            .status(200)
            .header("content-type", content_type.as_str())
            .header("content-length", bytes.len())
            .body(Full::new(Bytes::from(bytes.clone())))
            .expect("valid response"),
        None => Response::builder()
            .status(404)
            .body(Full::new(Bytes::new()))
            .expect("valid response"),
    }
}

fn reply(status: u16, body: Value) -> RestReply {
    RestReply {
        status,
        headers: Vec::new(),
        body,
    }
}

/// Discord's checks of a REST request, made before any scripted answer:
/// the token, a JSON body that parses, then the body of a message create or edit, then that the
/// message an edit, delete or reaction names exists.
fn check_rest(inner: &Inner, request: &RestRequest, body_ok: bool) -> Result<(), RestReply> {
    if request.headers.get("authorization").map(String::as_str) != Some(&format!("Bot {TOKEN}")) {
        return Err(reply(
            401,
            json!({"message": "401: Unauthorized", "code": 0}),
        ));
    }
    if !body_ok {
        return Err(reply(
            400,
            json!({"message": "The request body contains invalid JSON.", "code": 50109}),
        ));
    }
    let path = request.path.strip_prefix("/api/v10/").unwrap_or("");
    let parts: Vec<&str> = path.split('/').collect();
    let body = &request.body;
    let too_long = || {
        body["content"]
            .as_str()
            .is_some_and(|c| c.chars().count() > MAX_CONTENT_CHARS)
    };
    let invalid_form = || {
        reply(
            400,
            json!({"message": "Invalid Form Body", "code": 50035, "errors": {"content": {"_errors": [
                {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}}}),
        )
    };
    let unknown_message = || reply(404, json!({"message": "Unknown Message", "code": 10008}));
    let exists = |channel: &str, id: &str| {
        inner
            .messages
            .contains(&(channel.to_string(), id.to_string()))
    };
    match (request.method.as_str(), parts.as_slice()) {
        ("POST", ["channels", _, "messages"]) => {
            let filled = |key: &str| match &body[key] {
                Value::String(text) => !text.is_empty(),
                Value::Array(items) => !items.is_empty(),
                Value::Object(_) => true,
                _ => false,
            };
            let any = [
                "content",
                "embeds",
                "sticker_ids",
                "components",
                "files",
                "poll",
            ]
            .iter()
            .any(|key| filled(key));
            if !any {
                return Err(reply(
                    400,
                    json!({"message": "Cannot send an empty message", "code": 50006}),
                ));
            }
            if too_long() {
                return Err(invalid_form());
            }
        }
        ("PATCH", ["channels", channel, "messages", id]) => {
            if too_long() {
                return Err(invalid_form());
            }
            if !exists(channel, id) {
                return Err(unknown_message());
            }
        }
        ("DELETE", ["channels", channel, "messages", id])
        | ("PUT", ["channels", channel, "messages", id, "reactions", _, "@me"])
            if !exists(channel, id) =>
        {
            return Err(unknown_message());
        }
        ("PUT", ["channels", _, "messages", _, "reactions", "", "@me"]) => {
            return Err(reply(
                400,
                json!({"message": "Unknown Emoji", "code": 10014}),
            ));
        }
        ("POST", ["users", "@me", "channels"]) if !body["recipient_id"].is_string() => {
            return Err(reply(
                400,
                json!({"message": "Invalid Form Body", "code": 50035, "errors": {"recipient_id": {"_errors": [
                    {"code": "BASE_TYPE_REQUIRED", "message": "This field is required"}]}}}),
            ));
        }
        _ => {}
    }
    Ok(())
}

/// Discord's REST routes as the adapter uses them (the request passed
/// [`check_rest`]).
fn route(inner: &mut Inner, state: &State, request: &RestRequest) -> RestReply {
    let Some(path) = request.path.strip_prefix("/api/v10/") else {
        return reply(404, json!({"message": "404: Not Found", "code": 0}));
    };
    let parts: Vec<&str> = path.split('/').collect();
    match (request.method.as_str(), parts.as_slice()) {
        ("GET", ["gateway", "bot"]) => {
            let url = format!(
                "ws://{}",
                state.gateway_addr.lock().expect("addr").expect("bound")
            );
            reply(
                200,
                json!({"url": url, "shards": 1,
                "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}}),
            )
        }
        ("POST", ["channels", channel, "messages"]) => {
            inner.next_message_id += 1;
            let id = inner.next_message_id.to_string();
            inner.messages.insert((channel.to_string(), id));
            reply(
                200,
                json!({"id": inner.next_message_id.to_string(), "channel_id": channel,
                "content": request.body["content"], "author": {"id": BOT_USER_ID, "username": BOT_USERNAME}}),
            )
        }
        ("PATCH", ["channels", channel, "messages", id]) => reply(
            200,
            json!({"id": id, "channel_id": channel, "content": request.body["content"]}),
        ),
        ("DELETE", ["channels", channel, "messages", id]) => {
            inner
                .messages
                .remove(&(channel.to_string(), id.to_string()));
            reply(204, Value::Null)
        }
        ("POST", ["channels", _, "typing"])
        | ("PUT", ["channels", _, "messages", _, "reactions", _, "@me"]) => reply(204, Value::Null),
        ("GET", ["channels", id]) => match inner.channels.get(*id) {
            Some(channel) => reply(200, channel.clone()),
            None => reply(404, json!({"message": "Unknown Channel", "code": 10003})),
        },
        ("POST", ["users", "@me", "channels"]) => {
            let recipient = request.body["recipient_id"].as_str().unwrap_or("");
            reply(200, json!({"id": format!("dm-{recipient}"), "type": 1}))
        }
        _ => reply(404, json!({"message": "404: Not Found", "code": 0})),
    }
}
