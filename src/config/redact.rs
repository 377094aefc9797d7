//! Secret redaction for config snapshots shown to clients (`config.get`)
//! and the reverse step for writes that echo a snapshot back.
//!
//! A value is a secret when its path looks like one, as upstream guesses:
//! a key ending in `token`, or a path containing `password`, `secret`,
//! `apiKey`, `encryptKey` or `privateKey`, plus every request header value.
//! Secrets become OpenClaw's sentinel `__OPENCLAW_REDACTED__`, which
//! OpenClaw's Control UI already understands.

use serde_json::{Map, Value};

use super::error::ConfigError;
use super::Config;

/// Upstream's redaction sentinel (`REDACTED_SENTINEL`).
pub const REDACTED_SENTINEL: &str = "__OPENCLAW_REDACTED__";

/// Key names that end in "token" but hold counts, not secrets.
const NON_SECRET_SUFFIXES: [&str; 10] = [
    "maxtokens",
    "maxoutputtokens",
    "maxinputtokens",
    "maxcompletiontokens",
    "contexttokens",
    "totaltokens",
    "tokencount",
    "tokenlimit",
    "tokenbudget",
    "passwordfile",
];

impl Config {
    /// The effective config as JSON (unset keys omitted) with every secret
    /// replaced by [`REDACTED_SENTINEL`].
    pub fn redacted(&self) -> Value {
        let mut value =
            without_nulls(serde_json::to_value(self).expect("config serializes to JSON"));
        redact_value(&mut value, "", false);
        value
    }
}

/// A config file's own JSON with every secret replaced by
/// [`REDACTED_SENTINEL`] (`config.get`'s `parsed`).
pub fn redact_file(mut value: Value) -> Value {
    redact_value(&mut value, "", false);
    value
}

/// Removes `null` members from objects, recursively (unset options).
pub fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect::<Map<String, Value>>(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

/// Whether a value at this dot path is a secret.
pub fn is_secret_path(path: &str) -> bool {
    let lowered = path.to_ascii_lowercase();
    if NON_SECRET_SUFFIXES
        .iter()
        .any(|suffix| lowered.ends_with(suffix))
    {
        return false;
    }
    let compact: String = lowered
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .collect();
    lowered.ends_with("token")
        || ["password", "secret", "apikey", "encryptkey", "privatekey"]
            .iter()
            .any(|word| compact.contains(word))
}

fn redact_value(value: &mut Value, path: &str, under_headers: bool) {
    match value {
        Value::String(text)
            if (under_headers || is_secret_path(path)) && !is_env_placeholder(text) =>
        {
            *text = REDACTED_SENTINEL.to_string();
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|item| redact_value(item, path, under_headers)),
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                redact_value(item, &child, under_headers || key == "headers");
            }
        }
        _ => {}
    }
}

fn is_env_placeholder(text: &str) -> bool {
    let trimmed = text.trim();
    trimmed.starts_with("${") && trimmed.ends_with('}') && !trimmed[2..].contains('{')
}

/// Replaces every [`REDACTED_SENTINEL`] in `incoming` with the value at the
/// same path in `original`, so a snapshot round-trip keeps the real
/// secrets. A sentinel with nothing to restore is an error naming its path.
pub fn restore_redacted(
    incoming: &mut Value,
    original: &Value,
    origin: &str,
) -> Result<(), ConfigError> {
    restore(incoming, Some(original), String::new(), origin)
}

fn restore(
    incoming: &mut Value,
    original: Option<&Value>,
    path: String,
    origin: &str,
) -> Result<(), ConfigError> {
    match incoming {
        Value::String(text) if text == REDACTED_SENTINEL => match original {
            Some(Value::String(real)) => {
                *text = real.clone();
                Ok(())
            }
            _ => Err(ConfigError::invalid(
                origin,
                display(&path),
                "is the redaction placeholder but no stored value exists to restore",
            )),
        },
        Value::Array(items) => items.iter_mut().enumerate().try_for_each(|(i, item)| {
            let before = original.and_then(|o| o.get(i));
            restore(item, before, format!("{path}[{i}]"), origin)
        }),
        Value::Object(map) => map.iter_mut().try_for_each(|(key, item)| {
            let before = original.and_then(|o| o.get(key));
            let child = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            restore(item, before, child, origin)
        }),
        _ => Ok(()),
    }
}

