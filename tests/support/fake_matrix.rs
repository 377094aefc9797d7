//! A fake Matrix homeserver on 127.0.0.1 speaking the client-server API
//! (`/_matrix/client/v3`) as Synapse does for the calls pincer makes:
//! `account/whoami`, `profile/{user}/displayname`, `user/{user}/account_data/{type}`
//! (GET/PUT), `sync` (inline JSON filter, `since`, long poll up to `timeout`,
//! `next_batch`, rooms `join`/`invite`, timeline `limited`, state, summary,
//! account data), `rooms/{room}/send/{type}/{txn}` (idempotent per
//! transaction id), `rooms/{room}/typing/{user}`, `rooms/{room}/read_markers`,
//! `rooms/{room}/joined_members`, `rooms/{room}/state/{type}/{key}`,
//! `rooms/{room}/redact/{event}/{txn}`, `join/{room}`, `directory/room/{alias}`
//! and `createRoom`. Errors carry Matrix's `{"errcode", "error"}` shape with
//! Synapse's status codes.
//!
//! It checks requests before any scripted answer, as the real server does:
//! the access token (`Authorization: Bearer` or `access_token`; none →
//! 401 `M_MISSING_TOKEN`, a wrong one → 401 `M_UNKNOWN_TOKEN`), a JSON object
//! body where one is needed (`M_NOT_JSON`), membership of the room
//! (403 `M_FORBIDDEN`), a `since` token it gave out and a filter that parses
//! (400 `M_INVALID_PARAM`), `msgtype` and `body` of an `m.room.message`
//! (400 `M_BAD_JSON`), events over 65,536 bytes (413 `M_TOO_LARGE`), typing
//! and account data for the token's own user only. Scripted `/sync` answers
//! (any status and raw body, for malformed-body tests) come after the
//! checks. Every request is recorded with its decoded path and query.
//!
//! The homeserver's name is `localhost`; the bot is [`BOT_USER_ID`] with
//! [`ACCESS_TOKEN`]. Tests include it with
//! `#[path = "support/fake_matrix.rs"] mod fake_matrix;`.
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub const SERVER_NAME: &str = "localhost";
pub const BOT_USER_ID: &str = "@pincer:localhost";
pub const BOT_DISPLAY_NAME: &str = "Pincer";
pub const ACCESS_TOKEN: &str = "syt_cGluY2Vy_fakeAccessToken_0001";
pub const DEVICE_ID: &str = "PINCERDEV";
/// The bot's password (`POST /login` with `m.login.password`).
pub const BOT_PASSWORD: &str = "correct horse battery staple";
/// Synapse's limit on one event's JSON.
pub const MAX_EVENT_BYTES: usize = 65_536;
/// The longest long poll the fake grants (Synapse caps none; this keeps a
/// forgotten client from holding a test).
const MAX_SYNC_WAIT_MS: u64 = 30_000;

/// A request as the fake received it.
#[derive(Debug, Clone)]
pub struct MatrixRequest {
    pub method: String,
    /// Decoded path below `/_matrix/client/v3` (or the full path elsewhere).
    pub path: String,
    pub query: BTreeMap<String, String>,
    pub authorization: String,
    pub body: Value,
}

/// An event the bot sent (`PUT …/send/{type}/{txn}`).
#[derive(Debug, Clone)]
pub struct SentEvent {
    pub room_id: String,
    pub event_type: String,
    pub event_id: String,
    pub content: Value,
}

/// A scripted `/sync` answer: status and raw body, sent as is.
#[derive(Debug, Clone)]
pub struct RawAnswer {
    pub status: u16,
    pub body: Vec<u8>,
}

struct Room {
    name: Option<String>,
    alias: Option<String>,
    joined: Vec<String>,
    invited: Vec<String>,
    encrypted: bool,
    /// The stream position the bot's invite arrived at.
    invited_at: Option<u64>,
    /// The invite is flagged `is_direct` (a DM invite).
    direct_invite: bool,
}

struct TimelineEntry {
    pos: u64,
    room_id: String,
    event: Value,
}

