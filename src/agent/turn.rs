//! One agent turn: record the user's message, stream the model's reply with
//! fallbacks, record the reply, and report progress as [`RunEvent`]s.
//!
//! The turn reads and writes the session index and transcript through the
//! store; it never touches gateway connections. Every path ends in exactly one
//! [`RunOutcome`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::store::{SessionEntry, Store, TranscriptEntry};

use super::models::{resolve_chain, ResolvedModel};
use super::provider::{
    ChatMessage, Completion, ProviderError, ProviderRequest, Role, StreamEvent, Usage,
};
use super::runs::{RunEvent, RunOutcome, RunStatus};

/// How many earlier transcript entries go into the prompt at most.
pub const MAX_HISTORY_MESSAGES: usize = 40;
/// How many characters of earlier transcript go into the prompt at most.
pub const MAX_HISTORY_CHARS: usize = 48_000;
/// The run timeout when neither the request nor the config sets one.
pub const DEFAULT_RUN_TIMEOUT_MS: u64 = 600_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct TurnSpec {
    pub run_id: String,
    pub agent_id: String,
    pub session_key: String,
    pub message: String,
    pub timeout_ms: u64,
    pub model_override: Option<String>,
    pub extra_system_prompt: Option<String>,
    pub label: Option<String>,
    pub channel: Option<String>,
}

/// What a turn needs from the gateway.
#[derive(Clone)]
pub struct TurnEnv {
    pub store: Store,
    pub config: Arc<Config>,
    pub http: reqwest::Client,
}

fn now_ms() -> u64 {
    crate::system::clock::now_ms()
}

/// Runs one turn to its end. Never panics on provider or store failures:
/// they become an `Error` outcome.
pub async fn run_turn(
    env: &TurnEnv,
    spec: &TurnSpec,
    cancel: CancellationToken,
    events: mpsc::Sender<RunEvent>,
) -> RunOutcome {
    let started_at_ms = now_ms();
    let mut outcome = RunOutcome {
        run_id: spec.run_id.clone(),
        session_key: spec.session_key.clone(),
        session_id: String::new(),
        status: RunStatus::Ok,
        started_at_ms,
        ended_at_ms: started_at_ms,
        text: String::new(),
        error: None,
        usage: Usage::default(),
        provider: None,
        model: None,
        stop_reason: None,
    };
    let _ = events.send(RunEvent::Started { started_at_ms }).await;
    // Store commits wait for fsync: keep them off the async workers.
    let prepared = tokio::task::block_in_place(|| prepare(env, spec, started_at_ms));
    let (session, history) = match prepared {
        Ok(p) => p,
        Err(message) => return fail(outcome, message),
    };
    outcome.session_id = session.session_id.clone();
    let models = match resolve_chain(
        &env.config,
        &spec.agent_id,
        spec.model_override.as_deref(),
        &env.http,
    ) {
        Ok(models) => models,
        Err(e) => return fail(outcome, e.to_string()),
    };
    let result = stream_with_fallbacks(&models, spec, history, &cancel, &events).await;
    outcome.ended_at_ms = now_ms();
    match result {
        StreamResult::Done { completion, model } => {
            outcome.text = completion.text;
            outcome.usage = completion.usage;
            outcome.stop_reason = completion.stop_reason;
            outcome.provider = Some(model.provider_id);
            outcome.model = Some(model.model_id);
        }
        StreamResult::Stopped { partial, status } => {
            outcome.text = partial;
            outcome.status = status;
            outcome.stop_reason = Some(status.as_str().to_string());
            if status == RunStatus::Timeout {
                outcome.error = Some(format!("run timed out after {} ms", spec.timeout_ms));
            }
        }
        StreamResult::Failed { partial, message } => {
            outcome.text = partial;
            outcome.status = RunStatus::Error;
            outcome.error = Some(message);
        }
    }
    if let Err(e) = tokio::task::block_in_place(|| record_reply(env, spec, session, &outcome)) {
        log::error!("run {}: could not record the reply: {e}", spec.run_id);
        if outcome.status == RunStatus::Ok {
            return fail(outcome, format!("could not record the reply: {e}"));
        }
    }
    outcome
}

