//! `health`, `status`, `system-presence` and `logs.tail`.

use serde_json::{json, Value};

use crate::gateway::clients::ClientInfo;
use crate::gateway::frames::ErrorShape;
use crate::gateway::scopes;
use crate::gateway::state::GatewayState;
use crate::system::clock::now_ms;

use super::params::Params;

/// Recent sessions listed in summaries.
const RECENT_SESSIONS: usize = 5;

/// The gateway itself plus every connected client, as `PresenceEntry`s.
pub fn presence_list(state: &GatewayState) -> Vec<Value> {
    let mut list = vec![json!({
        "host": state.host_name,
        "version": state.version,
        "platform": std::env::consts::OS,
        "mode": "gateway",
        "reason": "self",
        "ts": state.started_at_ms,
        "text": format!("pincer gateway on {}", state.host_name),
    })];
    list.extend(state.clients.infos().iter().map(ClientInfo::presence));
    list
}

fn sessions_summary(state: &GatewayState, now: u64) -> Value {
    let sessions = state.services.store.sessions().unwrap_or_default();
    let recent: Vec<Value> = sessions
        .iter()
        .take(RECENT_SESSIONS)
        .map(|(key, entry)| {
            json!({"key": key, "updatedAt": entry.updated_at_ms, "age": now.saturating_sub(entry.updated_at_ms)})
        })
        .collect();
    json!({"path": state.store_path(), "count": sessions.len(), "recent": recent})
}

/// The `HealthSummary`.
pub fn summary(state: &GatewayState) -> Value {
    let started = std::time::Instant::now();
    let now = now_ms();
    let config = state.config();
    let default_agent = config.agents.default_agent_id();
    let sessions = sessions_summary(state, now);
    let mut agent_ids: Vec<(String, Option<String>)> = config
        .agents
        .list
        .iter()
        .map(|a| (a.id.clone(), a.name.clone()))
        .collect();
    if agent_ids.is_empty() {
        agent_ids.push((default_agent.clone(), None));
    }
    let agents: Vec<Value> = agent_ids
        .into_iter()
        .map(|(id, name)| {
            json!({
                "agentId": id, "name": name, "isDefault": id == default_agent,
                "heartbeat": {"enabled": false, "every": "disabled", "everyMs": null},
                "sessions": sessions,
            })
        })
        .collect();
    json!({
        "ok": true,
        "ts": now,
        "durationMs": started.elapsed().as_millis() as u64,
        "channels": {},
        "channelOrder": [],
        "channelLabels": {},
        "heartbeatSeconds": 0,
        "defaultAgentId": default_agent,
        "agents": agents,
        "sessions": sessions,
    })
}

/// `health`.
pub fn health(state: &GatewayState) -> Result<Value, ErrorShape> {
    Ok(summary(state))
}

/// `status`: a `/status`-style summary; store details only for admins.
pub fn status(state: &GatewayState, info: &ClientInfo) -> Result<Value, ErrorShape> {
    let now = now_ms();
    let config = state.config();
    let mut status = json!({
        "ok": true,
        "version": state.version,
        "host": state.host_name,
        "uptimeMs": state.uptime_ms(),
        "defaultAgentId": config.agents.default_agent_id(),
        "sessions": sessions_summary(state, now),
        "clients": state.clients.len(),
        "activeRuns": state.services.runs.active_count(),
        "channelSummary": [],
        "authMode": state.secret().mode_name(),
        "sandbox": state.services.sandbox_layers.get(),
    });
    if scopes::authorize("config.apply", &info.scopes).is_ok() {
        let store = state.services.store.stats().ok().map(|s| {
            json!({"path": s.path, "mapSize": s.map_size, "usedBytes": s.used_bytes, "fileBytes": s.file_bytes})
        });
        status["store"] = json!(store);
        status["pid"] = json!(std::process::id());
        status["configPath"] = json!(state
            .loaded()
            .path
            .as_ref()
            .map(|p| p.display().to_string()));
        status["dataDir"] = json!(state.services.data_dir.display().to_string());
        status["tlsFingerprintSha256"] = json!(state.tls_fingerprint);
    }
    Ok(status)
}

/// `logs.tail`: the in-memory log ring, by byte cursor.
pub fn logs_tail(params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("logs.tail", params)?;
    let cursor = p.opt_u64("cursor", 0, u64::MAX)?;
    let limit = p.opt_u64("limit", 1, 5000)?.unwrap_or(200) as usize;
    let max_bytes = p.opt_u64("maxBytes", 1, 1_000_000)?.unwrap_or(250_000) as usize;
    let tail = crate::system::logging::ring()
        .lock()
        .tail(cursor, limit, max_bytes);
    Ok(json!({
        "file": "memory:pincer",
        "cursor": tail.cursor,
        "size": tail.size,
        "lines": tail.lines,
        "truncated": tail.truncated,
        "reset": tail.reset,
    }))
}
