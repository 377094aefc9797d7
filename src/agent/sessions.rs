//! Session operations: reset, patch, compact and delete, typed, for everyone who changes a session — the
//! gateway's `sessions.*` methods and the chat commands (`/new`, `/model`, `/think`, `/compact`, …) alike.
//! A reset aborts the session's runs and processes and saves the closing session's note to memory.
//!
//! This file must not parse wire parameters nor build wire answers: callers bring typed values and turn
//! the results and [`SessionError`]s into their own words.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::compaction::{self, CompactionError, CompactionJob, CompactionReason};
use super::context;
use super::providers::models;
use super::runtime::AgentRuntime;
use super::session_reset::{self, ResetKind, ResetPolicy};
use crate::config::schema::session::SessionResetMode;
use crate::config::Config;
use crate::memory::registry::MemoryServices;
use crate::store::{SessionEntry, Store, StoreError};
use crate::system::clock::now_ms;

/// Levels `thinkingLevel` takes.
pub const THINKING_LEVELS: &[&str] = &["off", "minimal", "low", "medium", "high", "xhigh"];
/// Levels `verboseLevel` takes.
pub const VERBOSE_LEVELS: &[&str] = &["off", "on", "full"];
/// Levels `reasoningLevel` takes.
pub const REASONING_LEVELS: &[&str] = &["off", "on", "stream"];
/// Values `sendPolicy` takes.
pub const SEND_POLICIES: &[&str] = &["allow", "deny"];

/// Why a session operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A value that is not allowed; the message names the field and the allowed values.
    #[error("{0}")]
    Invalid(String),
    /// The model could not be reached or the work failed.
    #[error("{0}")]
    Unavailable(String),
    #[error("session store: {0}")]
    Store(#[from] StoreError),
}

/// One field of a patch: left alone, cleared (`null`), or set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum FieldPatch {
    #[default]
    Keep,
    Clear,
    Set(String),
}

/// A `sessions.patch`: each field left, cleared or set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionPatch {
    pub label: FieldPatch,
    pub thinking_level: FieldPatch,
    pub verbose_level: FieldPatch,
    pub reasoning_level: FieldPatch,
    pub send_policy: FieldPatch,
    /// `<provider>/<model>`.
    pub model: FieldPatch,
}

/// A patched session: its entry and the model it now resolves to (when the patch set one).
#[derive(Debug, Clone)]
pub struct Patched {
    pub entry: SessionEntry,
    pub model: Option<(String, String)>,
}

/// What a manual compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compacted {
    Done {
        tokens_before: u64,
        summarized_entries: usize,
        first_kept_seq: u64,
        summary_chars: usize,
    },
    /// Nothing was compacted, and why.
    Skipped(String),
}

/// The conversation a message arrives from, as the reset policy sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResetChat<'a> {
    /// The channel id (`telegram`, `webchat`, …) for `resetByChannel`.
    pub channel: Option<&'a str>,
    /// A group conversation (besides what the session key says).
    pub is_group: bool,
}

/// Typed session operations over the runtime's store, runs and processes.
pub struct SessionOps {
    runtime: Arc<AgentRuntime>,
    memory: Arc<MemoryServices>,
}

fn apply(
    name: &str,
    patch: &FieldPatch,
    slot: &mut Option<String>,
    allowed: Option<&[&str]>,
) -> Result<(), SessionError> {
    match patch {
        FieldPatch::Keep => {}
        FieldPatch::Clear => *slot = None,
        FieldPatch::Set(value) => {
            if let Some(allowed) = allowed {
                if !allowed.contains(&value.as_str()) {
                    return Err(SessionError::Invalid(format!(
                        "invalid sessions.patch params: {name} must be one of {}, got {value:?}",
                        allowed.join(", ")
                    )));
                }
            }
            *slot = Some(value.clone());
        }
    }
    Ok(())
}

