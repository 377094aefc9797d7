//! One Slack app account's Socket Mode connection, kept alive:
//! `auth.test` (who the bot is) → `apps.connections.open` (a fresh
//! WebSocket URL each time) → `hello` → envelopes, each acked with its
//! `envelope_id` before it is handled. `events_api` envelopes carry the
//! message events; `disconnect` asks for a new connection (`link_disabled`
//! means Socket Mode is off: give up). Pings keep a silent socket from
//! going unnoticed; failed attempts back off exponentially; token errors
//! stop the account.
//!
//! This file must not send chat messages (the channel does, via `web.rs`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::translate::{self, TranslateContext};
use super::web::{SlackIdentity, SlackWeb, AUTH_ERRORS};
use crate::channels::account::{pause, AccountState, Backoff};
use crate::channels::media::{add_to_event, MediaLimits};
use crate::channels::ws::{self, WsStream};
use crate::channels::{InboundError, InboundSink, SendError};

/// Largest Socket Mode message accepted.
pub const MAX_SOCKET_MESSAGE_BYTES: usize = 1024 * 1024;
/// Longest wait for `hello` after connecting.
pub const HELLO_TIMEOUT_MS: u64 = 30_000;
/// A ping is sent after this long without any frame; twice as long
/// without one means the socket is dead.
pub const SOCKET_IDLE_PING_MS: u64 = 30_000;
const CLOSE_TIMEOUT_MS: u64 = 1_000;

/// What the socket task needs to know about its account.
#[derive(Debug, Clone)]
pub struct SocketAccount {
    pub account_id: String,
    pub allow_bots: bool,
    /// Where shared files go and how big they may be.
    pub media: MediaLimits,
}

/// Translates an `events_api` payload, downloads its files and hands it to
/// the sink. `Ok` also for payloads that carry no message to answer.
pub async fn hand_over(
    web: &SlackWeb,
    media: &MediaLimits,
    ctx: &TranslateContext,
    payload: &Value,
    sink: &dyn InboundSink,
) -> Result<(), InboundError> {
    let Some(mut event) = translate::translate_event(payload, ctx) else {
        return Ok(());
    };
    for file in translate::files_of(payload) {
        add_to_event(&mut event, web.fetch_file(media, &file).await);
    }
    sink.deliver(event).await
}

enum Ending {
    Stopped,
    Fatal(String),
    Reconnect { reason: String, established: bool },
}

fn reconnect(reason: String) -> Ending {
    Ending::Reconnect {
        reason,
        established: false,
    }
}

/// Token errors end the account; everything else is retried.
fn web_failure(call: &str, error: SendError) -> Ending {
    match &error {
        SendError::Permanent(code) if AUTH_ERRORS.contains(&code.as_str()) => {
            Ending::Fatal(format!("{call}: {code} (check the token)"))
        }
        _ => reconnect(format!("{call}: {error}")),
    }
}

/// Runs the account's Socket Mode connection until `cancel` or a fatal error.
pub async fn run_account(
    account: SocketAccount,
    web: SlackWeb,
    sink: Arc<dyn InboundSink>,
    shared: Arc<AccountState<SlackIdentity>>,
    cancel: CancellationToken,
) {
    shared.set_running(true);
    let id = account.account_id.clone();
    let task = SocketTask {
        account,
        web,
        sink,
        shared: shared.clone(),
    };
    let mut backoff = Backoff::default();
    loop {
        backoff.attempt();
        match task.connect_and_run(&cancel).await {
            Ending::Stopped => break,
            Ending::Fatal(reason) => {
                log::error!("slack[{id}]: {reason}; not reconnecting");
                shared.disconnected(reason);
                break;
            }
            Ending::Reconnect {
                reason,
                established,
            } => {
                log::warn!("slack[{id}]: {reason}; reconnecting");
                shared.disconnected(reason);
                if !pause(&cancel, backoff.next_delay_ms(established)).await {
                    break;
                }
            }
        }
    }
    shared.set_running(false);
}

struct SocketTask {
    account: SocketAccount,
    web: SlackWeb,
    sink: Arc<dyn InboundSink>,
    shared: Arc<AccountState<SlackIdentity>>,
}

impl SocketTask {
    async fn connect_and_run(&self, cancel: &CancellationToken) -> Ending {
        let opened = tokio::select! {
            _ = cancel.cancelled() => return Ending::Stopped,
            opened = self.open() => opened,
        };
        let (mut ws, bot) = match opened {
            Ok(opened) => opened,
            Err(ending) => return ending,
        };
        self.shared.connected();
        let ctx = TranslateContext {
            account_id: self.account.account_id.clone(),
            bot,
            allow_bots: self.account.allow_bots,
        };
        let ending = self.read_loop(&mut ws, &ctx, cancel).await;
        let code = match ending {
            Ending::Stopped => CloseCode::Normal,
            _ => CloseCode::Away,
        };
        let frame = CloseFrame {
            code,
            reason: "".into(),
        };
        let wait = Duration::from_millis(CLOSE_TIMEOUT_MS);
        let _ = tokio::time::timeout(wait, ws.close(Some(frame))).await;
        ending
    }

