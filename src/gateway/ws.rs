//! One WebSocket connection: challenge, handshake, then the request loop.
//!
//! A connection owns a reader (this task) and a writer task fed by its
//! byte-counted outbound queue. Requests run as their own tasks so a slow
//! method never blocks the socket; a malformed frame closes this connection
//! only. Nothing here panics on client input.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::clients::{ClientInfo, ClientSender, Outbound, PresenceTiming};
use super::frames::{self, parse_client_frame, ClientFrame, ErrorShape, Request};
use super::handshake::Peer;
use super::preauth_io::{PreauthGate, PreauthLimitedIo};
use super::state::{GatewayState, MAX_IN_FLIGHT_REQUESTS, MAX_PREAUTH_PAYLOAD_BYTES};
use super::{connect_params, handshake, methods};
use crate::system::clock::now_ms;

/// Frames written before one flush at most (the writer takes what is
/// queued, up to this, per socket write).
const MAX_FRAMES_PER_WRITE: usize = 64;
/// Bytes read from a socket before `hello-ok` (frames plus WebSocket framing).
pub const PREAUTH_READ_BUDGET_BYTES: usize = MAX_PREAUTH_PAYLOAD_BYTES + 1024;

/// Runs one upgraded connection to its end. The caller has claimed the
/// address's pre-auth slot; it is released here.
pub async fn serve<S>(
    state: Arc<GatewayState>,
    ws: WebSocketStream<PreauthLimitedIo<S>>,
    gate: Arc<PreauthGate>,
    peer: Peer,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let ip = peer.addr();
    let conn_id = uuid::Uuid::new_v4().to_string();
    let (sink, mut stream) = ws.split();
    let (sender, rx, queued) = ClientSender::channel(state.limits.max_buffered_bytes);
    let writer = tokio::spawn(write_loop(sink, rx, queued));
    let nonce = uuid::Uuid::new_v4().to_string();
    sender.send(
        frames::event_frame(
            "connect.challenge",
            &json!({"nonce": nonce, "ts": now_ms()}),
            None,
            None,
        ),
        false,
    );
    let accepted =
        handshake_phase(&state, &mut stream, &sender, &gate, &nonce, &peer, &conn_id).await;
    state.release_preauth(ip);
    if let Some(info) = accepted {
        gate.open();
        let info = Arc::new(info);
        broadcast_presence(&state);
        request_loop(&state, &mut stream, &sender, &info).await;
        state.clients.remove(&conn_id);
        broadcast_presence(&state);
    }
    drop(sender);
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
}

async fn write_loop<W>(
    mut sink: W,
    mut rx: mpsc::UnboundedReceiver<Outbound>,
    queued: Arc<AtomicUsize>,
) where
    W: futures_util::Sink<Message> + Unpin,
{
    while let Some(first) = rx.recv().await {
        // Frames queued meanwhile (a turn's last events come together) go
        // out in one write: the buffer is flushed once per batch.
        let mut next = Some(first);
        let (mut frames, mut bytes, mut close) = (0, 0, None);
        let mut fed = Ok(());
        while let Some(item) = next.take() {
            match item {
                Outbound::Text(text) => {
                    bytes += text.len();
                    fed = sink.feed(Message::text(text)).await;
                }
                Outbound::Close { code, reason } => {
                    close = Some(CloseFrame {
                        code: CloseCode::from(code),
                        reason: reason.into(),
                    });
                    break;
                }
            }
            frames += 1;
            if fed.is_ok() && frames < MAX_FRAMES_PER_WRITE {
                next = rx.try_recv().ok();
            }
        }
        let flushed = sink.flush().await;
        queued.fetch_sub(bytes, Ordering::AcqRel);
        if fed.is_err() || flushed.is_err() {
            break;
        }
        if let Some(frame) = close {
            let _ = sink.send(Message::Close(Some(frame))).await;
            break;
        }
    }
    let _ = sink.close().await;
}

/// At most one `presence` snapshot per this long (`ClientRegistry::presence_timing`).
const PRESENCE_WINDOW: Duration = Duration::from_millis(250);

fn broadcast_presence(state: &Arc<GatewayState>) {
    match state.clients.presence_timing(PRESENCE_WINDOW) {
        PresenceTiming::Now => send_presence(state),
        PresenceTiming::AlreadyDue => {}
        PresenceTiming::Later(wait) => {
            let later = state.clone();
            state.tasks.spawn(async move {
                tokio::time::sleep(wait).await;
                later.clients.presence_sent_later();
                send_presence(&later);
            });
        }
    }
}

fn send_presence(state: &GatewayState) {
    let payload = json!({"presence": methods::health::presence_list(state)});
    state.clients.broadcast(
        "presence",
        &payload,
        super::clients::BroadcastOptions {
            drop_if_slow: true,
            scope: None,
            state_version: Some(state.clients.state_version()),
        },
    );
}

