//! Hooks around every tool call: `before` may let a call through, rewrite its
//! arguments or block it with a reason (the model reads the reason as the
//! call's error result); `after` sees the result and how long the call took.
//! Hooks run in registration order, each `before` seeing the arguments the
//! previous one left.
//!
//! Two real hooks live here: loop detection (`tools.loopDetection`: the same
//! tool with the same arguments repeated within a session's recent calls is
//! warned about, then blocked) and a debug log line per call. Hooks are
//! synchronous and must not block: they run on the tool loop's task.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;

use crate::config::Config;

/// Calls remembered per session for loop detection (upstream's `historySize`).
pub const DEFAULT_LOOP_HISTORY_SIZE: usize = 30;
/// Identical calls within the history that log a warning.
pub const DEFAULT_LOOP_WARNING_THRESHOLD: usize = 10;
/// Identical calls within the history that block the next one.
pub const DEFAULT_LOOP_CRITICAL_THRESHOLD: usize = 20;
/// Sessions whose call history is kept at once (the oldest is forgotten).
pub const MAX_LOOP_TRACKED_SESSIONS: usize = 256;

/// The call a hook is asked about.
pub struct HookCall<'a> {
    pub run_id: &'a str,
    pub agent_id: &'a str,
    pub session_key: &'a str,
    pub tool: &'a str,
    pub call_id: &'a str,
    /// The configuration the run started with.
    pub config: &'a Config,
}

/// What a `before` hook decides.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeDecision {
    Continue,
    /// Run the tool with these arguments instead.
    Rewrite(Value),
    /// Do not run the tool; the model reads this reason as the error.
    Block(String),
}

/// A call a `before` hook blocked; the model reads it as the call's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("blocked by a hook: {reason}")]
pub struct Blocked {
    /// The hook that blocked the call.
    pub hook: &'static str,
    pub reason: String,
}

/// A finished call, as `after` hooks see it.
pub struct CallOutcome<'a> {
    /// The arguments the tool ran with (after rewrites).
    pub args: &'a Value,
    /// The text the model will read.
    pub result: &'a str,
    pub is_error: bool,
    pub duration: Duration,
}

/// One hook. Both methods default to doing nothing.
pub trait ToolHook: Send + Sync {
    fn name(&self) -> &'static str;
    fn before(&self, _call: &HookCall<'_>, _args: &Value) -> BeforeDecision {
        BeforeDecision::Continue
    }
    fn after(&self, _call: &HookCall<'_>, _outcome: &CallOutcome<'_>) {}
}

/// The hooks of a gateway, in the order they run.
#[derive(Clone, Default)]
pub struct ToolHooks {
    hooks: Vec<Arc<dyn ToolHook>>,
}

impl ToolHooks {
    /// The hooks every gateway runs: loop detection, then the call log.
    pub fn standard() -> Self {
        let mut hooks = ToolHooks::default();
        hooks.register(Arc::new(LoopDetectionHook::default()));
        hooks.register(Arc::new(CallLogHook));
        hooks
    }

    /// Adds a hook after the ones already registered.
    pub fn register(&mut self, hook: Arc<dyn ToolHook>) {
        self.hooks.push(hook);
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.hooks.iter().map(|h| h.name()).collect()
    }

    /// Runs every `before` hook in order: the final arguments, or the first
    /// block's reason (later hooks are not asked).
    pub fn before(&self, call: &HookCall<'_>, mut args: Value) -> Result<Value, Blocked> {
        for hook in &self.hooks {
            match hook.before(call, &args) {
                BeforeDecision::Continue => {}
                BeforeDecision::Rewrite(new_args) => {
                    log::debug!(
                        "hook {} rewrote the arguments of {}",
                        hook.name(),
                        call.tool
                    );
                    args = new_args;
                }
                BeforeDecision::Block(reason) => {
                    log::info!("hook {} blocked {}: {reason}", hook.name(), call.tool);
                    return Err(Blocked {
                        hook: hook.name(),
                        reason,
                    });
                }
            }
        }
        Ok(args)
    }

    /// Runs every `after` hook in order.
    pub fn after(&self, call: &HookCall<'_>, outcome: &CallOutcome<'_>) {
        for hook in &self.hooks {
            hook.after(call, outcome);
        }
    }
}

/// Logs each finished call at debug level (name, duration, error flag).
pub struct CallLogHook;

impl ToolHook for CallLogHook {
    fn name(&self) -> &'static str {
        "call-log"
    }
    fn after(&self, call: &HookCall<'_>, outcome: &CallOutcome<'_>) {
        log::debug!(
            "run {}: tool {} ({}) took {} ms{}",
            call.run_id,
            call.tool,
            call.call_id,
            outcome.duration.as_millis(),
            if outcome.is_error { ", failed" } else { "" }
        );
    }
}

/// Upstream's generic-repeat detector: counts calls of the same tool with the
/// same arguments among a session's last `historySize` calls. Off unless
/// `tools.loopDetection.enabled` is true.
#[derive(Default)]
pub struct LoopDetectionHook {
    sessions: Mutex<LoopHistories>,
}

#[derive(Default)]
struct LoopHistories {
    by_session: HashMap<String, VecDeque<u64>>,
    /// Session keys in first-seen order, for eviction.
    order: VecDeque<String>,
}

/// The effective loop-detection settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopSettings {
    pub history_size: usize,
    pub warning_threshold: usize,
    pub critical_threshold: usize,
}

