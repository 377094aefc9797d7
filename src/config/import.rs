//! `pincer config import-openclaw`: turns an OpenClaw `openclaw.json` into a
//! pincer config. Key names are shared, so this is a filter: every key
//! pincer's schema knows is carried over as written, every other key is
//! dropped and reported with its path and the reason.
//!
//! The schema itself decides what is known (the file is re-validated after
//! each removal), so this list never drifts from `schema/`. Environment
//! secret references (`{source: "env", id}`) become `${ID}` strings; the
//! result is never substituted or written here.

use serde_json::{Map, Value};

use super::error::ConfigError;
use super::load::{parse_json5, parse_value};

/// Name used for the OpenClaw file in error messages.
const IMPORT_ORIGIN: &str = "openclaw.json";

/// The pincer config made from an OpenClaw config, and what was left out.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportReport {
    /// Valid pincer config JSON (it passes [`super::parse_value`]).
    pub config_json: Value,
    /// `(path, why)` for every dropped key, e.g.
    /// `("gateway.push", "not supported by pincer")`.
    pub skipped: Vec<(String, String)>,
}

/// Filters an OpenClaw config (JSON5 text) down to what pincer supports.
/// Fails only when the text is not JSON5 or the remainder cannot be made
/// valid by dropping keys.
pub fn import_openclaw(text: &str) -> Result<ImportReport, ConfigError> {
    let mut value = parse_json5(text, IMPORT_ORIGIN)?;
    convert_env_secret_refs(&mut value);
    let mut skipped = Vec::new();
    loop {
        let error = match parse_value(value.clone(), IMPORT_ORIGIN) {
            Ok(_) => {
                return Ok(ImportReport {
                    config_json: value,
                    skipped,
                })
            }
            Err(error) => error,
        };
        let Some(path) = error.json_path().map(str::to_string) else {
            return Err(error);
        };
        let Some(segments) = locate(&value, &path) else {
            return Err(error);
        };
        let (target, reason) = match &error {
            ConfigError::Unsupported { .. } => (segments, "not supported by pincer".to_string()),
            ConfigError::UnknownKey { .. } => (
                segments,
                "unknown key (neither pincer nor OpenClaw has it)".to_string(),
            ),
            _ => (enclosing_entry(segments), reason_for(&value, &path, &error)),
        };
        let target_path = render(&target);
        if !remove(&mut value, &target) {
            return Err(error);
        }
        skipped.push((target_path, reason));
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// `{source: "env", provider, id: "X"}` → `"${X}"`, everywhere.
fn convert_env_secret_refs(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(id) = env_ref_id(map) {
                *value = Value::String(format!("${{{id}}}"));
                return;
            }
            map.values_mut().for_each(convert_env_secret_refs);
        }
        Value::Array(items) => items.iter_mut().for_each(convert_env_secret_refs),
        _ => {}
    }
}

fn env_ref_id(map: &Map<String, Value>) -> Option<String> {
    let only_ref_keys = map
        .keys()
        .all(|k| matches!(k.as_str(), "source" | "provider" | "id"));
    let is_env = map.get("source").and_then(Value::as_str) == Some("env");
    let id = map.get("id").and_then(Value::as_str)?;
    (only_ref_keys && is_env).then(|| id.to_string())
}

/// Resolves an error's display path (`a.b[0].c`, keys may contain dots)
/// against the JSON, preferring the longest key that matches.
fn locate(value: &Value, path: &str) -> Option<Vec<Segment>> {
    let mut segments = Vec::new();
    let mut node = value;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let (index, tail) = after.split_once(']')?;
            let index: usize = index.parse().ok()?;
            node = node.as_array()?.get(index)?;
            segments.push(Segment::Index(index));
            rest = tail.strip_prefix('.').unwrap_or(tail);
            continue;
        }
        let map = node.as_object()?;
        let key = map
            .keys()
            .filter(|key| {
                rest.strip_prefix(key.as_str()).is_some_and(|tail| {
                    tail.is_empty() || tail.starts_with('.') || tail.starts_with('[')
                })
            })
            .max_by_key(|key| key.len())?;
        node = &map[key];
        segments.push(Segment::Key(key.clone()));
        rest = &rest[key.len()..];
        rest = rest.strip_prefix('.').unwrap_or(rest);
    }
    Some(segments)
}

