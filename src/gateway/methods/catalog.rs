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

/// Bounds of `models.probe`'s `timeoutMs` (upstream's).
pub const PROBE_TIMEOUT_DEFAULT_MS: u64 = 20_000;
pub const PROBE_TIMEOUT_MIN_MS: u64 = 5_000;
pub const PROBE_TIMEOUT_MAX_MS: u64 = 60_000;

/// Upstream's words for a failed probe.
fn probe_message(status: crate::agent::ProbeStatus) -> Option<&'static str> {
    use crate::agent::ProbeStatus as S;
    match status {
        S::Ok => None,
        S::Auth => Some("Authentication failed."),
        S::RateLimit => Some("The provider rate limit was reached."),
        S::Billing => Some("The provider reported a billing problem."),
        S::Timeout => Some("The connection timed out."),
        S::Format => Some("The provider rejected the model or request format."),
        S::NoModel => Some("No model is available for this provider."),
        S::Unknown => Some("The connection probe failed."),
    }
}

/// `models.probe {provider, profileId?, timeoutMs?}`: one real call per
/// credential of a configured provider, in upstream's result shape (plus
/// `detail`, the provider's own words, and the start of the `reply`).
pub async fn probe(
    state: &std::sync::Arc<crate::gateway::state::GatewayState>,
    params: &Value,
) -> Result<Value, ErrorShape> {
    use crate::agent::ProbeStatus;
    let p = super::params::Params::new("models.probe", params)?;
    let provider = p.str("provider", false)?.trim().to_string();
    let profile = p.opt_str("profileId")?.map(str::trim);
    if profile.is_some_and(str::is_empty) {
        return Err(ErrorShape::invalid(
            "provider and profileId must not be blank",
        ));
    }
    let timeout = p
        .opt_u64("timeoutMs", 1, u64::MAX)?
        .unwrap_or(PROBE_TIMEOUT_DEFAULT_MS)
        .clamp(PROBE_TIMEOUT_MIN_MS, PROBE_TIMEOUT_MAX_MS);
    let config = state.config();
    let results = crate::agent::probe_provider(
        &config,
        &provider,
        profile,
        &state.http(),
        std::time::Duration::from_millis(timeout),
    )
    .await
    .map_err(|e| match e {
        crate::agent::ProbeError::UnknownProvider(_)
        | crate::agent::ProbeError::UnknownProfile { .. } => ErrorShape::invalid(e.to_string()),
        other => ErrorShape::unavailable(other.to_string()),
    })?;
    // The best outcome wins, as upstream rolls up: ok, then the failures in its order.
    let order = [
        ProbeStatus::Ok,
        ProbeStatus::Auth,
        ProbeStatus::Billing,
        ProbeStatus::RateLimit,
        ProbeStatus::Timeout,
        ProbeStatus::Format,
        ProbeStatus::NoModel,
        ProbeStatus::Unknown,
    ];
    let status = order
        .into_iter()
        .find(|s| results.iter().any(|r| r.status == *s))
        .unwrap_or(ProbeStatus::Unknown);
    let latency = results
        .iter()
        .filter(|r| r.status == status)
        .map(|r| r.latency_ms)
        .min();
    let rows: Vec<Value> = results
        .iter()
        .map(|r| {
            let mut row = json!({
                "profileId": r.profile_id, "label": format!("{} · {}", r.profile_id, r.model),
                "status": r.status.as_str(), "latencyMs": r.latency_ms,
            });
            if let Some(message) = probe_message(r.status) {
                row["error"] = json!(message);
            }
            if let Some(detail) = &r.error {
                row["detail"] = json!(detail);
            }
            if let Some(reply) = &r.reply {
                row["reply"] = json!(reply);
            }
            row
        })
        .collect();
    let mut answer = json!({"provider": provider, "status": status.as_str(), "results": rows});
    if let Some(latency) = latency {
        answer["latencyMs"] = json!(latency);
    }
    if let Some(message) = probe_message(status) {
        answer["error"] = json!(message);
    }
    Ok(answer)
}
