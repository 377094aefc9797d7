//! The block coalescer: merges small streamed blocks into fewer, larger
//! messages for channels where many short messages are noise (OpenClaw's
//! block-reply coalescer; Slack/Discord/Signal-style channels default to
//! `minChars` 1500, idle 1000 ms).
//!
//! `Coalescer::new(CoalesceLimits)` is a clock-free state machine:
//! `.push(payload, now) -> Vec<ReplyPayload>`, `.deadline()`,
//! `.on_idle(now) -> Option<ReplyPayload>`, `.finish()`. Text is joined with
//! the joiner of the chunker's break preference; a payload is released when
//! the merged text reaches `max_chars`, or when no block arrived for `idle`
//! and it holds at least `min_chars`, or at `finish`. Media, errors,
//! reasoning and a change of reply target are never merged: they flush what
//! is buffered and pass on their own. `Coalescer::spawn(dispatcher)` drives
//! it on tokio's clock (so paused test time drives the idle flush) and
//! enqueues what it releases as blocks. This file must not send anything
//! itself nor know a platform.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::chunker::{ChunkerLimits, DEFAULT_TEXT_CHUNK_LIMIT_CHARS};
use super::dispatcher::ReplyDispatcher;
use super::{ReplyKind, ReplyPayload};
use crate::config::{BlockStreamingCoalesce, BreakPreference};

/// OpenClaw's idle time before a coalesced block is flushed.
pub const DEFAULT_COALESCE_IDLE_MS: u64 = 1000;
/// Low mark that Slack/Discord/Signal-style channels use by default.
pub const CHANNEL_COALESCE_MIN_CHARS: usize = 1500;
/// Blocks waiting for the coalescer task before `push` waits.
const COALESCER_QUEUE_CAPACITY: usize = 16;

/// When merged text is released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoalesceLimits {
    pub min_chars: usize,
    pub max_chars: usize,
    /// Quiet time after the last block before releasing; zero: never on idle.
    pub idle: Duration,
    /// Put between merged texts (trailing whitespace of the left side is
    /// replaced when the joiner is whitespace).
    pub joiner: String,
}

/// A channel's own coalescing defaults (e.g. 1500 chars / 1000 ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelCoalesceDefaults {
    pub min_chars: usize,
    pub idle_ms: u64,
}

impl CoalesceLimits {
    /// `1 ≤ min_chars ≤ max_chars`, joiner for the given break preference.
    pub fn new(
        min_chars: usize,
        max_chars: usize,
        idle: Duration,
        preference: BreakPreference,
    ) -> Self {
        let max_chars = max_chars.max(1);
        let joiner = match preference {
            BreakPreference::Paragraph => "\n\n",
            BreakPreference::Newline => "\n",
            BreakPreference::Sentence => " ",
        };
        Self {
            min_chars: min_chars.clamp(1, max_chars),
            max_chars,
            idle,
            joiner: joiner.to_string(),
        }
    }

    /// OpenClaw's layering: config, else the channel's defaults, else the
    /// chunker's low mark; `max_chars` never above the channel text limit.
    pub fn resolve(
        config: Option<&BlockStreamingCoalesce>,
        channel: Option<ChannelCoalesceDefaults>,
        chunking: &ChunkerLimits,
        text_limit_chars: Option<usize>,
    ) -> Self {
        let text_limit = text_limit_chars
            .unwrap_or(DEFAULT_TEXT_CHUNK_LIMIT_CHARS)
            .max(1);
        let min = config
            .and_then(|c| c.min_chars.map(|v| v as usize))
            .or(channel.map(|c| c.min_chars))
            .unwrap_or(chunking.min_chars);
        let max = config
            .and_then(|c| c.max_chars.map(|v| v as usize))
            .unwrap_or(text_limit)
            .min(text_limit);
        let idle_ms = config
            .and_then(|c| c.idle_ms)
            .or(channel.map(|c| c.idle_ms))
            .unwrap_or(DEFAULT_COALESCE_IDLE_MS);
        Self::new(
            min,
            max,
            Duration::from_millis(idle_ms),
            chunking.break_preference,
        )
    }
}

/// Merges blocks; see the module documentation.
#[derive(Debug)]
pub struct Coalescer {
    limits: CoalesceLimits,
    buffer: Option<ReplyPayload>,
    buffered_chars: usize,
    deadline: Option<Instant>,
}

