//! `agent`, `agent.wait`, `chat.send` and `chat.abort`: starting, waiting for
//! and stopping agent runs, with idempotency keys deduplicated as upstream.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::agent::{record_user_message, ResetChat, TurnSpec, UserMessage, DEFAULT_RUN_TIMEOUT_MS};
use crate::channels::commands::{answer as answer_command, CommandCaller};
use crate::channels::inbox::{self, WebchatRecord};
use crate::channels::turns::TurnOrigin;
use crate::gateway::clients::ClientInfo;
use crate::gateway::frames::{self, ErrorShape};
use crate::gateway::idempotency::{Seen, Waiter};
use crate::gateway::runs::{self, FinalReply, RunOrigin};
use crate::gateway::scopes;
use crate::gateway::state::GatewayState;
use crate::gateway::webchat::hub_of;
use crate::pipeline::commands::{parse_command, parse_reset_trigger, CommandInvocation};
use crate::pipeline::context::{normalize_newlines, sanitize_user_text};
use crate::queue::{EnqueueOutcome, IdleClaim, LaneKind, QueueSettings, QueuedMessage};
use crate::system::clock::now_ms;

use super::params::Params;
use super::sessions::canonical_key;
use super::Reply;

/// The web chat's channel id (internal: `send` refuses it).
pub const WEBCHAT_CHANNEL: &str = "webchat";
/// Default `agent.wait` timeout.
pub const DEFAULT_WAIT_TIMEOUT_MS: u64 = 30_000;
/// Longest `agent.wait` timeout accepted.
pub const MAX_WAIT_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;

fn resolve_agent(state: &GatewayState, requested: Option<&str>) -> Result<String, ErrorShape> {
    let config = state.config();
    match requested.map(str::trim).filter(|a| !a.is_empty()) {
        None => Ok(config.agents.default_agent_id()),
        Some(id) if config.agents.list.is_empty() && id == config.agents.default_agent_id() => {
            Ok(id.to_string())
        }
        Some(id) if config.agents.list.iter().any(|a| a.id == id) => Ok(id.to_string()),
        Some(id) => Err(ErrorShape::invalid(format!("unknown agent id: {id}"))),
    }
}

fn run_timeout_ms(state: &GatewayState, requested_s: Option<u64>) -> u64 {
    requested_s
        .map(|s| s * 1000)
        .or_else(|| {
            state
                .config()
                .agents
                .defaults
                .timeout_seconds
                .map(|s| u64::from(s) * 1000)
        })
        .unwrap_or(DEFAULT_RUN_TIMEOUT_MS)
}

/// `agent`: answers `accepted` at once and the final result later on the same id.
pub fn agent(
    state: &Arc<GatewayState>,
    info: &Arc<ClientInfo>,
    request_id: &str,
    params: &Value,
) -> Reply {
    match start_agent(state, info, request_id, params) {
        Ok(()) => Reply::Sent,
        Err(error) => Reply::Err(error),
    }
}

