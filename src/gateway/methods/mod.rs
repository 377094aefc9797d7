//! Gateway RPC methods: the advertised lists, scope checks and dispatch.
//!
//! Each family lives in its own file; every handler validates its params and
//! answers with upstream's shapes and error codes.

pub mod approvals;
pub mod catalog;
pub mod chat;
pub mod config;
pub mod cron;
pub mod devices;
pub mod figures;
pub mod health;
pub mod heartbeat;
pub mod memory;
pub mod pairing;
pub mod params;
pub mod send;
pub mod sessions;
pub mod setup;
pub mod system;
pub mod update;
pub mod views;
pub mod web;

use std::sync::Arc;

use serde_json::{json, Value};

use super::clients::ClientInfo;
use super::frames::{ErrorCode, ErrorShape, Request};
use super::scopes;
use super::state::GatewayState;

/// Methods advertised in `hello-ok.features.methods`.
pub const METHODS: &[&str] = &[
    "health",
    "status",
    "system-presence",
    "logs.tail",
    "config.get",
    "config.patch",
    "config.apply",
    "config.set",
    "sessions.list",
    "sessions.patch",
    "sessions.reset",
    "sessions.delete",
    "sessions.compact",
    "chat.history",
    "chat.abort",
    "chat.send",
    "agent",
    "agent.wait",
    "send",
    "channels.status",
    "channels.logout",
    "pairing.list",
    "pairing.approve",
    "device.pair.list",
    "device.pair.approve",
    "device.pair.reject",
    "device.pair.remove",
    "device.token.rotate",
    "device.token.revoke",
    "models.list",
    "agents.list",
    "commands.list",
    "memory.status",
    "memory.search",
    "exec.approval.request",
    "exec.approval.waitDecision",
    "exec.approval.resolve",
    "exec.approval.list",
    "exec.approval.get",
    "cron.list",
    "cron.status",
    "cron.add",
    "cron.update",
    "cron.remove",
    "cron.run",
    "cron.runs",
    "wake",
    "last-heartbeat",
    "set-heartbeats",
    "chat.startup",
    "sessions.subscribe",
    "sessions.messages.subscribe",
    "sessions.messages.unsubscribe",
    "sessions.describe",
    "agent.identity.get",
    "models.authStatus",
    "update.status",
    "update.apply",
    "plugin.approval.list",
    "openclaw.approval.list",
    "question.list",
    "tasks.list",
    "progressCard.get",
    "sessions.branches.list",
    "sessions.observer.visibility",
    "sessions.companion.state",
    "talk.catalog",
    "chat.metadata",
    "plugins.list",
    "approval.history",
    "channels.pairing.list",
    "channels.pairing.approve",
    "channels.pairing.dismiss",
    "models.probe",
    "system.info",
    "pincer.memory.index",
    "pincer.setup.status",
    "pincer.setup.test",
    "pincer.setup.channel",
    "pincer.setup.apply",
];

/// Events advertised in `hello-ok.features.events`.
pub const EVENTS: &[&str] = &[
    "connect.challenge",
    "agent",
    "chat",
    "presence",
    "tick",
    "shutdown",
    "health",
    "heartbeat",
    "sessions.changed",
    "device.pair.requested",
    "device.pair.resolved",
    "exec.approval.requested",
    "exec.approval.resolved",
    "session.message",
];

/// What a handler produced.
#[derive(Debug)]
pub enum Reply {
    Ok(Value),
    Err(ErrorShape),
    /// The handler already sent its `res` frame(s).
    Sent,
}

impl From<Result<Value, ErrorShape>> for Reply {
    fn from(result: Result<Value, ErrorShape>) -> Self {
        match result {
            Ok(value) => Reply::Ok(value),
            Err(error) => Reply::Err(error),
        }
    }
}

