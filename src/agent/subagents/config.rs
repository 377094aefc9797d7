//! What the config allows a sub-agent spawn: the depth and children limits,
//! which agents a requester may spawn into (`allowAgents`), and the child's
//! model, thinking level and run timeout. Read-only over the config; the registry
//! (`subagents/mod.rs`) applies the answers.

use super::{SubagentError, MAX_SPAWN_DEPTH_LIMIT};
use crate::agent::turn::DEFAULT_RUN_TIMEOUT_MS;
use crate::config::Config;

/// `maxSpawnDepth` in force (1–5).
pub fn max_spawn_depth(config: &Config) -> u32 {
    config
        .agents
        .defaults
        .subagents
        .as_ref()
        .map_or(1, |s| s.effective_max_spawn_depth())
        .clamp(1, MAX_SPAWN_DEPTH_LIMIT)
}

pub(super) fn max_children(config: &Config) -> usize {
    config
        .agents
        .defaults
        .subagents
        .as_ref()
        .map_or(5, |s| s.effective_max_children_per_agent())
        .max(1) as usize
}

/// `requireAgentId`: the requester agent's own setting, else the defaults'
/// (off unless set). When on, a spawn must name its target agent.
pub(super) fn check_agent_named(
    config: &Config,
    requester: &str,
    named: bool,
) -> Result<(), SubagentError> {
    let required = config
        .agents
        .entry(requester)
        .and_then(|a| a.subagents.as_ref())
        .and_then(|s| s.require_agent_id)
        .or_else(|| {
            config
                .agents
                .defaults
                .subagents
                .as_ref()
                .and_then(|s| s.require_agent_id)
        })
        .unwrap_or(false);
    if required && !named {
        return Err(SubagentError::Invalid(format!(
            "agentId is required: subagents.requireAgentId is on for agent {requester:?}"
        )));
    }
    Ok(())
}

/// Checks `allowAgents` for a spawn into another agent.
pub(super) fn check_target_agent(
    config: &Config,
    requester: &str,
    target: &str,
) -> Result<(), SubagentError> {
    if target == requester {
        return Ok(());
    }
    let allowed = config
        .agents
        .entry(requester)
        .and_then(|a| a.subagents.as_ref())
        .and_then(|s| s.allow_agents.clone())
        .or_else(|| {
            config
                .agents
                .defaults
                .subagents
                .as_ref()
                .map(|s| s.allow_agents.clone())
        })
        .unwrap_or_default();
    let known = config.agents.entry(target).is_some() || target == config.agents.default_agent_id();
    if known && allowed.iter().any(|a| a == "*" || a == target) {
        return Ok(());
    }
    Err(SubagentError::AgentNotAllowed {
        agent: target.to_string(),
        requester: requester.to_string(),
        allowed: if allowed.is_empty() {
            "only its own agent".into()
        } else {
            allowed.join(", ")
        },
    })
}

/// The child's thinking level: the request's, else `subagents.thinking` of the requester agent, of the
/// target agent, of the defaults (upstream's order); `None` leaves the child's session without one.
pub(super) fn child_thinking(
    config: &Config,
    requester: &str,
    target: &str,
    requested: Option<&str>,
) -> Option<String> {
    let own = |agent: &str| {
        config
            .agents
            .entry(agent)
            .and_then(|a| a.subagents.as_ref())
            .and_then(|s| s.thinking.clone())
    };
    let defaults = || {
        config
            .agents
            .defaults
            .subagents
            .as_ref()
            .and_then(|s| s.thinking.clone())
    };
    requested
        .map(str::to_string)
        .or_else(|| own(requester))
        .or_else(|| own(target))
        .or_else(defaults)
        .filter(|level| !level.trim().is_empty())
}

/// The child's model: the request's, else the agent's or the defaults' `subagents.model`.
pub(super) fn child_model(
    config: &Config,
    agent_id: &str,
    requested: Option<&str>,
) -> Option<String> {
    let configured = config
        .agents
        .entry(agent_id)
        .and_then(|a| a.subagents.as_ref())
        .and_then(|s| s.model.as_ref())
        .or_else(|| {
            config
                .agents
                .defaults
                .subagents
                .as_ref()
                .and_then(|s| s.model.as_ref())
        })
        .and_then(|m| m.primary().map(str::to_string));
    requested.map(str::to_string).or(configured)
}

pub(super) fn child_timeout_ms(config: &Config, requested: Option<u64>) -> u64 {
    let configured = config
        .agents
        .defaults
        .subagents
        .as_ref()
        .and_then(|s| s.run_timeout_seconds)
        .map(u64::from);
    match requested.or(configured) {
        Some(seconds) if seconds > 0 => seconds.saturating_mul(1_000),
        _ => config
            .agents
            .defaults
            .timeout_seconds
            .map_or(DEFAULT_RUN_TIMEOUT_MS, |s| u64::from(s) * 1_000),
    }
}