#[derive(Default)]
struct Inner {
    rooms: BTreeMap<String, Room>,
    timeline: Vec<TimelineEntry>,
    pos: u64,
    next_event: u64,
    account_data: BTreeMap<String, (u64, Value)>,
    requests: Vec<MatrixRequest>,
    sent: Vec<SentEvent>,
    txns: BTreeMap<String, String>,
    typing: Vec<(String, bool)>,
    read_markers: Vec<(String, Value)>,
    scripted_sync: VecDeque<RawAnswer>,
    /// `next_batch` tokens handed out, in order.
    batches: Vec<String>,
    /// Successful password logins.
    logins: usize,
}

struct State {
    inner: Mutex<Inner>,
    position: watch::Sender<u64>,
}

/// The running fake; stops when dropped.
pub struct FakeMatrix {
    pub addr: SocketAddr,
    state: Arc<State>,
    shutdown: CancellationToken,
}

fn error(status: u16, errcode: &str, message: &str) -> (u16, Value) {
    (status, json!({ "errcode": errcode, "error": message }))
}

impl Inner {
    fn event_id(&mut self) -> String {
        self.next_event += 1;
        format!("$ev{}_{}", self.next_event, SERVER_NAME)
    }

    fn append(&mut self, room_id: &str, mut event: Value) -> (u64, String) {
        let event_id = match event["event_id"].as_str() {
            Some(id) => id.to_string(),
            None => {
                let id = self.event_id();
                event["event_id"] = json!(id);
                id
            }
        };
        if event.get("origin_server_ts").is_none() {
            event["origin_server_ts"] = json!(1_700_000_000_000u64 + self.next_event);
        }
        if event.get("unsigned").is_none() {
            event["unsigned"] = json!({ "age": 5 });
        }
        self.pos += 1;
        self.timeline.push(TimelineEntry {
            pos: self.pos,
            room_id: room_id.to_string(),
            event,
        });
        (self.pos, event_id)
    }

    fn member(&self, room_id: &str, user: &str) -> bool {
        self.rooms
            .get(room_id)
            .is_some_and(|room| room.joined.iter().any(|u| u == user))
    }

    fn state_events(&self, room_id: &str) -> Vec<Value> {
        let Some(room) = self.rooms.get(room_id) else {
            return Vec::new();
        };
        let creator = room.joined.first().cloned().unwrap_or_default();
        let mut events = vec![
            json!({"type": "m.room.create", "state_key": "", "sender": creator,
            "event_id": format!("$create_{room_id}"), "origin_server_ts": 1_600_000_000_000u64,
            "content": {"room_version": "10"}}),
        ];
        if let Some(name) = &room.name {
            events.push(
                json!({"type": "m.room.name", "state_key": "", "sender": creator,
                "event_id": format!("$name_{room_id}"), "origin_server_ts": 1_600_000_000_001u64,
                "content": {"name": name}}),
            );
        }
        if let Some(alias) = &room.alias {
            events.push(
                json!({"type": "m.room.canonical_alias", "state_key": "", "sender": creator,
                "event_id": format!("$alias_{room_id}"), "origin_server_ts": 1_600_000_000_002u64,
                "content": {"alias": alias}}),
            );
        }
        if room.encrypted {
            events.push(
                json!({"type": "m.room.encryption", "state_key": "", "sender": creator,
                "event_id": format!("$enc_{room_id}"), "origin_server_ts": 1_600_000_000_003u64,
                "content": {"algorithm": "m.megolm.v1.aes-sha2"}}),
            );
        }
        for user in &room.joined {
            events.push(json!({"type": "m.room.member", "state_key": user, "sender": user,
                "event_id": format!("$join_{user}_{room_id}"), "origin_server_ts": 1_600_000_000_004u64,
                "content": {"membership": "join"}}));
        }
        events
    }

    fn state_content(&self, room_id: &str, event_type: &str, key: &str) -> Option<Value> {
        self.state_events(room_id)
            .into_iter()
            .find(|e| e["type"] == event_type && e["state_key"] == key)
            .map(|e| e["content"].clone())
    }

