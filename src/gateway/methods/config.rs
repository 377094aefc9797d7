//! `config.get`, `config.patch` and `config.apply`: the config file seen and
//! changed through the protocol, guarded by the base hash and a write budget.
//!
//! A written config is validated before it touches the disk, written
//! atomically, and applied live (a changed chat channel restarts alone); keys
//! that need a gateway restart are reported, and the config watcher restarts
//! the gateway in place for them (`gateway.reload.mode` hybrid or restart).

use std::sync::Arc;

use serde_json::{json, Value};
use sha2::Digest;

use crate::config::{self, LoadedConfig};
use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;
use crate::system::clock::now_ms;

use super::params::Params;

/// `config.get`: the redacted effective config and the file's hash.
pub fn get(state: &GatewayState) -> Result<Value, ErrorShape> {
    let loaded = state.loaded();
    Ok(json!({
        "path": loaded.path.as_ref().map(|p| p.display().to_string()),
        "exists": loaded.path.is_some(),
        "valid": true,
        "hash": loaded.hash,
        "config": loaded.config.redacted(),
        "issues": [],
        "warnings": [],
    }))
}

/// Merge patch or whole replacement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    Patch,
    Apply,
}

/// `config.patch` / `config.apply`.
pub fn write(
    state: &Arc<GatewayState>,
    params: &Value,
    mode: WriteMode,
) -> Result<Value, ErrorShape> {
    let method = match mode {
        WriteMode::Patch => "config.patch",
        WriteMode::Apply => "config.apply",
    };
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
    if let Err(retry_ms) = state.claim_config_write(now_ms()) {
        return Err(ErrorShape::unavailable(format!(
            "{method} rate limited: at most 3 config writes per minute"
        ))
        .retry_after(retry_ms));
    }
    let incoming: Value = json5::from_str(raw).map_err(|e| {
        ErrorShape::invalid(format!(
            "invalid {method} params: raw is not valid JSON5: {e}"
        ))
    })?;
    let next = match mode {
        WriteMode::Apply => incoming,
        WriteMode::Patch => {
            let mut current: Value = if loaded.raw.trim().is_empty() {
                json!({})
            } else {
                json5::from_str(&loaded.raw).map_err(|e| {
                    ErrorShape::unavailable(format!(
                        "the current config file no longer parses: {e}"
                    ))
                })?
            };
            config::merge_patch(&mut current, &incoming);
            current
        }
    };
    let text =
        serde_json::to_string_pretty(&next).map_err(|e| ErrorShape::unavailable(e.to_string()))?;
    let path = loaded
        .path
        .clone()
        .or_else(|| config::candidate_paths(None).into_iter().next())
        .ok_or_else(|| {
            ErrorShape::unavailable("no writable config path (set --config or PINCER_CONFIG)")
        })?;
    let mut parsed = config::parse_str(&text, &path.display().to_string())
        .map_err(|e| ErrorShape::invalid(format!("invalid config: {e}")))?;
    config::apply_env_overrides(&mut parsed)
        .map_err(|e| ErrorShape::invalid(format!("invalid config: {e}")))?;
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
        "config written to {} by {method}; restart needed for: {restart:?}",
        path.display()
    );
    Ok(json!({
        "ok": true,
        "path": path.display().to_string(),
        "hash": hash,
        "config": redacted,
        "restart": {"required": !restart.is_empty(), "paths": restart},
    }))
}
