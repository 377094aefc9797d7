//! The pre-compaction memory flush (`agents.defaults.compaction.memoryFlush`): when a session's prompt comes
//! within `softThresholdTokens` (default 4000) of the auto-compaction point (window − reserve), the agent first
//! gets one silent turn asking it to write durable notes to `memory/YYYY-MM-DD.md`. Its answer (usually
//! `NO_REPLY`) is swallowed, and it runs once per compaction cycle: the session's compaction count at the
//! flush is remembered, as upstream does, so the next flush waits for the next compaction.
//!
//! The flush turn runs the normal tool loop under a throwaway transcript id that is deleted afterwards, so the
//! session's history shows nothing of it; only the notes it wrote remain. This file must not compact or
//! record replies; it only decides when to flush and runs the flush turn.

use tokio::sync::mpsc;

use crate::agent::compaction::CompactionSettings;
use crate::agent::context::{estimate_tokens, ContextWindow};
use crate::agent::providers::models::ResolvedModel;
use crate::agent::providers::{ChatMessage, Role};
use crate::agent::tool_loop::{self, LoopInput, LoopResult};
use crate::agent::turn::{TurnEnv, TurnSpec};
use crate::config::Config;
use crate::store::SessionEntry;

/// Tokens before the compaction point at which the flush runs (upstream's default).
pub const DEFAULT_SOFT_THRESHOLD_TOKENS: u32 = 4_000;
/// The answer that means "nothing for the user".
pub const SILENT_REPLY_TOKEN: &str = "NO_REPLY";
/// Default user prompt of the flush turn (`YYYY-MM-DD` becomes today's UTC date).
pub const DEFAULT_PROMPT: &str = "Pre-compaction memory flush. Write the durable memories of this conversation \
now to memory/YYYY-MM-DD.md (create memory/ if it is missing; if the file exists, append and keep what is \
there). If there is nothing worth keeping, answer NO_REPLY.";
/// Default system prompt addition of the flush turn.
pub const DEFAULT_SYSTEM_PROMPT: &str = "This is a memory flush turn: the session is about to be compacted. \
Save durable memories to files now. The user does not see this turn; NO_REPLY is usually the right answer.";
/// Meta key prefix remembering, per session id, the compaction count at the last flush.
const FLUSHED_AT_KEY_PREFIX: &str = "memory_flush:";

/// Resolved `memoryFlush` settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryFlushSettings {
    pub soft_threshold_tokens: u32,
    pub prompt: String,
    pub system_prompt: String,
}

impl MemoryFlushSettings {
    /// The settings, or None when `memoryFlush.enabled` is false (it is on by default, as upstream).
    pub fn from_config(config: &Config) -> Option<MemoryFlushSettings> {
        let flush = config
            .agents
            .defaults
            .compaction
            .as_ref()
            .and_then(|c| c.memory_flush.clone())
            .unwrap_or_default();
        if flush.enabled == Some(false) {
            return None;
        }
        let text = |value: Option<String>, default: &str| {
            let text = value
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.to_string());
            if text.contains(SILENT_REPLY_TOKEN) {
                text
            } else {
                format!("{text}\n\nIf the user needs no reply, answer {SILENT_REPLY_TOKEN}.")
            }
        };
        Some(MemoryFlushSettings {
            soft_threshold_tokens: flush
                .soft_threshold_tokens
                .unwrap_or(DEFAULT_SOFT_THRESHOLD_TOKENS),
            prompt: text(flush.prompt, DEFAULT_PROMPT),
            system_prompt: text(flush.system_prompt, DEFAULT_SYSTEM_PROMPT),
        })
    }

    /// Whether a prompt of `tokens` has reached the flush point: window − reserve − soft threshold.
    pub fn is_due(&self, tokens: usize, window: ContextWindow, reserve_tokens: u32) -> bool {
        let threshold = window
            .tokens
            .saturating_sub(reserve_tokens)
            .saturating_sub(self.soft_threshold_tokens);
        threshold > 0 && tokens >= threshold as usize
    }
}

/// The flush prompt for a run at `now_ms`: `YYYY-MM-DD` replaced by the UTC date, plus the current time.
pub fn prompt_for_run(prompt: &str, now_ms: u64) -> String {
    let at = jiff::Timestamp::from_millisecond(i64::try_from(now_ms).unwrap_or(i64::MAX))
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let date = at.strftime("%Y-%m-%d").to_string();
    let time = at.strftime("%Y-%m-%d %H:%M UTC").to_string();
    format!(
        "{}\nCurrent time: {time}",
        prompt.replace("YYYY-MM-DD", &date).trim_end()
    )
}

fn flushed_at_key(session_id: &str) -> String {
    format!("{FLUSHED_AT_KEY_PREFIX}{session_id}")
}

/// The compaction count of `session_id` when it was last flushed.
fn flushed_at(env: &TurnEnv, session_id: &str) -> Option<u32> {
    let bytes = env.store.meta(&flushed_at_key(session_id)).ok()??;
    Some(u32::from_le_bytes(bytes.as_slice().try_into().ok()?))
}

