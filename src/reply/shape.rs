//! Reply shaping: what of a run's output reaches a channel at all.
//!
//! `normalize` decides per payload (used by the dispatcher on every enqueue):
//! the silent token `NO_REPLY` alone drops the payload, a trailing `NO_REPLY`
//! is stripped, blank payloads are dropped, and reasoning is dropped for
//! channels that cannot show it. `finalize(&FinishedRun, &ShapeOptions)` builds
//! the end-of-run payloads: the assistant's texts minus those that repeat what
//! a messaging tool already sent, and — when a tool failed and nothing else
//! would reach the user — one fallback error reply. Pure functions: nothing
//! here sends, waits or knows a platform.

use super::ReplyPayload;

/// The reply that means "say nothing" (OpenClaw `SILENT_REPLY_TOKEN`).
pub const SILENT_REPLY_TOKEN: &str = "NO_REPLY";
/// Texts shorter than this (after normalising) are never called duplicates.
pub const MIN_DUPLICATE_TEXT_CHARS: usize = 10;
/// A containment counts as a duplicate only if the shorter text is at least
/// this share of the longer, so a correction quoting a sent text survives.
const MIN_DUPLICATE_SHARE: f64 = 0.5;
/// Tool errors with these words are input mistakes the model retries on its
/// own; they never produce a fallback reply.
const RECOVERABLE_ERROR_WORDS: [&str; 7] = [
    "required",
    "missing",
    "invalid",
    "must be",
    "must have",
    "needs",
    "requires",
];

/// Why a payload was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// Blank text and no media.
    Empty,
    /// The silent token (alone, or all that was left after stripping it).
    Silent,
    /// Reasoning on a channel that cannot show it.
    Reasoning,
}

/// What the destination channel can show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShapeOptions {
    /// The channel can display reasoning (and the session asked for it).
    pub show_reasoning: bool,
}

/// A failed tool call, as the agent loop reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolFailure {
    pub tool_name: String,
    pub error: Option<String>,
}

/// What a finished run produced, as input to [`finalize`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinishedRun {
    /// The assistant's reply texts, in order.
    pub assistant_texts: Vec<String>,
    /// The model's reasoning, when it produced any.
    pub reasoning: Option<String>,
    /// Texts a messaging tool already delivered to this conversation.
    pub messaging_tool_texts: Vec<String>,
    /// The last tool call that failed, if any.
    pub last_tool_error: Option<ToolFailure>,
}

/// Cleans one payload for sending, or says why it must not be sent.
pub fn normalize(
    mut payload: ReplyPayload,
    options: &ShapeOptions,
) -> Result<ReplyPayload, SkipReason> {
    if payload.is_reasoning && !options.show_reasoning {
        return Err(SkipReason::Reasoning);
    }
    if payload.is_empty() {
        return Err(SkipReason::Empty);
    }
    let has_media = !payload.media_urls.is_empty();
    if payload.text.trim() == SILENT_REPLY_TOKEN {
        if !has_media {
            return Err(SkipReason::Silent);
        }
        payload.text.clear();
    } else if let Some(stripped) = strip_trailing_silent_token(&payload.text) {
        if !has_media && (stripped.is_empty() || is_silent_token_prefix(&stripped)) {
            return Err(SkipReason::Silent);
        }
        payload.text = stripped;
    }
    let trimmed = payload.text.trim_end().trim_start_matches(['\n', '\r']);
    if trimmed.len() != payload.text.len() {
        payload.text = trimmed.to_string();
    }
    Ok(payload)
}

/// The text without a trailing `NO_REPLY` (preceded by start, whitespace or
/// asterisks), trimmed; `None` when the text does not end with the token.
fn strip_trailing_silent_token(text: &str) -> Option<String> {
    let before = text.trim_end().strip_suffix(SILENT_REPLY_TOKEN)?;
    let without_stars = before.trim_end_matches('*');
    let separated = before.is_empty()
        || without_stars.len() != before.len()
        || before.ends_with(char::is_whitespace);
    separated.then(|| without_stars.trim().to_string())
}

/// "NO", "NO_RE"…: a fragment of the token left behind after stripping it.
fn is_silent_token_prefix(text: &str) -> bool {
    let upper = text.trim().to_uppercase();
    upper.len() >= 2
        && upper.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
        && SILENT_REPLY_TOKEN.starts_with(&upper)
}

