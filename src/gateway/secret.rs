//! The gateway's shared secret at start-up: from `--token`, the config (env
//! overrides already applied), or — for token mode with none set — a token
//! generated once and kept in the data dir, as upstream does.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rand::RngCore;

use crate::config::{AuthMode, Config};

use super::auth::SharedSecret;

/// The file in the data dir that keeps a generated token.
pub const GENERATED_TOKEN_FILE: &str = "gateway-token";

/// The resolved secret and where it came from.
pub struct ResolvedSecret {
    pub secret: SharedSecret,
    /// The owner set it (flag, config or env): safe to serve beyond loopback.
    pub owner_set: bool,
    /// Where a generated token was kept.
    pub generated_path: Option<PathBuf>,
}

/// Reads the generated token, if one was made.
pub fn read_generated(data_dir: &Path) -> Option<String> {
    std::fs::read_to_string(data_dir.join(GENERATED_TOKEN_FILE))
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

/// The generated token, made (mode 0600) if the data dir has none yet; also used by
/// `pincer firstboot`.
pub fn generate(data_dir: &Path) -> Result<(String, PathBuf), String> {
    let path = data_dir.join(GENERATED_TOKEN_FILE);
    if let Some(token) = read_generated(data_dir) {
        return Ok((token, path));
    }
    let mut bytes = [0u8; 24];
    rand::thread_rng().fill_bytes(&mut bytes);
    let token = hex::encode(bytes);
    std::fs::create_dir_all(data_dir)
        .map_err(|e| format!("cannot create data dir {}: {e}", data_dir.display()))?;
    let mut file = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    file.write_all(token.as_bytes())
        .and_then(|_| file.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok((token, path))
}

/// Resolves the secret for `gateway.auth`.
pub fn resolve(
    config: &Config,
    token_flag: Option<&str>,
    data_dir: &Path,
) -> Result<ResolvedSecret, String> {
    let auth = &config.gateway.auth;
    let flag = token_flag.map(str::trim).filter(|t| !t.is_empty());
    let mode = if flag.is_some() && auth.mode.is_none() {
        AuthMode::Token
    } else {
        auth.effective_mode()
    };
    match mode {
        AuthMode::None => Ok(ResolvedSecret { secret: SharedSecret::None, owner_set: false, generated_path: None }),
        AuthMode::Password => {
            let password = auth.password.clone().filter(|p| !p.is_empty()).ok_or(
                "gateway.auth.mode is \"password\" but no password is set: set gateway.auth.password or OPENCLAW_GATEWAY_PASSWORD",
            )?;
            Ok(ResolvedSecret { secret: SharedSecret::Password(password), owner_set: true, generated_path: None })
        }
        AuthMode::Token => {
            if let Some(token) = flag.map(str::to_string).or_else(|| auth.token.clone().filter(|t| !t.is_empty())) {
                return Ok(ResolvedSecret { secret: SharedSecret::Token(token), owner_set: true, generated_path: None });
            }
            let (token, path) = generate(data_dir)?;
            Ok(ResolvedSecret { secret: SharedSecret::Token(token), owner_set: false, generated_path: Some(path) })
        }
        AuthMode::TrustedProxy => Err(
            "gateway.auth.mode \"trusted-proxy\" is not supported by pincer: use \"token\" or \"password\"".to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_token_is_kept_and_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = Config::default();
        let first = resolve(&config, None, dir.path()).expect("generated");
        assert!(!first.owner_set);
        let SharedSecret::Token(token) = &first.secret else {
            panic!("token mode")
        };
        assert_eq!(token.len(), 48);
        let second = resolve(&config, None, dir.path()).expect("reused");
        assert_eq!(second.secret, first.secret);
        let flagged = resolve(&config, Some("mine"), dir.path()).expect("flag");
        assert_eq!(flagged.secret, SharedSecret::Token("mine".into()));
        assert!(flagged.owner_set);
    }
}
