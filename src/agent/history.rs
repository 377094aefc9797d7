//! The prompt's history: the stored transcript of a session turned into
//! provider messages (system prompt with the latest compaction summary, then
//! the newest entries that fit the budget, with tool rounds kept paired).
//! A direct-message session keeps only its last `dmHistoryLimit` user turns
//! (the channel's, or `dms.<peer>.historyLimit` for that peer), as upstream.

use crate::store::TranscriptEntry;

use super::providers::{ChatMessage, Role, ToolCall};
use super::turn::TurnEnv;
use super::{compaction, context};

/// How many transcript messages go into the prompt at most.
pub const MAX_HISTORY_MESSAGES: usize = compaction::MAX_HISTORY_SCAN_ENTRIES;
/// How many characters of transcript go into the prompt at most (the
/// window caps it further; compaction keeps it below the window).
pub const MAX_HISTORY_CHARS: usize = 800_000;

/// The prompt from the transcript: system prompt (with the latest compaction
/// summary and the AGENTS.md refresh), then the history after it.
pub struct PromptHistory {
    pub messages: Vec<ChatMessage>,
    /// When the model last answered in this session (for cache-ttl pruning).
    pub last_call_ms: Option<u64>,
}

/// Builds the prompt messages from the stored history (the current user
/// message included, as it is already recorded).
pub fn prompt_messages(
    env: &TurnEnv,
    session_key: &str,
    session_id: &str,
    system_prompt: &str,
    window: context::ContextWindow,
) -> Result<PromptHistory, crate::store::StoreError> {
    let mut stored = compaction::load_history(&env.store, session_id)?;
    if let Some(limit) = dm_history_limit(&env.config, session_key) {
        keep_last_user_turns(&mut stored.entries, limit);
    }
    let last_call_ms = stored
        .entries
        .iter()
        .rev()
        .find(|(_, e)| e.role == "assistant")
        .map(|(_, e)| e.timestamp_ms);
    let mut system = system_prompt.to_string();
    if let Some(summary) = &stored.summary {
        system.push_str(
            "
## Summary of the earlier conversation
Older messages of this session were compacted into this summary:
",
        );
        system.push_str(summary);
        system.push('\n');
        if let Some(refresh) = compaction::post_compaction_refresh(&env.workspace) {
            system.push('\n');
            system.push_str(&refresh);
            system.push('\n');
        }
    }
    let budget = window.chars().min(MAX_HISTORY_CHARS);
    let mut messages = vec![ChatMessage::system(system)];
    messages.extend(history_messages(
        stored.entries.into_iter().map(|(_, e)| e),
        budget,
    ));
    Ok(PromptHistory {
        messages,
        last_call_ms,
    })
}

/// The DM history limit of a direct session key
/// (`agent:<id>:<channel>:direct:<peer>`, or with the account before
/// `direct`): `dms.<peer>.historyLimit` of the channel account, else its
/// `dmHistoryLimit`. `None` (no limit) for other keys, for 0, and for
/// keys that name no channel (`per-peer` and `main` scopes), as upstream.
pub fn dm_history_limit(config: &crate::config::Config, session_key: &str) -> Option<usize> {
    let parts: Vec<&str> = session_key.split(':').collect();
    let rest = match parts.as_slice() {
        ["agent", _agent, rest @ ..] => rest,
        _ => return None,
    };
    let (channel, account, peer) = match rest {
        [channel, kind, peer @ ..] if is_direct(kind) => (*channel, "default", peer),
        [channel, account, kind, peer @ ..] if is_direct(kind) => (*channel, *account, peer),
        _ => return None,
    };
    let peer = peer.join(":");
    let peer = without_thread_suffix(&peer);
    let channels = &config.channels;
    let (limit, dms) = match channel {
        "telegram" => channels
            .telegram
            .as_ref()
            .and_then(|c| c.account(account))
            .map(|a| (a.dm_history_limit, a.dms))?,
        "discord" => channels
            .discord
            .as_ref()
            .and_then(|c| c.account(account))
            .map(|a| (a.dm_history_limit, a.dms))?,
        "slack" => channels
            .slack
            .as_ref()
            .and_then(|c| c.account(account))
            .map(|a| (a.dm_history_limit, a.dms))?,
        _ => return None,
    };
    let own = dms
        .as_ref()
        .and_then(|dms| dms.get(peer))
        .and_then(|dm| dm.history_limit);
    own.or(limit)
        .filter(|limit| *limit > 0)
        .map(|limit| limit as usize)
}

fn is_direct(kind: &str) -> bool {
    kind.eq_ignore_ascii_case("direct") || kind.eq_ignore_ascii_case("dm")
}

/// `peer:thread:12` / `peer:topic:12` → `peer` (per-DM settings are by peer).
fn without_thread_suffix(peer: &str) -> &str {
    for marker in [":thread:", ":topic:"] {
        if let Some((base, id)) = peer.rsplit_once(marker) {
            if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
                return base;
            }
        }
    }
    peer
}

/// Drops everything before the `limit`-th user entry from the end, so the
/// history holds the last `limit` user turns with what followed them.
fn keep_last_user_turns<T>(entries: &mut Vec<(T, TranscriptEntry)>, limit: usize) {
    let start = entries
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, (_, e))| e.role == "user")
        .nth(limit.saturating_sub(1))
        .map_or(0, |(i, _)| i);
    entries.drain(..start);
}

