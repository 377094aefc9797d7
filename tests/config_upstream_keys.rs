//! Every key OpenClaw's own config schema knows is, for pincer, either a key it accepts or one it
//! refuses as "not supported by pincer" — never an "unknown key". The schema is the one the installed
//! OpenClaw CLI prints (`openclaw config schema`, the version `scripts/setup cli` installs and the
//! client tests run); each of its key paths becomes a one-key config that pincer's loader parses, and
//! the loader must not answer `UnknownKey`. A key past a value pincer reads whole (a secret reference,
//! a free-form map) may fail as a wrong type or an invalid value: that names the key too.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use pincer::config::ConfigError;
use serde_json::{json, Map, Value};

fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// An installed runtime, from its env var or its scripts/setup location.
fn tool(env_var: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(env_var).map_or_else(|| manifest_path(default), PathBuf::from);
    assert!(
        path.exists(),
        "{} not found (set {env_var} or run `scripts/setup node cli`)",
        path.display()
    );
    path
}

/// `openclaw config schema` of the installed CLI, parsed.
fn upstream_schema() -> Value {
    let node = tool("PINCER_NODE24", ".tools/node24/node_modules/.bin/node");
    let cli = tool(
        "PINCER_OPENCLAW_CLI",
        ".tools/openclaw-cli/node_modules/openclaw/openclaw.mjs",
    );
    let home = tempfile::tempdir().expect("home");
    let output = Command::new(node)
        .arg(cli)
        .args(["config", "schema"])
        .env("HOME", home.path())
        .env("OPENCLAW_STATE_DIR", home.path().join(".openclaw"))
        .output()
        .expect("run openclaw config schema");
    assert!(
        output.status.success(),
        "openclaw config schema failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the schema is JSON")
}

/// Key paths of a JSON schema: `a.b`, `*` for a map entry, `[]` for a list element.
struct Paths<'a> {
    definitions: Option<&'a Map<String, Value>>,
    found: BTreeSet<String>,
}

impl<'a> Paths<'a> {
    fn resolve(&self, mut node: &'a Value) -> &'a Value {
        for _ in 0..8 {
            let Some(reference) = node.get("$ref").and_then(Value::as_str) else {
                break;
            };
            let name = reference.rsplit('/').next().unwrap_or_default();
            match self.definitions.and_then(|d| d.get(name)) {
                Some(target) => node = target,
                None => break,
            }
        }
        node
    }

    fn walk(&mut self, node: &'a Value, path: &str, depth: usize) {
        let node = self.resolve(node);
        if depth > 14 {
            return;
        }
        for key in ["anyOf", "oneOf", "allOf"] {
            for sub in node
                .get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                self.walk(sub, path, depth + 1);
            }
        }
        if let Some(properties) = node.get("properties").and_then(Value::as_object) {
            for (name, sub) in properties {
                let child = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                self.found.insert(child.clone());
                self.walk(sub, &child, depth + 1);
            }
        }
        if let Some(entry) = node
            .get("additionalProperties")
            .filter(|a| a.as_object().is_some_and(|o| !o.is_empty()))
        {
            self.walk(entry, &format!("{path}.*"), depth + 1);
        }
        if let Some(items) = node.get("items").filter(|i| i.is_object()) {
            self.walk(items, &format!("{path}[]"), depth + 1);
        }
    }
}

/// A config holding `path` alone (`x` for a map key, one element for a list).
fn config_with(path: &str) -> Value {
    let mut segments: Vec<&str> = path.split('.').collect();
    let mut value = json!(true);
    while let Some(segment) = segments.pop() {
        let (name, lists) = match segment.find("[]") {
            Some(at) => (&segment[..at], segment[at..].matches("[]").count()),
            None => (segment, 0),
        };
        for _ in 0..lists {
            value = json!([value]);
        }
        let key = if name == "*" { "x" } else { name };
        value = json!({ key: value });
    }
    value
}

#[test]
fn every_upstream_key_is_accepted_or_refused_as_not_supported() {
    let schema = upstream_schema();
    let definitions = schema
        .get("definitions")
        .or_else(|| schema.get("$defs"))
        .and_then(Value::as_object);
    let mut paths = Paths {
        definitions,
        found: BTreeSet::new(),
    };
    paths.walk(&schema, "", 0);
    assert!(
        paths.found.len() > 1_000 && paths.found.contains("agents.defaults.model"),
        "the schema walk found {} keys",
        paths.found.len()
    );
    let mut unknown: BTreeSet<String> = BTreeSet::new();
    for path in &paths.found {
        if let Err(ConfigError::UnknownKey { path: named, .. }) =
            pincer::config::parse_value(config_with(path), "upstream")
        {
            unknown.insert(named);
        }
    }
    assert!(
        unknown.is_empty(),
        "{} keys of OpenClaw's schema are unknown keys to pincer (accept them or list them in src/config/unsupported.rs):\n  {}",
        unknown.len(),
        unknown.into_iter().collect::<Vec<_>>().join("\n  ")
    );
}
