//! One bot account's gateway connection, kept alive: HELLO → heartbeats
//! at the given interval (first one jittered) → IDENTIFY, or RESUME with
//! the session id and last sequence after a reconnect → dispatches.
//! A heartbeat without ACK marks the connection zombied: it is dropped and
//! the session resumed. `op 7` reconnects and resumes, `op 9` resumes or
//! re-identifies as it says, close codes decide between resume,
//! re-identify and giving up (4004, 4010–4014), and failed attempts back
//! off exponentially.
//!
//! MESSAGE_CREATE goes through `translate.rs` to the sink; the sequence
//! number advances after the sink returned. This file must not send chat
//! messages (that is `rest.rs`, called by the channel).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::payload::{self, op, CloseAction, GatewayFrame, Ready};
use super::rest::DiscordRest;
use super::translate::{self, BotIdentity, ChannelInfo, TranslateContext};
use crate::channels::account::{pause, AccountState, Backoff};
use crate::channels::media::{add_to_event, MediaLimits};
use crate::channels::ws::{self, WsStream};
use crate::channels::{InboundSink, SendError};
use crate::config::schema::discord::AllowBots;

/// Largest gateway message accepted (GUILD_CREATE of a big guild).
pub const MAX_GATEWAY_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// Longest wait for HELLO after connecting.
pub const HELLO_TIMEOUT_MS: u64 = 30_000;
/// Most channels remembered per account (thread parents); cleared when full.
pub const MAX_CACHED_CHANNELS: usize = 2_000;
/// How long a clean close may take on stop.
const CLOSE_TIMEOUT_MS: u64 = 1_000;

/// What the gateway task needs to know about its account.
#[derive(Debug, Clone)]
pub struct GatewayAccount {
    pub account_id: String,
    pub token: String,
    /// Configured gateway URL; `None`: ask `GET /gateway/bot`.
    pub gateway_url: Option<String>,
    pub allow_bots: AllowBots,
    pub intents: u64,
    /// Where attachments go and how big they may be.
    pub media: MediaLimits,
}

/// How one connection ended.
#[derive(Debug)]
enum Ending {
    Stopped,
    Fatal(String),
    Reconnect {
        resume: bool,
        reason: String,
        /// READY or RESUMED was seen: the failure count starts over.
        established: bool,
        /// Extra wait Discord asks for (invalid session: 1–5 s).
        min_delay_ms: u64,
    },
}

#[derive(Debug, Default)]
struct Session {
    session_id: Option<String>,
    resume_url: Option<String>,
    seq: Option<u64>,
}

/// Runs the account's gateway until `cancel` or a fatal close.
pub async fn run_account(
    account: GatewayAccount,
    rest: DiscordRest,
    sink: Arc<dyn InboundSink>,
    shared: Arc<AccountState<BotIdentity>>,
    cancel: CancellationToken,
) {
    shared.set_running(true);
    let id = account.account_id.clone();
    let mut task = GatewayTask {
        account,
        rest,
        sink,
        shared: shared.clone(),
        session: Session::default(),
        channels: HashMap::new(),
        fetched_gateway_url: None,
    };
    let mut backoff = Backoff::default();
    loop {
        backoff.attempt();
        let (resume, reason, established, min_delay_ms) = match task.connect_and_run(&cancel).await
        {
            Ending::Stopped => break,
            Ending::Fatal(reason) => {
                log::error!("discord[{id}]: {reason}; not reconnecting");
                shared.disconnected(reason);
                break;
            }
            Ending::Reconnect {
                resume,
                reason,
                established,
                min_delay_ms,
            } => (resume, reason, established, min_delay_ms),
        };
        log::warn!("discord[{id}]: {reason}; reconnecting");
        shared.disconnected(reason);
        if !resume {
            task.session = Session::default();
        }
        let delay_ms = backoff.next_delay_ms(established).max(min_delay_ms);
        if !pause(&cancel, delay_ms).await {
            break;
        }
    }
    shared.set_running(false);
}

/// `url` with the gateway's version and encoding query (`v=10&encoding=json`).
fn with_query(url: &str) -> Result<String, String> {
    let mut parsed = reqwest::Url::parse(url).map_err(|e| format!("gateway URL {url:?}: {e}"))?;
    let kept: Vec<(String, String)> = parsed
        .query_pairs()
        .filter(|(key, _)| key != "v" && key != "encoding")
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect();
    parsed
        .query_pairs_mut()
        .clear()
        .extend_pairs(kept)
        .append_pair("v", payload::GATEWAY_VERSION)
        .append_pair("encoding", "json");
    Ok(parsed.into())
}

