//! One account's receive loop: wait for a managed daemon to answer
//! `/api/v1/check` (up to `startupTimeoutMs`), open `/api/v1/events`, read
//! it through the bounded SSE reader (a stream silent past
//! [`EVENT_IDLE_TIMEOUT_MS`] counts as dropped), translate each `receive` payload and
//! hand it to the message path; reconnect with backoff when the stream
//! ends or fails. The status says connected only while the stream is open
//! and keeps the last error. A malformed or oversized event is logged and
//! skipped; it never ends the loop.
//!
//! signal-cli has already taken a message from Signal's servers when it
//! pushes the event, so a message the message path cannot keep is retried
//! a few times and then reported lost (in the log and the status).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::channels::account::{pause, Backoff};
use crate::channels::media::add_to_event;
use crate::channels::{InboundEvent, InboundSink};
use crate::config::schema::signal::SignalEndpoint;

use super::sse::{SseItem, SseReader};
use super::translate::{translate, Attachment, Context, Translated};
use super::Account;

/// Tries at handing one message to the message path.
const DELIVERY_ATTEMPTS: u32 = 3;
/// How often a starting daemon is asked whether it is up.
const READY_POLL_MS: u64 = 200;
/// signal-cli writes a keep-alive every 15 s: a stream silent for four of
/// them is taken for dead (a hung daemon, a half-open connection).
pub const EVENT_IDLE_TIMEOUT_MS: u64 = 60_000;

pub(super) struct ReceiveLoop {
    pub account: Arc<Account>,
    pub sink: Arc<dyn InboundSink>,
    pub stop: CancellationToken,
    /// [`EVENT_IDLE_TIMEOUT_MS`] (shorter in tests).
    pub idle_timeout_ms: u64,
}

/// How one connection ended.
struct Ended {
    established: bool,
    reason: String,
}

impl ReceiveLoop {
    pub async fn run(self) {
        let mut backoff = Backoff::default();
        loop {
            backoff.attempt();
            let ended = self.connection().await;
            if self.stop.is_cancelled() {
                break;
            }
            self.account.state.disconnected(ended.reason.clone());
            log::warn!(
                "signal account {}: {}; reconnecting",
                self.account.id,
                ended.reason
            );
            self.account.count_reconnect();
            let delay = backoff.next_delay_ms(ended.established);
            if !pause(&self.stop, delay).await {
                break;
            }
        }
        self.account.state.set_running(false);
    }

