//! The heartbeat runner: which agents have a heartbeat and how often (`agents.defaults.heartbeat`,
//! per-agent `agents.list[].heartbeat` overriding it key by key; when any agent has its own block only
//! those agents beat), when each is due, and one heartbeat from prompt to delivery. `wake` text becomes a
//! system event in the next heartbeat's prompt; `wake {mode: now}` runs one immediately; `set-heartbeats`
//! pauses the interval. With `isolatedSession` a heartbeat runs in a fresh `<session>:heartbeat` session and
//! delivers to the configured session's route; otherwise an acknowledged heartbeat is removed from the
//! session again (`session.rs`).
//!
//! Time comes from the injected clock and the runner's `run_due` / `run_now` are what the timer calls, so
//! tests drive schedules without sleeping. The runner never starts runs or delivers itself: its host does.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::hours::within_active_hours;
use super::session;
use super::{classify_reply, heartbeat_prompt, is_effectively_empty, HeartbeatReply};
use super::{DEFAULT_ACK_MAX_CHARS, HEARTBEAT_FILE};
use crate::agent::{
    format_reasoning_block, ReasoningLevel, RunOutcome, RunStartError, RunStatus, TurnOverrides,
    TurnSpec, DEFAULT_RUN_TIMEOUT_MS,
};
use crate::config::schema::automation::HeartbeatConfig;
use crate::config::Config;
use crate::cron::CronClock;
use crate::routing::session_key::scoped_main_session_key;
use crate::store::Store;
use crate::system::blocking::off_worker;
use futures_util::future::BoxFuture;

/// The timer never sleeps longer than this, so config changes and clock jumps are noticed.
pub const MAX_TIMER_DELAY_MS: u64 = 60_000;
/// System events kept for the next heartbeat at most (older ones are dropped).
pub const MAX_PENDING_EVENTS: usize = 20;
/// The same heartbeat text is not delivered twice within this window: 24 h.
pub const DUPLICATE_WINDOW_MS: u64 = 24 * 3_600_000;
/// Characters of a delivered text kept in the heartbeat event's `preview`.
const PREVIEW_CHARS: usize = 200;

/// Why a heartbeat runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeReason {
    /// Its interval passed.
    Interval,
    /// `wake {mode: now}` (runs even when paused or HEARTBEAT.md is empty).
    Wake,
}

/// Where a heartbeat message goes (`None` channel: the session's own readers, e.g. web chat).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeartbeatTarget {
    pub channel: Option<String>,
    pub to: Option<String>,
    pub account_id: Option<String>,
}

/// A heartbeat message to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatDelivery {
    pub agent_id: String,
    pub session_key: String,
    pub text: String,
    pub target: HeartbeatTarget,
}

/// A finished heartbeat turn: its outcome and the reasoning block it produced, if any.
#[derive(Debug, Clone)]
pub struct HeartbeatTurn {
    pub outcome: RunOutcome,
    pub reasoning: Option<String>,
}

/// A boxed future resolving to a heartbeat turn.
pub type HeartbeatTurnFuture = BoxFuture<'static, HeartbeatTurn>;

/// Why a heartbeat message was not delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatDeliveryError {
    #[error("the gateway is shutting down")]
    ShuttingDown,
}

/// What the runner needs from the gateway.
pub trait HeartbeatHost: Send + Sync {
    fn config(&self) -> Arc<Config>;
    fn store(&self) -> Store;
    fn workspace(&self, agent_id: &str) -> PathBuf;
    /// Starts a heartbeat turn with `overrides` (readers see nothing until it is delivered).
    fn run(
        &self,
        spec: TurnSpec,
        overrides: TurnOverrides,
    ) -> Result<HeartbeatTurnFuture, RunStartError>;
    /// Delivers a heartbeat message.
    fn deliver(&self, delivery: &HeartbeatDelivery) -> Result<(), HeartbeatDeliveryError>;
    /// Tells clients about a heartbeat (the `heartbeat` event).
    fn publish(&self, _event: &Value) {}
    /// The board's shortest heartbeat interval (0: none); a shorter configured interval is lengthened.
    fn min_every_ms(&self) -> u64 {
        0
    }
}

