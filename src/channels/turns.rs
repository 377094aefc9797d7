//! The production `TurnRunner`: a turn the command queue releases becomes a
//! gateway run (`gateway::runs::prepare` + `execute`, the same code the
//! `agent` method uses, so web clients see it as `chat` events), and its
//! replies go to the channel the messages came from (`stream::deliver_run`).
//!
//! What a queued message carries to its turn — agent, channel, reply target,
//! the web chat's requester and idempotency key, the typing indicator — is a
//! [`TurnOrigin`] riding in the message's attachment. A turn answers the
//! last of its messages' origins; the idempotency keys of all of them are
//! settled with the run's result (a message dropped from a full queue
//! forgets its key, so a retry can run).
//!
//! This file must not decide whether a message is answered (the pipeline
//! and the queue do) nor format replies (the reply layer does).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::agent::runs::{RunOutcome, RunStatus};
use crate::agent::turn::{ReplySettlement, TurnSpec};
use crate::gateway::frames::ErrorShape;
use crate::gateway::idempotency;
use crate::gateway::runs::{self, RunOrigin};
use crate::gateway::state::GatewayState;
use crate::pipeline::TypingGuard;
use crate::queue::{Turn, TurnContext, TurnRunner};
use crate::store::Settlement;
use crate::system::clock::now_ms;

use super::stream::{deliver_run, ReplyRoute};

/// Events a run may buffer for its channel delivery before it waits.
const DELIVERY_EVENT_BUFFER: usize = 256;

/// Where a queued message came from and where its answer goes.
pub struct TurnOrigin {
    pub agent_id: String,
    /// `webchat` or an adapter's channel id.
    pub channel: String,
    /// The run id to use when this message's turn runs (the web chat's
    /// idempotency key; a fresh id for channel messages).
    pub run_id: String,
    pub timeout_ms: u64,
    /// The channel destination (`None` for the web chat: its clients read
    /// the run's `chat` events).
    pub reply: Option<ReplyRoute>,
    /// The web chat connection that asked (it gets the `agent` events).
    pub requester: Option<String>,
    /// `chat:<key>` to settle when the turn ends.
    pub idempotency_key: Option<String>,
    pub typing: Option<TypingGuard>,
    /// To forget an unsettled idempotency key when the message is dropped.
    pub gateway: Weak<GatewayState>,
    /// Durable inbox records of the channel messages this answers: removed
    /// when the origin goes (the turn ended, the message was steered into a
    /// turn or dropped by the queue), replayed after a crash otherwise.
    pub inbox: Vec<String>,
}

impl Drop for TurnOrigin {
    fn drop(&mut self) {
        if !self.inbox.is_empty() {
            if let Some(state) = self.gateway.upgrade() {
                super::inbox::forget(&state, std::mem::take(&mut self.inbox));
            }
        }
        let (Some(key), Some(state)) = (self.idempotency_key.take(), self.gateway.upgrade()) else {
            return;
        };
        state.idempotency.forget(&key);
    }
}

/// Runs queued turns as gateway runs.
pub struct ChannelTurnRunner {
    gateway: Weak<GatewayState>,
}

impl ChannelTurnRunner {
    pub fn new(gateway: Weak<GatewayState>) -> ChannelTurnRunner {
        ChannelTurnRunner { gateway }
    }
}

impl TurnRunner for ChannelTurnRunner {
    fn run(&self, turn: Turn, ctx: TurnContext) -> BoxFuture<'static, ()> {
        let gateway = self.gateway.clone();
        Box::pin(async move {
            let Some(state) = gateway.upgrade() else {
                return;
            };
            run_turn(state, turn, ctx).await;
        })
    }

    /// The agent loop takes steered messages before its next model call.
    fn can_steer(&self) -> bool {
        true
    }
}

fn take_origins(turn: &mut Turn) -> Vec<TurnOrigin> {
    turn.messages
        .iter_mut()
        .filter_map(|m| m.attachment.take())
        .filter_map(|a| a.downcast::<TurnOrigin>().ok())
        .map(|origin| *origin)
        .collect()
}

