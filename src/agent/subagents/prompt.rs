//! The words of sub-agents: the system prompt a spawned child gets (its role, its rules, whether it may
//! spawn in turn) and the announcement its requester receives when it ends (result and statistics).
//!
//! Pure text builders after OpenClaw's `subagent-announce.ts`, restated; nothing here touches the store or
//! starts runs.

use super::{SubagentRun, SubagentStatus};

/// The most characters of a child's reply quoted in its announcement.
pub const MAX_ANNOUNCED_RESULT_CHARS: usize = 4_000;

/// What the child's system prompt needs to know.
pub struct ChildPromptParts<'a> {
    pub requester_session_key: &'a str,
    pub child_session_key: &'a str,
    pub label: Option<&'a str>,
    pub task: &'a str,
    /// The child's depth (1 = spawned by a main session).
    pub depth: u32,
    pub max_spawn_depth: u32,
}

/// The extra system prompt of a sub-agent run.
pub fn child_system_prompt(parts: &ChildPromptParts<'_>) -> String {
    let may_spawn = parts.depth < parts.max_spawn_depth;
    let mut lines = vec![
        "# Sub-agent context".to_string(),
        String::new(),
        "You are a sub-agent: another agent session started you to do one task.".to_string(),
        String::new(),
        "## Your role".to_string(),
        format!("- Your task: {}", parts.task.trim()),
        "- Finishing this task is all you are for; you are not the main agent and do not speak for it."
            .to_string(),
        String::new(),
        "## Rules".to_string(),
        "1. Stay on the task; no side quests, no proactive actions, no heartbeats.".to_string(),
        "2. Your final reply is reported back to the session that started you, automatically: make it a complete, self-contained result.".to_string(),
        "3. Do not try to reach the user directly; the requester decides what to tell them.".to_string(),
        "4. This session may be ended or deleted once you finish; keep nothing here you need later."
            .to_string(),
    ];
    if may_spawn {
        lines.push(format!(
            "5. You may delegate parts of the task with sessions_spawn (you are at depth {} of at most {}); their results come back to you as messages, then report the combined result.",
            parts.depth, parts.max_spawn_depth
        ));
    } else {
        lines.push(
            "5. You cannot start sub-agents of your own: do the work yourself with the tools you have."
                .to_string(),
        );
    }
    lines.push(String::new());
    lines.push("## Session".to_string());
    if let Some(label) = parts.label {
        lines.push(format!("- Label: {label}"));
    }
    lines.push(format!(
        "- Requester session: {}",
        parts.requester_session_key
    ));
    lines.push(format!("- Your session: {}", parts.child_session_key));
    lines.join("\n")
}

fn status_phrase(status: SubagentStatus) -> &'static str {
    match status {
        SubagentStatus::Running => "is still running",
        SubagentStatus::Done => "completed successfully",
        SubagentStatus::Failed => "failed",
        SubagentStatus::Timeout => "timed out",
        SubagentStatus::Killed => "was stopped",
    }
}

/// Cuts `text` to at most `max` characters, marking the cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((end, _)) => format!("{}…[cut]", &text[..end]),
    }
}

/// The statistics line: runtime, tokens, session.
pub fn stats_line(run: &SubagentRun) -> String {
    let runtime_ms = run
        .ended_at_ms
        .unwrap_or(run.created_at_ms)
        .saturating_sub(run.created_at_ms);
    format!(
        "Stats: runtime {:.1}s • tokens {} (in {} / out {}) • session {}",
        runtime_ms as f64 / 1000.0,
        run.input_tokens + run.output_tokens,
        run.input_tokens,
        run.output_tokens,
        run.child_session_key
    )
}

/// The message the requester session receives when a child ends.
pub fn announce_message(run: &SubagentRun) -> String {
    let name = run.label.as_deref().unwrap_or(&run.task);
    let mut lines = vec![format!(
        "[sub-agent] The background task \"{}\" {}.",
        clip(name, 200),
        status_phrase(run.status)
    )];
    lines.push(String::new());
    match (&run.result, &run.error) {
        (Some(result), _) if !result.trim().is_empty() => {
            lines.push("Result:".into());
            lines.push(clip(result.trim(), MAX_ANNOUNCED_RESULT_CHARS));
        }
        (_, Some(error)) => lines.push(format!("Error: {error}")),
        _ => lines.push("Result: (no output)".into()),
    }
    lines.push(String::new());
    lines.push(stats_line(run));
    lines.push(String::new());
    lines.push(
        "Tell the user what came of it in your own words, briefly; do not repeat these statistics unless asked."
            .into(),
    );
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::subagents::Cleanup;

    fn run(status: SubagentStatus) -> SubagentRun {
        SubagentRun {
            id: "r1".into(),
            run_id: "run-1".into(),
            child_session_key: "agent:main:subagent:abc".into(),
            requester_session_key: "agent:main:main".into(),
            requester_agent_id: "main".into(),
            agent_id: "main".into(),
            task: "count the files".into(),
            label: Some("files".into()),
            cleanup: Cleanup::Keep,
            depth: 1,
            model: None,
            timeout_ms: 1_000,
            created_at_ms: 1_000,
            ended_at_ms: Some(3_500),
            status,
            error: None,
            result: Some("There are 12 files.".into()),
            input_tokens: 30,
            output_tokens: 12,
            announced: false,
        }
    }

    #[test]
    fn announcement_carries_result_and_statistics() {
        let text = announce_message(&run(SubagentStatus::Done));
        assert!(text.contains("\"files\" completed successfully"), "{text}");
        assert!(text.contains("There are 12 files."), "{text}");
        assert!(text.contains("runtime 2.5s"), "{text}");
        assert!(text.contains("tokens 42 (in 30 / out 12)"), "{text}");
    }

    #[test]
    fn failed_run_without_output_reports_its_error() {
        let mut failed = run(SubagentStatus::Failed);
        failed.result = None;
        failed.error = Some("provider down".into());
        let text = announce_message(&failed);
        assert!(text.contains("failed"), "{text}");
        assert!(text.contains("Error: provider down"), "{text}");
    }

    #[test]
    fn prompt_says_whether_the_child_may_spawn() {
        let mut parts = ChildPromptParts {
            requester_session_key: "agent:main:main",
            child_session_key: "agent:main:subagent:x",
            label: None,
            task: "t",
            depth: 1,
            max_spawn_depth: 1,
        };
        assert!(child_system_prompt(&parts).contains("cannot start sub-agents"));
        parts.max_spawn_depth = 2;
        assert!(child_system_prompt(&parts).contains("You may delegate"));
    }
}
