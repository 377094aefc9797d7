//! Outbound delivery to a channel adapter: text split to the platform's
//! limits (`reply::chunk_text` to `TextLimits.max_chars` — in `chunkMode`
//! newline first into paragraphs, each its own message, as upstream — then
//! at most `max_lines` lines per message), and every platform call retried as
//! upstream's channel retry policy does (attempts 3, first delay 400 ms on
//! Telegram and 500 ms elsewhere, doubling up to 30,000 ms, jitter 0.1; a
//! `RateLimited` answer waits the `retry_after` the platform asked for;
//! `Permanent` and `NoAccount` are never retried). Total time per call is
//! bounded by `attempts × max_delay_ms`, so a failing delivery can never hold
//! a session lane forever. Which messages of an answer quote the inbound
//! message (`replyToMode`) is a [`ReplyQuote`].
//!
//! This file sends through the `Channel` trait only: it must not know a
//! platform's API, and it must not decide what to send (that is `reply/`).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand::Rng;

use crate::config::schema::common::{ReplyToMode, RetryConfig};
use crate::reply::chunk_text;
use crate::reply::fences::parse_fence_spans;
use crate::system::backoff::{Backoff, Jitter};

use super::{
    Channel, ChunkMode, EditMessage, OutboundTarget, SendError, SentMessage, TextFormat, TextLimits,
};

/// First retry delay on Telegram (upstream's Telegram retry default).
pub const TELEGRAM_MIN_DELAY_MS: u64 = 400;
/// First retry delay on Discord, Slack and other channels.
pub const DEFAULT_MIN_DELAY_MS: u64 = 500;

/// How a failed platform call is retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Calls in total, the first included (at least 1).
    pub attempts: u32,
    /// The pause before retry `n` is step `n - 1`; its jitter (a spread
    /// around the step) is not applied to `retry_after`.
    pub backoff: Backoff,
}

impl RetryPolicy {
    /// The channel's default policy.
    pub fn for_channel(channel: &str) -> RetryPolicy {
        let defaults = RetryConfig::default();
        RetryPolicy::from_config(&RetryConfig {
            min_delay_ms: if channel == "telegram" {
                TELEGRAM_MIN_DELAY_MS
            } else {
                DEFAULT_MIN_DELAY_MS
            },
            ..defaults
        })
    }

    /// A configured `retry` block (its keys win over the channel default).
    pub fn from_config(config: &RetryConfig) -> RetryPolicy {
        let backoff = Backoff::new(
            Duration::from_millis(config.min_delay_ms),
            Duration::from_millis(config.max_delay_ms.max(config.min_delay_ms)),
        )
        .with_jitter(Jitter::Around(config.jitter.clamp(0.0, 1.0)));
        RetryPolicy {
            attempts: config.attempts.max(1),
            backoff,
        }
    }

    /// The pause before call number `attempt + 1` after `error` on call
    /// `attempt` (1-based); `None` when the error is not worth retrying or
    /// the attempts are used up.
    pub fn delay_after(
        &self,
        attempt: u32,
        error: &SendError,
        rng: &mut impl Rng,
    ) -> Option<Duration> {
        if attempt >= self.attempts.max(1) {
            return None;
        }
        match error {
            SendError::Permanent(_) | SendError::NoAccount(_) => None,
            SendError::RateLimited { retry_after_ms } => Some(
                Duration::from_millis(*retry_after_ms)
                    .clamp(self.backoff.initial(), self.backoff.max()),
            ),
            SendError::Transient(_) => Some(
                self.backoff
                    .delay(attempt.saturating_sub(1), rng.gen::<f64>()),
            ),
        }
    }

    /// The longest a call with its retries can wait in pauses.
    pub fn max_total_wait(&self) -> Duration {
        self.backoff
            .max()
            .saturating_mul(self.attempts.saturating_sub(1))
    }
}

/// A delivery that finally failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    #[error("{channel} delivery failed after {attempts} attempt(s): {last}")]
    Failed {
        channel: String,
        attempts: u32,
        last: SendError,
    },
    #[error("no channel {0:?} is running in this gateway")]
    UnknownChannel(String),
    #[error("channel {0:?} cannot edit messages")]
    CannotEdit(String),
}

