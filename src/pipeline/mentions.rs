//! Mention patterns: `messages.groupChat.mentionPatterns` (or an agent's own
//! `groupChat.mentionPatterns`, which replaces the global list when set)
//! are case-insensitive regular expressions; a group message whose text
//! matches one counts as mentioning the bot, as upstream's
//! `matchesMentionPatterns` (zero-width and direction marks removed, text
//! lower-cased).
//!
//! This file compiles and matches; it must not decide whether a message
//! is answered (`access.rs` does, with the result).

use regex_lite::{Regex, RegexBuilder};

use crate::config::schema::common::{MAX_MENTION_PATTERNS, MAX_MENTION_PATTERN_BYTES};
use crate::config::Config;

/// The compiled mention patterns of one agent.
#[derive(Debug, Default)]
pub struct MentionPatterns {
    regexes: Vec<Regex>,
}

impl MentionPatterns {
    /// The agent's list when it has one, else `messages.groupChat`'s.
    pub fn for_agent(config: &Config, agent_id: &str) -> MentionPatterns {
        let own = config
            .agents
            .list
            .iter()
            .find(|agent| agent.id == agent_id)
            .and_then(|agent| agent.group_chat.as_ref())
            .and_then(|group_chat| group_chat.mention_patterns.as_ref());
        let patterns = own
            .or(config.messages.group_chat.mention_patterns.as_ref())
            .map(Vec::as_slice)
            .unwrap_or_default();
        MentionPatterns::compile(patterns)
    }

    /// Compiles `patterns` (validation refused bad ones at load; one that
    /// still fails is skipped with a warning).
    pub fn compile(patterns: &[String]) -> MentionPatterns {
        let regexes = patterns
            .iter()
            .take(MAX_MENTION_PATTERNS)
            .filter_map(|pattern| {
                RegexBuilder::new(pattern)
                    .case_insensitive(true)
                    .size_limit(MAX_MENTION_PATTERN_BYTES)
                    .build()
                    .map_err(|e| log::warn!("mention pattern {pattern:?} skipped: {e}"))
                    .ok()
            })
            .collect();
        MentionPatterns { regexes }
    }

    pub fn is_empty(&self) -> bool {
        self.regexes.is_empty()
    }

    /// Whether `text` matches one of the patterns.
    pub fn matches(&self, text: &str) -> bool {
        if self.regexes.is_empty() {
            return false;
        }
        let cleaned: String = text
            .chars()
            .filter(|c| !is_invisible_mark(*c))
            .collect::<String>()
            .to_lowercase();
        !cleaned.is_empty() && self.regexes.iter().any(|re| re.is_match(&cleaned))
    }
}

/// Zero-width characters and direction marks (U+200B–U+200F,
/// U+202A–U+202E, U+2060–U+206F) that would split a name in two.
fn is_invisible_mark(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{206f}')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patterns(list: &[&str]) -> MentionPatterns {
        MentionPatterns::compile(&list.iter().map(|p| p.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn patterns_match_case_insensitively_across_invisible_marks() {
        let mentions = patterns(&[r"\bclaw(d)?\b"]);
        assert!(mentions.matches("hey CLAWD, what's up"));
        assert!(mentions.matches("hey cl\u{200b}aw?"));
        assert!(!mentions.matches("clawing at the door"));
        assert!(!patterns(&[]).matches("claw"));
    }

    #[test]
    fn an_agents_own_list_replaces_the_global_one() {
        let config = crate::config::parse_str(
            r#"{ messages: { groupChat: { mentionPatterns: ["global"] } },
                 agents: { list: [ { id: "main" }, { id: "work", groupChat: { mentionPatterns: ["office"] } },
                                   { id: "quiet", groupChat: { mentionPatterns: [] } } ] } }"#,
            "test",
        )
        .expect("config");
        let main = MentionPatterns::for_agent(&config, "main");
        assert!(main.matches("hello GLOBAL"));
        let work = MentionPatterns::for_agent(&config, "work");
        assert!(work.matches("office hours") && !work.matches("global"));
        assert!(MentionPatterns::for_agent(&config, "quiet").is_empty());
    }
}
