//! A fake OpenAI chat-completions server for integration tests.
//!
//! It owns one 127.0.0.1 listener on the test's tokio runtime and answers
//! `POST /v1/chat/completions` in OpenAI's real wire format: SSE
//! `chat.completion.chunk` objects ending in `data: [DONE]` when the request
//! streams, a `chat.completion` object when it does not, and OpenAI error JSON
//! for failures. Tests script replies with [`FakeReply`] (FIFO; when none is
//! queued it echoes the last user message) and inspect what arrived. It must
//! not be used by product code and never binds anything but loopback.
//!
//! It checks each request as OpenAI does before any scripted reply is used:
//! `Authorization: Bearer <key>` (else 401 `invalid_api_key`), a JSON body
//! with only documented parameters, a `model`, and well-formed `messages`
//! (known roles; content where the role needs it; assistant `tool_calls` as
//! `{id, type: "function", function: {name, arguments: string}}` each answered
//! by a following `tool` message with its `tool_call_id`; no `tool` message
//! without such a call), boolean `stream` with `stream_options` only when
//! streaming, `max_tokens` ≥ 1, tools named `^[a-zA-Z0-9_-]{1,64}$`. A
//! refusal is 400 `invalid_request_error` naming the parameter, as OpenAI's.
//! A user message's `image_url` parts must be URLs or `data:image/…;base64,` URLs
//! of PNG, JPEG, GIF or WebP bytes (else 400, as OpenAI's "unsupported image").
//!
//! `POST /v1/audio/transcriptions` takes OpenAI's multipart form (`file` and
//! `model` required; `language`, `prompt`, `response_format` optional; the file's
//! extension one OpenAI accepts) and answers `{"text": …}`: the next scripted
//! transcript, else `transcript of <N> bytes`. Each upload is recorded
//! ([`FakeOpenAi::transcriptions`]).
//!
//! `POST /v1/audio/speech` takes OpenAI's JSON (`model`, `input` of 1..=4,096
//! characters and `voice` required; `response_format` one of mp3, opus, aac,
//! flac, wav, pcm, default mp3; else 400 naming the parameter) and answers
//! the audio bytes with their content type: for `opus` an Ogg/Opus stream
//! (real pages and CRCs, one second per 15 characters of input), for `wav`
//! a 440 Hz tone as OpenAI streams WAV (24 kHz 16-bit mono, both RIFF sizes
//! 0xffffffff because they are unknown when the stream starts), for `pcm`
//! the same samples without a header, for the others a stand-in with the
//! format's magic bytes. Each request body is recorded
//! ([`FakeOpenAi::speech_requests`]); [`FakeOpenAi::speak_as_mp3`] and
//! [`FakeOpenAi::speak_as_wav`] make it answer MP3 or WAV whatever was
//! asked (a server that ignores the format).

#[allow(dead_code)]
#[allow(clippy::duplicate_mod)]
#[path = "multipart_form.rs"]
mod multipart_form;

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// Characters per chunk of the default echo reply.
const ECHO_CHUNK_CHARS: usize = 4;
/// Pause between chunks of the default echo reply.
const ECHO_CHUNK_DELAY_MS: u64 = 10;

/// One scripted answer to the next chat-completions request.
#[derive(Debug, Clone)]
pub enum FakeReply {
    /// One SSE chunk per piece, then `finish_reason: "stop"`, then the usage
    /// chunk (when the request set `stream_options.include_usage`, as OpenAI
    /// does), then `[DONE]`. Usage: prompt tokens = whitespace-separated words
    /// in all request messages, completion tokens = number of pieces.
    Text { chunks: Vec<String>, delay_ms: u64 },
    /// An OpenAI error JSON body with this status (and `retry-after` seconds).
    Error {
        status: u16,
        message: String,
        retry_after_secs: Option<u64>,
    },
    /// Sends the role chunk and one content delta, then keeps the stream open
    /// until the client goes away (counted by [`FakeOpenAi::disconnects`]).
    Hang { first_chunk: String },
    /// Thinking streamed as `reasoning_content` deltas (DeepSeek, vLLM,
    /// llama.cpp style), then the answer pieces as `content`, then as `Text`.
    Reasoning {
        thinking: Vec<String>,
        chunks: Vec<String>,
    },
    /// Tool calls streamed as OpenAI does: each call's id and name first,
    /// then its arguments in small fragments, then `finish_reason:
    /// "tool_calls"`. Each entry is `(id, name, arguments JSON text)`.
    ToolCalls {
        calls: Vec<(String, String, String)>,
    },
    /// Waits until the test calls `notify_one` on `gate` (a call made before the request arrives counts),
    /// then answers with `then`: the client's model call stays in flight as long as the test wants.
    Held {
        gate: Arc<tokio::sync::Notify>,
        then: Box<FakeReply>,
    },
    /// Exact bytes for malformed-stream tests: this status and these headers,
    /// then each piece written as its own body frame, then the body ends.
    Raw {
        status: u16,
        headers: Vec<(String, String)>,
        chunks: Vec<Vec<u8>>,
    },
}

