//! pincer and OpenClaw's own gateway side by side, run by
//! `scripts/bench --vs-openclaw` and `scripts/bench --fsyncs`.
//!
//! It starts the fake OpenAI server of the integration tests
//! (`tests/support/fake_openai.rs`, real SSE wire format, every turn answered
//! at once with one chunk) in this process, then for each gateway (a pincer
//! binary, and with `--openclaw` OpenClaw's gateway run by Node 24) starts it
//! with that fake as its only model and drives it with the published
//! `openclaw-node` client (`tests/clients/bench_turns.mjs`): S sessions at
//! once, each taking T turns one after another. Per gateway and load it
//! reports turns/s, p50/p99 turn latency as the client sees it, start-to-ready
//! (spawn until a WebSocket gets `connect.challenge`), RSS of the whole
//! process tree (sum of VmRSS) idle and after the load, and bytes written per
//! turn (`write_bytes` of `/proc/<pid>/io`, summed over the tree). With
//! `--fsyncs` each load runs once more under `strace -f -c` attached to the
//! tree, counting fsync, fdatasync, msync and sync_file_range calls per turn
//! (a separate pass: tracing slows the gateway, so its timings are not used).
//!
//! It reports numbers only; it must not judge them (no thresholds here).
//!
//!   cargo run --release --example vs_openclaw -- --pincer target/release/pincer
//!       --node NODE --clients-dir tests/clients [--loads 4x10,16x50] [--fsyncs]
//!       [--openclaw --node24 NODE24 --openclaw-entry openclaw.mjs]

#[allow(dead_code)]
#[path = "../tests/support/fake_openai.rs"]
mod fake_openai;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fake_openai::{FakeOpenAi, FakeReply};
use futures_util::StreamExt;
use serde_json::{json, Value};

const TOKEN: &str = "vs-openclaw-bench-token-0123456789abcdef";
/// OpenClaw takes tens of seconds to start on a loaded 2-core machine.
const START_TIMEOUT: Duration = Duration::from_secs(180);
const CONNECT_RETRY_INTERVAL: Duration = Duration::from_millis(10);
/// How long a gateway idles after start before its RSS is read.
const IDLE_SETTLE: Duration = Duration::from_secs(3);
/// Replies queued per turn: a gateway may ask the model more than once (titles, retries).
const REPLIES_PER_TURN: usize = 3;

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("usage: vs_openclaw --pincer BIN --node NODE --clients-dir DIR [--loads SxT,...] [--fsyncs] [--openclaw --node24 NODE24 --openclaw-entry FILE]: {0}")]
    Usage(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Run(String),
}

#[derive(Clone, Copy)]
struct Load {
    sessions: usize,
    turns: usize,
}

struct Options {
    pincer: PathBuf,
    node: PathBuf,
    clients_dir: PathBuf,
    loads: Vec<Load>,
    fsyncs: bool,
    openclaw: Option<(PathBuf, PathBuf)>,
}

fn parse_loads(text: &str) -> Result<Vec<Load>, BenchError> {
    text.split(',')
        .map(|one| {
            let (s, t) = one
                .split_once('x')
                .ok_or_else(|| BenchError::Usage(format!("load {one:?} is not SxT")))?;
            let number = |v: &str| {
                v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    BenchError::Usage(format!("load {one:?}: {v:?} is not a positive number"))
                })
            };
            Ok(Load {
                sessions: number(s)?,
                turns: number(t)?,
            })
        })
        .collect()
}

fn parse_options() -> Result<Options, BenchError> {
    let (mut pincer, mut node, mut clients_dir, mut node24, mut entry) =
        (None, None, None, None, None);
    let (mut loads, mut fsyncs, mut openclaw) = (parse_loads("4x10,16x50")?, false, false);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--fsyncs" => fsyncs = true,
            "--openclaw" => openclaw = true,
            _ => {
                let value = args
                    .next()
                    .ok_or_else(|| BenchError::Usage(format!("{flag} needs a value")))?;
                match flag.as_str() {
                    "--pincer" => pincer = Some(PathBuf::from(value)),
                    "--node" => node = Some(PathBuf::from(value)),
                    "--clients-dir" => clients_dir = Some(PathBuf::from(value)),
                    "--node24" => node24 = Some(PathBuf::from(value)),
                    "--openclaw-entry" => entry = Some(PathBuf::from(value)),
                    "--loads" => loads = parse_loads(&value)?,
                    other => return Err(BenchError::Usage(format!("unknown flag {other}"))),
                }
            }
        }
    }
    let need = |v: Option<PathBuf>, name: &str| {
        v.ok_or_else(|| BenchError::Usage(format!("{name} is required")))
    };
    let openclaw = if openclaw {
        Some((need(node24, "--node24")?, need(entry, "--openclaw-entry")?))
    } else {
        None
    };
    Ok(Options {
        pincer: need(pincer, "--pincer")?,
        node: need(node, "--node")?,
        clients_dir: need(clients_dir, "--clients-dir")?,
        loads,
        fsyncs,
        openclaw,
    })
}

