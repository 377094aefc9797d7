//! The production `TurnRunner`: a turn the command queue releases becomes a
//! run of the agent runtime (`AgentRuntime::prepare` + `execute`, the same
//! code the `agent` method uses, so web clients see it through the runtime's
//! observer), and its replies go to the channel the messages came from
//! (`stream::deliver_run`).
//!
//! What a queued message carries to its turn — agent, channel, reply target,
//! the web chat's requester and idempotency key, the typing indicator — is a
//! [`TurnOrigin`] riding in the message's attachment. A turn answers the
//! last of its messages' origins; the idempotency keys of all of them are
//! settled with the run's result through [`WebchatAnswers`], the port the
//! gateway implements (a message dropped from a full queue forgets its key,
//! so a retry can run).
//!
//! This file must not decide whether a message is answered (the pipeline
//! and the queue do) nor format replies (the reply layer does).

use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use crate::agent::{
    ReplySettlement, ResetChat, RunOrigin, RunOutcome, RunStartError, TurnSpec, Unrecorded,
};
use crate::pipeline::TypingGuard;
use crate::queue::{Turn, TurnContext, TurnRunner};
use crate::system::clock::now_ms;

use super::hub::ChannelHub;
use super::stream::{deliver_run, ReplyRoute};

/// Events a run may buffer for its channel delivery before it waits.
const DELIVERY_EVENT_BUFFER: usize = 256;

/// The requests waiting on web chat turns (the gateway's idempotency cache).
pub trait WebchatAnswers: Send + Sync {
    /// A message was dropped before its turn ran: its key is forgotten, so a retry runs.
    fn forget(&self, key: &str);
    /// The turn did not start: its keys are answered with the error.
    fn refuse(&self, keys: &[String], error: &RunStartError);
    /// The owner of one turn's answers, committed with its reply; `done` are the inbox records the
    /// answer removes.
    fn begin(&self, keys: Vec<String>, done: Vec<String>) -> Arc<dyn TurnAnswers>;
}

/// One turn's answers: written with the reply's commit when there is one, settled when the run ends.
pub trait TurnAnswers: ReplySettlement {
    /// The run ended: answers already committed are settled in memory, the rest written now (blocks on
    /// the store).
    fn settle(&self, outcome: &RunOutcome);
}

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
    /// To forget an unsettled idempotency key and the inbox records when the
    /// message is dropped.
    pub hub: Weak<ChannelHub>,
    /// An event from inside pincer (a sub-agent's announcement), not a user's message: it never
    /// starts a new session under `session.reset`, as upstream's system events.
    pub system_event: bool,
    /// Durable inbox records of the channel messages this answers: removed
    /// when the origin goes (the turn ended, the message was steered into a
    /// turn or dropped by the queue), replayed after a crash otherwise.
    pub inbox: Vec<String>,
    /// Images the message carries to a vision model (none when the model takes none).
    pub images: Vec<crate::agent::providers::ImagePart>,
}

impl Drop for TurnOrigin {
    fn drop(&mut self) {
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        if !self.inbox.is_empty() {
            super::inbox::forget(&hub.deps.runtime.store, std::mem::take(&mut self.inbox));
        }
        if let Some(key) = self.idempotency_key.take() {
            hub.deps.answers.forget(&key);
        }
    }
}

/// Runs queued turns as agent runs.
pub struct ChannelTurnRunner {
    hub: Weak<ChannelHub>,
}

impl ChannelTurnRunner {
    pub fn new(hub: Weak<ChannelHub>) -> ChannelTurnRunner {
        ChannelTurnRunner { hub }
    }
}

