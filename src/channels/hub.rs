//! The hub: the production `InboundSink` and the one command queue of the
//! gateway. An adapter's `InboundEvent` runs through
//! `InboundPipeline::process` (on a blocking thread: it touches the store),
//! and each decision is carried out here:
//! - `Run` → `CommandQueue::enqueue` with `messages.queue` for the channel,
//!   the typing indicator started, the reply route riding along;
//! - `Command` → `commands::execute` (never the agent);
//! - `Reply` (a pairing code) → sent through the adapter;
//! - `Held` (inbound debounce) → a timer that calls `flush_due` and enqueues.
//!
//! The web chat's `chat.send` enqueues on the same queue, so queue modes
//! apply to it too. Deliveries that finally failed are kept in a bounded log
//! and reported to the [`HubObserver`] (the gateway tells web clients).
//! Everything the hub uses comes in [`HubDeps`] from the composition root.
//!
//! The hub wires layers together; it must not parse platform payloads,
//! shape replies or run the agent itself.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::agent::inbound_media::{self, MediaInput};
use crate::agent::providers::ImagePart;
use crate::agent::{AgentRuntime, SubagentRegistry, DEFAULT_RUN_TIMEOUT_MS};
use crate::config::schema::common::ReplyToMode;
use crate::config::Config;
use crate::pipeline::commands::CommandInvocation;
use crate::pipeline::mentions::MentionPatterns;
use crate::pipeline::{debounce_key, Decision, Inbound, InboundPipeline, TypingGuard};
use crate::queue::{CommandQueue, EnqueueOutcome, LaneKind, QueueSettings, QueuedMessage};
use crate::routing::{Route, Router};
use crate::system::clock::now_ms;

use super::media_out::MediaSources;
use super::outbound::{self, DeliveryError, ReplyQuote};
use super::registry::ChannelRegistry;
use super::settings::ChannelSettings;
use super::stream::{DeliveryReport, ReplyRoute};
use super::turns::{ChannelTurnRunner, TurnOrigin, WebchatAnswers};
use super::typing::ChannelTyping;
use super::{
    BoxFuture, Channel, InboundError, InboundEvent, InboundSink, OutboundTarget, TextFormat,
};

/// How often shutdown checks whether the queue is idle.
const IDLE_POLL_MS: u64 = 20;
/// How long shutdown waits for replies still being delivered.
pub const SHUTDOWN_DELIVERY_WAIT_MS: u64 = 5_000;

/// Failed deliveries remembered for status and tests.
pub const MAX_DELIVERY_FAILURES: usize = 50;

/// One delivery that finally failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryFailure {
    pub run_id: Option<String>,
    pub session_key: String,
    pub error: DeliveryError,
    pub at_ms: u64,
}

/// Where a conversation's messages came from and its answers go.
pub(super) struct Destination {
    pub(super) route: Route,
    pub(super) target: OutboundTarget,
    pub(super) settings: ChannelSettings,
    pub(super) adapter: Arc<dyn Channel>,
    /// The conversation is a group (some commands are refused there).
    pub(super) is_group: bool,
    /// The bot was mentioned (or replied to).
    pub(super) mentioned: bool,
    /// The platform id of the message (for the ack reaction).
    pub(super) message_id: Option<String>,
    /// Broadcast groups: the other agents' routes this message also runs on.
    pub(super) broadcast: Vec<Route>,
    /// The durable inbox records of the messages this answers (`inbox`).
    pub(super) inbox: Vec<String>,
    /// Images the message carries to a vision model (`agent::inbound_media`).
    pub(super) images: Vec<ImagePart>,
    /// The message carried audio (a voice note): `tts.auto: "inbound"` speaks the answer.
    pub(super) inbound_audio: bool,
}

/// Hears what the hub cannot handle alone (the gateway implements it).
pub trait HubObserver: Send + Sync {
    /// A reply finally failed to reach its chat.
    fn delivery_failed(&self, run_id: Option<&str>, session_key: &str, error: &DeliveryError);
}