    /// The sync answer from `since` (None: initial) with `limit` timeline
    /// events per room.
    fn sync_body(&mut self, since: Option<u64>, limit: usize) -> Value {
        let from = since.unwrap_or(0);
        let mut join = serde_json::Map::new();
        let joined: Vec<String> = self
            .rooms
            .iter()
            .filter(|(_, room)| room.joined.iter().any(|u| u == BOT_USER_ID))
            .map(|(id, _)| id.clone())
            .collect();
        for room_id in joined {
            let events: Vec<&TimelineEntry> = self
                .timeline
                .iter()
                .filter(|e| e.room_id == room_id && e.pos > from)
                .collect();
            if since.is_some() && events.is_empty() {
                continue;
            }
            let limited = events.len() > limit;
            let shown: Vec<Value> = events[events.len().saturating_sub(limit)..]
                .iter()
                .map(|e| e.event.clone())
                .collect();
            let room = &self.rooms[&room_id];
            let state = if since.is_none() {
                self.state_events(&room_id)
            } else {
                Vec::new()
            };
            join.insert(
                room_id.clone(),
                json!({
                    "summary": {
                        "m.joined_member_count": room.joined.len(),
                        "m.invited_member_count": room.invited.len(),
                        "m.heroes": room.joined.iter().filter(|u| *u != BOT_USER_ID).take(5).collect::<Vec<_>>(),
                    },
                    "state": { "events": state },
                    "timeline": { "events": shown, "limited": limited, "prev_batch": format!("p{from}") },
                    "ephemeral": { "events": [] },
                    "account_data": { "events": [] },
                    "unread_notifications": { "highlight_count": 0, "notification_count": 0 },
                }),
            );
        }
        let mut invite = serde_json::Map::new();
        for (room_id, room) in &self.rooms {
            let Some(at) = room.invited_at else { continue };
            if at <= from && since.is_some() {
                continue;
            }
            if !room.invited.iter().any(|u| u == BOT_USER_ID) {
                continue;
            }
            let inviter = room.joined.first().cloned().unwrap_or_default();
            invite.insert(
                room_id.clone(),
                json!({"invite_state": {"events": [
                    {"type": "m.room.member", "state_key": BOT_USER_ID, "sender": inviter,
                     "content": {"membership": "invite", "is_direct": room.direct_invite}},
                ]}}),
            );
        }
        let account_data: Vec<Value> = self
            .account_data
            .iter()
            .filter(|(_, (at, _))| since.is_none() || *at > from)
            .map(|(kind, (_, content))| json!({ "type": kind, "content": content }))
            .collect();
        let next = format!("s{}", self.pos);
        self.batches.push(next.clone());
        json!({
            "next_batch": next,
            "rooms": { "join": join, "invite": invite, "leave": {} },
            "account_data": { "events": account_data },
            "presence": { "events": [] },
            "to_device": { "events": [] },
            "device_lists": { "changed": [], "left": [] },
            "device_one_time_keys_count": {},
        })
    }
}

impl FakeMatrix {
    pub async fn start() -> FakeMatrix {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fake homeserver on loopback");
        let addr = listener.local_addr().expect("address");
        let (position, _) = watch::channel(0);
        let state = Arc::new(State {
            inner: Mutex::new(Inner::default()),
            position,
        });
        let shutdown = CancellationToken::new();
        tokio::spawn(serve(listener, state.clone(), shutdown.clone()));
        FakeMatrix {
            addr,
            state,
            shutdown,
        }
    }

    /// The `homeserver` URL of this fake.
    pub fn homeserver(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.state.inner.lock().expect("fake state")
    }

    fn advanced(&self, pos: u64) {
        self.state.position.send_replace(pos);
    }

    /// A room the bot has joined, with these other members.
    pub fn add_room(&self, room_id: &str, name: Option<&str>, members: &[&str]) {
        let mut joined = vec![BOT_USER_ID.to_string()];
        joined.extend(members.iter().map(|m| m.to_string()));
        self.inner().rooms.insert(
            room_id.to_string(),
            Room {
                name: name.map(str::to_string),
                alias: None,
                joined,
                invited: Vec::new(),
                encrypted: false,
                invited_at: None,
                direct_invite: false,
            },
        );
    }

    /// A room `inviter` is in that the bot is invited to (not joined);
    /// `direct`: the invite is flagged `is_direct`, as a DM client sends it.
    pub fn invite_bot(&self, room_id: &str, inviter: &str, direct: bool) {
        let mut inner = self.inner();
        inner.pos += 1;
        let pos = inner.pos;
        inner.rooms.insert(
            room_id.to_string(),
            Room {
                name: None,
                alias: None,
                joined: vec![inviter.to_string()],
                invited: vec![BOT_USER_ID.to_string()],
                encrypted: false,
                invited_at: Some(pos),
                direct_invite: direct,
            },
        );
        drop(inner);
        self.advanced(pos);
    }