/// A request as the fake received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// Header names lower-cased; repeated headers joined with ", ".
    pub headers: BTreeMap<String, String>,
    /// The parsed JSON body (`Value::Null` when the body was not JSON).
    pub body: Value,
}

/// One `/audio/transcriptions` upload as the fake received it.
#[derive(Debug, Clone)]
pub struct RecordedTranscription {
    /// The text fields (`model`, `language`, `prompt`, …).
    pub fields: BTreeMap<String, String>,
    pub file_name: String,
    pub file_content_type: String,
    pub file_bytes: Vec<u8>,
    pub authorization: Option<String>,
    /// Every request header, names lower-cased.
    pub headers: BTreeMap<String, String>,
}

/// A running fake; the server stops when this is dropped.
pub struct FakeOpenAi {
    addr: SocketAddr,
    state: Arc<FakeState>,
    shutdown: CancellationToken,
}

struct FakeState {
    replies: Mutex<VecDeque<FakeReply>>,
    /// Replies kept for requests whose system prompt contains the text.
    replies_for_system: Mutex<Vec<(String, FakeReply)>>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// The latest streamed text reply's time from the request's arrival to its last SSE event queued.
    last_serve: Mutex<Option<Duration>>,
    disconnects: watch::Sender<usize>,
    next_id: AtomicU64,
    shutdown: CancellationToken,
    transcripts: Mutex<VecDeque<String>>,
    transcriptions: Mutex<Vec<RecordedTranscription>>,
    /// How long a transcription takes (a slow Whisper server).
    transcription_delay_ms: AtomicU64,
    speech_requests: Mutex<Vec<Value>>,
    /// Answer MP3 bytes whatever format is asked.
    speak_as_mp3: std::sync::atomic::AtomicBool,
    speak_as_wav: std::sync::atomic::AtomicBool,
}

type FakeBody = BoxBody<Bytes, Infallible>;

impl FakeOpenAi {
    /// Binds 127.0.0.1 on a free port and serves on the current runtime.
    pub async fn start() -> FakeOpenAi {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake OpenAI on loopback");
        let addr = listener.local_addr().expect("listener has an address");
        let shutdown = CancellationToken::new();
        let state = Arc::new(FakeState {
            speech_requests: Mutex::new(Vec::new()),
            speak_as_mp3: std::sync::atomic::AtomicBool::new(false),
            speak_as_wav: std::sync::atomic::AtomicBool::new(false),
            replies: Mutex::new(VecDeque::new()),
            replies_for_system: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
            last_serve: Mutex::new(None),
            disconnects: watch::Sender::new(0),
            next_id: AtomicU64::new(1),
            shutdown: shutdown.clone(),
            transcripts: Mutex::new(VecDeque::new()),
            transcriptions: Mutex::new(Vec::new()),
            transcription_delay_ms: AtomicU64::new(0),
        });
        tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        FakeOpenAi {
            addr,
            state,
            shutdown,
        }
    }

    /// `http://127.0.0.1:PORT/v1`, what a provider config's `baseUrl` holds.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues a reply for the next request (first in, first out).
    pub fn push_reply(&self, reply: FakeReply) {
        self.state
            .replies
            .lock()
            .expect("replies lock")
            .push_back(reply);
    }

    /// Keeps a reply for the first request whose system prompt contains
    /// `needle`; such a request takes it before the queued replies.
    pub fn push_reply_for_system(&self, needle: &str, reply: FakeReply) {
        self.state
            .replies_for_system
            .lock()
            .expect("replies lock")
            .push((needle.to_string(), reply));
    }

    /// How long the fake itself took over its latest streamed text reply (request arrival to the last event
    /// queued for sending): the provider's share of a turn's time.
    pub fn last_serve_time(&self) -> Option<Duration> {
        *self.state.last_serve.lock().expect("serve time lock")
    }

    /// Forgets the requests seen so far (a long benchmark keeps no history).
    pub fn forget_requests(&self) {
        self.state.requests.lock().expect("requests lock").clear();
    }

