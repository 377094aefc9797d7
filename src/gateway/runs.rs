//! Starting agent runs for gateway clients and turning their progress into
//! protocol events: `agent` events for the requesting connection, `chat`
//! events (throttled to one delta per 150 ms) for every reader, and the final
//! `res` of an `agent` request.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::future::BoxFuture;

use serde_json::{json, Value};
use tokio::sync::mpsc;

use parking_lot::Mutex;

use crate::agent::{
    format_reasoning_block, ReplySettlement, RunEvent, RunListeners, RunObserver, RunOutcome,
    RunStartError, RunStatus, RunWaiters, TurnSpec,
};
use crate::queue::LaneKind;
use crate::reply::media_lines::{display_text, live_display_text};
use crate::store::Settlement;
use crate::system::clock::now_ms;

use super::clients::BroadcastOptions;
use super::frames::{self, ErrorShape};
use super::idempotency::{self, Answer, Waiter};
use super::scopes;
use super::state::GatewayState;

/// Minimum gap between two `chat` delta events of one run.
pub const CHAT_DELTA_THROTTLE_MS: u64 = 150;

pub use crate::agent::{FinalReply, PreparedRun, RunOrigin, RunPlacement};

/// A run that did not start, as a wire error.
pub fn start_error(error: RunStartError) -> ErrorShape {
    match error {
        RunStartError::ShuttingDown => ErrorShape::unavailable(error.to_string()).retry_after(1000),
        RunStartError::Workspace { .. } => ErrorShape::unavailable(error.to_string()),
        RunStartError::AlreadyActive(_) => ErrorShape::invalid(error.to_string()),
    }
}

/// Starts a run in the background; the caller has already answered (or will
/// answer) the request that asked for it.
pub fn start(
    state: &Arc<GatewayState>,
    spec: TurnSpec,
    origin: RunOrigin,
) -> Result<(), ErrorShape> {
    start_in_lane(state, spec, origin, LaneKind::Main)
}

/// [`start`], admitted through `lane` instead of the main lane.
pub fn start_in_lane(
    state: &Arc<GatewayState>,
    spec: TurnSpec,
    origin: RunOrigin,
    lane: LaneKind,
) -> Result<(), ErrorShape> {
    start_placed(state, spec, origin, RunPlacement { lane, quiet: false })
}

/// [`start`] on a chosen lane, optionally without `chat` events.
pub fn start_placed(
    state: &Arc<GatewayState>,
    spec: TurnSpec,
    origin: RunOrigin,
    placement: RunPlacement,
) -> Result<(), ErrorShape> {
    state
        .services
        .runtime
        .start(spec, origin, placement)
        .map_err(start_error)
}

/// [`start`] for an `agent` request with an idempotency key: the key's answer is committed with the
/// run's reply ([`AgentAnswer`]), so the run ends with one commit instead of two.
pub fn start_answering(
    state: &Arc<GatewayState>,
    spec: TurnSpec,
    origin: RunOrigin,
    key: &str,
) -> Result<(), ErrorShape> {
    let answer: Arc<dyn ReplySettlement> = Arc::new(AgentAnswer {
        state: Arc::downgrade(state),
        key: key.to_string(),
        answer: Mutex::new(None),
    });
    let placement = RunPlacement {
        lane: LaneKind::Main,
        quiet: false,
    };
    state
        .services
        .runtime
        .start_settling(spec, origin, placement, Some(answer))
        .map_err(start_error)
}

/// The `agent` answer of one idempotency key, kept in the store by the reply's commit; once committed the
/// cache knows, and finishing the key with the same answer writes nothing more (an answer that differs,
/// with a reasoning block, is written as before).
struct AgentAnswer {
    state: Weak<GatewayState>,
    key: String,
    answer: Mutex<Option<Answer>>,
}

impl ReplySettlement for AgentAnswer {
    fn settlements(&self, outcome: &RunOutcome) -> Vec<Settlement> {
        let (ok, payload, error) = final_payload(outcome);
        let error = error.as_ref().map(ErrorShape::to_json);
        let settlement =
            idempotency::settlement(&self.key, ok, &payload, error.as_ref(), now_ms(), &[]);
        *self.answer.lock() = Some((ok, payload, error));
        vec![settlement]
    }

    fn committed(&self) {
        if let (Some(state), Some(answer)) = (self.state.upgrade(), self.answer.lock().take()) {
            state.idempotency.mark_persisted(&self.key, answer);
        }
    }
}

/// Registers the run and prepares its environment, without starting it.
pub fn prepare(
    state: &Arc<GatewayState>,
    spec: TurnSpec,
    origin: RunOrigin,
) -> Result<PreparedRun, ErrorShape> {
    state
        .services
        .runtime
        .prepare(spec, origin)
        .map_err(start_error)
}