    /// The bot's `m.direct` account data (user id → room ids), if any.
    pub fn direct(&self) -> Option<Value> {
        self.inner()
            .account_data
            .get("m.direct")
            .map(|(_, c)| c.clone())
    }

    /// Rooms the bot asked to join (`POST /join/{room}`), in order.
    pub fn joins(&self) -> Vec<String> {
        self.requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.starts_with("/join/"))
            .map(|r| r.path["/join/".len()..].to_string())
            .collect()
    }

    /// A direct room between the bot and `user`, listed in the bot's `m.direct`.
    pub fn add_direct_room(&self, room_id: &str, user: &str) {
        self.add_room(room_id, None, &[user]);
        let mut inner = self.inner();
        let mut direct = inner
            .account_data
            .get("m.direct")
            .map(|(_, c)| c.clone())
            .unwrap_or_else(|| json!({}));
        direct[user] = json!([room_id]);
        inner.pos += 1;
        let pos = inner.pos;
        inner.account_data.insert("m.direct".into(), (pos, direct));
        drop(inner);
        self.advanced(pos);
    }

    /// Posts an `m.room.message` `m.text` from `sender`; returns its event id.
    pub fn post_text(&self, room_id: &str, sender: &str, body: &str) -> String {
        self.post_content(room_id, sender, json!({"msgtype": "m.text", "body": body}))
    }

    /// Posts an `m.room.message` with this content.
    pub fn post_content(&self, room_id: &str, sender: &str, content: Value) -> String {
        self.post_event(
            room_id,
            json!({"type": "m.room.message", "sender": sender, "content": content}),
        )
    }

    /// Appends any event to the room's timeline; returns its event id.
    pub fn post_event(&self, room_id: &str, event: Value) -> String {
        let (pos, id) = self.inner().append(room_id, event);
        self.advanced(pos);
        id
    }

    /// The next `/sync` (after the request checks) gets this answer.
    pub fn script_sync(&self, status: u16, body: impl Into<Vec<u8>>) {
        self.inner().scripted_sync.push_back(RawAnswer {
            status,
            body: body.into(),
        });
    }

    /// Scripted `/sync` answers not yet used.
    pub fn scripted_left(&self) -> usize {
        self.inner().scripted_sync.len()
    }

    pub fn requests(&self) -> Vec<MatrixRequest> {
        self.inner().requests.clone()
    }

    /// The `since` of every `/sync` so far (`None`: an initial sync).
    pub fn sync_sinces(&self) -> Vec<Option<String>> {
        self.requests()
            .iter()
            .filter(|r| r.path == "/sync")
            .map(|r| r.query.get("since").cloned())
            .collect()
    }

    /// The `next_batch` tokens handed out so far.
    pub fn batches(&self) -> Vec<String> {
        self.inner().batches.clone()
    }

    /// Successful password logins so far.
    pub fn logins(&self) -> usize {
        self.inner().logins
    }

    /// The bot's `m.room.message` events, oldest first.
    pub fn sent_messages(&self) -> Vec<SentEvent> {
        self.inner()
            .sent
            .iter()
            .filter(|s| s.event_type == "m.room.message")
            .cloned()
            .collect()
    }

    /// The bot's messages in one room.
    pub fn sent_to(&self, room_id: &str) -> Vec<SentEvent> {
        self.sent_messages()
            .into_iter()
            .filter(|s| s.room_id == room_id)
            .collect()
    }

    /// Typing notices (room, typing) in order.
    pub fn typing(&self) -> Vec<(String, bool)> {
        self.inner().typing.clone()
    }

    /// Read markers (room, body) in order.
    pub fn read_markers(&self) -> Vec<(String, Value)> {
        self.inner().read_markers.clone()
    }
}

impl Drop for FakeMatrix {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn serve(listener: TcpListener, state: Arc<State>, shutdown: CancellationToken) {
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
            let service = service_fn(|request| handle(state.clone(), request));
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = connection => {}
            }
        });
    }
}