    /// Every request seen so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests.lock().expect("requests lock").clone()
    }

    /// Queues the text of the next transcription answer.
    /// The JSON bodies `/audio/speech` received.
    pub fn speech_requests(&self) -> Vec<Value> {
        self.state
            .speech_requests
            .lock()
            .expect("speech lock")
            .clone()
    }

    /// From now on `/audio/speech` answers MP3 whatever format is asked.
    pub fn speak_as_mp3(&self) {
        self.state.speak_as_mp3.store(true, Ordering::SeqCst);
    }

    /// From now on `/audio/speech` answers WAV whatever format is asked.
    pub fn speak_as_wav(&self) {
        self.state.speak_as_wav.store(true, Ordering::SeqCst);
    }

    pub fn push_transcript(&self, text: &str) {
        self.state
            .transcripts
            .lock()
            .expect("transcripts lock")
            .push_back(text.to_string());
    }

    /// Makes every transcription answer this much later.
    pub fn set_transcription_delay(&self, delay: Duration) {
        self.state
            .transcription_delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Every `/audio/transcriptions` upload so far.
    pub fn transcriptions(&self) -> Vec<RecordedTranscription> {
        self.state
            .transcriptions
            .lock()
            .expect("transcriptions lock")
            .clone()
    }

    /// Every `image_url` part of the user messages received so far: `(mime, decoded bytes)`.
    pub fn image_parts(&self) -> Vec<(String, Vec<u8>)> {
        use base64::Engine;
        let mut parts = Vec::new();
        for request in self.requests() {
            let Some(messages) = request.body["messages"].as_array() else {
                continue;
            };
            for part in messages
                .iter()
                .filter(|m| m["role"] == "user")
                .filter_map(|m| m["content"].as_array())
                .flatten()
                .filter(|p| p["type"] == "image_url")
            {
                let url = part["image_url"]["url"].as_str().unwrap_or_default();
                if let Some((mime, data)) = url
                    .strip_prefix("data:")
                    .and_then(|rest| rest.split_once(";base64,"))
                {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(data)
                        .unwrap_or_default();
                    parts.push((mime.to_string(), bytes));
                }
            }
        }
        parts
    }

    /// How many streams the client dropped before their end.
    pub fn disconnects(&self) -> usize {
        *self.state.disconnects.borrow()
    }

    /// Resolves once at least `count` streams were dropped by the client.
    pub async fn wait_for_disconnects(&self, count: usize) {
        let mut seen = self.state.disconnects.subscribe();
        seen.wait_for(|n| *n >= count)
            .await
            .expect("fake state outlives its watchers");
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<FakeState>) {
    loop {
        let stream = tokio::select! {
            _ = state.shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        // Each SSE event goes out at once, as from a real API front end
        // (Nagle plus the client's delayed ACK would add ~40 ms per reply).
        let _ = stream.set_nodelay(true);
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

async fn handle(
    state: Arc<FakeState>,
    request: Request<Incoming>,
) -> Result<Response<FakeBody>, Infallible> {
    let arrived = Instant::now();
    let (recorded, raw) = record(request).await;
    state
        .requests
        .lock()
        .expect("requests lock")
        .push(recorded.clone());
    if recorded.method == "POST" && recorded.path == "/v1/audio/transcriptions" {
        let delay = state.transcription_delay_ms.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        return Ok(transcription(&state, &recorded, &raw));
    }
    if recorded.method == "POST" && recorded.path == "/v1/audio/speech" {
        return Ok(speech(&state, &recorded));
    }
    if recorded.method != "POST" || recorded.path != "/v1/chat/completions" {
        let message = format!("Invalid URL ({} {})", recorded.method, recorded.path);
        return Ok(error_response(404, &message, None));
    }
    if !recorded.body.is_object() {
        return Ok(error_response(
            400,
            "We could not parse the JSON body of your request.",
            None,
        ));
    }
    if let Some(refusal) = check_request(&recorded) {
        eprintln!("fake openai: refused a request ({})", refusal.status());
        return Ok(refusal);
    }
    let queued = take_reply_for_system(&state, &recorded.body)
        .or_else(|| state.replies.lock().expect("replies lock").pop_front());
    let mut reply = queued.unwrap_or_else(|| echo_reply(&recorded.body));
    while let FakeReply::Held { gate, then } = reply {
        gate.notified().await;
        reply = *then;
    }
    let streaming = recorded.body["stream"].as_bool().unwrap_or(false);
    Ok(match reply {
        FakeReply::Error {
            status,
            message,
            retry_after_secs,
        } => error_response(status, &message, retry_after_secs),
        FakeReply::Raw {
            status,
            headers,
            chunks,
        } => raw_response(&state, status, headers, chunks),
        FakeReply::Text { chunks, delay_ms } if streaming => {
            stream_text(&state, &recorded.body, &[], chunks, delay_ms, arrived)
        }
        FakeReply::Reasoning { thinking, chunks } => {
            stream_text(&state, &recorded.body, &thinking, chunks, 0, arrived)
        }
        FakeReply::Text { chunks, .. } => completion_response(&state, &recorded.body, &chunks),
        FakeReply::ToolCalls { calls } => stream_tool_calls(&state, &recorded.body, calls),
        FakeReply::Hang { first_chunk } if streaming => {
            stream_hang(&state, &recorded.body, first_chunk)
        }
        FakeReply::Hang { .. } => {
            state.shutdown.cancelled().await;
            error_response(503, "fake server shutting down", None)
        }
        FakeReply::Held { .. } => error_response(500, "a held reply was not released", None),
    })
}

/// Chat-completions parameters OpenAI documents (anything else is refused).
const KNOWN_PARAMETERS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "n",
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "user",
    "seed",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "reasoning_effort",
    "metadata",
    "store",
    "modalities",
    "audio",
    "prediction",
    "service_tier",
    "web_search_options",
    "prompt_cache_key",
    "safety_identifier",
    "verbosity",
    "functions",
    "function_call",
];

/// OpenAI's checks of a chat-completions request: the key, then the body;
/// `Some(refusal)` for a request OpenAI refuses.
fn check_request(request: &RecordedRequest) -> Option<Response<FakeBody>> {
    let key = request
        .headers
        .get("authorization")
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .unwrap_or("");
    if key.is_empty() {
        return Some(error_response(
            401,
            "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            None,
        ));
    }
    check_body(&request.body)
        .err()
        .map(|(message, param)| invalid_request(&message, &param))
}

/// The body's checks; `Err((message, param))` as OpenAI words them.
fn check_body(body: &Value) -> Result<(), (String, String)> {
    let fields = body.as_object().expect("checked: an object");
    if let Some(unknown) = fields
        .keys()
        .find(|key| !KNOWN_PARAMETERS.contains(&key.as_str()))
    {
        return Err((
            format!("Unrecognized request argument supplied: {unknown}"),
            unknown.clone(),
        ));
    }
    if body["model"].as_str().is_none_or(str::is_empty) {
        return Err(("you must provide a model parameter".into(), "model".into()));
    }
    let Some(messages) = body["messages"].as_array() else {
        return Err((
            "Missing required parameter: 'messages'.".into(),
            "messages".into(),
        ));
    };
    if messages.is_empty() {
        return Err((
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.".into(),
            "messages".into(),
        ));
    }
    check_messages(messages)?;
    if let Some(stream) = body.get("stream") {
        if !stream.is_boolean() && !stream.is_null() {
            return Err((
                format!("Invalid type for 'stream': expected a boolean, but got {stream} instead."),
                "stream".into(),
            ));
        }
    }
    if body.get("stream_options").is_some_and(|o| !o.is_null()) && body["stream"] != true {
        return Err((
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.".into(),
            "stream_options".into(),
        ));
    }
    for key in ["max_tokens", "max_completion_tokens"] {
        if let Some(value) = body.get(key).filter(|v| !v.is_null()) {
            if value.as_u64().is_none_or(|n| n < 1) {
                return Err((
                    format!("Invalid '{key}': expected an integer >= 1, but got {value} instead."),
                    key.into(),
                ));
            }
        }
    }
    if let Some(tools) = body.get("tools").filter(|t| !t.is_null()) {
        let Some(tools) = tools.as_array() else {
            return Err((
                "Invalid type for 'tools': expected an array.".into(),
                "tools".into(),
            ));
        };
        for (index, tool) in tools.iter().enumerate() {
            let name = tool["function"]["name"].as_str().unwrap_or("");
            let named = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if tool["type"] != "function" || !named {
                return Err((
                    format!("Invalid 'tools[{index}].function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."),
                    format!("tools[{index}].function.name"),
                ));
            }
            let parameters = &tool["function"]["parameters"];
            if !parameters.is_null() && !parameters.is_object() {
                return Err((
                    format!("Invalid type for 'tools[{index}].function.parameters': expected an object."),
                    format!("tools[{index}].function.parameters"),
                ));
            }
        }
    }
    Ok(())
}

/// Whether `content` is a string, or an array of parts of the given types.
fn content_ok(content: &Value, part_types: &[&str]) -> bool {
    match content {
        Value::String(_) => true,
        Value::Array(parts) => parts.iter().all(|part| {
            let kind = part["type"].as_str().unwrap_or("");
            part_types.contains(&kind) && (kind != "text" || part["text"].is_string())
        }),
        _ => false,
    }
}

fn check_messages(messages: &[Value]) -> Result<(), (String, String)> {
    // Tool calls of the latest assistant message not yet answered.
    let mut open_calls: Vec<String> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        let param = |field: &str| format!("messages.[{index}].{field}");
        let missing = |field: &str| {
            Err((
                format!("Missing required parameter: 'messages.[{index}].{field}'."),
                param(field),
            ))
        };
        if role != "tool" && !open_calls.is_empty() {
            return Err((
                format!("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}", open_calls.join(", ")),
                param("role"),
            ));
        }
        let content = &message["content"];
        match role {
            "system" | "developer" => {
                if !content_ok(content, &["text"]) {
                    return missing("content");
                }
            }
            "user" => {
                if !content_ok(content, &["text", "image_url", "input_audio", "file"]) {
                    return missing("content");
                }
                let bad_image = content.as_array().is_some_and(|parts| {
                    parts
                        .iter()
                        .any(|p| p["type"] == "image_url" && !image_part_ok(p))
                });
                if bad_image {
                    return Err((
                        "You uploaded an unsupported image. Please make sure your image has of one the following formats: ['png', 'jpeg', 'gif', 'webp'].".to_string(),
                        param("content"),
                    ));
                }
            }
            "assistant" => {
                let calls = message.get("tool_calls").filter(|c| !c.is_null());
                if !content.is_null() && !content_ok(content, &["text", "refusal"]) {
                    return Err((
                        format!("Invalid type for 'messages.[{index}].content'."),
                        param("content"),
                    ));
                }
                match calls {
                    None if content.is_null() => return missing("content"),
                    None => {}
                    Some(calls) => {
                        let Some(calls) = calls.as_array().filter(|c| !c.is_empty()) else {
                            return Err((
                                format!("Invalid 'messages.[{index}].tool_calls': empty array. Expected an array with minimum length 1."),
                                param("tool_calls"),
                            ));
                        };
                        for (at, call) in calls.iter().enumerate() {
                            let well_formed = call["id"].as_str().is_some_and(|id| !id.is_empty())
                                && call["type"] == "function"
                                && call["function"]["name"].as_str().is_some_and(|n| !n.is_empty())
                                && call["function"]["arguments"].is_string();
                            if !well_formed {
                                return missing(&format!("tool_calls.[{at}]"));
                            }
                            open_calls.push(call["id"].as_str().unwrap_or("").to_string());
                        }
                    }
                }
            }
            "tool" => {
                let Some(id) = message["tool_call_id"].as_str() else {
                    return missing("tool_call_id");
                };
                if !content_ok(content, &["text"]) {
                    return missing("content");
                }
                let Some(at) = open_calls.iter().position(|open| open == id) else {
                    return Err((
                        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.".into(),
                        param("role"),
                    ));
                };
                open_calls.remove(at);
            }
            _ => {
                return Err((
                    format!("Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'."),
                    param("role"),
                ))
            }
        }
    }
    if !open_calls.is_empty() {
        return Err((
            format!("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}", open_calls.join(", ")),
            "messages".into(),
        ));
    }
    Ok(())
}

/// OpenAI's 400 for a request it refuses, naming the parameter.
fn invalid_request(message: &str, param: &str) -> Response<FakeBody> {
    let body = json!({ "error": { "message": message, "type": "invalid_request_error", "param": param, "code": null } });
    json_response(400, &body, None)
}

fn take_reply_for_system(state: &FakeState, body: &Value) -> Option<FakeReply> {
    let system = body["messages"]
        .as_array()?
        .iter()
        .find(|m| m["role"] == "system")?["content"]
        .as_str()?
        .to_string();
    let mut kept = state.replies_for_system.lock().expect("replies lock");
    let at = kept
        .iter()
        .position(|(needle, _)| system.contains(needle))?;
    Some(kept.remove(at).1)
}

async fn record(request: Request<Incoming>) -> (RecordedRequest, Bytes) {
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in request.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_ascii_lowercase())
            .and_modify(|joined| {
                joined.push_str(", ");
                joined.push_str(&value);
            })
            .or_insert(value);
    }
    let bytes = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let recorded = RecordedRequest {
        method,
        path,
        headers,
        body,
    };
    (recorded, bytes)
}