fn free_port() -> Result<u16, BenchError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A running gateway with its own directory; its process group is killed on drop.
struct Gateway {
    name: &'static str,
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Gateway {
    fn pincer(bin: &Path, provider_url: &str) -> Result<Gateway, BenchError> {
        let dir = tempfile::tempdir()?;
        let config = json!({
            "models": {"providers": {"fake": {"baseUrl": provider_url, "apiKey": "sk-bench",
                "api": "openai-completions", "models": [{"id": "gpt-bench", "contextWindow": 128000}]}}},
            "agents": {"defaults": {"model": {"primary": "fake/gpt-bench"}}},
        });
        let config_path = dir.path().join("pincer.json5");
        std::fs::write(&config_path, config.to_string())?;
        let port = free_port()?;
        let mut command = Command::new(bin);
        command
            .arg("gateway")
            .args(["--port", &port.to_string(), "--token", TOKEN])
            .arg("--config")
            .arg(&config_path)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env_remove("PINCER_CONFIG")
            .env_remove("PINCER_DATA_DIR");
        Gateway::spawn("pincer", command, port, dir)
    }

    /// OpenClaw's gateway, its state and config in a fresh directory, the fake as its only provider (a custom
    /// OpenAI-compatible provider: `models.providers.<id>` with `baseUrl`, `api: "openai-completions"`).
    fn openclaw(node24: &Path, entry: &Path, provider_url: &str) -> Result<Gateway, BenchError> {
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let config = json!({
            "gateway": {"mode": "local", "port": port, "bind": "loopback",
                "auth": {"mode": "token", "token": TOKEN}},
            "models": {"mode": "replace", "providers": {"fake": {"baseUrl": provider_url, "apiKey": "sk-bench",
                "api": "openai-completions", "models": [{"id": "gpt-bench", "name": "bench", "reasoning": false,
                "input": ["text"], "contextWindow": 128000, "maxTokens": 4096}]}}},
            "agents": {"defaults": {"model": {"primary": "fake/gpt-bench"}}},
        });
        let config_path = dir.path().join("openclaw.json");
        std::fs::write(&config_path, config.to_string())?;
        let mut command = Command::new(node24);
        command
            .arg(entry)
            .args([
                "gateway",
                "run",
                "--port",
                &port.to_string(),
                "--token",
                TOKEN,
            ])
            .args(["--bind", "loopback", "--allow-unconfigured"])
            .env("HOME", dir.path())
            .env("OPENCLAW_STATE_DIR", dir.path().join("state"))
            .env("OPENCLAW_CONFIG_PATH", &config_path)
            .env("TMPDIR", dir.path());
        Gateway::spawn("openclaw", command, port, dir)
    }

    fn spawn(
        name: &'static str,
        mut command: Command,
        port: u16,
        dir: tempfile::TempDir,
    ) -> Result<Gateway, BenchError> {
        use std::os::unix::process::CommandExt;
        let child = command
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Gateway {
            name,
            child,
            port,
            dir,
        })
    }

