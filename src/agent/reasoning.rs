//! Reasoning visibility (`/reasoning on|off|stream`, the session's
//! `reasoningLevel`) and the OpenAI `reasoning_effort` each thinking level
//! asks for.
//!
//! Providers report the model's thinking as [`StreamEvent::ReasoningDelta`];
//! the [`ReasoningSink`] decides what of it leaves the agent: nothing when
//! off, [`RunEvent::ReasoningDelta`] as it arrives when streaming, one
//! [`RunEvent::ReasoningBlock`] after the answer when on. Reasoning is never
//! written to the transcript and never fed back to the model.
//!
//! [`StreamEvent::ReasoningDelta`]: super::providers::StreamEvent::ReasoningDelta

use crate::store::SessionEntry;

use super::failover::ThinkingLevel;
use super::runs::RunEvent;

/// The most reasoning text kept for one run; later thinking is dropped.
pub const MAX_REASONING_CHARS: usize = 256 * 1024;

/// Model ids (prefixes) that accept `reasoning_effort: "xhigh"`; others get
/// `"high"` for the `xhigh` level.
pub const XHIGH_MODEL_PREFIXES: [&str; 4] = ["gpt-5.1-codex-max", "gpt-5.2", "gpt-5.3", "gpt-5.4"];

/// Who sees the model's thinking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReasoningLevel {
    /// Thinking never leaves the gateway.
    #[default]
    Off,
    /// Delivered as one separate block after the answer.
    On,
    /// Streamed as it arrives.
    Stream,
}

impl ReasoningLevel {
    /// Parses `off` | `on` | `stream` (upstream also accepts `hidden` for off).
    pub fn parse(text: &str) -> Option<ReasoningLevel> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "off" | "hidden" | "false" => ReasoningLevel::Off,
            "on" | "true" | "show" => ReasoningLevel::On,
            "stream" => ReasoningLevel::Stream,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningLevel::Off => "off",
            ReasoningLevel::On => "on",
            ReasoningLevel::Stream => "stream",
        }
    }

    /// The session's level (`reasoningLevel`), off when unset or unknown.
    pub fn of_session(entry: &SessionEntry) -> ReasoningLevel {
        entry
            .reasoning_level
            .as_deref()
            .and_then(ReasoningLevel::parse)
            .unwrap_or_default()
    }
}

/// The separate reasoning block as upstream shows it: a `Reasoning:` line,
/// then each line in italics.
pub fn format_reasoning_block(text: &str) -> String {
    let lines: Vec<String> = text
        .trim()
        .lines()
        .map(|line| match line.trim() {
            "" => String::new(),
            trimmed => format!("_{trimmed}_"),
        })
        .collect();
    format!("Reasoning:\n{}", lines.join("\n"))
}

/// OpenAI's `reasoning_effort` for a thinking level: omitted when off,
/// `xhigh` only for models that accept it (else `high`).
pub fn reasoning_effort(level: ThinkingLevel, model_id: &str) -> Option<&'static str> {
    let model = model_id.rsplit('/').next().unwrap_or(model_id);
    Some(match level {
        ThinkingLevel::Off => return None,
        ThinkingLevel::Minimal => "minimal",
        ThinkingLevel::Low => "low",
        ThinkingLevel::Medium => "medium",
        ThinkingLevel::High => "high",
        ThinkingLevel::XHigh if XHIGH_MODEL_PREFIXES.iter().any(|p| model.starts_with(p)) => {
            "xhigh"
        }
        ThinkingLevel::XHigh => "high",
    })
}

/// Collects one run's thinking and turns it into run events per level.
#[derive(Debug)]
pub struct ReasoningSink {
    level: ReasoningLevel,
    text: String,
}

impl ReasoningSink {
    pub fn new(level: ReasoningLevel) -> Self {
        ReasoningSink {
            level,
            text: String::new(),
        }
    }

