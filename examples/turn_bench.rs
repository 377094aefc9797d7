//! Per-turn gateway overhead of a pincer gateway binary, run by
//! `scripts/bench --turns`.
//!
//! It starts the fake OpenAI server of the integration tests
//! (`tests/support/fake_openai.rs`, real SSE wire format) in this process,
//! answering every turn at once with one content chunk (zero provider
//! latency), spawns `pincer gateway` with that fake as its only model, and
//! over OpenClaw's gateway protocol measures:
//! - turn latency: `chat.send` sent → `chat` event `state: "final"` for that
//!   run, one turn at a time, each in a fresh session (store writes, prompt
//!   assembly, the provider HTTP call, event fan-out all count), p50/p99 and
//!   turns per second;
//! - the fake's own time per turn (request arrival → its last SSE event
//!   queued: reading and parsing the request body, building the reply), and
//!   the gateway overhead: each turn's latency less its provider time. The
//!   fake shares this process and the machine's cores with the client, so its
//!   time is the provider's share, not the gateway's;
//! - RSS with `--concurrent` turns in flight: the fake holds every stream
//!   open after its first chunk; the board profile's lane admits some, the
//!   rest wait in the queue, as in production. VmRSS and VmHWM are read from
//!   `/proc`.
//!
//! It reports numbers only; it must not judge them (no thresholds here).
//!
//!   cargo run --release --example turn_bench -- --bin target/release/pincer
//!       [--turns 2000] [--warmup 100] [--concurrent 50] [--data-root DIR]
//!
//! `--data-root /dev/shm` puts the store on tmpfs: the same turns without
//! the disk's fsync latency (every acknowledged write is still committed).

#[allow(dead_code)]
#[path = "../tests/support/fake_openai.rs"]
mod fake_openai;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fake_openai::{FakeOpenAi, FakeReply};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const BENCH_TOKEN: &str = "turn-bench-token-0123456789abcdef";
/// A gateway that is not ready by then counts as a failure.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between connection attempts while the gateway starts.
const CONNECT_RETRY_INTERVAL: Duration = Duration::from_millis(5);
/// One frame must arrive within this.
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the concurrent turns settle before RSS is read.
const SETTLE: Duration = Duration::from_secs(1);

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("usage: turn_bench --bin PATH [--turns N] [--warmup N] [--concurrent N] [--data-root DIR]: {0}")]
    Usage(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("websocket: {0}")]
    WebSocket(Box<tokio_tungstenite::tungstenite::Error>),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("gateway not ready within {0:?}")]
    NotReady(Duration),
}

impl From<tokio_tungstenite::tungstenite::Error> for BenchError {
    fn from(err: tokio_tungstenite::tungstenite::Error) -> Self {
        BenchError::WebSocket(Box::new(err))
    }
}

struct Options {
    bin: PathBuf,
    turns: usize,
    warmup: usize,
    concurrent: usize,
    /// Where the gateway's data dir is created (the store's fsyncs land there).
    data_root: Option<PathBuf>,
}

fn parse_options() -> Result<Options, BenchError> {
    let (mut bin, mut data_root) = (None, None);
    let (mut turns, mut warmup, mut concurrent) = (2000_usize, 100_usize, 50_usize);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| BenchError::Usage(format!("{flag} needs a value")))?;
        let number = || {
            value
                .parse::<usize>()
                .map_err(|_| BenchError::Usage(format!("{flag} expects a number, got {value}")))
        };
        match flag.as_str() {
            "--bin" => bin = Some(PathBuf::from(&value)),
            "--data-root" => data_root = Some(PathBuf::from(&value)),
            "--turns" => turns = number()?.max(1),
            "--warmup" => warmup = number()?,
            "--concurrent" => concurrent = number()?.max(1),
            other => return Err(BenchError::Usage(format!("unknown flag {other}"))),
        }
    }
    let bin = bin.ok_or_else(|| BenchError::Usage("--bin is required".into()))?;
    Ok(Options {
        bin,
        turns,
        warmup,
        concurrent,
        data_root,
    })
}

/// A gateway process with its own data dir and config; killed on drop.
struct Gateway {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Gateway {
    fn spawn(bin: &Path, provider_url: &str, root: Option<&Path>) -> Result<Gateway, BenchError> {
        let dir = match root {
            Some(root) => tempfile::tempdir_in(root)?,
            None => tempfile::tempdir()?,
        };
        let config = json!({
            "models": {"providers": {"fake": {"baseUrl": provider_url, "apiKey": "sk-bench",
                "api": "openai-completions", "models": [{"id": "gpt-bench", "contextWindow": 128000}]}}},
            "agents": {"defaults": {"model": {"primary": "fake/gpt-bench"}}},
        });
        let config_path = dir.path().join("pincer.json5");
        std::fs::write(&config_path, config.to_string())?;
        let port = free_port()?;
        let child = Command::new(bin)
            .arg("gateway")
            .args(["--port", &port.to_string(), "--token", BENCH_TOKEN])
            .arg("--config")
            .arg(&config_path)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env_remove("PINCER_CONFIG")
            .env_remove("PINCER_DATA_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Gateway {
            child,
            port,
            _dir: dir,
        })
    }

