//! The SQLite store of newer OpenClaw releases (2026.9.6 among them), read-only: the shared
//! `state/openclaw.sqlite` (cron jobs, paired devices, DM pairing approvals, and the list of agent
//! databases) and each agent's `openclaw-agent.sqlite` (sessions in `session_nodes`, transcripts in
//! `transcript_events`, one JSON event per row, zstd-compressed from 1 KiB up).
//!
//! The rows carry the same JSON shapes as the older JSON files, so they go through the same
//! importers. A table that is missing (another schema version) is reported, not fatal. Nothing is
//! ever written to OpenClaw's databases.

use std::io::Read;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde_json::{json, Map, Value};

use super::records::{import_allow_entries, import_device, import_jobs, PINCER_CHANNELS};
use super::sessions::{SessionImporter, TranscriptFeed};
use super::transcript::{TranscriptImport, MAX_TRANSCRIPT_LINE_BYTES};
use super::Report;
use crate::store::Store;

/// The shared database's path in a state directory.
pub fn shared_database(state: &Path) -> PathBuf {
    state.join("state").join("openclaw.sqlite")
}

fn open(path: &Path) -> Result<Connection, String> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("cannot open read-only: {e}"))
}

fn has_table(db: &Connection, table: &str) -> bool {
    db.query_row(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [table],
        |_| Ok(()),
    )
    .optional()
    .ok()
    .flatten()
    .is_some()
}

/// Cron jobs, paired devices and DM approvals from `state/openclaw.sqlite`.
pub fn import_shared(state: &Path, store: &Store, now_ms: u64, report: &mut Report) {
    let path = shared_database(state);
    if !path.exists() {
        return;
    }
    let label = path.display().to_string();
    let db = match open(&path) {
        Ok(db) => db,
        Err(why) => return report.failed(&label, why),
    };
    for (table, step) in [
        ("cron_jobs", shared_cron as SharedStep),
        ("device_pairing_paired", shared_devices),
        ("channel_pairing_allow_entries", shared_allow),
    ] {
        if !has_table(&db, table) {
            report.failed(
                &label,
                format!("no table {table} (an OpenClaw schema pincer does not know)"),
            );
            continue;
        }
        if let Err(e) = step(&db, &label, store, now_ms, report) {
            report.failed(&format!("{label}: {table}"), format!("cannot read: {e}"));
        }
    }
}

type SharedStep = fn(&Connection, &str, &Store, u64, &mut Report) -> rusqlite::Result<()>;

fn json_column(text: Option<String>) -> Value {
    text.and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

fn shared_cron(
    db: &Connection,
    label: &str,
    store: &Store,
    now_ms: u64,
    report: &mut Report,
) -> rusqlite::Result<()> {
    let mut query =
        db.prepare("SELECT job_id, job_json FROM cron_jobs ORDER BY sort_order, job_id")?;
    let mut jobs = Vec::new();
    let rows = query.query_map([], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
    })?;
    for row in rows {
        let (id, text) = row?;
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(mut job)) => {
                job.entry("id").or_insert(json!(id));
                jobs.push(Value::Object(job));
            }
            _ => report.failed(
                &format!("cron job {id:?} in {label}"),
                "job_json is not a JSON object".into(),
            ),
        }
    }
    import_jobs(jobs, &format!("{label} (cron_jobs)"), store, now_ms, report);
    Ok(())
}

