//! The messages waiting for a busy session: a FIFO bounded by `cap` with
//! upstream's drop policies (old: drop the oldest; new: refuse the newcomer;
//! summarize: drop the oldest and keep a one-line summary of each, itself
//! bounded by `cap`), and the prompts built from it: collect mode's
//! `[Queued messages while agent was busy]` batch and the overflow summary.
//!
//! Pure data: this file must not spawn tasks or know about channels.

use std::collections::VecDeque;

use crate::config::schema::messages::QueueDrop;

use super::QueuedMessage;

/// Longest summary line kept for a dropped message, in characters.
pub const MAX_SUMMARY_LINE_CHARS: usize = 160;
/// Header of a collect-mode batch (upstream's wording).
pub const COLLECT_HEADER: &str = "[Queued messages while agent was busy]";

/// What happened to a pushed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    Queued,
    /// Queued after dropping this many older messages.
    QueuedDroppingOld(usize),
    /// Refused: the queue is full and the policy is `new`.
    Refused,
}

/// The bounded waiting list of one session.
#[derive(Default)]
pub struct PendingQueue {
    items: VecDeque<QueuedMessage>,
    dropped_count: u64,
    summary_lines: VecDeque<String>,
}

impl PendingQueue {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty() && self.dropped_count == 0
    }

    /// Summary lines held for dropped messages.
    pub fn summary_len(&self) -> usize {
        self.summary_lines.len()
    }

    /// Messages dropped (policy summarize) since the last turn was taken.
    pub fn dropped_count(&self) -> u64 {
        self.dropped_count
    }

    /// Appends `message`, applying `drop` when `cap` is reached.
    pub fn push(&mut self, message: QueuedMessage, cap: usize, drop: QueueDrop) -> PushOutcome {
        let cap = cap.max(1);
        if self.items.len() < cap {
            self.items.push_back(message);
            return PushOutcome::Queued;
        }
        if drop == QueueDrop::New {
            return PushOutcome::Refused;
        }
        let mut dropped = 0;
        while self.items.len() >= cap {
            let Some(old) = self.items.pop_front() else {
                break;
            };
            dropped += 1;
            if drop == QueueDrop::Summarize {
                self.dropped_count += 1;
                self.summary_lines.push_back(summary_line(&old.text));
                while self.summary_lines.len() > cap {
                    self.summary_lines.pop_front();
                }
            }
        }
        self.items.push_back(message);
        PushOutcome::QueuedDroppingOld(dropped)
    }

    /// Puts messages back at the front (a steer that was never consumed).
    pub fn push_front_all(&mut self, messages: Vec<QueuedMessage>) {
        for message in messages.into_iter().rev() {
            self.items.push_front(message);
        }
    }

    /// Empties the queue (interrupt mode); returns how many were dropped.
    pub fn clear(&mut self) -> usize {
        let n = self.items.len();
        self.items.clear();
        self.summary_lines.clear();
        self.dropped_count = 0;
        n
    }

    /// The next turn: every waiting message (`collect`) or just the oldest.
    pub fn take_turn(&mut self, collect: bool) -> Option<QueuedTurn> {
        let summary = self.take_summary();
        let messages: Vec<QueuedMessage> = if collect {
            self.items.drain(..).collect()
        } else {
            self.items.pop_front().into_iter().collect()
        };
        if messages.is_empty() && summary.is_none() {
            return None;
        }
        let body = if collect && messages.len() > 1 {
            collect_prompt(&messages)
        } else {
            messages
                .iter()
                .map(|m| m.text.as_str())
                .collect::<Vec<_>>()
                .join("\n\n")
        };
        let prompt = match summary {
            Some(summary) if body.is_empty() => summary,
            Some(summary) => format!("{summary}\n\n{body}"),
            None => body,
        };
        Some(QueuedTurn { prompt, messages })
    }

    fn take_summary(&mut self) -> Option<String> {
        if self.dropped_count == 0 {
            return None;
        }
        let count = self.dropped_count;
        self.dropped_count = 0;
        let plural = if count == 1 { "" } else { "s" };
        let mut text = format!("[Queue overflow] Dropped {count} message{plural} due to cap.");
        if !self.summary_lines.is_empty() {
            text.push_str("\nSummary:");
            for line in self.summary_lines.drain(..) {
                text.push_str("\n- ");
                text.push_str(&line);
            }
        }
        Some(text)
    }
}

/// A turn taken from the queue: the prompt and the messages it answers.
pub struct QueuedTurn {
    pub prompt: String,
    pub messages: Vec<QueuedMessage>,
}

/// Upstream's collect format: a header, then `---` / `Queued #n` / text.
pub fn collect_prompt(messages: &[QueuedMessage]) -> String {
    let mut out = String::from(COLLECT_HEADER);
    for (i, message) in messages.iter().enumerate() {
        out.push_str(&format!("\n\n---\nQueued #{}\n{}", i + 1, message.text));
    }
    out
}

/// Whitespace folded to single spaces, cut to `MAX_SUMMARY_LINE_CHARS`.
pub fn summary_line(text: &str) -> String {
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if folded.chars().count() <= MAX_SUMMARY_LINE_CHARS {
        return folded;
    }
    let cut: String = folded.chars().take(MAX_SUMMARY_LINE_CHARS - 1).collect();
    format!("{}…", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str) -> QueuedMessage {
        QueuedMessage::new(text, text)
    }

    #[test]
    fn collect_batch_uses_upstream_format() {
        let prompt = collect_prompt(&[msg("one"), msg("two")]);
        assert_eq!(
            prompt,
            "[Queued messages while agent was busy]\n\n---\nQueued #1\none\n\n---\nQueued #2\ntwo"
        );
    }

    #[test]
    fn summary_lines_are_folded_and_elided() {
        assert_eq!(summary_line("a\n  b\tc"), "a b c");
        let long = "x".repeat(400);
        let line = summary_line(&long);
        assert_eq!(line.chars().count(), MAX_SUMMARY_LINE_CHARS);
        assert!(line.ends_with('…'));
    }
}
