//! The prompt's history: the stored transcript of a session turned into
//! provider messages (system prompt with the latest compaction summary, then
//! the newest entries that fit the budget, with tool rounds kept paired).

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
    session_id: &str,
    system_prompt: &str,
    window: context::ContextWindow,
) -> Result<PromptHistory, crate::store::StoreError> {
    let stored = compaction::load_history(&env.store, session_id)?;
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