/// Where a session's conversation lives (its last chat), for later deliveries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastRoute {
    pub channel: String,
    pub to: String,
    /// Empty: the channel's default account.
    pub account_id: String,
    pub thread_id: Option<String>,
}

/// The writer of session entries besides [`SessionOps`] and a turn's own records (its start and reply
/// are written with its transcript, `Store::record_turn*`): each change is a named operation and one
/// write transaction, so no two writers lose each other's fields.
#[derive(Clone)]
pub struct SessionIndex {
    store: Store,
}

impl SessionIndex {
    pub fn new(store: Store) -> SessionIndex {
        SessionIndex { store }
    }

    /// The entry under `key`, created with a fresh session id when there is none. Blocks on the store.
    pub fn ensure(&self, key: &str, now: u64) -> Result<SessionEntry, StoreError> {
        let mut existing = None;
        let created = self.store.update_session(key, |current| match current {
            Some(entry) => {
                existing = Some(entry);
                None
            }
            None => Some(SessionEntry::new(uuid::Uuid::new_v4().to_string(), now)),
        })?;
        Ok(created.or(existing).expect("either found or created"))
    }

    /// Writes a new session's entry under `key` (a sub-agent's child session), replacing any entry.
    pub fn create(&self, key: &str, entry: &SessionEntry) -> Result<(), StoreError> {
        self.store.put_session(key, entry)
    }

    /// Writes `entry` under `key` only when the key holds no entry (an imported session); `false` when one
    /// is already there, which is left as it is.
    pub fn create_if_absent(&self, key: &str, entry: &SessionEntry) -> Result<bool, StoreError> {
        let written = self
            .store
            .update_session(key, |current| current.is_none().then(|| entry.clone()))?;
        Ok(written.is_some())
    }

    /// Shows a status on the session (a sub-agent run's, for `sessions.list`), when the session exists.
    pub fn set_status(&self, key: &str, status: &str, now: u64) -> Result<(), StoreError> {
        self.store.update_session(key, |current| {
            let mut entry = current?;
            entry.status = Some(status.to_string());
            entry.updated_at_ms = now;
            Some(entry)
        })?;
        Ok(())
    }

    /// Counts one compaction of the session, when it still holds transcript `session_id`.
    pub fn count_compaction(&self, key: &str, session_id: &str) -> Result<(), StoreError> {
        self.store.update_session(key, |current| {
            let mut entry = current.filter(|e| e.session_id == session_id)?;
            entry.compaction_count += 1;
            Some(entry)
        })?;
        Ok(())
    }

    /// Remembers the session's last chat (and its first channel); whether anything changed. A session
    /// without an entry is left alone (the turn that answers creates it).
    pub fn record_route(&self, key: &str, route: &LastRoute) -> Result<bool, StoreError> {
        let written = self.store.update_session(key, |current| {
            let mut entry = current?;
            let before = (
                entry.last_channel.clone(),
                entry.last_to.clone(),
                entry.last_account_id.clone(),
                entry.last_thread_id.clone(),
            );
            entry.last_channel = Some(route.channel.clone());
            entry.last_to = Some(route.to.clone());
            entry.last_account_id = Some(route.account_id.clone()).filter(|a| !a.is_empty());
            entry.last_thread_id = route.thread_id.clone();
            let after = (
                entry.last_channel.clone(),
                entry.last_to.clone(),
                entry.last_account_id.clone(),
                entry.last_thread_id.clone(),
            );
            if before == after && entry.channel.is_some() {
                return None;
            }
            entry.channel = entry.channel.or_else(|| Some(route.channel.clone()));
            Some(entry)
        })?;
        Ok(written.is_some())
    }

    /// Remembers the heartbeat text last delivered from this session, when it exists.
    pub fn remember_heartbeat(&self, key: &str, text: &str, now: u64) -> Result<(), StoreError> {
        self.store.update_session(key, |current| {
            let mut entry = current?;
            entry.last_heartbeat_text = Some(text.to_string());
            entry.last_heartbeat_sent_at_ms = Some(now);
            Some(entry)
        })?;
        Ok(())
    }