fn display(path: &str) -> String {
    if path.is_empty() {
        "(root)".to_string()
    } else {
        path.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_paths_are_recognised() {
        for path in [
            "gateway.auth.token",
            "gateway.auth.password",
            "gateway.remote.token",
            "models.providers.openai.apiKey",
            "channels.telegram.botToken",
            "channels.telegram.webhookSecret",
            "channels.slack.appToken",
            "channels.slack.signingSecret",
            "cron.webhookToken",
            "commands.ownerDisplaySecret",
        ] {
            assert!(is_secret_path(path), "{path} not secret");
        }
        for path in [
            "agents.defaults.contextTokens",
            "models.providers.x.models.maxTokens",
            "channels.telegram.tokenFile",
            "gateway.port",
        ] {
            assert!(!is_secret_path(path), "{path} secret");
        }
    }

    #[test]
    fn redaction_hides_secrets_and_keeps_the_rest() {
        let mut config = Config::default();
        config.gateway.auth.token = Some("tok-123".into());
        config.gateway.auth.password = Some("pw".into());
        config.models.providers.insert(
            "openai".into(),
            crate::config::ModelProviderConfig {
                base_url: "https://api.openai.com/v1".into(),
                api_key: Some("sk-live".into()),
                headers: [("Authorization".to_string(), "Bearer x".to_string())].into(),
                ..Default::default()
            },
        );
        config.channels.telegram = Some(crate::config::TelegramConfig {
            bot_token: Some("123:abc".into()),
            ..Default::default()
        });
        let redacted = config.redacted();
        assert_eq!(redacted["gateway"]["auth"]["token"], REDACTED_SENTINEL);
        assert_eq!(redacted["gateway"]["auth"]["password"], REDACTED_SENTINEL);
        assert_eq!(
            redacted["models"]["providers"]["openai"]["apiKey"],
            REDACTED_SENTINEL
        );
        assert_eq!(
            redacted["models"]["providers"]["openai"]["headers"]["Authorization"],
            REDACTED_SENTINEL
        );
        assert_eq!(
            redacted["channels"]["telegram"]["botToken"],
            REDACTED_SENTINEL
        );
        assert_eq!(
            redacted["models"]["providers"]["openai"]["baseUrl"],
            "https://api.openai.com/v1"
        );
        assert_eq!(redacted["gateway"]["port"], 18789);
        let text = redacted.to_string();
        for secret in ["tok-123", "sk-live", "123:abc", "Bearer x"] {
            assert!(!text.contains(secret), "{secret} leaked");
        }
    }

    #[test]
    fn restore_puts_real_values_back() {
        let original = json!({"gateway": {"auth": {"token": "real"}}, "list": ["a", "b"]});
        let mut incoming = json!({"gateway": {"auth": {"token": REDACTED_SENTINEL}, "port": 1}, "list": ["a", REDACTED_SENTINEL]});
        restore_redacted(&mut incoming, &original, "patch").expect("restored");
        assert_eq!(incoming["gateway"]["auth"]["token"], "real");
        assert_eq!(incoming["list"][1], "b");
    }

    #[test]
    fn restore_without_stored_value_names_the_path() {
        let mut incoming = json!({"models": {"providers": {"x": {"apiKey": REDACTED_SENTINEL}}}});
        let err =
            restore_redacted(&mut incoming, &json!({}), "patch").expect_err("nothing to restore");
        assert_eq!(err.json_path(), Some("models.providers.x.apiKey"));
    }
}
