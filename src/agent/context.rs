//! The context window and what fits in it: resolving the window of a model
//! (config override → model catalog → default), the guard that refuses models
//! too small to run an agent, cache-ttl pruning of old tool results, and the
//! tool-result guard (one result at most half the window, all tool output at
//! most 75 % of it).
//!
//! Everything here works on in-memory prompt messages only: it never rewrites
//! the transcript and never calls a provider. Sizes are estimated at four
//! characters per token, as OpenClaw does.

use crate::config::duration::{parse_duration_ms, DurationUnit};
use crate::config::{Config, ContextPruningConfig, ContextPruningMode};

use super::providers::{ChatMessage, Role};

/// Characters per token for estimates.
pub const CHARS_PER_TOKEN: usize = 4;
/// The window assumed when neither config nor catalog names one.
pub const DEFAULT_CONTEXT_TOKENS: u32 = 200_000;
/// Below this many tokens a model cannot run an agent: the run is refused.
pub const CONTEXT_WINDOW_HARD_MIN_TOKENS: u32 = 16_000;
/// Below this many tokens a run goes ahead with a warning in the log.
pub const CONTEXT_WINDOW_WARN_BELOW_TOKENS: u32 = 32_000;
/// One tool result may fill at most this share of the window.
pub const SINGLE_TOOL_RESULT_SHARE: f64 = 0.5;
/// All tool results together may fill at most this share of the window.
pub const TOOL_OUTPUT_BUDGET_SHARE: f64 = 0.75;
/// What replaces a tool result compacted by the budget.
pub const COMPACTED_TOOL_RESULT: &str = "[compacted: tool output removed to free context]";

/// Pruning defaults (OpenClaw's cache-ttl profile).
pub const DEFAULT_PRUNE_TTL_MS: u64 = 5 * 60 * 1000;
pub const DEFAULT_KEEP_LAST_ASSISTANTS: usize = 3;
pub const DEFAULT_SOFT_TRIM_RATIO: f64 = 0.3;
pub const DEFAULT_HARD_CLEAR_RATIO: f64 = 0.5;
pub const DEFAULT_MIN_PRUNABLE_TOOL_CHARS: usize = 50_000;
pub const DEFAULT_SOFT_TRIM_MAX_CHARS: usize = 4_000;
pub const DEFAULT_SOFT_TRIM_HEAD_CHARS: usize = 1_500;
pub const DEFAULT_SOFT_TRIM_TAIL_CHARS: usize = 1_500;
pub const DEFAULT_HARD_CLEAR_PLACEHOLDER: &str = "[Old tool result content cleared]";

/// Where a context window figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSource {
    /// `agents.defaults.contextTokens`.
    Config,
    /// `models.providers.<p>.models[].contextWindow`.
    Catalog,
    Default,
}

/// The resolved window of the model a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextWindow {
    pub tokens: u32,
    pub source: WindowSource,
}

impl ContextWindow {
    /// The window in estimated characters.
    pub fn chars(&self) -> usize {
        self.tokens as usize * CHARS_PER_TOKEN
    }
}

/// Why a run cannot start with this window.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    #[error("the context window of {model} is {tokens} tokens (from {origin:?}); agents need at least {CONTEXT_WINDOW_HARD_MIN_TOKENS}: pick a larger model or raise agents.defaults.contextTokens")]
    WindowTooSmall {
        model: String,
        tokens: u32,
        origin: WindowSource,
    },
}

/// The window: config override, else the model catalog, else the default.
pub fn resolve_window(config: &Config, catalog_tokens: Option<u32>) -> ContextWindow {
    if let Some(tokens) = config.agents.defaults.context_tokens.filter(|t| *t > 0) {
        return ContextWindow {
            tokens,
            source: WindowSource::Config,
        };
    }
    match catalog_tokens.filter(|t| *t > 0) {
        Some(tokens) => ContextWindow {
            tokens,
            source: WindowSource::Catalog,
        },
        None => ContextWindow {
            tokens: DEFAULT_CONTEXT_TOKENS,
            source: WindowSource::Default,
        },
    }
}

/// Refuses a window below the hard minimum; warns below the soft one.
pub fn guard_window(model: &str, window: ContextWindow) -> Result<(), ContextError> {
    if window.tokens < CONTEXT_WINDOW_HARD_MIN_TOKENS {
        return Err(ContextError::WindowTooSmall {
            model: model.to_string(),
            tokens: window.tokens,
            origin: window.source,
        });
    }
    if window.tokens < CONTEXT_WINDOW_WARN_BELOW_TOKENS {
        log::warn!(
            "the context window of {model} is only {} tokens; below {CONTEXT_WINDOW_WARN_BELOW_TOKENS} long sessions compact often",
            window.tokens
        );
    }
    Ok(())
}