fn refuse(sender: &ClientSender, id: Option<&str>, error: &ErrorShape, code: u16, reason: &str) {
    if let Some(id) = id {
        sender.send(frames::response_err(id, error, None), false);
    }
    sender.close(code, reason);
}

/// Reads frames until a valid `connect` arrives; `None` when refused or gone.
async fn handshake_phase<R>(
    state: &GatewayState,
    stream: &mut R,
    sender: &ClientSender,
    gate: &PreauthGate,
    nonce: &str,
    peer: &Peer,
    conn_id: &str,
) -> Option<ClientInfo>
where
    R: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(state.limits.handshake_timeout_ms);
    loop {
        let next = tokio::select! {
            next = tokio::time::timeout_at(deadline, stream.next()) => next,
            _ = state.shutdown.cancelled() => {
                sender.close(1012, "service restart");
                return None;
            }
        };
        let message = match next {
            Err(_) => {
                sender.close(1008, "handshake timeout");
                return None;
            }
            Ok(None) => return None,
            Ok(Some(Err(_))) => {
                if gate.overflowed() {
                    sender.close(1009, "preauth payload too large");
                }
                return None;
            }
            Ok(Some(Ok(message))) => message,
        };
        let text = match message {
            Message::Text(text) => text,
            Message::Ping(_) | Message::Pong(_) => continue,
            Message::Close(_) => return None,
            Message::Binary(_) | Message::Frame(_) => {
                sender.close(1008, "invalid request frame");
                return None;
            }
        };
        if text.len() > MAX_PREAUTH_PAYLOAD_BYTES {
            sender.close(1009, "preauth payload too large");
            return None;
        }
        return connect(state, text.as_str(), sender, nonce, peer, conn_id);
    }
}

fn connect(
    state: &GatewayState,
    text: &str,
    sender: &ClientSender,
    nonce: &str,
    peer: &Peer,
    conn_id: &str,
) -> Option<ClientInfo> {
    let ip = peer.addr();
    let request = match parse_client_frame(text) {
        Ok(ClientFrame::Request(request)) => request,
        Ok(ClientFrame::Cancel { id }) => {
            let error = ErrorShape::invalid("invalid handshake: first request must be connect");
            refuse(sender, Some(&id), &error, 1008, "invalid handshake");
            return None;
        }
        Err(e) => {
            let error = ErrorShape::invalid("invalid request frame");
            refuse(
                sender,
                e.id.as_deref(),
                &error,
                1008,
                "invalid request frame",
            );
            return None;
        }
    };
    if request.method != "connect" {
        let error = ErrorShape::invalid("invalid handshake: first request must be connect");
        refuse(sender, Some(&request.id), &error, 1008, "invalid handshake");
        return None;
    }
    let params = match connect_params::parse(&request.params) {
        Ok(params) => params,
        Err(message) => {
            let error = ErrorShape::invalid(format!("invalid connect params: {message}"));
            refuse(
                sender,
                Some(&request.id),
                &error,
                1008,
                "invalid connect params",
            );
            return None;
        }
    };
    let decision = tokio::task::block_in_place(|| {
        handshake::decide(state, &params, nonce, peer, conn_id, now_ms())
    });
    match decision {
        Ok(accepted) => {
            let hello = handshake::hello_ok(state, &accepted, methods::METHODS, methods::EVENTS);
            state.clients.insert_with_hello(
                accepted.info.clone(),
                sender.clone(),
                frames::response_ok(&request.id, hello),
            );
            log::info!(
                "client {} ({} {}) connected from {ip} as {} with protocol {}",
                conn_id,
                accepted.info.client_id,
                accepted.info.client_version,
                accepted.info.role,
                accepted.info.protocol
            );
            Some(accepted.info)
        }
        Err(refusal) => {
            log::info!("refused connect from {ip}: {}", refusal.error.message);
            refuse(
                sender,
                Some(&request.id),
                &refusal.error,
                refusal.close_code,
                &refusal.close_reason,
            );
            None
        }
    }
}