    /// Puts `updated_at_ms` back to what it was before a turn that left no trace (a pruned heartbeat),
    /// when the session still holds transcript `session_id`.
    pub fn restore_updated_at(
        &self,
        key: &str,
        session_id: &str,
        updated_at_ms: u64,
    ) -> Result<(), StoreError> {
        self.store.update_session(key, |current| {
            let mut entry = current.filter(|e| e.session_id == session_id)?;
            entry.updated_at_ms = updated_at_ms;
            Some(entry)
        })?;
        Ok(())
    }
}

impl SessionOps {
    pub fn new(runtime: Arc<AgentRuntime>, memory: Arc<MemoryServices>) -> SessionOps {
        SessionOps { runtime, memory }
    }

    fn config(&self) -> Arc<Config> {
        self.runtime.config()
    }

    /// Applies `patch` to the session under `key` (canonical), creating its entry if needed. Blocks on
    /// the store.
    pub fn patch(&self, key: &str, patch: &SessionPatch) -> Result<Patched, SessionError> {
        let config = self.config();
        let store = &self.runtime.store;
        let mut entry = match store.session(key)? {
            Some(entry) => entry,
            None => SessionEntry::new(uuid::Uuid::new_v4().to_string(), now_ms()),
        };
        apply("label", &patch.label, &mut entry.label, None)?;
        let levels = [
            ("thinkingLevel", &patch.thinking_level, THINKING_LEVELS),
            ("verboseLevel", &patch.verbose_level, VERBOSE_LEVELS),
            ("reasoningLevel", &patch.reasoning_level, REASONING_LEVELS),
            ("sendPolicy", &patch.send_policy, SEND_POLICIES),
        ];
        for (name, field, allowed) in levels {
            let slot = match name {
                "thinkingLevel" => &mut entry.thinking_level,
                "verboseLevel" => &mut entry.verbose_level,
                "reasoningLevel" => &mut entry.reasoning_level,
                _ => &mut entry.send_policy,
            };
            apply(name, field, slot, Some(allowed))?;
        }
        let mut model = None;
        match &patch.model {
            FieldPatch::Keep => {}
            FieldPatch::Clear => {
                entry.model_override = None;
                entry.provider_override = None;
            }
            FieldPatch::Set(value) => {
                let Some((provider, model_id)) = value.split_once('/') else {
                    return Err(SessionError::Invalid(format!(
                        "invalid sessions.patch params: model must be \"<provider>/<model>\", got {value:?}"
                    )));
                };
                if !config.models.providers.contains_key(provider) {
                    return Err(SessionError::Invalid(format!(
                        "unknown model provider: {provider}"
                    )));
                }
                entry.provider_override = Some(provider.to_string());
                entry.model_override = Some(model_id.to_string());
                model = Some((provider.to_string(), model_id.to_string()));
            }
        }
        entry.updated_at_ms = now_ms();
        store.put_session(key, &entry)?;
        Ok(Patched { entry, model })
    }

    /// Starts a fresh session id under `key` (the old transcript is kept): the session's runs and
    /// processes stop, its closing note is saved to memory, and its label, levels, model and channel
    /// carry over. Blocks on the store.
    pub fn reset(&self, key: &str) -> Result<SessionEntry, SessionError> {
        let store = &self.runtime.store;
        self.runtime.runs.abort_session(key);
        self.runtime.tool_services.processes.kill_session(key);
        let old = store.session(key)?;
        self.start_fresh(key, old)
    }