/// Runs `call` until it succeeds or the policy gives up.
pub async fn with_retry<T, F, Fut>(
    policy: RetryPolicy,
    channel: &str,
    mut call: F,
) -> Result<T, DeliveryError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SendError>>,
{
    let mut attempt = 1;
    loop {
        let error = match call().await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let pause = policy.delay_after(attempt, &error, &mut rand::thread_rng());
        let Some(pause) = pause else {
            return Err(DeliveryError::Failed {
                channel: channel.to_string(),
                attempts: attempt,
                last: error,
            });
        };
        log::debug!("{channel} call failed ({error}); retry {attempt} in {pause:?}");
        tokio::time::sleep(pause).await;
        attempt += 1;
    }
}

/// Splits `text` into messages within `limits` (by the chunk mode and
/// characters, then lines).
pub fn split_for_limits(text: &str, limits: TextLimits) -> Vec<String> {
    let max_chars = limits.max_chars.max(1);
    let pieces = match limits.chunk_mode {
        ChunkMode::Length => split_by_length(text, max_chars),
        ChunkMode::Newline => split_by_paragraph(text, max_chars),
    };
    let Some(max_lines) = limits.max_lines.filter(|n| *n > 0) else {
        return pieces;
    };
    let mut out = Vec::new();
    for piece in pieces {
        let lines: Vec<&str> = piece.split('\n').collect();
        if lines.len() <= max_lines {
            out.push(piece);
            continue;
        }
        out.extend(lines.chunks(max_lines).map(|group| group.join("\n")));
    }
    out.retain(|piece| !piece.trim().is_empty());
    out
}

/// `text` whole when it fits, else cut at the best boundaries within `max_chars`.
fn split_by_length(text: &str, max_chars: usize) -> Vec<String> {
    if text.chars().count() <= max_chars {
        vec![text.to_string()]
    } else {
        chunk_text(text, max_chars)
    }
}

/// Upstream's newline mode: the text (line endings made `\n`) is cut at
/// every paragraph break — a newline, blanks or tabs, then one or more
/// newlines — outside code fences; each paragraph, trailing whitespace
/// trimmed, is one message (blank ones are dropped), split by length only
/// when it exceeds `max_chars`.
fn split_by_paragraph(text: &str, max_chars: usize) -> Vec<String> {
    let text = text.replace("\r\n", "\n").replace('\r', "\n");
    let fences = parse_fence_spans(&text);
    let bytes = text.as_bytes();
    let mut paragraphs = Vec::new();
    let (mut start, mut at) = (0, 0);
    while let Some(offset) = text[at..].find('\n') {
        let newline = at + offset;
        let end = paragraph_break_end(bytes, newline);
        match end {
            Some(end) if !fences.iter().any(|fence| fence.contains(newline)) => {
                paragraphs.push(&text[start..newline]);
                start = end;
                at = end;
            }
            _ => at = newline + 1,
        }
    }
    paragraphs.push(&text[start..]);
    paragraphs
        .into_iter()
        .map(str::trim_end)
        .filter(|paragraph| !paragraph.trim().is_empty())
        .flat_map(|paragraph| split_by_length(paragraph, max_chars))
        .collect()
}

/// Where a paragraph break starting with the newline at `newline` ends
/// (after its last newline); `None` when that newline ends a line only.
fn paragraph_break_end(bytes: &[u8], newline: usize) -> Option<usize> {
    let mut at = newline + 1;
    while bytes.get(at).is_some_and(|b| *b == b' ' || *b == b'\t') {
        at += 1;
    }
    if bytes.get(at) != Some(&b'\n') {
        return None;
    }
    while bytes.get(at) == Some(&b'\n') {
        at += 1;
    }
    Some(at)
}

/// Which messages of one answer quote the message it answers
/// (`replyToMode`): none (`off`), the first (`first`; `batched` likewise),
/// or every one (`all`). Slack threads under the message instead.
#[derive(Debug)]
pub struct ReplyQuote {
    mode: ReplyToMode,
    message_id: Option<String>,
    quoted: AtomicBool,
}