    fn url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.port)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16, BenchError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The next text frame.
async fn next_text(socket: &mut Socket) -> Result<String, BenchError> {
    loop {
        let frame = tokio::time::timeout(REPLY_TIMEOUT, socket.next())
            .await
            .map_err(|_| BenchError::Protocol("no frame within the reply timeout".into()))?
            .ok_or_else(|| BenchError::Protocol("socket closed".into()))??;
        if let Message::Text(text) = frame {
            return Ok(text.as_str().to_string());
        }
    }
}

fn parse(text: &str) -> Result<Value, BenchError> {
    serde_json::from_str(text).map_err(|e| BenchError::Protocol(format!("frame is not JSON: {e}")))
}

/// The next text frame parsed as JSON.
async fn next_json(socket: &mut Socket) -> Result<Value, BenchError> {
    parse(&next_text(socket).await?)
}

/// Opens a socket and completes the handshake as a local operator client.
async fn handshake(url: &str) -> Result<Socket, BenchError> {
    let (mut socket, _) = tokio_tungstenite::connect_async(url).await?;
    loop {
        let frame = next_json(&mut socket).await?;
        if frame["type"] == "event" && frame["event"] == "connect.challenge" {
            break;
        }
    }
    let connect = json!({
        "type": "req", "id": "connect-1", "method": "connect",
        "params": {
            "minProtocol": 3, "maxProtocol": 4, "role": "operator",
            "scopes": ["operator.read", "operator.write"],
            "client": {"id": "test", "version": "bench", "platform": "linux", "mode": "test"},
            "auth": {"token": BENCH_TOKEN},
        },
    });
    socket.send(Message::text(connect.to_string())).await?;
    loop {
        let frame = next_json(&mut socket).await?;
        if frame["type"] == "res" && frame["id"] == "connect-1" {
            if frame["ok"] != true {
                return Err(BenchError::Protocol(format!("connect refused: {frame}")));
            }
            return Ok(socket);
        }
    }
}

async fn ready_gateway(
    options: &Options,
    provider_url: &str,
) -> Result<(Gateway, Socket), BenchError> {
    let gateway = Gateway::spawn(&options.bin, provider_url, options.data_root.as_deref())?;
    let started = Instant::now();
    loop {
        match handshake(&gateway.url()).await {
            Ok(socket) => return Ok((gateway, socket)),
            Err(_) if started.elapsed() < START_TIMEOUT => {
                tokio::time::sleep(CONNECT_RETRY_INTERVAL).await
            }
            Err(_) => return Err(BenchError::NotReady(START_TIMEOUT)),
        }
    }
}

async fn send_chat(socket: &mut Socket, run_id: &str, session: &str) -> Result<(), BenchError> {
    let request = json!({"type": "req", "id": format!("req-{run_id}"), "method": "chat.send",
        "params": {"sessionKey": session, "message": "hi", "idempotencyKey": run_id}});
    socket.send(Message::text(request.to_string())).await?;
    Ok(())
}

/// One turn: `chat.send` → the run's final `chat` event.
async fn one_turn(
    socket: &mut Socket,
    fake: &FakeOpenAi,
    n: usize,
) -> Result<Duration, BenchError> {
    fake.push_reply(FakeReply::Text {
        chunks: vec!["ok".into()],
        delay_ms: 0,
    });
    let run_id = format!("turn-{n}");
    let sent = Instant::now();
    send_chat(socket, &run_id, &format!("bench-{n}")).await?;
    loop {
        // Only the frames that can end the turn are parsed: the client's own
        // work stays out of the measured time as far as it can.
        let text = next_text(socket).await?;
        if !text.contains("\"type\":\"res\"") && !text.contains(run_id.as_str()) {
            continue;
        }
        if text.contains("\"event\":\"agent\"") {
            continue;
        }
        let frame = parse(&text)?;
        let payload = &frame["payload"];
        if frame["type"] == "res" && frame["ok"] != true {
            return Err(BenchError::Protocol(format!("chat.send refused: {frame}")));
        }
        if frame["event"] == "chat" && payload["runId"] == run_id.as_str() {
            match payload["state"].as_str() {
                Some("final") => return Ok(sent.elapsed()),
                Some("delta") => continue,
                _ => return Err(BenchError::Protocol(format!("turn failed: {payload}"))),
            }
        }
    }
}

/// Resident memory in KiB: total, private anonymous (heap, stacks) and
/// file-backed (code and the store's memory map), plus the peak total.
#[derive(Debug, Clone, Copy)]
struct Rss {
    total: u64,
    anon: u64,
    file: u64,
    peak: u64,
}

impl std::fmt::Display for Rss {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1} MiB (anon {:.1}, file {:.1})",
            mib(self.total),
            mib(self.anon),
            mib(self.file)
        )
    }
}