/// One agent's heartbeat settings, defaults merged under the agent's own.
fn merged(defaults: Option<&HeartbeatConfig>, own: &HeartbeatConfig) -> HeartbeatConfig {
    let base = defaults.cloned().unwrap_or_default();
    HeartbeatConfig {
        every: own.every.clone().or(base.every),
        active_hours: own.active_hours.clone().or(base.active_hours),
        model: own.model.clone().or(base.model),
        session: own.session.clone().or(base.session),
        include_reasoning: own.include_reasoning.or(base.include_reasoning),
        target: own.target.clone().or(base.target),
        direct_policy: own.direct_policy.or(base.direct_policy),
        to: own.to.clone().or(base.to),
        account_id: own.account_id.clone().or(base.account_id),
        prompt: own.prompt.clone().or(base.prompt),
        ack_max_chars: own.ack_max_chars.or(base.ack_max_chars),
        suppress_tool_error_warnings: own
            .suppress_tool_error_warnings
            .or(base.suppress_tool_error_warnings),
        timeout_seconds: own.timeout_seconds.or(base.timeout_seconds),
        light_context: own.light_context.or(base.light_context),
        isolated_session: own.isolated_session.or(base.isolated_session),
    }
}

/// The agents that beat, with their settings (intervals of 0 are off).
pub fn heartbeat_agents(config: &Config) -> Vec<(String, HeartbeatConfig)> {
    let defaults = config.agents.defaults.heartbeat.as_ref();
    let own: Vec<(String, HeartbeatConfig)> = config
        .agents
        .list
        .iter()
        .filter_map(|a| Some((a.id.clone(), merged(defaults, a.heartbeat.as_ref()?))))
        .collect();
    let agents = if own.is_empty() {
        let settings = defaults.cloned().unwrap_or_default();
        vec![(config.agents.default_agent_id(), settings)]
    } else {
        own
    };
    agents
        .into_iter()
        .filter(|(_, h)| h.every_ms() > 0)
        .collect()
}

/// The session a heartbeat runs in: `session` ("main", a full key, or a key under the agent), else main.
pub fn heartbeat_session(config: &Config, agent_id: &str, session: Option<&str>) -> String {
    match session.map(str::trim).filter(|s| !s.is_empty()) {
        None | Some("main") => scoped_main_session_key(&config.session, agent_id),
        Some(key) if key.starts_with("agent:") => key.to_string(),
        Some(key) => format!("agent:{agent_id}:{key}"),
    }
}

/// `target` (`last` by default, `none`, or a channel id) resolved against the session's last route.
pub fn resolve_target(
    settings: &HeartbeatConfig,
    session: Option<&crate::store::SessionEntry>,
) -> Option<HeartbeatTarget> {
    let last_channel = session.and_then(|s| s.last_channel.clone());
    let last_to = session.and_then(|s| s.last_to.clone());
    let last_account = session.and_then(|s| s.last_account_id.clone());
    match settings.target.as_deref().unwrap_or("last") {
        "none" => None,
        "last" => Some(HeartbeatTarget {
            channel: last_channel,
            to: settings.to.clone().or(last_to),
            account_id: settings.account_id.clone().or(last_account),
        }),
        channel => {
            let same = last_channel.as_deref() == Some(channel);
            Some(HeartbeatTarget {
                channel: Some(channel.to_string()),
                to: settings.to.clone().or(last_to.filter(|_| same)),
                account_id: settings
                    .account_id
                    .clone()
                    .or(last_account.filter(|_| same)),
            })
        }
    }
}

/// What a heartbeat turn does differently: `lightContext` keeps only HEARTBEAT.md of the bootstrap files;
/// `includeReasoning` collects the model's reasoning whatever the session's reasoning level.
fn overrides(settings: &HeartbeatConfig) -> TurnOverrides {
    TurnOverrides {
        light_context: settings.light_context == Some(true),
        reasoning: (settings.include_reasoning == Some(true)).then_some(ReasoningLevel::On),
    }
}

/// The heartbeat turn: the prompt (with the system events since the last heartbeat) in `session_key`.
fn turn_spec(
    agent: &str,
    session_key: &str,
    settings: &HeartbeatConfig,
    pending: &[String],
) -> TurnSpec {
    let mut prompt = heartbeat_prompt(settings.prompt.as_deref());
    if !pending.is_empty() {
        prompt.push_str("\n\nSystem events since the last heartbeat:");
        for event in pending {
            prompt.push_str(&format!("\n- {event}"));
        }
    }
    TurnSpec {
        run_id: uuid::Uuid::new_v4().to_string(),
        agent_id: agent.to_string(),
        session_key: session_key.to_string(),
        message: prompt,
        timeout_ms: settings
            .timeout_seconds
            .map_or(DEFAULT_RUN_TIMEOUT_MS, |s| u64::from(s).max(1) * 1_000),
        model_override: settings.model.clone(),
        extra_system_prompt: None,
        label: None,
        channel: None,
        skill_filter: None,
        interaction: false,
        images: Vec::new(),
    }
}