struct GatewayTask {
    account: GatewayAccount,
    rest: DiscordRest,
    sink: Arc<dyn InboundSink>,
    shared: Arc<AccountState<BotIdentity>>,
    session: Session,
    channels: HashMap<String, ChannelInfo>,
    /// `GET /gateway/bot`'s answer, asked once per task.
    fetched_gateway_url: Option<String>,
}

/// Heartbeat bookkeeping of one connection.
struct Heartbeat {
    interval: Duration,
    next: Instant,
    acked: bool,
}

impl GatewayTask {
    async fn gateway_url(&mut self) -> Result<String, String> {
        if let Some(url) = self
            .session
            .resume_url
            .as_ref()
            .filter(|_| self.session.session_id.is_some())
        {
            return Ok(url.clone());
        }
        if let Some(url) = self
            .account
            .gateway_url
            .as_ref()
            .or(self.fetched_gateway_url.as_ref())
        {
            return Ok(url.clone());
        }
        let url = self
            .rest
            .gateway_url()
            .await
            .map_err(|e| format!("GET /gateway/bot: {e}"))?;
        self.fetched_gateway_url = Some(url.clone());
        Ok(url)
    }

    /// One connection from URL to its end; `cancel` ends it with a
    /// normal close (or at once while still connecting).
    async fn connect_and_run(&mut self, cancel: &CancellationToken) -> Ending {
        let opened = tokio::select! {
            _ = cancel.cancelled() => return Ending::Stopped,
            opened = self.open() => opened,
        };
        let (mut ws, interval_ms) = match opened {
            Ok(opened) => opened,
            Err(ending) => return ending,
        };
        let hello = self.hello_reply();
        if let Err(e) = ws.send(Message::text(hello)).await {
            return reconnect(true, format!("gateway send: {e}"), false);
        }
        let interval = Duration::from_millis(interval_ms.max(1));
        let jitter = interval.mul_f64(rand::random::<f64>());
        let mut beat = Heartbeat {
            interval,
            next: Instant::now() + jitter,
            acked: true,
        };
        let mut established = false;
        let ending = self
            .read_loop(&mut ws, &mut beat, &mut established, cancel)
            .await;
        let code = match &ending {
            Ending::Stopped => CloseCode::Normal,
            // Not 1000/1001: Discord keeps the session resumable.
            _ => CloseCode::Library(4000),
        };
        close(&mut ws, code).await;
        match ending {
            Ending::Reconnect {
                resume,
                reason,
                min_delay_ms,
                ..
            } => Ending::Reconnect {
                resume,
                reason,
                established,
                min_delay_ms,
            },
            other => other,
        }
    }

    /// Connects and waits for HELLO: the socket and the heartbeat interval.
    async fn open(&mut self) -> Result<(WsStream, u64), Ending> {
        let url = self
            .gateway_url()
            .await
            .map_err(|reason| reconnect(true, reason, false))?;
        let url = with_query(&url).map_err(|reason| reconnect(true, reason, false))?;
        let mut ws = ws::connect(&url, MAX_GATEWAY_MESSAGE_BYTES)
            .await
            .map_err(|e| reconnect(true, format!("gateway connect: {e}"), false))?;
        let interval_ms = read_hello(&mut ws).await?;
        Ok((ws, interval_ms))
    }

    fn hello_reply(&self) -> String {
        match &self.session.session_id {
            Some(session_id) => payload::resume(&self.account.token, session_id, self.session.seq),
            None => payload::identify(&self.account.token, self.account.intents),
        }
    }

    /// Reads frames until the connection ends. Frames already received
    /// are handled before a due heartbeat, so an ACK that arrived is never
    /// mistaken for a missing one.
    async fn read_loop(
        &mut self,
        ws: &mut WsStream,
        beat: &mut Heartbeat,
        established: &mut bool,
        cancel: &CancellationToken,
    ) -> Ending {
        loop {
            let ending = tokio::select! {
                biased;
                _ = cancel.cancelled() => Some(Ending::Stopped),
                message = ws.next() => self.on_ws_message(message, ws, beat, established).await,
                _ = tokio::time::sleep_until(beat.next) => self.heartbeat(ws, beat).await,
            };
            if let Some(ending) = ending {
                return ending;
            }
        }
    }