/// Extensions OpenAI's transcription endpoint accepts.
const AUDIO_EXTENSIONS: &[&str] = &[
    "flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm",
];

/// `POST /v1/audio/transcriptions`: OpenAI's checks, then `{"text": …}`.
fn transcription(state: &FakeState, request: &RecordedRequest, raw: &[u8]) -> Response<FakeBody> {
    let authorization = request.headers.get("authorization").cloned();
    if !authorization
        .as_deref()
        .is_some_and(|a| a.starts_with("Bearer ") && a.len() > "Bearer ".len())
    {
        return error_response(401, "You didn't provide an API key.", None);
    }
    let content_type = request
        .headers
        .get("content-type")
        .cloned()
        .unwrap_or_default();
    let Some(boundary) = content_type
        .strip_prefix("multipart/form-data;")
        .and_then(|rest| rest.trim().strip_prefix("boundary="))
        .map(|b| b.trim_matches('"').to_string())
    else {
        return error_response(400, "Expected a multipart/form-data body.", None);
    };
    if let Some(length) = request.headers.get("content-length") {
        if length.parse::<usize>().ok() != Some(raw.len()) {
            return error_response(
                400,
                "The body's length differs from its Content-Length.",
                None,
            );
        }
    }
    let parts = match multipart_form::parts(raw, &boundary) {
        Ok(parts) => parts,
        Err(message) => return error_response(400, &message, None),
    };
    let mut fields = BTreeMap::new();
    let mut file = None;
    for part in parts {
        match part.file_name {
            Some(name) if part.name == "file" => file = Some((name, part.content_type, part.body)),
            _ => {
                fields.insert(part.name, String::from_utf8_lossy(&part.body).into_owned());
            }
        }
    }
    let Some((file_name, file_content_type, file_bytes)) = file else {
        return error_response(
            400,
            "1 validation error for Request\nbody -> file\n  field required",
            None,
        );
    };
    if !fields.contains_key("model") {
        return error_response(400, "you must provide a model parameter", None);
    }
    let extension = file_name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase());
    if !extension
        .as_deref()
        .is_some_and(|e| AUDIO_EXTENSIONS.contains(&e))
    {
        let message = format!(
            "Invalid file format. Supported formats: {:?}",
            AUDIO_EXTENSIONS
        );
        return error_response(400, &message, None);
    }
    let text = state
        .transcripts
        .lock()
        .expect("transcripts lock")
        .pop_front()
        .unwrap_or_else(|| format!("transcript of {} bytes", file_bytes.len()));
    state
        .transcriptions
        .lock()
        .expect("transcriptions lock")
        .push(RecordedTranscription {
            fields,
            file_name,
            file_content_type,
            file_bytes,
            authorization,
            headers: request.headers.clone(),
        });
    json_response(200, &json!({"text": text}), None)
}

