//! OpenClaw's sessions (`agents/<agentId>/sessions/sessions.json`, session key → entry) and their
//! transcripts, into pincer's session index and transcript store.
//!
//! A session key pincer already has is left alone ("already present"). The transcript is written
//! before the entry, so an interrupted import leaves a transcript no session points at, which the next
//! run replaces; a session id another pincer session already uses is refused.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::transcript::{read_jsonl, TranscriptImport, TranscriptSummary};
use super::{read_json, Report};
use crate::agent::SessionIndex;
use crate::store::{SessionEntry, SessionOrigin, Store};

/// Where a session's transcript lines come from: a JSONL file, or OpenClaw's SQLite rows.
pub trait TranscriptFeed {
    /// Where, for the report.
    fn label(&self) -> String;
    /// Whether there is a transcript at all.
    fn exists(&self) -> bool;
    /// Pushes every line through `import`, in order.
    fn feed(&self, import: &mut TranscriptImport<'_, '_>) -> Result<(), String>;
}

/// Gives a session's transcript from its entry's fields and its session id.
pub type TranscriptFor<'f> = dyn Fn(&Map<String, Value>, &str) -> Box<dyn TranscriptFeed + 'f> + 'f;

/// A JSONL transcript file.
pub struct JsonlFile(pub PathBuf);

impl TranscriptFeed for JsonlFile {
    fn label(&self) -> String {
        self.0.display().to_string()
    }

    fn exists(&self) -> bool {
        self.0.is_file()
    }

    fn feed(&self, import: &mut TranscriptImport<'_, '_>) -> Result<(), String> {
        read_jsonl(&self.0, import)
    }
}

/// Imports sessions one at a time into pincer's index, keeping track of the session ids in use.
pub struct SessionImporter {
    store: Store,
    index: SessionIndex,
    used_ids: HashMap<String, String>,
}

impl SessionImporter {
    pub fn new(store: &Store) -> Result<SessionImporter, String> {
        let used_ids = store
            .sessions()
            .map_err(|e| format!("cannot read pincer's sessions: {e}"))?
            .into_iter()
            .map(|(key, entry)| (entry.session_id, key))
            .collect();
        Ok(SessionImporter {
            store: store.clone(),
            index: SessionIndex::new(store.clone()),
            used_ids,
        })
    }

    /// Imports one session: `key` as OpenClaw stored it (made canonical with `agent_id`), its entry
    /// JSON, and its transcript. `source` names where the entry came from, for the report.
    pub fn import<'f>(
        &mut self,
        agent_id: &str,
        raw_key: &str,
        raw: &Value,
        transcript: &TranscriptFor<'f>,
        source: &str,
        report: &mut Report,
    ) {
        let key = canonical_key(agent_id, raw_key);
        let what = format!("session {key}");
        match self.import_one(&key, raw, transcript) {
            Ok(Imported::New(session_id, note)) => {
                self.used_ids.insert(session_id, key.clone());
                report.imported(&what, note);
            }
            Ok(Imported::Present) => report.present(&what),
            Err(why) => report.failed(&format!("{what} ({source})"), why),
        }
    }

    fn import_one<'f>(
        &self,
        key: &str,
        raw: &Value,
        transcript: &TranscriptFor<'f>,
    ) -> Result<Imported, String> {
        let fields = raw.as_object().ok_or("the entry is not a JSON object")?;
        let entry = entry_from(fields)?;
        let store = &self.store;
        if store.session(key).map_err(|e| e.to_string())?.is_some() {
            return Ok(Imported::Present);
        }
        if let Some(other) = self.used_ids.get(&entry.session_id) {
            return Err(format!(
                "session id {} is already used by pincer's session {other}",
                entry.session_id
            ));
        }
        let feed = transcript(fields, &entry.session_id);
        store
            .delete_transcript(&entry.session_id)
            .map_err(|e| e.to_string())?;
        let note = if feed.exists() {
            let mut sink = |batch: &[crate::store::TranscriptEntry]| {
                store
                    .append_transcript_batch(&entry.session_id, batch)
                    .map(|_| ())
                    .map_err(|e| format!("cannot store the transcript: {e}"))
            };
            let mut import = TranscriptImport::new(&mut sink);
            let read = feed.feed(&mut import);
            let summary = match read.and_then(|()| import.finish()) {
                Ok(summary) => summary,
                Err(why) => {
                    let _ = store.delete_transcript(&entry.session_id);
                    return Err(why);
                }
            };
            describe(&summary, &feed.label())
        } else {
            format!("no transcript at {}", feed.label())
        };
        if !self
            .index
            .create_if_absent(key, &entry)
            .map_err(|e| e.to_string())?
        {
            return Ok(Imported::Present);
        }
        Ok(Imported::New(entry.session_id, note))
    }
}

fn describe(summary: &TranscriptSummary, label: &str) -> String {
    let mut note = format!("{} transcript entries from {label}", summary.entries);
    if summary.dropped_parts > 0 {
        note.push_str(&format!(
            "; {} images, thinking blocks or custom messages pincer's transcript cannot hold were left out",
            summary.dropped_parts
        ));
    }
    if summary.problem_count > 0 {
        note.push_str(&format!(
            "; {} unreadable lines skipped ({})",
            summary.problem_count,
            summary.problems.join("; ")
        ));
    }
    note
}

/// Imports every agent's sessions found under `<state>/agents/<agentId>/sessions/sessions.json`.
pub fn import_sessions(state_dir: &Path, importer: &mut SessionImporter, report: &mut Report) {
    let Ok(listing) = std::fs::read_dir(state_dir.join("agents")) else {
        return;
    };
    let mut agents: Vec<PathBuf> = listing
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    agents.sort();
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
        let source = index_path.display().to_string();
        let entries = match read_json(&index_path) {
            Ok(Value::Object(map)) => map,
            Ok(_) => {
                report.failed(&source, "not a JSON object of session key → entry".into());
                continue;
            }
            Err(why) => {
                report.failed(&source, why);
                continue;
            }
        };
        let transcript =
            |fields: &Map<String, Value>, session_id: &str| -> Box<dyn TranscriptFeed> {
                Box::new(JsonlFile(transcript_path(
                    fields,
                    session_id,
                    &sessions_dir,
                )))
            };
        let mut keys: Vec<&String> = entries.keys().collect();
        keys.sort();
        for raw_key in keys {
            importer.import(
                &agent_id,
                raw_key,
                &entries[raw_key],
                &transcript,
                &source,
                report,
            );
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
        last_interaction_at_ms: number(fields, "lastInteractionAt"),
    })
}