impl LoopSettings {
    /// `None` when loop detection is off.
    pub fn from_config(config: &Config) -> Option<LoopSettings> {
        let loops = config.tools.loop_detection.as_ref()?;
        if loops.enabled != Some(true) {
            return None;
        }
        let size = |v: Option<u32>, default: usize| v.map_or(default, |v| (v as usize).max(1));
        Some(LoopSettings {
            history_size: size(loops.history_size, DEFAULT_LOOP_HISTORY_SIZE),
            warning_threshold: size(loops.warning_threshold, DEFAULT_LOOP_WARNING_THRESHOLD),
            critical_threshold: size(loops.critical_threshold, DEFAULT_LOOP_CRITICAL_THRESHOLD),
        })
    }
}

fn call_fingerprint(tool: &str, args: &Value) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    tool.hash(&mut hasher);
    // serde_json keeps object keys sorted (no preserve_order), so equal
    // arguments print equally.
    args.to_string().hash(&mut hasher);
    hasher.finish()
}

impl LoopDetectionHook {
    /// Records the call and returns how many identical calls the history
    /// held before it.
    fn record(&self, session_key: &str, fingerprint: u64, history_size: usize) -> usize {
        let mut tables = self.sessions.lock();
        if !tables.by_session.contains_key(session_key) {
            if tables.order.len() >= MAX_LOOP_TRACKED_SESSIONS {
                if let Some(oldest) = tables.order.pop_front() {
                    tables.by_session.remove(&oldest);
                }
            }
            tables.order.push_back(session_key.to_string());
        }
        let history = tables
            .by_session
            .entry(session_key.to_string())
            .or_default();
        let seen = history.iter().filter(|f| **f == fingerprint).count();
        history.push_back(fingerprint);
        while history.len() > history_size {
            history.pop_front();
        }
        seen
    }
}

impl ToolHook for LoopDetectionHook {
    fn name(&self) -> &'static str {
        "loop-detection"
    }

    fn before(&self, call: &HookCall<'_>, args: &Value) -> BeforeDecision {
        let Some(settings) = LoopSettings::from_config(call.config) else {
            return BeforeDecision::Continue;
        };
        let fingerprint = call_fingerprint(call.tool, args);
        let seen = self.record(call.session_key, fingerprint, settings.history_size);
        let count = seen + 1;
        if count > settings.critical_threshold {
            return BeforeDecision::Block(format!(
                "loop detected: {} was called {count} times with the same arguments in this \
                 session's last {} calls; stop repeating it and use what you already have",
                call.tool, settings.history_size
            ));
        }
        if count >= settings.warning_threshold {
            log::warn!(
                "run {}: {} repeated {count} times with the same arguments",
                call.run_id,
                call.tool
            );
        }
        BeforeDecision::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(enabled: bool) -> Config {
        serde_json::from_value(json!({"tools": {"loopDetection": {
            "enabled": enabled, "historySize": 5, "warningThreshold": 2, "criticalThreshold": 3}}}))
        .expect("config")
    }

    fn call<'a>(config: &'a Config, session: &'a str) -> HookCall<'a> {
        HookCall {
            run_id: "r",
            agent_id: "main",
            session_key: session,
            tool: "read",
            call_id: "c",
            config,
        }
    }

    #[test]
    fn repeated_identical_calls_are_blocked_past_the_critical_threshold() {
        let hook = LoopDetectionHook::default();
        let config = config(true);
        let args = json!({"path": "a.md"});
        for _ in 0..3 {
            assert_eq!(
                hook.before(&call(&config, "s1"), &args),
                BeforeDecision::Continue
            );
        }
        let fourth = hook.before(&call(&config, "s1"), &args);
        assert!(matches!(fourth, BeforeDecision::Block(ref r) if r.contains("loop detected")));
        // Other arguments and other sessions are counted apart.
        let other = json!({"path": "b.md"});
        assert_eq!(
            hook.before(&call(&config, "s1"), &other),
            BeforeDecision::Continue
        );
        assert_eq!(
            hook.before(&call(&config, "s2"), &args),
            BeforeDecision::Continue
        );
    }

    #[test]
    fn calls_older_than_the_history_no_longer_count() {
        let hook = LoopDetectionHook::default();
        let config = config(true);
        let args = json!({"path": "a.md"});
        for i in 0..3 {
            hook.before(&call(&config, "s"), &args);
            for j in 0..5 {
                let filler = json!({"path": format!("f{i}-{j}")});
                hook.before(&call(&config, "s"), &filler);
            }
        }
        assert_eq!(
            hook.before(&call(&config, "s"), &args),
            BeforeDecision::Continue
        );
    }

    #[test]
    fn detection_is_off_unless_enabled_and_tracked_sessions_are_bounded() {
        let hook = LoopDetectionHook::default();
        let off = config(false);
        for _ in 0..10 {
            assert_eq!(
                hook.before(&call(&off, "s"), &json!({})),
                BeforeDecision::Continue
            );
        }
        let on = config(true);
        for i in 0..(MAX_LOOP_TRACKED_SESSIONS + 10) {
            hook.before(&call(&on, &format!("s{i}")), &json!({}));
        }
        assert_eq!(
            hook.sessions.lock().by_session.len(),
            MAX_LOOP_TRACKED_SESSIONS
        );
    }
}