    fn url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.port)
    }

    /// Waits until a WebSocket on the gateway's port gets `connect.challenge`.
    async fn wait_ready(&mut self) -> Result<Duration, BenchError> {
        let started = Instant::now();
        while started.elapsed() < START_TIMEOUT {
            if let Some(status) = self.child.try_wait()? {
                return Err(BenchError::Run(format!(
                    "{} exited during start: {status}",
                    self.name
                )));
            }
            if challenge(&self.url()).await {
                return Ok(started.elapsed());
            }
            tokio::time::sleep(CONNECT_RETRY_INTERVAL).await;
        }
        Err(BenchError::Run(format!(
            "{} not ready within {START_TIMEOUT:?}",
            self.name
        )))
    }

    /// The gateway's process and every descendant of it.
    fn tree(&self) -> Vec<u32> {
        process_tree(self.child.id())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // The whole group: OpenClaw starts helper processes of its own.
        // SAFETY: kill(2) on the process group this bench created.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

async fn challenge(url: &str) -> bool {
    let Ok(Ok((mut socket, _))) = tokio::time::timeout(
        Duration::from_secs(2),
        tokio_tungstenite::connect_async(url),
    )
    .await
    else {
        return false;
    };
    let first = tokio::time::timeout(Duration::from_secs(5), socket.next()).await;
    matches!(first, Ok(Some(Ok(frame))) if frame.to_text().is_ok_and(|t| t.contains("connect.challenge")))
}

/// `root` and its descendants, from `/proc/*/stat` parent links.
fn process_tree(root: u32) -> Vec<u32> {
    let mut parents = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parents.push((pid, ppid));
            }
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(pid, _)| *pid),
        );
        i += 1;
    }
    tree
}

fn proc_field(path: &str, name: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0)
}

/// Sum of VmRSS over the tree, KiB.
fn tree_rss_kib(tree: &[u32]) -> u64 {
    tree.iter()
        .map(|pid| proc_field(&format!("/proc/{pid}/status"), "VmRSS:"))
        .sum()
}

/// Sum of `write_bytes` over the tree.
fn tree_write_bytes(tree: &[u32]) -> u64 {
    tree.iter()
        .map(|pid| proc_field(&format!("/proc/{pid}/io"), "write_bytes:"))
        .sum()
}

/// What one load through the client gave.
struct LoadRun {
    latencies_ms: Vec<f64>,
    elapsed_ms: f64,
}

