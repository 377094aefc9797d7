//! What the soak and media benches share about a spawned `pincer gateway`: waiting for its ready line and
//! reading its `/proc/<pid>/status`.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::time::Duration;

/// What `pincer gateway` prints on stdout once it listens (`… HOST:PORT`).
pub const READY_PREFIX: &str = "pincer: listening on ";

/// Waits up to `timeout` for the ready line on the child's piped stdout and returns the port it names; the
/// rest of stdout is drained on a thread. `None` when no ready line came.
pub fn wait_ready(child: &mut Child, timeout: Duration) -> Option<u16> {
    let stdout = child.stdout.take()?;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix(READY_PREFIX) {
                let port = rest
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.trim().parse::<u16>().ok());
                let _ = ready_tx.send(port);
            }
        }
    });
    ready_rx.recv_timeout(timeout).ok().flatten()
}

/// A `/proc/<pid>/status` field in KiB (`"VmRSS:"`, `"VmHWM:"`), 0 when unreadable.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
