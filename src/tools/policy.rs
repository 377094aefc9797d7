//! Tool policy: which tools a run may see, in upstream's order — profile,
//! then the global allow / alsoAllow / deny, then the agent's. Deny wins;
//! `group:<name>` expands to a tool group and `*` matches everything.

use std::collections::BTreeSet;

use crate::config::{Config, ToolProfile};

/// Tool groups as upstream names them.
pub fn group(name: &str) -> &'static [&'static str] {
    match name {
        "group:fs" => &["read", "write", "edit", "apply_patch"],
        "group:runtime" => &["exec", "process"],
        "group:sessions" => &[
            "sessions_list",
            "sessions_history",
            "sessions_send",
            "sessions_spawn",
            "session_status",
        ],
        "group:memory" => &["memory_search", "memory_get"],
        "group:web" => &["web_search", "web_fetch"],
        "group:messaging" => &["message"],
        "group:automation" => &["cron", "gateway"],
        _ => &[],
    }
}

/// The names a profile allows (`None` = everything).
pub fn profile_tools(profile: ToolProfile) -> Option<Vec<&'static str>> {
    let groups: &[&str] = match profile {
        ToolProfile::Full => return None,
        ToolProfile::Minimal => return Some(vec!["session_status"]),
        ToolProfile::Coding => &[
            "group:fs",
            "group:runtime",
            "group:sessions",
            "group:memory",
        ],
        ToolProfile::Messaging => {
            return Some(vec![
                "message",
                "sessions_list",
                "sessions_history",
                "sessions_send",
                "session_status",
            ])
        }
    };
    Some(
        groups
            .iter()
            .flat_map(|g| group(g).iter().copied())
            .collect(),
    )
}

fn matches(pattern: &str, tool: &str) -> bool {
    pattern == "*" || pattern == tool || group(pattern).contains(&tool)
}

struct Layer<'a> {
    profile: Option<ToolProfile>,
    allow: &'a [String],
    also_allow: &'a [String],
    deny: &'a [String],
}

fn apply(available: &[&str], current: BTreeSet<String>, layer: &Layer<'_>) -> BTreeSet<String> {
    let mut set = current;
    if let Some(profile) = layer.profile {
        if let Some(allowed) = profile_tools(profile) {
            set.retain(|t| allowed.contains(&t.as_str()));
        }
    }
    if !layer.allow.is_empty() {
        set.retain(|t| layer.allow.iter().any(|p| matches(p, t)));
    }
    for tool in available {
        if layer.also_allow.iter().any(|p| matches(p, tool)) {
            set.insert(tool.to_string());
        }
    }
    set.retain(|t| !layer.deny.iter().any(|p| matches(p, t)));
    set
}

/// The tools `agent_id` may use, out of `available`.
pub fn allowed_tools(config: &Config, agent_id: &str, available: &[&str]) -> Vec<String> {
    let tools = &config.tools;
    let mut set: BTreeSet<String> = available.iter().map(|t| t.to_string()).collect();
    set = apply(
        available,
        set,
        &Layer {
            profile: tools.profile,
            allow: &tools.allow,
            also_allow: &tools.also_allow,
            deny: &tools.deny,
        },
    );
    let agent_tools = config
        .agents
        .list
        .iter()
        .find(|a| a.id == agent_id)
        .and_then(|a| a.tools.as_ref());
    if let Some(agent) = agent_tools {
        set = apply(
            available,
            set,
            &Layer {
                profile: agent.profile,
                allow: &agent.allow,
                also_allow: &agent.also_allow,
                deny: &agent.deny,
            },
        );
    }
    set.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[&str] = &[
        "read",
        "write",
        "edit",
        "apply_patch",
        "exec",
        "web_fetch",
        "session_status",
        "sessions_list",
    ];

    #[test]
    fn full_is_everything_and_minimal_is_status_only() {
        let config = Config::default();
        assert_eq!(allowed_tools(&config, "main", ALL).len(), ALL.len());
        let mut config = Config::default();
        config.tools.profile = Some(ToolProfile::Minimal);
        assert_eq!(
            allowed_tools(&config, "main", ALL),
            vec!["session_status".to_string()]
        );
    }

    #[test]
    fn deny_wins_and_groups_expand() {
        let mut config = Config::default();
        config.tools.profile = Some(ToolProfile::Coding);
        config.tools.also_allow = vec!["web_fetch".into()];
        config.tools.deny = vec!["group:runtime".into(), "write".into()];
        let tools = allowed_tools(&config, "main", ALL);
        assert!(tools.contains(&"web_fetch".to_string()));
        assert!(tools.contains(&"read".to_string()));
        assert!(!tools.contains(&"exec".to_string()));
        assert!(!tools.contains(&"write".to_string()));
    }
}
