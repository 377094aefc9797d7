//! Compaction: when a session's history outgrows its context window (or on
//! `/compact`), older transcript entries are summarised by the model in
//! adaptive chunks and the summary is persisted as one transcript entry; the
//! next prompt starts from that summary plus the recent entries it kept, and
//! re-injects AGENTS.md's "Session Startup" and "Red Lines" sections.
//!
//! The transcript is only ever appended to: older entries stay for
//! `chat.history`, the summary entry marks where the prompt starts. This file
//! calls the model only to summarise and never runs tools. The summary is
//! written by `compaction.model` when one is set (else the run's model), and
//! each summary request gets `compaction.timeoutSeconds` (180 s, upstream's
//! window) before it is abandoned.

use std::path::Path;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::store::{Store, StoreError, TranscriptEntry};

use super::context::{cut_at, ContextWindow, CHARS_PER_TOKEN};
use super::prompt::read_capped;
use super::providers::models::ResolvedModel;
use super::providers::{ChatMessage, ProviderError, ProviderRequest};

/// Newest transcript entries looked at for the prompt and for compaction.
pub const MAX_HISTORY_SCAN_ENTRIES: usize = 200;
/// Chunk share of the window for summarisation when messages are small.
pub const BASE_CHUNK_RATIO: f64 = 0.4;
/// Smallest chunk share, for histories of large messages.
pub const MIN_CHUNK_RATIO: f64 = 0.15;
/// Token estimates are inflated by this factor before sizing chunks.
pub const SAFETY_MARGIN: f64 = 1.2;
/// Default tokens kept free for the reply (OpenClaw's reserve floor).
pub const DEFAULT_RESERVE_TOKENS: u32 = 20_000;
/// Default tokens of recent history kept verbatim.
pub const DEFAULT_KEEP_RECENT_TOKENS: u32 = 20_000;
/// Longest AGENTS.md read for the post-compaction refresh.
pub const MAX_AGENTS_FILE_BYTES: usize = 64 * 1024;
/// Longest post-compaction refresh text.
pub const MAX_REFRESH_CHARS: usize = 3_000;
/// Longest summary kept.
pub const MAX_SUMMARY_CHARS: usize = 16_000;
/// Time one summary request may take unless `compaction.timeoutSeconds` says otherwise (upstream's).
pub const DEFAULT_SUMMARY_TIMEOUT_SECS: u32 = 180;
/// The `extra_json.type` of a summary entry.
pub const COMPACTION_ENTRY_TYPE: &str = "compaction";
/// AGENTS.md sections re-injected after a compaction.
pub const REFRESH_SECTIONS: [&str; 2] = ["Session Startup", "Red Lines"];

const SUMMARY_INSTRUCTIONS: &str = "You compact conversations. Write a concise summary of the conversation you are given so the assistant can continue it without the original: the user's goals and preferences, decisions made, facts learned, files and commands touched, open tasks and the next step. Keep names, numbers and paths exact. Answer with the summary only.";

/// Why a compaction was run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionReason {
    /// The prompt passed the configured target.
    Auto,
    /// The provider refused the prompt as too long.
    Overflow,
    /// `/compact` or `sessions.compact`.
    Manual,
}

impl CompactionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionReason::Auto => "auto",
            CompactionReason::Overflow => "overflow",
            CompactionReason::Manual => "manual",
        }
    }
}

/// Why a compaction did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    #[error("session store: {0}")]
    Store(#[from] StoreError),
    #[error("nothing to compact: the history is already short")]
    NothingToCompact,
    #[error("the summary call failed: {0}")]
    Provider(#[from] ProviderError),
    #[error("the model returned an empty summary")]
    EmptySummary,
    #[error("the summary call took longer than {0} s (agents.defaults.compaction.timeoutSeconds)")]
    TimedOut(u32),
}

/// Target and reserve, clamped to the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionSettings {
    pub reserve_tokens: u32,
    pub keep_recent_tokens: u32,
    /// Seconds one summary request may take.
    pub timeout_secs: u32,
}

