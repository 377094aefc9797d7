//! Finding, reading, parsing and writing the config file: the lookup order,
//! JSON5 parsing with line/column errors, `${VAR}` substitution, typed
//! deserialization with JSON-path errors, semantic validation, the
//! `OPENCLAW_GATEWAY_*` overrides, and atomic writes.
//!
//! The environment is read only through the `*_from`/`*_with` variants'
//! lookup argument or, for the public entry points, `std::env` here.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::env::substitute_env;
use super::error::{self, ConfigError};
use super::strict::Strict;
use super::validate::validate;
use super::Config;

/// Config path override, like `--config`.
pub const CONFIG_PATH_ENV: &str = "PINCER_CONFIG";
/// System-wide config file.
pub const SYSTEM_CONFIG_PATH: &str = "/etc/pincer/pincer.json5";
/// Overrides `gateway.auth.token` when the config sets none.
pub const GATEWAY_TOKEN_ENV: &str = "OPENCLAW_GATEWAY_TOKEN";
/// Overrides `gateway.auth.password` when the config sets none.
pub const GATEWAY_PASSWORD_ENV: &str = "OPENCLAW_GATEWAY_PASSWORD";
/// Overrides `gateway.port`.
pub const GATEWAY_PORT_ENV: &str = "OPENCLAW_GATEWAY_PORT";

/// A parsed config and the file it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedConfig {
    pub config: Config,
    /// `None` when no file exists and defaults are in use.
    pub path: Option<PathBuf>,
    /// The file's text ("" without a file).
    pub raw: String,
    /// Lowercase hex SHA-256 of `raw` (the `baseHash` of `config.patch`).
    pub hash: String,
}

fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Where the config is looked for, in order: `explicit` (`--config`),
/// `$PINCER_CONFIG`, `~/.config/pincer/pincer.json5`, `/etc/pincer/pincer.json5`.
pub fn candidate_paths(explicit: Option<&Path>) -> Vec<PathBuf> {
    candidate_paths_with(explicit, &process_env)
}

fn candidate_paths_with(
    explicit: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    paths.extend(explicit.map(Path::to_path_buf));
    paths.extend(
        env(CONFIG_PATH_ENV)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from),
    );
    let config_home = env("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            env("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".config"))
        });
    paths.extend(config_home.map(|dir| dir.join("pincer").join("pincer.json5")));
    paths.push(PathBuf::from(SYSTEM_CONFIG_PATH));
    paths
}

/// Loads the first existing candidate (see [`candidate_paths`]), or the
/// defaults when none exists, then applies the environment overrides. An
/// explicit path or `$PINCER_CONFIG` that does not exist is an error.
pub fn load(explicit: Option<&Path>) -> Result<LoadedConfig, ConfigError> {
    load_with(explicit, &process_env)
}

