//! The tool loop: stream a reply; when the model calls tools, run them
//! (policy-checked, through the tool registry), give the results back and
//! stream again — until a final answer, the iteration cap, the deadline or an
//! abort.
//!
//! Tool calls and results are appended to the transcript as they happen, so
//! a crash mid-run loses nothing that was done.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::store::TranscriptEntry;
use crate::tools::hooks::{CallOutcome, HookCall};
use crate::tools::schema::SchemaDialect;
use crate::tools::{cap_result, ToolContext, ToolError};

use super::compaction::{self, CompactionJob, CompactionReason, CompactionSettings};
use super::context::{self, ContextWindow, PruningSettings};
use super::failover::{pause, FailoverStep, ModelAttempt, PauseEnd};
use super::history::prompt_messages;
use super::providers::models::ResolvedModel;
use super::providers::{
    ChatMessage, Completion, ProviderError, ProviderRequest, Role, StreamEvent, ToolCall,
};
use super::reasoning::{ReasoningLevel, ReasoningSink};
use super::runs::{RunEvent, RunStatus};
use super::turn::{TurnEnv, TurnSpec};

/// Model calls one run may make at most (each tool round is one).
pub const MAX_TOOL_ITERATIONS: usize = 24;

/// How the loop ended.
pub enum LoopResult {
    Done {
        completion: Completion,
        model: ResolvedModel,
        text: String,
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

/// Everything the loop needs besides the prompt.
pub struct LoopInput<'a> {
    pub env: &'a TurnEnv,
    pub spec: &'a TurnSpec,
    pub session_id: &'a str,
    pub models: &'a [ResolvedModel],
    pub allowed_tools: Vec<String>,
    pub cancel: &'a CancellationToken,
    pub events: &'a mpsc::Sender<RunEvent>,
    /// The primary model's context window.
    pub window: ContextWindow,
    /// The system prompt, for rebuilding the prompt after a compaction.
    pub system_prompt: String,
    /// When the model last answered in this session (cache-ttl pruning).
    pub last_call_ms: Option<u64>,
    /// Who sees the model's thinking (the session's `reasoningLevel`).
    pub reasoning: ReasoningLevel,
    /// Messages the queue steers into this run (steer modes).
    pub steer: Option<&'a crate::queue::SteerInbox>,
}

/// Runs the loop to its end. Before each model call the prompt is pruned
/// (when the cache TTL has passed), tool output is held to its budget, and
/// the session is compacted once if the prompt passes the target; a
/// context-overflow refusal compacts once and retries.
pub async fn run(input: LoopInput<'_>, mut messages: Vec<ChatMessage>) -> LoopResult {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(input.spec.timeout_ms);
    let pruning =
        PruningSettings::from_config(input.env.config.agents.defaults.context_pruning.as_ref());
    let settings = CompactionSettings::for_window(&input.env.config, input.window);
    let mut last_call_ms = input.last_call_ms;
    let mut compacted = false;
    let mut text = String::new();
    let mut reasoning = ReasoningSink::new(input.reasoning);
    for _ in 0..MAX_TOOL_ITERATIONS {
        if !text.is_empty() && !text.ends_with("\n\n") {
            // Keep the steps of a multi-step answer apart in the cumulative text.
            text.push_str("\n\n");
        }
        let now = crate::system::clock::now_ms();
        if pruning.due(last_call_ms, now) {
            context::prune(&mut messages, input.window, &pruning);
        }
        context::enforce_tool_budget(&mut messages, input.window);
        if !compacted
            && settings.needs_compaction(context::estimate_tokens(&messages), input.window)
        {
            compacted = true;
            if let Some(rebuilt) = compact_and_rebuild(&input, CompactionReason::Auto).await {
                messages = rebuilt;
            }
        }
        let before = text.len();
        let streamed = stream_with_fallbacks(
            &input,
            &messages,
            &input.allowed_tools,
            deadline,
            &mut text,
            &mut reasoning,
        )
        .await;
        reasoning.end_step();
        last_call_ms = Some(crate::system::clock::now_ms());
        let (completion, model) = match streamed {
            Ok(done) => done,
            Err(LoopResult::Failed { message, .. })
                if !compacted
                    && text.len() == before
                    && compaction::is_context_overflow_message(&message) =>
            {
                compacted = true;
                match compact_and_rebuild(&input, CompactionReason::Overflow).await {
                    Some(rebuilt) => {
                        messages = rebuilt;
                        continue;
                    }
                    None => {
                        return LoopResult::Failed {
                            partial: text,
                            message,
                        }
                    }
                }
            }
            Err(result) => return result,
        };
        if completion.tool_calls.is_empty() {
            if let Some(block) = reasoning.finish() {
                let _ = input.events.send(block).await;
            }
            text.truncate(text.trim_end().len().max(before.min(text.len())));
            return LoopResult::Done {
                completion,
                model,
                text: text.trim_end().to_string(),
            };
        }
        let step_text = text[before..].to_string();
        messages.push(ChatMessage {
            role: Role::Assistant,
            content: step_text.clone(),
            tool_calls: completion.tool_calls.clone(),
            tool_call_id: None,
            images: Vec::new(),
        });
        record(
            &input,
            "assistant",
            &step_text,
            json!({"toolCalls": calls_json(&completion.tool_calls)}),
        );
        for call in &completion.tool_calls {
            let result = run_tool(&input, call, deadline).await;
            if input.cancel.is_cancelled() {
                return LoopResult::Stopped {
                    partial: text,
                    status: RunStatus::Aborted,
                };
            }
            let result = context::cap_tool_result(result, input.window);
            record(
                &input,
                "tool",
                &result,
                json!({"toolCallId": call.id, "name": call.name}),
            );
            messages.push(ChatMessage::tool_result(call.id.clone(), result));
        }
        take_steered(&input, &mut messages);
    }
    LoopResult::Failed {
        partial: text,
        message: format!(
            "the model kept calling tools: stopped after {MAX_TOOL_ITERATIONS} rounds"
        ),
    }
}

/// Messages the user sent while this run was busy (queue mode steer): they
/// join the conversation before the next model call, in the transcript too.
fn take_steered(input: &LoopInput<'_>, messages: &mut Vec<ChatMessage>) {
    let Some(inbox) = input.steer else {
        return;
    };
    for steered in inbox.take() {
        record(input, "user", &steered.text, json!({"steered": true}));
        messages.push(ChatMessage::user(steered.text));
    }
}

/// Compacts the session with the primary model and rebuilds the prompt from
/// the transcript; `None` (logged) when compaction was not possible.
async fn compact_and_rebuild(
    input: &LoopInput<'_>,
    reason: CompactionReason,
) -> Option<Vec<ChatMessage>> {
    let config = &input.env.config;
    let summarizer = match compaction::summary_model(config, &input.env.http) {
        Some(Ok(model)) => Some(model),
        Some(Err(e)) => {
            log::warn!(
                "run {}: {} compaction failed: agents.defaults.compaction.model: {e}",
                input.spec.run_id,
                reason.as_str()
            );
            return None;
        }
        None => None,
    };
    let job = CompactionJob {
        store: &input.env.store,
        session_key: &input.spec.session_key,
        session_id: input.session_id,
        model: summarizer.as_ref().or(input.models.first())?,
        window: input.window,
        settings: CompactionSettings::for_window(config, input.window),
        reason,
        custom_instructions: config
            .agents
            .defaults
            .compaction
            .as_ref()
            .and_then(|c| c.custom_instructions.as_deref()),
        cancel: input.cancel,
    };
    if let Err(e) = compaction::compact(job).await {
        log::warn!(
            "run {}: {} compaction failed: {e}",
            input.spec.run_id,
            reason.as_str()
        );
        return None;
    }
    let rebuilt = input.env.store.run_blocking(|| {
        prompt_messages(
            input.env,
            &input.spec.session_key,
            input.session_id,
            &input.system_prompt,
            input.window,
        )
    });
    match rebuilt {
        Ok(history) => Some(history.messages),
        Err(e) => {
            log::error!(
                "run {}: could not reload the history: {e}",
                input.spec.run_id
            );
            None
        }
    }
}

fn calls_json(calls: &[ToolCall]) -> Value {
    Value::Array(
        calls
            .iter()
            .map(|c| json!({"id": c.id, "name": c.name, "arguments": c.arguments}))
            .collect(),
    )
}

fn record(input: &LoopInput<'_>, role: &str, text: &str, extra: Value) {
    let entry = TranscriptEntry {
        role: role.into(),
        text: text.to_string(),
        timestamp_ms: crate::system::clock::now_ms(),
        run_id: Some(input.spec.run_id.clone()),
        stop_reason: None,
        input_tokens: None,
        output_tokens: None,
        extra_json: Some(extra.to_string()),
    };
    let stored = input
        .env
        .store
        .run_blocking(|| input.env.store.append_transcript(input.session_id, &entry));
    if let Err(e) = stored {
        log::error!(
            "run {}: could not record a {role} step: {e}",
            input.spec.run_id
        );
    }
}

/// Runs one tool call and returns the text the model will read: the
/// arguments go through the `before` hooks (which may rewrite or block),
/// the tool runs under the run's deadline and abort, and the `after` hooks
/// see the result.
async fn run_tool(
    input: &LoopInput<'_>,
    call: &ToolCall,
    deadline: tokio::time::Instant,
) -> String {
    let args: Value = match serde_json::from_str(if call.arguments.trim().is_empty() {
        "{}"
    } else {
        &call.arguments
    }) {
        Ok(args) => args,
        Err(e) => {
            return format!(
                "Error: the arguments for {} are not valid JSON: {e}",
                call.name
            )
        }
    };
    let hooks = input.env.services.hooks.clone();
    let hook_call = HookCall {
        run_id: &input.spec.run_id,
        agent_id: &input.spec.agent_id,
        session_key: &input.spec.session_key,
        tool: &call.name,
        call_id: &call.id,
        config: &input.env.config,
    };
    let hooked = hooks.before(&hook_call, args.clone());
    let _ = input
        .events
        .send(RunEvent::Tool {
            phase: "start",
            call_id: call.id.clone(),
            name: call.name.clone(),
            args: hooked.as_ref().map_or(args, Value::clone),
            result: None,
            is_error: false,
        })
        .await;
    let args = match hooked {
        Ok(args) => args,
        Err(blocked) => {
            let blocked = Err(ToolError::Denied(blocked.to_string()));
            return finish_tool(input, call, blocked).await;
        }
    };
    let started = std::time::Instant::now();
    let outcome = execute_tool(input, call, args.clone(), deadline).await;
    let is_error = outcome.is_err();
    let text = finish_tool(input, call, outcome).await;
    let finished = CallOutcome {
        args: &args,
        result: &text,
        is_error,
        duration: started.elapsed(),
    };
    hooks.after(&hook_call, &finished);
    text
}

/// Looks the tool up, checks it is allowed, and runs it.
async fn execute_tool(
    input: &LoopInput<'_>,
    call: &ToolCall,
    args: Value,
    deadline: tokio::time::Instant,
) -> Result<String, ToolError> {
    let tool = match input.env.tools.get(&call.name) {
        Some(tool) if input.allowed_tools.iter().any(|t| t == &call.name) => tool,
        Some(_) => {
            return Err(ToolError::Denied(format!(
                "tool {} is not allowed for this agent",
                call.name
            )))
        }
        None => {
            return Err(ToolError::Denied(format!(
                "there is no tool named {}",
                call.name
            )))
        }
    };
    let ctx = ToolContext {
        agent_id: input.spec.agent_id.clone(),
        session_key: input.spec.session_key.clone(),
        workspace: input.env.workspace.clone(),
        store: input.env.store.clone(),
        http: input.env.http.clone(),
        cancel: input.cancel.child_token(),
        config: input.env.config.clone(),
        services: input.env.services.clone(),
    };
    let outcome = tokio::select! {
        outcome = tool.execute(args, &ctx) => outcome,
        _ = tokio::time::sleep_until(deadline) => {
            ctx.cancel.cancel();
            Err(ToolError::Failed("the run's time ran out while this tool was running".into()))
        }
        _ = input.cancel.cancelled() => Err(ToolError::Cancelled),
    };
    outcome.map(|o| o.text)
}

async fn finish_tool(
    input: &LoopInput<'_>,
    call: &ToolCall,
    outcome: Result<String, ToolError>,
) -> String {
    let (text, is_error) = match outcome {
        Ok(text) => (cap_result(text), false),
        Err(e) => (format!("Error: {e}"), true),
    };
    let _ = input
        .events
        .send(RunEvent::Tool {
            phase: "result",
            call_id: call.id.clone(),
            name: call.name.clone(),
            args: Value::Null,
            result: Some(text.clone()),
            is_error,
        })
        .await;
    text
}

/// One model call with failover: transient errors are retried with backoff,
/// refused keys rotate to the provider's next auth profile, a rejected
/// thinking level is lowered, and otherwise the next model of the chain is
/// tried — all only while nothing of this step was shown yet. A context
/// overflow stops at once with a message starting `context overflow:`.
async fn stream_with_fallbacks(
    input: &LoopInput<'_>,
    messages: &[ChatMessage],
    allowed_tools: &[String],
    deadline: tokio::time::Instant,
    text: &mut String,
    reasoning: &mut ReasoningSink,
) -> Result<(Completion, ResolvedModel), LoopResult> {
    let mut last_error = String::from("no model answered");
    let before = text.len();
    let stopped = |text: &String, status| LoopResult::Stopped {
        partial: text.clone(),
        status,
    };
    for chain_model in input.models {
        let mut attempt = ModelAttempt::new(chain_model);
        loop {
            let model = attempt.current();
            let request = ProviderRequest {
                model: model.model_id.clone(),
                messages: messages.to_vec(),
                max_tokens: model.max_tokens,
                tools: input.env.tools.specs_for(
                    allowed_tools,
                    SchemaDialect::for_model(&model.provider_id, &model.model_id),
                ),
            };
            let streamed = stream_one(
                &model,
                request,
                input.cancel,
                deadline,
                input.events,
                text,
                reasoning,
            )
            .await;
            let error = match streamed {
                Ok(completion) => return Ok((completion, model)),
                Err(Stop::Aborted) => return Err(stopped(text, RunStatus::Aborted)),
                Err(Stop::TimedOut) => return Err(stopped(text, RunStatus::Timeout)),
                Err(Stop::Failed(e)) => e,
            };
            last_error = format!(
                "{}/{} ({}): {error}",
                model.provider_id,
                model.model_id,
                attempt.profile_id()
            );
            log::warn!("run {}: {last_error}", input.spec.run_id);
            if text.len() > before {
                return Err(LoopResult::Failed {
                    partial: text.clone(),
                    message: last_error,
                });
            }
            match attempt.after_error(&error) {
                FailoverStep::Retry(delay) => {
                    match pause(model.policy.sleeper.as_ref(), delay, input.cancel, deadline).await
                    {
                        PauseEnd::Elapsed => {}
                        PauseEnd::Cancelled => return Err(stopped(text, RunStatus::Aborted)),
                        PauseEnd::DeadlinePassed => return Err(stopped(text, RunStatus::Timeout)),
                    }
                }
                FailoverStep::NextProfile | FailoverStep::Downgrade(_) => {}
                FailoverStep::NextModel => break,
                FailoverStep::ContextOverflow => {
                    return Err(LoopResult::Failed {
                        partial: text.clone(),
                        message: format!("context overflow: {last_error}"),
                    })
                }
            }
        }
    }
    Err(LoopResult::Failed {
        partial: text.clone(),
        message: last_error,
    })
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
    reasoning: &mut ReasoningSink,
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
            Some(event) = delta_rx.recv() => forward_stream_event(event, events, text, reasoning).await,
            result = &mut call => break result,
            _ = tokio::time::sleep_until(deadline), if !timed_out => {
                timed_out = true;
                call_cancel.cancel();
            }
        }
    };
    while let Ok(event) = delta_rx.try_recv() {
        forward_stream_event(event, events, text, reasoning).await;
    }
    match result {
        Ok(completion) => Ok(completion),
        Err(ProviderError::Cancelled) if timed_out => Err(Stop::TimedOut),
        Err(ProviderError::Cancelled) => Err(Stop::Aborted),
        Err(_) if cancel.is_cancelled() => Err(Stop::Aborted),
        Err(e) => Err(Stop::Failed(e)),
    }
}

/// Answer text goes out as `Delta` events; thinking goes to the sink, which
/// decides by reasoning level whether anything leaves now.
async fn forward_stream_event(
    event: StreamEvent,
    events: &mpsc::Sender<RunEvent>,
    text: &mut String,
    reasoning: &mut ReasoningSink,
) {
    match event {
        StreamEvent::TextDelta(delta) => {
            text.push_str(&delta);
            let _ = events
                .send(RunEvent::Delta {
                    text: text.clone(),
                    delta,
                })
                .await;
        }
        StreamEvent::ReasoningDelta(delta) => {
            if let Some(event) = reasoning.push(&delta) {
                let _ = events.send(event).await;
            }
        }
    }
}