    /// Identity (once), a fresh socket URL, the connection and its `hello`.
    async fn open(&self) -> Result<(WsStream, SlackIdentity), Ending> {
        let bot = match self.shared.identity() {
            Some(bot) => bot,
            None => {
                let bot = self
                    .web
                    .auth_test()
                    .await
                    .map_err(|e| web_failure("auth.test", e))?;
                self.shared.set_identity(bot.clone());
                bot
            }
        };
        let url = self
            .web
            .open_socket_url()
            .await
            .map_err(|e| web_failure("apps.connections.open", e))?;
        let mut ws = ws::connect(&url, MAX_SOCKET_MESSAGE_BYTES)
            .await
            .map_err(|e| reconnect(format!("socket connect: {e}")))?;
        read_hello(&mut ws).await?;
        Ok((ws, bot))
    }

    async fn read_loop(
        &self,
        ws: &mut WsStream,
        ctx: &TranslateContext,
        cancel: &CancellationToken,
    ) -> Ending {
        let idle = Duration::from_millis(SOCKET_IDLE_PING_MS);
        let mut last_frame = Instant::now();
        let mut pinged = false;
        loop {
            let message = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ending::Stopped,
                message = ws.next() => message,
                _ = tokio::time::sleep_until(last_frame + idle) => {
                    if pinged {
                        return established(reconnect("socket silent: no pong".into()));
                    }
                    if let Err(e) = ws.send(Message::Ping(Vec::new().into())).await {
                        return established(reconnect(format!("socket send: {e}")));
                    }
                    pinged = true;
                    last_frame = Instant::now();
                    continue;
                }
            };
            last_frame = Instant::now();
            pinged = false;
            let text = match message {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Close(_))) | None => {
                    return established(reconnect("socket closed by Slack".into()))
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return established(reconnect(format!("socket read: {e}"))),
            };
            let Ok(envelope) = serde_json::from_str::<Value>(text.as_str()) else {
                continue;
            };
            if let Some(ending) = self.on_envelope(ws, ctx, &envelope).await {
                return ending;
            }
        }
    }

    /// Acks the envelope first, then handles it; `Some` ends the connection.
    async fn on_envelope(
        &self,
        ws: &mut WsStream,
        ctx: &TranslateContext,
        envelope: &Value,
    ) -> Option<Ending> {
        if let Some(id) = envelope.get("envelope_id").and_then(Value::as_str) {
            let ack = json!({"envelope_id": id}).to_string();
            if let Err(e) = ws.send(Message::text(ack)).await {
                return Some(established(reconnect(format!("socket send: {e}"))));
            }
        }
        match envelope.get("type").and_then(Value::as_str) {
            Some("events_api") => {
                let payload = envelope.get("payload")?;
                self.shared.inbound_now();
                let sink = self.sink.as_ref();
                let media = &self.account.media;
                if let Err(e) = hand_over(&self.web, media, ctx, payload, sink).await {
                    log::warn!(
                        "slack[{}]: inbound message not accepted: {e}",
                        self.account.account_id
                    );
                }
                None
            }
            Some("disconnect") => {
                let reason = envelope
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown");
                if reason == "link_disabled" {
                    return Some(Ending::Fatal(
                        "Socket Mode is disabled for the app (link_disabled)".into(),
                    ));
                }
                Some(established(reconnect(format!(
                    "Slack asked to reconnect ({reason})"
                ))))
            }
            _ => None,
        }
    }
}

/// The connection had worked: the next attempt starts without delay.
fn established(ending: Ending) -> Ending {
    match ending {
        Ending::Reconnect { reason, .. } => Ending::Reconnect {
            reason,
            established: true,
        },
        other => other,
    }
}

async fn read_hello(ws: &mut WsStream) -> Result<(), Ending> {
    let deadline = Instant::now() + Duration::from_millis(HELLO_TIMEOUT_MS);
    loop {
        let message = tokio::time::timeout_at(deadline, ws.next())
            .await
            .map_err(|_| reconnect("no hello from Slack".into()))?;
        match message {
            Some(Ok(Message::Text(text))) => {
                let frame: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
                if frame.get("type").and_then(Value::as_str) == Some("hello") {
                    return Ok(());
                }
            }
            Some(Ok(Message::Close(_))) | None => {
                return Err(reconnect("socket closed before hello".into()))
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(reconnect(format!("socket read: {e}"))),
        }
    }
}