    /// Sends the due heartbeat; `Some` when the last one was never acked.
    async fn heartbeat(&self, ws: &mut WsStream, beat: &mut Heartbeat) -> Option<Ending> {
        if !beat.acked {
            return Some(reconnect(
                true,
                "no heartbeat ACK: zombied connection".into(),
                false,
            ));
        }
        if let Err(e) = ws
            .send(Message::text(payload::heartbeat(self.session.seq)))
            .await
        {
            return Some(reconnect(true, format!("gateway send: {e}"), false));
        }
        beat.acked = false;
        beat.next += beat.interval;
        None
    }

    async fn on_ws_message(
        &mut self,
        message: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>,
        ws: &mut WsStream,
        beat: &mut Heartbeat,
        established: &mut bool,
    ) -> Option<Ending> {
        let text = match message {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(frame))) => return Some(closed(frame)),
            Some(Ok(_)) => return None,
            Some(Err(e)) => return Some(reconnect(true, format!("gateway read: {e}"), false)),
            None => return Some(reconnect(true, "gateway connection ended".into(), false)),
        };
        let frame: GatewayFrame = match serde_json::from_str(text.as_str()) {
            Ok(frame) => frame,
            Err(e) => {
                log::debug!(
                    "discord[{}]: unreadable frame: {e}",
                    self.account.account_id
                );
                return None;
            }
        };
        match frame.op {
            op::DISPATCH => self.dispatch(frame, established).await,
            op::HEARTBEAT => {
                // The gateway asks for a beat now; the schedule stays.
                let beat_now = payload::heartbeat(self.session.seq);
                ws.send(Message::text(beat_now))
                    .await
                    .err()
                    .map(|e| reconnect(true, format!("gateway send: {e}"), false))
            }
            op::HEARTBEAT_ACK => {
                beat.acked = true;
                None
            }
            op::RECONNECT => Some(reconnect(true, "gateway asked to reconnect".into(), false)),
            op::INVALID_SESSION => {
                let resumable = frame.d.as_bool().unwrap_or(false);
                Some(Ending::Reconnect {
                    resume: resumable,
                    reason: format!("invalid session (resumable: {resumable})"),
                    established: false,
                    min_delay_ms: 1_000 + (4_000.0 * rand::random::<f64>()) as u64,
                })
            }
            _ => None,
        }
    }

    /// Handles one dispatch; `Some` ends the connection.
    async fn dispatch(&mut self, frame: GatewayFrame, established: &mut bool) -> Option<Ending> {
        let event = frame.t.as_deref().unwrap_or("");
        if event == "MESSAGE_CREATE" {
            self.on_message(&frame.d).await;
        }
        // After the sink returned: a resume replays what was not handed over.
        if let Some(seq) = frame.s {
            self.session.seq = Some(seq);
        }
        match event {
            "READY" => {
                let ready: Ready = match serde_json::from_value(frame.d) {
                    Ok(ready) => ready,
                    Err(e) => {
                        return Some(reconnect(false, format!("unreadable READY: {e}"), false))
                    }
                };
                self.session.session_id = Some(ready.session_id);
                self.session.resume_url = ready.resume_gateway_url;
                self.shared.set_identity(BotIdentity {
                    user_id: ready.user.id,
                    username: ready.user.username,
                });
                *established = true;
                self.shared.connected();
            }
            "RESUMED" => {
                *established = true;
                self.shared.connected();
            }
            _ => self.on_channel_event(event, &frame.d),
        }
        None
    }

    /// Keeps the channel cache (thread parents, names) current.
    fn on_channel_event(&mut self, event: &str, d: &Value) {
        match event {
            "GUILD_CREATE" => {
                for key in ["channels", "threads"] {
                    if let Some(list) = d.get(key).and_then(Value::as_array) {
                        list.iter().for_each(|c| self.remember_channel(c));
                    }
                }
            }
            "CHANNEL_CREATE" | "CHANNEL_UPDATE" | "THREAD_CREATE" | "THREAD_UPDATE" => {
                self.remember_channel(d)
            }
            "CHANNEL_DELETE" | "THREAD_DELETE" => {
                if let Some(id) = d.get("id").and_then(Value::as_str) {
                    self.channels.remove(id);
                }
            }
            _ => {}
        }
    }

    fn remember_channel(&mut self, channel: &Value) {
        if let Some((id, info)) = ChannelInfo::from_json(channel) {
            if self.channels.len() >= MAX_CACHED_CHANNELS {
                self.channels.clear();
            }
            self.channels.insert(id, info);
        }
    }

    async fn channel_info(&mut self, d: &Value) -> Option<ChannelInfo> {
        let channel_id = translate::needs_channel_info(d)?.to_string();
        if let Some(info) = self.channels.get(&channel_id) {
            return Some(info.clone());
        }
        match self.rest.get_channel(&channel_id).await {
            Ok(channel) => {
                self.remember_channel(&channel);
                self.channels.get(&channel_id).cloned()
            }
            Err(e) => {
                log::warn!(
                    "discord[{}]: channel {channel_id} lookup: {e}",
                    self.account.account_id
                );
                if let SendError::Permanent(_) = e {
                    // No access for good: a plain channel, not asked again.
                    let plain = serde_json::json!({"id": channel_id, "type": 0});
                    self.remember_channel(&plain);
                }
                None
            }
        }
    }

    async fn on_message(&mut self, d: &Value) {
        let Some(bot) = self.shared.identity() else {
            return;
        };
        let info = self.channel_info(d).await;
        let ctx = TranslateContext {
            account_id: self.account.account_id.clone(),
            bot,
            allow_bots: self.account.allow_bots,
        };
        let Some(mut event) = translate::translate_message(d, &ctx, info.as_ref()) else {
            return;
        };
        self.shared.inbound_now();
        for file in translate::attachments_of(d) {
            let outcome = self.rest.fetch_attachment(&self.account.media, &file).await;
            add_to_event(&mut event, outcome);
        }
        if let Err(e) = self.sink.deliver(event).await {
            log::warn!(
                "discord[{}]: inbound message not accepted: {e}",
                self.account.account_id
            );
        }
    }
}