/// The newest transcript entries that fit the character budget, oldest first.
fn history_messages(
    entries: impl DoubleEndedIterator<Item = TranscriptEntry>,
    mut budget: usize,
) -> Vec<ChatMessage> {
    let mut kept = Vec::new();
    for entry in entries.rev() {
        let extra: serde_json::Value = entry
            .extra_json
            .as_deref()
            .and_then(|e| serde_json::from_str(e).ok())
            .unwrap_or_default();
        let message = match entry.role.as_str() {
            "user" => ChatMessage::user(entry.text),
            "assistant" => ChatMessage {
                role: Role::Assistant,
                content: entry.text,
                tool_calls: tool_calls_of(&extra),
                tool_call_id: None,
                images: Vec::new(),
            },
            "tool" => match extra["toolCallId"].as_str() {
                Some(id) => ChatMessage::tool_result(id, entry.text),
                None => continue,
            },
            _ => continue,
        };
        if message.content.is_empty() && message.tool_calls.is_empty() && message.role != Role::Tool
        {
            continue;
        }
        let size = context::message_chars(&message);
        if size > budget || kept.len() >= MAX_HISTORY_MESSAGES {
            break;
        }
        budget -= size;
        kept.push(message);
    }
    kept.reverse();
    pair_tool_calls(kept)
}

fn tool_calls_of(extra: &serde_json::Value) -> Vec<ToolCall> {
    extra["toolCalls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| ToolCall {
                    id: c["id"].as_str().unwrap_or_default().to_string(),
                    name: c["name"].as_str().unwrap_or_default().to_string(),
                    arguments: c["arguments"].as_str().unwrap_or_default().to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Keeps the prompt well-formed where the history window cut through a tool
/// round: results without their call are dropped, calls without their result
/// are removed from the assistant message.
fn pair_tool_calls(messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
    let answered: std::collections::HashSet<String> = messages
        .iter()
        .filter_map(|m| m.tool_call_id.clone())
        .collect();
    let mut called = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(messages.len());
    for mut message in messages {
        match message.role {
            Role::Tool => {
                if message
                    .tool_call_id
                    .as_ref()
                    .is_some_and(|id| called.contains(id))
                {
                    out.push(message);
                }
            }
            _ => {
                message.tool_calls.retain(|c| answered.contains(&c.id));
                called.extend(message.tool_calls.iter().map(|c| c.id.clone()));
                if !message.content.is_empty() || !message.tool_calls.is_empty() {
                    out.push(message);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dm_history_limit_follows_the_key_account_and_peer() {
        let config = crate::config::parse_str(
            r#"{ channels: { discord: { token: "d", dmHistoryLimit: 5, dms: { "7": { historyLimit: 2 } },
                 accounts: { work: { token: "w", dmHistoryLimit: 9 } } } } }"#,
            "test",
        )
        .expect("config");
        let limit = |key: &str| dm_history_limit(&config, key);
        assert_eq!(limit("agent:main:discord:direct:1"), Some(5));
        assert_eq!(limit("agent:main:discord:direct:7"), Some(2));
        assert_eq!(limit("agent:main:discord:direct:7:thread:33"), Some(2));
        assert_eq!(limit("agent:main:discord:work:direct:1"), Some(9));
        assert_eq!(limit("agent:main:discord:group:1"), None);
        assert_eq!(limit("agent:main:direct:1"), None);
        assert_eq!(limit("agent:main:main"), None);
        assert_eq!(limit("agent:main:telegram:direct:1"), None);
    }

    #[test]
    fn keeping_user_turns_keeps_what_followed_them() {
        let mut entries: Vec<(u64, TranscriptEntry)> =
            ["user", "assistant", "user", "tool", "assistant", "user"]
                .iter()
                .enumerate()
                .map(|(i, role)| (i as u64, entry(role, "x", None)))
                .collect();
        keep_last_user_turns(&mut entries, 2);
        assert_eq!(entries.first().map(|(i, _)| *i), Some(2));
        keep_last_user_turns(&mut entries, 5);
        assert_eq!(entries.len(), 4);
    }

    fn entry(role: &str, text: &str, extra: Option<serde_json::Value>) -> TranscriptEntry {
        TranscriptEntry {
            role: role.into(),
            text: text.into(),
            timestamp_ms: 0,
            run_id: None,
            stop_reason: None,
            input_tokens: None,
            output_tokens: None,
            extra_json: extra.map(|e| e.to_string()),
        }
    }

    #[test]
    fn tool_rounds_are_rebuilt_and_cut_rounds_are_repaired() {
        let call =
            serde_json::json!({"toolCalls": [{"id": "c1", "name": "read", "arguments": "{}"}]});
        let entries = vec![
            entry(
                "tool",
                "orphan result",
                Some(serde_json::json!({"toolCallId": "c0"})),
            ),
            entry("user", "read it", None),
            entry("assistant", "", Some(call)),
            entry(
                "tool",
                "file text",
                Some(serde_json::json!({"toolCallId": "c1"})),
            ),
            entry("assistant", "done", None),
            entry(
                "assistant",
                "",
                Some(
                    serde_json::json!({"toolCalls": [{"id": "c2", "name": "x", "arguments": "{}"}]}),
                ),
            ),
        ];
        let messages = history_messages(entries.into_iter(), MAX_HISTORY_CHARS);
        let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            vec![Role::User, Role::Assistant, Role::Tool, Role::Assistant]
        );
        assert_eq!(messages[1].tool_calls[0].id, "c1");
        assert_eq!(messages[2].tool_call_id.as_deref(), Some("c1"));
    }
}