    /// A managed daemon answering `/api/v1/check`, within its startup time.
    async fn wait_ready(&self, timeout_ms: u64) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            match self.account.rpc.check().await {
                Ok(()) => return Ok(()),
                Err(error) if Instant::now() >= deadline => {
                    return Err(format!(
                        "the signal-cli daemon did not answer within {timeout_ms} ms: {error}"
                    ))
                }
                Err(_) => {}
            }
            if !pause(&self.stop, READY_POLL_MS).await {
                return Err("stopped".into());
            }
        }
    }

    async fn connection(&self) -> Ended {
        let failed = |reason: String| Ended {
            established: false,
            reason,
        };
        if let SignalEndpoint::Managed(daemon) = &self.account.settings.endpoint {
            if let Err(reason) = self.wait_ready(daemon.startup_timeout_ms).await {
                return failed(reason);
            }
        }
        let response = tokio::select! {
            _ = self.stop.cancelled() => return failed("stopped".into()),
            response = self.account.rpc.events() => response,
        };
        let response = match response {
            Ok(response) => response,
            Err(error) => return failed(format!("cannot open the event stream: {error}")),
        };
        self.account.state.connected();
        self.account
            .state
            .update(|s| s.reconnect_attempts = Some(0));
        log::info!(
            "signal account {}: receiving from {}",
            self.account.id,
            self.account.rpc.base_url()
        );
        let mut stream = response.bytes_stream();
        let mut reader = SseReader::default();
        let mut items = Vec::new();
        loop {
            let idle = Duration::from_millis(self.idle_timeout_ms);
            let chunk = tokio::select! {
                _ = self.stop.cancelled() => return Ended { established: true, reason: "stopped".into() },
                chunk = tokio::time::timeout(idle, stream.next()) => chunk,
            };
            let Ok(chunk) = chunk else {
                return Ended {
                    established: true,
                    reason: format!(
                        "the event stream was silent for {} ms (no event, no keep-alive)",
                        self.idle_timeout_ms
                    ),
                };
            };
            let chunk = match chunk {
                Some(Ok(chunk)) => chunk,
                Some(Err(error)) => {
                    return Ended {
                        established: true,
                        reason: format!("event stream failed: {error}"),
                    }
                }
                None => {
                    return Ended {
                        established: true,
                        reason: "the daemon closed the event stream".into(),
                    }
                }
            };
            reader.feed(&chunk, &mut items);
            for item in items.drain(..) {
                self.handle(item).await;
            }
        }
    }

    async fn handle(&self, item: SseItem) {
        let account = &self.account;
        let data = match item {
            SseItem::Oversized { bytes } => {
                account.record_error(format!(
                    "an event of more than {bytes} bytes was skipped (cap {} bytes)",
                    super::sse::MAX_SSE_EVENT_BYTES
                ));
                return;
            }
            SseItem::Event { name, data } => {
                if name.as_deref().is_some_and(|n| n != "receive") {
                    return;
                }
                data
            }
        };
        let payload: Value = match serde_json::from_str(&data) {
            Ok(payload) => payload,
            Err(error) => {
                account.record_error(format!("a malformed event was skipped: {error}"));
                return;
            }
        };
        if let Some(other) = payload["account"].as_str() {
            if other != account.settings.number {
                return;
            }
        }
        let identity = account.identity();
        let translated = translate(
            &Context {
                account_id: &account.id,
                bot: &identity,
                ignore_attachments: account.settings.ignore_attachments,
            },
            &payload,
        );
        match translated {
            Translated::Skipped => {}
            Translated::Malformed(reason) => {
                account.record_error(format!("a malformed event was skipped: {reason}"));
            }
            Translated::Message { event, attachments } => {
                let mut event = *event;
                self.fetch_attachments(&mut event, &attachments).await;
                self.deliver(event).await;
            }
        }
    }

    /// Each attachment fetched into the media directory, or a note saying
    /// why not (`channels::media::add_to_event`).
    async fn fetch_attachments(&self, event: &mut InboundEvent, attachments: &[Attachment]) {
        if attachments.is_empty() {
            return;
        }
        let from = match &event.message.group_id {
            Some(group) => serde_json::json!({ "groupId": group }),
            None => {
                let sender = &event.message.sender_id;
                let recipient = sender.strip_prefix("uuid:").unwrap_or(sender);
                serde_json::json!({ "recipient": recipient })
            }
        };
        for attachment in attachments {
            let outcome = super::attachments::fetch(
                &self.account.rpc,
                &self.account.media,
                attachment,
                from.clone(),
            )
            .await;
            add_to_event(event, outcome);
        }
    }

    async fn deliver(&self, event: InboundEvent) {
        let account = &self.account;
        let sender = event.message.sender_id.clone();
        let timestamp = event.message.timestamp_ms;
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.sink.deliver(event.clone()).await {
                Ok(()) => break,
                Err(error) if attempt >= DELIVERY_ATTEMPTS => {
                    account.record_error(format!(
                        "the message {timestamp} from {sender} was lost: {error}"
                    ));
                    return;
                }
                Err(error) => {
                    log::warn!(
                        "signal account {}: message {timestamp} not taken ({error}); retrying",
                        account.id
                    );
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                }
            }
        }
        account.state.inbound_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channels::{BoxFuture, InboundError};
    use crate::config::schema::signal::SignalConfig;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct NoSink;

    impl InboundSink for NoSink {
        fn deliver(&self, _event: InboundEvent) -> BoxFuture<'_, Result<(), InboundError>> {
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn a_silent_event_stream_counts_as_dropped() {
        // A daemon that opens the stream and then never writes again.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut request = [0u8; 1024];
            let _ = socket.read(&mut request).await;
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
            socket.write_all(head.as_bytes()).await.expect("write");
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(socket);
        });
        let config: SignalConfig = serde_json::from_value(serde_json::json!({
            "account": "+1555",
            "transport": {"kind": "external-native", "url": url},
        }))
        .expect("config");
        let channel = super::super::SignalChannel::new(&config, &reqwest::Client::new());
        let account = channel.accounts.values().next().expect("account").clone();
        let receive = ReceiveLoop {
            account,
            sink: Arc::new(NoSink),
            stop: CancellationToken::new(),
            idle_timeout_ms: 300,
        };
        let ended = tokio::time::timeout(Duration::from_secs(10), receive.connection())
            .await
            .expect("a silent stream must end the connection");
        assert!(ended.established);
        assert!(
            ended.reason.contains("silent for 300 ms"),
            "{}",
            ended.reason
        );
    }
}