/// One agent's heartbeat as `health` and `status` report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatSchedule {
    pub enabled: bool,
    /// The interval in force (the configured one, lengthened to the board's floor).
    pub every_ms: Option<u64>,
    pub next_due_ms: Option<u64>,
    pub last_run_ms: Option<u64>,
    pub target: Option<String>,
    pub ack_max_chars: usize,
    pub prompt: String,
}

#[derive(Default)]
struct RunnerState {
    last_run_ms: HashMap<String, u64>,
    last_event: Option<Value>,
    pending: VecDeque<String>,
    wake_now: bool,
}

/// The heartbeat runner. Share it as `Arc<HeartbeatRunner>`.
pub struct HeartbeatRunner {
    host: Arc<dyn HeartbeatHost>,
    clock: Arc<dyn CronClock>,
    started_ms: u64,
    enabled: AtomicBool,
    state: Mutex<RunnerState>,
    wake: Notify,
}

impl HeartbeatRunner {
    /// A runner whose first heartbeats fall one interval after now.
    pub fn new(host: Arc<dyn HeartbeatHost>, clock: Arc<dyn CronClock>) -> Arc<HeartbeatRunner> {
        let started_ms = clock.now_ms();
        Arc::new(HeartbeatRunner {
            host,
            clock,
            started_ms,
            enabled: AtomicBool::new(true),
            state: Mutex::new(RunnerState::default()),
            wake: Notify::new(),
        })
    }

    /// An agent's interval, lengthened to the board's floor.
    fn every_ms(&self, settings: &HeartbeatConfig) -> u64 {
        settings.every_ms().max(self.host.min_every_ms())
    }

