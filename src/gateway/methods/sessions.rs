//! `sessions.list`, `sessions.patch`, `sessions.reset`, `sessions.delete`,
//! `sessions.compact` and `chat.history`, over the store's session index and
//! transcripts.

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::agent::compaction::{self, CompactionError, CompactionJob, CompactionReason};
use crate::agent::{context, models};

use crate::config::Config;
use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;
use crate::store::{SessionEntry, StoreError};
use crate::system::clock::now_ms;

use super::params::Params;

/// Largest `chat.history` answer (upstream's 6 MiB cap).
pub const MAX_HISTORY_BYTES: usize = 6 * 1024 * 1024;
/// Default and largest `chat.history` limits.
pub const DEFAULT_HISTORY_LIMIT: u64 = 200;
pub const MAX_HISTORY_LIMIT: u64 = 1000;

pub(crate) fn store_error(e: StoreError) -> ErrorShape {
    ErrorShape::unavailable(format!("session store: {e}"))
}

/// The canonical session key: `main` (or the configured main key) means the
/// default agent's main session; a bare key is placed under that agent.
pub fn canonical_key(config: &Config, agent_id: Option<&str>, key: Option<&str>) -> String {
    let agent = agent_id
        .map(str::to_string)
        .unwrap_or_else(|| config.agents.default_agent_id());
    let main_key = &config.session.main_key;
    match key.map(str::trim).filter(|k| !k.is_empty()) {
        None => format!("agent:{agent}:{main_key}"),
        Some(k) if k == "main" || k == main_key => format!("agent:{agent}:{main_key}"),
        Some(k) if k.starts_with("agent:") || k == "global" => k.to_string(),
        Some(k) => format!("agent:{agent}:{k}"),
    }
}

fn kind_of(key: &str) -> &'static str {
    if key == "global" {
        "global"
    } else if key.contains(":group:") || key.contains(":channel:") {
        "group"
    } else if key.starts_with("agent:") {
        "direct"
    } else {
        "unknown"
    }
}

/// A `GatewaySessionRow`.
pub fn row(key: &str, entry: &SessionEntry) -> Value {
    json!({
        "key": key,
        "kind": kind_of(key),
        "label": entry.label,
        "displayName": entry.display_name,
        "channel": entry.channel,
        "updatedAt": entry.updated_at_ms,
        "sessionId": entry.session_id,
        "thinkingLevel": entry.thinking_level,
        "verboseLevel": entry.verbose_level,
        "reasoningLevel": entry.reasoning_level,
        "sendPolicy": entry.send_policy,
        "inputTokens": entry.input_tokens,
        "outputTokens": entry.output_tokens,
        "totalTokens": entry.total_tokens,
        "contextTokens": entry.context_tokens,
        "model": entry.model_override,
        "modelProvider": entry.provider_override,
        "lastChannel": entry.last_channel,
        "lastTo": entry.last_to,
        "spawnedBy": entry.spawned_by,
        "spawnDepth": entry.spawn_depth,
        "status": entry.status,
        "abortedLastRun": entry.aborted_last_run,
    })
}

/// `sessions.list`.
pub fn list(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("sessions.list", params)?;
    let limit = p.opt_u64("limit", 1, 10_000)?.map(|v| v as usize);
    let active_minutes = p.opt_u64("activeMinutes", 1, 10_000_000)?;
    let label = p.opt_str("label")?;
    let search = p.opt_str("search")?.map(str::to_lowercase);
    let agent_id = p.opt_str("agentId")?;
    let spawned_by = p.opt_str("spawnedBy")?;
    let now = now_ms();
    let config = state.config();
    let rows: Vec<Value> = state
        .store
        .sessions()
        .map_err(store_error)?
        .into_iter()
        .filter(|(_, e)| {
            active_minutes.is_none_or(|m| now.saturating_sub(e.updated_at_ms) <= m * 60_000)
        })
        .filter(|(_, e)| label.is_none_or(|l| e.label.as_deref() == Some(l)))
        .filter(|(_, e)| spawned_by.is_none_or(|s| e.spawned_by.as_deref() == Some(s)))
        .filter(|(k, _)| agent_id.is_none_or(|a| k.starts_with(&format!("agent:{a}:"))))
        .filter(|(k, e)| {
            search.as_ref().is_none_or(|s| {
                k.to_lowercase().contains(s)
                    || e.label
                        .as_ref()
                        .is_some_and(|l| l.to_lowercase().contains(s))
                    || e.display_name
                        .as_ref()
                        .is_some_and(|d| d.to_lowercase().contains(s))
            })
        })
        .take(limit.unwrap_or(usize::MAX))
        .map(|(k, e)| row(&k, &e))
        .collect();
    let primary = config
        .agents
        .defaults
        .model
        .as_ref()
        .and_then(|m| m.primary().map(str::to_string));
    let (provider, model) = match primary.as_deref().and_then(|p| p.split_once('/')) {
        Some((p, m)) => (Some(p.to_string()), Some(m.to_string())),
        None => (None, None),
    };
    Ok(json!({
        "ts": now,
        "path": state.store_path(),
        "count": rows.len(),
        "defaults": {"modelProvider": provider, "model": model, "contextTokens": config.agents.defaults.context_tokens},
        "sessions": rows,
    }))
}

