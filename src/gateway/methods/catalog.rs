//! `models.list`, `agents.list`, `commands.list` and `send` (which needs a
//! channel; none is wired into this build yet).

use serde_json::{json, Value};

use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;

/// `models.list`: every model in `models.providers`.
pub fn models(state: &GatewayState) -> Result<Value, ErrorShape> {
    let config = state.config();
    let models: Vec<Value> = config
        .models
        .providers
        .iter()
        .flat_map(|(provider, p)| {
            p.models.iter().map(move |m| {
                json!({
                    "id": m.id, "name": m.name.clone().unwrap_or_else(|| m.id.clone()), "provider": provider,
                    "contextWindow": m.context_window, "reasoning": m.reasoning.unwrap_or(false), "input": m.input,
                })
            })
        })
        .collect();
    Ok(json!({"models": models}))
}

/// `agents.list`.
pub fn agents(state: &GatewayState) -> Result<Value, ErrorShape> {
    let config = state.config();
    let default_id = config.agents.default_agent_id();
    let mut agents: Vec<Value> = config
        .agents
        .list
        .iter()
        .map(|a| json!({"id": a.id, "name": a.name, "default": a.id == default_id}))
        .collect();
    if agents.is_empty() {
        agents.push(json!({"id": default_id, "name": null, "default": true}));
    }
    Ok(json!({
        "defaultId": default_id,
        "mainKey": config.session.main_key,
        "scope": "per-sender",
        "agents": agents,
    }))
}

/// The chat commands this build understands in `chat.send`.
const COMMANDS: &[(&str, &str)] = &[
    ("new", "Start a new session (the old transcript is kept)."),
    ("reset", "Reset the current session."),
    ("stop", "Stop the running reply."),
];

/// `commands.list`.
pub fn commands() -> Result<Value, ErrorShape> {
    let commands: Vec<Value> = COMMANDS
        .iter()
        .map(|(name, description)| {
            json!({"name": name, "nativeName": name, "textAliases": [format!("/{name}")], "description": description,
                   "acceptsArgs": false, "scope": "both", "category": "session"})
        })
        .collect();
    Ok(json!({"commands": commands}))
}
