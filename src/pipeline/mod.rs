//! Layer 1's channel-agnostic half: everything between a normalised
//! platform event and a queued run. A message is finalised (`context.rs`),
//! dropped if it is our own echo (`echo.rs`) or a duplicate delivery
//! (`dedupe.rs`), checked against the DM and group policies with DM pairing
//! (`access.rs`), recognised as a command (`commands.rs`), routed, and
//! debounced (`debounce.rs`) before the caller hands it to the queue (a
//! session's send policy applies to its replies, in the turn). Channel
//! abilities the pipeline uses are small optional traits (typing
//! indicator, ack reaction) and hooks.
//!
//! The pipeline must not talk to a platform API: it returns decisions.

pub mod access;
pub mod commands;
pub mod context;
pub mod debounce;
pub mod dedupe;
pub mod echo;
pub mod mentions;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use crate::routing::{Route, RouteInput, Router};
use crate::store::{Store, StoreError};

use access::{check_dm, check_group, pairing_reply, AccessPolicy, GroupOrigin, Refusal};
use commands::{parse_command, parse_reset_trigger, CommandInvocation};
use context::{with_group_history, InboundMessage};
use debounce::{DebounceStep, InboundDebouncer};
use dedupe::{DeliveryKey, InboundDedupe};
use echo::EchoTracker;
use parking_lot::Mutex;

/// Errors of the pipeline.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("pipeline store access failed: {0}")]
    Store(#[from] StoreError),
}

/// A channel that can show "typing…".
pub trait TypingIndicator: Send + Sync {
    fn start_typing(&self);
    fn stop_typing(&self);
}

/// A channel that can react to a message (the ack reaction).
pub trait AckReaction: Send + Sync {
    fn react(&self, message_id: &str, emoji: &str);
}

/// Told about every admitted message; its outcome is never awaited.
pub trait MessageReceivedHook: Send + Sync {
    fn message_received(&self, message: &InboundMessage);
}

/// Started at enqueue time; stops typing at the first block sent or when
/// dropped (the run ended).
pub struct TypingGuard {
    indicator: Option<Arc<dyn TypingIndicator>>,
}

impl TypingGuard {
    pub fn start(indicator: Arc<dyn TypingIndicator>) -> TypingGuard {
        indicator.start_typing();
        TypingGuard {
            indicator: Some(indicator),
        }
    }

    /// The first block of the reply went out.
    pub fn first_block_sent(&mut self) {
        if let Some(indicator) = self.indicator.take() {
            indicator.stop_typing();
        }
    }
}

impl Drop for TypingGuard {
    fn drop(&mut self) {
        self.first_block_sent();
    }
}

/// Why a message gets nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IgnoreReason {
    Echo,
    Duplicate,
    Refused(Refusal),
    Empty,
}

/// What the caller does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Queue a run with `message.body_for_agent` on `route`.
    Run {
        message: Box<InboundMessage>,
        route: Route,
    },
    /// Handle a command (never given to the agent).
    Command {
        command: CommandInvocation,
        route: Route,
    },
    /// Send this text back (the pairing code), no run.
    Reply(String),
    /// Held by the inbound debounce; `flush_due` releases it later.
    Held {
        flush_at_ms: u64,
    },
    Ignored(IgnoreReason),
}

/// Per-call inputs besides the message.
pub struct Inbound<'a> {
    pub policy: &'a AccessPolicy,
    pub route_input: RouteInput,
    pub bot_username: Option<&'a str>,
    pub bot_mentioned: bool,
    pub debounce_ms: u64,
    pub now_ms: u64,
    /// A message accepted before a restart and replayed from the store: its
    /// delivery was already recorded, so the duplicate check is skipped.
    pub replay: bool,
    /// Unanswered group messages kept as context (0 disables).
    pub group_history_limit: usize,
    /// `session.resetTriggers`: messages that start a new session like `/new`.
    pub reset_triggers: &'a [String],
}