impl CompactionSettings {
    /// `agents.defaults.compaction` for this window.
    pub fn for_window(config: &Config, window: ContextWindow) -> CompactionSettings {
        let c = config.agents.defaults.compaction.as_ref();
        let floor = c
            .and_then(|c| c.reserve_tokens_floor)
            .unwrap_or(DEFAULT_RESERVE_TOKENS);
        let reserve = c.and_then(|c| c.reserve_tokens).unwrap_or(0).max(floor);
        let keep = c
            .and_then(|c| c.keep_recent_tokens)
            .unwrap_or(DEFAULT_KEEP_RECENT_TOKENS);
        CompactionSettings {
            reserve_tokens: reserve.min(window.tokens / 2),
            keep_recent_tokens: keep.min(window.tokens / 4),
            timeout_secs: c
                .and_then(|c| c.timeout_seconds)
                .unwrap_or(DEFAULT_SUMMARY_TIMEOUT_SECS)
                .max(1),
        }
    }

    /// Whether a prompt of `tokens` passes the target (window − reserve).
    pub fn needs_compaction(&self, tokens: usize, window: ContextWindow) -> bool {
        tokens > window.tokens.saturating_sub(self.reserve_tokens) as usize
    }
}

/// The session's prompt history: the latest summary and the entries after it.
#[derive(Debug, Clone, Default)]
pub struct StoredHistory {
    pub summary: Option<String>,
    /// Entries the prompt may use, oldest first, with their sequence numbers.
    pub entries: Vec<(u64, TranscriptEntry)>,
}

fn extra_of(entry: &TranscriptEntry) -> Value {
    entry
        .extra_json
        .as_deref()
        .and_then(|e| serde_json::from_str(e).ok())
        .unwrap_or_default()
}

/// Whether an entry is a compaction summary.
pub fn is_summary(entry: &TranscriptEntry) -> bool {
    entry.role == "system" && extra_of(entry)["type"] == COMPACTION_ENTRY_TYPE
}

/// Loads the newest entries and cuts them at the latest summary.
pub fn load_history(store: &Store, session_id: &str) -> Result<StoredHistory, StoreError> {
    let tail = store.transcript_tail(session_id, MAX_HISTORY_SCAN_ENTRIES)?;
    let latest = tail.iter().rposition(|(_, e)| is_summary(e));
    let Some(index) = latest else {
        return Ok(StoredHistory {
            summary: None,
            entries: tail,
        });
    };
    let first_kept = extra_of(&tail[index].1)["firstKeptSeq"]
        .as_u64()
        .unwrap_or(u64::MAX);
    let summary = Some(tail[index].1.text.clone());
    let entries = tail
        .into_iter()
        .filter(|(seq, e)| *seq >= first_kept && !is_summary(e))
        .collect();
    Ok(StoredHistory { summary, entries })
}

/// The chunk share of the window for these messages: smaller when the
/// average message is a large part of the window.
pub fn adaptive_chunk_ratio(message_tokens: &[usize], window: ContextWindow) -> f64 {
    if message_tokens.is_empty() || window.tokens == 0 {
        return BASE_CHUNK_RATIO;
    }
    let total: usize = message_tokens.iter().sum();
    let average = total as f64 / message_tokens.len() as f64 * SAFETY_MARGIN;
    let share = average / f64::from(window.tokens);
    if share > 0.1 {
        let reduction = (share * 2.0).min(BASE_CHUNK_RATIO - MIN_CHUNK_RATIO);
        (BASE_CHUNK_RATIO - reduction).max(MIN_CHUNK_RATIO)
    } else {
        BASE_CHUNK_RATIO
    }
}

