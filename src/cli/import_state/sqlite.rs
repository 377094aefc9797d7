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

use serde_json::{json, Map, Value};

use super::records::{import_allow_entries, import_device, import_jobs, PINCER_CHANNELS};
use super::sessions::{SessionImporter, TranscriptFeed};
use super::sqlite_file::{Row, SqliteError, SqliteFile};
use super::transcript::{TranscriptImport, MAX_TRANSCRIPT_LINE_BYTES};
use super::Report;
use crate::store::Store;

/// The shared database's path in a state directory.
pub fn shared_database(state: &Path) -> PathBuf {
    state.join("state").join("openclaw.sqlite")
}

/// Every row of `table` with `columns`, sorted by `order` (the SQL `ORDER BY` the rows are wanted in).
fn sorted_rows(
    db: &SqliteFile,
    table: &str,
    columns: &[&str],
    order: impl Fn(&Row, &Row) -> std::cmp::Ordering,
) -> Result<Vec<Row>, SqliteError> {
    let mut rows = Vec::new();
    db.for_each_row(table, columns, &mut |row| {
        rows.push(row);
        Ok(())
    })?;
    rows.sort_by(order);
    Ok(rows)
}

/// Compares rows by their columns in `columns` order (text, then integers; NULL first).
fn by_columns(columns: &'static [usize]) -> impl Fn(&Row, &Row) -> std::cmp::Ordering {
    move |a, b| {
        columns
            .iter()
            .map(|&c| compare_values(&a.0[c], &b.0[c]))
            .find(|order| order.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    }
}

fn compare_values(
    a: &super::sqlite_file::Value,
    b: &super::sqlite_file::Value,
) -> std::cmp::Ordering {
    use super::sqlite_file::Value::{Integer, Null, Text};
    match (a, b) {
        (Integer(x), Integer(y)) => x.cmp(y),
        (Text(x), Text(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Null, Null) => std::cmp::Ordering::Equal,
        (Null, _) => std::cmp::Ordering::Less,
        (_, Null) => std::cmp::Ordering::Greater,
        (Integer(_), _) => std::cmp::Ordering::Less,
        (_, Integer(_)) => std::cmp::Ordering::Greater,
        _ => std::cmp::Ordering::Equal,
    }
}

/// Cron jobs, paired devices and DM approvals from `state/openclaw.sqlite`.
pub fn import_shared(state: &Path, store: &Store, now_ms: u64, report: &mut Report) {
    let path = shared_database(state);
    if !path.exists() {
        return;
    }
    let label = path.display().to_string();
    let db = match SqliteFile::open(&path) {
        Ok(db) => db,
        Err(why) => return report.failed(&label, why.to_string()),
    };
    for (table, step) in [
        ("cron_jobs", shared_cron as SharedStep),
        ("device_pairing_paired", shared_devices),
        ("channel_pairing_allow_entries", shared_allow),
    ] {
        if !db.has_table(table) {
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

type SharedStep = fn(&SqliteFile, &str, &Store, u64, &mut Report) -> Result<(), String>;

fn json_column(text: Option<String>) -> Value {
    text.and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

fn shared_cron(
    db: &SqliteFile,
    label: &str,
    store: &Store,
    now_ms: u64,
    report: &mut Report,
) -> Result<(), String> {
    // ORDER BY sort_order, job_id
    let rows = sorted_rows(
        db,
        "cron_jobs",
        &["job_id", "job_json", "sort_order"],
        by_columns(&[2, 0]),
    )
    .map_err(|e| e.to_string())?;
    let mut jobs = Vec::new();
    for row in rows {
        let (id, text) = (row.required_text(0)?, row.required_text(1)?);
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

const DEVICE_COLUMNS: [&str; 16] = [
    "device_id",
    "public_key",
    "display_name",
    "platform",
    "device_family",
    "client_id",
    "client_mode",
    "role",
    "roles_json",
    "scopes_json",
    "approved_scopes_json",
    "remote_ip",
    "tokens_json",
    "created_at_ms",
    "approved_at_ms",
    "last_seen_at_ms",
];

fn shared_devices(
    db: &SqliteFile,
    label: &str,
    store: &Store,
    _now_ms: u64,
    report: &mut Report,
) -> Result<(), String> {
    // ORDER BY device_id
    let rows = sorted_rows(
        db,
        "device_pairing_paired",
        &DEVICE_COLUMNS,
        by_columns(&[0]),
    )
    .map_err(|e| e.to_string())?;
    let source = format!("{label} (device_pairing_paired)");
    for row in rows {
        let text = |i: usize| row.text(i);
        let device = json!({
            "publicKey": text(1)?, "displayName": text(2)?, "platform": text(3)?,
            "deviceFamily": text(4)?, "clientId": text(5)?, "clientMode": text(6)?, "role": text(7)?,
            "roles": json_column(text(8)?), "scopes": json_column(text(9)?),
            "approvedScopes": json_column(text(10)?), "remoteIp": text(11)?,
            "tokens": json_column(text(12)?),
            "createdAtMs": row.integer(13)?.ok_or("created_at_ms is NULL")?,
            "approvedAtMs": row.integer(14)?, "lastSeenAtMs": row.integer(15)?,
        });
        import_device(&row.required_text(0)?, &device, &source, store, report);
    }
    Ok(())
}

fn shared_allow(
    db: &SqliteFile,
    label: &str,
    store: &Store,
    now_ms: u64,
    report: &mut Report,
) -> Result<(), String> {
    // ORDER BY channel_key, account_id, sort_order, entry
    let rows = sorted_rows(
        db,
        "channel_pairing_allow_entries",
        &["channel_key", "account_id", "entry", "sort_order"],
        by_columns(&[0, 1, 3, 2]),
    )
    .map_err(|e| e.to_string())?;
    let source = format!("{label} (channel_pairing_allow_entries)");
    for row in rows {
        let (channel, account) = (row.required_text(0)?, row.required_text(1)?);
        let entry = row.required_text(2)?;
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

/// The agent databases the shared database lists, `(agent id, path)` in order.
fn listed_agent_databases(state: &Path) -> Vec<(String, PathBuf)> {
    let Ok(db) = SqliteFile::open(&shared_database(state)) else {
        return Vec::new();
    };
    if !db.has_table("agent_databases") {
        return Vec::new();
    }
    // ORDER BY agent_id, path
    let rows = sorted_rows(
        &db,
        "agent_databases",
        &["agent_id", "path"],
        by_columns(&[0, 1]),
    );
    let mut found = Vec::new();
    for row in rows.unwrap_or_default() {
        if let (Ok(agent), Ok(path)) = (row.required_text(0), row.required_text(1)) {
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
    found
}

/// Each agent's database: those the shared database lists, else `agents/*/agent/openclaw-agent.sqlite`.
fn agent_databases(state: &Path) -> Vec<(String, PathBuf)> {
    let mut found = listed_agent_databases(state);
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
        let db = match SqliteFile::open(&path) {
            Ok(db) => db,
            Err(why) => {
                report.failed(&label, why.to_string());
                continue;
            }
        };
        for table in ["session_nodes", "transcript_events"] {
            if !db.has_table(table) {
                report.failed(
                    &label,
                    format!("no table {table} (an OpenClaw schema pincer does not know)"),
                );
            }
        }
        if !db.has_table("session_nodes") {
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
    db: &SqliteFile,
    agent_id: &str,
    label: &str,
    importer: &mut SessionImporter,
    report: &mut Report,
) -> Result<(), String> {
    // ORDER BY session_key
    let rows = sorted_rows(
        db,
        "session_nodes",
        &["session_key", "current_session_id", "entry_json"],
        by_columns(&[0]),
    )
    .map_err(|e| e.to_string())?;
    let source = format!("{label} (session_nodes)");
    let with_events = db.has_table("transcript_events");
    for row in rows {
        let (key, session_id) = (row.required_text(0)?, row.required_text(1)?);
        let mut entry = match serde_json::from_str::<Value>(&row.required_text(2)?) {
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
    db: &'c SqliteFile,
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
        // WHERE session_id = ? ORDER BY seq
        self.db
            .for_each_row_where(
                "transcript_events",
                ("session_id", &self.session_id),
                "seq",
                &["event_json", "event_zstd"],
                &mut |row| match (row.text(0)?, row.blob(1)?) {
                    (Some(text), _) => import.push(Ok(text.as_bytes())),
                    (None, Some(packed)) => match unpack(packed) {
                        Ok(bytes) => import.push(Ok(&bytes)),
                        Err(why) => import.push(Err(why)),
                    },
                    (None, None) => import.push(Err("an event row without content".into())),
                },
            )
            .map_err(|e| format!("cannot read {}: {e}", self.label))
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