fn patch_string(
    p: &Params<'_>,
    name: &str,
    slot: &mut Option<String>,
    allowed: Option<&[&str]>,
) -> Result<(), ErrorShape> {
    if p.is_null(name) {
        *slot = None;
    } else if let Some(value) = p.opt_str(name)? {
        if let Some(allowed) = allowed {
            if !allowed.contains(&value) {
                return Err(ErrorShape::invalid(format!(
                    "invalid sessions.patch params: {name} must be one of {}, got {value:?}",
                    allowed.join(", ")
                )));
            }
        }
        *slot = Some(value.to_string());
    }
    Ok(())
}

const THINKING_LEVELS: &[&str] = &["off", "minimal", "low", "medium", "high", "xhigh"];

/// `sessions.patch`: label, levels, model and send policy; `null` clears.
pub fn patch(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("sessions.patch", params)?;
    let config = state.config();
    let key = canonical_key(&config, None, Some(p.str("key", false)?));
    let mut entry = match state.store.session(&key).map_err(store_error)? {
        Some(entry) => entry,
        None => SessionEntry::new(uuid::Uuid::new_v4().to_string(), now_ms()),
    };
    patch_string(&p, "label", &mut entry.label, None)?;
    patch_string(
        &p,
        "thinkingLevel",
        &mut entry.thinking_level,
        Some(THINKING_LEVELS),
    )?;
    patch_string(
        &p,
        "verboseLevel",
        &mut entry.verbose_level,
        Some(&["off", "on", "full"]),
    )?;
    patch_string(
        &p,
        "reasoningLevel",
        &mut entry.reasoning_level,
        Some(&["off", "on", "stream"]),
    )?;
    patch_string(
        &p,
        "sendPolicy",
        &mut entry.send_policy,
        Some(&["allow", "deny"]),
    )?;
    let mut resolved = Value::Null;
    if p.is_null("model") {
        entry.model_override = None;
        entry.provider_override = None;
    } else if let Some(model) = p.opt_str("model")? {
        let Some((provider, model_id)) = model.split_once('/') else {
            return Err(ErrorShape::invalid(format!(
                "invalid sessions.patch params: model must be \"<provider>/<model>\", got {model:?}"
            )));
        };
        if !config.models.providers.contains_key(provider) {
            return Err(ErrorShape::invalid(format!(
                "unknown model provider: {provider}"
            )));
        }
        entry.provider_override = Some(provider.to_string());
        entry.model_override = Some(model_id.to_string());
        resolved = json!({"modelProvider": provider, "model": model_id});
    }
    entry.updated_at_ms = now_ms();
    state.store.put_session(&key, &entry).map_err(store_error)?;
    Ok(
        json!({"ok": true, "path": state.store_path(), "key": key, "entry": row(&key, &entry), "resolved": resolved}),
    )
}

/// `sessions.reset`: a fresh session id (the old transcript is kept).
pub fn reset(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("sessions.reset", params)?;
    let config = state.config();
    let key = canonical_key(&config, None, Some(p.str("key", false)?));
    if let Some(reason) = p.opt_str("reason")? {
        if reason != "new" && reason != "reset" {
            return Err(ErrorShape::invalid(format!(
                "invalid sessions.reset params: reason must be \"new\" or \"reset\", got {reason:?}"
            )));
        }
    }
    state.runs.abort_session(&key);
    state.tool_services.processes.kill_session(&key);
    let old = state.store.session(&key).map_err(store_error)?;
    if let Some(closing) = &old {
        super::memory::flush_closing_session(state, &key, closing);
    }
    let mut entry = SessionEntry::new(uuid::Uuid::new_v4().to_string(), now_ms());
    if let Some(old) = old {
        entry.label = old.label;
        entry.thinking_level = old.thinking_level;
        entry.model_override = old.model_override;
        entry.provider_override = old.provider_override;
        entry.channel = old.channel;
    }
    state.store.put_session(&key, &entry).map_err(store_error)?;
    Ok(json!({"ok": true, "key": key, "entry": row(&key, &entry)}))
}

