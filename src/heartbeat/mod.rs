//! The heartbeat: every `heartbeat.every` (30 min by default) an agent's main session gets a turn asking it
//! to follow its HEARTBEAT.md. A reply that is only the `HEARTBEAT_OK` token (or carries it at its start or
//! end with at most `ackMaxChars` of other text) is an acknowledgement and is swallowed; anything else is
//! delivered to the heartbeat's target. Heartbeats keep to their `activeHours` window and are skipped while
//! HEARTBEAT.md exists but holds no task (only headings, blank lines and empty list items).
//!
//! This file holds the rules as pure functions after OpenClaw's `auto-reply/heartbeat.ts` (restated);
//! `hours.rs` the active-hours window; `runner.rs` the schedule and one heartbeat's run. Nothing here talks
//! to gateway connections or channels: the runner's host delivers.

pub mod hours;
pub mod runner;
pub mod session;

pub use runner::{HeartbeatHost, HeartbeatRunner, HeartbeatTarget, WakeReason};

/// The token a model answers with when nothing needs attention.
pub const HEARTBEAT_TOKEN: &str = "HEARTBEAT_OK";
/// Characters of other text allowed beside the token before a reply counts as a message (upstream's 300).
pub const DEFAULT_ACK_MAX_CHARS: usize = 300;
/// The file the heartbeat asks the agent to follow, in its workspace.
pub const HEARTBEAT_FILE: &str = "HEARTBEAT.md";
/// What the agent is asked when no `heartbeat.prompt` is configured: read HEARTBEAT.md and do what it
/// says, without reviving old tasks from the conversation, and answer with the token when nothing needs
/// attention.
pub const DEFAULT_HEARTBEAT_PROMPT: &str = "Heartbeat check. If HEARTBEAT.md exists in your workspace, read it and follow its instructions exactly. Do not bring back or repeat tasks from earlier conversations on your own. If nothing needs attention right now, answer with HEARTBEAT_OK and nothing else.";

/// The prompt in force: the configured one unless blank.
pub fn heartbeat_prompt(configured: Option<&str>) -> String {
    configured
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .unwrap_or(DEFAULT_HEARTBEAT_PROMPT)
        .to_string()
}

/// Whether HEARTBEAT.md's text holds no task: every line is blank, a Markdown heading (`#` then a space
/// or the line's end), or an empty list item (`-`, `*`, `+`, optionally with an empty checkbox). A missing
/// file is not "empty": the caller passes `None` and the agent decides.
pub fn is_effectively_empty(content: Option<&str>) -> bool {
    let Some(content) = content else {
        return false;
    };
    content.lines().all(|line| {
        let line = line.trim();
        line.is_empty() || is_heading(line) || is_empty_list_item(line)
    })
}

fn is_heading(line: &str) -> bool {
    let rest = line.trim_start_matches('#');
    rest.len() < line.len() && (rest.is_empty() || rest.starts_with(char::is_whitespace))
}

fn is_empty_list_item(line: &str) -> bool {
    let Some(rest) = line.strip_prefix(['-', '*', '+']) else {
        return false;
    };
    let rest = rest.trim();
    if rest.is_empty() {
        return true;
    }
    let Some(inside) = rest
        .strip_prefix('[')
        .and_then(|r| r.trim_end().strip_suffix(']'))
    else {
        return false;
    };
    matches!(inside.trim(), "" | "x" | "X")
}

/// What became of a heartbeat reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeartbeatReply {
    /// An acknowledgement (or nothing): swallowed.
    Ack,
    /// Text to deliver (the token removed from its edges, if it was there).
    Message(String),
}