    /// Takes one thinking increment; returns the event to send now, if any.
    pub fn push(&mut self, delta: &str) -> Option<RunEvent> {
        if self.level == ReasoningLevel::Off || delta.is_empty() {
            return None;
        }
        if self.text.len() + delta.len() > MAX_REASONING_CHARS {
            return None;
        }
        self.text.push_str(delta);
        match self.level {
            ReasoningLevel::Stream => Some(RunEvent::ReasoningDelta {
                text: self.text.clone(),
                delta: delta.to_string(),
            }),
            _ => None,
        }
    }

    /// Marks the end of one model call (steps of a tool round stay apart).
    pub fn end_step(&mut self) {
        if !self.text.is_empty() && !self.text.ends_with("\n\n") {
            self.text.push_str("\n\n");
        }
    }

    /// The block to deliver after the answer (level on, some thinking seen).
    pub fn finish(self) -> Option<RunEvent> {
        let text = self.text.trim();
        (self.level == ReasoningLevel::On && !text.is_empty()).then(|| RunEvent::ReasoningBlock {
            text: text.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_drops_everything_stream_forwards_on_keeps_for_the_end() {
        let mut off = ReasoningSink::new(ReasoningLevel::Off);
        assert_eq!(off.push("secret"), None);
        assert_eq!(off.finish(), None);

        let mut stream = ReasoningSink::new(ReasoningLevel::Stream);
        assert_eq!(
            stream.push("a"),
            Some(RunEvent::ReasoningDelta {
                text: "a".into(),
                delta: "a".into()
            })
        );
        assert_eq!(
            stream.push("b"),
            Some(RunEvent::ReasoningDelta {
                text: "ab".into(),
                delta: "b".into()
            })
        );
        assert_eq!(stream.finish(), None, "already delivered");

        let mut on = ReasoningSink::new(ReasoningLevel::On);
        assert_eq!(on.push("first step"), None);
        on.end_step();
        assert_eq!(on.push("second"), None);
        on.end_step();
        assert_eq!(
            on.finish(),
            Some(RunEvent::ReasoningBlock {
                text: "first step\n\nsecond".into()
            })
        );
    }

    #[test]
    fn reasoning_is_bounded() {
        let mut on = ReasoningSink::new(ReasoningLevel::On);
        let chunk = "x".repeat(1024);
        for _ in 0..(MAX_REASONING_CHARS / 1024 + 10) {
            on.push(&chunk);
        }
        match on.finish() {
            Some(RunEvent::ReasoningBlock { text }) => assert!(text.len() <= MAX_REASONING_CHARS),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn effort_follows_the_thinking_level_and_xhigh_needs_a_model_that_has_it() {
        assert_eq!(reasoning_effort(ThinkingLevel::Off, "gpt-5"), None);
        assert_eq!(
            reasoning_effort(ThinkingLevel::Minimal, "gpt-5"),
            Some("minimal")
        );
        assert_eq!(reasoning_effort(ThinkingLevel::Low, "o3"), Some("low"));
        assert_eq!(
            reasoning_effort(ThinkingLevel::Medium, "gpt-5"),
            Some("medium")
        );
        assert_eq!(reasoning_effort(ThinkingLevel::High, "gpt-5"), Some("high"));
        assert_eq!(
            reasoning_effort(ThinkingLevel::XHigh, "gpt-5"),
            Some("high")
        );
        assert_eq!(
            reasoning_effort(ThinkingLevel::XHigh, "openai/gpt-5.2-pro"),
            Some("xhigh")
        );
    }

    #[test]
    fn levels_parse_and_the_block_is_formatted_as_upstream() {
        assert_eq!(
            ReasoningLevel::parse("Stream"),
            Some(ReasoningLevel::Stream)
        );
        assert_eq!(ReasoningLevel::parse("on"), Some(ReasoningLevel::On));
        assert_eq!(ReasoningLevel::parse("off"), Some(ReasoningLevel::Off));
        assert_eq!(ReasoningLevel::parse("loud"), None);
        assert_eq!(
            format_reasoning_block("step one\n\nstep two\n"),
            "Reasoning:\n_step one_\n\n_step two_"
        );
    }
}
