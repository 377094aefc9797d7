//! A managed signal-cli daemon (`transport.kind: "managed-native"`): the
//! command line upstream builds (`[--config DIR] -a ACCOUNT daemon --http
//! HOST:PORT --no-receive-stdout [--receive-mode M] [--ignore-attachments]
//! [--ignore-stories] [--send-read-receipts]`), started and kept running:
//! its stdout and stderr go to pincer's log line by line (lines cut at
//! [`MAX_LOG_LINE_BYTES`]; ERROR/FAILED/SEVERE/EXCEPTION lines as errors,
//! as upstream classifies them), an exit is reported in the account's
//! status and followed by a restart after the reconnect backoff, and
//! stopping the channel ends it (SIGTERM, then SIGKILL after
//! [`STOP_GRACE_MS`]).
//!
//! Message content never goes through argv: only the daemon's HTTP API.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::channels::account::{pause, RECONNECT_BACKOFF};
use crate::config::schema::signal::ManagedDaemon;

use super::Account;

/// Longest daemon output line logged (the rest is cut).
pub const MAX_LOG_LINE_BYTES: usize = 4096;
/// How long the daemon gets to exit after SIGTERM.
pub const STOP_GRACE_MS: u64 = 5_000;
/// A daemon that ran this long restarts without delay.
const STABLE_RUN_MS: u64 = 30_000;

/// The daemon's arguments for `account`.
pub fn daemon_args(
    daemon: &ManagedDaemon,
    account: &str,
    ignore_attachments: bool,
    send_read_receipts: bool,
) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(config) = &daemon.config_path {
        args.extend(["--config".to_string(), expand_home(config)]);
    }
    args.extend(["-a".to_string(), account.to_string(), "daemon".to_string()]);
    let host = daemon.http_host.trim_matches(['[', ']']);
    let bind = if host.contains(':') {
        format!("[{host}]:{}", daemon.http_port)
    } else {
        format!("{host}:{}", daemon.http_port)
    };
    args.extend([
        "--http".to_string(),
        bind,
        "--no-receive-stdout".to_string(),
    ]);
    if let Some(mode) = daemon.receive_mode {
        args.extend(["--receive-mode".to_string(), mode.as_arg().to_string()]);
    }
    if ignore_attachments {
        args.push("--ignore-attachments".to_string());
    }
    if daemon.ignore_stories {
        args.push("--ignore-stories".to_string());
    }
    if send_read_receipts {
        args.push("--send-read-receipts".to_string());
    }
    args
}

/// `~` and `~/…` under `$HOME`.
fn expand_home(path: &str) -> String {
    let path = path.trim();
    let home = std::env::var("HOME").unwrap_or_default();
    if path == "~" {
        return home;
    }
    match path.strip_prefix("~/") {
        Some(rest) if !home.is_empty() => format!("{home}/{rest}"),
        _ => path.to_string(),
    }
}

/// Whether a daemon output line reports a failure (upstream's rule).
pub fn is_error_line(line: &str) -> bool {
    let upper = line.to_uppercase();
    if line.split_whitespace().any(|w| w == "ERROR") {
        return true;
    }
    if upper.contains("INVALID PREKEY MESSAGE") && upper.contains("DECRYPTION FAILED") {
        return false;
    }
    upper
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| matches!(w, "FAILED" | "SEVERE" | "EXCEPTION"))
}

/// Logs every line of `stream`, each cut at [`MAX_LOG_LINE_BYTES`].
async fn log_lines(account_id: String, stream: impl AsyncRead + Unpin) {
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        // Read at most the cap (plus one byte to see the line is longer).
        let mut limited = (&mut reader).take(MAX_LOG_LINE_BYTES as u64 + 1);
        match limited.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let complete = line.last() == Some(&b'\n');
        if !complete && line.len() > MAX_LOG_LINE_BYTES {
            // Skip the rest of the overlong line.
            line.truncate(MAX_LOG_LINE_BYTES);
            let mut rest = Vec::new();
            loop {
                rest.clear();
                let mut chunk = (&mut reader).take(MAX_LOG_LINE_BYTES as u64);
                match chunk.read_until(b'\n', &mut rest).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) if rest.last() == Some(&b'\n') => break,
                    Ok(_) => {}
                }
            }
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        if is_error_line(text) {
            log::error!("signal account {account_id}: signal-cli: {text}");
        } else {
            log::info!("signal account {account_id}: signal-cli: {text}");
        }
    }
}

use tokio::io::AsyncReadExt;