impl Coalescer {
    pub fn new(limits: CoalesceLimits) -> Self {
        Self {
            limits,
            buffer: None,
            buffered_chars: 0,
            deadline: None,
        }
    }

    /// When `on_idle` should next be called, if anything is waiting.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Takes one block; returns what must be sent now, in order.
    pub fn push(&mut self, payload: ReplyPayload, now: Instant) -> Vec<ReplyPayload> {
        let mut out = Vec::new();
        if payload.is_empty() {
            return out;
        }
        if !self.mergeable(&payload) {
            out.extend(self.finish());
            out.push(payload);
            return out;
        }
        let Some(buffer) = self.buffer.as_mut() else {
            return self.start(payload, now, out);
        };
        let joined = join(&buffer.text, &payload.text, &self.limits.joiner);
        let joined_chars = joined.chars().count();
        if joined_chars > self.limits.max_chars {
            out.extend(self.finish());
            return self.start(payload, now, out);
        }
        buffer.text = joined;
        self.buffered_chars = joined_chars;
        if joined_chars >= self.limits.max_chars {
            out.extend(self.finish());
        } else {
            self.arm(now);
        }
        out
    }

    /// The idle timer fired: release the buffer if it reached the low mark.
    pub fn on_idle(&mut self, now: Instant) -> Option<ReplyPayload> {
        match self.deadline {
            Some(deadline) if deadline <= now => {
                self.deadline = None;
                if self.buffered_chars >= self.limits.min_chars {
                    self.finish()
                } else {
                    None
                }
            }
            _ => None,
        }
    }

    /// Releases whatever is buffered (end of the run).
    pub fn finish(&mut self) -> Option<ReplyPayload> {
        self.deadline = None;
        self.buffered_chars = 0;
        self.buffer.take()
    }

    fn start(
        &mut self,
        payload: ReplyPayload,
        now: Instant,
        mut out: Vec<ReplyPayload>,
    ) -> Vec<ReplyPayload> {
        let chars = payload.text.chars().count();
        if chars >= self.limits.max_chars {
            out.push(payload);
            return out;
        }
        self.buffer = Some(payload);
        self.buffered_chars = chars;
        self.arm(now);
        out
    }

    fn arm(&mut self, now: Instant) {
        self.deadline = (!self.limits.idle.is_zero()).then(|| now + self.limits.idle);
    }

    /// Text-only payloads of the same kind and reply target merge.
    fn mergeable(&self, payload: &ReplyPayload) -> bool {
        let plain = payload.media_urls.is_empty() && !payload.is_error && !payload.is_reasoning;
        plain
            && self.buffer.as_ref().is_none_or(|buffer| {
                payload.reply_to_id.is_none() || buffer.reply_to_id == payload.reply_to_id
            })
    }

    /// Runs the coalescer in a task that enqueues released blocks on `dispatcher`.
    pub fn spawn(self, dispatcher: ReplyDispatcher) -> CoalescerHandle {
        let (blocks, rx) = mpsc::channel(COALESCER_QUEUE_CAPACITY);
        let task = tokio::spawn(drive(self, rx, dispatcher));
        CoalescerHandle { blocks, task }
    }
}

/// Joins two texts, collapsing whitespace at the seam when the joiner is whitespace.
fn join(left: &str, right: &str, joiner: &str) -> String {
    let left = if joiner.trim().is_empty() {
        left.trim_end()
    } else {
        left
    };
    format!("{left}{joiner}{right}")
}

async fn drive(
    mut coalescer: Coalescer,
    mut blocks: mpsc::Receiver<ReplyPayload>,
    dispatcher: ReplyDispatcher,
) {
    loop {
        let deadline = coalescer.deadline();
        let released = tokio::select! {
            block = blocks.recv() => match block {
                Some(block) => coalescer.push(block, Instant::now()),
                None => {
                    if let Some(rest) = coalescer.finish() {
                        dispatcher.enqueue(ReplyKind::Block, rest).await;
                    }
                    return;
                }
            },
            _ = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                coalescer.on_idle(Instant::now()).into_iter().collect()
            }
        };
        for payload in released {
            dispatcher.enqueue(ReplyKind::Block, payload).await;
        }
    }
}

