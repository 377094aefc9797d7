//! OpenClaw's sessions (`agents/<agentId>/sessions/sessions.json`, session key → entry) and their
//! transcripts, into pincer's session index and transcript store.
//!
//! A session key pincer already has is left alone ("already present"). The transcript is written
//! before the entry, so an interrupted import leaves a transcript no session points at, which the next
//! run replaces; a session id another pincer session already uses is refused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::transcript::read_transcript;
use super::{read_json, Report};
use crate::agent::SessionIndex;
use crate::store::{SessionEntry, SessionOrigin, Store};

/// Imports every agent's sessions found under `<state>/agents`.
pub fn import_sessions(state_dir: &Path, store: &Store, report: &mut Report) {
    let agents_dir = state_dir.join("agents");
    let Ok(listing) = std::fs::read_dir(&agents_dir) else {
        return;
    };
    let mut agents: Vec<PathBuf> = listing
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    agents.sort();
    let mut used_ids: HashMap<String, String> = match store.sessions() {
        Ok(all) => all.into_iter().map(|(k, e)| (e.session_id, k)).collect(),
        Err(e) => {
            report.failed("sessions", format!("cannot read pincer's sessions: {e}"));
            return;
        }
    };
    let index = SessionIndex::new(store.clone());
    for agent_dir in agents {
        let agent_id = agent_dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let sessions_dir = agent_dir.join("sessions");
        let index_path = sessions_dir.join("sessions.json");
        if !index_path.exists() {
            continue;
        }
        let entries = match read_json(&index_path) {
            Ok(Value::Object(map)) => map,
            Ok(_) => {
                report.failed(
                    &index_path.display().to_string(),
                    "not a JSON object of session key → entry".into(),
                );
                continue;
            }
            Err(why) => {
                report.failed(&index_path.display().to_string(), why);
                continue;
            }
        };
        let mut keys: Vec<&String> = entries.keys().collect();
        keys.sort();
        for raw_key in keys {
            let key = canonical_key(&agent_id, raw_key);
            let what = format!("session {key}");
            let outcome = import_one(
                &key,
                &entries[raw_key],
                &sessions_dir,
                store,
                &index,
                &used_ids,
            );
            match outcome {
                Ok(Imported::New(session_id, note)) => {
                    used_ids.insert(session_id, key.clone());
                    report.imported(&what, note);
                }
                Ok(Imported::Present) => report.present(&what),
                Err(why) => report.failed(&format!("{what} ({})", index_path.display()), why),
            }
        }
    }
}

enum Imported {
    New(String, String),
    Present,
}

/// `agent:<agentId>:<rest>` as OpenClaw canonicalises it; a bare key belongs to the directory's agent.
fn canonical_key(agent_id: &str, key: &str) -> String {
    if key.starts_with("agent:") {
        key.to_string()
    } else {
        format!("agent:{agent_id}:{key}")
    }
}

fn import_one(
    key: &str,
    raw: &Value,
    sessions_dir: &Path,
    store: &Store,
    index: &SessionIndex,
    used_ids: &HashMap<String, String>,
) -> Result<Imported, String> {
    let fields = raw.as_object().ok_or("the entry is not a JSON object")?;
    let entry = entry_from(fields)?;
    if store.session(key).map_err(|e| e.to_string())?.is_some() {
        return Ok(Imported::Present);
    }
    if let Some(other) = used_ids.get(&entry.session_id) {
        return Err(format!(
            "session id {} is already used by pincer's session {other}",
            entry.session_id
        ));
    }
    let transcript = transcript_path(fields, &entry.session_id, sessions_dir);
    store
        .delete_transcript(&entry.session_id)
        .map_err(|e| e.to_string())?;
    let note = if transcript.exists() {
        let mut sink = |batch: &[crate::store::TranscriptEntry]| {
            store
                .append_transcript_batch(&entry.session_id, batch)
                .map(|_| ())
                .map_err(|e| format!("cannot store the transcript: {e}"))
        };
        let summary = match read_transcript(&transcript, &mut sink) {
            Ok(summary) => summary,
            Err(why) => {
                let _ = store.delete_transcript(&entry.session_id);
                return Err(why);
            }
        };
        let mut note = format!("{} transcript entries", summary.entries);
        if summary.dropped_parts > 0 {
            note.push_str(&format!(
                "; {} images, thinking blocks or custom messages pincer's transcript cannot hold were left out",
                summary.dropped_parts
            ));
        }
        if summary.problem_count > 0 {
            note.push_str(&format!(
                "; {} unreadable lines in {} skipped ({})",
                summary.problem_count,
                transcript.display(),
                summary.problems.join("; ")
            ));
        }
        note
    } else {
        format!("no transcript at {}", transcript.display())
    };
    if !index
        .create_if_absent(key, &entry)
        .map_err(|e| e.to_string())?
    {
        return Ok(Imported::Present);
    }
    Ok(Imported::New(entry.session_id, note))
}