/// The gateway's ear on every run: `agent` and `chat` events, answers to the
/// requests waiting on a run, `sessions.changed`.
pub struct GatewayRunObserver {
    pub state: Weak<GatewayState>,
}

impl RunObserver for GatewayRunObserver {
    fn follow(
        &self,
        spec: TurnSpec,
        listeners: RunListeners,
        events: mpsc::Receiver<RunEvent>,
    ) -> BoxFuture<'static, Option<String>> {
        let state = self.state.clone();
        Box::pin(async move { forward(state, spec, listeners, events).await })
    }

    fn finished(&self, outcome: &RunOutcome, reasoning: Option<String>, waiters: RunWaiters) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        // The answer is built only for a request that waits on it (`agent`,
        // or its idempotency key); a queued turn's owner settles its own.
        if waiters.idempotency_key.is_some() || waiters.final_reply.is_some() {
            let answer = final_answer(outcome, reasoning);
            answer_waiters(&state, answer, waiters.final_reply, waiters.idempotency_key);
        }
        state.clients.broadcast(
            "sessions.changed",
            &json!({"ts": now_ms()}),
            BroadcastOptions {
                drop_if_slow: true,
                scope: Some(scopes::READ),
                state_version: None,
            },
        );
    }
}

/// [`final_payload`] with the run's reasoning block (reasoning level `on`)
/// after the answer.
fn final_answer(
    outcome: &RunOutcome,
    reasoning: Option<String>,
) -> (bool, Value, Option<ErrorShape>) {
    let (ok, mut payload, error) = final_payload(outcome);
    if let (Some(text), Some(payloads)) = (reasoning, payload["result"]["payloads"].as_array_mut())
    {
        payloads.push(
            json!({"text": format_reasoning_block(&text), "mediaUrl": null, "isReasoning": true}),
        );
    }
    (ok, payload, error)
}

/// Sends the run's final answer to the request that started it and to the
/// requests waiting on its idempotency key.
fn answer_waiters(
    state: &GatewayState,
    (ok, payload, error): (bool, Value, Option<ErrorShape>),
    final_reply: Option<FinalReply>,
    idempotency_key: Option<String>,
) {
    let mut waiters = Vec::new();
    if let Some(key) = idempotency_key {
        waiters = state.idempotency.finish(
            &key,
            ok,
            payload.clone(),
            error.as_ref().map(ErrorShape::to_json),
            now_ms(),
        );
    }
    if let Some(reply) = final_reply {
        waiters.insert(
            0,
            Waiter {
                conn_id: reply.conn_id,
                request_id: reply.request_id,
            },
        );
    }
    for waiter in waiters {
        let frame = match &error {
            None => frames::response_ok(&waiter.request_id, payload.clone()),
            Some(error) => frames::response_err(&waiter.request_id, error, Some(payload.clone())),
        };
        state.clients.send_raw(&waiter.conn_id, frame);
    }
}

/// The final `agent` answer: `(ok, payload, error)`.
pub fn final_payload(outcome: &RunOutcome) -> (bool, Value, Option<ErrorShape>) {
    let meta = json!({
        "durationMs": outcome.ended_at_ms.saturating_sub(outcome.started_at_ms),
        "aborted": outcome.status == RunStatus::Aborted,
        "stopReason": outcome.stop_reason,
        "agentMeta": {
            "sessionId": outcome.session_id,
            "provider": outcome.provider,
            "model": outcome.model,
            "usage": {
                "input": outcome.usage.input_tokens,
                "output": outcome.usage.output_tokens,
                "total": outcome.usage.input_tokens + outcome.usage.output_tokens,
            },
        },
    });
    let payloads = if outcome.text.is_empty() {
        json!([])
    } else {
        json!([{"text": outcome.text, "mediaUrl": null}])
    };
    match outcome.status {
        RunStatus::Ok | RunStatus::Aborted => (
            true,
            json!({
                "runId": outcome.run_id,
                "status": "ok",
                "summary": if outcome.status == RunStatus::Ok { "completed" } else { "aborted" },
                "result": {"payloads": payloads, "meta": meta},
            }),
            None,
        ),
        RunStatus::Error | RunStatus::Timeout => {
            let message = outcome.error.clone().unwrap_or_else(|| "run failed".into());
            (
                false,
                json!({"runId": outcome.run_id, "status": "error", "summary": message}),
                Some(ErrorShape::unavailable(message)),
            )
        }
    }
}

struct ChatThrottle {
    seq: u64,
    last_sent_ms: u64,
    /// The display text of the last delta sent.
    sent: String,
    /// The run's raw text not yet sent.
    pending: Option<String>,
}

