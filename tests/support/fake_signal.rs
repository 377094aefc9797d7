//! A fake signal-cli HTTP daemon (`signal-cli -a ACCOUNT daemon --http`)
//! on 127.0.0.1, speaking the wire of signal-cli's `HttpServerHandler` and
//! its JSON-RPC command handler for what pincer calls:
//! - `POST /api/v1/rpc`: only POST (405), only `Content-Type:
//!   application/json…` (415); a JSON-RPC 2.0 request answered 200 with
//!   `{"jsonrpc":"2.0","result"|"error","id"}`, a notification (no id)
//!   with 201 and no body. Errors carry signal-cli's codes: -32700 parse
//!   error, -32600 not a 2.0 request, -32601 "Method not implemented",
//!   -32602 "Specified account does not exist" (an `account` param that is
//!   not the daemon's) or a param of the wrong type, -1 user errors ("No
//!   recipients given", "No message given", an invalid number, an unknown
//!   group).
//! - methods `send` (`recipient`: a string or list of numbers / UUIDs,
//!   `groupId`, `message`, `attachments`: each a file path the daemon reads
//!   at send time or a `data:<mime>[;filename=<name>];base64,<data>` URI,
//!   a missing or unreadable one failing the send with -32603 "Failed to send
//!   message: … (AttachmentInvalidException)" as signal-cli's
//!   UnexpectedErrorException; an empty send is refused with signal-cli's
//!   words; result `{"timestamp", "results":
//!   [{"recipientAddress", "type": "SUCCESS"}]}`), `getAttachment` (`id`
//!   and `recipient` or `groupId`; result `{"data": base64}`, an unknown id
//!   -1 "Could not find attachment with ID: …"), `sendTyping`
//!   (`recipient` or `groupId`, `stop`), `sendReceipt` (`recipient`,
//!   `targetTimestamp`, `type` read|viewed).
//! - `GET /api/v1/events[?account=]`: `text/event-stream`, each message as
//!   `event:receive` + `data:{"envelope":…,"account":…}` + a blank line,
//!   `:` keep-alives every 15 s; an unknown account is refused with 400.
//! - `GET /api/v1/check`: 200.
//!
//! Tests push envelopes (or raw SSE bytes, for malformed input) to every
//! open event stream, read what was sent, and can drop the daemon (every
//! stream and the listener) to start another on the same port.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The daemon's account (the bot's number).
pub const BOT_NUMBER: &str = "+15550000001";
pub const BOT_UUID: &str = "b0b0b0b0-1111-4222-8333-444455556666";
/// signal-cli's keep-alive period on an event stream.
const KEEP_ALIVE_MS: u64 = 15_000;
const USER_ERROR: i64 = -1;

/// A JSON-RPC request as the fake received it.
#[derive(Debug, Clone)]
pub struct RpcCall {
    pub method: String,
    pub params: Value,
}

/// A message `send` accepted.
#[derive(Debug, Clone)]
pub struct SentMessage {
    pub recipients: Vec<String>,
    pub group_id: Option<String>,
    pub message: String,
    pub timestamp: u64,
    /// The attachments as the daemon read them.
    pub attachments: Vec<SentAttachment>,
}

/// One attachment of a `send`, read from its path or data URI.
#[derive(Debug, Clone)]
pub struct SentAttachment {
    /// The path or URI as given.
    pub source: String,
    pub bytes: Vec<u8>,
}

#[derive(Default)]
struct Inner {
    calls: Vec<RpcCall>,
    sent: Vec<SentMessage>,
    streams: Vec<mpsc::UnboundedSender<Bytes>>,
    groups: BTreeMap<String, String>,
    /// Received attachments by id (what `getAttachment` serves).
    attachments: BTreeMap<String, Vec<u8>>,
    events_opened: usize,
    next_timestamp: u64,
}