/// Most groups whose unanswered messages are kept at once (the oldest
/// group's history goes first): a bound whatever the number of groups.
pub const MAX_HISTORY_GROUPS: usize = 256;
/// Longest history kept per group, whatever `historyLimit` says.
pub const MAX_GROUP_HISTORY: usize = 200;

/// Unanswered group messages per group session, bounded in groups and
/// entries; taken (and cleared) when the bot answers in that group.
#[derive(Default)]
struct GroupHistory {
    groups: HashMap<String, VecDeque<String>>,
    order: VecDeque<String>,
}

impl GroupHistory {
    fn record(&mut self, session_key: &str, entry: String, limit: usize) {
        let limit = limit.min(MAX_GROUP_HISTORY);
        if limit == 0 {
            return;
        }
        if !self.groups.contains_key(session_key) {
            while self.groups.len() >= MAX_HISTORY_GROUPS {
                match self.order.pop_front() {
                    Some(oldest) => {
                        self.groups.remove(&oldest);
                    }
                    None => break,
                }
            }
            self.order.push_back(session_key.to_string());
        }
        let entries = self.groups.entry(session_key.to_string()).or_default();
        entries.push_back(entry);
        while entries.len() > limit {
            entries.pop_front();
        }
    }

    fn take(&mut self, session_key: &str) -> Vec<String> {
        self.order.retain(|k| k != session_key);
        self.groups
            .remove(session_key)
            .map(Vec::from)
            .unwrap_or_default()
    }

    fn len(&self) -> usize {
        self.groups.len()
    }
}

/// The inbound-debounce key of a route, as `flush_due` reports it.
pub fn debounce_key(route: &Route) -> String {
    format!("{}\u{1f}{}", route.channel, route.session_key)
}

/// The pipeline of one gateway; share it behind an `Arc`.
pub struct InboundPipeline {
    store: Store,
    router: Arc<Router>,
    pub dedupe: InboundDedupe,
    pub echo: EchoTracker,
    debouncer: Mutex<InboundDebouncer>,
    group_history: Mutex<GroupHistory>,
    pub hook: Option<Arc<dyn MessageReceivedHook>>,
}

impl InboundPipeline {
    pub fn new(store: Store, router: Arc<Router>) -> InboundPipeline {
        InboundPipeline {
            dedupe: InboundDedupe::new(Some(store.clone())),
            store,
            router,
            echo: EchoTracker::new(),
            debouncer: Mutex::new(InboundDebouncer::new()),
            group_history: Mutex::new(GroupHistory::default()),
            hook: None,
        }
    }

    /// Runs one message through every check. Blocks on the store.
    pub fn process(
        &self,
        raw: InboundMessage,
        inbound: Inbound<'_>,
    ) -> Result<Decision, PipelineError> {
        let msg = raw.finalize();
        let route = self.router.resolve(&inbound.route_input);
        if self.echo.is_echo(&route.session_key, &msg.raw_body) {
            return Ok(Decision::Ignored(IgnoreReason::Echo));
        }
        if let Some(message_id) = msg.message_id.as_deref() {
            let key = DeliveryKey {
                channel: &inbound.policy.channel,
                account_id: &inbound.policy.account_id,
                peer_id: inbound
                    .route_input
                    .peer
                    .as_ref()
                    .map_or("", |p| p.id.as_str()),
                session_key: &route.session_key,
                message_id,
            };
            if !inbound.replay && self.dedupe.check_and_record(&key, inbound.now_ms)? {
                return Ok(Decision::Ignored(IgnoreReason::Duplicate));
            }
        }
        let refusal = if msg.chat().is_group() {
            check_group(
                inbound.policy,
                &msg,
                inbound.bot_mentioned,
                GroupOrigin {
                    space: inbound.route_input.guild_id.as_deref(),
                    member_roles: &inbound.route_input.member_roles,
                },
            )
        } else {
            check_dm(inbound.policy, &msg, &self.store, inbound.now_ms)?
        };
        match refusal {
            Some(Refusal::PairingCode(code)) => {
                return Ok(Decision::Reply(pairing_reply(
                    &inbound.policy.channel,
                    &msg.sender_id,
                    &code,
                )))
            }
            Some(Refusal::NotActivated) => {
                // Not addressed to the bot: kept as context for its next answer here.
                self.group_history.lock().record(
                    &route.session_key,
                    msg.body_for_agent.clone(),
                    inbound.group_history_limit,
                );
                return Ok(Decision::Ignored(IgnoreReason::Refused(
                    Refusal::NotActivated,
                )));
            }
            Some(refusal) => return Ok(Decision::Ignored(IgnoreReason::Refused(refusal))),
            None => {}
        }
        if let Some(hook) = &self.hook {
            hook.message_received(&msg);
        }
        let command = parse_reset_trigger(&msg.body_for_commands, inbound.reset_triggers)
            .or_else(|| parse_command(&msg.body_for_commands, inbound.bot_username));
        if let Some(command) = command {
            return Ok(Decision::Command { command, route });
        }
        if msg.body_for_agent.trim().is_empty() {
            return Ok(Decision::Ignored(IgnoreReason::Empty));
        }
        let mut msg = msg;
        if msg.chat().is_group() {
            let history = self.group_history.lock().take(&route.session_key);
            msg.body_for_agent =
                with_group_history(&history, &msg.body_for_agent, inbound.group_history_limit);
        }
        self.debounce(msg, route, &inbound)
    }

