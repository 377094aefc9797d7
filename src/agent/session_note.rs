//! The session flush: when `/new` (or `sessions.reset`) closes a session, its last user/assistant messages are
//! saved as a dated memory note, as upstream's bundled `session-memory` hook does:
//!
//! - the last 15 user/assistant messages with text, commands (`/…`) left out, each as `role: text`;
//! - the file is `memory/YYYY-MM-DD-<slug>.md` (UTC date), the slug a short name the model gives the
//!   conversation (lower-case `a-z0-9-`, at most 30 characters), else the UTC time `HHMM`; a session key
//!   ending in `:topic:<id>` or `:thread:<id>` saves to `memory/topics/topic-<id>/YYYY-MM-DD-HHMM.md`;
//! - the note is a `# Session: YYYY-MM-DD HH:MM:SS UTC` heading, the session key, id and source, then a
//!   `## Conversation Summary` section with the messages.
//!
//! Unlike upstream, an existing note is never overwritten: a second flush with the same name gets `-2`, `-3`….
//! This file writes notes only; the model call for the slug is `slug_for`, and the watcher indexes the note.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::providers::models::ResolvedModel;
use crate::agent::providers::{ChatMessage, ProviderRequest};
use crate::memory::registry::MemoryServices;
use crate::memory::MemoryError;
use crate::store::{SessionEntry, Store, StoreError};

use super::runtime::AgentRuntime;

/// User/assistant messages saved from the closing session (upstream's default).
pub const DEFAULT_SESSION_MESSAGES: usize = 15;
/// Transcript entries looked at to find those messages (tool rounds and system entries are skipped).
pub const MAX_SCANNED_ENTRIES: usize = 200;
/// Longest slug kept, in characters.
pub const MAX_SLUG_CHARS: usize = 30;
/// Conversation text shown to the model for the slug, in characters.
pub const SLUG_CONTEXT_CHARS: usize = 2_000;
/// How long the slug call may take before the timestamp slug is used.
pub const SLUG_TIMEOUT: Duration = Duration::from_secs(15);
/// Most attempts at a free file name before giving up.
const MAX_NAME_ATTEMPTS: usize = 100;

/// The session being closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClosingSession {
    pub session_key: String,
    pub session_id: String,
    /// Where the `/new` came from (channel), `unknown` when not known.
    pub source: Option<String>,
    /// When it was closed, ms since the epoch (names and dates the note, UTC).
    pub closed_at_ms: u64,
}

/// The last `count` user/assistant messages with text of `session_id`, oldest first, as `role: text`;
/// commands (text starting with `/`) are left out.
pub fn recent_conversation(
    store: &Store,
    session_id: &str,
    count: usize,
) -> Result<Vec<String>, StoreError> {
    let tail = store.transcript_tail(session_id, MAX_SCANNED_ENTRIES)?;
    let mut lines: Vec<String> = tail
        .into_iter()
        .filter(|(_, e)| e.role == "user" || e.role == "assistant")
        .filter(|(_, e)| !e.text.trim().is_empty() && !e.text.starts_with('/'))
        .map(|(_, e)| format!("{}: {}", e.role, e.text.trim()))
        .collect();
    let skip = lines.len().saturating_sub(count);
    lines.drain(..skip);
    Ok(lines)
}

/// The model's answer cut down to a file-name slug: lower-case, every other character a hyphen, hyphens
/// collapsed and trimmed, at most `MAX_SLUG_CHARS`. None when nothing is left.
pub fn clean_slug(answer: &str) -> Option<String> {
    let mut slug = String::new();
    for c in answer.trim().to_lowercase().chars() {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if !(c == '-' && (slug.is_empty() || slug.ends_with('-'))) {
            slug.push(c);
        }
    }
    let slug: String = slug.chars().take(MAX_SLUG_CHARS).collect();
    let slug = slug.trim_matches('-');
    (!slug.is_empty()).then(|| slug.to_string())
}

fn utc(at_ms: u64, format: &str) -> String {
    let at = i64::try_from(at_ms).unwrap_or(i64::MAX);
    jiff::Timestamp::from_millisecond(at)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime(format)
        .to_string()
}

/// The timestamp slug used when the model gives none: the UTC time as `HHMM`.
pub fn fallback_slug(at_ms: u64) -> String {
    utc(at_ms, "%H%M")
}

/// The topic or thread id at the end of a session key (`…:topic:<id>` / `…:thread:<id>`).
pub fn topic_of(session_key: &str) -> Option<&str> {
    let mut parts = session_key.rsplitn(3, ':');
    let id = parts.next()?;
    let kind = parts.next()?;
    let safe = !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    ((kind == "topic" || kind == "thread") && safe).then_some(id)
}