/// Splits lines into chunks of at most `max_tokens` (a longer line is cut).
pub fn chunk_lines(lines: Vec<String>, max_tokens: usize) -> Vec<String> {
    let max_chars = (max_tokens * CHARS_PER_TOKEN).max(CHARS_PER_TOKEN);
    let mut chunks = Vec::new();
    let mut current = String::new();
    for line in lines {
        let line = cut_at(&line, max_chars).to_string();
        if !current.is_empty() && current.len() + line.len() + 1 > max_chars {
            chunks.push(std::mem::take(&mut current));
        }
        current.push_str(&line);
        current.push('\n');
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// One transcript entry as a line of the text to summarise.
fn entry_line(entry: &TranscriptEntry) -> String {
    let extra = extra_of(entry);
    match entry.role.as_str() {
        "user" => format!("User: {}", entry.text),
        "tool" => format!(
            "Tool result ({}): {}",
            extra["name"].as_str().unwrap_or("tool"),
            entry.text
        ),
        "assistant" => {
            let mut line = format!("Assistant: {}", entry.text);
            for call in extra["toolCalls"].as_array().into_iter().flatten() {
                line.push_str(&format!(
                    " [called {}({})]",
                    call["name"].as_str().unwrap_or_default(),
                    call["arguments"].as_str().unwrap_or_default()
                ));
            }
            line
        }
        other => format!("{other}: {}", entry.text),
    }
}

/// Index in `entries` where the kept (verbatim) part starts: the newest
/// entries within `keep_tokens`, moved forward to a user message so no tool
/// round is split. `entries.len()` when nothing older can be summarised.
pub fn kept_from(entries: &[(u64, TranscriptEntry)], keep_tokens: usize, force: bool) -> usize {
    let user_starts: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].1.role == "user")
        .collect();
    let mut used = 0;
    let mut cut = entries.len();
    for (i, (_, e)) in entries.iter().enumerate().rev() {
        used += (e.text.len() + e.extra_json.as_ref().map_or(0, String::len)) / CHARS_PER_TOKEN;
        if used > keep_tokens {
            break;
        }
        cut = i;
    }
    let mut start = user_starts
        .iter()
        .copied()
        .find(|&i| i >= cut)
        .unwrap_or(entries.len());
    if (start == 0 || start == entries.len()) && force {
        // Keep only the last user turn; summarise the rest.
        start = user_starts.last().copied().unwrap_or(0);
    }
    start
}

/// What a compaction produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionOutcome {
    pub summary: String,
    pub first_kept_seq: u64,
    pub tokens_before: usize,
    pub summarized_entries: usize,
}

/// Everything one compaction needs.
pub struct CompactionJob<'a> {
    pub store: &'a Store,
    pub session_key: &'a str,
    pub session_id: &'a str,
    pub model: &'a ResolvedModel,
    pub window: ContextWindow,
    pub settings: CompactionSettings,
    pub reason: CompactionReason,
    pub custom_instructions: Option<&'a str>,
    pub cancel: &'a CancellationToken,
}

/// The model that writes summaries: `compaction.model` when set (a `provider/model` reference, no
/// thinking: a summary needs none), else `None` (the caller's own model). A reference that does not
/// resolve is an error, never a silent fallback to another model.
pub fn summary_model(
    config: &Config,
    http: &reqwest::Client,
) -> Option<Result<ResolvedModel, super::providers::models::ModelError>> {
    let reference = config
        .agents
        .defaults
        .compaction
        .as_ref()
        .and_then(|c| c.model.as_deref())
        .map(str::trim)
        .filter(|r| !r.is_empty())?;
    Some(
        super::providers::models::resolve(config, reference, http)
            .map(|model| model.with_profile(0, super::failover::ThinkingLevel::Off)),
    )
}