fn fail(mut outcome: RunOutcome, message: String) -> RunOutcome {
    outcome.status = RunStatus::Error;
    outcome.error = Some(message);
    outcome.ended_at_ms = now_ms();
    outcome
}

/// Loads or creates the session, records the user's message and builds the prompt.
fn prepare(
    env: &TurnEnv,
    spec: &TurnSpec,
    now: u64,
) -> Result<(SessionEntry, Vec<ChatMessage>), String> {
    let store_err = |e: crate::store::StoreError| format!("session store: {e}");
    let mut session = match env.store.session(&spec.session_key).map_err(store_err)? {
        Some(entry) => entry,
        None => SessionEntry::new(uuid::Uuid::new_v4().to_string(), now),
    };
    let history = env
        .store
        .transcript_tail(&session.session_id, MAX_HISTORY_MESSAGES)
        .map_err(store_err)?;
    env.store
        .append_transcript(
            &session.session_id,
            &TranscriptEntry {
                role: "user".into(),
                text: spec.message.clone(),
                timestamp_ms: now,
                run_id: Some(spec.run_id.clone()),
                stop_reason: None,
                input_tokens: None,
                output_tokens: None,
                extra_json: None,
            },
        )
        .map_err(store_err)?;
    session.updated_at_ms = now;
    if let Some(label) = &spec.label {
        session.label = Some(label.clone());
    }
    if spec.channel.is_some() {
        session.last_channel = spec.channel.clone();
        session.channel = session.channel.clone().or_else(|| spec.channel.clone());
    }
    env.store
        .put_session(&spec.session_key, &session)
        .map_err(store_err)?;
    let mut messages = Vec::new();
    if let Some(system) = spec
        .extra_system_prompt
        .as_ref()
        .filter(|s| !s.trim().is_empty())
    {
        messages.push(ChatMessage::system(system.clone()));
    }
    messages.extend(history_messages(history.into_iter().map(|(_, e)| e)));
    messages.push(ChatMessage::user(spec.message.clone()));
    Ok((session, messages))
}

/// The newest transcript entries that fit the character budget, oldest first.
fn history_messages(entries: impl DoubleEndedIterator<Item = TranscriptEntry>) -> Vec<ChatMessage> {
    let mut budget = MAX_HISTORY_CHARS;
    let mut kept = Vec::new();
    for entry in entries.rev() {
        let role = match entry.role.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            _ => continue,
        };
        if entry.text.is_empty() {
            continue;
        }
        if entry.text.len() > budget {
            break;
        }
        budget -= entry.text.len();
        kept.push(ChatMessage {
            role,
            content: entry.text,
            ..Default::default()
        });
    }
    kept.reverse();
    kept
}

enum StreamResult {
    Done {
        completion: Completion,
        model: ResolvedModel,
    },
    Stopped {
        partial: String,
        status: RunStatus,
    },
    Failed {
        partial: String,
        message: String,
    },
}

async fn stream_with_fallbacks(
    models: &[ResolvedModel],
    spec: &TurnSpec,
    messages: Vec<ChatMessage>,
    cancel: &CancellationToken,
    events: &mpsc::Sender<RunEvent>,
) -> StreamResult {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(spec.timeout_ms);
    let mut last_error = String::from("no model answered");
    for model in models {
        let request = ProviderRequest {
            model: model.model_id.clone(),
            messages: messages.clone(),
            max_tokens: model.max_tokens,
            tools: Vec::new(),
        };
        let mut text = String::new();
        match stream_one(model, request, cancel, deadline, events, &mut text).await {
            Ok(completion) => {
                return StreamResult::Done {
                    completion,
                    model: model.clone(),
                }
            }
            Err(Stop::Aborted) => {
                return StreamResult::Stopped {
                    partial: text,
                    status: RunStatus::Aborted,
                }
            }
            Err(Stop::TimedOut) => {
                return StreamResult::Stopped {
                    partial: text,
                    status: RunStatus::Timeout,
                }
            }
            Err(Stop::Failed(e)) => {
                last_error = format!("{}/{}: {e}", model.provider_id, model.model_id);
                log::warn!("run {}: {last_error}", spec.run_id);
                // Text already shown to the user cannot be taken back: no fallback then.
                if !text.is_empty() {
                    return StreamResult::Failed {
                        partial: text,
                        message: last_error,
                    };
                }
            }
        }
    }
    StreamResult::Failed {
        partial: String::new(),
        message: last_error,
    }
}

