//! Layer 3 of the message path: when a message is answered. Each session
//! key has one drain task at a time, and each turn waits in the gateway's one
//! [`LaneGate`] (`lanes.rs`: the session lane, then a slot in its global
//! lane) before its runner starts it; the runner's run inherits that place
//! (`Admission::Admitted`), so it never waits twice. Messages
//! that arrive while the session is busy follow the session's queue mode:
//! collect (merge into one follow-up turn), followup (one turn each), steer
//! (hand to the running turn at its next model call, else follow up),
//! steer-backlog (both), interrupt (abort and start anew). The waiting list
//! is bounded by `cap` with a drop policy (`pending.rs`), and a session's
//! state is forgotten once it is idle, so memory stays bounded.
//!
//! The queue must not know about channels: what a turn does is the
//! [`TurnRunner`]'s business, and per-message extras (a typing indicator)
//! ride along as opaque attachments dropped when their turn ends.

mod claim;
pub mod lanes;
pub mod pending;

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::config::schema::messages::{QueueConfig, QueueDrop, QueueMode};

pub use claim::IdleClaim;
pub use lanes::{Admission, LaneGate, LaneKind, LaneLimits, LanePass, LaneSlot, LaneUsage};
pub use pending::{PendingQueue, PushOutcome, QueuedTurn};

/// One message waiting for (or given to) a turn.
pub struct QueuedMessage {
    pub id: String,
    pub text: String,
    /// Kept alive until the turn that answers the message ends.
    pub attachment: Option<Box<dyn Any + Send>>,
}

impl QueuedMessage {
    pub fn new(id: impl Into<String>, text: impl Into<String>) -> QueuedMessage {
        QueuedMessage {
            id: id.into(),
            text: text.into(),
            attachment: None,
        }
    }

    fn text_copy(&self) -> QueuedMessage {
        QueuedMessage::new(self.id.clone(), self.text.clone())
    }
}

impl std::fmt::Debug for QueuedMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuedMessage")
            .field("id", &self.id)
            .field("text", &self.text)
            .finish()
    }
}

/// A session's queue behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSettings {
    pub mode: QueueMode,
    pub debounce_ms: u64,
    pub cap: usize,
    pub drop: QueueDrop,
}

impl QueueSettings {
    /// The settings `messages.queue` gives a channel.
    pub fn for_channel(config: &QueueConfig, channel: &str) -> QueueSettings {
        QueueSettings {
            mode: config.mode_for(channel),
            debounce_ms: config.debounce_ms_for(channel),
            cap: config.cap.max(1) as usize,
            drop: config.drop,
        }
    }
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings::for_channel(&QueueConfig::default(), "")
    }
}

/// What `enqueue` did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnqueueOutcome {
    /// The session was idle: a turn starts with this message.
    Started,
    /// Waiting for the running turn to end.
    Queued,
    /// Waiting, after older messages were dropped for the cap.
    QueuedDroppingOld(usize),
    /// Refused: full queue with drop policy `new`.
    Dropped,
    /// Handed to the running turn.
    Steered,
    /// Handed to the running turn and kept for a follow-up turn.
    SteeredWithBacklog,
    /// The running turn was aborted; this message starts the next one.
    Interrupted,
}

/// Messages handed to a running turn; it takes them at its next model call.
#[derive(Clone, Default)]
pub struct SteerInbox {
    items: Arc<Mutex<VecDeque<QueuedMessage>>>,
}

impl SteerInbox {
    /// Takes every steered message so far.
    pub fn take(&self) -> Vec<QueuedMessage> {
        self.items.lock().drain(..).collect()
    }

    /// Hands `message` to the running turn; gives it back when the inbox is full.
    pub fn push(&self, message: QueuedMessage, cap: usize) -> Result<(), QueuedMessage> {
        let mut items = self.items.lock();
        if items.len() >= cap {
            return Err(message);
        }
        items.push_back(message);
        Ok(())
    }
}

/// One turn for the runner.
pub struct Turn {
    pub session_key: String,
    pub prompt: String,
    pub messages: Vec<QueuedMessage>,
}

/// What a running turn can observe: abort, and steered messages; and its
/// place in the lanes, held until the runner drops it.
pub struct TurnContext {
    pub cancel: CancellationToken,
    pub steer: SteerInbox,
    /// The session and lane slot the queue waited for. Dropping it frees
    /// them: the runner holds it, or hands it to the run
    /// (`Admission::Admitted`), until the turn ends.
    pub pass: LanePass,
}