/// `%XX` decoding of a path segment or query value (`+` is a space in a query).
pub fn percent_decode(text: &str, plus_is_space: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' if plus_is_space => out.push(b' '),
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn respond(status: u16, body: Vec<u8>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("valid response")
}

async fn handle(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = request.method().to_string();
    let raw_path = request.uri().path().to_string();
    let query: BTreeMap<String, String> = request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect();
    let authorization = request
        .headers()
        .get("authorization")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let bytes = request
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let body: Option<Value> = if bytes.is_empty() {
        None
    } else {
        serde_json::from_slice(&bytes).ok()
    };
    let segments: Vec<String> = raw_path
        .strip_prefix("/_matrix/client/v3")
        .unwrap_or(&raw_path)
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_decode(s, false))
        .collect();
    let path = format!("/{}", segments.join("/"));
    let recorded = MatrixRequest {
        method: method.clone(),
        path: path.clone(),
        query: query.clone(),
        authorization: authorization.clone(),
        body: body.clone().unwrap_or(Value::Null),
    };
    state
        .inner
        .lock()
        .expect("fake state")
        .requests
        .push(recorded);
    if raw_path == "/_matrix/client/versions" {
        return Ok(respond(
            200,
            json!({"versions": ["v1.10", "v1.11"]})
                .to_string()
                .into_bytes(),
        ));
    }
    if !raw_path.starts_with("/_matrix/client/v3/") {
        let (status, body) = error(404, "M_UNRECOGNIZED", "Unrecognized request");
        return Ok(respond(status, body.to_string().into_bytes()));
    }
    if method == "POST" && raw_path == "/_matrix/client/v3/login" {
        let (status, answer) = login(&state, body.as_ref());
        return Ok(respond(status, answer.to_string().into_bytes()));
    }
    let token = authorization
        .strip_prefix("Bearer ")
        .map(str::to_string)
        .or_else(|| query.get("access_token").cloned());
    let refused = match token.as_deref() {
        None => Some(error(401, "M_MISSING_TOKEN", "Missing access token")),
        Some(ACCESS_TOKEN) => None,
        Some(_) => Some(error(
            401,
            "M_UNKNOWN_TOKEN",
            "Invalid access token passed.",
        )),
    };
    if let Some((status, body)) = refused {
        return Ok(respond(status, body.to_string().into_bytes()));
    }
    let needs_body = matches!(method.as_str(), "PUT" | "POST");
    if needs_body && !bytes.is_empty() && !body.as_ref().is_some_and(Value::is_object) {
        let (status, body) = error(400, "M_NOT_JSON", "Content not JSON.");
        return Ok(respond(status, body.to_string().into_bytes()));
    }
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    if method == "GET" && segs == ["sync"] {
        return Ok(sync(&state, &query).await);
    }
    let body = body.unwrap_or_else(|| json!({}));
    let (status, answer) = route(&state, &method, &segs, &body, bytes.len());
    Ok(respond(status, answer.to_string().into_bytes()))
}

/// `POST /login`: `m.login.password` with an `m.id.user` identifier (the
/// full user id or its localpart) or the deprecated top-level `user`.
fn login(state: &State, body: Option<&Value>) -> (u16, Value) {
    let Some(body) = body.filter(|b| b.is_object()) else {
        return error(400, "M_NOT_JSON", "Content not JSON.");
    };
    if body["type"] != "m.login.password" {
        return error(400, "M_UNKNOWN", "Unknown login type");
    }
    let user = match body["identifier"]["type"].as_str() {
        Some("m.id.user") => body["identifier"]["user"].as_str(),
        Some(_) => return error(400, "M_UNKNOWN", "Unknown login identifier type"),
        None => body["user"].as_str(),
    };
    let Some(user) = user else {
        return error(
            400,
            "M_MISSING_PARAM",
            "User identifier is missing 'user' key",
        );
    };
    let full = if user.starts_with('@') {
        user.to_string()
    } else {
        format!("@{user}:{SERVER_NAME}")
    };
    if full != BOT_USER_ID || body["password"] != BOT_PASSWORD {
        return error(403, "M_FORBIDDEN", "Invalid username or password");
    }
    state.inner.lock().expect("fake state").logins += 1;
    let device = body["device_id"].as_str().unwrap_or(DEVICE_ID);
    (
        200,
        json!({"user_id": BOT_USER_ID, "access_token": ACCESS_TOKEN, "device_id": device,
               "home_server": SERVER_NAME}),
    )
}