/// `sessions.delete`: the index entry and (by default) its transcript.
pub fn delete(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("sessions.delete", params)?;
    let config = state.config();
    let key = canonical_key(&config, None, Some(p.str("key", false)?));
    let delete_transcript = p.opt_bool("deleteTranscript")?.unwrap_or(true);
    state.runs.abort_session(&key);
    state.tool_services.processes.kill_session(&key);
    let removed = state.store.delete_session(&key).map_err(store_error)?;
    if let (Some(entry), true) = (&removed, delete_transcript) {
        state
            .store
            .delete_transcript(&entry.session_id)
            .map_err(store_error)?;
    }
    Ok(json!({"ok": true, "key": key, "deleted": removed.is_some()}))
}

/// `sessions.compact`: summarises the session's older history with the model
/// now (waiting for a running turn of the session to end first).
pub async fn compact(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("sessions.compact", params)?;
    let config = state.config();
    let key = canonical_key(&config, None, Some(p.str("key", false)?));
    let instructions = p.opt_str("instructions")?.map(str::to_string);
    compact_session(state, &key, instructions.as_deref()).await
}

/// Compacts the session under `key` (canonical) with its agent's primary model.
pub async fn compact_session(
    state: &GatewayState,
    key: &str,
    instructions: Option<&str>,
) -> Result<Value, ErrorShape> {
    let config = state.config();
    let _lane = state.runs.admit(key).await;
    let entry = state
        .store
        .run_blocking(|| state.store.session(key))
        .map_err(store_error)?;
    let Some(entry) = entry else {
        return Ok(
            json!({"ok": true, "key": key, "compacted": false, "reason": "no such session"}),
        );
    };
    let agent_id = crate::routing::session_key::agent_of_key(key)
        .map_or_else(|| config.agents.default_agent_id(), str::to_string);
    let chain = models::resolve_chain(&config, &agent_id, None, &state.http())
        .map_err(|e| ErrorShape::unavailable(e.to_string()))?;
    let model = &chain[0];
    let window = context::resolve_window(&config, model.context_window);
    let cancel = CancellationToken::new();
    let job = CompactionJob {
        store: &state.store,
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
        Ok(done) => Ok(json!({
            "ok": true,
            "key": key,
            "compacted": true,
            "tokensBefore": done.tokens_before,
            "summarizedEntries": done.summarized_entries,
            "firstKeptSeq": done.first_kept_seq,
            "summaryChars": done.summary.len(),
        })),
        Err(e @ CompactionError::NothingToCompact) => {
            Ok(json!({"ok": true, "key": key, "compacted": false, "reason": e.to_string()}))
        }
        Err(e) => Err(ErrorShape::unavailable(format!("compaction failed: {e}"))),
    }
}

/// `chat.history`: the newest transcript entries, oldest first.
pub fn history(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("chat.history", params)?;
    let config = state.config();
    let key = canonical_key(
        &config,
        p.opt_str("agentId")?,
        Some(p.str("sessionKey", false)?),
    );
    let limit = p
        .opt_u64("limit", 1, MAX_HISTORY_LIMIT)?
        .unwrap_or(DEFAULT_HISTORY_LIMIT) as usize;
    let max_chars = p.opt_u64("maxChars", 1, 500_000)?.map(|v| v as usize);
    let Some(entry) = state.store.session(&key).map_err(store_error)? else {
        return Ok(
            json!({"sessionKey": key, "sessionId": null, "messages": [], "thinkingLevel": null}),
        );
    };
    let tail = state
        .store
        .transcript_tail(&entry.session_id, limit)
        .map_err(store_error)?;
    let mut budget = MAX_HISTORY_BYTES;
    let mut messages = Vec::with_capacity(tail.len());
    for (seq, item) in tail.into_iter().rev() {
        let mut text = item.text;
        if let Some(max) = max_chars {
            if text.chars().count() > max {
                text = text.chars().take(max).collect::<String>() + "…";
            }
        }
        if text.len() + 256 > budget {
            text = format!(
                "[message omitted: {} bytes over the history size cap]",
                text.len()
            );
        }
        budget = budget.saturating_sub(text.len() + 256);
        messages.push(json!({
            "role": item.role,
            "content": [{"type": "text", "text": text}],
            "timestamp": item.timestamp_ms,
            "seq": seq,
            "runId": item.run_id,
            "stopReason": item.stop_reason,
        }));
    }
    messages.reverse();
    Ok(json!({
        "sessionKey": key,
        "sessionId": entry.session_id,
        "messages": messages,
        "thinkingLevel": entry.thinking_level,
        "verboseLevel": entry.verbose_level,
    }))
}
