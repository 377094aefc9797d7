//! Tool policy: which tools a run may see, in upstream's order — profile,
//! then the global allow / alsoAllow / deny, then `tools.byProvider` for the
//! run's model, then the agent's, then the agent's `byProvider`. A deny of
//! any layer wins over an alsoAllow of a later one; `group:<name>` expands
//! to a tool group and `*` matches everything. Sub-agent sessions lose more
//! by depth (`restrict_for_depth`), and sessions a configured sandbox confines
//! keep only what `tools.sandbox.tools` allows (`restrict_for_sandbox`).

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{Config, ToolPolicy, ToolProfile};

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

impl<'a> Layer<'a> {
    fn of(policy: &'a ToolPolicy) -> Layer<'a> {
        Layer {
            profile: policy.profile,
            allow: &policy.allow,
            also_allow: &policy.also_allow,
            deny: &policy.deny,
        }
    }
}

/// The model a run uses, for `byProvider` (`provider` id and `model` id).
#[derive(Debug, Clone, Copy)]
pub struct RunModel<'a> {
    pub provider: &'a str,
    pub model: &'a str,
}

/// The `byProvider` entry for `model`: `provider/model` first, else the
/// provider id (keys compared without case, as upstream does).
fn by_provider<'a>(
    map: &'a BTreeMap<String, ToolPolicy>,
    model: Option<RunModel<'_>>,
) -> Option<&'a ToolPolicy> {
    let model = model?;
    let full = format!("{}/{}", model.provider, model.model);
    let find = |wanted: &str| {
        map.iter()
            .find(|(key, _)| key.trim().eq_ignore_ascii_case(wanted))
            .map(|(_, policy)| policy)
    };
    find(&full).or_else(|| find(model.provider))
}

/// Whether the config switches a tool off altogether (`tools.web.fetch.enabled: false`).
fn switched_off(config: &Config, tool: &str) -> bool {
    tool == "web_fetch" && !config.tools.web.fetch.enabled
}

/// The tools `agent_id` may use with `model`, out of `available`.
pub fn allowed_tools(
    config: &Config,
    agent_id: &str,
    model: Option<RunModel<'_>>,
    available: &[&str],
) -> Vec<String> {
    let available: Vec<&str> = available
        .iter()
        .copied()
        .filter(|t| !switched_off(config, t))
        .collect();
    let available = available.as_slice();
    let tools = &config.tools;
    let mut layers = vec![Layer {
        profile: tools.profile,
        allow: &tools.allow,
        also_allow: &tools.also_allow,
        deny: &tools.deny,
    }];
    layers.extend(by_provider(&tools.by_provider, model).map(Layer::of));
    let agent_tools = config
        .agents
        .list
        .iter()
        .find(|a| a.id == agent_id)
        .and_then(|a| a.tools.as_ref());
    if let Some(agent) = agent_tools {
        layers.push(Layer {
            profile: agent.profile,
            allow: &agent.allow,
            also_allow: &agent.also_allow,
            deny: &agent.deny,
        });
        layers.extend(by_provider(&agent.by_provider, model).map(Layer::of));
    }
    let mut set: BTreeSet<String> = available.iter().map(|t| t.to_string()).collect();
    for layer in &layers {
        set = apply(available, set, layer);
    }
    set.retain(|t| {
        !layers
            .iter()
            .any(|layer| layer.deny.iter().any(|p| matches(p, t)))
    });
    set.into_iter().collect()
}

/// What a sandboxed session may use when `tools.sandbox.tools.allow` is unset (upstream's default
/// allowlist; names pincer has no tool for match nothing).
pub const SANDBOX_DEFAULT_ALLOW: &[&str] = &[
    "exec",
    "process",
    "read",
    "ls",
    "write",
    "edit",
    "apply_patch",
    "view_image",
    "sessions_list",
    "sessions_history",
    "sessions_search",
    "sessions_send",
    "sessions_spawn",
    "sessions_yield",
    "subagents",
    "session_status",
];
/// What a sandboxed session never gets when `tools.sandbox.tools.deny` is unset (upstream's default
/// denylist: scheduling, gateway control, devices and the chat channels' own tools), less what the
/// configured allow lists name.
pub const SANDBOX_DEFAULT_DENY: &[&str] = &[
    "browser",
    "canvas",
    "computer",
    "mobile_ui",
    "nodes",
    "cron",
    "automations",
    "gateway",
    "telegram",
    "discord",
    "slack",
];

