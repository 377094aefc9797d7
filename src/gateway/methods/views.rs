//! Methods OpenClaw's Control UI calls while it opens its chat, sessions and
//! approvals views, answered in upstream's shapes from what pincer has.
//! Features pincer does not have (plugins, questions, tasks, progress cards,
//! branches, side chat, talk) answer with what is true: an empty
//! list, nothing pending, or upstream's own "unavailable" error.

use serde_json::{json, Value};

use crate::config::Config;
use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;
use crate::routing::session_key::agent_of_key;
use crate::system::clock::now_ms;

use super::params::Params;
use super::sessions::{canonical_key, history, row, store_error};

/// `chat.startup`: with a `sessionKey`, the session's history (as
/// `chat.history`) plus how the key resolved; without one (a short id or slug
/// hint pincer does not issue) an unresolved answer.
pub fn chat_startup(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("chat.startup", params)?;
    if !p.has("sessionKey") {
        return Ok(json!({"resolution": {"ok": false}}));
    }
    let mut answer = history(state, params)?;
    let key = answer["sessionKey"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let config = state.config();
    let agent_id = agent_of_key(&key)
        .map(str::to_string)
        .unwrap_or_else(|| config.agents.default_agent_id());
    answer["resolution"] = json!({"ok": true, "key": key, "agentId": agent_id});
    Ok(answer)
}

/// `sessions.subscribe`: `sessions.changed` reaches every operator
/// connection, so the caller is subscribed; with filters, the list too.
pub fn sessions_subscribe(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    // Checks that params is an object (or absent) before reading it.
    Params::new("sessions.subscribe", params)?;
    let filtered = params.as_object().is_some_and(|o| !o.is_empty());
    if !filtered {
        return Ok(json!({"subscribed": true}));
    }
    let list = super::sessions::list(state, params)?;
    Ok(json!({"subscribed": true, "list": list}))
}

/// The canonical key a `key` + optional `agentId` param names.
fn key_param(config: &Config, p: &Params<'_>) -> Result<String, ErrorShape> {
    Ok(canonical_key(
        config,
        p.opt_str("agentId")?,
        Some(p.str("key", false)?),
    ))
}

/// `sessions.messages.subscribe`: `session.message` events for this key are
/// sent to every operator connection as messages are stored.
pub fn messages_subscribe(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("sessions.messages.subscribe", params)?;
    // Pending exec approvals reach every approvals-scoped connection as
    // `exec.approval.*` events and through `exec.approval.list`; pincer keeps
    // no per-session approval replay, so none is sent.
    p.opt_bool("includeApprovals")?;
    let key = key_param(&state.config(), &p)?;
    Ok(json!({"subscribed": true, "key": key}))
}

/// `sessions.messages.unsubscribe`.
pub fn messages_unsubscribe(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("sessions.messages.unsubscribe", params)?;
    let key = key_param(&state.config(), &p)?;
    Ok(json!({"subscribed": false, "key": key}))
}

/// `sessions.describe`: one session's row, or `null` when there is none.
pub fn sessions_describe(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("sessions.describe", params)?;
    let key = key_param(&state.config(), &p)?;
    let session = state
        .services
        .store
        .session(&key)
        .map_err(store_error)?
        .map(|entry| row(&key, &entry));
    Ok(json!({"session": session}))
}

/// `agent.identity.get`: the agent's id and configured name (pincer has no
/// avatars).
pub fn agent_identity(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("agent.identity.get", params)?;
    let config = state.config();
    let from_key = p.opt_str("sessionKey")?.and_then(agent_of_key);
    let agent_id = p
        .opt_str("agentId")?
        .or(from_key)
        .map(str::to_string)
        .unwrap_or_else(|| config.agents.default_agent_id());
    let entry = config.agents.entry(&agent_id);
    if entry.is_none() && !config.agents.list.is_empty() {
        return Err(ErrorShape::invalid(format!(
            "invalid agent.identity.get params: unknown agent id \"{agent_id}\""
        )));
    }
    let name = entry
        .and_then(|agent| agent.name.clone())
        .unwrap_or_else(|| agent_id.clone());
    Ok(json!({
        "agentId": agent_id, "name": name, "avatar": null,
        "avatarStatus": "none", "avatarReason": "not-configured",
    }))
}

/// `models.authStatus`: each configured provider and whether it has a key.
/// pincer's providers authenticate with a static API key (or none, for local
/// servers); it has no OAuth profiles or usage windows.
pub fn models_auth_status(state: &GatewayState) -> Result<Value, ErrorShape> {
    let config = state.config();
    let providers: Vec<Value> = config
        .models
        .providers
        .iter()
        .map(|(id, provider)| {
            let has_key = provider
                .api_key
                .as_deref()
                .is_some_and(|key| !key.trim().is_empty());
            json!({
                "provider": id, "authProvider": id, "displayName": id,
                "status": if has_key { "static" } else { "missing" },
                "profiles": [],
            })
        })
        .collect();
    Ok(json!({"ts": now_ms(), "providers": providers}))
}

/// Answers for features pincer does not have, in upstream's shapes.
pub fn absent_feature(method: &str) -> Option<Result<Value, ErrorShape>> {
    let answer = match method {
        // Plugin and cross-surface approvals: pincer has no plugins; its exec
        // approvals are listed by `exec.approval.list`.
        "plugin.approval.list" | "openclaw.approval.list" => Ok(json!([])),
        "question.list" => Ok(json!({"questions": []})),
        "tasks.list" => Ok(json!({"tasks": []})),
        "progressCard.get" => Ok(json!({"card": null})),
        "sessions.branches.list" => Ok(json!({"branches": []})),
        // Upstream's own answer when it runs without a session observer.
        "sessions.observer.visibility" => {
            Err(ErrorShape::unavailable("Session observer is unavailable."))
        }
        "sessions.companion.state" => Err(ErrorShape::unavailable("Side chat is unavailable.")),
        // pincer loads no plugins.
        "plugins.list" => Ok(json!({"plugins": []})),
        // Resolved exec approvals are not stored, so there is no history.
        "approval.history" => Err(ErrorShape::unavailable(
            "approval history is not kept by pincer: pending approvals are in exec.approval.list",
        )),
        "chat.metadata" => Err(ErrorShape::unavailable(
            "chat metadata is not available in pincer: read models.list and agents.list",
        )),
        "talk.catalog" => Err(ErrorShape::unavailable("talk is not available in pincer")),
        _ => return None,
    };
    Some(answer)
}
