//! `config.get`, `config.set`, `config.patch` and `config.apply`: the config
//! file seen and changed through the protocol, guarded by the base hash and a
//! write budget.
//!
//! Secrets are shown as upstream's redaction sentinel and a write that sends
//! the sentinel back keeps the stored value. A written config is validated
//! before it touches the disk — an invalid one is refused with upstream's
//! `invalid config: <path>: <message>` and `details.issues` (`[{path,
//! message}]`), and nothing is written — then written atomically and applied
//! live (a changed chat channel restarts alone); keys that need a gateway
//! restart are reported, and the config watcher restarts the gateway in place
//! for them (`gateway.reload.mode` hybrid or restart).

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};
use sha2::Digest;

use crate::config::{self, ConfigError, LoadedConfig};
use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;
use crate::system::clock::now_ms;

use super::params::Params;

/// The config file's own JSON ({} without a file).
fn file_json(loaded: &LoadedConfig) -> Result<Value, ErrorShape> {
    if loaded.raw.trim().is_empty() {
        return Ok(json!({}));
    }
    config::parse_json5(&loaded.raw, "config").map_err(|e| {
        ErrorShape::unavailable(format!("the current config file no longer parses: {e}"))
    })
}

/// `config.get`: the redacted effective config, the file's own keys
/// (`parsed`, redacted) and the file's hash.
pub fn get(state: &GatewayState) -> Result<Value, ErrorShape> {
    let loaded = state.loaded();
    let parsed = file_json(&loaded).map(config::redact_file).ok();
    Ok(json!({
        "path": loaded.path.as_ref().map(|p| p.display().to_string()),
        "exists": loaded.path.is_some(),
        "valid": true,
        "hash": loaded.hash,
        "config": loaded.config.redacted(),
        "parsed": parsed,
        "issues": [],
        "warnings": [],
    }))
}

/// Merge patch, or the whole file replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    Patch,
    Apply,
    Set,
}

impl WriteMode {
    fn method(self) -> &'static str {
        match self {
            WriteMode::Patch => "config.patch",
            WriteMode::Apply => "config.apply",
            WriteMode::Set => "config.set",
        }
    }
}

/// A config error as upstream answers an invalid submission.
pub fn invalid_config(error: &ConfigError) -> ErrorShape {
    let (path, message) = error.issue();
    let summary = if path.is_empty() {
        format!("invalid config: {message}")
    } else {
        format!("invalid config: {path}: {message}")
    };
    ErrorShape::invalid(summary)
        .with_details(json!({"issues": [{"path": path, "message": message}]}))
}

/// Whether `next` (the whole file, as JSON) is a valid config, `${VAR}`s
/// and the environment's overrides included.
pub fn check(next: &Value) -> Result<(), ErrorShape> {
    let text = serde_json::to_string(next).map_err(|e| ErrorShape::unavailable(e.to_string()))?;
    let mut parsed = config::parse_str(&text, "raw").map_err(|e| invalid_config(&e))?;
    config::apply_env_overrides(&mut parsed).map_err(|e| invalid_config(&e))
}

/// What a committed write changed.
pub struct Committed {
    pub path: PathBuf,
    pub hash: String,
    pub redacted: Value,
    /// Keys whose change needs a gateway restart.
    pub restart: Vec<String>,
}

/// Validates `next` (the whole file, as JSON), writes it atomically and
/// makes it the running config. Nothing is written when it is invalid.
pub fn commit(state: &Arc<GatewayState>, next: &Value, by: &str) -> Result<Committed, ErrorShape> {
    let loaded = state.loaded();
    let text =
        serde_json::to_string_pretty(next).map_err(|e| ErrorShape::unavailable(e.to_string()))?;
    let path = loaded
        .path
        .clone()
        .or_else(|| config::candidate_paths(None).into_iter().next())
        .ok_or_else(|| {
            ErrorShape::unavailable("no writable config path (set --config or PINCER_CONFIG)")
        })?;
    let mut parsed =
        config::parse_str(&text, &path.display().to_string()).map_err(|e| invalid_config(&e))?;
    config::apply_env_overrides(&mut parsed).map_err(|e| invalid_config(&e))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            ErrorShape::unavailable(format!("could not create {}: {e}", dir.display()))
        })?;
    }
    config::write_atomic(&path, &text)
        .map_err(|e| ErrorShape::unavailable(format!("could not write {}: {e}", path.display())))?;
    let restart = config::restart_required(&loaded.config, &parsed);
    let new_loaded = LoadedConfig {
        hash: hex::encode(sha2::Sha256::digest(text.as_bytes())),
        config: parsed,
        path: Some(path.clone()),
        raw: text,
    };
    let redacted = new_loaded.config.redacted();
    let hash = new_loaded.hash.clone();
    state.replace_config(new_loaded);
    log::info!(
        "config written to {} by {by}; restart needed for: {restart:?}",
        path.display()
    );
    Ok(Committed {
        path,
        hash,
        redacted,
        restart,
    })
}

/// `config.patch` / `config.apply` / `config.set`.
pub fn write(
    state: &Arc<GatewayState>,
    params: &Value,
    mode: WriteMode,
) -> Result<Value, ErrorShape> {
    let method = mode.method();
    let p = Params::new(method, params)?;
    let raw = p.str("raw", false)?;
    let base_hash = p.opt_str("baseHash")?;
    let loaded = state.loaded();
    if loaded.path.is_some() {
        match base_hash {
            None => {
                return Err(ErrorShape::invalid(
                    "config base hash required; re-run config.get and send its hash as baseHash",
                ))
            }
            Some(hash) if hash != loaded.hash => {
                return Err(ErrorShape::invalid(
                    "config changed since last load; re-run config.get and retry",
                ))
            }
            Some(_) => {}
        }
    }
    // Parse and validate first: a refused submission costs no write budget.
    let mut incoming = config::parse_json5(raw, "raw").map_err(|e| invalid_config(&e))?;
    let current = file_json(&loaded)?;
    config::restore_redacted(&mut incoming, &current, "raw").map_err(|e| invalid_config(&e))?;
    let next = match mode {
        WriteMode::Apply | WriteMode::Set => incoming,
        WriteMode::Patch => {
            let mut merged = current;
            config::merge_patch(&mut merged, &incoming);
            merged
        }
    };
    check(&next)?;
    // Upstream limits `config.apply` and `config.patch` (not `config.set`).
    let budget = match mode {
        WriteMode::Set => Ok(()),
        WriteMode::Patch | WriteMode::Apply => state.claim_config_write(now_ms()),
    };
    if let Err(retry_ms) = budget {
        return Err(ErrorShape::unavailable(format!(
            "{method} rate limited: at most 3 config writes per minute"
        ))
        .retry_after(retry_ms));
    }
    let committed = commit(state, &next, method)?;
    Ok(json!({
        "ok": true,
        "path": committed.path.display().to_string(),
        "hash": committed.hash,
        "config": committed.redacted,
        "restart": {"required": !committed.restart.is_empty(), "paths": committed.restart},
    }))
}
