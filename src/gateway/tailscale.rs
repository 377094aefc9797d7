//! Tailscale exposure: with `gateway.tailscale.mode` "serve" (tailnet only) or
//! "funnel" (public), the gateway asks the local `tailscale` CLI to proxy
//! HTTPS to its loopback port, and undoes it on exit when `resetOnExit` is set.
//!
//! The rules are upstream's: Tailscale exposure needs a loopback bind, and
//! funnel (reachable from the internet) needs password auth.

use std::time::Duration;

use crate::config::{AuthMode, Config, TailscaleMode};

/// How long one `tailscale` command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

/// The CLI verb for a mode (`None` when off).
pub fn verb(mode: TailscaleMode) -> Option<&'static str> {
    match mode {
        TailscaleMode::Off => None,
        TailscaleMode::Serve => Some("serve"),
        TailscaleMode::Funnel => Some("funnel"),
    }
}

/// Checks the start-up rules; the error says what to change.
pub fn check(config: &Config, loopback_only: bool) -> Result<(), String> {
    let Some(verb) = verb(config.gateway.tailscale.mode) else {
        return Ok(());
    };
    if !loopback_only {
        return Err(format!(
            "gateway.tailscale.mode \"{verb}\" needs gateway.bind \"loopback\": Tailscale proxies to the loopback port"
        ));
    }
    if verb == "funnel" && config.gateway.auth.effective_mode() != AuthMode::Password {
        return Err(
            "gateway.tailscale.mode \"funnel\" exposes the gateway to the internet and needs gateway.auth.mode \"password\""
                .to_string(),
        );
    }
    Ok(())
}

async fn run(args: &[String]) -> Result<String, String> {
    let mut command = tokio::process::Command::new("tailscale");
    command
        .args(args)
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    let output = tokio::time::timeout(COMMAND_TIMEOUT, command.output())
        .await
        .map_err(|_| format!("`tailscale {}` timed out", args.join(" ")))?
        .map_err(|e| format!("cannot run `tailscale`: {e} (is Tailscale installed?)"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    } else {
        Err(format!(
            "`tailscale {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Starts `tailscale serve|funnel --bg --yes <port>`; failures are logged, not fatal.
pub async fn expose(mode: TailscaleMode, port: u16) {
    let Some(verb) = verb(mode) else { return };
    let args = vec![
        verb.to_string(),
        "--bg".into(),
        "--yes".into(),
        port.to_string(),
    ];
    match run(&args).await {
        Ok(out) => log::info!(
            "tailscale {verb} is proxying to port {port}{}",
            if out.is_empty() {
                String::new()
            } else {
                format!(": {out}")
            }
        ),
        Err(e) => log::warn!("{e}; the gateway stays reachable on loopback only"),
    }
}

/// Undoes the exposure (`tailscale serve|funnel reset`).
pub async fn reset(mode: TailscaleMode) {
    let Some(verb) = verb(mode) else { return };
    if let Err(e) = run(&[verb.to_string(), "reset".into()]).await {
        log::warn!("{e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_needs_loopback_and_funnel_needs_password() {
        let mut config = Config::default();
        config.gateway.tailscale.mode = TailscaleMode::Serve;
        assert!(check(&config, true).is_ok());
        assert!(check(&config, false).expect_err("lan").contains("loopback"));
        config.gateway.tailscale.mode = TailscaleMode::Funnel;
        assert!(check(&config, true)
            .expect_err("token mode")
            .contains("password"));
        config.gateway.auth.mode = Some(AuthMode::Password);
        config.gateway.auth.password = Some("pw".into());
        assert!(check(&config, true).is_ok());
    }
}