fn shared_devices(
    db: &Connection,
    label: &str,
    store: &Store,
    _now_ms: u64,
    report: &mut Report,
) -> rusqlite::Result<()> {
    let mut query = db.prepare(
        "SELECT device_id, public_key, display_name, platform, device_family, client_id, client_mode, \
         role, roles_json, scopes_json, approved_scopes_json, remote_ip, tokens_json, created_at_ms, \
         approved_at_ms, last_seen_at_ms FROM device_pairing_paired ORDER BY device_id",
    )?;
    let rows = query.query_map([], |row| {
        let text = |i: usize| row.get::<_, Option<String>>(i);
        let device = json!({
            "publicKey": text(1)?, "displayName": text(2)?, "platform": text(3)?,
            "deviceFamily": text(4)?, "clientId": text(5)?, "clientMode": text(6)?, "role": text(7)?,
            "roles": json_column(text(8)?), "scopes": json_column(text(9)?),
            "approvedScopes": json_column(text(10)?), "remoteIp": text(11)?,
            "tokens": json_column(text(12)?),
            "createdAtMs": row.get::<_, i64>(13)?, "approvedAtMs": row.get::<_, Option<i64>>(14)?,
            "lastSeenAtMs": row.get::<_, Option<i64>>(15)?,
        });
        Ok((row.get::<_, String>(0)?, device))
    })?;
    let source = format!("{label} (device_pairing_paired)");
    for row in rows {
        let (device_id, device) = row?;
        import_device(&device_id, &device, &source, store, report);
    }
    Ok(())
}

fn shared_allow(
    db: &Connection,
    label: &str,
    store: &Store,
    now_ms: u64,
    report: &mut Report,
) -> rusqlite::Result<()> {
    let mut query = db.prepare(
        "SELECT channel_key, account_id, entry FROM channel_pairing_allow_entries \
         ORDER BY channel_key, account_id, sort_order, entry",
    )?;
    let rows = query.query_map([], |row| {
        Ok((
            row.get::<_, String>(0)?,
            row.get::<_, String>(1)?,
            row.get::<_, String>(2)?,
        ))
    })?;
    let source = format!("{label} (channel_pairing_allow_entries)");
    for row in rows {
        let (channel, account, entry) = row?;
        match PINCER_CHANNELS.iter().find(|c| **c == channel) {
            Some(channel) => import_allow_entries(
                channel,
                &account,
                &[Value::String(entry)],
                &source,
                store,
                now_ms,
                report,
            ),
            None => report.failed(
                &format!("{channel} DM approval of {entry} in {source}"),
                format!("not a channel pincer runs ({})", PINCER_CHANNELS.join(", ")),
            ),
        }
    }
    Ok(())
}

/// Each agent's database: those the shared database lists, else `agents/*/agent/openclaw-agent.sqlite`.
fn agent_databases(state: &Path) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    if let Ok(db) = open(&shared_database(state)) {
        if has_table(&db, "agent_databases") {
            if let Ok(mut query) =
                db.prepare("SELECT agent_id, path FROM agent_databases ORDER BY agent_id, path")
            {
                let rows = query.query_map([], |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
                });
                if let Ok(rows) = rows {
                    for (agent, path) in rows.flatten() {
                        let path = PathBuf::from(path);
                        found.push((
                            agent,
                            if path.is_absolute() {
                                path
                            } else {
                                state.join(path)
                            },
                        ));
                    }
                }
            }
        }
    }
    if let Ok(agents) = std::fs::read_dir(state.join("agents")) {
        for agent in agents.flatten() {
            let path = agent.path().join("agent").join("openclaw-agent.sqlite");
            let id = agent.file_name().to_string_lossy().to_string();
            if path.exists() && !found.iter().any(|(_, p)| same_file(p, &path)) {
                found.push((id, path));
            }
        }
    }
    found.retain(|(_, p)| p.exists());
    found.sort();
    found
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Sessions and transcripts from every agent database.
pub fn import_agent_databases(state: &Path, importer: &mut SessionImporter, report: &mut Report) {
    for (agent_id, path) in agent_databases(state) {
        let label = path.display().to_string();
        let db = match open(&path) {
            Ok(db) => db,
            Err(why) => {
                report.failed(&label, why);
                continue;
            }
        };
        for table in ["session_nodes", "transcript_events"] {
            if !has_table(&db, table) {
                report.failed(
                    &label,
                    format!("no table {table} (an OpenClaw schema pincer does not know)"),
                );
            }
        }
        if !has_table(&db, "session_nodes") {
            continue;
        }
        if let Err(e) = agent_sessions(&db, &agent_id, &label, importer, report) {
            report.failed(
                &format!("{label}: session_nodes"),
                format!("cannot read: {e}"),
            );
        }
    }
}

