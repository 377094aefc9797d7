//! The one error type of the config module, and the translation of serde's
//! terse messages into errors that name the file, the JSON path, what was
//! expected and what was found.
//!
//! This file only formats; it never reads files or the environment.

use std::path::PathBuf;

use thiserror::Error;

/// Everything that can go wrong while finding, reading, parsing, validating or
/// writing a config file. Every variant names the file (`origin`) and, where
/// there is one, the JSON path of the offending key (`gateway.port`).
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {} (given by {given_by}) does not exist", path.display())]
    Missing { path: PathBuf, given_by: String },
    #[error("{origin}: syntax error at line {line}, column {column}: {message}")]
    Syntax {
        origin: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{origin}: unknown key {path}{}", suggestion_suffix(.suggestion))]
    UnknownKey {
        origin: String,
        path: String,
        suggestion: Option<String>,
    },
    /// A key OpenClaw accepts that pincer does not implement.
    #[error("{origin}: {path} is not supported by pincer (an OpenClaw key pincer does not implement; `pincer config keys` lists the supported ones)")]
    Unsupported { origin: String, path: String },
    #[error("{origin}: {path}: expected {expected}, got {got}")]
    WrongType {
        origin: String,
        path: String,
        expected: String,
        got: String,
    },
    #[error("{origin}: {path}: {message}")]
    Invalid {
        origin: String,
        path: String,
        message: String,
    },
    #[error("{origin}: {path}: environment variable {var} is not set")]
    MissingEnvVar {
        origin: String,
        path: String,
        var: String,
    },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ConfigError {
    /// The JSON path the error points at, when it points at one.
    pub fn json_path(&self) -> Option<&str> {
        match self {
            ConfigError::UnknownKey { path, .. }
            | ConfigError::Unsupported { path, .. }
            | ConfigError::WrongType { path, .. }
            | ConfigError::Invalid { path, .. }
            | ConfigError::MissingEnvVar { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The error as a client shows it at its place: the key path (empty
    /// when the error has none) and the message without the file's name.
    pub fn issue(&self) -> (String, String) {
        let message = match self {
            ConfigError::UnknownKey { suggestion, .. } => {
                format!("unknown key{}", suggestion_suffix(suggestion))
            }
            ConfigError::Unsupported { .. } => {
                "is not supported by pincer (an OpenClaw key pincer does not implement)".to_string()
            }
            ConfigError::WrongType { expected, got, .. } => {
                format!("expected {expected}, got {got}")
            }
            ConfigError::Invalid { message, .. } => message.clone(),
            ConfigError::MissingEnvVar { var, .. } => {
                format!("environment variable {var} is not set")
            }
            ConfigError::Syntax {
                line,
                column,
                message,
                ..
            } => format!("syntax error at line {line}, column {column}: {message}"),
            other => other.to_string(),
        };
        let path = self
            .json_path()
            .filter(|p| *p != "(root)")
            .unwrap_or_default()
            .to_string();
        (path, message)
    }

    pub(crate) fn invalid(
        origin: &str,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        ConfigError::Invalid {
            origin: origin.to_string(),
            path: path.into(),
            message: message.into(),
        }
    }
}

fn suggestion_suffix(suggestion: &Option<String>) -> String {
    match suggestion {
        Some(s) => format!(" (did you mean {s}?)"),
        None => String::new(),
    }
}

/// Smallest normalized similarity for a "did you mean" suggestion.
const MIN_SUGGESTION_SIMILARITY: f64 = 0.7;

/// Turns a `serde_path_to_error` failure into a [`ConfigError`] naming the
/// path, the expectation and the value found.
pub(crate) fn from_serde(
    origin: &str,
    err: serde_path_to_error::Error<serde_json::Error>,
) -> ConfigError {
    let path = display_path(&err.path().to_string());
    let message = err.inner().to_string();
    translate(origin, &path, &message)
}

fn display_path(raw: &str) -> String {
    if raw == "." || raw.is_empty() {
        "(root)".to_string()
    } else {
        raw.to_string()
    }
}

fn translate(origin: &str, path: &str, message: &str) -> ConfigError {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        return unknown_key(origin, path, rest);
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let (value, allowed) = split_named_list(rest);
        return ConfigError::WrongType {
            origin: origin.to_string(),
            path: path.to_string(),
            expected: describe_allowed(&allowed),
            got: format!("{value:?}"),
        };
    }
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = message.strip_prefix(prefix) {
            if let Some((got, expected)) = rest.split_once(", expected ") {
                return ConfigError::WrongType {
                    origin: origin.to_string(),
                    path: path.to_string(),
                    expected: describe_expected(expected),
                    got: describe_unexpected(got),
                };
            }
        }
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.trim_end_matches('`');
        return ConfigError::invalid(origin, join_path(path, field), "is required");
    }
    ConfigError::invalid(origin, path, message)
}

/// `prot`, expected one of `port`, `mode`` → the unknown key error with the
/// closest allowed sibling as a suggestion.
fn unknown_key(origin: &str, path: &str, rest: &str) -> ConfigError {
    if super::unsupported::is_unsupported(path) {
        return ConfigError::Unsupported {
            origin: origin.to_string(),
            path: path.to_string(),
        };
    }
    let (key, allowed) = split_named_list(rest);
    let parent = parent_path(path, &key);
    let suggestion = closest(&key, &allowed).map(|best| join_path(&parent, &best));
    ConfigError::UnknownKey {
        origin: origin.to_string(),
        path: path.to_string(),
        suggestion,
    }
}

/// Splits "name`, expected one of `a`, `b`" into ("name", ["a", "b"]).
fn split_named_list(rest: &str) -> (String, Vec<String>) {
    let (name, tail) = rest.split_once('`').unwrap_or((rest, ""));
    let allowed = tail
        .split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect();
    (name.to_string(), allowed)
}

fn parent_path(path: &str, key: &str) -> String {
    path.strip_suffix(key)
        .map(|p| p.trim_end_matches('.').to_string())
        .unwrap_or_default()
}

fn join_path(parent: &str, key: &str) -> String {
    if parent.is_empty() || parent == "(root)" {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// The allowed name most like `key`, if it is close enough to be a typo.
pub(crate) fn closest(key: &str, allowed: &[String]) -> Option<String> {
    let lowered = key.to_ascii_lowercase();
    allowed
        .iter()
        .map(|candidate| {
            let score =
                strsim::normalized_damerau_levenshtein(&lowered, &candidate.to_ascii_lowercase());
            (score, candidate)
        })
        .filter(|(score, _)| *score >= MIN_SUGGESTION_SIMILARITY)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate.clone())
}

fn describe_allowed(allowed: &[String]) -> String {
    match allowed {
        [] => "no value at all".to_string(),
        [one] => format!("{one:?}"),
        many => {
            let quoted: Vec<String> = many.iter().map(|v| format!("{v:?}")).collect();
            format!("one of {}", quoted.join(", "))
        }
    }
}

fn describe_expected(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a non-negative integer".to_string(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "an integer".to_string(),
        "f32" | "f64" => "a number".to_string(),
        "a sequence" => "an array".to_string(),
        "a map" => "an object".to_string(),
        other if other.starts_with("struct ") => "an object".to_string(),
        other => other.to_string(),
    }
}

fn describe_unexpected(got: &str) -> String {
    match got {
        "unit value" => "null".to_string(),
        "map" => "an object".to_string(),
        "sequence" => "an array".to_string(),
        other => other.replace('`', ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_message_becomes_unknown_key_with_suggestion() {
        let err = translate(
            "pincer.json5",
            "gateway.prot",
            "unknown field `prot`, expected one of `port`, `mode`, `bind`",
        );
        assert_eq!(
            err.to_string(),
            "pincer.json5: unknown key gateway.prot (did you mean gateway.port?)"
        );
    }

    #[test]
    fn known_upstream_key_is_unsupported_not_unknown() {
        let err = translate(
            "pincer.json5",
            "gateway.push",
            "unknown field `push`, expected one of `port`, `mode`, `bind`",
        );
        assert!(matches!(err, ConfigError::Unsupported { .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("pincer.json5: gateway.push is not supported by pincer"),
            "{err}"
        );
        assert_eq!(err.json_path(), Some("gateway.push"));
    }

    #[test]
    fn far_away_unknown_key_gets_no_suggestion() {
        let err = translate(
            "pincer.json5",
            "gateway.zebra",
            "unknown field `zebra`, expected one of `port`, `mode`, `bind`",
        );
        assert_eq!(err.to_string(), "pincer.json5: unknown key gateway.zebra");
    }

    #[test]
    fn root_level_unknown_key_suggests_root_sibling() {
        let err = translate(
            "c.json5",
            "gatway",
            "unknown field `gatway`, expected one of `gateway`, `agents`",
        );
        assert_eq!(
            err.to_string(),
            "c.json5: unknown key gatway (did you mean gateway?)"
        );
    }

    #[test]
    fn invalid_type_names_expectation_and_value() {
        let err = translate(
            "pincer.json5",
            "gateway.port",
            "invalid type: string \"abc\", expected a 16-bit port number",
        );
        assert_eq!(
            err.to_string(),
            "pincer.json5: gateway.port: expected a 16-bit port number, got string \"abc\""
        );
    }

    #[test]
    fn primitive_names_read_as_prose() {
        let err = translate(
            "f",
            "session.maintenance.maxEntries",
            "invalid type: map, expected u32",
        );
        assert_eq!(
            err.to_string(),
            "f: session.maintenance.maxEntries: expected a non-negative integer, got an object"
        );
    }

    #[test]
    fn unknown_variant_lists_allowed_values() {
        let err = translate(
            "f",
            "gateway.bind",
            "unknown variant `everywhere`, expected one of `loopback`, `lan`",
        );
        assert_eq!(
            err.to_string(),
            "f: gateway.bind: expected one of \"loopback\", \"lan\", got \"everywhere\""
        );
    }

    #[test]
    fn an_issue_is_the_path_and_the_message_without_the_file() {
        let err = translate(
            "f",
            "gateway.port",
            "invalid type: string \"x\", expected u16",
        );
        assert_eq!(
            err.issue(),
            (
                "gateway.port".to_string(),
                "expected a non-negative integer, got string \"x\"".to_string()
            )
        );
        let syntax = ConfigError::Syntax {
            origin: "f".into(),
            line: 3,
            column: 7,
            message: "expected value".into(),
        };
        assert_eq!(syntax.issue().0, "");
        assert!(syntax.issue().1.contains("line 3, column 7"));
    }

    #[test]
    fn missing_field_points_at_the_field() {
        let err = translate("f", "agents.list[0]", "missing field `id`");
        assert_eq!(err.to_string(), "f: agents.list[0].id: is required");
    }
}