fn rss_kib(pid: u32) -> Result<Rss, BenchError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .ok_or_else(|| BenchError::Protocol(format!("no {name} line in /proc status")))
    };
    Ok(Rss {
        total: field("VmRSS:")?,
        anon: field("RssAnon:")?,
        file: field("RssFile:")?,
        peak: field("VmHWM:")?,
    })
}

/// CPU time the process has used (user + system, all threads), from `/proc/<pid>/stat`.
fn cpu_time(pid: u32) -> Result<Duration, BenchError> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th of those.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| BenchError::Protocol("malformed /proc stat".into()))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // SAFETY: sysconf only reads a system constant.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(Duration::from_micros(
        (ticks(11) + ticks(12)) * 1_000_000 / per_second,
    ))
}

/// Starts `count` turns whose streams the fake holds open; returns how many
/// provider streams were open once the lane had admitted what it would.
async fn hold_concurrent(
    socket: &mut Socket,
    fake: &FakeOpenAi,
    count: usize,
) -> Result<usize, BenchError> {
    let before = fake.requests().len();
    for n in 0..count {
        fake.push_reply(FakeReply::Hang {
            first_chunk: "thinking about it".into(),
        });
        send_chat(socket, &format!("held-{n}"), &format!("held-{n}")).await?;
    }
    let mut acks = 0;
    while acks < count {
        let frame = next_json(socket).await?;
        if frame["type"] == "res" {
            if frame["ok"] != true {
                return Err(BenchError::Protocol(format!("chat.send refused: {frame}")));
            }
            acks += 1;
        }
    }
    let settle_until = tokio::time::Instant::now() + SETTLE;
    while tokio::time::timeout_at(settle_until, socket.next())
        .await
        .is_ok()
    {}
    Ok(fake.requests().len() - before)
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

async fn run(options: Options) -> Result<(), BenchError> {
    let fake = FakeOpenAi::start().await;
    let (gateway, mut socket) = ready_gateway(&options, &fake.base_url()).await?;
    let store_on = options.data_root.clone().unwrap_or_else(std::env::temp_dir);
    println!("gateway data dir under {}", store_on.display());
    let pid = gateway.child.id();
    let idle_rss = rss_kib(pid)?;
    for n in 0..options.warmup {
        one_turn(&mut socket, &fake, n).await?;
    }
    let mut samples = Vec::with_capacity(options.turns);
    let mut overheads = Vec::with_capacity(options.turns);
    let mut served = Vec::with_capacity(options.turns);
    let started = Instant::now();
    let cpu_before = cpu_time(pid)?;
    for n in 0..options.turns {
        let turn = one_turn(&mut socket, &fake, options.warmup + n).await?;
        // The fake answered this turn's one model call: its own time is the provider's, not the gateway's.
        let provider = fake.last_serve_time().unwrap_or_default();
        fake.forget_requests();
        samples.push(turn);
        overheads.push(turn.saturating_sub(provider));
        served.push(provider);
    }
    let wall = started.elapsed();
    let cpu = cpu_time(pid)?.saturating_sub(cpu_before);
    for list in [&mut samples, &mut overheads, &mut served] {
        list.sort();
    }
    let after_rss = rss_kib(pid)?;
    let line = |label: &str, sorted: &[Duration]| {
        println!(
            "{label}: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            millis(quantile(sorted, 0.5)),
            millis(quantile(sorted, 0.99)),
            millis(sorted[sorted.len() - 1])
        );
    };
    println!(
        "{} turns after {} warm-up, one at a time, a fresh session each:",
        samples.len(),
        options.warmup
    );
    line(
        "  turn latency (chat.send -> chat final, end to end)",
        &samples,
    );
    line(
        "  provider time (the fake, request arrival -> last SSE event queued)",
        &served,
    );
    line(
        "  gateway overhead (turn latency less that turn's provider time)",
        &overheads,
    );
    println!(
        "turns per second (one at a time, {} cores): {:.0}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        samples.len() as f64 / wall.as_secs_f64()
    );
    println!(
        "gateway CPU time per turn (user + system, all threads): {:.3} ms",
        millis(cpu) / options.turns as f64
    );
    let open = hold_concurrent(&mut socket, &fake, options.concurrent).await?;
    let held_rss = rss_kib(pid)?;
    println!("gateway RSS idle: {idle_rss}");
    println!("gateway RSS after the turns: {after_rss}");
    println!(
        "gateway RSS with {} turns in flight ({open} provider streams held open, the rest queued by the lane): {held_rss}, peak {:.1} MiB",
        options.concurrent,
        mib(held_rss.peak)
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let result = match parse_options() {
        Ok(options) => run(options).await,
        Err(err) => Err(err),
    };
    if let Err(err) = result {
        eprintln!("turn_bench: {err}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_picks_the_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&samples, 0.5), Duration::from_millis(51));
        assert_eq!(quantile(&samples, 0.99), Duration::from_millis(99));
    }
}