    /// Resets the session under `key` as [`SessionOps::reset`] does when `session.reset` (and its
    /// per-type, per-channel and legacy forms) calls it stale at `now_ms`, before a turn of a user's
    /// message runs in it; the fresh entry, or `None` when the session is fresh, new or busy (a run of
    /// it is active: the rollover waits for a later message, as upstream). Blocks on the store.
    pub fn roll_over_if_stale(
        &self,
        key: &str,
        chat: &ResetChat<'_>,
        now_ms: u64,
    ) -> Result<Option<SessionEntry>, SessionError> {
        let config = self.config();
        let kind = ResetKind::of(key, chat.is_group);
        let policy = ResetPolicy::resolve(&config.session, kind, chat.channel);
        if policy.mode == SessionResetMode::None {
            return Ok(None);
        }
        let Some(old) = self.runtime.store.session(key)? else {
            return Ok(None);
        };
        let freshness = session_reset::evaluate(
            &policy,
            session_reset::SessionTimes::of(&old),
            now_ms,
            &jiff::tz::TimeZone::system(),
        );
        if !freshness.is_stale() || !self.runtime.runs.active_in_session(key).is_empty() {
            return Ok(None);
        }
        log::info!("session {key} is stale ({freshness:?}); starting a new session");
        self.start_fresh(key, Some(old)).map(Some)
    }

    /// Writes a fresh session id under `key`, keeping `old`'s label, thinking level, model and channel,
    /// and saves `old`'s closing note to memory.
    fn start_fresh(
        &self,
        key: &str,
        old: Option<SessionEntry>,
    ) -> Result<SessionEntry, SessionError> {
        let store = &self.runtime.store;
        if let Some(closing) = &old {
            super::session_note::spawn_closing_note(&self.runtime, &self.memory, key, closing);
        }
        let mut entry = SessionEntry::new(uuid::Uuid::new_v4().to_string(), now_ms());
        if let Some(old) = old {
            entry.label = old.label;
            entry.thinking_level = old.thinking_level;
            entry.model_override = old.model_override;
            entry.provider_override = old.provider_override;
            entry.channel = old.channel;
        }
        store.put_session(key, &entry)?;
        Ok(entry)
    }

    /// Removes the session's entry and, when asked, its transcript; the removed entry. Blocks on the
    /// store.
    pub fn delete(
        &self,
        key: &str,
        delete_transcript: bool,
    ) -> Result<Option<SessionEntry>, SessionError> {
        let store = &self.runtime.store;
        self.runtime.runs.abort_session(key);
        self.runtime.tool_services.processes.kill_session(key);
        let removed = store.delete_session(key)?;
        if let (Some(entry), true) = (&removed, delete_transcript) {
            store.delete_transcript(&entry.session_id)?;
        }
        Ok(removed)
    }