/// What the hub is built from.
pub struct HubDeps {
    /// Runs turns; its store keeps the inbox, its config the channel settings.
    pub runtime: Arc<AgentRuntime>,
    /// The running chat adapters.
    pub channels: Arc<ChannelRegistry>,
    /// Reset, patch and compact for the chat commands.
    pub sessions: Arc<crate::agent::SessionOps>,
    /// The sub-agent registry (`/subagents`).
    pub subagents: Arc<SubagentRegistry>,
    pub observer: Arc<dyn HubObserver>,
    /// The requests waiting on web chat turns.
    pub answers: Arc<dyn WebchatAnswers>,
}

/// The message path of one gateway.
pub struct ChannelHub {
    pub deps: HubDeps,
    me: Weak<ChannelHub>,
    pub pipeline: Arc<InboundPipeline>,
    pub queue: CommandQueue,
    router: Arc<Router>,
    /// The config the router was built from (rebuilt when it changes).
    routed: Mutex<Weak<Config>>,
    held: Mutex<HashMap<String, Destination>>,
    failures: Mutex<VecDeque<DeliveryFailure>>,
    /// Per session, the completion of its last queued command.
    command_tails: Mutex<HashMap<String, (u64, oneshot::Receiver<()>)>>,
    /// Per session, the completion of the last message whose attachments are being understood
    /// (the session's later messages wait for it).
    media_tails: Mutex<HashMap<String, (u64, oneshot::Receiver<()>)>>,
    next_command: AtomicU64,
    /// Compiled mention patterns per agent of one config version (bounded by
    /// the config's agents; dropped when the config changes).
    mentions: Mutex<(Weak<Config>, MentionCache)>,
}

/// Compiled mention patterns by agent id.
type MentionCache = HashMap<String, Arc<MentionPatterns>>;

/// The run timeout from `agents.defaults.timeoutSeconds`.
pub fn run_timeout_ms(config: &Config) -> u64 {
    config
        .agents
        .defaults
        .timeout_seconds
        .map_or(DEFAULT_RUN_TIMEOUT_MS, |s| u64::from(s) * 1000)
}

impl ChannelHub {
    pub fn new(deps: HubDeps) -> Arc<ChannelHub> {
        let config = deps.runtime.config();
        let router = Arc::new(Router::new(&config));
        // The one gate: channel turns wait in the same lanes as every other run.
        let gate = deps.runtime.runs.gate().clone();
        let store = deps.runtime.store.clone();
        Arc::new_cyclic(|me| ChannelHub {
            me: me.clone(),
            deps,
            pipeline: Arc::new(InboundPipeline::new(store, router.clone())),
            queue: CommandQueue::new(gate, Arc::new(ChannelTurnRunner::new(me.clone()))),
            router,
            routed: Mutex::new(Arc::downgrade(&config)),
            held: Mutex::new(HashMap::new()),
            failures: Mutex::new(VecDeque::new()),
            command_tails: Mutex::new(HashMap::new()),
            media_tails: Mutex::new(HashMap::new()),
            next_command: AtomicU64::new(0),
            mentions: Mutex::new((Weak::new(), HashMap::new())),
        })
    }

    /// The running configuration.
    pub fn config(&self) -> Arc<Config> {
        self.deps.runtime.config()
    }

    /// A handle that does not keep the hub alive (queued messages hold one).
    pub fn weak(&self) -> Weak<ChannelHub> {
        self.me.clone()
    }

    /// Rebuilds the routing tables when the config was swapped.
    /// The mention patterns of `agent_id` under `config`, compiled once per
    /// config version.
    fn mention_patterns(&self, config: &Arc<Config>, agent_id: &str) -> Arc<MentionPatterns> {
        let mut cache = self.mentions.lock();
        if !cache
            .0
            .upgrade()
            .is_some_and(|seen| Arc::ptr_eq(&seen, config))
        {
            *cache = (Arc::downgrade(config), HashMap::new());
        }
        cache
            .1
            .entry(agent_id.to_string())
            .or_insert_with(|| Arc::new(MentionPatterns::for_agent(config, agent_id)))
            .clone()
    }

