//! A recording chat channel for message-path tests: a `Channel` adapter
//! (with typing, edit, delete and reaction capabilities when asked) that keeps every
//! outbound call — sends, edits, typing, deletes, and each send attempt with
//! its time — and can be told to fail its next sends with `RateLimited`,
//! `Transient` or `Permanent`, as a platform would. Inbound events are
//! injected through the sink the gateway gave it at `start`, exactly as a
//! real adapter delivers them. It must not be used by product code.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pincer::channels::{
    AccountStatus, BoxFuture, Channel, ChunkMode, DeleteMessage, EditMessage, InboundEvent,
    InboundSink, OutboundTarget, React, SendError, SentMessage, StartError, TextFormat, TextLimits,
    Typing,
};
use tokio::sync::Notify;

/// One outbound call the channel accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outbound {
    Sent {
        to: String,
        message_id: String,
        text: String,
    },
    Edited {
        message_id: String,
        text: String,
    },
    Typing {
        to: String,
    },
    Deleted {
        message_id: String,
    },
    Reacted {
        message_id: String,
        emoji: String,
    },
}

/// What the fake platform can do.
#[derive(Debug, Clone, Copy)]
pub struct Abilities {
    pub limits: TextLimits,
    pub typing: bool,
    pub edit: bool,
    pub delete: bool,
    pub react: bool,
}

impl Default for Abilities {
    fn default() -> Self {
        Abilities {
            limits: TextLimits {
                max_chars: 4096,
                max_lines: None,
                chunk_mode: ChunkMode::Length,
            },
            typing: true,
            edit: false,
            delete: false,
            react: false,
        }
    }
}

/// The recording channel.
pub struct RecordingChannel {
    id: &'static str,
    abilities: Abilities,
    log: Mutex<Vec<Outbound>>,
    send_attempts: Mutex<Vec<Instant>>,
    failures: Mutex<VecDeque<SendError>>,
    sink: Mutex<Option<Arc<dyn InboundSink>>>,
    changed: Notify,
    next_id: Mutex<u64>,
}

impl RecordingChannel {
    pub fn new(id: &'static str, abilities: Abilities) -> Arc<RecordingChannel> {
        Arc::new(RecordingChannel {
            id,
            abilities,
            log: Mutex::new(Vec::new()),
            send_attempts: Mutex::new(Vec::new()),
            failures: Mutex::new(VecDeque::new()),
            sink: Mutex::new(None),
            changed: Notify::new(),
            next_id: Mutex::new(100),
        })
    }

    /// The next sends fail with these errors, in order.
    pub fn fail_next_sends(&self, errors: Vec<SendError>) {
        self.failures.lock().expect("lock").extend(errors);
    }

    /// Delivers an event the way a platform adapter does.
    pub async fn inject(&self, event: InboundEvent) {
        let sink = self.sink.lock().expect("lock").clone();
        let sink = sink.expect("the channel was started with a sink");
        sink.deliver(event)
            .await
            .expect("the sink accepted the event");
    }

    pub fn outbound(&self) -> Vec<Outbound> {
        self.log.lock().expect("lock").clone()
    }

    /// Texts of accepted sends, in order.
    pub fn sent_texts(&self) -> Vec<String> {
        self.outbound()
            .into_iter()
            .filter_map(|o| match o {
                Outbound::Sent { text, .. } => Some(text),
                _ => None,
            })
            .collect()
    }

    /// When each send was attempted (accepted or not).
    pub fn send_attempts(&self) -> Vec<Instant> {
        self.send_attempts.lock().expect("lock").clone()
    }

    /// Waits until `check` holds for the outbound log (panics after `timeout`).
    pub async fn wait_for(
        &self,
        timeout: Duration,
        check: impl Fn(&[Outbound]) -> bool,
    ) -> Vec<Outbound> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            let log = self.outbound();
            if check(&log) {
                return log;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("timed out waiting on the channel; outbound so far: {log:#?}");
            }
        }
    }

    fn record(&self, entry: Outbound) {
        self.log.lock().expect("lock").push(entry);
        self.changed.notify_waiters();
    }

    fn next_failure(&self) -> Option<SendError> {
        self.failures.lock().expect("lock").pop_front()
    }
}

impl Channel for RecordingChannel {
    fn id(&self) -> &'static str {
        self.id
    }

    fn text_limits(&self) -> TextLimits {
        self.abilities.limits
    }

    fn start(&self, sink: Arc<dyn InboundSink>) -> BoxFuture<'_, Result<(), StartError>> {
        *self.sink.lock().expect("lock") = Some(sink);
        Box::pin(async { Ok(()) })
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        *self.sink.lock().expect("lock") = None;
        Box::pin(async {})
    }

    fn status(&self) -> Vec<AccountStatus> {
        let started = self.sink.lock().expect("lock").is_some();
        vec![AccountStatus {
            account_id: "default".into(),
            enabled: true,
            configured: true,
            running: started,
            connected: started,
            ..AccountStatus::default()
        }]
    }

    fn send_text<'a>(
        &'a self,
        target: &'a OutboundTarget,
        text: &'a str,
        _format: TextFormat,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>> {
        Box::pin(async move {
            self.send_attempts
                .lock()
                .expect("lock")
                .push(Instant::now());
            if let Some(error) = self.next_failure() {
                self.changed.notify_waiters();
                return Err(error);
            }
            let message_id = {
                let mut next = self.next_id.lock().expect("lock");
                *next += 1;
                next.to_string()
            };
            self.record(Outbound::Sent {
                to: target.to.clone(),
                message_id: message_id.clone(),
                text: text.to_string(),
            });
            Ok(SentMessage { message_id })
        })
    }

    fn typing(&self) -> Option<&dyn Typing> {
        self.abilities.typing.then_some(self as &dyn Typing)
    }

    fn edit(&self) -> Option<&dyn EditMessage> {
        self.abilities.edit.then_some(self as &dyn EditMessage)
    }

    fn delete(&self) -> Option<&dyn DeleteMessage> {
        self.abilities.delete.then_some(self as &dyn DeleteMessage)
    }

    fn reactions(&self) -> Option<&dyn React> {
        self.abilities.react.then_some(self as &dyn React)
    }
}

impl React for RecordingChannel {
    fn react<'a>(
        &'a self,
        _target: &'a OutboundTarget,
        message_id: &'a str,
        emoji: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            self.record(Outbound::Reacted {
                message_id: message_id.to_string(),
                emoji: emoji.to_string(),
            });
            Ok(())
        })
    }
}

impl Typing for RecordingChannel {
    fn send_typing<'a>(
        &'a self,
        target: &'a OutboundTarget,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            self.record(Outbound::Typing {
                to: target.to.clone(),
            });
            Ok(())
        })
    }
}

impl EditMessage for RecordingChannel {
    fn edit_text<'a>(
        &'a self,
        _target: &'a OutboundTarget,
        message_id: &'a str,
        text: &'a str,
        _format: TextFormat,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            self.record(Outbound::Edited {
                message_id: message_id.to_string(),
                text: text.to_string(),
            });
            Ok(())
        })
    }
}

impl DeleteMessage for RecordingChannel {
    fn delete<'a>(
        &'a self,
        _target: &'a OutboundTarget,
        message_id: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            self.record(Outbound::Deleted {
                message_id: message_id.to_string(),
            });
            Ok(())
        })
    }
}