async fn drive(
    options: &Options,
    gateway: &Gateway,
    load: Load,
    prefix: &str,
) -> Result<LoadRun, BenchError> {
    let script = options.clients_dir.join("bench_turns.mjs");
    let output = tokio::process::Command::new(&options.node)
        .arg(&script)
        .args(["--url", &gateway.url(), "--token", TOKEN])
        .args([
            "--sessions",
            &load.sessions.to_string(),
            "--turns",
            &load.turns.to_string(),
        ])
        .arg("--identity-dir")
        .arg(gateway.dir.path().join(format!("identities-{prefix}")))
        .args(["--prefix", prefix])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await?;
    if !output.status.success() {
        return Err(BenchError::Run(format!(
            "client against {} failed ({}): {}",
            gateway.name,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    let report: Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| BenchError::Run(format!("client printed no JSON: {e}")))?;
    let latencies_ms = report["latenciesMs"]
        .as_array()
        .map(|all| all.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    Ok(LoadRun {
        latencies_ms,
        elapsed_ms: report["elapsedMs"].as_f64().unwrap_or(0.0),
    })
}

/// Calls of the sync family made by the tree while `work` runs, from `strace -f -c`.
async fn count_syncs<F: std::future::Future<Output = Result<LoadRun, BenchError>>>(
    tree: &[u32],
    dir: &Path,
    work: F,
) -> Result<(LoadRun, u64), BenchError> {
    let out = dir.join("strace.out");
    let mut command = Command::new("strace");
    command
        .args([
            "-f",
            "-c",
            "-e",
            "trace=fsync,fdatasync,msync,sync_file_range,syncfs",
            "-o",
        ])
        .arg(&out);
    for pid in tree {
        command.args(["-p", &pid.to_string()]);
    }
    let mut strace = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    // Attaching takes a moment; a sync made before it would be missed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let run = work.await;
    // SAFETY: SIGINT to the strace this function started; it then writes its summary and exits.
    unsafe { libc::kill(strace.id() as i32, libc::SIGINT) };
    strace.wait()?;
    let summary = std::fs::read_to_string(&out)?;
    let calls = summary
        .lines()
        .filter(|line| !line.contains("total") && !line.contains("calls") && !line.starts_with('-'))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // % time, seconds, usecs/call, calls, [errors,] syscall
            fields.get(3).and_then(|c| c.parse::<u64>().ok())
        })
        .sum();
    Ok((run?, calls))
}

struct Row {
    gateway: &'static str,
    load: Load,
    turns_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    ready: Duration,
    idle_kib: u64,
    loaded_kib: u64,
    bytes_per_turn: f64,
    syncs_per_turn: Option<f64>,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn queue_replies(fake: &FakeOpenAi, load: Load) {
    for _ in 0..load.sessions * load.turns * REPLIES_PER_TURN {
        fake.push_reply(FakeReply::Text {
            chunks: vec!["ok".into()],
            delay_ms: 0,
        });
    }
}

async fn bench_gateway(
    options: &Options,
    mut gateway: Gateway,
    fake: &FakeOpenAi,
) -> Result<Vec<Row>, BenchError> {
    let ready = gateway.wait_ready().await?;
    tokio::time::sleep(IDLE_SETTLE).await;
    let idle_kib = tree_rss_kib(&gateway.tree());
    let mut rows = Vec::new();
    for (n, load) in options.loads.iter().enumerate() {
        let turns = (load.sessions * load.turns) as f64;
        queue_replies(fake, *load);
        let tree = gateway.tree();
        let written_before = tree_write_bytes(&tree);
        let run = drive(options, &gateway, *load, &format!("load{n}")).await?;
        let tree = gateway.tree();
        let written = tree_write_bytes(&tree).saturating_sub(written_before);
        let loaded_kib = tree_rss_kib(&tree);
        let syncs_per_turn = if options.fsyncs {
            queue_replies(fake, *load);
            let dir = gateway.dir.path().to_path_buf();
            let (_, calls) = count_syncs(
                &tree,
                &dir,
                drive(options, &gateway, *load, &format!("traced{n}")),
            )
            .await?;
            Some(calls as f64 / turns)
        } else {
            None
        };
        let mut sorted = run.latencies_ms.clone();
        sorted.sort_by(f64::total_cmp);
        rows.push(Row {
            gateway: gateway.name,
            load: *load,
            turns_per_s: turns / (run.elapsed_ms / 1e3),
            p50_ms: quantile(&sorted, 0.5),
            p99_ms: quantile(&sorted, 0.99),
            ready,
            idle_kib,
            loaded_kib,
            bytes_per_turn: written as f64 / turns,
            syncs_per_turn,
        });
    }
    Ok(rows)
}

fn print_table(rows: &[Row]) {
    println!(
        "{:<9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>10} {:>12} {:>11} {:>11}",
        "gateway",
        "load",
        "turns/s",
        "p50 ms",
        "p99 ms",
        "ready s",
        "idle MiB",
        "loaded MiB",
        "KiB/turn",
        "fsyncs/turn"
    );
    for row in rows {
        let syncs = row
            .syncs_per_turn
            .map_or_else(|| "-".to_string(), |s| format!("{s:.2}"));
        println!(
            "{:<9} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.2} {:>10.1} {:>12.1} {:>11.1} {:>11}",
            row.gateway,
            format!("{}x{}", row.load.sessions, row.load.turns),
            row.turns_per_s,
            row.p50_ms,
            row.p99_ms,
            row.ready.as_secs_f64(),
            row.idle_kib as f64 / 1024.0,
            row.loaded_kib as f64 / 1024.0,
            row.bytes_per_turn / 1024.0,
            syncs
        );
    }
    let pincer = rows.iter().filter(|r| r.gateway == "pincer");
    for mine in pincer {
        if let Some(theirs) = rows.iter().find(|r| {
            r.gateway == "openclaw"
                && r.load.sessions == mine.load.sessions
                && r.load.turns == mine.load.turns
        }) {
            println!(
                "pincer/openclaw turns/s at {}x{}: {:.0}x",
                mine.load.sessions,
                mine.load.turns,
                mine.turns_per_s / theirs.turns_per_s
            );
        }
    }
}

async fn run(options: Options) -> Result<(), BenchError> {
    let fake = FakeOpenAi::start().await;
    let mut rows = Vec::new();
    let pincer = Gateway::pincer(&options.pincer, &fake.base_url())?;
    rows.extend(bench_gateway(&options, pincer, &fake).await?);
    fake.forget_requests();
    if let Some((node24, entry)) = &options.openclaw {
        let openclaw = Gateway::openclaw(node24, entry, &fake.base_url())?;
        rows.extend(bench_gateway(&options, openclaw, &fake).await?);
    }
    print_table(&rows);
    Ok(())
}

fn main() {
    let options = match parse_options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = runtime.block_on(run(options)) {
        eprintln!("vs_openclaw: {e}");
        std::process::exit(1);
    }
}
