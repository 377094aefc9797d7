//! The reply dispatcher: one per run, it sends tool results, blocks and the
//! final reply through a [`ReplySink`] strictly in the order they were
//! enqueued, one at a time, with the human delay before every block but the
//! first.
//!
//! `ReplyDispatcher::new(sink: Arc<dyn ReplySink>, DispatcherOptions)`,
//! `.enqueue(kind, payload).await -> DispatchOutcome`, `.mark_complete()`,
//! `.wait_idle().await`. A pending counter starts at one — a reservation held
//! for the run — so the dispatcher cannot look idle between two replies;
//! `mark_complete` (or dropping the last handle) gives the reservation back,
//! and idle is signalled exactly once, when the run is complete and the last
//! send has finished. Enqueueing after that is refused. The queue is bounded
//! (`queue_capacity`): `enqueue` waits for room. `DispatcherRegistry` tracks
//! live dispatchers so graceful shutdown can `wait_all(deadline)`.
//! Payloads pass through `shape::normalize` first. This file must not know a
//! platform: the sink does the sending, and a failed send is counted, logged
//! and skipped so the replies behind it still go out in order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::time::Instant;

use super::delay::HumanDelay;
use super::shape::{normalize, ShapeOptions, SkipReason};
use super::{ReplyKind, ReplyPayload};

/// Replies a dispatcher holds (queued or being sent) before `enqueue` waits.
pub const DEFAULT_QUEUE_CAPACITY: usize = 64;

/// Why a sink could not deliver a payload.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("reply delivery failed: {0}")]
    Delivery(String),
}

/// Sends one payload to its destination (a channel's outbound adapter, the
/// gateway's event stream…). Called for one payload at a time, in order.
pub trait ReplySink: Send + Sync + 'static {
    fn deliver(
        &self,
        payload: ReplyPayload,
        kind: ReplyKind,
    ) -> BoxFuture<'_, Result<(), SinkError>>;
}

/// Graceful shutdown gave up waiting for replies.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{dispatchers} reply dispatcher(s) still busy at the shutdown deadline ({replies} replies pending)")]
pub struct DrainTimeout {
    pub dispatchers: usize,
    pub replies: usize,
}

/// Result of [`ReplyDispatcher::enqueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchOutcome {
    /// Will be delivered after everything enqueued before it.
    Queued,
    /// Dropped by shaping (silent, empty, hidden reasoning).
    Skipped(SkipReason),
    /// The run was already complete and idle: nothing more is sent.
    Closed,
}

/// Per-kind counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindCounts {
    pub tool: usize,
    pub block: usize,
    pub final_reply: usize,
}

impl KindCounts {
    fn bump(&mut self, kind: ReplyKind) {
        match kind {
            ReplyKind::Tool => self.tool += 1,
            ReplyKind::Block => self.block += 1,
            ReplyKind::Final => self.final_reply += 1,
        }
    }
}

/// How a dispatcher paces, shapes and reports.
#[derive(Clone)]
pub struct DispatcherOptions {
    pub human_delay: HumanDelay,
    pub shape: ShapeOptions,
    pub queue_capacity: usize,
    /// Registry to join so shutdown waits for this dispatcher.
    pub registry: Option<Arc<DispatcherRegistry>>,
    /// Called once when the dispatcher becomes idle (e.g. stop typing).
    pub on_idle: Option<Arc<dyn Fn() + Send + Sync>>,
}

impl Default for DispatcherOptions {
    fn default() -> Self {
        Self {
            human_delay: HumanDelay::Off,
            shape: ShapeOptions::default(),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            registry: None,
            on_idle: None,
        }
    }
}

struct State {
    /// Replies queued or in flight, plus one while the run is not complete.
    pending: usize,
    complete: bool,
    idle: bool,
    queued: KindCounts,
    failed: KindCounts,
}

struct Shared {
    state: Mutex<State>,
    idle_tx: watch::Sender<bool>,
    on_idle: Option<Arc<dyn Fn() + Send + Sync>>,
    registration: Mutex<Option<(Weak<DispatcherRegistry>, u64)>>,
}

impl Shared {
    /// One reply finished (or was never queued); may complete the run.
    fn release_one(&self) {
        let became_idle = {
            let mut state = self.state.lock();
            state.pending -= 1;
            if state.pending == 1 && state.complete {
                state.pending = 0;
            }
            state.pending == 0 && !std::mem::replace(&mut state.idle, true)
        };
        if became_idle {
            self.signal_idle();
        }
    }

    fn mark_complete(&self) {
        let became_idle = {
            let mut state = self.state.lock();
            if std::mem::replace(&mut state.complete, true) {
                return;
            }
            if state.pending == 1 {
                state.pending = 0;
                state.idle = true;
                true
            } else {
                false
            }
        };
        if became_idle {
            self.signal_idle();
        }
    }

    /// Runs once per dispatcher, outside the state lock: the hook first, then
    /// the registry, then waiters — so a waiter that wakes sees all of it done.
    fn signal_idle(&self) {
        if let Some(on_idle) = &self.on_idle {
            on_idle();
        }
        let registration = self.registration.lock().take();
        if let Some((registry, id)) = registration {
            if let Some(registry) = registry.upgrade() {
                registry.unregister(id);
            }
        }
        self.idle_tx.send_replace(true);
    }
}

struct Job {
    kind: ReplyKind,
    payload: ReplyPayload,
}

struct Handle {
    shared: Arc<Shared>,
    jobs: mpsc::UnboundedSender<Job>,
    room: Arc<Semaphore>,
    shape: ShapeOptions,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.mark_complete();
    }
}

