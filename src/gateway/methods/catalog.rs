//! `models.list`, `agents.list` and `commands.list`.

use serde_json::{json, Value};

use crate::config::Config;
use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;
use crate::pipeline::commands::{CommandSpec, COMMANDS};

use super::params::Params;

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

/// `session.scope` as configured (upstream's default `per-sender`).
pub fn session_scope(config: &Config) -> &str {
    config.session.scope.as_deref().unwrap_or("per-sender")
}

/// The agent's model as upstream lists it (`{primary, fallbacks}`), or null.
fn agent_model(config: &Config, agent_id: &str) -> Value {
    match config.agents.model_for(agent_id) {
        Some(model) => json!({"primary": model.primary(), "fallbacks": model.fallbacks()}),
        None => Value::Null,
    }
}

/// `agents.list`: the configured agents, the default one, and the session
/// settings they share (`session.mainKey`, `session.scope`).
pub fn agents(state: &GatewayState) -> Result<Value, ErrorShape> {
    let config = state.config();
    let default_id = config.agents.default_agent_id();
    let mut agents: Vec<Value> = config
        .agents
        .list
        .iter()
        .map(|a| json!({"id": a.id, "name": a.name, "default": a.id == default_id, "model": agent_model(&config, &a.id)}))
        .collect();
    if agents.is_empty() {
        let model = agent_model(&config, &default_id);
        agents.push(json!({"id": default_id, "name": null, "default": true, "model": model}));
    }
    Ok(json!({
        "defaultId": default_id,
        "mainKey": config.session.main_key,
        "scope": session_scope(&config),
        "agents": agents,
    }))
}

/// The argument of a command as upstream describes one (`<name>` → `name`).
fn command_args(spec: &CommandSpec) -> Value {
    let name = spec
        .args
        .trim_matches(|c| matches!(c, '<' | '>' | '[' | ']'))
        .to_string();
    json!([{"name": name, "description": spec.args, "type": "string"}])
}

/// `commands.list {agentId?, scope?, includeArgs?, provider?}`: every chat
/// command pincer carries out, from the table its command parser reads
/// (`pipeline::commands::COMMANDS`). Pincer registers no native command
/// menus, so each command is a text command (`scope: "text"`).
pub fn commands(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("commands.list", params)?;
    let config = state.config();
    if let Some(id) = p
        .opt_str("agentId")?
        .map(str::trim)
        .filter(|id| !id.is_empty())
    {
        if id != config.agents.default_agent_id() && config.agents.entry(id).is_none() {
            return Err(ErrorShape::invalid(format!("unknown agent id \"{id}\"")));
        }
    }
    let scope = p.opt_str("scope")?.unwrap_or("both");
    if !matches!(scope, "native" | "text" | "both") {
        return Err(ErrorShape::invalid(format!(
            "invalid commands.list params: scope {scope:?} must be \"native\", \"text\" or \"both\""
        )));
    }
    let include_args = p.opt_bool("includeArgs")?.unwrap_or(true);
    let commands: Vec<Value> = COMMANDS
        .iter()
        .filter(|_| scope != "native")
        .map(|spec| {
            let aliases: Vec<String> = std::iter::once(spec.name)
                .chain(spec.aliases.iter().copied())
                .map(|name| format!("/{name}"))
                .collect();
            let mut entry = json!({
                "name": spec.name, "description": spec.description, "category": spec.category,
                "source": "native", "scope": "text", "acceptsArgs": !spec.args.is_empty(),
                "textAliases": aliases,
            });
            if include_args && !spec.args.is_empty() {
                entry["args"] = command_args(spec);
            }
            entry
        })
        .collect();
    Ok(json!({"commands": commands}))
}