struct State {
    inner: Mutex<Inner>,
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running fake daemon; it stops when dropped.
pub struct FakeSignal {
    pub addr: SocketAddr,
    state: Arc<State>,
    shutdown: CancellationToken,
}

type Body = BoxBody<Bytes, Infallible>;

fn full(status: u16, content_type: Option<&str>, body: Vec<u8>) -> Response<Body> {
    let mut builder = Response::builder().status(status);
    if let Some(kind) = content_type {
        builder = builder.header("content-type", kind);
    }
    builder
        .body(Full::new(Bytes::from(body)).boxed())
        .expect("valid response")
}

impl FakeSignal {
    /// A daemon on a free loopback port.
    pub async fn start() -> FakeSignal {
        FakeSignal::start_on(0).await
    }

    /// A daemon on `port` (0: any free one).
    pub async fn start_on(port: u16) -> FakeSignal {
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", port)).await {
                Ok(listener) => break listener,
                // The port of a daemon just dropped may linger a moment.
                Err(error) if tries < 50 => {
                    tries += 1;
                    let _ = error;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("bind the fake signal-cli daemon: {error}"),
            }
        };
        let addr = listener.local_addr().expect("address");
        let state = Arc::new(State {
            inner: Mutex::new(Inner {
                next_timestamp: 1_800_000_000_000,
                ..Inner::default()
            }),
        });
        let shutdown = CancellationToken::new();
        tokio::spawn(serve(listener, state.clone(), shutdown.clone()));
        FakeSignal {
            addr,
            state,
            shutdown,
        }
    }

    /// Keeps `bytes` as a received attachment `id` (served by `getAttachment`).
    pub fn add_attachment(&self, id: &str, bytes: Vec<u8>) {
        self.state.lock().attachments.insert(id.to_string(), bytes);
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// A group the account is a member of.
    pub fn add_group(&self, group_id: &str, name: &str) {
        self.state
            .lock()
            .groups
            .insert(group_id.to_string(), name.to_string());
    }

    /// Event streams open now.
    pub fn open_streams(&self) -> usize {
        let mut inner = self.state.lock();
        inner.streams.retain(|s| !s.is_closed());
        inner.streams.len()
    }

    /// Event streams opened since start.
    pub fn streams_opened(&self) -> usize {
        self.state.lock().events_opened
    }

    /// Writes raw bytes to every open event stream.
    pub fn push_raw(&self, bytes: &[u8]) {
        let mut inner = self.state.lock();
        inner.streams.retain(|s| !s.is_closed());
        for stream in &inner.streams {
            let _ = stream.send(Bytes::copy_from_slice(bytes));
        }
    }

    /// Sends one `receive` event (a payload made by [`dm`] or [`group`]).
    pub fn push_receive(&self, payload: &Value) {
        self.push_raw(format!("event:receive\ndata:{payload}\n\n").as_bytes());
    }

    pub fn calls(&self) -> Vec<RpcCall> {
        self.state.lock().calls.clone()
    }

    pub fn calls_of(&self, method: &str) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter(|c| c.method == method)
            .map(|c| c.params)
            .collect()
    }

    pub fn sent(&self) -> Vec<SentMessage> {
        self.state.lock().sent.clone()
    }

    /// Texts sent to `to` (a number, or `group:<id>`).
    pub fn sent_to(&self, to: &str) -> Vec<String> {
        self.sent()
            .into_iter()
            .filter(|m| match to.strip_prefix("group:") {
                Some(group) => m.group_id.as_deref() == Some(group),
                None => m.recipients.iter().any(|r| r == to),
            })
            .map(|m| m.message)
            .collect()
    }

    /// The daemon dies: its streams end and its port stops answering.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
        self.state.lock().streams.clear();
    }
}