/// Formats `/audio/speech` produces.
const SPEECH_FORMATS: &[&str] = &["mp3", "opus", "aac", "flac", "wav", "pcm"];

/// `POST /v1/audio/speech`: OpenAI's checks, then the audio bytes.
fn speech(state: &FakeState, request: &RecordedRequest) -> Response<FakeBody> {
    let authorization = request.headers.get("authorization").cloned();
    if !authorization
        .as_deref()
        .is_some_and(|a| a.starts_with("Bearer ") && a.len() > "Bearer ".len())
    {
        return error_response(401, "You didn't provide an API key.", None);
    }
    let body = &request.body;
    if !body.is_object() {
        return error_response(
            400,
            "We could not parse the JSON body of your request.",
            None,
        );
    }
    for key in ["model", "input", "voice"] {
        if body[key].as_str().is_none_or(|v| v.is_empty()) {
            return error_response(400, &format!("Missing required parameter: '{key}'."), None);
        }
    }
    let input = body["input"].as_str().unwrap_or_default();
    if input.chars().count() > 4096 {
        return error_response(400, "'input' is too long: at most 4096 characters.", None);
    }
    let format = body["response_format"].as_str().unwrap_or("mp3");
    if !SPEECH_FORMATS.contains(&format) {
        let message = format!("Invalid value for 'response_format': {format:?}.");
        return error_response(400, &message, None);
    }
    state
        .speech_requests
        .lock()
        .expect("speech lock")
        .push(body.clone());
    let format = if state.speak_as_mp3.load(Ordering::SeqCst) {
        "mp3"
    } else if state.speak_as_wav.load(Ordering::SeqCst) {
        "wav"
    } else {
        format
    };
    let seconds = (input.chars().count() as u64 / 15).max(1);
    let (bytes, content_type) = match format {
        "opus" => {
            let mut out = Vec::new();
            pincer::media::ogg::writer::opus_stream(seconds, 40, |page| {
                out.extend_from_slice(page)
            });
            (out, "audio/ogg")
        }
        "mp3" => (b"ID3\x04\0\0\0\0\0\0 mp3 frames".to_vec(), "audio/mpeg"),
        "wav" => {
            let mut out = b"RIFF\xff\xff\xff\xffWAVEfmt ".to_vec();
            out.extend_from_slice(&16u32.to_le_bytes());
            out.extend_from_slice(&1u16.to_le_bytes());
            out.extend_from_slice(&1u16.to_le_bytes());
            out.extend_from_slice(&24_000u32.to_le_bytes());
            out.extend_from_slice(&48_000u32.to_le_bytes());
            out.extend_from_slice(&2u16.to_le_bytes());
            out.extend_from_slice(&16u16.to_le_bytes());
            out.extend_from_slice(b"data\xff\xff\xff\xff");
            out.extend_from_slice(&tone_pcm(seconds));
            (out, "audio/wav")
        }
        "pcm" => (tone_pcm(seconds), "audio/pcm"),
        "flac" => (b"fLaC\0\0\0\x22".to_vec(), "audio/flac"),
        _ => (vec![0u8; 64], "application/octet-stream"),
    };
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(bytes)).boxed())
        .expect("static response parts are valid")
}

