//! The key register: every key pincer accepts, with one line on what it
//! does. `pincer config keys` prints it with each key's default.
//!
//! The rows are written by hand; which keys exist is not: tests compare
//! the rows with the paths [`super::accepted_keys`] traces from the schema,
//! in both directions, so a key cannot be added without a line here and a
//! line cannot outlive its key. Keys that repeat another section's keys
//! with the same meaning (an account's keys, an agent's overrides of the
//! defaults) are described once, through [`MIRRORS`].

use serde_json::Value;

use super::Config;

mod rows;

pub use rows::ROWS;

/// `(prefix, described as)`: a key under the first prefix means what the
/// same key under the second means, for that account or agent only.
pub const MIRRORS: &[(&str, &str)] = &[
    ("agents.list[].tools", "tools"),
    ("agents.list[].groupChat", "messages.groupChat"),
    ("agents.list[]", "agents.defaults"),
    ("tools.byProvider.*", "tools"),
    ("tools.subagents.tools", "tools"),
    (
        "channels.discord.guilds.*.channels.*",
        "channels.discord.guilds.*",
    ),
    (
        "channels.telegram.groups.*.topics.*",
        "channels.telegram.groups.*",
    ),
    ("session.resetByType.direct", "session.reset"),
    ("session.resetByType.dm", "session.reset"),
    ("session.resetByType.group", "session.reset"),
    ("session.resetByType.thread", "session.reset"),
    ("session.resetByChannel.*", "session.reset"),
    ("agents.defaults.memorySearch", "memory.search"),
    ("channels.telegram.accounts.*", "channels.telegram"),
    ("channels.discord.accounts.*", "channels.discord"),
    ("channels.slack.accounts.*", "channels.slack"),
    ("channels.matrix.accounts.*", "channels.matrix"),
    ("channels.matrix.rooms.*", "channels.matrix.groups.*"),
    ("channels.telegram.tts", "tts"),
    ("channels.discord.tts", "tts"),
    ("channels.slack.tts", "tts"),
    ("channels.signal.accounts.*", "channels.signal"),
    ("channels.whatsapp.accounts.*", "channels.whatsapp"),
];

/// The line describing `path`: its own row, else the row of the key it
/// mirrors.
pub fn describe(path: &str) -> Option<&'static str> {
    if let Some((_, doc)) = ROWS.iter().find(|(key, _)| *key == path) {
        return Some(doc);
    }
    MIRRORS.iter().find_map(|(prefix, target)| {
        let rest = path.strip_prefix(prefix)?.strip_prefix('.')?;
        describe(&format!("{target}.{rest}"))
    })
}

/// The default of `path` as JSON text, from `Config::default()`; "—" for
/// keys inside maps or lists and for keys unset by default.
pub fn default_of(defaults: &Value, path: &str) -> String {
    if path.contains('*') || path.contains("[]") {
        return "—".to_string();
    }
    let pointer = format!("/{}", path.replace('.', "/"));
    match defaults.pointer(&pointer) {
        None | Some(Value::Null) => "—".to_string(),
        Some(value) => value.to_string(),
    }
}

/// The register as text: one key a line, `path  default  what it does`.
pub fn render() -> Result<String, String> {
    let keys = super::accepted_keys()?;
    let defaults = serde_json::to_value(Config::default()).map_err(|e| e.to_string())?;
    let rows: Vec<(String, String, &str)> = keys
        .iter()
        .map(|key| {
            let doc = describe(key).unwrap_or("(not described)");
            (key.clone(), default_of(&defaults, key), doc)
        })
        .collect();
    let key_width = rows.iter().map(|(k, _, _)| k.len()).max().unwrap_or(0);
    let default_width = rows
        .iter()
        .map(|(_, d, _)| d.len())
        .max()
        .unwrap_or(0)
        .min(24);
    let mut out = String::new();
    for (key, default, doc) in rows {
        out.push_str(&format!(
            "{key:key_width$}  {default:default_width$}  {doc}\n"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_accepted_key_is_described() {
        let keys = super::super::accepted_keys().expect("schema traces");
        let missing: Vec<&String> = keys.iter().filter(|k| describe(k).is_none()).collect();
        assert!(
            missing.is_empty(),
            "keys the schema accepts with no register row: {missing:?}"
        );
    }

    #[test]
    fn every_register_row_names_an_accepted_key() {
        let keys: BTreeSet<String> = super::super::accepted_keys()
            .expect("schema traces")
            .into_iter()
            .collect();
        let stale: Vec<&str> = ROWS
            .iter()
            .map(|(key, _)| *key)
            .filter(|key| !keys.contains(*key))
            .collect();
        assert!(
            stale.is_empty(),
            "register rows naming keys the schema does not accept: {stale:?}"
        );
        let mut seen = BTreeSet::new();
        let doubled: Vec<&str> = ROWS
            .iter()
            .map(|(key, _)| *key)
            .filter(|key| !seen.insert(*key))
            .collect();
        assert!(doubled.is_empty(), "keys with two rows: {doubled:?}");
    }

    #[test]
    fn mirrors_join_two_accepted_sections() {
        let keys = super::super::accepted_keys().expect("schema traces");
        for (prefix, target) in MIRRORS {
            for side in [prefix, target] {
                assert!(
                    keys.iter().any(|k| k.starts_with(&format!("{side}."))),
                    "mirror side {side} holds no accepted key"
                );
            }
        }
    }

    #[test]
    fn every_register_key_is_accepted_by_the_loader() {
        // A config holding just that key with a sample value parses: the
        // key is one the loader takes, not only one the tracer reached.
        let keys = super::super::accepted_keys().expect("schema traces");
        for key in &keys {
            let json = sample_config(key);
            let err = crate::config::parse_value(json.clone(), "register");
            if let Err(crate::config::ConfigError::UnknownKey { .. })
            | Err(crate::config::ConfigError::Unsupported { .. }) = err
            {
                panic!("{key}: the loader refuses it: {err:?} ({json})");
            }
        }
    }

    /// `{"a": [{"b": {"x": null}}]}` for `a[].b.*`: a map entry is named
    /// `x`, a list holds one element.
    fn sample_config(key: &str) -> Value {
        let mut value = Value::Null;
        for segment in key.rsplit('.') {
            let (name, list) = match segment.strip_suffix("[]") {
                Some(name) => (name, true),
                None => (segment, false),
            };
            if list {
                value = Value::Array(vec![value]);
            }
            let name = if name == "*" { "x" } else { name };
            let mut map = serde_json::Map::new();
            map.insert(name.to_string(), value);
            value = Value::Object(map);
        }
        value
    }

    #[test]
    fn defaults_come_from_the_default_config() {
        let defaults = serde_json::to_value(Config::default()).expect("defaults");
        assert_eq!(default_of(&defaults, "gateway.port"), "18789");
        assert_eq!(default_of(&defaults, "models.providers.*.baseUrl"), "—");
        assert_eq!(default_of(&defaults, "agents.defaults.model"), "—");
    }

    #[test]
    fn mirrored_keys_take_their_target_line() {
        assert_eq!(
            describe("channels.telegram.accounts.*.botToken"),
            describe("channels.telegram.botToken")
        );
        assert!(describe("channels.telegram.accounts.*.botToken").is_some());
        assert!(describe("no.such.key").is_none());
    }
}