    fn refresh_router(&self, config: &Arc<Config>) {
        let mut routed = self.routed.lock();
        if routed
            .upgrade()
            .is_some_and(|seen| Arc::ptr_eq(&seen, config))
        {
            return;
        }
        self.router.reload(config);
        *routed = Arc::downgrade(config);
    }

    /// Waits (at most `limit`) until no turn is running or waiting, so
    /// replies still being delivered reach their adapters before shutdown.
    pub async fn wait_idle(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.queue.session_count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(IDLE_POLL_MS)).await;
        }
    }

    /// The session's `/verbose` level (off when it has none or the store fails).
    fn verbosity(&self, session_key: &str) -> super::stream::ToolVerbosity {
        let store = &self.deps.runtime.store;
        let level = store
            .run_blocking(|| store.session(session_key))
            .ok()
            .flatten()
            .and_then(|entry| entry.verbose_level);
        super::stream::ToolVerbosity::from_level(level.as_deref())
    }

    /// Deliveries that finally failed, oldest first.
    pub fn delivery_failures(&self) -> Vec<DeliveryFailure> {
        self.failures.lock().iter().cloned().collect()
    }

    /// Logs a run's failed deliveries and tells the observer about them.
    pub fn record_delivery(&self, run_id: Option<&str>, session_key: &str, report: DeliveryReport) {
        for error in report.failures {
            log::warn!("delivery for {session_key} failed: {error}");
            self.deps
                .observer
                .delivery_failed(run_id, session_key, &error);
            let mut failures = self.failures.lock();
            failures.push_back(DeliveryFailure {
                run_id: run_id.map(str::to_string),
                session_key: session_key.to_string(),
                error,
                at_ms: now_ms(),
            });
            while failures.len() > MAX_DELIVERY_FAILURES {
                failures.pop_front();
            }
        }
    }

    /// Queues a run for a channel conversation.
    pub(super) fn enqueue_channel_run(
        &self,
        config: &Config,
        route: &Route,
        text: String,
        dest: Destination,
    ) -> EnqueueOutcome {
        let Destination {
            mut target,
            settings,
            adapter,
            inbox,
            message_id,
            images,
            inbound_audio,
            ..
        } = dest;
        // The answering agent's own reply pacing (`humanDelay`).
        let settings = settings.for_agent(config, &route.agent_id);
        // The run's messages quote the inbound one as replyToMode says.
        target.reply_to_message_id = None;
        let quote = Arc::new(ReplyQuote::new(settings.reply_to_mode, message_id));
        let typing = settings
            .typing
            .then(|| {
                ChannelTyping::for_target(
                    adapter.clone(),
                    target.clone(),
                    settings.typing_interval_ms,
                )
            })
            .flatten()
            .map(|typing| TypingGuard::start(Arc::new(typing)));
        let run_id = super::inbox::run_id_for(&route.channel, &route.session_key, &inbox);
        let speech = super::speech::plan(config, &route.channel, &target.account_id, inbound_audio);
        let origin = TurnOrigin {
            agent_id: route.agent_id.clone(),
            channel: route.channel.clone(),
            run_id: run_id.clone(),
            timeout_ms: run_timeout_ms(config),
            reply: Some(ReplyRoute {
                channel: adapter,
                target,
                settings,
                session_key: route.session_key.clone(),
                verbose: self.verbosity(&route.session_key),
                quote,
                media: self.media_sources(config, &route.agent_id),
                speech,
            }),
            requester: None,
            idempotency_key: None,
            typing,
            hub: self.me.clone(),
            system_event: false,
            inbox,
            images,
        };
        let settings = QueueSettings::for_channel(&config.messages.queue, &route.channel);
        let message = QueuedMessage {
            id: run_id,
            text,
            attachment: Some(Box::new(origin)),
        };
        let outcome = self
            .queue
            .enqueue(&route.session_key, LaneKind::Main, settings, message);
        log::debug!("message for {} queued: {outcome:?}", route.session_key);
        outcome
    }

    /// Where an agent's replies may take files from: its workspace and the
    /// media area.
    pub fn media_sources(&self, config: &Config, agent_id: &str) -> MediaSources {
        MediaSources {
            workspace: self.deps.runtime.workspace_for(config, agent_id),
            media_root: super::media::media_root(),
            http: self.deps.runtime.http(),
        }
    }

    /// Sends a short text (pairing code, command answer) to a conversation.
    pub async fn send_notice(
        &self,
        adapter: &dyn Channel,
        target: &OutboundTarget,
        settings: &ChannelSettings,
        session_key: &str,
        text: &str,
    ) {
        // A failure is already logged and kept in the failure log.
        let _ = self
            .send_whole_text(
                adapter,
                target,
                settings,
                session_key,
                text,
                TextFormat::Plain,
            )
            .await;
    }

    /// Sends a finished text outside a run's reply stream, split to the
    /// platform's limits with the channel's retries; every piece is recorded
    /// as an echo, a final failure in the failure log (and returned).
    pub async fn send_whole_text(
        &self,
        adapter: &dyn Channel,
        target: &OutboundTarget,
        settings: &ChannelSettings,
        session_key: &str,
        text: &str,
        format: TextFormat,
    ) -> Result<(), DeliveryError> {
        let limits = settings.text_limits(adapter.text_limits());
        let sent = outbound::send_text(adapter, target, text, format, settings.retry, limits).await;
        match sent {
            Ok(_) => {
                for piece in outbound::split_for_limits(text, limits) {
                    self.pipeline.record_outbound(session_key, &piece);
                }
                Ok(())
            }
            Err(error) => {
                let report = DeliveryReport {
                    failures: vec![error.clone()],
                    ..DeliveryReport::default()
                };
                self.record_delivery(None, session_key, report);
                Err(error)
            }
        }
    }

    /// Accepts an adapter's event: recorded in the durable inbox first (so
    /// the adapter may advance its cursor), then handled; the record goes
    /// when the message's turn ends or it needs none.
    async fn accept(self: Arc<Self>, event: InboundEvent) -> Result<(), InboundError> {
        let store = self.deps.runtime.store.clone();
        let key = super::inbox::record(&store, &event).await?;
        let outcome = self.handle_event(event, vec![key.clone()], false).await;
        if outcome.is_err() {
            // The adapter delivers it again; this record would double it.
            super::inbox::forget(&store, vec![key]);
        }
        outcome
    }

    /// Hands every message accepted before a restart but not answered to
    /// the message path again (oldest first).
    pub async fn replay_inbox(self: Arc<Self>) {
        let store = self.deps.runtime.store.clone();
        for (key, event) in super::inbox::pending(&store).await {
            log::info!(
                "replaying {} message accepted before the restart",
                event.channel
            );
            if let Err(error) = self
                .clone()
                .handle_event(event, vec![key.clone()], true)
                .await
            {
                log::warn!("replayed message dropped: {error}");
                super::inbox::forget(&store, vec![key]);
            }
        }
    }

    async fn handle_event(
        self: Arc<Self>,
        mut event: InboundEvent,
        inbox: Vec<String>,
        replay: bool,
    ) -> Result<(), InboundError> {
        let config = self.config();
        self.refresh_router(&config);
        let Some(adapter) = self.deps.channels.get(&event.channel) else {
            return Err(InboundError::NoAdapter(event.channel));
        };
        let settings = ChannelSettings::for_event(&config, &event);
        // A forum topic that names its agent routes there (before bindings decide).
        event.route.agent_override = settings.agent_override.clone();
        let mut target = event.reply_target();
        // Notices and command answers are single messages: quoted unless off.
        if settings.reply_to_mode != ReplyToMode::Off {
            target.reply_to_message_id = event.message.message_id.clone();
        }
        let is_group = event.message.group_id.is_some()
            || event
                .message
                .chat_type
                .is_some_and(crate::pipeline::context::ChatType::is_group);
        let route = self.router.resolve(&event.route);
        let (mut broadcast, _strategy) = self.router.resolve_all(&event.route);
        broadcast.retain(|r| r.session_key != route.session_key);
        let sender_id = event.message.sender_id.clone();
        // `mentionPatterns`: text naming the bot counts as a mention in a group.
        if is_group
            && !event.bot_mentioned
            && self
                .mention_patterns(&config, &route.agent_id)
                .matches(&event.message.body)
        {
            event.bot_mentioned = true;
        }
        let mentioned =
            event.bot_mentioned || event.message.mentioned || event.message.is_reply_to_bot;
        let message_id = event.message.message_id.clone();
        let decision = self.decide(event, &settings, replay).await?;
        let dest = Destination {
            inbox,
            broadcast,
            route,
            target,
            settings,
            adapter,
            is_group,
            mentioned,
            message_id,
            images: Vec::new(),
            inbound_audio: false,
        };
        self.in_order(config, decision, dest, sender_id);
        Ok(())
    }

    /// Carries out `decision` in the conversation's order. A message with attachments is
    /// understood in a task of its own (a transcription takes seconds; the adapter goes on
    /// reading its platform), and the session's later messages wait for it.
    fn in_order(
        self: &Arc<Self>,
        config: Arc<Config>,
        decision: Decision,
        dest: Destination,
        sender_id: String,
    ) {
        let key = dest.route.session_key.clone();
        let has_media = matches!(&decision, Decision::Run { message, .. }
            if !message.media.is_empty() || !message.media_problems.is_empty());
        let mut tails = self.media_tails.lock();
        if !has_media && !tails.contains_key(&key) {
            drop(tails);
            self.carry_out(&config, decision, dest, sender_id);
            return;
        }
        let id = self.next_command.fetch_add(1, Ordering::Relaxed);
        let (done, tail) = oneshot::channel::<()>();
        let previous = tails
            .insert(key.clone(), (id, tail))
            .map(|(_, previous)| previous);
        drop(tails);
        let hub = self.clone();
        tokio::spawn(async move {
            if let Some(previous) = previous {
                let _ = previous.await;
            }
            let mut dest = dest;
            let decision = match decision {
                Decision::Run { mut message, route } => {
                    dest.inbound_audio = message.media.iter().any(|item| {
                        item.mime_type
                            .as_deref()
                            .is_some_and(|m| m.starts_with("audio/"))
                    });
                    dest.images = hub
                        .understand_media(&config, &mut message, &route, &dest)
                        .await;
                    Decision::Run { message, route }
                }
                other => other,
            };
            hub.carry_out(&config, decision, dest, sender_id);
            let _ = done.send(());
            let mut tails = hub.media_tails.lock();
            if tails.get(&key).is_some_and(|(tail, _)| *tail == id) {
                tails.remove(&key);
            }
        });
    }

    /// Understands an admitted message's attachments before its turn (transcripts, document text
    /// and markers join the agent's text; images are returned for the turn) and tells the sender
    /// what could not be used.
    async fn understand_media(
        &self,
        config: &Config,
        message: &mut crate::pipeline::context::InboundMessage,
        route: &Route,
        dest: &Destination,
    ) -> Vec<ImagePart> {
        let mut notices = std::mem::take(&mut message.media_problems);
        let mut images = Vec::new();
        if !message.media.is_empty() {
            let http = self.deps.runtime.http();
            let input = MediaInput {
                config,
                http: &http,
                agent_id: &route.agent_id,
                items: &message.media,
                prepared_dir: super::media::media_root().join("prepared"),
                budget: crate::media::MediaBudget::for_this_board(),
            };
            let understood = inbound_media::understand(input).await;
            if !understood.agent_text.is_empty() {
                let body = &mut message.body_for_agent;
                if !body.is_empty() {
                    body.push_str("\n\n");
                }
                body.push_str(&understood.agent_text);
            }
            if let Some(transcript) = understood.transcript {
                for item in message.media.iter_mut().filter(|i| {
                    i.mime_type
                        .as_deref()
                        .is_some_and(|m| m.starts_with("audio/"))
                }) {
                    item.transcript = Some(transcript.clone());
                }
            }
            images = understood.images;
            notices.extend(understood.notices);
        }
        if !notices.is_empty() {
            let text = notices.join("\n");
            let (adapter, target, settings) = (
                dest.adapter.clone(),
                dest.target.clone(),
                dest.settings.clone(),
            );
            let session_key = route.session_key.clone();
            let hub = self.me.clone();
            tokio::spawn(async move {
                if let Some(hub) = hub.upgrade() {
                    hub.send_notice(&*adapter, &target, &settings, &session_key, &text)
                        .await;
                }
            });
        }
        images
    }

    /// Runs the pipeline on a blocking thread (it reads and writes the store).
    async fn decide(
        &self,
        event: InboundEvent,
        settings: &ChannelSettings,
        replay: bool,
    ) -> Result<Decision, InboundError> {
        let pipeline = self.pipeline.clone();
        let access = settings.access.clone();
        let debounce_ms = settings.inbound_debounce_ms;
        let group_history_limit = settings.group_history_limit;
        let config = self.config();
        tokio::task::spawn_blocking(move || {
            let inbound = Inbound {
                policy: &access,
                route_input: event.route,
                bot_username: event.bot_username.as_deref(),
                bot_mentioned: event.bot_mentioned,
                debounce_ms,
                now_ms: now_ms(),
                replay,
                group_history_limit,
                reset_triggers: &config.session.reset_triggers,
            };
            pipeline.process(event.message, inbound)
        })
        .await
        .map_err(InboundError::PipelineTask)?
        .map_err(InboundError::from)
    }

    /// Acts on the pipeline's decision; slow work (commands, notices) runs
    /// in its own task so the adapter is not held up.
    fn carry_out(
        self: &Arc<Self>,
        config: &Config,
        decision: Decision,
        dest: Destination,
        sender_id: String,
    ) {
        if matches!(decision, Decision::Run { .. } | Decision::Held { .. }) {
            ack_reaction(&dest);
            read_receipt(&dest, &sender_id);
        } else {
            // Commands, pairing codes and ignored messages need no turn: their
            // inbox records go now.
            super::inbox::forget(&self.deps.runtime.store, dest.inbox.clone());
        }
        match decision {
            Decision::Run { message, route } => {
                // A burst the debouncer released early needs no timer entry.
                self.held.lock().remove(&debounce_key(&route));
                for other in &dest.broadcast {
                    // Each agent of a broadcast group answers in its own session, in parallel.
                    let copy = Destination {
                        route: other.clone(),
                        target: dest.target.clone(),
                        settings: dest.settings.clone(),
                        adapter: dest.adapter.clone(),
                        is_group: dest.is_group,
                        mentioned: dest.mentioned,
                        message_id: dest.message_id.clone(),
                        broadcast: Vec::new(),
                        inbox: Vec::new(),
                        images: dest.images.clone(),
                        inbound_audio: dest.inbound_audio,
                    };
                    self.enqueue_channel_run(config, other, message.body_for_agent.clone(), copy);
                }
                self.enqueue_channel_run(config, &route, message.body_for_agent, dest);
            }
            Decision::Command { command, route } => {
                self.spawn_command(command, route, dest, sender_id);
            }
            Decision::Reply(text) => {
                let hub = self.clone();
                tokio::spawn(async move {
                    let (adapter, target, settings) =
                        (&*dest.adapter, &dest.target, &dest.settings);
                    hub.send_notice(adapter, target, settings, &dest.route.session_key, &text)
                        .await;
                });
            }
            Decision::Held { flush_at_ms } => self.hold(dest, flush_at_ms),
            Decision::Ignored(reason) => {
                log::debug!("inbound message ignored: {reason:?}");
            }
        }
    }

    /// Runs a chat command in its own task, after the session's previous
    /// command finished (commands of one conversation keep their order).
    fn spawn_command(
        self: &Arc<Self>,
        command: CommandInvocation,
        route: Route,
        dest: Destination,
        sender_id: String,
    ) {
        let id = self.next_command.fetch_add(1, Ordering::Relaxed);
        let (done, tail) = oneshot::channel::<()>();
        let previous = self
            .command_tails
            .lock()
            .insert(route.session_key.clone(), (id, tail))
            .map(|(_, previous)| previous);
        let hub = self.clone();
        tokio::spawn(async move {
            if let Some(previous) = previous {
                let _ = previous.await;
            }
            super::commands::execute(&hub, command, &route, dest, &sender_id).await;
            let _ = done.send(());
            let mut tails = hub.command_tails.lock();
            if tails
                .get(&route.session_key)
                .is_some_and(|(tail, _)| *tail == id)
            {
                tails.remove(&route.session_key);
            }
        });
    }

    /// Remembers where a held burst goes and arms its flush timer.
    fn hold(self: &Arc<Self>, mut dest: Destination, flush_at_ms: u64) {
        let key = debounce_key(&dest.route);
        let mut held = self.held.lock();
        if let Some(earlier) = held.remove(&key) {
            // The burst's earlier messages are answered by the same turn.
            let mut inbox = earlier.inbox;
            inbox.append(&mut dest.inbox);
            dest.inbox = inbox;
        }
        held.insert(key, dest);
        drop(held);
        let hub = Arc::downgrade(self);
        let wait = flush_at_ms.saturating_sub(now_ms());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(wait)).await;
            if let Some(hub) = hub.upgrade() {
                hub.flush_held();
            }
        });
    }

    /// Enqueues every burst whose quiet period ended.
    fn flush_held(&self) {
        let config = self.config();
        for (key, text) in self.pipeline.flush_due(now_ms()) {
            let dest = self.held.lock().remove(&key);
            match dest {
                Some(dest) => {
                    let route = dest.route.clone();
                    self.enqueue_channel_run(&config, &route, text, dest);
                }
                None => log::warn!("debounced burst {key:?} has no destination; dropped"),
            }
        }
    }
}