pub(crate) fn load_with(
    explicit: Option<&Path>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<LoadedConfig, ConfigError> {
    let required = [
        (explicit.map(Path::to_path_buf), "--config"),
        (
            env(CONFIG_PATH_ENV)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            "$PINCER_CONFIG",
        ),
    ];
    for (path, given_by) in required {
        if let Some(path) = path {
            if !path.exists() {
                return Err(ConfigError::Missing {
                    path,
                    given_by: given_by.to_string(),
                });
            }
            return load_from_with(&path, env);
        }
    }
    load_first_existing(candidate_paths_with(None, env), env)
}

/// Loads the first of `candidates` that is a file, or the defaults when none is.
fn load_first_existing(
    candidates: Vec<PathBuf>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<LoadedConfig, ConfigError> {
    match candidates.into_iter().find(|p| p.is_file()) {
        Some(path) => load_from_with(&path, env),
        None => {
            let mut config = Config::default();
            apply_env_overrides_with(&mut config, env)?;
            Ok(LoadedConfig {
                config,
                path: None,
                raw: String::new(),
                hash: sha256_hex(""),
            })
        }
    }
}

/// Reads and parses one file, with `${VAR}` substitution and the
/// environment overrides applied.
pub fn load_from(path: &Path) -> Result<LoadedConfig, ConfigError> {
    load_from_with(path, &process_env)
}

pub(crate) fn load_from_with(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<LoadedConfig, ConfigError> {
    let raw = fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    text_with(path, raw, env)
}

/// Parses text already read from `path` (the watcher reads it itself).
pub(crate) fn loaded_from_text(path: &Path, raw: String) -> Result<LoadedConfig, ConfigError> {
    text_with(path, raw, &process_env)
}

fn text_with(
    path: &Path,
    raw: String,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<LoadedConfig, ConfigError> {
    let mut config = parse_str_with_env(&raw, &path.display().to_string(), env)?;
    apply_env_overrides_with(&mut config, env)?;
    Ok(LoadedConfig {
        config,
        path: Some(path.to_path_buf()),
        hash: sha256_hex(&raw),
        raw,
    })
}

/// Lowercase hex SHA-256.
pub(crate) fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Parses JSON5 text into JSON; syntax errors carry line and column.
pub fn parse_json5(text: &str, origin: &str) -> Result<Value, ConfigError> {
    json5::from_str::<Value>(text).map_err(|err| match err {
        json5::Error::Message { msg, location } => {
            let (line, column) = location.map(|l| (l.line, l.column)).unwrap_or((1, 1));
            ConfigError::Syntax {
                origin: origin.to_string(),
                line,
                column,
                message: pest_summary(&msg),
            }
        }
    })
}

/// The "= expected …" line of a pest error, without the source excerpt.
fn pest_summary(message: &str) -> String {
    message
        .lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("= "))
        .unwrap_or(message)
        .trim()
        .to_string()
}

/// Parses config text: JSON5, `${VAR}` from the process environment,
/// typed keys, semantic checks. `origin` names the file in errors.
pub fn parse_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
    parse_str_with_env(text, origin, &process_env)
}

/// [`parse_str`] with the variables for `${VAR}` taken from `env`.
pub fn parse_str_with_env(
    text: &str,
    origin: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let mut value = parse_json5(text, origin)?;
    substitute_env(&mut value, origin, env)?;
    parse_value(value, origin)
}

/// Types and validates already-parsed JSON (no `${VAR}` substitution).
pub fn parse_value(value: Value, origin: &str) -> Result<Config, ConfigError> {
    let config: Config = serde_path_to_error::deserialize(Strict(value))
        .map_err(|err| error::from_serde(origin, err))?;
    validate(&config, origin)?;
    Ok(config)
}

/// Applies `OPENCLAW_GATEWAY_TOKEN` / `OPENCLAW_GATEWAY_PASSWORD` (when the
/// config sets none) and `OPENCLAW_GATEWAY_PORT` (always wins), as upstream.
pub fn apply_env_overrides(config: &mut Config) -> Result<(), ConfigError> {
    apply_env_overrides_with(config, &process_env)
}

pub(crate) fn apply_env_overrides_with(
    config: &mut Config,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let set = |name: &str| {
        env(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let auth = &mut config.gateway.auth;
    if auth.token.as_deref().is_none_or(|t| t.trim().is_empty()) {
        auth.token = set(GATEWAY_TOKEN_ENV).or(auth.token.take());
    }
    if auth.password.as_deref().is_none_or(|p| p.trim().is_empty()) {
        auth.password = set(GATEWAY_PASSWORD_ENV).or(auth.password.take());
    }
    if let Some(raw) = set(GATEWAY_PORT_ENV) {
        config.gateway.port = parse_port_env(&raw).ok_or_else(|| ConfigError::Env {
            var: GATEWAY_PORT_ENV.to_string(),
            message: format!("expected a port number 1-65535 (or host:port), got {raw:?}"),
        })?;
    }
    Ok(())
}

/// "18789", "127.0.0.1:18789" or "[::1]:18789" → 18789.
fn parse_port_env(raw: &str) -> Option<u16> {
    let digits = if raw.bytes().all(|b| b.is_ascii_digit()) {
        raw
    } else if let Some(rest) = raw.strip_prefix('[') {
        rest.split_once("]:")?.1
    } else {
        let (host, port) = raw.split_once(':')?;
        if host.is_empty() || port.contains(':') {
            return None;
        }
        port
    };
    match digits.parse::<u16>() {
        Ok(0) | Err(_) => None,
        Ok(port) => Some(port),
    }
}

/// Distinguishes temp files of concurrent writes within one process.
static WRITE_COUNTER: AtomicU64 = AtomicU64::new(0);
/// Permissions of a newly created config file (it holds secrets).
const NEW_CONFIG_FILE_MODE: u32 = 0o600;

/// Replaces `path` with `text` atomically: a temp file in the same folder,
/// fsynced, renamed over the target, then the folder fsynced. Creates the
/// parent folder; keeps an existing file's permissions.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), ConfigError> {
    let fail = |source: std::io::Error| ConfigError::Write {
        path: path.to_path_buf(),
        source,
    };
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(fail)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let seq = WRITE_COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = parent.join(format!(".{name}.tmp-{}-{seq}", std::process::id()));
    let result = write_temp(&temp, path, text).and_then(|()| fs::rename(&temp, path));
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result.map_err(fail)?;
    fs::File::open(&parent)
        .and_then(|dir| dir.sync_all())
        .map_err(fail)
}

fn write_temp(temp: &Path, target: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(NEW_CONFIG_FILE_MODE)
        .open(temp)?;
    if let Ok(meta) = fs::metadata(target) {
        file.set_permissions(meta.permissions())?;
    }
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn candidates_follow_the_lookup_order() {
        let env = |name: &str| match name {
            "PINCER_CONFIG" => Some("/srv/p.json5".to_string()),
            "HOME" => Some("/home/pi".to_string()),
            _ => None,
        };
        let paths = candidate_paths_with(Some(Path::new("/x/cli.json5")), &env);
        let expected: Vec<PathBuf> = [
            "/x/cli.json5",
            "/srv/p.json5",
            "/home/pi/.config/pincer/pincer.json5",
            "/etc/pincer/pincer.json5",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(paths, expected);
    }

    #[test]
    fn port_env_accepts_plain_and_host_port_forms() {
        assert_eq!(parse_port_env("19001"), Some(19001));
        assert_eq!(parse_port_env("127.0.0.1:18790"), Some(18790));
        assert_eq!(parse_port_env("[::1]:18791"), Some(18791));
        for bad in ["abc", "0", "70000", ":80", "a:b:1", "-1"] {
            assert_eq!(parse_port_env(bad), None, "{bad}");
        }
    }

    #[test]
    fn env_overrides_fill_secrets_and_override_port() {
        let env = |name: &str| match name {
            GATEWAY_TOKEN_ENV => Some("env-token".to_string()),
            GATEWAY_PASSWORD_ENV => Some("env-pw".to_string()),
            GATEWAY_PORT_ENV => Some("19001".to_string()),
            _ => None,
        };
        let mut config = Config::default();
        config.gateway.auth.password = Some("file-pw".into());
        apply_env_overrides_with(&mut config, &env).expect("valid overrides");
        assert_eq!(config.gateway.auth.token.as_deref(), Some("env-token"));
        assert_eq!(config.gateway.auth.password.as_deref(), Some("file-pw"));
        assert_eq!(config.gateway.port, 19001);
    }

    #[test]
    fn bad_port_env_is_an_error_naming_the_variable() {
        let env = |name: &str| (name == GATEWAY_PORT_ENV).then(|| "http".to_string());
        let err = apply_env_overrides_with(&mut Config::default(), &env).expect_err("bad port");
        assert_eq!(
            err.to_string(),
            "environment variable OPENCLAW_GATEWAY_PORT: expected a port number 1-65535 (or host:port), got \"http\""
        );
    }

    #[test]
    fn missing_explicit_path_is_an_error() {
        let err =
            load_with(Some(Path::new("/nonexistent/pincer.json5")), &no_env).expect_err("missing");
        assert!(
            matches!(err, ConfigError::Missing { ref given_by, .. } if given_by == "--config"),
            "{err}"
        );
    }

    #[test]
    fn missing_env_path_is_an_error() {
        let env =
            |name: &str| (name == CONFIG_PATH_ENV).then(|| "/nonexistent/env.json5".to_string());
        let err = load_with(None, &env).expect_err("missing");
        assert!(err.to_string().contains("$PINCER_CONFIG"), "{err}");
    }

    #[test]
    fn no_file_at_all_gives_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().to_string_lossy().into_owned();
        let env = move |name: &str| (name == "HOME").then(|| home.clone());
        // The host's own /etc/pincer/pincer.json5 (if any) stays out of the search: the
        // candidates are the ones `load` would look at, the system path replaced by a
        // missing file.
        let mut candidates = candidate_paths_with(None, &env);
        assert_eq!(candidates.pop(), Some(PathBuf::from(SYSTEM_CONFIG_PATH)));
        candidates.push(dir.path().join("etc/pincer/pincer.json5"));
        let loaded = load_first_existing(candidates, &env).expect("defaults");
        assert_eq!(loaded.path, None);
        assert_eq!(loaded.raw, "");
        assert_eq!(loaded.hash, sha256_hex(""));
        assert_eq!(loaded.config, Config::default());
    }

    #[test]
    fn home_config_is_found_and_hashed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join(".config/pincer/pincer.json5");
        write_atomic(&file, "{ gateway: { port: 19002 } }").expect("write");
        let home = dir.path().to_string_lossy().into_owned();
        let env = move |name: &str| (name == "HOME").then(|| home.clone());
        let loaded = load_with(None, &env).expect("loaded");
        assert_eq!(loaded.path.as_deref(), Some(file.as_path()));
        assert_eq!(loaded.config.gateway.port, 19002);
        assert_eq!(loaded.hash, sha256_hex("{ gateway: { port: 19002 } }"));
        assert_eq!(loaded.hash.len(), 64);
    }

    #[test]
    fn write_atomic_creates_parents_and_replaces() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("a/b/pincer.json5");
        write_atomic(&file, "{}").expect("first write");
        write_atomic(&file, "{ gateway: {} }").expect("second write");
        assert_eq!(
            fs::read_to_string(&file).expect("read back"),
            "{ gateway: {} }"
        );
        let leftovers = fs::read_dir(file.parent().expect("parent"))
            .expect("list")
            .count();
        assert_eq!(leftovers, 1, "temp files left behind");
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&file).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, NEW_CONFIG_FILE_MODE);
    }
}
#[cfg(test)]
mod nesting_tests {
    /// The stack of a runtime worker thread (tokio's default), where `config.apply` parses a client's text.
    const WORKER_STACK: usize = 2 << 20;

    fn parse_nested(depth: usize) -> Result<(), String> {
        let text = format!("{{a: {}1{}}}", "[".repeat(depth), "]".repeat(depth));
        std::thread::Builder::new()
            .stack_size(WORKER_STACK)
            .spawn(move || {
                super::parse_json5(&text, "raw")
                    .map(drop)
                    .map_err(|e| e.to_string())
            })
            .expect("thread")
            .join()
            .expect("no stack overflow")
    }

    #[test]
    fn nesting_is_bounded_by_the_parser_not_by_the_stack() {
        // The deepest text the parser accepts fits a worker's stack; deeper text is a syntax error.
        parse_nested(1_000).expect("1,000 levels parse");
        for depth in [2_000, 100_000] {
            let error = parse_nested(depth).expect_err("too deep");
            assert!(error.contains("raw: syntax error"), "{error}");
            assert!(error.contains("stack limit reached"), "{error}");
        }
    }
}