fn start_agent(
    state: &Arc<GatewayState>,
    info: &Arc<ClientInfo>,
    request_id: &str,
    params: &Value,
) -> Result<(), ErrorShape> {
    let p = Params::new("agent", params)?;
    let message = p.str("message", true)?;
    let key = p.str("idempotencyKey", false)?;
    let cache_key = format!("agent:{key}");
    let now = now_ms();
    match state.idempotency.get(&cache_key, now) {
        Some(Seen::InFlight { ack }) => {
            state
                .clients
                .send_raw(&info.conn_id, frames::response_ok(request_id, ack));
            let waiter = Waiter {
                conn_id: info.conn_id.clone(),
                request_id: request_id.to_string(),
            };
            state.idempotency.add_waiter(&cache_key, waiter);
            return Ok(());
        }
        Some(Seen::Done { ok, payload, error }) => {
            let frame = match (ok, error) {
                (true, _) | (false, None) => frames::response_ok(request_id, payload),
                (false, Some(error)) => cached_error_frame(request_id, &error, payload),
            };
            state.clients.send_raw(&info.conn_id, frame);
            return Ok(());
        }
        None => {}
    }
    let config = state.config();
    let agent_id = resolve_agent(state, p.opt_str("agentId")?)?;
    let session_key = canonical_key(&config, Some(&agent_id), p.opt_str("sessionKey")?);
    let model_override = match (p.opt_str("provider")?, p.opt_str("model")?) {
        (Some(provider), Some(model)) => Some(format!("{provider}/{model}")),
        (None, Some(model)) if model.contains('/') => Some(model.to_string()),
        _ => None,
    };
    let spec = TurnSpec {
        run_id: key.to_string(),
        agent_id,
        session_key,
        message: message.to_string(),
        timeout_ms: run_timeout_ms(state, p.opt_u64("timeout", 1, 86_400)?),
        model_override,
        extra_system_prompt: p.opt_str("extraSystemPrompt")?.map(str::to_string),
        label: p.opt_str("label")?.map(str::to_string),
        channel: p.opt_str("channel")?.map(str::to_string),
        skill_filter: None,
        interaction: true,
        images: Vec::new(),
    };
    roll_over_if_stale(state, &spec, now);
    let ack = json!({"runId": key, "status": "accepted", "acceptedAt": now});
    state.idempotency.begin(&cache_key, ack.clone(), now);
    state
        .clients
        .send_raw(&info.conn_id, frames::response_ok(request_id, ack));
    let reply = FinalReply {
        conn_id: info.conn_id.clone(),
        request_id: request_id.to_string(),
    };
    let origin = RunOrigin {
        requester: Some(info.conn_id.clone()),
        final_reply: Some(reply),
        idempotency_key: Some(cache_key.clone()),
        tap: None,
    };
    if let Err(error) = runs::start_answering(state, spec, origin, &cache_key) {
        state.idempotency.forget(&cache_key);
        return Err(error);
    }
    Ok(())
}

/// A session `session.reset` calls stale starts over before an `agent` turn runs in it (not while a run
/// of it is active).
fn roll_over_if_stale(state: &GatewayState, spec: &TurnSpec, now: u64) {
    let chat = ResetChat {
        channel: spec.channel.as_deref(),
        is_group: false,
    };
    let services = &state.services;
    let rolled = services.store.run_blocking(|| {
        services
            .sessions
            .roll_over_if_stale(&spec.session_key, &chat, now)
    });
    if let Err(error) = rolled {
        log::warn!(
            "cannot check whether session {} is stale: {error}",
            spec.session_key
        );
    }
}

fn cached_error_frame(request_id: &str, error: &Value, payload: Value) -> String {
    json!({"type": "res", "id": request_id, "ok": false, "error": error, "payload": payload})
        .to_string()
}

/// `agent.wait`: blocks until the run ends or the timeout passes.
pub async fn wait(state: &Arc<GatewayState>, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("agent.wait", params)?;
    let run_id = p.str("runId", false)?.to_string();
    let timeout_ms = p
        .opt_u64("timeoutMs", 0, MAX_WAIT_TIMEOUT_MS)?
        .unwrap_or(DEFAULT_WAIT_TIMEOUT_MS);
    match state
        .services
        .runs
        .wait(&run_id, Duration::from_millis(timeout_ms))
        .await
    {
        None => Ok(json!({"runId": run_id, "status": "timeout"})),
        Some(outcome) => {
            let status = match outcome.status {
                crate::agent::RunStatus::Ok => "ok",
                crate::agent::RunStatus::Error => "error",
                // Upstream reports an aborted run as a timeout.
                crate::agent::RunStatus::Aborted | crate::agent::RunStatus::Timeout => "timeout",
            };
            Ok(json!({
                "runId": run_id, "status": status, "startedAt": outcome.started_at_ms,
                "endedAt": outcome.ended_at_ms, "error": outcome.error,
            }))
        }
    }
}

/// `chat.send`: the web chat's way in, through the same command queue as
/// every channel (so `messages.queue` modes apply); `/stop` aborts, `/new`
/// and `/reset` start over (`/compact` is answered by [`compact`]), other
/// chat commands (`/status`, `/model`, `/help`…) are answered by the channel
/// command handlers and never reach the agent.
///
/// A command's `res` is written before its answer is broadcast, so a client
/// that starts listening on the `res` cannot miss the answer.
pub fn send(
    state: &Arc<GatewayState>,
    info: &Arc<ClientInfo>,
    request_id: &str,
    params: &Value,
) -> Reply {
    match send_or_command(state, info, params) {
        Ok(Sent::Ack(ack)) => Reply::Ok(ack),
        Ok(Sent::Command(caller, command)) => {
            let ack = json!({"runId": caller.run_id, "status": "started"});
            state
                .clients
                .send_raw(&info.conn_id, frames::response_ok(request_id, ack));
            caller.spawn(state, command);
            Reply::Sent
        }
        Err(error) => Reply::Err(error),
    }
}