/// The missing-scope error as the client's protocol version spells it.
fn missing_scope(info: &ClientInfo, scope: &str) -> ErrorShape {
    let message = format!("missing scope: {scope}");
    if info.protocol >= 4 {
        ErrorShape::new(ErrorCode::Forbidden, message).with_details(json!({
            "code": "MISSING_SCOPE", "missingScope": scope, "requiredScopes": [scope],
        }))
    } else {
        ErrorShape::invalid(message)
    }
}

/// Checks the caller's scopes and runs the method.
pub async fn handle(state: &Arc<GatewayState>, info: &Arc<ClientInfo>, request: Request) -> Reply {
    let method = request.method.as_str();
    if method == "connect" {
        return Reply::Err(ErrorShape::invalid(
            "connect is only valid as the first request",
        ));
    }
    if scopes::NODE_ROLE_METHODS.contains(&method) {
        return Reply::Err(ErrorShape::invalid(format!(
            "unauthorized role: {} (node methods need role node)",
            info.role
        )));
    }
    // A setup session (no credential, first-run setup open) may call only
    // the setup methods; they refuse everyone else.
    let setup_method = super::setup::SETUP_METHODS.contains(&method);
    if info.setup.is_some() && !setup_method && method != "health" {
        return Reply::Err(ErrorShape::invalid(format!(
            "{method} needs a signed-in operator: finish first-run setup, then sign in with the gateway password"
        )));
    }
    if setup_method {
        return setup::handle(state, info, method, &request.params)
            .await
            .into();
    }
    // `health` is always allowed, even to a client whose scopes were cleared.
    if method != "health" {
        if let Err(scope) = scopes::authorize(method, &info.scopes) {
            return Reply::Err(missing_scope(info, scope));
        }
    }
    if !state.is_ready() && method != "health" {
        return Reply::Err(
            ErrorShape::unavailable(format!("{method} unavailable during gateway startup"))
                .retry_after(500),
        );
    }
    let params = request.params;
    if method == "agent.wait" {
        return chat::wait(state, &params).await.into();
    }
    if method == "exec.approval.request" {
        return approvals::request(state, &params).await.into();
    }
    if method == "exec.approval.waitDecision" {
        return approvals::wait_decision(state, &params).await.into();
    }
    // Compaction waits for the session's lane and the model: async paths.
    if method == "sessions.compact" {
        return sessions::compact(state, &params).await.into();
    }
    // Delivery waits for the platform (and its retries).
    if method == "send" {
        return send::send(state, &params).await.into();
    }
    // Both wait for the phone (a QR code, then its scan), up to their timeoutMs.
    if method == "web.login.start" {
        return web::start(state, &params).await.into();
    }
    if method == "web.login.wait" {
        return web::wait(state, &params).await.into();
    }
    if method == "channels.logout" {
        return web::logout(state, &params).await.into();
    }
    // One real call to a provider.
    if method == "models.probe" {
        return catalog::probe(state, &params).await.into();
    }
    // Both wait for RAUC over D-Bus; an installation for minutes.
    if method == "update.status" {
        return update::status(&params).await.into();
    }
    if method == "update.apply" {
        return update::apply(state, info, &params).await.into();
    }
    if method == "chat.send" && chat::compact_command(&params).is_some() {
        return chat::compact(state, &params).await.into();
    }
    // Handlers read and write the store, whose commits wait for fsync: keep
    // that off the async workers' backs. Those that touch nothing but the
    // store stay on this thread while its commits are quick (`Store::run_blocking`).
    let handle = || dispatch_sync(state, info, method, &request.id, &params);
    if STORE_ONLY_METHODS.contains(&method) {
        state.services.store.run_blocking(handle)
    } else {
        tokio::task::block_in_place(handle)
    }
}

/// Methods whose handlers block on nothing but the store (no other files, no
/// embeddings, no network).
const STORE_ONLY_METHODS: [&str; 11] = [
    "health",
    "status",
    "system-presence",
    "sessions.list",
    "sessions.patch",
    "sessions.reset",
    "sessions.delete",
    "chat.history",
    "chat.abort",
    "chat.send",
    "agent",
];