/// The note's markdown.
pub fn summary_markdown(session: &ClosingSession, conversation: &[String]) -> String {
    let mut text = format!(
        "# Session: {} UTC\n\n- **Session Key**: {}\n- **Session ID**: {}\n- **Source**: {}\n",
        utc(session.closed_at_ms, "%Y-%m-%d %H:%M:%S"),
        session.session_key,
        if session.session_id.is_empty() {
            "unknown"
        } else {
            &session.session_id
        },
        session.source.as_deref().unwrap_or("unknown"),
    );
    if !conversation.is_empty() {
        text.push_str("\n## Conversation Summary\n\n");
        text.push_str(&conversation.join("\n"));
        text.push('\n');
    }
    text
}

/// Where the note goes, relative to the workspace (before collision suffixes).
pub fn note_path(session: &ClosingSession, slug: Option<&str>) -> PathBuf {
    let date = utc(session.closed_at_ms, "%Y-%m-%d");
    let time = fallback_slug(session.closed_at_ms);
    match topic_of(&session.session_key) {
        Some(topic) => Path::new("memory/topics")
            .join(format!("topic-{topic}"))
            .join(format!("{date}-{time}.md")),
        None => {
            let slug = slug.and_then(clean_slug).unwrap_or(time);
            Path::new("memory").join(format!("{date}-{slug}.md"))
        }
    }
}

/// Writes the closing session's note under `workspace` (creating `memory/`), never over an existing file;
/// returns the path written.
pub fn save_session_summary(
    workspace: &Path,
    session: &ClosingSession,
    conversation: &[String],
    slug: Option<&str>,
) -> Result<PathBuf, MemoryError> {
    let relative = note_path(session, slug);
    let base = workspace.join(&relative);
    let dir = base.parent().unwrap_or(workspace).to_path_buf();
    let io_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| MemoryError::Io { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
    let stem = base
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let text = summary_markdown(session, conversation);
    for attempt in 1..=MAX_NAME_ATTEMPTS {
        let path = if attempt == 1 {
            base.clone()
        } else {
            dir.join(format!("{stem}-{attempt}.md"))
        };
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut file) => {
                file.write_all(text.as_bytes()).map_err(io_error(&path))?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_error(&path)(e)),
        }
    }
    Err(MemoryError::Invalid(format!(
        "no free name for the session note near {}",
        base.display()
    )))
}

/// The request asking the model for a slug.
pub fn slug_prompt(conversation: &[String]) -> String {
    let joined = conversation.join("\n");
    let shown: String = joined.chars().take(SLUG_CONTEXT_CHARS).collect();
    format!(
        "Name this conversation for a file name: one or two words, lower-case, joined by hyphens, no \
         extension.\n\nConversation:\n{shown}\n\nAnswer with the name only, for example \"trip-planning\" or \
         \"tax-return\"."
    )
}

/// Asks `model` for the conversation's slug; None on failure, an unusable answer or after `SLUG_TIMEOUT`.
pub async fn slug_for(model: &ResolvedModel, conversation: &[String]) -> Option<String> {
    if conversation.is_empty() {
        return None;
    }
    let request = ProviderRequest {
        model: model.model_id.clone(),
        messages: vec![ChatMessage::user(slug_prompt(conversation))],
        max_tokens: Some(32),
        tools: Vec::new().into(),
    };
    let (events, mut deltas) = mpsc::channel(16);
    let cancel = CancellationToken::new();
    let call = model.provider.stream(request, events, cancel.clone());
    let drained = async {
        tokio::pin!(call);
        loop {
            tokio::select! {
                Some(_) = deltas.recv() => {}
                result = &mut call => break result,
            }
        }
    };
    match tokio::time::timeout(SLUG_TIMEOUT, drained).await {
        Ok(Ok(completion)) => clean_slug(&completion.text),
        Ok(Err(error)) => {
            log::info!("memory: no slug for the session note ({error}); using the time");
            None
        }
        Err(_) => {
            cancel.cancel();
            log::info!("memory: the slug call timed out; using the time");
            None
        }
    }
}

