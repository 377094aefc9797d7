//! `sessions.list`, `sessions.patch`, `sessions.reset`, `sessions.delete`,
//! `sessions.compact` and `chat.history`, over the store's session index and
//! transcripts.

use serde_json::{json, Value};

use crate::agent::{Compacted, FieldPatch, SessionError, SessionPatch};

use crate::config::Config;
use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;
use crate::routing::session_key::{agent_of_key, scope_main_alias};
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
    let key = match key.map(str::trim).filter(|k| !k.is_empty()) {
        None => format!("agent:{agent}:{main_key}"),
        Some(k) if k == "main" || k == main_key => format!("agent:{agent}:{main_key}"),
        Some(k) if k.starts_with("agent:") || k == "global" => k.to_string(),
        Some(k) => format!("agent:{agent}:{k}"),
    };
    // `session.scope: "global"`: the main session (of any agent) is `global`.
    let owner = agent_of_key(&key).map_or(agent, str::to_string);
    scope_main_alias(&config.session, &owner, key)
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
        .services
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

/// A session operation's failure as a wire error.
pub(crate) fn session_error(error: SessionError) -> ErrorShape {
    match error {
        SessionError::Invalid(message) => ErrorShape::invalid(message),
        SessionError::Unavailable(message) => ErrorShape::unavailable(message),
        SessionError::Store(e) => store_error(e),
    }
}

fn field(p: &Params<'_>, name: &str) -> Result<FieldPatch, ErrorShape> {
    if p.is_null(name) {
        return Ok(FieldPatch::Clear);
    }
    Ok(p.opt_str(name)?
        .map_or(FieldPatch::Keep, |value| FieldPatch::Set(value.to_string())))
}

/// `sessions.patch`: label, levels, model and send policy; `null` clears.
pub fn patch(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("sessions.patch", params)?;
    let config = state.config();
    let key = canonical_key(&config, None, Some(p.str("key", false)?));
    let patch = SessionPatch {
        label: field(&p, "label")?,
        thinking_level: field(&p, "thinkingLevel")?,
        verbose_level: field(&p, "verboseLevel")?,
        reasoning_level: field(&p, "reasoningLevel")?,
        send_policy: field(&p, "sendPolicy")?,
        model: field(&p, "model")?,
    };
    let patched = state
        .services
        .sessions
        .patch(&key, &patch)
        .map_err(session_error)?;
    let resolved = patched.model.map_or(
        Value::Null,
        |(provider, model)| json!({"modelProvider": provider, "model": model}),
    );
    Ok(
        json!({"ok": true, "path": state.store_path(), "key": key, "entry": row(&key, &patched.entry), "resolved": resolved}),
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
    let entry = state.services.sessions.reset(&key).map_err(session_error)?;
    Ok(json!({"ok": true, "key": key, "entry": row(&key, &entry)}))
}

/// `sessions.delete`: the index entry and (by default) its transcript.
pub fn delete(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("sessions.delete", params)?;
    let config = state.config();
    let key = canonical_key(&config, None, Some(p.str("key", false)?));
    let delete_transcript = p.opt_bool("deleteTranscript")?.unwrap_or(true);
    let removed = state
        .services
        .sessions
        .delete(&key, delete_transcript)
        .map_err(session_error)?;
    Ok(json!({"ok": true, "key": key, "deleted": removed.is_some()}))
}

/// `sessions.compact`: summarises the session's older history with the model
/// now (waiting for a running turn of the session to end first).
pub async fn compact(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("sessions.compact", params)?;
    let config = state.config();
    let key = canonical_key(&config, None, Some(p.str("key", false)?));
    let instructions = p.opt_str("instructions")?.map(str::to_string);
    compact_key(state, &key, instructions.as_deref()).await
}

/// Compacts the session under `key` (canonical) and answers as `sessions.compact` does.
pub async fn compact_key(
    state: &GatewayState,
    key: &str,
    instructions: Option<&str>,
) -> Result<Value, ErrorShape> {
    let compacted = state
        .services
        .sessions
        .compact(key, instructions)
        .await
        .map_err(session_error)?;
    Ok(match compacted {
        Compacted::Done {
            tokens_before,
            summarized_entries,
            first_kept_seq,
            summary_chars,
        } => json!({
            "ok": true,
            "key": key,
            "compacted": true,
            "tokensBefore": tokens_before,
            "summarizedEntries": summarized_entries,
            "firstKeptSeq": first_kept_seq,
            "summaryChars": summary_chars,
        }),
        Compacted::Skipped(reason) => {
            json!({"ok": true, "key": key, "compacted": false, "reason": reason})
        }
    })
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
    // A request's `maxChars` beats `gateway.webchat.chatHistoryMaxChars`.
    let max_chars = p
        .opt_u64("maxChars", 1, 500_000)?
        .or(config.gateway.webchat.chat_history_max_chars.map(u64::from))
        .map(|v| v as usize);
    let Some(entry) = state.services.store.session(&key).map_err(store_error)? else {
        return Ok(
            json!({"sessionKey": key, "sessionId": null, "messages": [], "thinkingLevel": null}),
        );
    };
    let tail = state
        .services
        .store
        .transcript_tail(&entry.session_id, limit)
        .map_err(store_error)?;
    let mut budget = MAX_HISTORY_BYTES;
    let mut messages = Vec::with_capacity(tail.len());
    for (seq, item) in tail.into_iter().rev() {
        let mut text = if item.role == "assistant" {
            crate::gateway::chat_media::history_text(&item.text)
        } else {
            item.text
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(session: Value) -> Config {
        serde_json::from_value(json!({"session": session})).expect("config")
    }

    #[test]
    fn main_aliases_name_the_global_session_under_global_scope() {
        let global = config(json!({"scope": "global"}));
        for key in [None, Some("main"), Some("agent:main:main")] {
            assert_eq!(canonical_key(&global, None, key), "global", "{key:?}");
        }
        assert_eq!(
            canonical_key(&global, Some("ops"), Some("main")),
            "global",
            "every agent's main session is the global one"
        );
        assert_eq!(
            canonical_key(&global, None, Some("side")),
            "agent:main:side"
        );
        let per_sender = config(json!({}));
        assert_eq!(
            canonical_key(&per_sender, None, Some("main")),
            "agent:main:main"
        );
    }
}
