//! End-of-run shaping: silent runs stay silent, messaging-tool confirmations
//! are not repeated, tool-error-only runs get one fallback error reply, and
//! reasoning reaches only channels that can show it.

use pincer::reply::{finalize, FinishedRun, ReplyPayload, ShapeOptions, ToolFailure};

fn texts(replies: &[ReplyPayload]) -> Vec<&str> {
    replies.iter().map(|r| r.text.as_str()).collect()
}

fn failure(tool: &str, error: &str) -> Option<ToolFailure> {
    Some(ToolFailure {
        tool_name: tool.into(),
        error: Some(error.into()),
    })
}

#[test]
fn a_run_that_answers_no_reply_sends_nothing() {
    let outcome = FinishedRun {
        assistant_texts: vec!["NO_REPLY".into()],
        ..FinishedRun::default()
    };
    assert!(finalize(&outcome, &ShapeOptions::default()).is_empty());
}

#[test]
fn a_tool_error_only_run_gets_a_fallback_error_reply() {
    let outcome = FinishedRun {
        last_tool_error: failure("exec", "command timed out after 30s"),
        ..FinishedRun::default()
    };
    let replies = finalize(&outcome, &ShapeOptions::default());
    assert_eq!(
        texts(&replies),
        vec!["⚠️ exec failed: command timed out after 30s"]
    );
    assert!(replies[0].is_error);
}

#[test]
fn input_mistakes_the_model_retries_on_get_no_fallback() {
    let outcome = FinishedRun {
        last_tool_error: failure("read", "path is required"),
        ..FinishedRun::default()
    };
    assert!(finalize(&outcome, &ShapeOptions::default()).is_empty());
}

#[test]
fn a_run_with_an_answer_does_not_surface_the_tool_error() {
    let outcome = FinishedRun {
        assistant_texts: vec!["I could not reach the server, try later.".into()],
        last_tool_error: failure("web_fetch", "connection refused"),
        ..FinishedRun::default()
    };
    assert_eq!(
        texts(&finalize(&outcome, &ShapeOptions::default())),
        vec!["I could not reach the server, try later."]
    );
}

#[test]
fn a_messaging_tool_confirmation_is_not_sent_twice() {
    let outcome = FinishedRun {
        assistant_texts: vec![
            "📅 Meeting moved to Friday 3pm".into(),
            "Anything else?".into(),
        ],
        messaging_tool_texts: vec!["Meeting moved to   friday 3pm".into()],
        last_tool_error: failure("calendar", "rate limited"),
        ..FinishedRun::default()
    };
    assert_eq!(
        texts(&finalize(&outcome, &ShapeOptions::default())),
        vec!["Anything else?"]
    );
}

#[test]
fn reasoning_comes_first_and_only_where_it_can_be_shown() {
    let outcome = FinishedRun {
        assistant_texts: vec!["42".into()],
        reasoning: Some("The user wants the answer.".into()),
        ..FinishedRun::default()
    };
    assert_eq!(
        texts(&finalize(
            &outcome,
            &ShapeOptions {
                show_reasoning: false
            }
        )),
        vec!["42"]
    );
    let shown = finalize(
        &outcome,
        &ShapeOptions {
            show_reasoning: true,
        },
    );
    assert_eq!(texts(&shown), vec!["The user wants the answer.", "42"]);
    assert!(shown[0].is_reasoning && !shown[1].is_reasoning);
}
