//! `health`, `status`, `system-presence` and `logs.tail`.

use serde_json::{json, Value};

use crate::gateway::clients::ClientInfo;
use crate::gateway::frames::ErrorShape;
use crate::gateway::scopes;
use crate::gateway::state::GatewayState;
use crate::system::clock::now_ms;

use super::figures;
use super::params::Params;

/// Entries a presence list holds at most, the gateway's own included (upstream's
/// `system-presence.ts` keeps 200).
pub const MAX_PRESENCE_ENTRIES: usize = 200;

/// Recent sessions listed in summaries.
const RECENT_SESSIONS: usize = 5;

/// The gateway itself plus every connected client, as `PresenceEntry`s.
pub fn presence_list(state: &GatewayState) -> Vec<Value> {
    let clients = newest_clients(state.clients.infos());
    let mut list = vec![json!({
        "host": state.host_name,
        "version": state.version,
        "platform": std::env::consts::OS,
        "mode": "gateway",
        "reason": "self",
        "ts": state.started_at_ms,
        "text": format!("pincer gateway on {}", state.host_name),
    })];
    list.extend(clients.iter().map(ClientInfo::presence));
    list
}

/// The clients a presence list names: newest first, and at most upstream's 200 entries with the
/// gateway's own (a snapshot of a thousand clients went into every hello-ok and presence event).
fn newest_clients(mut clients: Vec<ClientInfo>) -> Vec<ClientInfo> {
    clients.sort_by_key(|c| std::cmp::Reverse(c.connected_at_ms));
    clients.truncate(MAX_PRESENCE_ENTRIES - 1);
    clients
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

/// The `HealthSummary`, from the running components: channel accounts,
/// heartbeats, sessions, plus pincer's `queues` and `memory` figures.
pub fn summary(state: &GatewayState) -> Value {
    let started = std::time::Instant::now();
    let now = now_ms();
    let config = state.config();
    let default_agent = config.agents.default_agent_id();
    let sessions = sessions_summary(state, now);
    let heartbeat = &state.services.heartbeat;
    let mut heartbeat_seconds = 0;
    let agents: Vec<Value> = figures::agents(&config)
        .into_iter()
        .map(|(id, name)| {
            let schedule = heartbeat.schedule(&config, &id);
            if id == default_agent && schedule.enabled {
                heartbeat_seconds = schedule.every_ms.map_or(0, |ms| (ms + 500) / 1000);
            }
            json!({
                "agentId": id, "name": name, "isDefault": id == default_agent,
                "heartbeat": figures::heartbeat(&schedule),
                "sessions": sessions,
            })
        })
        .collect();
    let mut channels = serde_json::Map::new();
    let mut order = Vec::new();
    let mut labels = serde_json::Map::new();
    for channel in figures::channels(state) {
        let accounts: serde_json::Map<String, Value> = channel
            .accounts
            .iter()
            .map(|a| {
                (
                    a["accountId"].as_str().unwrap_or_default().to_string(),
                    a.clone(),
                )
            })
            .collect();
        // The channel's own fields are its default (first) account's.
        let mut summary = channel
            .accounts
            .first()
            .cloned()
            .unwrap_or_else(|| json!({}));
        summary["configured"] = json!(channel.configured());
        summary["accounts"] = Value::Object(accounts);
        labels.insert(
            channel.channel.clone(),
            json!(figures::label(&channel.channel)),
        );
        order.push(channel.channel.clone());
        channels.insert(channel.channel, summary);
    }
    json!({
        "ok": true,
        "ts": now,
        "durationMs": started.elapsed().as_millis() as u64,
        "channels": channels,
        "channelOrder": order,
        "channelLabels": labels,
        "heartbeatSeconds": heartbeat_seconds,
        "defaultAgentId": default_agent,
        "agents": agents,
        "sessions": sessions,
        "queues": figures::queues(state),
        "memory": figures::memory(state),
    })
}

/// `health`.
pub fn health(state: &GatewayState) -> Result<Value, ErrorShape> {
    Ok(summary(state))
}

/// `status`'s channel lines, as upstream's `channelSummary`
/// ("Telegram: connected", "Telegram default: disconnected (reason)").
fn channel_summary(state: &GatewayState) -> Vec<String> {
    let mut lines = Vec::new();
    for channel in figures::channels(state) {
        let label = figures::label(&channel.channel);
        let state_word = |a: &Value| match (
            a["configured"] == json!(true),
            a["running"] == json!(true),
            a["connected"] == json!(true),
        ) {
            (false, _, _) => "not configured",
            (true, _, true) => "connected",
            (true, true, false) => "connecting",
            (true, false, false) => "stopped",
        };
        for account in &channel.accounts {
            let mut line = format!(
                "{label} {}: {}",
                account["accountId"].as_str().unwrap_or_default(),
                state_word(account)
            );
            if let Some(error) = account["lastError"].as_str() {
                line.push_str(&format!(" ({error})"));
            }
            lines.push(line);
        }
    }
    lines
}

/// `status`: a `/status`-style summary; store details only for admins.
pub fn status(state: &GatewayState, info: &ClientInfo) -> Result<Value, ErrorShape> {
    let now = now_ms();
    let config = state.config();
    let default_agent = config.agents.default_agent_id();
    let heartbeats: Vec<Value> = figures::agents(&config)
        .into_iter()
        .map(|(id, _)| {
            let mut heartbeat =
                figures::heartbeat(&state.services.heartbeat.schedule(&config, &id));
            heartbeat["agentId"] = json!(id);
            heartbeat
        })
        .collect();
    let mut status = json!({
        "ok": true,
        "version": state.version,
        "runtimeVersion": state.version,
        "host": state.host_name,
        "uptimeMs": state.uptime_ms(),
        "defaultAgentId": default_agent,
        "heartbeat": {"defaultAgentId": default_agent, "agents": heartbeats},
        "sessions": sessions_summary(state, now),
        "clients": state.clients.len(),
        "activeRuns": state.services.runs.active_count(),
        "channelSummary": channel_summary(state),
        "queuedSystemEvents": state.services.heartbeat.pending_events(),
        "queues": figures::queues(state),
        "memory": figures::memory(state),
        "authMode": state.secret().mode_name(),
        "sandbox": state.services.sandbox_layers.get(),
        "board": super::system::board(state),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_presence_list_names_the_newest_clients_up_to_upstreams_cap() {
        let clients: Vec<ClientInfo> = (0..500u64)
            .map(|n| ClientInfo {
                conn_id: format!("c{n}"),
                ip: "127.0.0.1".parse().expect("ip"),
                role: "operator".into(),
                scopes: vec![],
                caps: vec![],
                protocol: 4,
                client_id: "test".into(),
                client_mode: "test".into(),
                client_version: "1".into(),
                platform: None,
                device_family: None,
                display_name: None,
                instance_id: None,
                device_id: None,
                connected_at_ms: 1_000 + n,
                setup: None,
            })
            .collect();
        let kept = newest_clients(clients);
        assert_eq!(kept.len(), MAX_PRESENCE_ENTRIES - 1);
        assert_eq!(kept[0].conn_id, "c499");
        assert_eq!(kept[kept.len() - 1].conn_id, "c301");
    }
}