/// The entry's `sessionFile` (relative to the sessions directory), else `<sessionId>.jsonl` there.
fn transcript_path(fields: &Map<String, Value>, session_id: &str, sessions_dir: &Path) -> PathBuf {
    match fields.get("sessionFile").and_then(Value::as_str) {
        Some(file) if !file.trim().is_empty() => sessions_dir.join(file),
        _ => sessions_dir.join(format!("{session_id}.jsonl")),
    }
}

fn text(fields: &Map<String, Value>, name: &str) -> Option<String> {
    match fields.get(name)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn number(fields: &Map<String, Value>, name: &str) -> Option<u64> {
    fields.get(name).and_then(Value::as_u64)
}

/// pincer's entry from OpenClaw's (the fields both keep; the others stay in OpenClaw's file).
fn entry_from(fields: &Map<String, Value>) -> Result<SessionEntry, String> {
    let session_id = text(fields, "sessionId").ok_or("the entry has no sessionId")?;
    let updated_at_ms = number(fields, "updatedAt").unwrap_or(0);
    let created_at_ms = ["sessionStartedAt", "startedAt", "createdAt"]
        .iter()
        .find_map(|name| number(fields, name))
        .unwrap_or(updated_at_ms);
    let origin = fields
        .get("origin")
        .and_then(Value::as_object)
        .map(|o| SessionOrigin {
            label: text(o, "label"),
            provider: text(o, "provider"),
            surface: text(o, "surface"),
            chat_type: text(o, "chatType"),
            from: text(o, "from"),
            to: text(o, "to"),
            account_id: text(o, "accountId"),
            thread_id: text(o, "threadId"),
        });
    Ok(SessionEntry {
        session_id,
        created_at_ms,
        updated_at_ms,
        input_tokens: number(fields, "inputTokens").unwrap_or(0),
        output_tokens: number(fields, "outputTokens").unwrap_or(0),
        total_tokens: number(fields, "totalTokens").unwrap_or(0),
        context_tokens: number(fields, "contextTokens"),
        channel: text(fields, "channel"),
        origin,
        label: text(fields, "label"),
        display_name: text(fields, "displayName"),
        model_override: text(fields, "modelOverride"),
        provider_override: text(fields, "providerOverride"),
        thinking_level: text(fields, "thinkingLevel"),
        verbose_level: text(fields, "verboseLevel"),
        reasoning_level: text(fields, "reasoningLevel"),
        send_policy: text(fields, "sendPolicy"),
        last_channel: text(fields, "lastChannel"),
        last_to: text(fields, "lastTo"),
        spawned_by: text(fields, "spawnedBy"),
        spawn_depth: number(fields, "spawnDepth").and_then(|d| u32::try_from(d).ok()),
        aborted_last_run: fields.get("abortedLastRun") == Some(&Value::Bool(true)),
        chat_type: text(fields, "chatType"),
        model: text(fields, "model"),
        model_provider: text(fields, "modelProvider"),
        fast_mode: fields.get("fastMode").and_then(Value::as_bool),
        response_usage: text(fields, "responseUsage"),
        group_activation: text(fields, "groupActivation"),
        elevated_level: text(fields, "elevatedLevel"),
        status: None,
        last_account_id: text(fields, "lastAccountId"),
        last_thread_id: text(fields, "lastThreadId"),
        system_sent: fields.get("systemSent") == Some(&Value::Bool(true)),
        compaction_count: number(fields, "compactionCount")
            .and_then(|c| u32::try_from(c).ok())
            .unwrap_or(0),
        last_heartbeat_text: text(fields, "lastHeartbeatText"),
        last_heartbeat_sent_at_ms: number(fields, "lastHeartbeatSentAt"),
    })
}
