//! Sandbox overhead: time to run `true` through the sandbox runner versus a
//! plain spawn (p50/p99), and the runner's own memory: the bench process's
//! RSS growth over many runs, and the resident memory of the runner's helper
//! processes (relay and namespace init) while a command runs.
//!
//! `cargo run --release --example sandbox_bench -- [--runs N]`

use std::time::{Duration, Instant};

use pincer::sandbox::exec::{run_command, ExecRequest};

fn percentile(sorted: &[Duration], q: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

/// Proportional set size: shared pages divided among their sharers.
fn pss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|r| r.split_whitespace().next())
                .and_then(|k| k.parse().ok())
        })
        .unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|r| r.split_whitespace().next())
                .and_then(|k| k.parse().ok())
        })
        .unwrap_or(0)
}

/// Every process whose ancestry leads to `root` (excluding `root`).
fn descendants(root: u32) -> Vec<(u32, String)> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(after) = stat.rfind(')') else {
            continue;
        };
        let name = stat[stat.find('(').unwrap_or(0) + 1..after].to_string();
        let ppid: u32 = stat[after + 2..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        parents.push((pid, ppid, name));
    }
    let mut found = vec![root];
    let mut out = Vec::new();
    let mut changed = true;
    while changed {
        changed = false;
        for (pid, ppid, name) in &parents {
            if found.contains(ppid) && !found.contains(pid) {
                found.push(*pid);
                out.push((*pid, name.clone()));
                changed = true;
            }
        }
    }
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs: usize = std::env::args()
        .skip_while(|a| a != "--runs")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let workspace = tempfile::tempdir().expect("workspace");
    let mut plain = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let status = tokio::process::Command::new("/bin/true")
            .status()
            .await
            .expect("spawn true");
        assert!(status.success());
        plain.push(started.elapsed());
    }
    let rss_before = rss_kib(std::process::id());
    let mut sandboxed = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let outcome = run_command(ExecRequest::new("true", workspace.path()))
            .await
            .expect("sandboxed true");
        assert_eq!(outcome.exit_code, Some(0), "{}", outcome.status_line());
        sandboxed.push(started.elapsed());
    }
    let rss_after = rss_kib(std::process::id());
    plain.sort();
    sandboxed.sort();
    println!(
        "plain spawn of true ({runs} runs): p50 {:.2} ms, p99 {:.2} ms",
        percentile(&plain, 0.5),
        percentile(&plain, 0.99)
    );
    println!(
        "sandboxed true ({runs} runs): p50 {:.2} ms, p99 {:.2} ms",
        percentile(&sandboxed, 0.5),
        percentile(&sandboxed, 0.99)
    );
    println!(
        "bench process RSS: {rss_before} KiB before, {rss_after} KiB after {runs} sandboxed runs"
    );
    let me = std::process::id();
    let handle = tokio::spawn({
        let ws = workspace.path().to_path_buf();
        async move { run_command(ExecRequest::new("sleep 2", ws)).await }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let helpers: Vec<(u32, String, u64)> = descendants(me)
        .into_iter()
        // The command itself (`sh -c sleep`) is not runner overhead.
        .filter(|(_, name)| name != "sleep" && name != "sh")
        .map(|(pid, name)| (pid, name, pss_kib(pid)))
        .collect();
    let total: u64 = helpers.iter().map(|(_, _, r)| r).sum();
    let names: Vec<String> = helpers
        .iter()
        .map(|(pid, n, r)| format!("{n}[{pid}] {r} KiB"))
        .collect();
    println!("runner helper processes (relay + namespace init) while a command runs: PSS {total} KiB ({})", names.join(", "));
    let _ = handle.await;
}