async fn run_turn(state: Arc<GatewayState>, mut turn: Turn, ctx: TurnContext) {
    let mut origins = take_origins(&mut turn);
    let keys: Vec<String> = origins
        .iter_mut()
        .filter_map(|o| o.idempotency_key.take())
        .collect();
    let typing: Vec<TypingGuard> = origins.iter_mut().filter_map(|o| o.typing.take()).collect();
    let Some(last) = origins.last_mut() else {
        log::warn!("turn for {} carried no origin; dropped", turn.session_key);
        return;
    };
    let spec = turn_spec(&turn, last);
    let reply = last.reply.take();
    let (tap, tap_rx) = mpsc::channel(DELIVERY_EVENT_BUFFER);
    let origin = RunOrigin {
        requester: last.requester.clone(),
        final_reply: None,
        idempotency_key: None,
        tap: reply.is_some().then_some(tap),
    };
    let mut prepared = match runs::prepare(&state, spec, origin) {
        Ok(prepared) => prepared,
        Err(error) => {
            log::warn!(
                "turn for {} not started: {}",
                turn.session_key,
                error.message
            );
            settle_error(&state, &keys, &error);
            return;
        }
    };
    prepared.set_steer(ctx.steer.clone());
    // A web chat turn's messages are answered once the run has ended: their
    // durable records go in the commit that keeps the answer (the reply's,
    // when it is recorded). A channel turn's wait for its delivery (the
    // origins' drop).
    let done: Vec<String> = if reply.is_none() && !keys.is_empty() {
        origins
            .iter_mut()
            .flat_map(|o| std::mem::take(&mut o.inbox))
            .collect()
    } else {
        Vec::new()
    };
    let settlement = (!keys.is_empty()).then(|| {
        let owner = Arc::new(WebchatSettlement {
            keys: keys.clone(),
            done: done.clone(),
            committed: AtomicBool::new(false),
            answer: Mutex::new(None),
        });
        prepared.set_settlement(owner.clone());
        owner
    });
    let run_id = prepared.run_id().to_string();
    let route = reply
        .as_ref()
        .map(|r| (r.channel.id().to_string(), r.target.clone()));
    let link = link_abort(&ctx, prepared.cancel_token());
    let delivery = reply.map(|route| {
        let pipeline = super::hub::pipeline_of(&state);
        tokio::spawn(deliver_run(route, pipeline, typing, tap_rx))
    });
    let outcome = prepared.execute().await;
    link.abort();
    // The answer the reply's commit kept, when it was committed.
    let kept = settlement
        .as_ref()
        .filter(|owner| owner.committed.load(Ordering::Acquire))
        .and_then(|owner| {
            owner
                .answer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
        });
    let committed = kept.is_some();
    if let Some(answer) = kept {
        settle_in_memory(&state, &keys, answer);
    }
    // Store writes left to make (none for a web chat turn whose answer went
    // with its reply) block: off the async workers.
    let unsettled = !committed && !keys.is_empty();
    if unsettled || route.is_some() {
        state.store.run_blocking(|| {
            if unsettled {
                settle(&state, &keys, &outcome, &done);
            }
            if let Some((channel, target)) = &route {
                if let Err(e) =
                    super::deliver::record_last_route(&state, &turn.session_key, channel, target)
                {
                    log::warn!("cannot record the last route of {}: {e}", turn.session_key);
                }
            }
        });
    }
    if let Some(delivery) = delivery {
        match delivery.await {
            Ok(report) => {
                super::hub::hub_of(&state).record_delivery(Some(&run_id), &turn.session_key, report)
            }
            Err(error) => log::warn!("reply delivery task failed: {error}"),
        }
    }
}

/// The gateway run for a turn: the prompt the queue built, the last origin's
/// agent, channel, run id and timeout.
fn turn_spec(turn: &Turn, last: &TurnOrigin) -> TurnSpec {
    TurnSpec {
        run_id: last.run_id.clone(),
        agent_id: last.agent_id.clone(),
        session_key: turn.session_key.clone(),
        message: turn.prompt.clone(),
        timeout_ms: last.timeout_ms,
        model_override: None,
        extra_system_prompt: None,
        label: None,
        channel: Some(last.channel.clone()),
    }
}

/// The queue aborting the turn (interrupt, `/stop`) aborts the run.
fn link_abort(
    ctx: &TurnContext,
    run_cancel: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let queue_cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        queue_cancel.cancelled().await;
        run_cancel.cancel();
    })
}

/// The web chat's idempotency answers and the removal of its messages'
/// records, committed with the run's reply.
struct WebchatSettlement {
    keys: Vec<String>,
    done: Vec<String>,
    committed: AtomicBool,
    /// The answer the settlements carry, for the cache in memory afterwards.
    answer: Mutex<Option<Answer>>,
}

/// A run's final answer for the idempotency cache: `ok`, the `res` payload
/// and the error as JSON.
type Answer = (bool, Value, Option<Value>);

fn answer_of(outcome: &RunOutcome) -> Answer {
    let (ok, payload, error) = runs::final_payload(outcome);
    (ok, payload, error.as_ref().map(ErrorShape::to_json))
}

impl ReplySettlement for WebchatSettlement {
    fn settlements(&self, outcome: &RunOutcome) -> Vec<Settlement> {
        let (ok, payload, error) = answer_of(outcome);
        let now = now_ms();
        let settlements = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, key)| {
                let done = if i == 0 { self.done.as_slice() } else { &[] };
                idempotency::settlement(key, ok, &payload, error.as_ref(), now, done)
            })
            .collect();
        *self.answer.lock().unwrap_or_else(PoisonError::into_inner) = Some((ok, payload, error));
        settlements
    }

    fn committed(&self) {
        self.committed.store(true, Ordering::Release);
    }
}

/// Settles the turn's idempotency keys in memory, their answers already in
/// the store (committed with the reply).
fn settle_in_memory(state: &GatewayState, keys: &[String], (ok, payload, error): Answer) {
    for key in keys {
        state
            .idempotency
            .finish_persisted(key, ok, payload.clone(), error.clone(), now_ms());
    }
}

/// Settles the turn's idempotency keys; the first one's commit also
/// removes the `done` records (a run whose reply was never recorded).
fn settle(state: &GatewayState, keys: &[String], outcome: &RunOutcome, done: &[String]) {
    let (ok, payload, error) = answer_of(outcome);
    for (i, key) in keys.iter().enumerate() {
        let done = if i == 0 { done } else { &[] };
        state
            .idempotency
            .finish_settling(key, ok, payload.clone(), error.clone(), now_ms(), done);
    }
    if outcome.status == RunStatus::Error {
        log::debug!(
            "run {} ended with an error: {:?}",
            outcome.run_id,
            outcome.error
        );
    }
}

fn settle_error(state: &GatewayState, keys: &[String], error: &ErrorShape) {
    for key in keys {
        state.idempotency.finish(
            key,
            false,
            serde_json::json!({"status": "error", "summary": error.message}),
            Some(error.to_json()),
            now_ms(),
        );
    }
}