impl TurnRunner for ChannelTurnRunner {
    fn run(&self, turn: Turn, ctx: TurnContext) -> BoxFuture<'static, ()> {
        let hub = self.hub.clone();
        Box::pin(async move {
            let Some(hub) = hub.upgrade() else {
                return;
            };
            run_turn(hub, turn, ctx).await;
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

async fn run_turn(hub: Arc<ChannelHub>, mut turn: Turn, ctx: TurnContext) {
    let TurnContext {
        cancel: queue_cancel,
        steer,
        pass,
    } = ctx;
    let runtime = hub.deps.runtime.clone();
    let mut origins = take_origins(&mut turn);
    let keys: Vec<String> = origins
        .iter_mut()
        .filter_map(|o| o.idempotency_key.take())
        .collect();
    let typing: Vec<TypingGuard> = origins.iter_mut().filter_map(|o| o.typing.take()).collect();
    let from_a_user = origins.iter().any(|o| !o.system_event);
    // Every collected message's images go with the turn's prompt, the newest kept within the cap.
    let mut images: Vec<_> = origins
        .iter_mut()
        .flat_map(|o| std::mem::take(&mut o.images))
        .collect();
    let over = images.len().saturating_sub(crate::agent::MAX_TURN_IMAGES);
    images.drain(..over);
    let Some(last) = origins.last_mut() else {
        log::warn!("turn for {} carried no origin; dropped", turn.session_key);
        return;
    };
    let mut spec = turn_spec(&turn, last, from_a_user);
    spec.images = images;
    if from_a_user {
        roll_over_if_stale(&hub, &spec);
    }
    // A session whose `sendPolicy` is `deny` runs its turn but delivers nothing (as upstream).
    let reply = last
        .reply
        .take()
        .filter(|_| !sends_denied(&hub, &spec.session_key));
    let (tap, tap_rx) = mpsc::channel(DELIVERY_EVENT_BUFFER);
    let origin = RunOrigin {
        requester: last.requester.clone(),
        final_reply: None,
        idempotency_key: None,
        tap: reply.is_some().then_some(tap),
    };
    let mut prepared = match runtime.prepare(spec, origin) {
        Ok(prepared) => prepared,
        Err(RunStartError::ShuttingDown) if runtime.lifecycle.is_draining() => {
            // Not lost: the inbox keeps its messages and the next start (a
            // restart in place, or the service manager's) answers them.
            log::info!(
                "turn for {} kept for the next start: the gateway is stopping",
                turn.session_key
            );
            for origin in &mut origins {
                origin.inbox.clear();
            }
            return;
        }
        Err(error) => {
            log::warn!("turn for {} not started: {error}", turn.session_key);
            hub.deps.answers.refuse(&keys, &error);
            return;
        }
    };
    prepared.set_steer(steer);
    prepared.set_admitted(pass);
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
    let answers = (!keys.is_empty()).then(|| {
        let owner = hub.deps.answers.begin(keys, done);
        let settlement: Arc<dyn ReplySettlement> = owner.clone();
        prepared.set_settlement(settlement);
        owner
    });
    let run_id = prepared.run_id().to_string();
    let route = reply
        .as_ref()
        .map(|r| (r.channel.id().to_string(), r.target.clone()));
    let link = link_abort(queue_cancel, prepared.cancel_token());
    let delivery = reply.map(|route| {
        let pipeline = hub.pipeline.clone();
        tokio::spawn(deliver_run(route, pipeline, typing, tap_rx))
    });
    let outcome = prepared.execute().await;
    link.abort();
    if outcome.unrecorded == Some(Unrecorded::Message) {
        // Nothing ran, so nothing was answered: the messages stay in the inbox for the next start.
        log::warn!(
            "turn for {}: its message could not be recorded; kept in the inbox for the next start",
            turn.session_key
        );
        for origin in &mut origins {
            origin.inbox.clear();
        }
    }
    if let Some(answers) = answers {
        answers.settle(&outcome);
    }
    if let Some((channel, target)) = &route {
        let recorded = runtime.store.run_blocking(|| {
            super::deliver::record_last_route(&runtime.store, &turn.session_key, channel, target)
        });
        if let Err(e) = recorded {
            log::warn!("cannot record the last route of {}: {e}", turn.session_key);
        }
    }
    if let Some(delivery) = delivery {
        match delivery.await {
            Ok(report) => hub.record_delivery(Some(&run_id), &turn.session_key, report),
            Err(error) => log::warn!("reply delivery task failed: {error}"),
        }
    }
}

/// A session `session.reset` calls stale starts over before the turn runs in it (the turn holds the
/// session's lane, so nothing else runs there).
fn roll_over_if_stale(hub: &ChannelHub, spec: &TurnSpec) {
    let chat = ResetChat {
        channel: spec.channel.as_deref(),
        is_group: false,
    };
    let sessions = &hub.deps.sessions;
    let rolled = hub
        .deps
        .runtime
        .store
        .run_blocking(|| sessions.roll_over_if_stale(&spec.session_key, &chat, now_ms()));
    if let Err(error) = rolled {
        log::warn!(
            "cannot check whether session {} is stale: {error}",
            spec.session_key
        );
    }
}

/// Whether `session_key`'s `sendPolicy` override is `deny` (an unreadable entry allows).
fn sends_denied(hub: &ChannelHub, session_key: &str) -> bool {
    let store = &hub.deps.runtime.store;
    match store.run_blocking(|| store.session(session_key)) {
        Ok(entry) => entry.is_some_and(|e| e.sends_denied()),
        Err(error) => {
            log::warn!("cannot read the send policy of {session_key}: {error}");
            false
        }
    }
}

/// The agent run for a turn: the prompt the queue built, the last origin's
/// agent, channel, run id and timeout, and what its conversation adds (a
/// group's `systemPrompt` and `skills`).
fn turn_spec(turn: &Turn, last: &TurnOrigin, from_a_user: bool) -> TurnSpec {
    let settings = last.reply.as_ref().map(|r| &r.settings);
    TurnSpec {
        run_id: last.run_id.clone(),
        agent_id: last.agent_id.clone(),
        session_key: turn.session_key.clone(),
        message: turn.prompt.clone(),
        timeout_ms: last.timeout_ms,
        model_override: None,
        extra_system_prompt: settings.and_then(|s| s.group_system_prompt.clone()),
        label: None,
        channel: Some(last.channel.clone()),
        skill_filter: settings.and_then(|s| s.skill_filter.clone()),
        interaction: from_a_user,
        images: Vec::new(),
    }
}

/// The queue aborting the turn (interrupt, `/stop`) aborts the run.
fn link_abort(
    queue_cancel: tokio_util::sync::CancellationToken,
    run_cancel: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        queue_cancel.cancelled().await;
        run_cancel.cancel();
    })
}