fn agent_sessions(
    db: &Connection,
    agent_id: &str,
    label: &str,
    importer: &mut SessionImporter,
    report: &mut Report,
) -> rusqlite::Result<()> {
    let mut query = db.prepare(
        "SELECT session_key, current_session_id, entry_json FROM session_nodes ORDER BY session_key",
    )?;
    let rows: Vec<(String, String, String)> = query
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let source = format!("{label} (session_nodes)");
    let with_events = has_table(db, "transcript_events");
    for (key, session_id, entry_json) in rows {
        let mut entry = match serde_json::from_str::<Value>(&entry_json) {
            Ok(Value::Object(entry)) => entry,
            _ => {
                report.failed(
                    &format!("session {key} ({source})"),
                    "entry_json is not a JSON object".into(),
                );
                continue;
            }
        };
        entry.insert("sessionId".into(), json!(session_id));
        let transcript = |_: &Map<String, Value>, id: &str| -> Box<dyn TranscriptFeed + '_> {
            Box::new(EventRows {
                db,
                session_id: id.to_string(),
                label: format!("{label} (transcript_events of {id})"),
                present: with_events,
            })
        };
        importer.import(
            agent_id,
            &key,
            &Value::Object(entry),
            &transcript,
            &source,
            report,
        );
    }
    Ok(())
}

/// One session's rows of `transcript_events`, in sequence order.
struct EventRows<'c> {
    db: &'c Connection,
    session_id: String,
    label: String,
    present: bool,
}

impl TranscriptFeed for EventRows<'_> {
    fn label(&self) -> String {
        self.label.clone()
    }

    fn exists(&self) -> bool {
        self.present
    }

    fn feed(&self, import: &mut TranscriptImport<'_, '_>) -> Result<(), String> {
        let fail = |e: rusqlite::Error| format!("cannot read {}: {e}", self.label);
        let mut query = self
            .db
            .prepare(
                "SELECT event_json, event_zstd FROM transcript_events WHERE session_id = ?1 ORDER BY seq",
            )
            .map_err(fail)?;
        let mut rows = query.query([&self.session_id]).map_err(fail)?;
        while let Some(row) = rows.next().map_err(fail)? {
            let text: Option<String> = row.get(0).map_err(fail)?;
            match text {
                Some(text) => import.push(Ok(text.as_bytes()))?,
                None => {
                    let packed: Option<Vec<u8>> = row.get(1).map_err(fail)?;
                    match packed.as_deref().map(unpack) {
                        Some(Ok(bytes)) => import.push(Ok(&bytes))?,
                        Some(Err(why)) => import.push(Err(why))?,
                        None => import.push(Err("an event row without content".into()))?,
                    }
                }
            }
        }
        Ok(())
    }
}

/// A zstd-compressed event, decompressed up to `MAX_TRANSCRIPT_LINE_BYTES`.
fn unpack(packed: &[u8]) -> Result<Vec<u8>, String> {
    let decoder = ruzstd::decoding::StreamingDecoder::new(packed)
        .map_err(|e| format!("compressed event: {e}"))?;
    let mut out = Vec::new();
    decoder
        .take(MAX_TRANSCRIPT_LINE_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("compressed event: {e}"))?;
    if out.len() > MAX_TRANSCRIPT_LINE_BYTES {
        return Err(format!(
            "compressed event longer than {MAX_TRANSCRIPT_LINE_BYTES} bytes, skipped"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ruzstd::encoding::{compress_to_vec, CompressionLevel};

    #[test]
    fn compressed_events_are_unpacked_up_to_the_line_cap() {
        let event = br#"{"type":"message","message":{"role":"user","content":"hi"}}"#;
        let packed = compress_to_vec(&event[..], CompressionLevel::Fastest);
        assert_eq!(unpack(&packed).expect("unpack"), event);
        let huge = vec![b' '; MAX_TRANSCRIPT_LINE_BYTES + 10];
        let packed = compress_to_vec(&huge[..], CompressionLevel::Fastest);
        let why = unpack(&packed).expect_err("over the cap");
        assert!(why.contains("longer than"), "{why}");
        assert!(unpack(b"not zstd").is_err());
    }
}