/// Estimated characters of one message (content plus tool-call arguments).
pub fn message_chars(message: &ChatMessage) -> usize {
    message.content.len()
        + message
            .tool_calls
            .iter()
            .map(|c| c.arguments.len() + c.name.len())
            .sum::<usize>()
}

/// Estimated tokens of a prompt.
pub fn estimate_tokens(messages: &[ChatMessage]) -> usize {
    messages.iter().map(message_chars).sum::<usize>() / CHARS_PER_TOKEN
}

/// Cuts `text` to at most `max_bytes`, on a character boundary.
pub fn cut_at(text: &str, max_bytes: usize) -> &str {
    let mut end = max_bytes.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The last `max_bytes` of `text`, on a character boundary.
fn tail_of(text: &str, max_bytes: usize) -> &str {
    let mut start = text.len().saturating_sub(max_bytes);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Caps one tool result at half the window, saying how much was cut.
pub fn cap_tool_result(text: String, window: ContextWindow) -> String {
    let max = (window.chars() as f64 * SINGLE_TOOL_RESULT_SHARE) as usize;
    if text.len() <= max {
        return text;
    }
    let note = format!(
        "\n…[tool result cut: {} of {} bytes kept to fit the context window]",
        max,
        text.len()
    );
    format!("{}{note}", cut_at(&text, max.saturating_sub(note.len())))
}

/// Keeps all tool output within 75 % of the window by replacing the oldest
/// results with a placeholder. Returns how many results were compacted.
pub fn enforce_tool_budget(messages: &mut [ChatMessage], window: ContextWindow) -> usize {
    let budget = (window.chars() as f64 * TOOL_OUTPUT_BUDGET_SHARE) as usize;
    let mut total: usize = messages
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.len())
        .sum();
    let mut compacted = 0;
    for message in messages.iter_mut().filter(|m| m.role == Role::Tool) {
        if total <= budget {
            break;
        }
        if message.content == COMPACTED_TOOL_RESULT {
            continue;
        }
        total = total - message.content.len() + COMPACTED_TOOL_RESULT.len();
        message.content = COMPACTED_TOOL_RESULT.to_string();
        compacted += 1;
    }
    compacted
}

/// Effective pruning settings (config over OpenClaw's cache-ttl defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct PruningSettings {
    pub enabled: bool,
    pub ttl_ms: u64,
    pub keep_last_assistants: usize,
    pub soft_trim_ratio: f64,
    pub hard_clear_ratio: f64,
    pub min_prunable_tool_chars: usize,
    pub soft_trim_max_chars: usize,
    pub soft_trim_head_chars: usize,
    pub soft_trim_tail_chars: usize,
    pub hard_clear_enabled: bool,
    pub hard_clear_placeholder: String,
}

impl Default for PruningSettings {
    fn default() -> Self {
        PruningSettings {
            enabled: true,
            ttl_ms: DEFAULT_PRUNE_TTL_MS,
            keep_last_assistants: DEFAULT_KEEP_LAST_ASSISTANTS,
            soft_trim_ratio: DEFAULT_SOFT_TRIM_RATIO,
            hard_clear_ratio: DEFAULT_HARD_CLEAR_RATIO,
            min_prunable_tool_chars: DEFAULT_MIN_PRUNABLE_TOOL_CHARS,
            soft_trim_max_chars: DEFAULT_SOFT_TRIM_MAX_CHARS,
            soft_trim_head_chars: DEFAULT_SOFT_TRIM_HEAD_CHARS,
            soft_trim_tail_chars: DEFAULT_SOFT_TRIM_TAIL_CHARS,
            hard_clear_enabled: true,
            hard_clear_placeholder: DEFAULT_HARD_CLEAR_PLACEHOLDER.to_string(),
        }
    }
}