/// What `chat.send` did with the message.
enum Sent {
    /// Queued, stopped or reset: answered by this `res`.
    Ack(Value),
    /// A chat command, answered after the `res`.
    Command(WebCommand, CommandInvocation),
}

fn send_or_command(
    state: &Arc<GatewayState>,
    info: &Arc<ClientInfo>,
    params: &Value,
) -> Result<Sent, ErrorShape> {
    let p = Params::new("chat.send", params)?;
    let message = p.str("message", true)?;
    let key = p.str("idempotencyKey", false)?;
    let config = state.config();
    let agent_id = resolve_agent(state, p.opt_str("agentId")?)?;
    let session_key = canonical_key(&config, Some(&agent_id), Some(p.str("sessionKey", false)?));
    let hub = hub_of(state);
    match message.trim() {
        "/stop" => {
            let dropped = hub.queue.abort(&session_key);
            let run_ids = state.services.runs.abort_session(&session_key);
            let aborted = dropped || !run_ids.is_empty();
            return Ok(Sent::Ack(
                json!({"ok": true, "aborted": aborted, "runIds": run_ids}),
            ));
        }
        "/new" | "/reset" => {
            hub.queue.abort(&session_key);
            let reset = json!({"key": session_key, "reason": if message.trim() == "/new" { "new" } else { "reset" }});
            return super::sessions::reset(state, &reset).map(Sent::Ack);
        }
        _ => {}
    }
    // `session.resetTriggers`: a new session, then the text after the trigger (if any) runs in it.
    let triggered = parse_reset_trigger(message, &config.session.reset_triggers);
    if let Some(trigger) = &triggered {
        hub.queue.abort(&session_key);
        let reset = super::sessions::reset(state, &json!({"key": session_key, "reason": "reset"}))?;
        if trigger.args.is_empty() {
            return Ok(Sent::Ack(reset));
        }
    }
    let message = triggered.as_ref().map_or(message, |t| t.args.as_str());
    if let Some(command) = parse_command(message, None) {
        let caller = WebCommand {
            run_id: key.to_string(),
            session_key,
            agent_id,
            is_owner: info.scopes.iter().any(|s| s == scopes::ADMIN),
        };
        return Ok(Sent::Command(caller, command));
    }
    // A session whose `sendPolicy` is `deny` takes no message from the web chat (as upstream).
    let store = &state.services.store;
    if store
        .run_blocking(|| store.session(&session_key))
        .ok()
        .flatten()
        .is_some_and(|entry| entry.sends_denied())
    {
        return Err(ErrorShape::invalid("send blocked by session policy"));
    }
    let cache_key = format!("chat:{key}");
    let now = now_ms();
    match state.idempotency.get(&cache_key, now) {
        Some(Seen::InFlight { .. }) => {
            return Ok(Sent::Ack(json!({"runId": key, "status": "in_flight"})))
        }
        Some(Seen::Done { ok, .. }) => {
            return Ok(Sent::Ack(
                json!({"runId": key, "status": if ok { "ok" } else { "error" }}),
            ))
        }
        None => {}
    }
    if !state.is_ready() {
        return Err(ErrorShape::unavailable("the gateway is shutting down").retry_after(1000));
    }
    let timeout_ms = p
        .opt_u64("timeoutMs", 1, 86_400_000)?
        .unwrap_or_else(|| run_timeout_ms(state, None));
    let ack = json!({"runId": key, "status": "started"});
    // The web chat is channel `webchat`: its text gets the pipeline's
    // finalisation (newlines, neutralised prompt markers) like any channel.
    let record = WebchatRecord {
        agent_id,
        session_key: session_key.clone(),
        run_id: key.to_string(),
        text: sanitize_user_text(&normalize_newlines(message)),
        timeout_ms,
    };
    // Kept before the `res`: a crash before the run ends replays it. An idle
    // session is claimed so the message starts its turn at once, and the
    // turn's user entry goes into the same commit (one fsync for both).
    let settings = QueueSettings::for_channel(&state.config().messages.queue, WEBCHAT_CHANNEL);
    let claim = claim_session(state, &session_key, settings);
    // A commit waits for its fsync: the worker's other tasks go on meanwhile, and concurrent sessions'
    // writes can join one group commit (`store/group_commit.rs`).
    let user_turn = claim.is_some();
    let inbox = state
        .services
        .store
        .run_blocking(|| keep_webchat(state, &record, user_turn))
        .map_err(ErrorShape::unavailable)?;
    state.idempotency.begin(&cache_key, ack.clone(), now);
    let requester = WebchatRequester {
        conn_id: info.conn_id.clone(),
        idempotency_key: cache_key,
    };
    match enqueue_webchat(state, record, Some(requester), inbox, claim) {
        // The refused message's origin forgot its idempotency key and its
        // record on drop.
        EnqueueOutcome::Dropped => Err(ErrorShape::unavailable(format!(
            "the queue of session {session_key} is full (messages.queue.cap)"
        ))),
        _ => Ok(Sent::Ack(ack)),
    }
}