    /// Summarises the session's older history with its agent's primary model now, after a running turn
    /// of the session ends.
    pub async fn compact(
        &self,
        key: &str,
        instructions: Option<&str>,
    ) -> Result<Compacted, SessionError> {
        let config = self.config();
        let runtime = &self.runtime;
        let _lane = runtime.runs.admit(key).await;
        let entry = runtime.store.run_blocking(|| runtime.store.session(key))?;
        let Some(entry) = entry else {
            return Ok(Compacted::Skipped("no such session".into()));
        };
        let agent_id = crate::routing::session_key::agent_of_key(key)
            .map_or_else(|| config.agents.default_agent_id(), str::to_string);
        let chain = models::resolve_chain(&config, &agent_id, None, &runtime.http())
            .map_err(|e| SessionError::Unavailable(e.to_string()))?;
        let summarizer = compaction::summary_model(&config, &runtime.http())
            .transpose()
            .map_err(|e| {
                SessionError::Unavailable(format!("agents.defaults.compaction.model: {e}"))
            })?;
        let model = summarizer.as_ref().unwrap_or(&chain[0]);
        let window = context::resolve_window(&config, model.context_window);
        let cancel = CancellationToken::new();
        let job = CompactionJob {
            store: &runtime.store,
            session_key: key,
            session_id: &entry.session_id,
            model,
            window,
            settings: compaction::CompactionSettings::for_window(&config, window),
            reason: CompactionReason::Manual,
            custom_instructions: instructions,
            cancel: &cancel,
        };
        match compaction::compact(job).await {
            Ok(done) => Ok(Compacted::Done {
                tokens_before: done.tokens_before as u64,
                summarized_entries: done.summarized_entries,
                first_kept_seq: done.first_kept_seq,
                summary_chars: done.summary.len(),
            }),
            Err(e @ CompactionError::NothingToCompact) => Ok(Compacted::Skipped(e.to_string())),
            Err(e) => Err(SessionError::Unavailable(format!("compaction failed: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    fn route(to: &str) -> LastRoute {
        LastRoute {
            channel: "telegram".into(),
            to: to.into(),
            account_id: String::new(),
            thread_id: None,
        }
    }

    #[test]
    fn create_if_absent_never_replaces_an_entry() {
        let (_dir, store) = temp_store();
        let index = SessionIndex::new(store.clone());
        assert!(index
            .create_if_absent("agent:main:x", &SessionEntry::new("first", 1))
            .expect("create"));
        assert!(!index
            .create_if_absent("agent:main:x", &SessionEntry::new("second", 2))
            .expect("create again"));
        let kept = store.session("agent:main:x").expect("read").expect("entry");
        assert_eq!(kept.session_id, "first");
    }

    #[test]
    fn ensure_creates_once_and_then_finds_the_same_session() {
        let (_dir, store) = temp_store();
        let index = SessionIndex::new(store.clone());
        let created = index.ensure("agent:main:main", 10).expect("ensure");
        let found = index.ensure("agent:main:main", 20).expect("ensure again");
        assert_eq!(created.session_id, found.session_id);
        assert_eq!(found.updated_at_ms, 10, "finding does not touch the entry");
    }

    #[test]
    fn record_route_writes_only_changes_and_keeps_the_other_fields() {
        let (_dir, store) = temp_store();
        let index = SessionIndex::new(store.clone());
        assert!(
            !index.record_route("k", &route("42")).expect("route"),
            "no entry: the answering turn creates it"
        );
        let mut entry = SessionEntry::new("sid", 1);
        entry.label = Some("kept".into());
        store.put_session("k", &entry).expect("seed");
        assert!(index.record_route("k", &route("42")).expect("route"));
        assert!(!index.record_route("k", &route("42")).expect("same route"));
        assert!(index.record_route("k", &route("43")).expect("new route"));
        let entry = store.session("k").expect("read").expect("entry");
        assert_eq!(entry.last_to.as_deref(), Some("43"));
        assert_eq!(entry.channel.as_deref(), Some("telegram"));
        assert_eq!(entry.last_account_id, None, "the default account is no id");
        assert_eq!(entry.label.as_deref(), Some("kept"));
    }

    #[test]
    fn count_and_restore_apply_only_to_the_same_transcript() {
        let (_dir, store) = temp_store();
        let index = SessionIndex::new(store.clone());
        store
            .put_session("k", &SessionEntry::new("new-sid", 5))
            .expect("seed");
        index.count_compaction("k", "old-sid").expect("count");
        index
            .restore_updated_at("k", "old-sid", 1)
            .expect("restore");
        let entry = store.session("k").expect("read").expect("entry");
        assert_eq!((entry.compaction_count, entry.updated_at_ms), (0, 5));
        index.count_compaction("k", "new-sid").expect("count");
        index
            .restore_updated_at("k", "new-sid", 1)
            .expect("restore");
        index.set_status("k", "running", 7).expect("status");
        index
            .remember_heartbeat("k", "all quiet", 8)
            .expect("heartbeat");
        let entry = store.session("k").expect("read").expect("entry");
        assert_eq!(entry.compaction_count, 1);
        assert_eq!(entry.updated_at_ms, 7);
        assert_eq!(entry.status.as_deref(), Some("running"));
        assert_eq!(entry.last_heartbeat_text.as_deref(), Some("all quiet"));
        assert_eq!(entry.last_heartbeat_sent_at_ms, Some(8));
    }
}