/// Forwards one run's events until it finishes; returns the run's reasoning
/// block (reasoning level `on`) for the final answer.
async fn forward(
    state: Weak<GatewayState>,
    spec: TurnSpec,
    listeners: RunListeners,
    mut rx: mpsc::Receiver<RunEvent>,
) -> Option<String> {
    let state = state.upgrade()?;
    let mut reasoning_block = None;
    let RunListeners {
        requester,
        tap,
        quiet,
    } = listeners;
    let mut agent_seq = 0u64;
    let mut chat = ChatThrottle {
        seq: 0,
        last_sent_ms: 0,
        sent: String::new(),
        pending: None,
    };
    let mut flush_at: Option<tokio::time::Instant> = None;
    if !quiet {
        let user = json!({"role": "user", "content": [{"type": "text", "text": spec.message}], "timestamp": now_ms()});
        broadcast_session_message(&state, &spec, user);
    }
    loop {
        let event = tokio::select! {
            event = rx.recv() => event,
            _ = tokio::time::sleep_until(flush_at.unwrap_or_else(tokio::time::Instant::now)), if flush_at.is_some() => {
                flush_at = None;
                if !quiet {
                    flush_chat_delta(&state, &spec, &mut chat);
                }
                continue;
            }
        };
        let Some(event) = event else { break };
        if let Some(tap) = &tap {
            let _ = tap.send(event.clone()).await;
        }
        let mut agent_event = |stream: &str, data: Value| {
            agent_seq += 1;
            if let Some(conn) = &requester {
                let payload = json!({
                    "runId": spec.run_id, "seq": agent_seq, "stream": stream, "ts": now_ms(),
                    "data": data, "sessionKey": spec.session_key,
                });
                state.clients.send_to(conn, "agent", &payload);
            }
        };
        match event {
            RunEvent::Started { started_at_ms } => {
                agent_event(
                    "lifecycle",
                    json!({"phase": "start", "startedAt": started_at_ms}),
                );
            }
            RunEvent::Delta { text, delta } => {
                agent_event("assistant", json!({"text": text, "delta": delta}));
                if quiet {
                    continue;
                }
                chat.pending = Some(text);
                let now = now_ms();
                if now.saturating_sub(chat.last_sent_ms) >= CHAT_DELTA_THROTTLE_MS {
                    flush_chat_delta(&state, &spec, &mut chat);
                    flush_at = None;
                } else if flush_at.is_none() {
                    let wait = CHAT_DELTA_THROTTLE_MS - now.saturating_sub(chat.last_sent_ms);
                    flush_at = Some(tokio::time::Instant::now() + Duration::from_millis(wait));
                }
            }
            RunEvent::ReasoningDelta { text, delta } => {
                agent_event("thinking", json!({"text": text, "delta": delta}));
            }
            RunEvent::ReasoningBlock { text } => {
                agent_event("thinking", json!({"text": text, "delta": text}));
                reasoning_block = Some(text);
            }
            RunEvent::Tool {
                phase,
                call_id,
                name,
                args,
                result,
                is_error,
            } => {
                // Tool events go only to clients that asked for them, and the
                // result itself only as a summary flag unless verbose.
                let wants = requester
                    .as_deref()
                    .is_some_and(|c| state.clients.has_cap(c, "tool-events"));
                if wants {
                    let mut data = json!({"phase": phase, "name": name, "toolCallId": call_id});
                    if phase == "start" {
                        data["args"] = args;
                    } else {
                        data["isError"] = json!(is_error);
                        data["meta"] = json!({"chars": result.as_ref().map(|r| r.len())});
                    }
                    agent_event("tool", data);
                }
            }
            RunEvent::Finished(outcome) => {
                if !quiet {
                    flush_chat_delta(&state, &spec, &mut chat);
                }
                let ended = json!({
                    "phase": if outcome.status == RunStatus::Error || outcome.status == RunStatus::Timeout { "error" } else { "end" },
                    "startedAt": outcome.started_at_ms,
                    "endedAt": outcome.ended_at_ms,
                    "aborted": outcome.status == RunStatus::Aborted,
                    "error": outcome.error,
                });
                agent_event("lifecycle", ended);
                if !quiet {
                    let reasoning = reasoning_block.as_deref();
                    let content = media_content(&state, &spec.agent_id, &outcome.text).await;
                    let message = match content {
                        Some(content) => {
                            json!({"role": "assistant", "content": content, "timestamp": now_ms()})
                        }
                        None => chat_message(&display_text(&outcome.text)),
                    };
                    broadcast_chat_final(
                        &state,
                        &spec,
                        &outcome,
                        message.clone(),
                        reasoning,
                        chat.seq + 1,
                    );
                    if !outcome.text.is_empty() {
                        broadcast_session_message(&state, &spec, message);
                    }
                }
                break;
            }
        }
    }
    reasoning_block
}