impl ReplyQuote {
    /// Quotes `message_id` (when known) as `mode` says.
    pub fn new(mode: ReplyToMode, message_id: Option<String>) -> ReplyQuote {
        ReplyQuote {
            mode,
            message_id,
            quoted: AtomicBool::new(false),
        }
    }

    /// Quotes nothing (answers that answer no message).
    pub fn none() -> ReplyQuote {
        ReplyQuote::new(ReplyToMode::Off, None)
    }

    /// The target of the next message: `target`, quoting the message when
    /// the mode wants it for this one.
    pub fn next_target(&self, target: &OutboundTarget) -> OutboundTarget {
        let quote = match self.mode {
            ReplyToMode::Off => false,
            ReplyToMode::All => true,
            ReplyToMode::First | ReplyToMode::Batched => !self.quoted.swap(true, Ordering::SeqCst),
        };
        let mut next = target.clone();
        if quote && self.message_id.is_some() {
            next.reply_to_message_id = self.message_id.clone();
        }
        next
    }
}

/// Sends `text` as as many messages as the limits require, each with retries.
/// Stops at the first piece that finally fails.
pub async fn send_text(
    channel: &dyn Channel,
    target: &OutboundTarget,
    text: &str,
    format: TextFormat,
    policy: RetryPolicy,
    limits: TextLimits,
) -> Result<Vec<SentMessage>, DeliveryError> {
    let quote = ReplyQuote::new(ReplyToMode::All, target.reply_to_message_id.clone());
    send_quoting(channel, target, &quote, text, format, policy, limits).await
}

/// As [`send_text`], each piece's quote decided by `quote`.
pub async fn send_quoting(
    channel: &dyn Channel,
    target: &OutboundTarget,
    quote: &ReplyQuote,
    text: &str,
    format: TextFormat,
    policy: RetryPolicy,
    limits: TextLimits,
) -> Result<Vec<SentMessage>, DeliveryError> {
    let mut sent = Vec::new();
    for piece in split_for_limits(text, limits) {
        let piece_target = quote.next_target(target);
        let message = with_retry(policy, channel.id(), || {
            channel.send_text(&piece_target, &piece, format)
        })
        .await?;
        sent.push(message);
    }
    Ok(sent)
}