/// Executes turns (the agent run, in production).
pub trait TurnRunner: Send + Sync + 'static {
    fn run(&self, turn: Turn, ctx: TurnContext) -> BoxFuture<'static, ()>;

    /// Whether running turns take steered messages; when not, steer and
    /// steer-backlog behave as followup (nothing is lost or doubled).
    fn can_steer(&self) -> bool {
        true
    }
}

struct ActiveTurn {
    cancel: CancellationToken,
    steer: SteerInbox,
}

struct SessionSlot {
    pending: PendingQueue,
    settings: QueueSettings,
    lane: LaneKind,
    active: Option<ActiveTurn>,
    last_enqueued: tokio::time::Instant,
}

struct QueueInner {
    gate: Arc<LaneGate>,
    runner: Arc<dyn TurnRunner>,
    sessions: Mutex<HashMap<String, SessionSlot>>,
}

/// The command queue's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepths {
    /// Sessions with a running or waiting turn.
    pub sessions: usize,
    /// Sessions whose turn is running.
    pub running: usize,
    /// Messages waiting behind the running turns.
    pub waiting: usize,
}

/// The command queue; cheap to clone.
#[derive(Clone)]
pub struct CommandQueue {
    inner: Arc<QueueInner>,
}

impl CommandQueue {
    pub fn new(gate: Arc<LaneGate>, runner: Arc<dyn TurnRunner>) -> CommandQueue {
        CommandQueue {
            inner: Arc::new(QueueInner {
                gate,
                runner,
                sessions: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Hands a message to its session. Must be called inside a Tokio runtime.
    pub fn enqueue(
        &self,
        session_key: &str,
        lane: LaneKind,
        settings: QueueSettings,
        message: QueuedMessage,
    ) -> EnqueueOutcome {
        let mut sessions = self.inner.sessions.lock();
        let now = tokio::time::Instant::now();
        let Some(slot) = sessions.get_mut(session_key) else {
            let mut pending = PendingQueue::default();
            pending.push(message, settings.cap, settings.drop);
            sessions.insert(
                session_key.to_string(),
                SessionSlot {
                    pending,
                    settings,
                    lane,
                    active: None,
                    last_enqueued: now,
                },
            );
            drop(sessions);
            crate::system::status::changed();
            tokio::spawn(drain(self.clone(), session_key.to_string()));
            return EnqueueOutcome::Started;
        };
        slot.settings = settings;
        slot.last_enqueued = now;
        let outcome = busy_enqueue(slot, message, self.inner.runner.can_steer());
        crate::system::status::changed();
        outcome
    }

    /// Aborts the session's running turn and drops what waits; returns
    /// whether anything was running or waiting.
    pub fn abort(&self, session_key: &str) -> bool {
        let mut sessions = self.inner.sessions.lock();
        let Some(slot) = sessions.get_mut(session_key) else {
            return false;
        };
        let dropped = slot.pending.clear();
        match &slot.active {
            Some(active) => {
                active.cancel.cancel();
                true
            }
            None => dropped > 0,
        }
    }

    /// Messages waiting in a session (not counting the running turn's).
    pub fn pending_len(&self, session_key: &str) -> usize {
        self.inner
            .sessions
            .lock()
            .get(session_key)
            .map_or(0, |s| s.pending.len())
    }

    /// Summary lines held for a session's dropped messages.
    pub fn summary_len(&self, session_key: &str) -> usize {
        self.inner
            .sessions
            .lock()
            .get(session_key)
            .map_or(0, |s| s.pending.summary_len())
    }

    /// Whether a turn of this session is running.
    pub fn is_running(&self, session_key: &str) -> bool {
        self.inner
            .sessions
            .lock()
            .get(session_key)
            .is_some_and(|s| s.active.is_some())
    }

    /// Sessions with a running or waiting turn.
    pub fn session_count(&self) -> usize {
        self.inner.sessions.lock().len()
    }

    /// The queue's figures now, for `health` and `status`.
    pub fn depths(&self) -> QueueDepths {
        let sessions = self.inner.sessions.lock();
        QueueDepths {
            sessions: sessions.len(),
            running: sessions.values().filter(|s| s.active.is_some()).count(),
            waiting: sessions.values().map(|s| s.pending.len()).sum(),
        }
    }
}

/// A message for a session that is already draining.
fn busy_enqueue(slot: &mut SessionSlot, message: QueuedMessage, can_steer: bool) -> EnqueueOutcome {
    let (cap, drop) = (slot.settings.cap, slot.settings.drop);
    let mode = match slot.settings.mode {
        QueueMode::Steer | QueueMode::SteerBacklog if !can_steer => QueueMode::Followup,
        mode => mode,
    };
    match mode {
        QueueMode::Interrupt => {
            if let Some(active) = &slot.active {
                active.cancel.cancel();
            }
            slot.pending.clear();
            slot.pending.push(message, cap, drop);
            EnqueueOutcome::Interrupted
        }
        QueueMode::Steer | QueueMode::SteerBacklog => {
            let Some(active) = &slot.active else {
                return push_outcome(slot.pending.push(message, cap, drop));
            };
            if mode == QueueMode::SteerBacklog {
                // Both: the running turn sees a copy, the original waits.
                return match active.steer.push(message.text_copy(), cap) {
                    Ok(()) => {
                        push_outcome(slot.pending.push(message, cap, drop));
                        EnqueueOutcome::SteeredWithBacklog
                    }
                    Err(_) => push_outcome(slot.pending.push(message, cap, drop)),
                };
            }
            // The message itself (with what it carries) goes to the turn; one
            // the turn never takes comes back as a follow-up.
            match active.steer.push(message, cap) {
                Ok(()) => EnqueueOutcome::Steered,
                Err(message) => push_outcome(slot.pending.push(message, cap, drop)),
            }
        }
        QueueMode::Collect | QueueMode::Followup | QueueMode::Queue => {
            push_outcome(slot.pending.push(message, cap, drop))
        }
    }
}

fn push_outcome(outcome: PushOutcome) -> EnqueueOutcome {
    match outcome {
        PushOutcome::Queued => EnqueueOutcome::Queued,
        PushOutcome::QueuedDroppingOld(n) => EnqueueOutcome::QueuedDroppingOld(n),
        PushOutcome::Refused => EnqueueOutcome::Dropped,
    }
}

/// Runs a session's turns one after another until nothing waits, then
/// forgets the session.
async fn drain(queue: CommandQueue, session_key: String) {
    drain_from(queue, session_key, None).await
}

/// [`drain`], beginning with `first` when given (a turn already marked
/// active: an [`IdleClaim`] started).
async fn drain_from(
    queue: CommandQueue,
    session_key: String,
    mut first: Option<(Turn, LaneKind, ActiveTurn)>,
) {
    let mut initial = true;
    loop {
        let begun = match first.take() {
            Some(turn) => Some(turn),
            None => {
                if !initial {
                    wait_for_quiet(&queue, &session_key).await;
                }
                begin_turn(&queue, &session_key)
            }
        };
        initial = false;
        let Some((turn, lane, active)) = begun else {
            return;
        };
        let steer = active.steer.clone();
        let admitted = tokio::select! {
            pass = queue.inner.gate.admit(&session_key, lane) => Some(pass),
            _ = active.cancel.cancelled() => None,
        };
        if let Some(pass) = admitted {
            let ctx = TurnContext {
                cancel: active.cancel,
                steer: active.steer,
                pass,
            };
            queue.inner.runner.run(turn, ctx).await;
        }
        let mut sessions = queue.inner.sessions.lock();
        if let Some(slot) = sessions.get_mut(&session_key) {
            slot.active = None;
            // Steered messages the turn never took become a follow-up.
            slot.pending.push_front_all(steer.take());
        }
        drop(sessions);
        crate::system::status::changed();
    }
}

/// Takes the next turn and marks it active; `None` (and the session
/// forgotten) when nothing waits.
fn begin_turn(queue: &CommandQueue, session_key: &str) -> Option<(Turn, LaneKind, ActiveTurn)> {
    let mut sessions = queue.inner.sessions.lock();
    let slot = sessions.get_mut(session_key)?;
    let collect = slot.settings.mode == QueueMode::Collect;
    let Some(QueuedTurn { prompt, messages }) = slot.pending.take_turn(collect) else {
        sessions.remove(session_key);
        crate::system::status::changed();
        return None;
    };
    let active = ActiveTurn {
        cancel: CancellationToken::new(),
        steer: SteerInbox::default(),
    };
    slot.active = Some(ActiveTurn {
        cancel: active.cancel.clone(),
        steer: active.steer.clone(),
    });
    let turn = Turn {
        session_key: session_key.to_string(),
        prompt,
        messages,
    };
    let lane = slot.lane;
    drop(sessions);
    crate::system::status::changed();
    Some((turn, lane, active))
}

/// Waits until `debounceMs` passed since the last enqueue (a burst settles).
async fn wait_for_quiet(queue: &CommandQueue, session_key: &str) {
    loop {
        let deadline = {
            let sessions = queue.inner.sessions.lock();
            let Some(slot) = sessions.get(session_key) else {
                return;
            };
            if slot.settings.mode == QueueMode::Interrupt {
                return;
            }
            slot.last_enqueued + Duration::from_millis(slot.settings.debounce_ms)
        };
        if tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}