/// Summarises the session's older history and persists the summary entry.
pub async fn compact(job: CompactionJob<'_>) -> Result<CompactionOutcome, CompactionError> {
    let history = tokio::task::block_in_place(|| load_history(job.store, job.session_id))?;
    let force = job.reason != CompactionReason::Auto;
    let start = kept_from(
        &history.entries,
        job.settings.keep_recent_tokens as usize,
        force,
    );
    if start == 0 || history.entries.is_empty() {
        return Err(CompactionError::NothingToCompact);
    }
    let older = &history.entries[..start];
    let first_kept_seq = history
        .entries
        .get(start)
        .map_or_else(|| older.last().map_or(0, |(s, _)| s + 1), |(s, _)| *s);
    let lines: Vec<String> = older.iter().map(|(_, e)| entry_line(e)).collect();
    let tokens_before = history
        .entries
        .iter()
        .map(|(_, e)| e.text.len() / CHARS_PER_TOKEN)
        .sum::<usize>()
        + history
            .summary
            .as_ref()
            .map_or(0, |s| s.len() / CHARS_PER_TOKEN);
    let sizes: Vec<usize> = lines.iter().map(|l| l.len() / CHARS_PER_TOKEN).collect();
    let ratio = adaptive_chunk_ratio(&sizes, job.window);
    let max_chunk_tokens = (f64::from(job.window.tokens) * ratio / SAFETY_MARGIN) as usize;
    let mut summary = history.summary.clone();
    for chunk in chunk_lines(lines, max_chunk_tokens) {
        let text = summarise_chunk(&job, summary.as_deref(), &chunk).await?;
        summary = Some(text);
    }
    let summary = summary
        .filter(|s| !s.trim().is_empty())
        .ok_or(CompactionError::EmptySummary)?;
    persist(&job, &summary, first_kept_seq, tokens_before)?;
    Ok(CompactionOutcome {
        summary,
        first_kept_seq,
        tokens_before,
        summarized_entries: start,
    })
}

async fn summarise_chunk(
    job: &CompactionJob<'_>,
    previous: Option<&str>,
    chunk: &str,
) -> Result<String, CompactionError> {
    let mut instructions = SUMMARY_INSTRUCTIONS.to_string();
    if let Some(custom) = job.custom_instructions.filter(|c| !c.trim().is_empty()) {
        instructions.push_str("\nAlso: ");
        instructions.push_str(custom.trim());
    }
    let mut request_text = String::new();
    if let Some(previous) = previous {
        request_text.push_str("Summary so far (merge it into your new summary):\n");
        request_text.push_str(previous);
        request_text.push_str("\n\n");
    }
    request_text.push_str("Conversation to summarise:\n<conversation>\n");
    request_text.push_str(chunk);
    request_text.push_str("</conversation>");
    let request = ProviderRequest {
        model: job.model.model_id.clone(),
        messages: vec![
            ChatMessage::system(instructions),
            ChatMessage::user(request_text),
        ],
        max_tokens: job.model.max_tokens,
        tools: Vec::new().into(),
    };
    let (events, mut deltas) = mpsc::channel(64);
    let call = job
        .model
        .provider
        .stream(request, events, job.cancel.child_token());
    tokio::pin!(call);
    let limit = job.settings.timeout_secs;
    let deadline = tokio::time::sleep(std::time::Duration::from_secs(u64::from(limit)));
    tokio::pin!(deadline);
    let completion = loop {
        tokio::select! {
            Some(_) = deltas.recv() => {}
            result = &mut call => break result?,
            () = &mut deadline => return Err(CompactionError::TimedOut(limit)),
        }
    };
    Ok(cut_at(completion.text.trim(), MAX_SUMMARY_CHARS).to_string())
}

fn persist(
    job: &CompactionJob<'_>,
    summary: &str,
    first_kept_seq: u64,
    tokens_before: usize,
) -> Result<(), StoreError> {
    let entry = TranscriptEntry {
        role: "system".into(),
        text: summary.to_string(),
        timestamp_ms: crate::system::clock::now_ms(),
        run_id: None,
        stop_reason: None,
        input_tokens: None,
        output_tokens: None,
        extra_json: Some(
            json!({
                "type": COMPACTION_ENTRY_TYPE,
                "firstKeptSeq": first_kept_seq,
                "tokensBefore": tokens_before,
                "reason": job.reason.as_str(),
            })
            .to_string(),
        ),
    };
    tokio::task::block_in_place(|| {
        job.store.append_transcript(job.session_id, &entry)?;
        super::sessions::SessionIndex::new(job.store.clone())
            .count_compaction(job.session_key, job.session_id)
    })
}