fn dispatch_sync(
    state: &Arc<GatewayState>,
    info: &Arc<ClientInfo>,
    method: &str,
    request_id: &str,
    params: &Value,
) -> Reply {
    let params = params.clone();
    match method {
        "health" => health::health(state).into(),
        "status" => health::status(state, info).into(),
        "system-presence" => Reply::Ok(Value::Array(health::presence_list(state))),
        "logs.tail" => health::logs_tail(&params).into(),
        "config.get" => config::get(state).into(),
        "config.patch" => config::write(state, &params, config::WriteMode::Patch).into(),
        "config.apply" => config::write(state, &params, config::WriteMode::Apply).into(),
        "config.set" => config::write(state, &params, config::WriteMode::Set).into(),
        "sessions.list" => sessions::list(state, &params).into(),
        "sessions.patch" => sessions::patch(state, &params).into(),
        "sessions.reset" => sessions::reset(state, &params).into(),
        "sessions.delete" => sessions::delete(state, &params).into(),
        "chat.history" => sessions::history(state, &params).into(),
        "chat.abort" => chat::abort(state, &params).into(),
        "chat.send" => chat::send(state, info, request_id, &params),
        "agent" => chat::agent(state, info, request_id, &params),
        "channels.status" => send::channels_status(state).into(),
        "pairing.list" => pairing::list(state, &params).into(),
        "pairing.approve" => pairing::approve(state, &params).into(),
        "device.pair.list" => devices::list(state).into(),
        "device.pair.approve" => devices::approve(state, &params).into(),
        "device.pair.reject" => devices::reject(state, &params).into(),
        "device.pair.remove" => devices::remove(state, &params).into(),
        "device.token.rotate" => devices::rotate(state, info, &params).into(),
        "device.token.revoke" => devices::revoke(state, &params).into(),
        "models.list" => catalog::models(state).into(),
        "agents.list" => catalog::agents(state).into(),
        "commands.list" => catalog::commands(state, &params).into(),
        "memory.status" => memory::status(state, &params).into(),
        "memory.search" => memory::search(state, &params).into(),
        "exec.approval.resolve" => approvals::resolve(state, &params).into(),
        "exec.approval.list" => approvals::list(state).into(),
        "exec.approval.get" => approvals::get(state, &params).into(),
        "cron.list" | "cron.status" | "cron.add" | "cron.update" | "cron.remove" | "cron.run"
        | "cron.runs" => cron::handle(state, method, &params).into(),
        "wake" => heartbeat::wake(state, &params).into(),
        "last-heartbeat" => heartbeat::last(state).into(),
        "set-heartbeats" => heartbeat::set(state, &params).into(),
        "chat.startup" => views::chat_startup(state, &params).into(),
        "sessions.subscribe" => views::sessions_subscribe(state, &params).into(),
        "sessions.messages.subscribe" => views::messages_subscribe(state, &params).into(),
        "sessions.messages.unsubscribe" => views::messages_unsubscribe(state, &params).into(),
        "sessions.describe" => views::sessions_describe(state, &params).into(),
        "agent.identity.get" => views::agent_identity(state, &params).into(),
        "models.authStatus" => views::models_auth_status(state).into(),
        "system.info" => system::info(state).into(),
        "channels.pairing.list" => pairing::channels_list(state, &params).into(),
        "channels.pairing.approve" => pairing::channels_approve(state, &params).into(),
        "channels.pairing.dismiss" => pairing::channels_dismiss(state, &params).into(),
        "pincer.memory.index" => memory::index(state, &params).into(),
        other => match views::absent_feature(other) {
            Some(answer) => answer.into(),
            None => Reply::Err(ErrorShape::invalid(format!("unknown method: {other}"))),
        },
    }
}