/// The tool policy of a session a configured sandbox confines (`tools.sandbox.tools`, an agent's own
/// lists over the global ones, each list on its own), as upstream resolves it: `allow` (plus
/// `alsoAllow`) replaces the default allowlist, `alsoAllow` alone extends it, an empty `allow` leaves
/// no allowlist; `deny` replaces the default denylist, which otherwise loses what the allow lists
/// name. Deny wins.
pub fn restrict_for_sandbox(config: &Config, agent_id: &str, tools: Vec<String>) -> Vec<String> {
    let global = &config.tools.sandbox.tools;
    let own = config
        .agents
        .entry(agent_id)
        .and_then(|a| a.tools.as_ref())
        .map(|t| &t.sandbox.tools);
    let pick = |list: fn(&crate::config::SandboxToolPolicy) -> &Option<Vec<String>>| {
        own.and_then(|p| list(p).as_ref())
            .or(list(global).as_ref())
            .cloned()
    };
    let (allow, also_allow, deny) = (
        pick(|p| &p.allow),
        pick(|p| &p.also_allow),
        pick(|p| &p.deny),
    );
    let extra = also_allow.clone().unwrap_or_default();
    let allowlist: Vec<String> = match allow.clone() {
        Some(base) if base.is_empty() => Vec::new(),
        Some(base) => base.into_iter().chain(extra).collect(),
        None => SANDBOX_DEFAULT_ALLOW
            .iter()
            .map(|t| t.to_string())
            .chain(extra)
            .collect(),
    };
    let denylist: Vec<String> = match deny {
        Some(deny) => deny,
        None => {
            let named: Vec<String> = allow
                .into_iter()
                .flatten()
                .chain(also_allow.into_iter().flatten())
                .collect();
            SANDBOX_DEFAULT_DENY
                .iter()
                .filter(|t| !named.iter().any(|p| matches(p, t)))
                .map(|t| t.to_string())
                .collect()
        }
    };
    tools
        .into_iter()
        .filter(|t| !denylist.iter().any(|p| matches(p, t)))
        .filter(|t| allowlist.is_empty() || allowlist.iter().any(|p| matches(p, t)))
        .collect()
}

/// Tools no sub-agent gets: gateway and scheduling control, messaging other sessions, status and memory
/// of the main conversation (after upstream's always-deny list for sub-agents).
pub const SUBAGENT_DENIED_TOOLS: &[&str] = &[
    "gateway",
    "agents_list",
    "session_status",
    "sessions_send",
    "cron",
    "memory_search",
    "memory_get",
];
/// Tools a leaf sub-agent (one that may not spawn) also loses: the session tools.
pub const SUBAGENT_LEAF_DENIED_TOOLS: &[&str] = &[
    "sessions_list",
    "sessions_history",
    "sessions_spawn",
    "subagents",
];

