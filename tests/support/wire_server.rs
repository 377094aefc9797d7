//! A scripted HTTP/1 server on 127.0.0.1 that the provider fakes build on:
//! it records every request (method, path, lower-cased headers, JSON body),
//! lets the fake refuse a malformed one (before any scripted reply is used),
//! pops the next scripted reply, lets the fake render it as an [`Answer`]
//! (status, headers, body pieces) and streams the pieces, counting clients
//! that go away before the end. It knows no provider's format.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// A request as the fake received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

/// How to answer one request.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Body pieces, each written as its own frame.
    pub pieces: Vec<Bytes>,
    pub piece_delay_ms: u64,
    /// Keep the body open after the pieces until the client leaves.
    pub hang: bool,
}

/// Renders a scripted reply (or `None`: nothing queued) for a request.
pub type Render<R> = fn(&RecordedRequest, Option<R>) -> Answer;
/// The service's refusal of a malformed request, if it is one; a refused
/// request leaves the scripted replies queued.
pub type Check = fn(&RecordedRequest) -> Option<Answer>;

struct State<R> {
    replies: Mutex<VecDeque<R>>,
    requests: Mutex<Vec<RecordedRequest>>,
    disconnects: watch::Sender<usize>,
    shutdown: CancellationToken,
    check: Check,
    render: Render<R>,
}

/// A running server; it stops when dropped.
pub struct WireServer<R: Send + 'static> {
    pub addr: SocketAddr,
    state: Arc<State<R>>,
}

impl<R: Send + 'static> WireServer<R> {
    pub async fn start(check: Check, render: Render<R>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake on loopback");
        let addr = listener.local_addr().expect("listener has an address");
        let state = Arc::new(State {
            replies: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
            disconnects: watch::Sender::new(0),
            shutdown: CancellationToken::new(),
            check,
            render,
        });
        tokio::spawn(accept_loop(listener, Arc::clone(&state)));
        WireServer { addr, state }
    }

    pub fn push_reply(&self, reply: R) {
        self.state.replies.lock().expect("lock").push_back(reply);
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state.requests.lock().expect("lock").clone()
    }

    pub async fn wait_for_disconnects(&self, count: usize) {
        let mut seen = self.state.disconnects.subscribe();
        seen.wait_for(|n| *n >= count).await.expect("state alive");
    }
}

impl<R: Send + 'static> Drop for WireServer<R> {
    fn drop(&mut self) {
        self.state.shutdown.cancel();
    }
}

async fn accept_loop<R: Send + 'static>(listener: TcpListener, state: Arc<State<R>>) {
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

async fn handle<R: Send + 'static>(
    state: Arc<State<R>>,
    request: Request<Incoming>,
) -> Result<Response<BoxBody<Bytes, Infallible>>, Infallible> {
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let headers = request
        .headers()
        .iter()
        .map(|(n, v)| {
            let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
            (n.as_str().to_ascii_lowercase(), value)
        })
        .collect();
    let bytes = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let recorded = RecordedRequest {
        method,
        path,
        headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    state.requests.lock().expect("lock").push(recorded.clone());
    let answer = match (state.check)(&recorded) {
        Some(refusal) => {
            eprintln!(
                "fake provider: refused {} {} ({})",
                recorded.method, recorded.path, refusal.status
            );
            refusal
        }
        None => {
            let queued = state.replies.lock().expect("lock").pop_front();
            (state.render)(&recorded, queued)
        }
    };
    let (sender, receiver) = mpsc::channel::<Bytes>(1);
    let frames = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let bytes = receiver.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(bytes)), receiver))
    });
    let mut builder =
        Response::builder().status(StatusCode::from_u16(answer.status).expect("valid status"));
    for (name, value) in &answer.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let response = builder
        .body(StreamBody::new(frames).boxed())
        .expect("valid response parts");
    tokio::spawn(feed(state, sender, answer));
    Ok(response)
}

async fn feed<R>(state: Arc<State<R>>, sender: mpsc::Sender<Bytes>, answer: Answer) {
    for (index, piece) in answer.pieces.into_iter().enumerate() {
        if index > 0 && answer.piece_delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(answer.piece_delay_ms)).await;
        }
        let sent = tokio::select! {
            _ = state.shutdown.cancelled() => return,
            sent = sender.send(piece) => sent,
        };
        if sent.is_err() {
            state.disconnects.send_modify(|n| *n += 1);
            return;
        }
    }
    if answer.hang {
        tokio::select! {
            _ = state.shutdown.cancelled() => {}
            _ = sender.closed() => state.disconnects.send_modify(|n| *n += 1),
        }
    }
}