    fn debounce(
        &self,
        mut msg: InboundMessage,
        route: Route,
        inbound: &Inbound<'_>,
    ) -> Result<Decision, PipelineError> {
        let key = debounce_key(&route);
        let step = self.debouncer.lock().offer(
            &key,
            &msg.body_for_agent,
            !msg.media.is_empty(),
            false,
            inbound.debounce_ms,
            inbound.now_ms,
        );
        match step {
            DebounceStep::Held { flush_at_ms } => Ok(Decision::Held { flush_at_ms }),
            DebounceStep::Release(text) => {
                msg.body_for_agent = text;
                Ok(Decision::Run {
                    message: Box::new(msg),
                    route,
                })
            }
        }
    }

    /// Bursts whose quiet period ended: `(channel\u{1f}sessionKey, merged text)`.
    pub fn flush_due(&self, now_ms: u64) -> Vec<(String, String)> {
        self.debouncer.lock().due(now_ms)
    }

    /// Groups with unanswered messages kept as context.
    pub fn history_groups(&self) -> usize {
        self.group_history.lock().len()
    }

    /// Remembers an outbound text so its echo is ignored.
    pub fn record_outbound(&self, session_key: &str, text: &str) {
        self.echo.record(session_key, text);
    }
}

#[cfg(test)]
mod group_history_tests {
    use super::*;

    #[test]
    fn history_is_bounded_per_group_and_in_groups() {
        let mut history = GroupHistory::default();
        for i in 0..10 {
            history.record("g", format!("m{i}"), 3);
        }
        assert_eq!(history.take("g"), vec!["m7", "m8", "m9"]);
        assert!(history.take("g").is_empty(), "taken once");
        history.record("off", "x".into(), 0);
        assert_eq!(history.len(), 0, "limit 0 keeps nothing");
        for g in 0..(MAX_HISTORY_GROUPS + 10) {
            history.record(&format!("group-{g}"), "hello".into(), 5);
        }
        assert_eq!(history.len(), MAX_HISTORY_GROUPS);
        assert!(
            history.take("group-0").is_empty(),
            "the oldest group went first"
        );
        assert_eq!(
            history.take(&format!("group-{}", MAX_HISTORY_GROUPS + 9)),
            vec!["hello"]
        );
        history.record("big", "a".into(), MAX_GROUP_HISTORY * 10);
        for _ in 0..(MAX_GROUP_HISTORY * 2) {
            history.record("big", "a".into(), MAX_GROUP_HISTORY * 10);
        }
        assert_eq!(history.take("big").len(), MAX_GROUP_HISTORY);
    }
}
