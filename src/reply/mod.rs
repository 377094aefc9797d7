//! Layer 6, the reply path: from an agent run's text deltas and tool events to
//! ordered, well-sized payloads for a channel (DESIGN.md).
//!
//! - [`chunker`]: `BlockChunker` cuts streamed text into blocks between low
//!   and high water marks without breaking code fences.
//! - [`coalescer`]: `Coalescer` merges small blocks until idle or full.
//! - [`delay`]: `HumanDelay` paces block replies (never before the first).
//! - [`dispatcher`]: `ReplyDispatcher` sends tool results, blocks and the final
//!   reply strictly in order and signals idle exactly once;
//!   `DispatcherRegistry` lets graceful shutdown wait for every dispatcher.
//! - [`shape`]: silent-token dropping, messaging-tool de-duplication, the
//!   tool-error fallback and reasoning visibility.
//! - [`media_lines`]: `MEDIA:` lines and `[[audio_as_voice]]`;
//!   [`tts_tags`]: the `[[tts…]]` tags of spoken replies.
//!
//! This layer knows channel limits (numbers) and nothing else about platforms:
//! delivery goes through the [`dispatcher::ReplySink`] trait.

pub mod chunker;
pub mod coalescer;
pub mod delay;
pub mod dispatcher;
pub(crate) mod fences;
pub mod media_lines;
pub mod shape;
pub mod tts_tags;

pub use chunker::{chunk_text, BlockChunker, ChunkerLimits};
pub use coalescer::{CoalesceLimits, Coalescer, CoalescerHandle};
pub use delay::HumanDelay;
pub use dispatcher::{
    DispatchOutcome, DispatcherOptions, DispatcherRegistry, ReplyDispatcher, ReplySink, SinkError,
};
pub use shape::{finalize, FinishedRun, ShapeOptions, SkipReason, ToolFailure};

/// Which part of a run a payload comes from; the dispatcher keeps their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyKind {
    /// A tool result or tool summary shown to the user.
    Tool,
    /// A streamed block of the assistant's reply.
    Block,
    /// The final reply of the run.
    Final,
}

/// One outbound reply, before any platform formatting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyPayload {
    pub text: String,
    /// Attachments to send with (or instead of) the text.
    pub media_urls: Vec<String>,
    /// Audio attachments go as voice notes (`[[audio_as_voice]]`).
    pub audio_as_voice: bool,
    /// Platform message id this reply answers, when threading.
    pub reply_to_id: Option<String>,
    /// An error notice rather than an answer.
    pub is_error: bool,
    /// Model reasoning, shown only where the channel can display it.
    pub is_reasoning: bool,
}

impl ReplyPayload {
    /// A plain text reply.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// True when there is nothing to send (blank text, no media).
    pub fn is_empty(&self) -> bool {
        self.text.trim().is_empty() && self.media_urls.is_empty()
    }
}