/// `seconds` of a 440 Hz tone as 24 kHz 16-bit little-endian mono samples.
fn tone_pcm(seconds: u64) -> Vec<u8> {
    let frames = 24_000 * seconds;
    let mut out = Vec::with_capacity(frames as usize * 2);
    for i in 0..frames {
        let t = i as f64 / 24_000.0;
        let sample = ((t * 440.0 * std::f64::consts::TAU).sin() * 10_000.0) as i16;
        out.extend_from_slice(&sample.to_le_bytes());
    }
    out
}

/// Whether an `image_url` part holds an image OpenAI takes: an http(s) URL, or a data URL of
/// PNG, JPEG, GIF or WebP bytes.
fn image_part_ok(part: &Value) -> bool {
    use base64::Engine;
    let Some(url) = part["image_url"]["url"].as_str() else {
        return false;
    };
    if url.starts_with("https://") || url.starts_with("http://") {
        return true;
    }
    let Some((_, data)) = url
        .strip_prefix("data:image/")
        .and_then(|rest| rest.split_once(";base64,"))
    else {
        return false;
    };
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
        return false;
    };
    bytes.starts_with(b"\x89PNG\r\n\x1a\n")
        || bytes.starts_with(&[0xff, 0xd8, 0xff])
        || bytes.starts_with(b"GIF8")
        || (bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP"))
}