/// A `session.message` event: one message of a session's transcript, as
/// upstream sends it to the Control UI's open conversation.
fn broadcast_session_message(state: &GatewayState, spec: &TurnSpec, message: Value) {
    let payload = json!({
        "sessionKey": spec.session_key, "agentId": spec.agent_id,
        "runId": spec.run_id, "message": message,
    });
    state.clients.broadcast(
        "session.message",
        &payload,
        BroadcastOptions {
            drop_if_slow: true,
            scope: Some(scopes::READ),
            state_version: None,
        },
    );
}

/// The web chat's blocks for a reply with `MEDIA:` lines (`chat_media`),
/// read off the async workers.
async fn media_content(state: &GatewayState, agent_id: &str, text: &str) -> Option<Vec<Value>> {
    if !text.to_ascii_lowercase().contains("media:") {
        return None;
    }
    let config = state.config();
    let media_root = crate::channels::media::media_root();
    let policy = crate::media::outbound::SourcePolicy {
        workspace: state.workspace_for(&config, agent_id),
        outbound_dir: media_root.join("outbound"),
        media_root,
        max_bytes: 64 * 1024 * 1024,
        outbound_dir_bytes: crate::media::MediaBudget::for_this_board().area_bytes,
    };
    let text = text.to_string();
    tokio::task::spawn_blocking(move || super::chat_media::assistant_content(&text, &policy))
        .await
        .ok()
        .flatten()
}

fn chat_message(text: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}], "timestamp": now_ms()})
}

/// Sends the pending text as a `chat` delta: its display text (`MEDIA:`
/// lines and directive tags out, an incomplete one held back), with
/// `deltaText` the part after the last delta's text, or the whole text and
/// `replace: true` when it no longer continues it (upstream's rule).
fn flush_chat_delta(state: &GatewayState, spec: &TurnSpec, chat: &mut ChatThrottle) {
    let Some(raw) = chat.pending.take() else {
        return;
    };
    let text = live_display_text(&raw);
    if text == chat.sent {
        return;
    }
    let continues = text.starts_with(chat.sent.as_str());
    let delta_text = if continues {
        text[chat.sent.len()..].to_string()
    } else {
        text.clone()
    };
    chat.last_sent_ms = now_ms();
    chat.seq += 1;
    let mut payload = json!({
        "runId": spec.run_id, "sessionKey": spec.session_key, "seq": chat.seq, "state": "delta",
        "message": chat_message(&text), "deltaText": delta_text, "agentId": spec.agent_id,
    });
    if !continues {
        payload["replace"] = json!(true);
    }
    chat.sent = text;
    state.clients.broadcast(
        "chat",
        &payload,
        BroadcastOptions {
            drop_if_slow: true,
            scope: Some(scopes::READ),
            state_version: None,
        },
    );
}

/// A `chat` final event carrying `text` without a run (a chat command's
/// answer): readers show it like any assistant reply.
pub fn broadcast_chat_text(
    state: &GatewayState,
    run_id: &str,
    session_key: &str,
    agent_id: &str,
    text: &str,
) {
    let payload = json!({
        "runId": run_id, "sessionKey": session_key, "seq": 1, "state": "final",
        "message": chat_message(text), "agentId": agent_id,
    });
    state.clients.broadcast(
        "chat",
        &payload,
        BroadcastOptions {
            drop_if_slow: false,
            scope: Some(scopes::READ),
            state_version: None,
        },
    );
}

fn broadcast_chat_final(
    state: &GatewayState,
    spec: &TurnSpec,
    outcome: &RunOutcome,
    message: Value,
    reasoning: Option<&str>,
    seq: u64,
) {
    let (chat_state, error_kind) = match outcome.status {
        RunStatus::Ok => ("final", None),
        RunStatus::Aborted => ("aborted", None),
        RunStatus::Timeout => ("error", Some("timeout")),
        RunStatus::Error => ("error", Some("unknown")),
    };
    let mut payload = json!({
        "runId": spec.run_id, "sessionKey": spec.session_key, "seq": seq, "state": chat_state,
        "message": message, "agentId": spec.agent_id,
        "usage": {"input": outcome.usage.input_tokens, "output": outcome.usage.output_tokens},
        "stopReason": outcome.stop_reason,
    });
    if let (Some(thinking), Some(content)) =
        (reasoning, payload["message"]["content"].as_array_mut())
    {
        content.push(json!({"type": "thinking", "thinking": thinking}));
    }
    if let Some(kind) = error_kind {
        payload["errorMessage"] = json!(outcome.error);
        payload["errorKind"] = json!(kind);
    }
    state.clients.broadcast(
        "chat",
        &payload,
        BroadcastOptions {
            drop_if_slow: false,
            scope: Some(scopes::READ),
            state_version: None,
        },
    );
}