async fn sync(state: &State, query: &BTreeMap<String, String>) -> Response<Full<Bytes>> {
    let bad = |message: &str| {
        let (status, body) = error(400, "M_INVALID_PARAM", message);
        respond(status, body.to_string().into_bytes())
    };
    let limit = match query.get("filter") {
        None => 10,
        Some(filter) => match serde_json::from_str::<Value>(filter) {
            Ok(filter) if filter.is_object() => {
                filter["room"]["timeline"]["limit"].as_u64().unwrap_or(10) as usize
            }
            _ => return bad("Invalid filter: not a JSON object or filter id"),
        },
    };
    let timeout_ms = match query.get("timeout").map(|t| t.parse::<u64>()) {
        None => 0,
        Some(Ok(ms)) => ms.min(MAX_SYNC_WAIT_MS),
        Some(Err(_)) => return bad("Query parameter \"timeout\" must be an integer"),
    };
    let since = match query.get("since") {
        None => None,
        Some(token) => {
            let pos = token.strip_prefix('s').and_then(|n| n.parse::<u64>().ok());
            let current = state.inner.lock().expect("fake state").pos;
            match pos {
                Some(pos) if pos <= current => Some(pos),
                _ => return bad("Invalid stream token"),
            }
        }
    };
    if let Some(answer) = state
        .inner
        .lock()
        .expect("fake state")
        .scripted_sync
        .pop_front()
    {
        return respond(answer.status, answer.body);
    }
    if let Some(since) = since {
        let mut position = state.position.subscribe();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
        while *position.borrow_and_update() <= since {
            match tokio::time::timeout_at(deadline, position.changed()).await {
                Ok(Ok(())) => {}
                _ => break,
            }
        }
    }
    let body = state
        .inner
        .lock()
        .expect("fake state")
        .sync_body(since, limit);
    respond(200, body.to_string().into_bytes())
}