/// A bad value inside a list entry drops the whole entry (half a binding
/// or agent would change meaning); elsewhere only the key goes.
fn enclosing_entry(mut segments: Vec<Segment>) -> Vec<Segment> {
    if let Some(last_index) = segments
        .iter()
        .rposition(|s| matches!(s, Segment::Index(_)))
    {
        segments.truncate(last_index + 1);
    }
    segments
}

fn reason_for(value: &Value, path: &str, error: &ConfigError) -> String {
    let secret_source = locate(value, path)
        .and_then(|segments| get(value, &segments))
        .and_then(|node| node.get("source"))
        .and_then(Value::as_str)
        .map(str::to_string);
    if let Some(source) = secret_source {
        return format!("secret references with source {source:?} are not supported by pincer (write the value or \"${{VAR}}\")");
    }
    let text = error.to_string();
    let detail = text
        .strip_prefix(&format!("{IMPORT_ORIGIN}: {path}: "))
        .unwrap_or(&text)
        .to_string();
    format!("not supported by pincer: {detail}")
}

fn get<'a>(value: &'a Value, segments: &[Segment]) -> Option<&'a Value> {
    segments
        .iter()
        .try_fold(value, |node, segment| match segment {
            Segment::Key(key) => node.get(key),
            Segment::Index(i) => node.get(*i),
        })
}

fn remove(value: &mut Value, segments: &[Segment]) -> bool {
    let Some((last, parents)) = segments.split_last() else {
        return false;
    };
    let mut node = value;
    for segment in parents {
        let next = match segment {
            Segment::Key(key) => node.get_mut(key),
            Segment::Index(i) => node.get_mut(*i),
        };
        match next {
            Some(child) => node = child,
            None => return false,
        }
    }
    match (last, node) {
        (Segment::Key(key), Value::Object(map)) => map.remove(key).is_some(),
        (Segment::Index(i), Value::Array(items)) if *i < items.len() => {
            items.remove(*i);
            true
        }
        _ => false,
    }
}

fn render(segments: &[Segment]) -> String {
    let mut out = String::new();
    for segment in segments {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn locate_prefers_keys_containing_dots() {
        let value =
            json!({"agents": {"defaults": {"models": {"openai/gpt-5.2": {"alias": "gpt"}}}}});
        let segments =
            locate(&value, "agents.defaults.models.openai/gpt-5.2.alias").expect("found");
        assert_eq!(segments.last(), Some(&Segment::Key("alias".into())));
        assert_eq!(segments[3], Segment::Key("openai/gpt-5.2".into()));
    }

    #[test]
    fn env_secret_refs_become_placeholders() {
        let mut value = json!({"apiKey": {"source": "env", "provider": "default", "id": "OPENAI_API_KEY"},
                               "other": {"source": "file", "provider": "f", "id": "/x"}});
        convert_env_secret_refs(&mut value);
        assert_eq!(value["apiKey"], "${OPENAI_API_KEY}");
        assert_eq!(value["other"]["source"], "file");
    }

    #[test]
    fn unknown_keys_are_dropped_and_reported() {
        let report = import_openclaw(
            r#"{ gateway: { port: 18789, push: { apns: {} } }, wizard: { lastRunAt: "x" } }"#,
        )
        .expect("imported");
        assert_eq!(report.config_json, json!({"gateway": {"port": 18789}}));
        assert_eq!(
            report.skipped,
            vec![
                (
                    "gateway.push".to_string(),
                    "not supported by pincer".to_string()
                ),
                ("wizard".to_string(), "not supported by pincer".to_string()),
            ]
        );
    }

    #[test]
    fn bad_list_entry_is_dropped_whole() {
        let report = import_openclaw(
            r#"{ bindings: [ { agentId: "a", match: { channel: "telegram" } },
                             { type: "acp", agentId: "b", match: { channel: "discord", peer: { kind: "channel", id: "1" } } } ] }"#,
        )
        .expect("imported");
        assert_eq!(
            report.config_json["bindings"].as_array().map(Vec::len),
            Some(1)
        );
        assert_eq!(report.skipped.len(), 1);
        assert_eq!(report.skipped[0].0, "bindings[1]");
        assert!(
            report.skipped[0].1.contains("route"),
            "{:?}",
            report.skipped
        );
    }

    #[test]
    fn syntax_errors_are_returned() {
        assert!(matches!(
            import_openclaw("{ gateway: "),
            Err(ConfigError::Syntax { .. })
        ));
    }
}