/// Reacts to an admitted message with the configured ack emoji, where the
/// adapter can react and the scope covers the conversation (fire and forget).
fn ack_reaction(dest: &Destination) {
    let emoji = dest
        .settings
        .ack_reaction_for(dest.is_group, dest.mentioned);
    let (Some(emoji), Some(message_id)) = (emoji, dest.message_id.clone()) else {
        return;
    };
    if dest.adapter.reactions().is_none() {
        return;
    }
    let (adapter, target, emoji) = (dest.adapter.clone(), dest.target.clone(), emoji.to_string());
    tokio::spawn(async move {
        if let Some(react) = adapter.reactions() {
            if let Err(error) = react.react(&target, &message_id, &emoji).await {
                log::debug!("{} ack reaction failed: {error}", adapter.id());
            }
        }
    });
}

/// Tells the sender of an admitted message that it was read, where the
/// adapter's account sends read receipts (fire and forget; an adapter that
/// has none for groups refuses those).
fn read_receipt(dest: &Destination, sender_id: &str) {
    let Some(message_id) = dest.message_id.clone() else {
        return;
    };
    if dest
        .adapter
        .read_receipts(&dest.target.account_id)
        .is_none()
    {
        return;
    }
    let (adapter, target) = (dest.adapter.clone(), dest.target.clone());
    let sender_id = sender_id.to_string();
    tokio::spawn(async move {
        if let Some(receipts) = adapter.read_receipts(&target.account_id) {
            if let Err(error) = receipts.mark_read(&target, &message_id, &sender_id).await {
                log::debug!("{} read receipt failed: {error}", adapter.id());
            }
        }
    });
}

/// What an adapter needs from the hub: a sink that outlives the call.
pub struct HubSink(pub Arc<ChannelHub>);

impl InboundSink for HubSink {
    fn deliver(&self, event: InboundEvent) -> BoxFuture<'_, Result<(), InboundError>> {
        Box::pin(self.0.clone().accept(event))
    }
}