/// The depth rule: a sub-agent session (`depth` ≥ 1) loses `SUBAGENT_DENIED_TOOLS`; a leaf (`depth` ≥
/// `max_spawn_depth`) also the session tools, while an orchestrator keeps spawn/subagents/list/history.
/// `tools.subagents.tools` allow / alsoAllow / deny apply last. Depth 0 is left alone.
pub fn restrict_for_depth(
    config: &Config,
    depth: u32,
    max_spawn_depth: u32,
    tools: Vec<String>,
) -> Vec<String> {
    if depth == 0 {
        return tools;
    }
    let leaf = depth >= max_spawn_depth;
    let available: Vec<&str> = tools.iter().map(String::as_str).collect();
    let mut set: BTreeSet<String> = tools
        .iter()
        .filter(|t| !SUBAGENT_DENIED_TOOLS.contains(&t.as_str()))
        .filter(|t| !(leaf && SUBAGENT_LEAF_DENIED_TOOLS.contains(&t.as_str())))
        .cloned()
        .collect();
    let scope = &config.tools.subagents.tools;
    set = apply(
        &available,
        set,
        &Layer {
            profile: None,
            allow: &scope.allow,
            also_allow: &scope.also_allow,
            deny: &scope.deny,
        },
    );
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
        assert_eq!(allowed_tools(&config, "main", None, ALL).len(), ALL.len());
        let mut config = Config::default();
        config.tools.profile = Some(ToolProfile::Minimal);
        assert_eq!(
            allowed_tools(&config, "main", None, ALL),
            vec!["session_status".to_string()]
        );
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn leaf_subagents_lose_session_tools_and_orchestrators_keep_spawning() {
        let tools = names(&[
            "read",
            "cron",
            "session_status",
            "sessions_spawn",
            "sessions_history",
            "subagents",
        ]);
        let config = Config::default();
        assert_eq!(restrict_for_depth(&config, 0, 1, tools.clone()), tools);
        assert_eq!(
            restrict_for_depth(&config, 1, 1, tools.clone()),
            names(&["read"])
        );
        assert_eq!(
            restrict_for_depth(&config, 1, 2, tools.clone()),
            names(&["read", "sessions_history", "sessions_spawn", "subagents"])
        );
        assert_eq!(restrict_for_depth(&config, 2, 2, tools), names(&["read"]));
    }

    #[test]
    fn subagent_tool_scope_applies_last() {
        let mut config = Config::default();
        config.tools.subagents.tools.deny = vec!["read".into()];
        config.tools.subagents.tools.also_allow = vec!["cron".into()];
        let tools = names(&["read", "write", "cron"]);
        assert_eq!(
            restrict_for_depth(&config, 1, 1, tools),
            names(&["cron", "write"])
        );
    }

    fn model<'a>(provider: &'a str, model: &'a str) -> Option<RunModel<'a>> {
        Some(RunModel { provider, model })
    }

    #[test]
    fn by_provider_narrows_for_that_provider_and_the_model_entry_wins() {
        let config: Config = serde_json::from_value(serde_json::json!({"tools": {
            "byProvider": {
                "ollama": {"profile": "minimal"},
                "OpenAI/gpt-mini": {"deny": ["exec"]},
                "openai": {"deny": ["read"]},
            },
            "deny": ["write"],
        }}))
        .expect("config");
        let all = allowed_tools(&config, "main", None, ALL);
        assert!(all.contains(&"exec".to_string()) && all.contains(&"read".to_string()));
        assert_eq!(
            allowed_tools(&config, "main", model("ollama", "qwen3:4b"), ALL),
            vec!["session_status".to_string()]
        );
        let mini = allowed_tools(&config, "main", model("openai", "gpt-mini"), ALL);
        assert!(!mini.contains(&"exec".to_string()), "{mini:?}");
        assert!(
            mini.contains(&"read".to_string()),
            "the model entry, not the provider's"
        );
        let other = allowed_tools(&config, "main", model("openai", "gpt-5"), ALL);
        assert!(!other.contains(&"read".to_string()) && other.contains(&"exec".to_string()));
        assert!(!other.contains(&"write".to_string()));
    }

    #[test]
    fn an_agent_by_provider_applies_and_a_later_also_allow_cannot_undo_a_deny() {
        let config: Config = serde_json::from_value(serde_json::json!({
            "tools": {"deny": ["exec"]},
            "agents": {"list": [{"id": "ops", "tools": {
                "alsoAllow": ["exec"],
                "byProvider": {"anthropic": {"deny": ["web_fetch"]}},
            }}]},
        }))
        .expect("config");
        let ops = allowed_tools(&config, "ops", model("anthropic", "claude"), ALL);
        assert!(!ops.contains(&"exec".to_string()), "{ops:?}");
        assert!(!ops.contains(&"web_fetch".to_string()), "{ops:?}");
        let main = allowed_tools(&config, "main", model("anthropic", "claude"), ALL);
        assert!(main.contains(&"web_fetch".to_string()));
    }

    #[test]
    fn deny_wins_and_groups_expand() {
        let mut config = Config::default();
        config.tools.profile = Some(ToolProfile::Coding);
        config.tools.also_allow = vec!["web_fetch".into()];
        config.tools.deny = vec!["group:runtime".into(), "write".into()];
        let tools = allowed_tools(&config, "main", None, ALL);
        assert!(tools.contains(&"web_fetch".to_string()));
        assert!(tools.contains(&"read".to_string()));
        assert!(!tools.contains(&"exec".to_string()));
        assert!(!tools.contains(&"write".to_string()));
    }

    #[test]
    fn sandboxed_sessions_keep_the_sandbox_allowlist_and_lose_its_denylist() {
        let available = names(&[
            "read",
            "exec",
            "web_fetch",
            "cron",
            "memory_search",
            "sessions_list",
        ]);
        let config = Config::default();
        assert_eq!(
            restrict_for_sandbox(&config, "main", available.clone()),
            names(&["read", "exec", "sessions_list"])
        );
        let config: Config = serde_json::from_value(serde_json::json!({
            "tools": {"sandbox": {"tools": {"alsoAllow": ["cron", "web_fetch"], "deny": ["exec"]}}},
            "agents": {"list": [{"id": "ops", "tools": {"sandbox": {"tools": {"allow": []}}}}]}
        }))
        .expect("config");
        assert_eq!(
            restrict_for_sandbox(&config, "main", available.clone()),
            names(&["read", "web_fetch", "cron", "sessions_list"])
        );
        // An empty allow leaves no allowlist; the global deny still applies.
        assert_eq!(
            restrict_for_sandbox(&config, "ops", available),
            names(&[
                "read",
                "web_fetch",
                "cron",
                "memory_search",
                "sessions_list"
            ])
        );
    }
}
