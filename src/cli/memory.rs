//! `pincer memory index [--force] | status | search <query>`: the memory index of one agent, run locally
//! against the data directory's store (LMDB allows it beside a running gateway).
//!
//! Printing only: discovery, indexing and search are `crate::memory`'s. Indexing reports progress on
//! stderr: on a terminal a bar redrawn in place once it has run for more than `PROGRESS_AFTER_MS`;
//! otherwise (a pipe, a log file) plain lines, one per tenth of the files, so a log stays short.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};

use crate::config::LoadedConfig;
use crate::gateway::state::store_dir;
use crate::memory::{registry, SyncProgress};
use crate::store::{Store, StoreOptions};

/// Indexing shorter than this prints no progress line.
const PROGRESS_AFTER_MS: u64 = 700;
/// Width of the progress bar, in characters.
const PROGRESS_BAR_CHARS: u64 = 30;

#[derive(Debug, Args, Clone)]
pub struct AgentArg {
    /// Agent whose memory to use (default: the default agent).
    #[arg(long, value_name = "ID")]
    pub agent: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Bring the index in line with the memory files (`--force`: re-index every file).
    Index {
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Files, chunks, model, last sync and disk use.
    Status {
        #[command(flatten)]
        agent: AgentArg,
    },
    /// Search the memory (hybrid: vector + keyword; keyword-only without a model).
    Search {
        query: String,
        /// Most results (default memorySearch.query.maxResults, 6).
        #[arg(long)]
        max_results: Option<usize>,
        /// Lowest score shown, 0..1 (default memorySearch.query.minScore, 0.35).
        #[arg(long)]
        min_score: Option<f32>,
        #[command(flatten)]
        agent: AgentArg,
    },
}

fn open_service(
    loaded: &LoadedConfig,
    data_dir: &std::path::Path,
    agent: &AgentArg,
) -> Result<std::sync::Arc<crate::memory::MemoryService>, String> {
    let config = &loaded.config;
    let agent_id = agent
        .agent
        .clone()
        .unwrap_or_else(|| config.agents.default_agent_id());
    let store = Store::open(&store_dir(data_dir), StoreOptions::default())
        .map_err(|e| format!("store: {e}"))?;
    Ok(registry::open_service(&store, config, &agent_id, data_dir))
}

/// Steps of plain progress lines: one line per this fraction of the files (and the last).
const PROGRESS_LINE_STEPS: u64 = 10;

/// The plain line for `p` when it starts a new step after `last_step`, and that step.
fn progress_line(p: SyncProgress, last_step: Option<u64>) -> Option<(String, u64)> {
    let step = p.files_done * PROGRESS_LINE_STEPS / p.files_total.max(1);
    if last_step == Some(step) {
        return None;
    }
    let line = format!(
        "indexing: {}/{} files, {} chunks",
        p.files_done, p.files_total, p.chunks_written
    );
    Some((line, step))
}

fn progress_printer(terminal: bool) -> impl FnMut(SyncProgress) {
    let started = Instant::now();
    let mut last_step = None;
    move |p: SyncProgress| {
        if !terminal {
            if let Some((line, step)) = progress_line(p, last_step) {
                last_step = Some(step);
                eprintln!("{line}");
            }
            return;
        }
        if started.elapsed() < Duration::from_millis(PROGRESS_AFTER_MS) {
            return;
        }
        let filled = p.files_done * PROGRESS_BAR_CHARS / p.files_total.max(1);
        let bar: String = (0..PROGRESS_BAR_CHARS)
            .map(|i| if i < filled { '#' } else { '-' })
            .collect();
        eprint!(
            "\r[{bar}] {}/{} files, {} chunks",
            p.files_done, p.files_total, p.chunks_written
        );
        let _ = std::io::stderr().flush();
    }
}

fn print(json: bool, value: &serde_json::Value, text: String) {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    } else {
        println!("{text}");
    }
}

/// Runs one `pincer memory …` command.
pub fn run(
    loaded: &LoadedConfig,
    data_dir: &std::path::Path,
    command: MemoryCommand,
) -> Result<(), String> {
    match command {
        MemoryCommand::Index { force, agent } => index(loaded, data_dir, force, &agent),
        MemoryCommand::Status { agent } => status(loaded, data_dir, &agent),
        MemoryCommand::Search {
            query,
            max_results,
            min_score,
            agent,
        } => search(loaded, data_dir, &query, max_results, min_score, &agent),
    }
}

