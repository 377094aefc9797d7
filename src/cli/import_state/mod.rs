//! `pincer import-openclaw`: carries an OpenClaw state directory (`~/.openclaw`) over to pincer — the
//! config (through `config::import_openclaw`), sessions and their transcripts, cron jobs, paired
//! devices, DM pairing approvals and the workspace — and reports what it imported, what was already
//! there, and what it could not carry over and why.
//!
//! Running it again imports nothing twice: every record is keyed (session key, job id, device id,
//! channel/account/sender, workspace file path) and an existing key is left alone. A bad file or
//! record is reported by path and never stops the rest. It reads OpenClaw's JSON layout (2026.4 and
//! earlier) and the SQLite store of later releases (`sqlite.rs`, through the file reader in
//! `sqlite_file/`).

mod records;
mod sessions;
mod sqlite;
mod sqlite_file;
mod transcript;
mod workspace;

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config;
use crate::store::Store;
use crate::system::clock::now_ms;

/// Largest JSON state file read whole (`sessions.json`, `jobs.json`, …): 64 MiB.
pub const MAX_STATE_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// What to import and where.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    pub state_dir: PathBuf,
    pub data_dir: PathBuf,
    /// Where the imported config is written when no pincer config exists there yet.
    pub config_path: PathBuf,
    /// Point `agents.defaults.workspace` at OpenClaw's workspace instead of copying it.
    pub reference_workspace: bool,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Imported { what: String, note: String },
    Present { what: String },
    Failed { what: String, why: String },
}

/// Everything an import did, in order.
#[derive(Debug, Default)]
pub struct Report {
    pub outcomes: Vec<Outcome>,
}

impl Report {
    fn imported(&mut self, what: &str, note: String) {
        self.outcomes.push(Outcome::Imported {
            what: what.to_string(),
            note,
        });
    }

    fn present(&mut self, what: &str) {
        self.outcomes.push(Outcome::Present {
            what: what.to_string(),
        });
    }

    fn failed(&mut self, what: &str, why: String) {
        self.outcomes.push(Outcome::Failed {
            what: what.to_string(),
            why,
        });
    }

    /// The report as printed: one line per outcome, then the totals.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let (mut imported, mut present, mut failed) = (0, 0, 0);
        for outcome in &self.outcomes {
            match outcome {
                Outcome::Imported { what, note } if note.is_empty() => {
                    imported += 1;
                    out.push_str(&format!("imported: {what}\n"));
                }
                Outcome::Imported { what, note } => {
                    imported += 1;
                    out.push_str(&format!("imported: {what}: {note}\n"));
                }
                Outcome::Present { what } => {
                    present += 1;
                    out.push_str(&format!("already present: {what}\n"));
                }
                Outcome::Failed { what, why } => {
                    failed += 1;
                    out.push_str(&format!("not imported: {what}: {why}\n"));
                }
            }
        }
        out.push_str(&format!(
            "summary: {imported} imported, {present} already present, {failed} not imported\n"
        ));
        if imported == 0 {
            out.push_str("nothing new was imported\n");
        }
        out
    }
}

/// Runs the whole import. Fails only when the state directory or pincer's store cannot be opened.
pub fn import_state(options: &ImportOptions, store: &Store) -> Result<Report, String> {
    let state = &options.state_dir;
    if !state.is_dir() {
        return Err(format!(
            "{} is not a directory (give OpenClaw's state directory with --state-dir)",
            state.display()
        ));
    }
    let now = now_ms();
    let mut report = Report::default();
    let openclaw_config = read_openclaw_config(state, &mut report);
    let workspace_source = workspace::source(state, openclaw_config.as_ref());
    let pincer_config = import_config(
        options,
        openclaw_config.as_ref(),
        &workspace_source,
        &mut report,
    );
    match sessions::SessionImporter::new(store) {
        Ok(mut importer) => {
            sessions::import_sessions(state, &mut importer, &mut report);
            sqlite::import_agent_databases(state, &mut importer, &mut report);
        }
        Err(why) => report.failed("sessions", why),
    }
    let jobs = cron_store_path(state, openclaw_config.as_ref());
    records::import_cron(&jobs, store, now, &mut report);
    records::import_devices(state, store, &mut report);
    records::import_allow_from(state, store, now, &mut report);
    sqlite::import_shared(state, store, now, &mut report);
    workspace::import(
        options,
        &workspace_source,
        pincer_config.as_ref(),
        &mut report,
    );
    Ok(report)
}

/// Reads a JSON state file whole, up to `MAX_STATE_FILE_BYTES`; the error names what was wrong.
fn read_json(path: &Path) -> Result<Value, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut text = String::new();
    file.take(MAX_STATE_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read: {e}"))?;
    if text.len() as u64 > MAX_STATE_FILE_BYTES {
        return Err(format!("larger than {MAX_STATE_FILE_BYTES} bytes"));
    }
    serde_json::from_str(&text).map_err(|e| format!("not valid JSON: {e}"))
}

/// `<state>/openclaw.json` as JSON5 text and value; a missing file is no error, a bad one is reported.
fn read_openclaw_config(state: &Path, report: &mut Report) -> Option<(String, Value)> {
    let path = state.join("openclaw.json");
    let text = std::fs::read_to_string(&path).ok()?;
    match config::parse_json5(&text, &path.display().to_string()) {
        Ok(value) => Some((text, value)),
        Err(e) => {
            report.failed(&path.display().to_string(), e.to_string());
            None
        }
    }
}

/// Converts and writes the config unless pincer already has one at `config_path`. Returns the pincer
/// config now in force there (for the workspace's destination).
fn import_config(
    options: &ImportOptions,
    openclaw: Option<&(String, Value)>,
    workspace_source: &Option<PathBuf>,
    report: &mut Report,
) -> Option<config::Config> {
    let target = &options.config_path;
    let what = format!("config {}", target.display());
    if target.exists() {
        report.present(&what);
        return config::load(Some(target))
            .map_err(|e| report.failed(&what, e.to_string()))
            .ok()
            .map(|loaded| loaded.config);
    }
    let (text, _) = openclaw?;
    let imported = match config::import_openclaw(text) {
        Ok(imported) => imported,
        Err(e) => {
            report.failed(&what, e.to_string());
            return None;
        }
    };
    let mut value = imported.config_json;
    workspace::point_config(&mut value, options.reference_workspace, workspace_source);
    let parsed = match config::parse_value(value.clone(), "openclaw.json") {
        Ok(parsed) => parsed,
        Err(e) => {
            report.failed(&what, e.to_string());
            return None;
        }
    };
    let rendered = serde_json::to_string_pretty(&value).expect("a JSON value renders");
    if let Some(dir) = target.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = config::write_atomic(target, &rendered) {
        report.failed(&what, e.to_string());
        return None;
    }
    let note = if imported.skipped.is_empty() {
        String::new()
    } else {
        let keys: Vec<String> = imported
            .skipped
            .iter()
            .map(|(key, why)| format!("{key} ({why})"))
            .collect();
        format!("keys not carried over: {}", keys.join(", "))
    };
    report.imported(&what, note);
    Some(parsed)
}

/// OpenClaw's cron store: `cron.store` in its config, else `<state>/cron/jobs.json`.
fn cron_store_path(state: &Path, openclaw: Option<&(String, Value)>) -> PathBuf {
    openclaw
        .and_then(|(_, value)| value["cron"]["store"].as_str())
        .filter(|p| !p.trim().is_empty())
        .map(|p| workspace::expand_home(Path::new(p.trim())))
        .unwrap_or_else(|| state.join("cron").join("jobs.json"))
}