fn reconnect(resume: bool, reason: String, established: bool) -> Ending {
    Ending::Reconnect {
        resume,
        reason,
        established,
        min_delay_ms: 0,
    }
}

async fn read_hello(ws: &mut WsStream) -> Result<u64, Ending> {
    let wait = Duration::from_millis(HELLO_TIMEOUT_MS);
    let deadline = Instant::now() + wait;
    loop {
        let message = tokio::time::timeout_at(deadline, ws.next())
            .await
            .map_err(|_| reconnect(true, "no HELLO from the gateway".into(), false))?;
        match message {
            Some(Ok(Message::Text(text))) => {
                let frame: GatewayFrame = serde_json::from_str(text.as_str())
                    .map_err(|e| reconnect(true, format!("unreadable HELLO: {e}"), false))?;
                if let Some(ms) = payload::hello_interval_ms(&frame) {
                    return Ok(ms);
                }
            }
            Some(Ok(Message::Close(frame))) => return Err(closed(frame)),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(reconnect(true, format!("gateway read: {e}"), false)),
            None => return Err(reconnect(true, "gateway closed before HELLO".into(), false)),
        }
    }
}

fn closed(frame: Option<CloseFrame>) -> Ending {
    let Some(frame) = frame else {
        return reconnect(true, "gateway closed without a code".into(), false);
    };
    let code = u16::from(frame.code);
    let reason = format!(
        "gateway closed with {code}: {}",
        payload::close_reason(code)
    );
    match payload::close_action(code) {
        CloseAction::Fatal => Ending::Fatal(reason),
        CloseAction::Reidentify => reconnect(false, reason, false),
        CloseAction::Resume => reconnect(true, reason, false),
    }
}

async fn close(ws: &mut WsStream, code: CloseCode) {
    let frame = CloseFrame {
        code,
        reason: "".into(),
    };
    let wait = Duration::from_millis(CLOSE_TIMEOUT_MS);
    let _ = tokio::time::timeout(wait, ws.close(Some(frame))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_query_is_appended_once() {
        assert_eq!(
            with_query("wss://gateway.discord.gg").expect("url"),
            "wss://gateway.discord.gg/?v=10&encoding=json"
        );
        assert_eq!(
            with_query("ws://127.0.0.1:9/gw?x=1&v=9").expect("url"),
            "ws://127.0.0.1:9/gw?x=1&v=10&encoding=json"
        );
    }
}