fn index(
    loaded: &LoadedConfig,
    data_dir: &std::path::Path,
    force: bool,
    agent: &AgentArg,
) -> Result<(), String> {
    let service = open_service(loaded, data_dir, agent)?;
    let started = Instant::now();
    let terminal = std::io::stderr().is_terminal();
    let mut progress = progress_printer(terminal);
    let report = service
        .sync(force, &mut progress)
        .map_err(|e| e.to_string())?;
    if terminal && started.elapsed() >= Duration::from_millis(PROGRESS_AFTER_MS) {
        eprintln!();
    }
    let value = serde_json::to_value(&report).unwrap_or_default();
    let text = format!(
                "indexed {} of {} files ({} unchanged, {} removed): {} chunks written, {} embedded, {} from cache{} in {:.1} s",
                report.files_indexed,
                report.files_seen,
                report.files_unchanged,
                report.files_removed,
                report.chunks_written,
                report.chunks_embedded,
                report.cache_hits,
                if report.keyword_only { " (keyword-only: no embedding model)" } else { "" },
                started.elapsed().as_secs_f64()
            );
    print(agent.json, &value, text);
    Ok(())
}

fn status(
    loaded: &LoadedConfig,
    data_dir: &std::path::Path,
    agent: &AgentArg,
) -> Result<(), String> {
    let service = open_service(loaded, data_dir, agent)?;
    let status = service.status().map_err(|e| e.to_string())?;
    let value = serde_json::to_value(&status).unwrap_or_default();
    let mut text = format!(
                "agent {}: {} files, {} chunks, {} vectors\nworkspace: {}\nmodel: {}\nchunks: {} tokens, {} overlap\nembedding cache: {} entries\nstore file: {} bytes",
                status.agent_id,
                status.files,
                status.chunks,
                status.vectors,
                status.workspace,
                status.model.as_deref().unwrap_or("none (keyword-only search)"),
                status.chunk_tokens,
                status.chunk_overlap_tokens,
                status.embed_cache_entries,
                status.store_file_bytes
            );
    if let Some(reason) = &status.keyword_only_reason {
        text.push_str(&format!("\nkeyword-only: {reason}"));
    }
    if let Some(note) = &status.chunk_tokens_note {
        text.push_str(&format!("\nnote: {note}"));
    }
    print(agent.json, &value, text);
    Ok(())
}

fn search(
    loaded: &LoadedConfig,
    data_dir: &std::path::Path,
    query: &str,
    max_results: Option<usize>,
    min_score: Option<f32>,
    agent: &AgentArg,
) -> Result<(), String> {
    let service = open_service(loaded, data_dir, agent)?;
    let args = serde_json::json!({
        "query": query, "maxResults": max_results, "minScore": min_score,
    });
    let value = crate::memory::tools::search(&service, &args).map_err(|e| e.to_string())?;
    let mut text = String::new();
    if let Some(reason) = value.get("fallbackReason").and_then(|r| r.as_str()) {
        text.push_str(&format!("(keyword-only: {reason})\n"));
    }
    for hit in value["results"].as_array().into_iter().flatten() {
        text.push_str(&format!(
            "{:.3}  {}:{}-{}\n    {}\n",
            hit["score"].as_f64().unwrap_or(0.0),
            hit["path"].as_str().unwrap_or(""),
            hit["startLine"],
            hit["endLine"],
            hit["snippet"].as_str().unwrap_or("").replace('\n', " ")
        ));
    }
    if text.is_empty() {
        text.push_str("no results");
    }
    print(agent.json, &value, text.trim_end().to_string());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_progress_prints_one_line_per_tenth_and_the_last() {
        let mut last = None;
        let mut lines = Vec::new();
        for done in 1..=1_000 {
            let p = SyncProgress {
                files_done: done,
                files_total: 1_000,
                chunks_written: done * 2,
            };
            if let Some((line, step)) = progress_line(p, last) {
                last = Some(step);
                lines.push(line);
            }
        }
        assert_eq!(lines.len(), PROGRESS_LINE_STEPS as usize + 1, "{lines:?}");
        assert_eq!(lines[0], "indexing: 1/1000 files, 2 chunks");
        assert_eq!(
            lines.last().map(String::as_str),
            Some("indexing: 1000/1000 files, 2000 chunks")
        );
    }
}