/// On `/new` / `sessions.reset`: saves the closing session's last messages as a dated memory note of its agent
/// (`agent::session_note`), with a slug from the agent's model, in the background. Only when the agent's memory
/// search is enabled and the session has a transcript.
pub fn spawn_closing_note(
    runtime: &AgentRuntime,
    memory: &MemoryServices,
    key: &str,
    closing: &SessionEntry,
) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let config = runtime.config();
    let agent_id = crate::routing::session_key::agent_of_key(key)
        .map_or_else(|| config.agents.default_agent_id(), str::to_string);
    let service = memory.service(&config, &agent_id);
    if !service.settings().enabled {
        return;
    }
    let session = ClosingSession {
        session_key: key.to_string(),
        session_id: closing.session_id.clone(),
        source: closing
            .last_channel
            .clone()
            .or_else(|| closing.channel.clone()),
        closed_at_ms: crate::system::clock::now_ms(),
    };
    let store = runtime.store.clone();
    let http = runtime.http();
    let task = async move {
        let (reader, session_id) = (store, session.session_id.clone());
        let read = tokio::task::spawn_blocking(move || {
            recent_conversation(&reader, &session_id, DEFAULT_SESSION_MESSAGES)
        })
        .await;
        let key = session.session_key.clone();
        let conversation = match read {
            Ok(Ok(lines)) if !lines.is_empty() => lines,
            Ok(Ok(_)) => return,
            Ok(Err(error)) => {
                log::warn!("memory: cannot read the closing session {key}: {error}");
                return;
            }
            Err(error) => {
                log::warn!("memory: reading the closing session {key} failed: {error}");
                return;
            }
        };
        let slug = match super::providers::models::resolve_chain(&config, &agent_id, None, &http) {
            Ok(chain) => slug_for(&chain[0], &conversation).await,
            Err(_) => None,
        };
        let saved = tokio::task::spawn_blocking(move || {
            save_session_summary(
                service.workspace(),
                &session,
                &conversation,
                slug.as_deref(),
            )
        })
        .await;
        match saved {
            Ok(Ok(path)) => log::info!("memory: session {key} saved to {}", path.display()),
            Ok(Err(error)) => log::warn!("memory: cannot save the closing session {key}: {error}"),
            Err(error) => log::warn!("memory: saving the closing session {key} failed: {error}"),
        }
    };
    runtime.lifecycle.tasks.spawn_on(task, &handle);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-01-16 14:30:05 UTC.
    const AT_MS: u64 = 1_768_573_805_000;

    fn session(key: &str) -> ClosingSession {
        ClosingSession {
            session_key: key.into(),
            session_id: "abc123".into(),
            source: Some("telegram".into()),
            closed_at_ms: AT_MS,
        }
    }

    #[test]
    fn slugs_are_cleaned_like_upstream() {
        assert_eq!(
            clean_slug("  Vendor Pitch!\n").as_deref(),
            Some("vendor-pitch")
        );
        assert_eq!(clean_slug("\"api_design\"").as_deref(), Some("api-design"));
        assert_eq!(clean_slug("…").as_deref(), None);
        let long = clean_slug(&"a".repeat(50)).expect("slug");
        assert_eq!(long.len(), MAX_SLUG_CHARS);
    }

    #[test]
    fn note_paths_use_the_slug_else_the_time_and_topics_get_their_folder() {
        let main = session("agent:main:main");
        assert_eq!(
            note_path(&main, Some("Trip Plans")),
            Path::new("memory/2026-01-16-trip-plans.md")
        );
        assert_eq!(
            note_path(&main, None),
            Path::new("memory/2026-01-16-1430.md")
        );
        let topic = session("agent:main:telegram:group:-100:topic:11");
        assert_eq!(
            note_path(&topic, Some("ignored")),
            Path::new("memory/topics/topic-11/2026-01-16-1430.md")
        );
        assert_eq!(topic_of("agent:main:topic"), None);
    }

    #[test]
    fn a_second_note_with_the_same_name_gets_a_suffix() {
        let dir = tempfile::tempdir().expect("dir");
        let s = session("agent:main:main");
        let lines = vec!["user: hello".to_string(), "assistant: hi".to_string()];
        let first = save_session_summary(dir.path(), &s, &lines, Some("greeting")).expect("first");
        let second = save_session_summary(dir.path(), &s, &[], Some("greeting")).expect("second");
        assert!(
            first.ends_with("memory/2026-01-16-greeting.md"),
            "{first:?}"
        );
        assert!(
            second.ends_with("memory/2026-01-16-greeting-2.md"),
            "{second:?}"
        );
        let text = std::fs::read_to_string(first).expect("read");
        assert!(
            text.starts_with("# Session: 2026-01-16 14:30:05 UTC\n"),
            "{text}"
        );
        assert!(text.contains("- **Session Key**: agent:main:main\n"));
        assert!(text.contains("- **Source**: telegram\n"));
        assert!(text.ends_with("## Conversation Summary\n\nuser: hello\nassistant: hi\n"));
        let empty = std::fs::read_to_string(second).expect("read");
        assert!(!empty.contains("Conversation Summary"));
    }
}