/// Ordered delivery for one run; cheap to clone (all clones share the run).
#[derive(Clone)]
pub struct ReplyDispatcher {
    handle: Arc<Handle>,
}

impl ReplyDispatcher {
    /// Starts the dispatcher's sending task on the current tokio runtime.
    pub fn new(sink: Arc<dyn ReplySink>, options: DispatcherOptions) -> Self {
        let (idle_tx, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                pending: 1,
                complete: false,
                idle: false,
                queued: KindCounts::default(),
                failed: KindCounts::default(),
            }),
            idle_tx,
            on_idle: options.on_idle.clone(),
            registration: Mutex::new(None),
        });
        if let Some(registry) = &options.registry {
            let id = registry.register(shared.clone());
            *shared.registration.lock() = Some((Arc::downgrade(registry), id));
        }
        let (jobs, rx) = mpsc::unbounded_channel();
        let room = Arc::new(Semaphore::new(options.queue_capacity.max(1)));
        tokio::spawn(send_in_order(
            shared.clone(),
            rx,
            sink,
            options.human_delay,
            room.clone(),
        ));
        Self {
            handle: Arc::new(Handle {
                shared,
                jobs,
                room,
                shape: options.shape,
            }),
        }
    }

    /// Shapes `payload` and queues it behind everything enqueued before.
    /// Waits while the queue is full.
    pub async fn enqueue(&self, kind: ReplyKind, payload: ReplyPayload) -> DispatchOutcome {
        let payload = match normalize(payload, &self.handle.shape) {
            Ok(payload) => payload,
            Err(reason) => return DispatchOutcome::Skipped(reason),
        };
        let Ok(permit) = self.handle.room.acquire().await else {
            return DispatchOutcome::Closed;
        };
        let mut state = self.handle.shared.state.lock();
        if state.idle {
            return DispatchOutcome::Closed;
        }
        if self.handle.jobs.send(Job { kind, payload }).is_err() {
            return DispatchOutcome::Closed;
        }
        permit.forget();
        state.pending += 1;
        state.queued.bump(kind);
        DispatchOutcome::Queued
    }

    /// No more replies will be enqueued for this run. Idempotent.
    pub fn mark_complete(&self) {
        self.handle.shared.mark_complete();
    }

    /// Resolves once the run is complete and every queued reply was sent.
    pub async fn wait_idle(&self) {
        wait_idle(&self.handle.shared).await;
    }

    pub fn is_idle(&self) -> bool {
        self.handle.shared.state.lock().idle
    }

    /// Replies still queued or being sent (the run's reservation not counted).
    pub fn pending_replies(&self) -> usize {
        pending_replies(&self.handle.shared)
    }

    pub fn queued_counts(&self) -> KindCounts {
        self.handle.shared.state.lock().queued
    }

    pub fn failed_counts(&self) -> KindCounts {
        self.handle.shared.state.lock().failed
    }
}

async fn wait_idle(shared: &Shared) {
    let mut idle = shared.idle_tx.subscribe();
    // The sender lives in `shared`, so it cannot close while we borrow it.
    let _ = idle.wait_for(|idle| *idle).await;
}

fn pending_replies(shared: &Shared) -> usize {
    // Until idle, `pending` includes the run's reservation.
    shared.state.lock().pending.saturating_sub(1)
}

/// The dispatcher's single sending task: one job at a time, in queue order.
async fn send_in_order(
    shared: Arc<Shared>,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    sink: Arc<dyn ReplySink>,
    human_delay: HumanDelay,
    room: Arc<Semaphore>,
) {
    let mut sent_a_block = false;
    while let Some(Job { kind, payload }) = jobs.recv().await {
        if kind == ReplyKind::Block {
            if sent_a_block {
                let pause = human_delay.sample(&mut rand::thread_rng());
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
            sent_a_block = true;
        }
        if let Err(err) = sink.deliver(payload, kind).await {
            log::warn!("{kind:?} reply not delivered: {err}");
            shared.state.lock().failed.bump(kind);
        }
        room.add_permits(1);
        shared.release_one();
    }
}

/// Live dispatchers, so graceful shutdown can wait for pending replies.
#[derive(Default)]
pub struct DispatcherRegistry {
    next_id: AtomicU64,
    live: Mutex<HashMap<u64, Arc<Shared>>>,
}

impl DispatcherRegistry {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn register(&self, shared: Arc<Shared>) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.live.lock().insert(id, shared);
        id
    }

    fn unregister(&self, id: u64) {
        self.live.lock().remove(&id);
    }

    /// Dispatchers that are not idle yet.
    pub fn live_count(&self) -> usize {
        self.live.lock().len()
    }

    /// Replies queued or being sent across all live dispatchers.
    pub fn pending_replies(&self) -> usize {
        let live: Vec<Arc<Shared>> = self.live.lock().values().cloned().collect();
        live.iter().map(|shared| pending_replies(shared)).sum()
    }

    /// Waits until every dispatcher registered now is idle, or `deadline`.
    pub async fn wait_all(&self, deadline: Instant) -> Result<(), DrainTimeout> {
        let live: Vec<Arc<Shared>> = self.live.lock().values().cloned().collect();
        for shared in &live {
            if tokio::time::timeout_at(deadline, wait_idle(shared))
                .await
                .is_err()
            {
                return Err(DrainTimeout {
                    dispatchers: self.live_count(),
                    replies: self.pending_replies(),
                });
            }
        }
        Ok(())
    }
}