impl Drop for FakeSignal {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A direct message from `number` as signal-cli's JSON receive handler
/// writes it.
pub fn dm(number: &str, uuid: &str, name: &str, text: &str, timestamp: u64) -> Value {
    json!({
        "envelope": {
            "source": number, "sourceNumber": number, "sourceUuid": uuid,
            "sourceName": name, "sourceDevice": 1, "timestamp": timestamp,
            "serverReceivedTimestamp": timestamp + 5, "serverDeliveredTimestamp": timestamp + 9,
            "dataMessage": {
                "timestamp": timestamp, "message": text,
                "expiresInSeconds": 0, "viewOnce": false
            }
        },
        "account": BOT_NUMBER
    })
}

/// A group message; `mentions` as signal-cli lists them (`start`,
/// `length`, `number`, `uuid`, `name`), the text holding U+FFFC for each.
pub fn group(
    group_id: &str,
    number: &str,
    uuid: &str,
    text: &str,
    mentions: Value,
    timestamp: u64,
) -> Value {
    let mut payload = dm(number, uuid, "Member", text, timestamp);
    payload["envelope"]["dataMessage"]["groupInfo"] =
        json!({"groupId": group_id, "groupName": "Ops", "revision": 3, "type": "DELIVER"});
    payload["envelope"]["dataMessage"]["mentions"] = mentions;
    payload
}

/// A mention of the bot at `start`, as signal-cli reports it.
pub fn bot_mention(start: u64) -> Value {
    json!({"name": "Pincer", "number": BOT_NUMBER, "uuid": BOT_UUID, "start": start, "length": 1})
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
            let service = service_fn(|request| handle(state.clone(), shutdown.clone(), request));
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = connection => {}
            }
        });
    }
}

async fn handle(
    state: Arc<State>,
    shutdown: CancellationToken,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or("").to_string();
    let method = request.method().as_str().to_string();
    Ok(match path.as_str() {
        "/api/v1/rpc" => {
            if method != "POST" {
                return Ok(full(405, None, Vec::new()));
            }
            let json_type = request
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/json"));
            if !json_type {
                return Ok(full(415, None, Vec::new()));
            }
            let body = request
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            rpc(&state, &body)
        }
        "/api/v1/events" => {
            if method != "GET" {
                return Ok(full(405, None, Vec::new()));
            }
            let account = query
                .split('&')
                .filter_map(|pair| pair.split_once('='))
                .find(|(key, _)| *key == "account")
                .map(|(_, value)| value.replace("%2B", "+").replace("%2b", "+"));
            if account
                .as_deref()
                .is_some_and(|a| !a.is_empty() && a != BOT_NUMBER)
            {
                return Ok(full(400, None, Vec::new()));
            }
            events(&state, shutdown)
        }
        "/api/v1/check" => {
            if method != "GET" {
                return Ok(full(405, None, Vec::new()));
            }
            full(200, None, Vec::new())
        }
        _ => full(404, None, Vec::new()),
    })
}

fn events(state: &Arc<State>, shutdown: CancellationToken) -> Response<Body> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
    {
        let mut inner = state.lock();
        inner.streams.push(tx);
        inner.events_opened += 1;
    }
    let stream = async_stream(
        move |out: mpsc::Sender<Result<Frame<Bytes>, Infallible>>| async move {
            let mut keep_alive = tokio::time::interval(Duration::from_millis(KEEP_ALIVE_MS));
            keep_alive.tick().await;
            loop {
                let bytes = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = keep_alive.tick() => Bytes::from_static(b":\n"),
                    next = rx.recv() => match next {
                        Some(bytes) => bytes,
                        None => return,
                    },
                };
                if out.send(Ok(Frame::data(bytes))).await.is_err() {
                    return;
                }
            }
        },
    );
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .expect("valid response")
}

/// A stream fed by `producer` through a small channel.
fn async_stream<F, Fut>(
    producer: F,
) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send + Sync + 'static
where
    F: FnOnce(mpsc::Sender<Result<Frame<Bytes>, Infallible>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(producer(tx));
    tokio_stream_from(rx)
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send + Sync + 'static {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn answer(id: &Value, outcome: Result<Value, (i64, String)>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "result": result, "id": id}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": id})
        }
    }
}