/// Removes the token from both edges of `text` as often as it appears there; `None` when it never was.
fn strip_token_at_edges(text: &str) -> Option<String> {
    let mut rest = text.trim();
    let mut stripped = false;
    loop {
        if let Some(after) = rest.strip_prefix(HEARTBEAT_TOKEN) {
            rest = after.trim_start();
        } else if let Some(before) = rest.strip_suffix(HEARTBEAT_TOKEN) {
            rest = before.trim_end();
        } else {
            break;
        }
        stripped = true;
    }
    stripped.then(|| rest.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Drops HTML tags, `&nbsp;` and Markdown emphasis at the edges, so `**HEARTBEAT_OK**` counts.
fn strip_markup(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut in_tag = false;
    for c in text.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                plain.push(' ');
            }
            _ if !in_tag => plain.push(c),
            _ => {}
        }
    }
    let plain = plain.replace("&nbsp;", " ").replace("&NBSP;", " ");
    plain
        .trim()
        .trim_start_matches(['*', '`', '~', '_'])
        .trim_end_matches(['*', '`', '~', '_'])
        .to_string()
}

/// Classifies a heartbeat reply: empty, the token alone, or the token at an edge with at most
/// `ack_max_chars` of other text is an acknowledgement; anything else is a message.
pub fn classify_reply(raw: &str, ack_max_chars: usize) -> HeartbeatReply {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return HeartbeatReply::Ack;
    }
    let plain = strip_markup(trimmed);
    if !trimmed.contains(HEARTBEAT_TOKEN) && !plain.contains(HEARTBEAT_TOKEN) {
        return HeartbeatReply::Message(trimmed.to_string());
    }
    let rest = match strip_token_at_edges(trimmed) {
        Some(rest) if !rest.is_empty() => Some(rest),
        _ => strip_token_at_edges(&plain),
    };
    match rest {
        None => HeartbeatReply::Message(trimmed.to_string()),
        Some(rest) if rest.chars().count() <= ack_max_chars => HeartbeatReply::Ack,
        Some(rest) => HeartbeatReply::Message(rest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_blank_lines_and_empty_items_are_empty_but_a_missing_file_is_not() {
        assert!(is_effectively_empty(Some(
            "# Tasks\n\n## Later\n- \n* [ ]\n+ [x]\n"
        )));
        assert!(is_effectively_empty(Some("")));
        assert!(!is_effectively_empty(None));
        assert!(!is_effectively_empty(Some("# Tasks\n- water the plants")));
        assert!(!is_effectively_empty(Some("#hashtag is content")));
    }

    #[test]
    fn the_token_alone_or_with_a_short_remark_is_swallowed() {
        assert_eq!(classify_reply("HEARTBEAT_OK", 300), HeartbeatReply::Ack);
        assert_eq!(
            classify_reply("  **HEARTBEAT_OK**  ", 300),
            HeartbeatReply::Ack
        );
        assert_eq!(
            classify_reply("<b>HEARTBEAT_OK</b>", 300),
            HeartbeatReply::Ack
        );
        assert_eq!(
            classify_reply("All quiet. HEARTBEAT_OK", 300),
            HeartbeatReply::Ack
        );
        assert_eq!(classify_reply("", 300), HeartbeatReply::Ack);
    }

    #[test]
    fn longer_text_or_a_token_in_the_middle_is_delivered() {
        assert_eq!(
            classify_reply("HEARTBEAT_OK The backup failed twice", 10),
            HeartbeatReply::Message("The backup failed twice".into())
        );
        assert_eq!(
            classify_reply("Reminder: call mum", 300),
            HeartbeatReply::Message("Reminder: call mum".into())
        );
        let middle = "I said HEARTBEAT_OK yesterday but today the disk is full";
        assert_eq!(
            classify_reply(middle, 300),
            HeartbeatReply::Message(middle.into())
        );
    }

    #[test]
    fn blank_prompt_falls_back_to_the_default() {
        assert_eq!(heartbeat_prompt(Some("  ")), DEFAULT_HEARTBEAT_PROMPT);
        assert_eq!(heartbeat_prompt(Some("check mail")), "check mail");
    }
}