/// The "Session Startup" and "Red Lines" sections of the workspace's
/// AGENTS.md, as the refresh text injected after a compaction.
pub fn post_compaction_refresh(workspace: &Path) -> Option<String> {
    let (text, _) = read_capped(&workspace.join("AGENTS.md"), MAX_AGENTS_FILE_BYTES)?;
    let sections: Vec<String> = REFRESH_SECTIONS
        .iter()
        .filter_map(|title| markdown_section(&text, title))
        .collect();
    if sections.is_empty() {
        return None;
    }
    let body = format!(
        "[Post-compaction context refresh] The conversation was compacted. Re-read these rules from AGENTS.md:\n\n{}",
        sections.join("\n\n")
    );
    Some(cut_at(&body, MAX_REFRESH_CHARS).to_string())
}

/// A `## title` (or `### title`) section up to the next heading of the same
/// or a higher level.
fn markdown_section(text: &str, title: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    let mut level = 0;
    for line in text.lines() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        let is_heading = hashes > 0 && line[hashes..].starts_with(' ');
        if level > 0 {
            if is_heading && hashes <= level {
                break;
            }
            out.push(line);
        } else if is_heading && (2..=3).contains(&hashes) && line[hashes..].trim() == title {
            level = hashes;
            out.push(line);
        }
    }
    (!out.is_empty()).then(|| out.join("\n").trim_end().to_string())
}

/// Whether a provider's error text says the prompt exceeded the window.
pub fn is_context_overflow_message(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    [
        "context length",
        "maximum context",
        "context_length_exceeded",
        "context window",
        "prompt is too long",
    ]
    .iter()
    .any(|needle| lower.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(role: &str, text: &str) -> (u64, TranscriptEntry) {
        (
            0,
            TranscriptEntry {
                role: role.into(),
                text: text.into(),
                ..TranscriptEntry::default()
            },
        )
    }

    #[test]
    fn chunk_ratio_shrinks_for_large_messages() {
        let window = ContextWindow {
            tokens: 100_000,
            source: super::super::context::WindowSource::Default,
        };
        assert_eq!(adaptive_chunk_ratio(&[100, 200], window), BASE_CHUNK_RATIO);
        let big = adaptive_chunk_ratio(&[10_000, 10_000], window);
        assert!((big - 0.16).abs() < 1e-9, "{big}");
        let huge = adaptive_chunk_ratio(&[90_000], window);
        assert!((huge - MIN_CHUNK_RATIO).abs() < 1e-9, "{huge}");
    }

    #[test]
    fn chunks_stay_under_their_size() {
        let lines = (0..50)
            .map(|i| format!("line {i} {}", "w".repeat(90)))
            .collect();
        let chunks = chunk_lines(lines, 250);
        assert!(chunks.len() > 1);
        assert!(chunks.iter().all(|c| c.len() <= 1_000));
    }

    #[test]
    fn the_kept_part_starts_at_a_user_message() {
        let entries = vec![
            entry("user", &"a".repeat(4_000)),
            entry("assistant", &"b".repeat(4_000)),
            entry("user", &"c".repeat(400)),
            entry("assistant", ""),
            entry("tool", &"d".repeat(400)),
            entry("assistant", "done"),
        ];
        assert_eq!(kept_from(&entries, 500, false), 2);
        assert_eq!(kept_from(&entries, 10_000, false), 0);
        assert_eq!(kept_from(&entries, 10_000, true), 2);
    }

    #[test]
    fn refresh_takes_only_the_named_sections() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("AGENTS.md"),
            "# Agent\n## Session Startup\nRead USER.md first.\n### Detail\nstill in\n## Other\nnot this\n## Red Lines\nNever delete backups.\n",
        )
        .expect("write");
        let refresh = post_compaction_refresh(dir.path()).expect("sections");
        assert!(refresh.contains("Read USER.md first."));
        assert!(refresh.contains("still in"));
        assert!(refresh.contains("Never delete backups."));
        assert!(!refresh.contains("not this"));
    }

    #[test]
    fn overflow_messages_are_recognised() {
        assert!(is_context_overflow_message(
            "fake/gpt: provider answered HTTP 400: This model's maximum context length is 8192 tokens"
        ));
        assert!(!is_context_overflow_message("HTTP 429: rate limit"));
    }
}