/// Replaces the text of a sent message, with retries.
pub async fn edit_text(
    channel: &dyn Channel,
    editor: &dyn EditMessage,
    target: &OutboundTarget,
    message_id: &str,
    text: &str,
    policy: RetryPolicy,
) -> Result<(), DeliveryError> {
    with_retry(policy, channel.id(), || {
        editor.edit_text(target, message_id, text, TextFormat::Markdown)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    #[test]
    fn backoff_doubles_within_jitter_and_caps() {
        let policy = RetryPolicy {
            attempts: 5,
            backoff: Backoff::new(Duration::from_millis(400), Duration::from_millis(1_000))
                .with_jitter(Jitter::Around(0.1)),
        };
        let mut rng = StdRng::seed_from_u64(9);
        let transient = SendError::Transient("502".into());
        let first = policy.delay_after(1, &transient, &mut rng).expect("retry");
        assert!(
            (400..=440).contains(&(first.as_millis() as u64)),
            "{first:?}"
        );
        let second = policy.delay_after(2, &transient, &mut rng).expect("retry");
        assert!(
            (720..=880).contains(&(second.as_millis() as u64)),
            "{second:?}"
        );
        let third = policy.delay_after(3, &transient, &mut rng).expect("retry");
        assert_eq!(third, Duration::from_millis(1_000), "capped at maxDelayMs");
        assert!(policy.delay_after(5, &transient, &mut rng).is_none());
    }

    #[test]
    fn retry_after_is_honoured_and_permanent_is_not_retried() {
        let policy = RetryPolicy::for_channel("telegram");
        assert_eq!(
            policy.backoff.initial(),
            Duration::from_millis(TELEGRAM_MIN_DELAY_MS)
        );
        assert_eq!(
            RetryPolicy::for_channel("discord").backoff.initial(),
            Duration::from_millis(DEFAULT_MIN_DELAY_MS)
        );
        let mut rng = StdRng::seed_from_u64(1);
        let limited = SendError::RateLimited {
            retry_after_ms: 2_500,
        };
        assert_eq!(
            policy.delay_after(1, &limited, &mut rng),
            Some(Duration::from_millis(2_500))
        );
        let permanent = SendError::Permanent("chat not found".into());
        assert_eq!(policy.delay_after(1, &permanent, &mut rng), None);
        assert_eq!(policy.max_total_wait(), Duration::from_millis(60_000));
    }

    #[test]
    fn split_respects_chars_and_lines() {
        let limits = TextLimits {
            max_chars: 50,
            max_lines: Some(3),
            chunk_mode: ChunkMode::Length,
        };
        let text = (1..=7).map(|i| format!("line {i}")).collect::<Vec<_>>();
        let pieces = split_for_limits(&text.join("\n"), limits);
        assert!(pieces.iter().all(|p| p.lines().count() <= 3), "{pieces:?}");
        assert_eq!(pieces.join("\n"), text.join("\n"));
        let long = "word ".repeat(40);
        let pieces = split_for_limits(&long, limits);
        assert!(pieces.len() > 1);
        assert!(pieces.iter().all(|p| p.chars().count() <= 50), "{pieces:?}");
    }

    fn limits(max_chars: usize, chunk_mode: ChunkMode) -> TextLimits {
        TextLimits {
            max_chars,
            max_lines: None,
            chunk_mode,
        }
    }

    #[test]
    fn length_mode_keeps_paragraphs_together_while_the_text_fits() {
        let text = "First paragraph.\n\nSecond paragraph.\nSame paragraph.";
        let pieces = split_for_limits(text, limits(100, ChunkMode::Length));
        assert_eq!(pieces, vec![text.to_string()]);
    }

    #[test]
    fn newline_mode_sends_each_paragraph_alone_but_keeps_line_wraps() {
        let text = "First paragraph.\n\nSecond line one\nsecond line two  \n \t\n\n\nThird.\r\n\r\nFourth.\n\n";
        let pieces = split_for_limits(text, limits(100, ChunkMode::Newline));
        assert_eq!(
            pieces,
            vec![
                "First paragraph.",
                "Second line one\nsecond line two",
                "Third.",
                "Fourth."
            ]
        );
        let wrapped = "one line\nanother line\n- a list item";
        assert_eq!(
            split_for_limits(wrapped, limits(100, ChunkMode::Newline)),
            vec![wrapped.to_string()]
        );
    }

    #[test]
    fn newline_mode_never_splits_inside_a_code_fence() {
        let text = "Intro.\n\n```sh\necho a\n\necho b\n```\n\nOutro.";
        let pieces = split_for_limits(text, limits(100, ChunkMode::Newline));
        assert_eq!(
            pieces,
            vec!["Intro.", "```sh\necho a\n\necho b\n```", "Outro."]
        );
        let open = "Intro.\n\n~~~\nnever closed\n\nstill code";
        let pieces = split_for_limits(open, limits(100, ChunkMode::Newline));
        assert_eq!(pieces, vec!["Intro.", "~~~\nnever closed\n\nstill code"]);
    }

    #[test]
    fn newline_mode_splits_a_paragraph_over_the_limit_by_length() {
        let long = "word ".repeat(30).trim_end().to_string();
        let text = format!("Short.\n\n{long}\n\nTail.");
        let pieces = split_for_limits(&text, limits(50, ChunkMode::Newline));
        assert_eq!(pieces.first().map(String::as_str), Some("Short."));
        assert_eq!(pieces.last().map(String::as_str), Some("Tail."));
        let middle = &pieces[1..pieces.len() - 1];
        assert!(middle.len() >= 3, "{pieces:?}");
        assert!(middle.iter().all(|p| p.chars().count() <= 50), "{pieces:?}");
        assert_eq!(middle.concat(), long, "the pieces add up to the paragraph");
    }

    #[test]
    fn newline_mode_still_honours_the_line_cap() {
        let text = "a\nb\nc\nd\n\ne";
        let capped = TextLimits {
            max_lines: Some(3),
            ..limits(100, ChunkMode::Newline)
        };
        assert_eq!(split_for_limits(text, capped), vec!["a\nb\nc", "d", "e"]);
    }
}