impl PruningSettings {
    /// `agents.defaults.contextPruning` over the defaults.
    pub fn from_config(config: Option<&ContextPruningConfig>) -> PruningSettings {
        let mut s = PruningSettings::default();
        let Some(c) = config else { return s };
        s.enabled = c.mode != Some(ContextPruningMode::Off);
        if let Some(ttl) = c.ttl.as_deref() {
            match parse_duration_ms(ttl, DurationUnit::Minutes) {
                Ok(ms) => s.ttl_ms = ms,
                Err(e) => log::warn!("agents.defaults.contextPruning.ttl: {e}; using 5m"),
            }
        }
        let ratio = |v: Option<f64>, d: f64| v.filter(|r| (0.0..=1.0).contains(r)).unwrap_or(d);
        s.keep_last_assistants = c
            .keep_last_assistants
            .map_or(s.keep_last_assistants, |n| n as usize);
        s.soft_trim_ratio = ratio(c.soft_trim_ratio, s.soft_trim_ratio);
        s.hard_clear_ratio = ratio(c.hard_clear_ratio, s.hard_clear_ratio);
        s.min_prunable_tool_chars = c
            .min_prunable_tool_chars
            .map_or(s.min_prunable_tool_chars, |n| n as usize);
        if let Some(t) = &c.soft_trim {
            s.soft_trim_max_chars = t.max_chars.map_or(s.soft_trim_max_chars, |n| n as usize);
            s.soft_trim_head_chars = t.head_chars.map_or(s.soft_trim_head_chars, |n| n as usize);
            s.soft_trim_tail_chars = t.tail_chars.map_or(s.soft_trim_tail_chars, |n| n as usize);
        }
        if let Some(h) = &c.hard_clear {
            s.hard_clear_enabled = h.enabled.unwrap_or(true);
            if let Some(p) = &h.placeholder {
                s.hard_clear_placeholder = p.clone();
            }
        }
        s
    }

    /// Whether the provider's prompt cache has expired since `last_call_ms`
    /// (no earlier call: nothing is cached), so rewriting the prefix is free.
    pub fn due(&self, last_call_ms: Option<u64>, now_ms: u64) -> bool {
        self.enabled && last_call_ms.is_none_or(|last| now_ms.saturating_sub(last) >= self.ttl_ms)
    }
}

/// What one pruning pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PruneReport {
    pub soft_trimmed: usize,
    pub hard_cleared: usize,
}

/// Prunes old tool results in place: tool results before the last
/// `keep_last_assistants` assistant messages (and after the first user
/// message) are soft-trimmed to head + tail once the prompt fills
/// `soft_trim_ratio` of the window, then cleared with the placeholder while it
/// still fills `hard_clear_ratio`.
pub fn prune(
    messages: &mut [ChatMessage],
    window: ContextWindow,
    settings: &PruningSettings,
) -> PruneReport {
    let mut report = PruneReport::default();
    let window_chars = window.chars().max(1) as f64;
    let mut total: usize = messages.iter().map(message_chars).sum();
    if (total as f64) / window_chars < settings.soft_trim_ratio {
        return report;
    }
    let prunable = prunable_range(messages, settings.keep_last_assistants);
    for message in &mut messages[prunable.clone()] {
        if message.role != Role::Tool || message.content.len() <= settings.soft_trim_max_chars {
            continue;
        }
        let before = message.content.len();
        message.content = soft_trim(&message.content, settings);
        total = total - before + message.content.len();
        report.soft_trimmed += 1;
    }
    if (total as f64) / window_chars < settings.hard_clear_ratio || !settings.hard_clear_enabled {
        return report;
    }
    let prunable_chars: usize = messages[prunable.clone()]
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.len())
        .sum();
    if prunable_chars < settings.min_prunable_tool_chars {
        return report;
    }
    for message in &mut messages[prunable] {
        if (total as f64) / window_chars < settings.hard_clear_ratio {
            break;
        }
        if message.role != Role::Tool || message.content == settings.hard_clear_placeholder {
            continue;
        }
        total = total - message.content.len() + settings.hard_clear_placeholder.len();
        message.content = settings.hard_clear_placeholder.clone();
        report.hard_cleared += 1;
    }
    report
}

/// The index range whose tool results may be pruned.
fn prunable_range(messages: &[ChatMessage], keep_last_assistants: usize) -> std::ops::Range<usize> {
    let start = messages
        .iter()
        .position(|m| m.role == Role::User)
        .map_or(messages.len(), |i| i + 1);
    let mut end = messages.len();
    let mut seen = 0;
    for (i, m) in messages.iter().enumerate().rev() {
        if m.role == Role::Assistant {
            seen += 1;
            if seen >= keep_last_assistants {
                end = i;
                break;
            }
        }
    }
    if seen < keep_last_assistants {
        end = start;
    }
    start.min(end)..end
}