fn route(state: &State, method: &str, segs: &[&str], body: &Value, len: usize) -> (u16, Value) {
    let mut inner = state.inner.lock().expect("fake state");
    let not_member = |room: &str| {
        error(
            403,
            "M_FORBIDDEN",
            &format!("User {BOT_USER_ID} not in room {room}"),
        )
    };
    match (method, segs) {
        ("GET", ["account", "whoami"]) => (
            200,
            json!({"user_id": BOT_USER_ID, "device_id": DEVICE_ID, "is_guest": false}),
        ),
        ("GET", ["profile", user, "displayname"]) => {
            if *user == BOT_USER_ID {
                (200, json!({ "displayname": BOT_DISPLAY_NAME }))
            } else {
                error(404, "M_NOT_FOUND", "Profile was not found")
            }
        }
        (_, ["user", user, "account_data", kind]) => {
            if *user != BOT_USER_ID {
                return error(
                    403,
                    "M_FORBIDDEN",
                    "Cannot get account data for other users.",
                );
            }
            if method == "PUT" {
                inner.pos += 1;
                let pos = inner.pos;
                inner
                    .account_data
                    .insert(kind.to_string(), (pos, body.clone()));
                drop(inner);
                state.position.send_replace(pos);
                return (200, json!({}));
            }
            match inner.account_data.get(*kind) {
                Some((_, content)) => (200, content.clone()),
                None => error(404, "M_NOT_FOUND", "Account data not found"),
            }
        }
        ("PUT", ["rooms", room, "send", kind, txn]) => {
            if !inner.member(room, BOT_USER_ID) {
                return not_member(room);
            }
            if len > MAX_EVENT_BYTES {
                return error(413, "M_TOO_LARGE", "event too large");
            }
            if *kind == "m.room.message"
                && (!body["msgtype"].is_string() || !body["body"].is_string())
            {
                return error(
                    400,
                    "M_BAD_JSON",
                    "m.room.message needs a string msgtype and body",
                );
            }
            let txn_key = format!("{ACCESS_TOKEN}/{txn}");
            if let Some(id) = inner.txns.get(&txn_key) {
                return (200, json!({ "event_id": id }));
            }
            let event = json!({"type": kind, "sender": BOT_USER_ID, "content": body,
                "unsigned": {"transaction_id": txn}});
            let (pos, event_id) = inner.append(room, event);
            inner.txns.insert(txn_key, event_id.clone());
            inner.sent.push(SentEvent {
                room_id: room.to_string(),
                event_type: kind.to_string(),
                event_id: event_id.clone(),
                content: body.clone(),
            });
            drop(inner);
            state.position.send_replace(pos);
            (200, json!({ "event_id": event_id }))
        }
        ("PUT", ["rooms", room, "redact", event_id, _txn]) => {
            if !inner.member(room, BOT_USER_ID) {
                return not_member(room);
            }
            let event = json!({"type": "m.room.redaction", "sender": BOT_USER_ID,
                "redacts": event_id, "content": {"redacts": event_id}});
            let (pos, id) = inner.append(room, event);
            drop(inner);
            state.position.send_replace(pos);
            (200, json!({ "event_id": id }))
        }
        ("PUT", ["rooms", room, "typing", user]) => {
            if *user != BOT_USER_ID {
                return error(403, "M_FORBIDDEN", "Cannot set another user's typing state");
            }
            if !inner.member(room, BOT_USER_ID) {
                return not_member(room);
            }
            let Some(typing) = body["typing"].as_bool() else {
                return error(400, "M_BAD_JSON", "Missing 'typing' key");
            };
            if typing && !body["timeout"].is_u64() {
                return error(400, "M_MISSING_PARAM", "Missing 'timeout' key");
            }
            inner.typing.push((room.to_string(), typing));
            (200, json!({}))
        }
        ("POST", ["rooms", room, "read_markers"]) => {
            if !inner.member(room, BOT_USER_ID) {
                return not_member(room);
            }
            let ids = ["m.fully_read", "m.read", "m.read.private"];
            if ids
                .iter()
                .any(|k| body.get(*k).is_some_and(|v| !v.is_string()))
            {
                return error(400, "M_INVALID_PARAM", "read marker must be an event id");
            }
            inner.read_markers.push((room.to_string(), body.clone()));
            (200, json!({}))
        }
        ("GET", ["rooms", room, "joined_members"]) => {
            if !inner.member(room, BOT_USER_ID) {
                return not_member(room);
            }
            let joined: serde_json::Map<String, Value> = inner.rooms[*room]
                .joined
                .iter()
                .map(|u| (u.clone(), json!({"display_name": null, "avatar_url": null})))
                .collect();
            (200, json!({ "joined": joined }))
        }
        ("GET", ["rooms", room, "state", kind, rest @ ..]) => {
            if !inner.member(room, BOT_USER_ID) {
                return not_member(room);
            }
            let key = rest.first().copied().unwrap_or("");
            match inner.state_content(room, kind, key) {
                Some(content) => (200, content),
                None => error(404, "M_NOT_FOUND", "Event not found."),
            }
        }
        ("POST", ["join", room]) => {
            let room_id = if room.starts_with('#') {
                inner
                    .rooms
                    .iter()
                    .find(|(_, r)| r.alias.as_deref() == Some(*room))
                    .map(|(id, _)| id.clone())
            } else {
                inner.rooms.contains_key(*room).then(|| room.to_string())
            };
            let Some(room_id) = room_id else {
                return error(404, "M_NOT_FOUND", "No known servers");
            };
            let entry = inner.rooms.get_mut(&room_id).expect("known room");
            entry.invited.retain(|u| u != BOT_USER_ID);
            if !entry.joined.iter().any(|u| u == BOT_USER_ID) {
                entry.joined.push(BOT_USER_ID.into());
            }
            (200, json!({ "room_id": room_id }))
        }
        ("GET", ["directory", "room", alias]) => {
            match inner
                .rooms
                .iter()
                .find(|(_, r)| r.alias.as_deref() == Some(*alias))
            {
                Some((id, _)) => (200, json!({"room_id": id, "servers": [SERVER_NAME]})),
                None => error(404, "M_NOT_FOUND", &format!("Room alias {alias} not found")),
            }
        }
        ("POST", ["createRoom"]) => {
            let invited: Vec<String> = body["invite"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
            if invited
                .iter()
                .any(|u| !(u.starts_with('@') && u.contains(':')))
            {
                return error(400, "M_INVALID_PARAM", "Invalid user id in invite");
            }
            let id = format!("!created{}:{SERVER_NAME}", inner.rooms.len() + 1);
            inner.rooms.insert(
                id.clone(),
                Room {
                    name: body["name"].as_str().map(str::to_string),
                    alias: None,
                    joined: vec![BOT_USER_ID.into()],
                    invited,
                    encrypted: false,
                    invited_at: None,
                    direct_invite: body["is_direct"] == true,
                },
            );
            (200, json!({ "room_id": id }))
        }
        _ => error(404, "M_UNRECOGNIZED", "Unrecognized request"),
    }
}