/// The default reply: `echo: <last user message>` in 4-character pieces.
fn echo_reply(body: &Value) -> FakeReply {
    let last_user = body["messages"]
        .as_array()
        .and_then(|messages| messages.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| content_text(&m["content"]))
        .unwrap_or_default();
    let text: Vec<char> = format!("echo: {last_user}").chars().collect();
    let chunks = text
        .chunks(ECHO_CHUNK_CHARS)
        .map(|piece| piece.iter().collect())
        .collect();
    FakeReply::Text {
        chunks,
        delay_ms: ECHO_CHUNK_DELAY_MS,
    }
}

/// Message content as a string, or the text parts of a content-part array.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

fn prompt_tokens(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .map(|m| content_text(&m["content"]).split_whitespace().count())
                .sum()
        })
        .unwrap_or(0)
}

fn usage_json(body: &Value, completion_tokens: usize) -> Value {
    let prompt = prompt_tokens(body);
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    })
}

/// The fields every chunk and completion object of one reply shares.
struct ReplyIdentity {
    id: String,
    created: u64,
    model: Value,
}

impl ReplyIdentity {
    fn new(state: &FakeState, body: &Value) -> Self {
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        ReplyIdentity {
            id: format!(
                "chatcmpl-fake{}",
                state.next_id.fetch_add(1, Ordering::Relaxed)
            ),
            created,
            model: body["model"].clone(),
        }
    }

    /// One `data: {chunk}\n\n` event; `usage` is `null` on ordinary chunks
    /// when the request asked for usage, as OpenAI sends it.
    fn chunk_event(&self, choices: Value, usage: Option<Value>) -> Bytes {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
        });
        if let Some(usage) = usage {
            chunk["usage"] = usage;
        }
        Bytes::from(format!("data: {chunk}\n\n"))
    }

    fn delta_event(&self, delta: Value, finish_reason: Option<&str>, with_usage: bool) -> Bytes {
        let choices = json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason }]);
        self.chunk_event(choices, with_usage.then_some(Value::Null))
    }
}

fn wants_usage(body: &Value) -> bool {
    body["stream_options"]["include_usage"]
        .as_bool()
        .unwrap_or(false)
}

fn stream_text(
    state: &Arc<FakeState>,
    body: &Value,
    thinking: &[String],
    chunks: Vec<String>,
    delay_ms: u64,
    arrived: Instant,
) -> Response<FakeBody> {
    let identity = ReplyIdentity::new(state, body);
    let with_usage = wants_usage(body);
    let usage = usage_json(body, chunks.len());
    let mut events = vec![identity.delta_event(
        json!({"role": "assistant", "content": ""}),
        None,
        with_usage,
    )];
    let first_content = events.len();
    for piece in thinking {
        events.push(identity.delta_event(json!({ "reasoning_content": piece }), None, with_usage));
    }
    for piece in &chunks {
        events.push(identity.delta_event(json!({ "content": piece }), None, with_usage));
    }
    events.push(identity.delta_event(json!({}), Some("stop"), with_usage));
    if with_usage {
        events.push(identity.chunk_event(json!([]), Some(usage)));
    }
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    let (sender, response) = sse_response();
    let state = Arc::clone(state);
    tokio::spawn(async move {
        for (index, event) in events.into_iter().enumerate() {
            if index > first_content && delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            }
            if !send_or_count(&state, &sender, event).await {
                return;
            }
        }
        *state.last_serve.lock().expect("serve time lock") = Some(arrived.elapsed());
    });
    response
}

fn stream_tool_calls(
    state: &Arc<FakeState>,
    body: &Value,
    calls: Vec<(String, String, String)>,
) -> Response<FakeBody> {
    let identity = ReplyIdentity::new(state, body);
    let with_usage = wants_usage(body);
    let mut events = vec![identity.delta_event(
        json!({"role": "assistant", "content": null}),
        None,
        with_usage,
    )];
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        let start = json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                           "function": {"name": name, "arguments": ""}}]});
        events.push(identity.delta_event(start, None, with_usage));
        let chars: Vec<char> = arguments.chars().collect();
        for piece in chars.chunks(7) {
            let fragment: String = piece.iter().collect();
            let delta =
                json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]});
            events.push(identity.delta_event(delta, None, with_usage));
        }
    }
    events.push(identity.delta_event(json!({}), Some("tool_calls"), with_usage));
    if with_usage {
        events.push(identity.chunk_event(json!([]), Some(usage_json(body, calls.len()))));
    }
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    let (sender, response) = sse_response();
    let state = Arc::clone(state);
    tokio::spawn(async move {
        for event in events {
            if !send_or_count(&state, &sender, event).await {
                return;
            }
        }
    });
    response
}

