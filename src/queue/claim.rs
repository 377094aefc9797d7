//! Claiming an idle session for one message before it is queued. A caller that makes its message durable
//! before answering (the web chat's `chat.send`) may write the turn's first record in that same commit, but
//! only when the message is sure to start the next turn on its own. A claim marks the session busy, as a
//! running turn does, so a message arriving meanwhile waits behind it (or steers into it, or interrupts it,
//! as the session's queue mode says); [`IdleClaim::start`] begins the turn with exactly the claimed message,
//! and a claim dropped unstarted lets whatever arrived meanwhile run as usual.
//!
//! This file must not know what the caller writes; it only holds the session's place.

use tokio_util::sync::CancellationToken;

use super::{drain, drain_from, ActiveTurn, CommandQueue, EnqueueOutcome, LaneKind};
use super::{PendingQueue, QueueSettings, QueuedMessage, SessionSlot, SteerInbox, Turn};

/// An idle session held for one message; see the file's doc.
pub struct IdleClaim {
    queue: CommandQueue,
    session_key: String,
    lane: LaneKind,
    /// The placeholder turn's handles, until `start` hands them to the real turn.
    active: Option<ActiveTurn>,
}

impl CommandQueue {
    /// Claims `session_key` when nothing runs or waits in it; `None` when it is busy.
    pub fn claim_idle(
        &self,
        session_key: &str,
        lane: LaneKind,
        settings: QueueSettings,
    ) -> Option<IdleClaim> {
        let mut sessions = self.inner.sessions.lock();
        if sessions.contains_key(session_key) {
            return None;
        }
        let active = ActiveTurn {
            cancel: CancellationToken::new(),
            steer: SteerInbox::default(),
        };
        sessions.insert(
            session_key.to_string(),
            SessionSlot {
                pending: PendingQueue::default(),
                settings,
                lane,
                active: Some(ActiveTurn {
                    cancel: active.cancel.clone(),
                    steer: active.steer.clone(),
                }),
                last_enqueued: tokio::time::Instant::now(),
            },
        );
        drop(sessions);
        crate::system::status::changed();
        Some(IdleClaim {
            queue: self.clone(),
            session_key: session_key.to_string(),
            lane,
            active: Some(active),
        })
    }
}

impl IdleClaim {
    /// Begins the session's turn with `message` alone. Must be called inside a Tokio runtime.
    pub fn start(mut self, message: QueuedMessage) -> EnqueueOutcome {
        let active = self.active.take().expect("a claim starts once");
        let turn = Turn {
            session_key: self.session_key.clone(),
            prompt: message.text.clone(),
            messages: vec![message],
        };
        tokio::spawn(drain_from(
            self.queue.clone(),
            self.session_key.clone(),
            Some((turn, self.lane, active)),
        ));
        EnqueueOutcome::Started
    }
}

impl Drop for IdleClaim {
    fn drop(&mut self) {
        let Some(active) = self.active.take() else {
            return;
        };
        let mut sessions = self.queue.inner.sessions.lock();
        if let Some(slot) = sessions.get_mut(&self.session_key) {
            slot.active = None;
            // What was steered into the turn that never ran waits as a follow-up.
            slot.pending.push_front_all(active.steer.take());
        }
        drop(sessions);
        crate::system::status::changed();
        if tokio::runtime::Handle::try_current().is_ok() {
            // Runs what arrived during the claim, or forgets the session when nothing did.
            tokio::spawn(drain(self.queue.clone(), self.session_key.clone()));
            return;
        }
        // Outside a runtime nothing can have been queued (enqueueing needs one): forget the session.
        let mut sessions = self.queue.inner.sessions.lock();
        if sessions
            .get(&self.session_key)
            .is_some_and(|slot| slot.pending.is_empty())
        {
            sessions.remove(&self.session_key);
        }
    }
}