/// What the flush turn needs from the turn that is about to run.
pub struct FlushTurn<'a> {
    pub env: &'a TurnEnv,
    pub spec: &'a TurnSpec,
    pub session: &'a SessionEntry,
    pub models: &'a [ResolvedModel],
    pub allowed_tools: &'a [String],
    pub cancel: &'a tokio_util::sync::CancellationToken,
    pub window: ContextWindow,
    pub system_prompt: &'a str,
}

/// Runs the flush turn when the prompt `messages` (the current user message last) is near compaction and
/// this compaction cycle has not been flushed yet. Returns whether a flush turn ran.
pub async fn run_if_due(turn: FlushTurn<'_>, messages: &[ChatMessage]) -> bool {
    let Some(settings) = MemoryFlushSettings::from_config(&turn.env.config) else {
        return false;
    };
    let reserve = CompactionSettings::for_window(&turn.env.config, turn.window).reserve_tokens;
    let session_id = turn.session.session_id.as_str();
    if !settings.is_due(estimate_tokens(messages), turn.window, reserve)
        || flushed_at(turn.env, session_id) == Some(turn.session.compaction_count)
    {
        return false;
    }
    let mut prompt: Vec<ChatMessage> = messages.to_vec();
    if prompt.last().is_some_and(|m| m.role == Role::User) {
        // The user's new message is answered by the real turn, after the flush.
        prompt.pop();
    }
    prompt.push(ChatMessage::user(prompt_for_run(
        &settings.prompt,
        crate::system::clock::now_ms(),
    )));
    if let Some(system) = prompt.first_mut().filter(|m| m.role == Role::System) {
        system.content.push_str("\n\n");
        system.content.push_str(&settings.system_prompt);
    }
    let scratch_id = format!("memory-flush-{}", uuid::Uuid::new_v4().simple());
    let (events, mut silent) = mpsc::channel(64);
    let drain = tokio::spawn(async move { while silent.recv().await.is_some() {} });
    let input = LoopInput {
        env: turn.env,
        spec: turn.spec,
        session_id: &scratch_id,
        models: turn.models,
        allowed_tools: turn.allowed_tools.to_vec(),
        cancel: turn.cancel,
        events: &events,
        window: turn.window,
        system_prompt: format!("{}\n\n{}", turn.system_prompt, settings.system_prompt),
        last_call_ms: None,
        // The flush turn is silent: its thinking goes nowhere either.
        reasoning: crate::agent::reasoning::ReasoningLevel::Off,
        // Steered user messages belong to the real turn, not the flush.
        steer: None,
    };
    let result = tool_loop::run(input, prompt).await;
    drop(events);
    let _ = drain.await;
    match result {
        LoopResult::Done { text, .. } if !text.trim().starts_with(SILENT_REPLY_TOKEN) => {
            log::info!(
                "memory flush for {}: the model answered (not shown): {text}",
                turn.spec.session_key
            );
        }
        LoopResult::Failed { message, .. } => {
            log::warn!(
                "memory flush for {} failed: {message}",
                turn.spec.session_key
            );
        }
        _ => {}
    }
    let count = turn.session.compaction_count.to_le_bytes();
    tokio::task::block_in_place(|| {
        if let Err(error) = turn.env.store.delete_transcript(&scratch_id) {
            log::warn!("memory flush: cannot drop its scratch transcript: {error}");
        }
        if let Err(error) = turn.env.store.put_meta(&flushed_at_key(session_id), &count) {
            log::warn!("memory flush: cannot record the flush: {error}");
        }
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::context::WindowSource;

    fn window(tokens: u32) -> ContextWindow {
        ContextWindow {
            tokens,
            source: WindowSource::Config,
        }
    }

    #[test]
    fn flush_is_due_within_the_soft_threshold_of_the_compaction_point() {
        let settings = MemoryFlushSettings::from_config(&Config::default()).expect("on by default");
        assert_eq!(settings.soft_threshold_tokens, 4_000);
        // 32k window, 8k reserve: compaction at 24k, flush from 20k.
        assert!(!settings.is_due(19_999, window(32_000), 8_000));
        assert!(settings.is_due(20_000, window(32_000), 8_000));
        assert!(!settings.is_due(10, window(4_000), 8_000));
    }

    #[test]
    fn prompts_name_the_date_and_always_allow_a_silent_answer() {
        let text = prompt_for_run(DEFAULT_PROMPT, 1_768_573_805_000);
        assert!(text.contains("memory/2026-01-16.md"), "{text}");
        assert!(
            text.ends_with("Current time: 2026-01-16 14:30 UTC"),
            "{text}"
        );
        let config = crate::config::parse_str(
            r#"{ agents: { defaults: { compaction: { memoryFlush: { prompt: "Save notes.", softThresholdTokens: 100 } } } } }"#,
            "test",
        )
        .expect("config");
        let settings = MemoryFlushSettings::from_config(&config).expect("enabled");
        assert!(settings.prompt.starts_with("Save notes.") && settings.prompt.contains("NO_REPLY"));
        assert_eq!(settings.soft_threshold_tokens, 100);
        let off = crate::config::parse_str(
            r#"{ agents: { defaults: { compaction: { memoryFlush: { enabled: false } } } } }"#,
            "test",
        )
        .expect("config");
        assert!(MemoryFlushSettings::from_config(&off).is_none());
    }
}