/// Reads requests until the socket closes or the gateway stops.
async fn request_loop<R>(
    state: &Arc<GatewayState>,
    stream: &mut R,
    sender: &ClientSender,
    info: &Arc<ClientInfo>,
) where
    R: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let mut in_flight: HashMap<String, tokio::task::AbortHandle> = HashMap::new();
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            _ = state.shutdown.cancelled() => {
                sender.close(1012, "service restart");
                break;
            }
        };
        let text = match next {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Binary(_) | Message::Frame(_))) => {
                sender.close(1008, "invalid request frame");
                break;
            }
            Some(Err(tokio_tungstenite::tungstenite::Error::Capacity(_))) => {
                sender.close(1009, "payload too large");
                break;
            }
            Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
        };
        in_flight.retain(|_, handle| !handle.is_finished());
        match parse_client_frame(text.as_str()) {
            Ok(ClientFrame::Request(request)) => {
                if in_flight.len() >= MAX_IN_FLIGHT_REQUESTS {
                    let error =
                        ErrorShape::unavailable("too many requests in flight on this connection")
                            .retry_after(1000);
                    sender.send(frames::response_err(&request.id, &error, None), false);
                    continue;
                }
                let id = request.id.clone();
                let handle = spawn_request(state.clone(), info.clone(), sender.clone(), request);
                in_flight.insert(id, handle);
            }
            Ok(ClientFrame::Cancel { id }) => {
                if let Some(handle) = in_flight.remove(&id) {
                    handle.abort();
                    let error = ErrorShape::invalid("request cancelled");
                    sender.send(frames::response_err(&id, &error, None), false);
                }
            }
            Err(e) => {
                let error = ErrorShape::invalid(e.message);
                refuse(
                    sender,
                    e.id.as_deref(),
                    &error,
                    1008,
                    "invalid request frame",
                );
                break;
            }
        }
    }
}

fn spawn_request(
    state: Arc<GatewayState>,
    info: Arc<ClientInfo>,
    sender: ClientSender,
    request: Request,
) -> tokio::task::AbortHandle {
    let tasks = state.tasks.clone();
    let task = tasks.spawn(async move {
        let id = request.id.clone();
        let reply = methods::handle(&state, &info, request).await;
        match reply {
            methods::Reply::Ok(payload) => {
                sender.send(frames::response_ok(&id, payload), false);
            }
            methods::Reply::Err(error) => {
                sender.send(frames::response_err(&id, &error, None), false);
            }
            methods::Reply::Sent => {}
        }
    });
    task.abort_handle()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// What a socket saw: frames and the flushes between them.
    #[derive(Debug, PartialEq)]
    enum Seen {
        Frame(Message),
        Flush,
    }

    /// A sink that records what the writer does with it.
    #[derive(Default)]
    struct Recorder {
        seen: Vec<Seen>,
    }

    impl futures_util::Sink<Message> for Recorder {
        type Error = std::io::Error;
        fn poll_ready(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
        fn start_send(mut self: Pin<&mut Self>, item: Message) -> Result<(), Self::Error> {
            self.seen.push(Seen::Frame(item));
            Ok(())
        }
        fn poll_flush(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Result<(), Self::Error>> {
            if !matches!(self.seen.last(), None | Some(Seen::Flush)) {
                self.seen.push(Seen::Flush);
            }
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn frames_queued_together_go_out_in_order_in_one_write() {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        for text in ["a", "bb", "ccc"] {
            queued.fetch_add(text.len(), Ordering::AcqRel);
            tx.send(Outbound::Text(text.into())).expect("queue");
        }
        tx.send(Outbound::Close {
            code: 1000,
            reason: "bye".into(),
        })
        .expect("queue close");
        let mut recorder = Recorder::default();
        write_loop(&mut recorder, rx, queued.clone()).await;
        let close = Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "bye".into(),
        }));
        assert_eq!(
            recorder.seen,
            vec![
                Seen::Frame(Message::text("a")),
                Seen::Frame(Message::text("bb")),
                Seen::Frame(Message::text("ccc")),
                Seen::Flush,
                Seen::Frame(close),
                Seen::Flush,
            ]
        );
        assert_eq!(
            queued.load(Ordering::Acquire),
            0,
            "every byte is accounted for"
        );
    }

    #[tokio::test]
    async fn a_long_queue_is_written_in_bounded_batches() {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let total = MAX_FRAMES_PER_WRITE * 2 + 1;
        for n in 0..total {
            let text = n.to_string();
            queued.fetch_add(text.len(), Ordering::AcqRel);
            tx.send(Outbound::Text(text.into())).expect("queue");
        }
        drop(tx);
        let mut recorder = Recorder::default();
        write_loop(&mut recorder, rx, queued.clone()).await;
        let flushes = recorder.seen.iter().filter(|s| **s == Seen::Flush).count();
        assert_eq!(
            flushes, 3,
            "{total} frames in batches of {MAX_FRAMES_PER_WRITE}"
        );
        let frames: Vec<String> = recorder
            .seen
            .iter()
            .filter_map(|s| match s {
                Seen::Frame(Message::Text(text)) => Some(text.to_string()),
                _ => None,
            })
            .collect();
        let expected: Vec<String> = (0..total).map(|n| n.to_string()).collect();
        assert_eq!(frames, expected);
        assert_eq!(queued.load(Ordering::Acquire), 0);
    }
}