/// Who waits for a web chat message's run.
struct WebchatRequester {
    conn_id: String,
    idempotency_key: String,
}

/// Longest wait for a session whose run has ended to leave the queue (its turn's last steps take
/// microseconds; a client answering the final at once can be faster).
const CLAIM_WAIT: Duration = Duration::from_millis(20);
/// Pause between looks while waiting.
const CLAIM_RETRY: Duration = Duration::from_micros(100);

/// Claims the session for this message when it is idle, or about to be: a session whose run has ended and
/// which has nothing waiting is only finishing its turn, so the claim waits for that (up to `CLAIM_WAIT`,
/// off the event loop) rather than queueing the message behind it (which costs a commit of its own).
fn claim_session(
    state: &Arc<GatewayState>,
    session_key: &str,
    settings: QueueSettings,
) -> Option<IdleClaim> {
    let queue = &hub_of(state).queue;
    if let Some(claim) = queue.claim_idle(session_key, LaneKind::Main, settings) {
        return Some(claim);
    }
    let ending = || {
        queue.pending_len(session_key) == 0
            && state
                .services
                .runs
                .active_in_session(session_key)
                .is_empty()
    };
    if !ending() {
        return None;
    }
    crate::system::blocking::off_worker(|| {
        let deadline = std::time::Instant::now() + CLAIM_WAIT;
        while std::time::Instant::now() < deadline && ending() {
            std::thread::sleep(CLAIM_RETRY);
            if let Some(claim) = queue.claim_idle(session_key, LaneKind::Main, settings) {
                return Some(claim);
            }
        }
        None
    })
}

/// Writes a web chat message's record (blocks on the store); with
/// `user_turn` (its session is claimed: the turn starts with it) the turn's
/// user entry is written in the same commit. Returns the record's key.
fn keep_webchat(
    state: &GatewayState,
    record: &WebchatRecord,
    user_turn: bool,
) -> Result<String, String> {
    let store = &state.services.store;
    if !user_turn {
        return inbox::record_webchat(store, record).map_err(|e| e.to_string());
    }
    let (key, bytes) = inbox::webchat_record(record).map_err(|e| e.to_string())?;
    let message = UserMessage {
        session_key: &record.session_key,
        run_id: &record.run_id,
        text: &record.text,
        label: None,
        channel: Some(WEBCHAT_CHANNEL),
        now_ms: now_ms(),
        interaction: true,
    };
    record_user_message(store, &message, (&key, &bytes))
        .map_err(|e| format!("cannot keep the message: {e}"))?;
    Ok(key)
}