/// Lowercased, emoji removed, whitespace collapsed: the form texts are
/// compared in for duplicate detection.
pub fn normalize_for_comparison(text: &str) -> String {
    let lowered: String = text
        .to_lowercase()
        .chars()
        .filter(|c| !is_emoji(*c))
        .collect();
    lowered.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_emoji(c: char) -> bool {
    matches!(u32::from(c),
        0x1F000..=0x1FAFF | 0x2600..=0x27BF | 0x2B00..=0x2BFF | 0xFE0F | 0x200D | 0x20E3)
}

/// True when `text` repeats (or is repeated by) something a messaging tool
/// already sent, so sending it again would show the user the same message twice.
pub fn is_messaging_tool_duplicate(text: &str, sent_texts: &[String]) -> bool {
    let text = normalize_for_comparison(text);
    let text_chars = text.chars().count();
    if text_chars < MIN_DUPLICATE_TEXT_CHARS {
        return false;
    }
    sent_texts.iter().any(|sent| {
        let sent = normalize_for_comparison(sent);
        let sent_chars = sent.chars().count();
        if sent_chars < MIN_DUPLICATE_TEXT_CHARS {
            return false;
        }
        let (shorter, longer) = (text_chars.min(sent_chars), text_chars.max(sent_chars));
        let contained = text.contains(&sent) || sent.contains(&text);
        contained && shorter as f64 >= longer as f64 * MIN_DUPLICATE_SHARE
    })
}

fn is_recoverable_tool_error(error: Option<&str>) -> bool {
    let error = error.unwrap_or_default().to_lowercase();
    RECOVERABLE_ERROR_WORDS
        .iter()
        .any(|word| error.contains(word))
}

/// The end-of-run payloads, in sending order: reasoning (where shown), the
/// assistant's texts (silent and duplicate ones removed), then the fallback
/// error reply when a tool failed and the user would otherwise hear nothing.
pub fn finalize(outcome: &FinishedRun, options: &ShapeOptions) -> Vec<ReplyPayload> {
    let mut replies = Vec::new();
    if let Some(reasoning) = &outcome.reasoning {
        let payload = ReplyPayload {
            is_reasoning: true,
            ..ReplyPayload::text(reasoning.clone())
        };
        replies.extend(normalize(payload, options).ok());
    }
    for text in &outcome.assistant_texts {
        if is_messaging_tool_duplicate(text, &outcome.messaging_tool_texts) {
            continue;
        }
        replies.extend(normalize(ReplyPayload::text(text.clone()), options).ok());
    }
    let user_heard_something = outcome.assistant_texts.iter().any(|t| !t.trim().is_empty())
        || !outcome.messaging_tool_texts.is_empty();
    if let Some(failure) = &outcome.last_tool_error {
        if !user_heard_something && !is_recoverable_tool_error(failure.error.as_deref()) {
            let suffix = failure
                .error
                .as_deref()
                .map(|e| format!(": {}", e.trim()))
                .unwrap_or_default();
            replies.push(ReplyPayload {
                is_error: true,
                ..ReplyPayload::text(format!("⚠️ {} failed{suffix}", failure.tool_name))
            });
        }
    }
    replies
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown() -> ShapeOptions {
        ShapeOptions::default()
    }

    #[test]
    fn silent_token_alone_is_dropped() {
        let out = normalize(ReplyPayload::text("  NO_REPLY\n"), &shown());
        assert_eq!(out, Err(SkipReason::Silent));
    }

    #[test]
    fn silent_token_with_media_keeps_the_media() {
        let payload = ReplyPayload {
            media_urls: vec!["file:///tmp/a.png".into()],
            ..ReplyPayload::text("NO_REPLY")
        };
        let out = normalize(payload, &shown()).expect("media is sent");
        assert_eq!(out.text, "");
        assert_eq!(out.media_urls.len(), 1);
    }

    #[test]
    fn trailing_silent_token_is_stripped_from_mixed_text() {
        let out = normalize(ReplyPayload::text("All done 😄 **NO_REPLY**"), &shown());
        // "**NO_REPLY**" does not end in the token: it is left alone.
        assert_eq!(out.map(|p| p.text), Ok("All done 😄 **NO_REPLY**".into()));
        let out = normalize(ReplyPayload::text("All done 😄 NO_REPLY"), &shown());
        assert_eq!(out.map(|p| p.text), Ok("All done 😄".into()));
        let out = normalize(ReplyPayload::text("NO NO_REPLY"), &shown());
        assert_eq!(out, Err(SkipReason::Silent));
    }

    #[test]
    fn token_inside_a_word_or_sentence_is_kept() {
        let text = "Set FOO_NO_REPLY to true";
        assert_eq!(
            normalize(ReplyPayload::text(text), &shown()).map(|p| p.text),
            Ok(text.into())
        );
        let text = "NO is my answer";
        assert_eq!(
            normalize(ReplyPayload::text(text), &shown()).map(|p| p.text),
            Ok(text.into())
        );
    }

    #[test]
    fn reasoning_is_kept_out_of_channels_that_cannot_show_it() {
        let payload = ReplyPayload {
            is_reasoning: true,
            ..ReplyPayload::text("thinking...")
        };
        assert_eq!(
            normalize(payload.clone(), &shown()),
            Err(SkipReason::Reasoning)
        );
        let shows = ShapeOptions {
            show_reasoning: true,
        };
        assert!(normalize(payload, &shows).is_ok());
    }

    #[test]
    fn duplicates_ignore_case_emoji_and_spacing() {
        let sent = vec!["Reminder set for   7am tomorrow".to_string()];
        assert!(is_messaging_tool_duplicate(
            "✅ reminder set for 7am tomorrow",
            &sent
        ));
        assert!(!is_messaging_tool_duplicate("Done", &sent));
        let correction = "Reminder set for 7am tomorrow. Actually that failed, the calendar is offline and nothing was saved.";
        assert!(!is_messaging_tool_duplicate(correction, &sent));
    }
}