enum Stop {
    Aborted,
    TimedOut,
    Failed(ProviderError),
}

async fn stream_one(
    model: &ResolvedModel,
    request: ProviderRequest,
    cancel: &CancellationToken,
    deadline: tokio::time::Instant,
    events: &mpsc::Sender<RunEvent>,
    text: &mut String,
) -> Result<Completion, Stop> {
    let call_cancel = cancel.child_token();
    let (delta_tx, mut delta_rx) = mpsc::channel::<StreamEvent>(64);
    let call = model
        .provider
        .stream(request, delta_tx, call_cancel.clone());
    tokio::pin!(call);
    let mut timed_out = false;
    let result = loop {
        tokio::select! {
            biased;
            Some(StreamEvent::TextDelta(delta)) = delta_rx.recv() => {
                text.push_str(&delta);
                let _ = events.send(RunEvent::Delta { text: text.clone(), delta }).await;
            }
            result = &mut call => break result,
            _ = tokio::time::sleep_until(deadline), if !timed_out => {
                timed_out = true;
                call_cancel.cancel();
            }
        }
    };
    // Deltas sent just before the call returned.
    while let Ok(StreamEvent::TextDelta(delta)) = delta_rx.try_recv() {
        text.push_str(&delta);
        let _ = events
            .send(RunEvent::Delta {
                text: text.clone(),
                delta,
            })
            .await;
    }
    match result {
        Ok(completion) => Ok(completion),
        Err(ProviderError::Cancelled) if timed_out => Err(Stop::TimedOut),
        Err(ProviderError::Cancelled) => Err(Stop::Aborted),
        Err(_) if cancel.is_cancelled() => Err(Stop::Aborted),
        Err(e) => Err(Stop::Failed(e)),
    }
}

/// Appends the reply to the transcript and updates the session's counters.
fn record_reply(
    env: &TurnEnv,
    spec: &TurnSpec,
    mut session: SessionEntry,
    outcome: &RunOutcome,
) -> Result<(), crate::store::StoreError> {
    if !outcome.text.is_empty() || outcome.status == RunStatus::Ok {
        env.store.append_transcript(
            &session.session_id,
            &TranscriptEntry {
                role: "assistant".into(),
                text: outcome.text.clone(),
                timestamp_ms: outcome.ended_at_ms,
                run_id: Some(spec.run_id.clone()),
                stop_reason: outcome.stop_reason.clone(),
                input_tokens: Some(outcome.usage.input_tokens),
                output_tokens: Some(outcome.usage.output_tokens),
                extra_json: None,
            },
        )?;
    }
    // Re-read: a patch may have landed while the model was talking.
    if let Some(current) = env.store.session(&spec.session_key)? {
        if current.session_id == session.session_id {
            session = current;
        } else {
            // The session was reset meanwhile; leave the new one alone.
            return Ok(());
        }
    }
    session.updated_at_ms = outcome.ended_at_ms;
    session.input_tokens += outcome.usage.input_tokens;
    session.output_tokens += outcome.usage.output_tokens;
    session.total_tokens = session.input_tokens + session.output_tokens;
    session.aborted_last_run = outcome.status == RunStatus::Aborted;
    env.store.put_session(&spec.session_key, &session)
}