fn stream_hang(state: &Arc<FakeState>, body: &Value, first_chunk: String) -> Response<FakeBody> {
    let identity = ReplyIdentity::new(state, body);
    let with_usage = wants_usage(body);
    let events = [
        identity.delta_event(
            json!({"role": "assistant", "content": ""}),
            None,
            with_usage,
        ),
        identity.delta_event(json!({ "content": first_chunk }), None, with_usage),
    ];
    let (sender, response) = sse_response();
    let state = Arc::clone(state);
    tokio::spawn(async move {
        for event in events {
            if !send_or_count(&state, &sender, event).await {
                return;
            }
        }
        tokio::select! {
            _ = state.shutdown.cancelled() => {}
            _ = sender.closed() => count_disconnect(&state),
        }
    });
    response
}

/// Sends one body frame; a gone client is counted as a disconnect.
async fn send_or_count(state: &FakeState, sender: &mpsc::Sender<Bytes>, event: Bytes) -> bool {
    tokio::select! {
        _ = state.shutdown.cancelled() => false,
        sent = sender.send(event) => {
            if sent.is_err() {
                count_disconnect(state);
            }
            sent.is_ok()
        }
    }
}

fn count_disconnect(state: &FakeState) {
    state.disconnects.send_modify(|n| *n += 1);
}

/// A streaming `text/event-stream` response fed by the returned sender.
fn sse_response() -> (mpsc::Sender<Bytes>, Response<FakeBody>) {
    let (sender, receiver) = mpsc::channel::<Bytes>(1);
    let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let bytes = receiver.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(bytes)), receiver))
    });
    let response = Response::builder()
        .header("content-type", "text/event-stream; charset=utf-8")
        .header("cache-control", "no-cache")
        .body(StreamBody::new(frames).boxed())
        .expect("static response parts are valid");
    (sender, response)
}

fn raw_response(
    state: &Arc<FakeState>,
    status: u16,
    headers: Vec<(String, String)>,
    chunks: Vec<Vec<u8>>,
) -> Response<FakeBody> {
    let (sender, mut response) = sse_response();
    *response.status_mut() = StatusCode::from_u16(status).expect("test passes a valid status");
    response.headers_mut().remove("content-type");
    for (name, value) in headers {
        let name = hyper::header::HeaderName::from_bytes(name.as_bytes())
            .expect("test passes a valid header name");
        let value =
            hyper::header::HeaderValue::from_str(&value).expect("test passes a valid header value");
        response.headers_mut().append(name, value);
    }
    let state = Arc::clone(state);
    tokio::spawn(async move {
        for chunk in chunks {
            if !send_or_count(&state, &sender, Bytes::from(chunk)).await {
                return;
            }
        }
    });
    response
}

fn completion_response(state: &FakeState, body: &Value, chunks: &[String]) -> Response<FakeBody> {
    let identity = ReplyIdentity::new(state, body);
    let completion = json!({
        "id": identity.id,
        "object": "chat.completion",
        "created": identity.created,
        "model": identity.model,
        "system_fingerprint": "fp_fake",
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": chunks.concat(), "refusal": null },
            "logprobs": null,
            "finish_reason": "stop",
        }],
        "usage": usage_json(body, chunks.len()),
    });
    json_response(200, &completion, None)
}

/// OpenAI's error body: `{"error":{"message","type","param","code"}}`.
fn error_response(status: u16, message: &str, retry_after_secs: Option<u64>) -> Response<FakeBody> {
    let (kind, code) = match status {
        401 => ("invalid_request_error", Value::from("invalid_api_key")),
        404 => ("invalid_request_error", Value::Null),
        429 => ("requests", Value::from("rate_limit_exceeded")),
        400..=499 => ("invalid_request_error", Value::Null),
        _ => ("server_error", Value::Null),
    };
    let body =
        json!({ "error": { "message": message, "type": kind, "param": null, "code": code } });
    json_response(status, &body, retry_after_secs)
}

fn json_response(status: u16, body: &Value, retry_after_secs: Option<u64>) -> Response<FakeBody> {
    let mut builder = Response::builder()
        .status(StatusCode::from_u16(status).expect("test passes a valid status"))
        .header("content-type", "application/json");
    if let Some(seconds) = retry_after_secs {
        builder = builder.header("retry-after", seconds.to_string());
    }
    builder
        .body(Full::new(Bytes::from(body.to_string())).boxed())
        .expect("static response parts are valid")
}