fn rpc(state: &Arc<State>, body: &[u8]) -> Response<Body> {
    let json = |value: Value| {
        full(
            200,
            Some("application/json"),
            value.to_string().into_bytes(),
        )
    };
    let request: Value = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(error) => return json(answer(&Value::Null, Err((-32700, error.to_string())))),
    };
    let id = request.get("id").cloned();
    let (Some(method), true) = (
        request["method"].as_str(),
        request["jsonrpc"] == "2.0" && request.is_object(),
    ) else {
        return json(answer(
            &id.unwrap_or(Value::Null),
            Err((-32600, "Invalid request".into())),
        ));
    };
    let params = request.get("params").cloned().unwrap_or(json!({}));
    state.lock().calls.push(RpcCall {
        method: method.to_string(),
        params: params.clone(),
    });
    let outcome = run(state, method, params);
    match id {
        Some(id) => json(answer(&id, outcome)),
        None => full(201, None, Vec::new()),
    }
}

/// `attachments` as signal-cli reads them when it sends: each a path or a
/// data URI.
fn read_attachments(params: &Value) -> Result<Vec<SentAttachment>, (i64, String)> {
    let list = match &params["attachments"] {
        Value::Null => return Ok(Vec::new()),
        Value::Array(list) => list,
        _ => return Err(invalid("attachments must be a list")),
    };
    let failed = |source: &str, why: String| {
        (
            -32603,
            format!("Failed to send message: {source}: {why} (AttachmentInvalidException)"),
        )
    };
    list.iter()
        .map(|item| {
            let source = item
                .as_str()
                .ok_or_else(|| invalid("attachments must be strings"))?;
            let bytes = match source.strip_prefix("data:") {
                Some(uri) => {
                    let (_, data) = uri
                        .split_once(";base64,")
                        .ok_or_else(|| failed(source, "not a base64 data URI".into()))?;
                    base64::engine::general_purpose::STANDARD
                        .decode(data)
                        .map_err(|e| failed(source, e.to_string()))?
                }
                None => std::fs::read(source).map_err(|e| failed(source, e.to_string()))?,
            };
            Ok(SentAttachment {
                source: source.to_string(),
                bytes,
            })
        })
        .collect()
}

fn invalid(what: &str) -> (i64, String) {
    (-32602, format!("Invalid params: {what}"))
}

fn is_recipient(text: &str) -> bool {
    let number =
        text.len() > 1 && text.starts_with('+') && text[1..].bytes().all(|b| b.is_ascii_digit());
    let uuid = text.len() == 36 && text.bytes().filter(|b| *b == b'-').count() == 4;
    number || uuid
}

/// `recipient` as signal-cli reads it: a string or a list of strings.
fn recipients(params: &Value) -> Result<Vec<String>, (i64, String)> {
    let list = match &params["recipient"] {
        Value::Null => return Ok(Vec::new()),
        Value::String(one) => vec![one.clone()],
        Value::Array(many) => many
            .iter()
            .map(|r| r.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| invalid("recipient must be strings"))?,
        _ => return Err(invalid("recipient must be a string or a list")),
    };
    match list.iter().find(|r| !is_recipient(r)) {
        Some(bad) => Err((USER_ERROR, format!("Invalid number: {bad}"))),
        None => Ok(list),
    }
}

fn group_id(state: &Arc<State>, params: &Value) -> Result<Option<String>, (i64, String)> {
    match &params["groupId"] {
        Value::Null => Ok(None),
        Value::String(id) if state.lock().groups.contains_key(id) => Ok(Some(id.clone())),
        Value::String(id) => Err((USER_ERROR, format!("Invalid group id: {id}"))),
        _ => Err(invalid("groupId must be a string")),
    }
}