    /// `set-heartbeats`: pauses or resumes interval heartbeats.
    pub fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::Release);
        self.wake.notify_one();
        crate::system::status::changed();
    }

    /// `agent_id`'s heartbeat as it runs now: its schedule (off when the
    /// agent does not beat or `set-heartbeats` paused them), next and last run.
    pub fn schedule(&self, config: &Config, agent_id: &str) -> HeartbeatSchedule {
        let beating = heartbeat_agents(config)
            .into_iter()
            .find(|(id, _)| id == agent_id);
        let last_run_ms = self.state.lock().last_run_ms.get(agent_id).copied();
        let Some((_, settings)) = beating else {
            return HeartbeatSchedule {
                enabled: false,
                every_ms: None,
                next_due_ms: None,
                last_run_ms,
                target: None,
                ack_max_chars: DEFAULT_ACK_MAX_CHARS,
                prompt: heartbeat_prompt(None),
            };
        };
        let every_ms = self.every_ms(&settings);
        let enabled = self.enabled();
        HeartbeatSchedule {
            enabled,
            every_ms: Some(every_ms),
            next_due_ms: enabled.then(|| last_run_ms.unwrap_or(self.started_ms) + every_ms),
            last_run_ms,
            target: Some(settings.target.clone().unwrap_or_else(|| "last".into())),
            ack_max_chars: settings
                .ack_max_chars
                .map_or(DEFAULT_ACK_MAX_CHARS, |n| n as usize),
            prompt: heartbeat_prompt(settings.prompt.as_deref()),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    /// The system events waiting for the next heartbeat (`status`'s `queuedSystemEvents`).
    pub fn pending_events(&self) -> Vec<String> {
        self.state.lock().pending.iter().cloned().collect()
    }

    /// `last-heartbeat`: the newest heartbeat event, if any.
    pub fn last_event(&self) -> Option<Value> {
        self.state.lock().last_event.clone()
    }

    /// `wake`: queues `text` as a system event for the next heartbeat; `now` runs one at once.
    pub fn wake(&self, now: bool, text: Option<&str>) {
        let mut state = self.state.lock();
        if let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) {
            if state.pending.len() >= MAX_PENDING_EVENTS {
                state.pending.pop_front();
            }
            state.pending.push_back(text.to_string());
            crate::system::status::changed();
        }
        if now {
            state.wake_now = true;
            drop(state);
            self.wake.notify_one();
        }
    }

    /// When the next interval heartbeat is due.
    pub fn next_due_ms(&self) -> Option<u64> {
        let config = self.host.config();
        let state = self.state.lock();
        heartbeat_agents(&config)
            .iter()
            .map(|(id, h)| {
                state
                    .last_run_ms
                    .get(id)
                    .copied()
                    .unwrap_or(self.started_ms)
                    + self.every_ms(h)
            })
            .min()
    }

    /// Runs every agent whose interval has passed; returns their heartbeat events.
    pub async fn run_due(&self) -> Vec<Value> {
        let now = self.clock.now_ms();
        let config = self.host.config();
        let due: Vec<(String, HeartbeatConfig)> = {
            let mut state = self.state.lock();
            let due: Vec<(String, HeartbeatConfig)> = heartbeat_agents(&config)
                .into_iter()
                .filter(|(id, h)| {
                    let last = state
                        .last_run_ms
                        .get(id)
                        .copied()
                        .unwrap_or(self.started_ms);
                    now >= last + self.every_ms(h)
                })
                .collect();
            for (id, _) in &due {
                state.last_run_ms.insert(id.clone(), now);
            }
            due
        };
        let mut events = Vec::new();
        for (agent, settings) in due {
            events.push(
                self.run_once(&config, &agent, &settings, WakeReason::Interval)
                    .await,
            );
        }
        events
    }

    /// Runs every heartbeat agent now (`wake {mode: now}`).
    pub async fn run_now(&self) -> Vec<Value> {
        let now = self.clock.now_ms();
        let config = self.host.config();
        let agents = heartbeat_agents(&config);
        let mut events = Vec::new();
        for (agent, settings) in agents {
            self.state.lock().last_run_ms.insert(agent.clone(), now);
            events.push(
                self.run_once(&config, &agent, &settings, WakeReason::Wake)
                    .await,
            );
        }
        events
    }

    fn record(&self, mut event: Value, agent: &str, session_key: &str, started: u64) -> Value {
        let now = self.clock.now_ms();
        event["ts"] = json!(now);
        event["agentId"] = json!(agent);
        event["sessionKey"] = json!(session_key);
        event["durationMs"] = json!(now.saturating_sub(started));
        self.state.lock().last_event = Some(event.clone());
        self.host.publish(&event);
        crate::system::status::changed();
        event
    }

    /// One heartbeat for `agent`: the checks, the turn, and the delivery. Returns its event.
    pub async fn run_once(
        &self,
        config: &Config,
        agent: &str,
        settings: &HeartbeatConfig,
        reason: WakeReason,
    ) -> Value {
        let started = self.clock.now_ms();
        let base_key = heartbeat_session(config, agent, settings.session.as_deref());
        let isolated = settings.isolated_session == Some(true);
        let session_key = if isolated {
            session::isolated_key(&base_key)
        } else {
            base_key.clone()
        };
        let done = |event: Value| self.record(event, agent, &session_key, started);
        let pending = match self.preflight(config, agent, settings, reason, started) {
            Ok(pending) => pending,
            Err(skipped) => return done(skipped),
        };
        let store = self.host.store();
        // An isolated session starts empty; the main session is noted so an acknowledgement leaves no trace.
        let mark = off_worker(|| match isolated {
            true => session::reset_isolated(&store, &session_key).map(|()| None),
            false => session::mark(&store, &session_key).map(Some),
        });
        let mark = match mark {
            Ok(mark) => mark,
            Err(e) => {
                return done(json!({"status": "failed", "reason": format!("session store: {e}")}))
            }
        };
        let spec = turn_spec(agent, &session_key, settings, &pending);
        let HeartbeatTurn { outcome, reasoning } = match self.host.run(spec, overrides(settings)) {
            Ok(future) => future.await,
            Err(e) => return done(json!({"status": "failed", "reason": e.to_string()})),
        };
        // Reasoning reaches the target only with `includeReasoning`, as its own message before the reply.
        let reasoning = reasoning
            .filter(|r| settings.include_reasoning == Some(true) && !r.trim().is_empty())
            .map(|r| format_reasoning_block(&r));
        if outcome.status != RunStatus::Ok {
            let reason = outcome
                .error
                .unwrap_or_else(|| outcome.status.as_str().into());
            return done(json!({"status": "failed", "reason": reason}));
        }
        let ack_max = settings
            .ack_max_chars
            .map_or(DEFAULT_ACK_MAX_CHARS, |n| n as usize);
        let text = match classify_reply(&outcome.text, ack_max) {
            HeartbeatReply::Ack if reasoning.is_some() => {
                let reasoning = reasoning.unwrap_or_default();
                return done(self.deliver(agent, &base_key, settings, reasoning, None, started));
            }
            HeartbeatReply::Ack => {
                if let Some(mark) = &mark {
                    let pruned = off_worker(|| {
                        session::prune_ack(
                            &store,
                            &session_key,
                            mark,
                            &outcome.session_id,
                            &outcome.run_id,
                        )
                    });
                    if let Err(e) = pruned {
                        log::warn!("heartbeat {agent}: cannot remove the acknowledged turn: {e}");
                    }
                }
                let status = if outcome.text.trim().is_empty() {
                    "ok-empty"
                } else {
                    "ok-token"
                };
                return done(json!({"status": status, "silent": true}));
            }
            HeartbeatReply::Message(text) => text,
        };
        done(self.deliver(agent, &base_key, settings, text, reasoning, started))
    }

    /// The checks before a heartbeat turn: paused, quiet hours, nothing to do. Returns the pending system
    /// events to include, or the `skipped` event.
    fn preflight(
        &self,
        config: &Config,
        agent: &str,
        settings: &HeartbeatConfig,
        reason: WakeReason,
        now: u64,
    ) -> Result<Vec<String>, Value> {
        let skipped = |why: &str| json!({"status": "skipped", "reason": why});
        if reason == WakeReason::Interval && !self.enabled() {
            return Err(skipped("disabled"));
        }
        let user_tz = config.agents.defaults.user_timezone.as_deref();
        match within_active_hours(settings.active_hours.as_ref(), user_tz, now) {
            Ok(false) => return Err(skipped("quiet-hours")),
            Ok(true) => {}
            Err(e) => log::warn!("heartbeat {agent}: {e}; running anyway"),
        }
        let file = std::fs::read_to_string(self.host.workspace(agent).join(HEARTBEAT_FILE)).ok();
        let mut state = self.state.lock();
        let empty = is_effectively_empty(file.as_deref());
        if reason == WakeReason::Interval && state.pending.is_empty() && empty {
            return Err(skipped("empty-heartbeat-file"));
        }
        if reason == WakeReason::Wake {
            state.wake_now = false;
        }
        Ok(state.pending.drain(..).collect())
    }

    /// Delivers a heartbeat message unless it has no target or repeats the last one within a day.
    fn deliver(
        &self,
        agent: &str,
        session_key: &str,
        settings: &HeartbeatConfig,
        text: String,
        reasoning: Option<String>,
        now: u64,
    ) -> Value {
        let store = self.host.store();
        let entry = off_worker(|| store.session(session_key)).ok().flatten();
        let preview: String = text.chars().take(PREVIEW_CHARS).collect();
        let Some(target) = resolve_target(settings, entry.as_ref()) else {
            return json!({"status": "skipped", "reason": "no-target", "preview": preview});
        };
        let repeated = entry.as_ref().is_some_and(|e| {
            e.last_heartbeat_text.as_deref() == Some(text.as_str())
                && e.last_heartbeat_sent_at_ms
                    .is_some_and(|at| now.saturating_sub(at) < DUPLICATE_WINDOW_MS)
        });
        if repeated {
            return json!({"status": "skipped", "reason": "duplicate", "preview": preview});
        }
        let delivery = HeartbeatDelivery {
            agent_id: agent.to_string(),
            session_key: session_key.to_string(),
            text: text.clone(),
            target: target.clone(),
        };
        if let Some(reasoning) = reasoning {
            let shown = HeartbeatDelivery {
                text: reasoning,
                ..delivery.clone()
            };
            if let Err(e) = self.host.deliver(&shown) {
                log::warn!("heartbeat {agent}: the reasoning was not delivered: {e}");
            }
        }
        if let Err(e) = self.host.deliver(&delivery) {
            return json!({"status": "failed", "reason": e.to_string(), "preview": preview});
        }
        let remembered = off_worker(|| {
            crate::agent::SessionIndex::new(store.clone()).remember_heartbeat(
                session_key,
                &text,
                now,
            )
        });
        if let Err(e) = remembered {
            log::warn!("heartbeat {agent}: cannot remember the delivered text: {e}");
        }
        json!({"status": "sent", "preview": preview, "channel": target.channel,
               "to": target.to, "accountId": target.account_id})
    }

    /// The timer: runs due heartbeats (or all of them after `wake {mode: now}`) and sleeps until the next
    /// one is due (at most `MAX_TIMER_DELAY_MS`), a wake, or shutdown.
    pub async fn run_timer(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let wake_now = std::mem::take(&mut self.state.lock().wake_now);
            if wake_now {
                self.run_now().await;
            } else {
                self.run_due().await;
            }
            let now = self.clock.now_ms();
            let delay = self
                .next_due_ms()
                .map_or(MAX_TIMER_DELAY_MS, |due| due.saturating_sub(now))
                .clamp(1, MAX_TIMER_DELAY_MS);
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(delay)) => {}
                _ = self.wake.notified() => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;