/// Queues a web chat message on its session's main lane (starts it in the
/// session `claim` holds, when given).
fn enqueue_webchat(
    state: &Arc<GatewayState>,
    record: WebchatRecord,
    requester: Option<WebchatRequester>,
    inbox: String,
    claim: Option<IdleClaim>,
) -> EnqueueOutcome {
    let (requester, idempotency_key) = match requester {
        Some(r) => (Some(r.conn_id), Some(r.idempotency_key)),
        None => (None, None),
    };
    let hub = hub_of(state);
    let origin = TurnOrigin {
        agent_id: record.agent_id,
        channel: WEBCHAT_CHANNEL.into(),
        run_id: record.run_id.clone(),
        timeout_ms: record.timeout_ms,
        reply: None,
        requester,
        idempotency_key,
        typing: None,
        hub: hub.weak(),
        system_event: false,
        inbox: vec![inbox],
        images: Vec::new(),
    };
    let queued = QueuedMessage {
        id: record.run_id,
        text: record.text,
        attachment: Some(Box::new(origin)),
    };
    if let Some(claim) = claim {
        return claim.start(queued);
    }
    let settings = QueueSettings::for_channel(&state.config().messages.queue, WEBCHAT_CHANNEL);
    hub.queue
        .enqueue(&record.session_key, LaneKind::Main, settings, queued)
}

/// Web chat messages accepted before a crash whose runs never ended run
/// now (their `chat` events reach whoever reads the session).
pub async fn replay_webchat(state: Arc<GatewayState>) {
    for (key, record) in inbox::pending_webchat(&state.services.store).await {
        log::info!(
            "replaying web chat message {} accepted before the restart",
            record.run_id
        );
        if let EnqueueOutcome::Dropped = enqueue_webchat(&state, record, None, key, None) {
            log::warn!("replayed web chat message dropped: the session's queue is full");
        }
    }
}

/// A chat command typed in the web chat: answered by the same handlers as
/// the chat channels, the answer broadcast as a `chat` final event.
struct WebCommand {
    run_id: String,
    session_key: String,
    agent_id: String,
    is_owner: bool,
}

impl WebCommand {
    fn spawn(self, state: &Arc<GatewayState>, command: CommandInvocation) {
        let state = state.clone();
        tokio::spawn(async move {
            let hub = hub_of(&state);
            let caller = CommandCaller {
                session_key: &self.session_key,
                agent_id: &self.agent_id,
                is_group: false,
                is_owner: self.is_owner,
            };
            let text = answer_command(&hub, &command, &caller).await;
            runs::broadcast_chat_text(
                &state,
                &self.run_id,
                &self.session_key,
                &self.agent_id,
                &text,
            );
        });
    }
}

/// The instructions of a `/compact [instructions]` message, if it is one.
pub fn compact_command(params: &Value) -> Option<String> {
    let message = params.get("message")?.as_str()?.trim();
    let rest = message.strip_prefix("/compact")?;
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return None;
    }
    Some(rest.trim().to_string())
}

/// `chat.send` with `/compact`: compacts the session now and answers when done.
pub async fn compact(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("chat.send", params)?;
    let config = state.config();
    let agent_id = resolve_agent(state, p.opt_str("agentId")?)?;
    let session_key = canonical_key(&config, Some(&agent_id), Some(p.str("sessionKey", false)?));
    let instructions = compact_command(params).filter(|i| !i.is_empty());
    super::sessions::compact_key(state, &session_key, instructions.as_deref()).await
}

/// `chat.abort`: stops the session's runs (or one of them).
pub fn abort(state: &Arc<GatewayState>, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("chat.abort", params)?;
    let raw_key = p.str("sessionKey", false)?;
    let run_id = p.opt_str("runId")?;
    let config = state.config();
    let session_key = canonical_key(&config, None, Some(raw_key));
    if let Some(run_id) = run_id {
        return match state.services.runs.session_of(run_id) {
            Some(owner) if owner != session_key => Err(ErrorShape::invalid(format!(
                "run {run_id} does not belong to session {session_key}"
            ))),
            Some(_) => Ok(
                json!({"ok": true, "aborted": state.services.runs.abort(run_id), "runIds": [run_id]}),
            ),
            None => Ok(json!({"ok": true, "aborted": false, "runIds": []})),
        };
    }
    // The runs first: aborting the queue's turn ends its run, which would then leave the registry
    // before it could be listed.
    let mut run_ids = state.services.runs.abort_session(&session_key);
    hub_of(state).queue.abort(&session_key);
    // Some clients pass a run id where the session key goes; honour it.
    if run_ids.is_empty() && state.services.runs.abort(raw_key) {
        run_ids.push(raw_key.to_string());
    }
    Ok(json!({"ok": true, "aborted": !run_ids.is_empty(), "runIds": run_ids}))
}