fn soft_trim(text: &str, settings: &PruningSettings) -> String {
    let head = cut_at(text, settings.soft_trim_head_chars);
    let tail = tail_of(text, settings.soft_trim_tail_chars);
    format!(
        "{head}\n...\n{tail}\n\n[Tool result trimmed: kept the first {} and last {} of {} chars.]",
        head.len(),
        tail.len(),
        text.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(tokens: u32) -> ContextWindow {
        ContextWindow {
            tokens,
            source: WindowSource::Config,
        }
    }

    #[test]
    fn window_prefers_config_then_catalog_then_default() {
        let mut config = Config::default();
        assert_eq!(resolve_window(&config, None).tokens, DEFAULT_CONTEXT_TOKENS);
        assert_eq!(
            resolve_window(&config, Some(64_000)).source,
            WindowSource::Catalog
        );
        config.agents.defaults.context_tokens = Some(20_000);
        assert_eq!(resolve_window(&config, Some(64_000)), window(20_000));
    }

    #[test]
    fn guard_refuses_below_the_hard_minimum_only() {
        assert!(guard_window("m", window(15_999)).is_err());
        assert!(guard_window("m", window(16_000)).is_ok());
        assert!(guard_window("m", window(20_000)).is_ok());
    }

    #[test]
    fn one_tool_result_is_capped_at_half_the_window() {
        let capped = cap_tool_result("x".repeat(100_000), window(16_000));
        assert!(capped.len() <= 32_000, "{}", capped.len());
        assert!(capped.contains("tool result cut"));
        assert_eq!(cap_tool_result("short".into(), window(16_000)), "short");
    }

    #[test]
    fn tool_budget_compacts_the_oldest_results_first() {
        let mut messages = vec![
            ChatMessage::user("q"),
            ChatMessage::tool_result("a", "a".repeat(30_000)),
            ChatMessage::tool_result("b", "b".repeat(30_000)),
            ChatMessage::tool_result("c", "c".repeat(30_000)),
        ];
        // 16k tokens = 64k chars; budget 48k chars.
        assert_eq!(enforce_tool_budget(&mut messages, window(16_000)), 2);
        assert_eq!(messages[1].content, COMPACTED_TOOL_RESULT);
        assert_eq!(messages[2].content, COMPACTED_TOOL_RESULT);
        assert_eq!(messages[3].content.len(), 30_000);
    }

    fn round(id: &str, size: usize) -> Vec<ChatMessage> {
        let mut call = ChatMessage::assistant("");
        call.tool_calls.push(super::super::providers::ToolCall {
            id: id.into(),
            name: "read".into(),
            arguments: "{}".into(),
        });
        vec![call, ChatMessage::tool_result(id, "r".repeat(size))]
    }

    #[test]
    fn pruning_soft_trims_old_results_and_spares_the_last_assistants() {
        let mut messages = vec![ChatMessage::system("s"), ChatMessage::user("q")];
        for id in ["a", "b", "c", "d"] {
            messages.extend(round(id, 10_000));
        }
        let settings = PruningSettings {
            hard_clear_enabled: false,
            ..PruningSettings::default()
        };
        // 40k chars of 100k-char window: ratio 0.4 ≥ 0.3.
        let report = prune(&mut messages, window(25_000), &settings);
        // Only round "a" lies before the third-to-last assistant.
        assert_eq!(report.soft_trimmed, 1);
        assert!(messages[3].content.starts_with(&"r".repeat(1_500)));
        assert!(messages[3].content.contains("[Tool result trimmed"));
        assert_eq!(messages[5].content.len(), 10_000);
        assert_eq!(messages[7].content.len(), 10_000);
        assert_eq!(messages[9].content.len(), 10_000);
    }

    #[test]
    fn pruning_hard_clears_when_trimming_is_not_enough() {
        let mut messages = vec![ChatMessage::user("q")];
        for id in ["a", "b", "c", "d", "e", "f"] {
            messages.extend(round(id, 3_900));
        }
        messages.push(ChatMessage::user("u".repeat(20_000)));
        let settings = PruningSettings {
            min_prunable_tool_chars: 1_000,
            ..PruningSettings::default()
        };
        let report = prune(&mut messages, window(10_000), &settings);
        assert_eq!(report.soft_trimmed, 0);
        assert!(report.hard_cleared >= 1);
        assert_eq!(messages[2].content, DEFAULT_HARD_CLEAR_PLACEHOLDER);
    }

    #[test]
    fn pruning_leaves_a_small_prompt_alone_and_waits_for_the_ttl() {
        let mut messages = vec![ChatMessage::user("q")];
        messages.extend(round("a", 5_000));
        let before = messages.clone();
        assert_eq!(
            prune(&mut messages, window(200_000), &PruningSettings::default()),
            PruneReport::default()
        );
        assert_eq!(messages, before);
        let settings = PruningSettings::default();
        assert!(!settings.due(Some(1_000), 1_000 + DEFAULT_PRUNE_TTL_MS - 1));
        assert!(settings.due(Some(1_000), 1_000 + DEFAULT_PRUNE_TTL_MS));
        assert!(settings.due(None, 0));
    }
}