/// Feeds a running coalescer; `finish` flushes it and waits for the task.
pub struct CoalescerHandle {
    blocks: mpsc::Sender<ReplyPayload>,
    task: JoinHandle<()>,
}

impl CoalescerHandle {
    /// Hands one block to the coalescer (waits if it is behind).
    pub async fn push(&self, block: ReplyPayload) {
        if self.blocks.send(block).await.is_err() {
            log::warn!("coalescer task ended early; block dropped");
        }
    }

    /// Flushes the remaining text into the dispatcher and ends the task.
    pub async fn finish(self) {
        drop(self.blocks);
        if let Err(err) = self.task.await {
            log::warn!("coalescer task failed: {err}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(min: usize, max: usize) -> CoalesceLimits {
        CoalesceLimits::new(
            min,
            max,
            Duration::from_millis(1000),
            BreakPreference::Paragraph,
        )
    }

    #[test]
    fn small_blocks_merge_with_one_paragraph_joiner() {
        let now = Instant::now();
        let mut coalescer = Coalescer::new(limits(10, 100));
        assert!(coalescer
            .push(ReplyPayload::text("one\n\n"), now)
            .is_empty());
        assert!(coalescer.push(ReplyPayload::text("two"), now).is_empty());
        assert_eq!(
            coalescer.finish().map(|p| p.text),
            Some("one\n\ntwo".into())
        );
    }

    #[test]
    fn idle_releases_only_past_the_low_mark() {
        let start = Instant::now();
        let mut coalescer = Coalescer::new(limits(10, 100));
        coalescer.push(ReplyPayload::text("short"), start);
        let later = start + Duration::from_millis(1000);
        assert_eq!(coalescer.on_idle(later), None);
        assert_eq!(coalescer.deadline(), None);
        coalescer.push(ReplyPayload::text("and more text"), later);
        assert_eq!(coalescer.on_idle(later + Duration::from_millis(999)), None);
        let released = coalescer.on_idle(later + Duration::from_millis(1000));
        assert_eq!(
            released.map(|p| p.text),
            Some("short\n\nand more text".into())
        );
    }

    #[test]
    fn overflow_flushes_the_buffer_and_starts_again() {
        let now = Instant::now();
        let mut coalescer = Coalescer::new(limits(5, 12));
        assert!(coalescer
            .push(ReplyPayload::text("abcdefgh"), now)
            .is_empty());
        let out = coalescer.push(ReplyPayload::text("ijklmn"), now);
        assert_eq!(out, vec![ReplyPayload::text("abcdefgh")]);
        assert_eq!(coalescer.finish().map(|p| p.text), Some("ijklmn".into()));
    }

    #[test]
    fn media_and_errors_are_never_merged() {
        let now = Instant::now();
        let mut coalescer = Coalescer::new(limits(5, 100));
        coalescer.push(ReplyPayload::text("text"), now);
        let media = ReplyPayload {
            media_urls: vec!["https://example.invalid/a.png".into()],
            ..ReplyPayload::default()
        };
        let out = coalescer.push(media.clone(), now);
        assert_eq!(out, vec![ReplyPayload::text("text"), media]);
        assert_eq!(coalescer.finish(), None);
    }

    #[test]
    fn resolve_prefers_config_then_channel_then_chunker() {
        let chunking = ChunkerLimits::default();
        let channel = ChannelCoalesceDefaults {
            min_chars: CHANNEL_COALESCE_MIN_CHARS,
            idle_ms: 1000,
        };
        let resolved = CoalesceLimits::resolve(None, Some(channel), &chunking, Some(2000));
        assert_eq!((resolved.min_chars, resolved.max_chars), (1500, 2000));
        assert_eq!(resolved.idle, Duration::from_millis(1000));
        let cfg = BlockStreamingCoalesce {
            min_chars: Some(50),
            max_chars: Some(9000),
            idle_ms: Some(250),
        };
        let resolved = CoalesceLimits::resolve(Some(&cfg), Some(channel), &chunking, Some(2000));
        assert_eq!((resolved.min_chars, resolved.max_chars), (50, 2000));
        assert_eq!(resolved.idle, Duration::from_millis(250));
        let resolved = CoalesceLimits::resolve(None, None, &chunking, None);
        assert_eq!(resolved.min_chars, chunking.min_chars);
        assert_eq!(resolved.joiner, "\n\n");
    }
}
