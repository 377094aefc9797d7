//! The host processes of a command a test started, found by a marker in their command line,
//! and a bounded wait for them to be gone: "the process tree died" checked by its PIDs, not by
//! the absence of some effect over a while.

use std::time::{Duration, Instant};

/// Upper bound of every wait here (for slow machines; no timing claim).
const WAIT_LIMIT: Duration = Duration::from_secs(10);
const POLL_EVERY: Duration = Duration::from_millis(20);

/// One process: its PID and its start time (clock ticks since boot), which tells it from a
/// later process given the same PID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    start_time: u64,
}

impl Proc {
    /// True while this process exists and is not a zombie (dead, awaiting its parent's wait).
    pub fn is_alive(&self) -> bool {
        stat(self.pid)
            .is_some_and(|(state, start_time)| state != 'Z' && start_time == self.start_time)
    }
}

/// (state, start time) from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name in parentheses may hold spaces: fields follow the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let start_time = fields.get(19)?.parse().ok()?;
    Some((state, start_time))
}

/// Live host processes (other than this one) whose command line contains `marker`.
pub fn marked(marker: &str) -> Vec<Proc> {
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != own)
        .filter(|&pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|bytes| String::from_utf8_lossy(&bytes).contains(marker))
        })
        .filter_map(|pid| {
            let (state, start_time) = stat(pid)?;
            (state != 'Z').then_some(Proc { pid, start_time })
        })
        .collect()
}

/// Waits until at least `count` live processes carry `marker`; returns them. Panics at the
/// limit.
pub async fn wait_for_marked(marker: &str, count: usize) -> Vec<Proc> {
    let started = Instant::now();
    loop {
        let found = marked(marker);
        if found.len() >= count {
            return found;
        }
        assert!(
            started.elapsed() < WAIT_LIMIT,
            "only {} of {count} processes marked {marker} appeared: {found:?}",
            found.len()
        );
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Waits until none of `procs` is alive; returns the survivors at the limit (empty: all died).
pub async fn survivors_after_wait(procs: &[Proc]) -> Vec<Proc> {
    let started = Instant::now();
    loop {
        let alive: Vec<Proc> = procs.iter().copied().filter(Proc::is_alive).collect();
        if alive.is_empty() || started.elapsed() >= WAIT_LIMIT {
            return alive;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}