fn run(state: &Arc<State>, method: &str, params: Value) -> Result<Value, (i64, String)> {
    if !params.is_object() {
        return Err(invalid("params must be an object"));
    }
    if let Some(account) = params.get("account").filter(|a| !a.is_null()) {
        if account.as_str() != Some(BOT_NUMBER) {
            return Err((-32602, "Specified account does not exist".into()));
        }
    }
    match method {
        "send" => {
            let to = recipients(&params)?;
            let group = group_id(state, &params)?;
            if to.is_empty() && group.is_none() {
                return Err((USER_ERROR, "No recipients given".into()));
            }
            let message = match &params["message"] {
                Value::String(text) => text.clone(),
                Value::Null => String::new(),
                _ => return Err(invalid("message must be a string")),
            };
            let attachments = read_attachments(&params)?;
            if message.is_empty() && attachments.is_empty() {
                return Err((
                    USER_ERROR,
                    "Sending empty message is not allowed, either a message, attachment or sticker must be given.".into(),
                ));
            }
            let mut inner = state.lock();
            inner.next_timestamp += 1;
            let timestamp = inner.next_timestamp;
            inner.sent.push(SentMessage {
                recipients: to.clone(),
                group_id: group,
                message,
                timestamp,
                attachments,
            });
            let results: Vec<Value> = to
                .iter()
                .map(|r| json!({"recipientAddress": {"number": r}, "type": "SUCCESS"}))
                .collect();
            let results = if results.is_empty() {
                vec![json!({"recipientAddress": {"number": "+15559999999"}, "type": "SUCCESS"})]
            } else {
                results
            };
            Ok(json!({"timestamp": timestamp, "results": results}))
        }
        "getAttachment" => {
            let Some(id) = params["id"].as_str() else {
                return Err(invalid("id must be a string"));
            };
            let from = recipients(&params)?;
            let group = group_id(state, &params)?;
            if from.len() + usize::from(group.is_some()) != 1 {
                return Err(invalid("one of recipient or groupId is required"));
            }
            match state.lock().attachments.get(id) {
                Some(bytes) => {
                    Ok(json!({"data": base64::engine::general_purpose::STANDARD.encode(bytes)}))
                }
                None => Err((
                    USER_ERROR,
                    format!("Could not find attachment with ID: {id}"),
                )),
            }
        }
        "sendTyping" => {
            let to = recipients(&params)?;
            let group = group_id(state, &params)?;
            if to.is_empty() && group.is_none() {
                return Err((USER_ERROR, "No recipients given".into()));
            }
            if !params["stop"].is_null() && !params["stop"].is_boolean() {
                return Err(invalid("stop must be a boolean"));
            }
            Ok(json!({}))
        }
        "sendReceipt" => {
            let Some(recipient) = params["recipient"].as_str() else {
                return Err(invalid("recipient must be one string"));
            };
            if !is_recipient(recipient) {
                return Err((USER_ERROR, format!("Invalid number: {recipient}")));
            }
            let timestamps = match &params["targetTimestamp"] {
                Value::Number(_) => true,
                Value::Array(list) => !list.is_empty() && list.iter().all(Value::is_u64),
                _ => false,
            };
            if !timestamps {
                return Err(invalid("targetTimestamp must be timestamps"));
            }
            match params["type"].as_str() {
                None | Some("read") | Some("viewed") => Ok(json!({})),
                Some(other) => Err((USER_ERROR, format!("Unknown receipt type: {other}"))),
            }
        }
        _ => Err((-32601, "Method not implemented".into())),
    }
}

/// Rejects what pincer must never send, checked by the tests that use
/// the fake directly.
pub async fn raw_post(url: &str, content_type: &str, body: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("{url}/api/v1/rpc"))
        .header("content-type", content_type)
        .body(body.to_string())
        .send()
        .await
        .expect("post");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// Reads the first `count` SSE chunks of an event stream opened for `account`.
pub async fn open_events(url: &str, account: &str) -> u16 {
    let response = reqwest::Client::new()
        .get(format!("{url}/api/v1/events"))
        .query(&[("account", account)])
        .send()
        .await
        .expect("get events");
    let status = response.status().as_u16();
    drop(response.bytes_stream().boxed());
    status
}
