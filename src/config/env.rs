//! `${VAR}` substitution in config string values, as OpenClaw does at load
//! time: only upper-case names (`[A-Z_][A-Z0-9_]*`) are references, `$${VAR}`
//! writes a literal `${VAR}`, and a missing or empty variable is an error
//! naming the JSON path that referenced it.
//!
//! The variable lookup is passed in, so this file reads no environment
//! itself (tests and `import` supply their own).

use serde_json::Value;

use super::error::ConfigError;

/// Replaces `${VAR}` references in every string of `value`.
pub(crate) fn substitute_env(
    value: &mut Value,
    origin: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    walk(value, String::new(), origin, lookup)
}

fn walk(
    value: &mut Value,
    path: String,
    origin: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    match value {
        Value::String(text) if text.contains('$') => {
            *text = substitute_str(text, &path, origin, lookup)?;
            Ok(())
        }
        Value::Array(items) => items
            .iter_mut()
            .enumerate()
            .try_for_each(|(i, item)| walk(item, format!("{path}[{i}]"), origin, lookup)),
        Value::Object(map) => map.iter_mut().try_for_each(|(key, item)| {
            let child = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            walk(item, child, origin, lookup)
        }),
        _ => Ok(()),
    }
}

fn substitute_str(
    text: &str,
    path: &str,
    origin: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if let Some(name) = reference_at(tail, 2).filter(|_| tail.starts_with("$${")) {
            out.push_str("${");
            out.push_str(name);
            out.push('}');
            rest = &tail[3 + name.len() + 1..];
        } else if let Some(name) = reference_at(tail, 1).filter(|_| tail.starts_with("${")) {
            match lookup(name).filter(|v| !v.is_empty()) {
                Some(value) => out.push_str(&value),
                None => {
                    return Err(ConfigError::MissingEnvVar {
                        origin: origin.to_string(),
                        path: path.to_string(),
                        var: name.to_string(),
                    })
                }
            }
            rest = &tail[2 + name.len() + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The variable name of a `{NAME}` group starting at `brace` in `tail`,
/// when it is a valid upper-case name.
fn reference_at(tail: &str, brace: usize) -> Option<&str> {
    let inner = tail.get(brace..)?.strip_prefix('{')?;
    let end = inner.find('}')?;
    let name = &inner[..end];
    is_env_name(name).then_some(name)
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_uppercase() || c == '_')
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(name: &str) -> Option<String> {
        match name {
            "API_KEY" => Some("sk-123".to_string()),
            "BASE" => Some("https://api.example.com".to_string()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn run(mut value: Value) -> Result<Value, ConfigError> {
        substitute_env(&mut value, "pincer.json5", &env)?;
        Ok(value)
    }

    #[test]
    fn references_are_replaced_inline() {
        let out = run(json!({"models": {"providers": {"x": {
            "apiKey": "${API_KEY}", "baseUrl": "${BASE}/v1"}}}}))
        .expect("substituted");
        assert_eq!(out["models"]["providers"]["x"]["apiKey"], "sk-123");
        assert_eq!(
            out["models"]["providers"]["x"]["baseUrl"],
            "https://api.example.com/v1"
        );
    }

    #[test]
    fn escaped_and_lowercase_references_stay_literal() {
        let out =
            run(json!(["$${API_KEY}", "${lower}", "cost $5", "${API_KEY"])).expect("untouched");
        assert_eq!(
            out,
            json!(["${API_KEY}", "${lower}", "cost $5", "${API_KEY"])
        );
    }

    #[test]
    fn missing_variable_names_the_path() {
        let err =
            run(json!({"gateway": {"auth": {"token": "${NOPE_TOKEN}"}}})).expect_err("missing");
        assert_eq!(
            err.to_string(),
            "pincer.json5: gateway.auth.token: environment variable NOPE_TOKEN is not set"
        );
    }

    #[test]
    fn empty_variable_counts_as_missing() {
        let err = run(json!({"list": ["ok", "${EMPTY}"]})).expect_err("empty");
        assert_eq!(err.json_path(), Some("list[1]"));
    }
}