fn spawn(daemon: &ManagedDaemon, args: &[String]) -> std::io::Result<Child> {
    let mut command = Command::new(&daemon.cli_path);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // A gateway killed outright (SIGKILL, the OOM killer) takes its daemon along: the next start runs its
    // own, and two daemons on one account would fight over its messages. The signal follows the spawning
    // thread, a runtime worker that lives as long as the gateway.
    // SAFETY: prctl(2) in the child between fork and exec touches no memory of this process.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn()
}

/// Ends `child`: SIGTERM, then SIGKILL after the grace period.
async fn terminate(child: &mut Child) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on the pid of a child this process spawned and
        // has not yet reaped.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGTERM);
        }
    }
    if tokio::time::timeout(Duration::from_millis(STOP_GRACE_MS), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

/// Runs the daemon until `stop`: restarts it after every exit (after the
/// backoff unless it ran [`STABLE_RUN_MS`]), reporting each state.
pub async fn supervise(account: Arc<Account>, daemon: ManagedDaemon, stop: CancellationToken) {
    let args = daemon_args(
        &daemon,
        &account.settings.number,
        account.settings.ignore_attachments,
        account.settings.send_read_receipts,
    );
    let mut backoff = RECONNECT_BACKOFF;
    loop {
        let started = std::time::Instant::now();
        let mut child = match spawn(&daemon, &args) {
            Ok(child) => child,
            Err(error) => {
                let reason = format!("cannot start {}: {error}", daemon.cli_path);
                account.daemon_state(reason.clone());
                account.record_error(reason);
                if !pause(&stop, backoff.next_delay().as_millis() as u64).await {
                    return;
                }
                continue;
            }
        };
        let pid = child.id().unwrap_or_default();
        log::info!(
            "signal account {}: started {} {} (pid {pid})",
            account.id,
            daemon.cli_path,
            args.join(" ")
        );
        account.daemon_state(format!("signal-cli daemon running (pid {pid})"));
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(tokio::spawn(log_lines(account.id.clone(), out)));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(tokio::spawn(log_lines(account.id.clone(), err)));
        }
        let exit = tokio::select! {
            _ = stop.cancelled() => {
                terminate(&mut child).await;
                for reader in readers {
                    let _ = reader.await;
                }
                log::info!("signal account {}: signal-cli daemon stopped", account.id);
                return;
            }
            status = child.wait() => status,
        };
        for reader in readers {
            let _ = reader.await;
        }
        let ran_ms = started.elapsed().as_millis() as u64;
        if ran_ms >= STABLE_RUN_MS {
            backoff.reset();
        }
        let delay = backoff.next_delay();
        let what = match exit {
            Ok(status) => format!("signal-cli daemon exited ({status})"),
            Err(error) => format!("signal-cli daemon lost: {error}"),
        };
        let reason = format!("{what}; restarting in {} ms", delay.as_millis());
        account.daemon_state(reason.clone());
        account.record_error(reason);
        if !pause(&stop, delay.as_millis() as u64).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::signal::SignalReceiveMode;

    fn daemon() -> ManagedDaemon {
        ManagedDaemon {
            cli_path: "signal-cli".into(),
            config_path: None,
            http_host: "127.0.0.1".into(),
            http_port: 8080,
            url: "http://127.0.0.1:8080".into(),
            startup_timeout_ms: 30_000,
            receive_mode: None,
            ignore_stories: false,
        }
    }

    #[test]
    fn the_command_line_is_upstreams() {
        assert_eq!(
            daemon_args(&daemon(), "+1555", false, false),
            vec![
                "-a",
                "+1555",
                "daemon",
                "--http",
                "127.0.0.1:8080",
                "--no-receive-stdout"
            ]
        );
        let full = ManagedDaemon {
            config_path: Some("/srv/signal".into()),
            http_host: "::1".into(),
            receive_mode: Some(SignalReceiveMode::OnStart),
            ignore_stories: true,
            ..daemon()
        };
        assert_eq!(
            daemon_args(&full, "+1555", true, true).join(" "),
            "--config /srv/signal -a +1555 daemon --http [::1]:8080 --no-receive-stdout \
             --receive-mode on-start --ignore-attachments --ignore-stories --send-read-receipts"
        );
    }

    #[test]
    fn error_lines_are_told_from_routine_ones() {
        assert!(is_error_line("ERROR ReceiveHelper - connection lost"));
        assert!(is_error_line("Sending failed: SEVERE trouble"));
        assert!(!is_error_line("INFO DaemonCommand - Started HTTP server"));
        assert!(!is_error_line(
            "WARN receive exception: invalid PreKey message: decryption failed"
        ));
    }
}
