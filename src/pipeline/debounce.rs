//! Inbound debounce: rapid text messages from one sender in one session are
//! held for `messages.inbound.debounceMs` (per-channel overrides) and
//! released as one message joined by newlines. Media flush at once (with
//! whatever text was held), control commands bypass the buffer, and 0
//! disables debouncing.
//!
//! Pure bookkeeping driven by the caller's clock: no timers, no platform.

use std::collections::HashMap;

/// Most texts held per key before a forced flush.
pub const MAX_DEBOUNCE_ITEMS: usize = 50;

struct Held {
    texts: Vec<String>,
    flush_at_ms: u64,
}

/// What to do with one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DebounceStep {
    /// Process this text now (possibly merged with held ones).
    Release(String),
    /// Held; call `due` after `flush_at_ms`.
    Held { flush_at_ms: u64 },
}

#[derive(Default)]
pub struct InboundDebouncer {
    held: HashMap<String, Held>,
}

impl InboundDebouncer {
    pub fn new() -> InboundDebouncer {
        InboundDebouncer::default()
    }

    /// Offers one message for `key` (channel + session).
    pub fn offer(
        &mut self,
        key: &str,
        text: &str,
        has_media: bool,
        is_command: bool,
        debounce_ms: u64,
        now_ms: u64,
    ) -> DebounceStep {
        if is_command {
            return DebounceStep::Release(text.to_string());
        }
        if debounce_ms == 0 || has_media {
            let mut texts = self.held.remove(key).map(|h| h.texts).unwrap_or_default();
            texts.push(text.to_string());
            return DebounceStep::Release(join(&texts));
        }
        let held = self.held.entry(key.to_string()).or_insert(Held {
            texts: Vec::new(),
            flush_at_ms: 0,
        });
        held.texts.push(text.to_string());
        held.flush_at_ms = now_ms + debounce_ms;
        if held.texts.len() >= MAX_DEBOUNCE_ITEMS {
            let texts = self.held.remove(key).map(|h| h.texts).unwrap_or_default();
            return DebounceStep::Release(join(&texts));
        }
        DebounceStep::Held {
            flush_at_ms: now_ms + debounce_ms,
        }
    }

    /// Every key whose quiet period ended, with its merged text.
    pub fn due(&mut self, now_ms: u64) -> Vec<(String, String)> {
        let keys: Vec<String> = self
            .held
            .iter()
            .filter(|(_, h)| h.flush_at_ms <= now_ms)
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| self.held.remove(&k).map(|h| (k, join(&h.texts))))
            .collect()
    }

    /// Keys currently holding messages.
    pub fn held_keys(&self) -> usize {
        self.held.len()
    }
}

fn join(texts: &[String]) -> String {
    texts
        .iter()
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}
