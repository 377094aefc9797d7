//! Structural operations on config JSON: RFC 7396 merge patch (what
//! `config.patch` applies), the list of changed paths between two configs,
//! and which of those need a gateway restart under hybrid reload.
//!
//! Restart rules follow upstream's reload plan: `gateway.*` restarts except
//! `gateway.reload` and `gateway.remote`; `logging` (read once at start-up)
//! restarts; everything else hot-applies.

use serde_json::{Map, Value};

use super::Config;

/// Applies an RFC 7396 JSON merge patch: objects merge recursively, `null`
/// deletes a key, anything else (arrays included) replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_map) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else {
        return;
    };
    for (key, value) in patch_map {
        if value.is_null() {
            target_map.remove(key);
        } else {
            merge_patch(target_map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// Paths (`gateway.port`, `agents.list`) whose values differ between two
/// configs, descending into objects; arrays compare whole.
pub fn changed_paths(old: &Config, new: &Config) -> Vec<String> {
    let old = serde_json::to_value(old).expect("config serializes to JSON");
    let new = serde_json::to_value(new).expect("config serializes to JSON");
    let mut paths = Vec::new();
    diff(&old, &new, String::new(), &mut paths);
    paths
}

fn diff(old: &Value, new: &Value, prefix: String, out: &mut Vec<String>) {
    if old == new {
        return;
    }
    if let (Value::Object(a), Value::Object(b)) = (old, new) {
        let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let child = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            diff(
                a.get(key).unwrap_or(&Value::Null),
                b.get(key).unwrap_or(&Value::Null),
                child,
                out,
            );
        }
        return;
    }
    out.push(if prefix.is_empty() {
        "(root)".to_string()
    } else {
        prefix
    });
}

/// Prefixes under `gateway` that hot-apply (or need nothing) despite the
/// rest of `gateway` requiring a restart.
const GATEWAY_HOT_PREFIXES: [&str; 1] = ["gateway.reload"];
/// Sections whose change always needs a restart.
/// `logging.level` is applied once at start-up; `discovery` is advertised
/// once, when the gateway starts (as upstream).
const RESTART_SECTIONS: [&str; 3] = ["gateway", "logging", "discovery"];

/// The changed paths that need a gateway restart under hybrid reload.
pub fn restart_required(old: &Config, new: &Config) -> Vec<String> {
    changed_paths(old, new)
        .into_iter()
        .filter(|path| needs_restart(path))
        .collect()
}

fn needs_restart(path: &str) -> bool {
    let under = |prefix: &str| path == prefix || path.starts_with(&format!("{prefix}."));
    if GATEWAY_HOT_PREFIXES.iter().any(|prefix| under(prefix)) {
        return false;
    }
    RESTART_SECTIONS.iter().any(|prefix| under(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7396_examples() {
        let mut target = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut target, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(target, json!({"a": "z", "c": {"d": "e"}}));

        let mut target = json!({"a": [1, 2]});
        merge_patch(&mut target, &json!({"a": [3]}));
        assert_eq!(target, json!({"a": [3]}));

        let mut target = json!({"a": "foo"});
        merge_patch(&mut target, &json!({"a": {"b": "c"}}));
        assert_eq!(target, json!({"a": {"b": "c"}}));

        let mut target = json!(["a"]);
        merge_patch(&mut target, &json!({"a": "b"}));
        assert_eq!(target, json!({"a": "b"}));

        let mut target = json!({"e": null});
        merge_patch(&mut target, &json!({"a": 1}));
        assert_eq!(target, json!({"e": null, "a": 1}));

        let mut target = json!({"a": 1});
        merge_patch(&mut target, &json!(["x"]));
        assert_eq!(target, json!(["x"]));
    }

    #[test]
    fn gateway_port_needs_restart_but_reload_and_agents_do_not() {
        let old = Config::default();
        let mut new = Config::default();
        new.gateway.port = 19001;
        new.gateway.reload.debounce_ms = 50;
        new.agents.defaults.timeout_seconds = Some(30);
        let changed = changed_paths(&old, &new);
        assert!(
            changed.contains(&"agents.defaults.timeoutSeconds".to_string()),
            "{changed:?}"
        );
        assert_eq!(
            restart_required(&old, &new),
            vec!["gateway.port".to_string()]
        );
    }

    #[test]
    fn logging_level_needs_restart() {
        let mut new = Config::default();
        new.logging.level = Some(crate::config::LogLevel::Debug);
        assert_eq!(
            restart_required(&Config::default(), &new),
            vec!["logging.level".to_string()]
        );
    }

    #[test]
    fn discovery_mode_needs_restart() {
        let mut new = Config::default();
        new.discovery.mdns.mode = crate::config::MdnsMode::Off;
        assert_eq!(
            restart_required(&Config::default(), &new),
            vec!["discovery.mdns.mode".to_string()]
        );
    }

    #[test]
    fn identical_configs_need_nothing() {
        assert!(changed_paths(&Config::default(), &Config::default()).is_empty());
        assert!(restart_required(&Config::default(), &Config::default()).is_empty());
    }
}
