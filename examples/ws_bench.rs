//! WebSocket benchmarks of a pincer gateway binary, run by `scripts/bench`.
//!
//! It spawns `pincer gateway` itself (fresh data dir, loopback, fixed token)
//! and measures, speaking OpenClaw's gateway protocol with tokio-tungstenite
//! (wait for `connect.challenge`, send `connect`, expect a `hello-ok` `res`):
//! - start-to-ready: spawn until the first successful `connect` handshake,
//!   median over `--starts` fresh processes;
//! - idle RSS: `VmRSS` from `/proc/<pid>/status` after `--idle-secs` with one
//!   client connected;
//! - round trip: `health` request to `res`, p50/p99 over `--calls` calls.
//!
//! It reports numbers only; it must not judge them (no thresholds here).
//!
//!   cargo run --release --example ws_bench -- --bin target/release/pincer
//!       [--starts 20] [--calls 10000] [--idle-secs 10]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const BENCH_TOKEN: &str = "ws-bench-token-0123456789abcdef";
/// A start that is not ready by then counts as a failure.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between connection attempts while the gateway starts.
const CONNECT_RETRY_INTERVAL: Duration = Duration::from_millis(2);
/// One request's answer must arrive within this.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("usage: ws_bench --bin PATH [--starts N] [--calls N] [--idle-secs N]: {0}")]
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

struct Options {
    bin: PathBuf,
    starts: usize,
    calls: usize,
    idle: Duration,
}

fn parse_options() -> Result<Options, BenchError> {
    let mut bin = None;
    let (mut starts, mut calls, mut idle_secs) = (20_usize, 10_000_usize, 10_u64);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| BenchError::Usage(format!("{flag} needs a value")))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| BenchError::Usage(format!("{flag} expects a number, got {value}")))
        };
        match flag.as_str() {
            "--bin" => bin = Some(PathBuf::from(&value)),
            "--starts" => starts = number()?.max(1) as usize,
            "--calls" => calls = number()?.max(1) as usize,
            "--idle-secs" => idle_secs = number()?,
            other => return Err(BenchError::Usage(format!("unknown flag {other}"))),
        }
    }
    let bin = bin.ok_or_else(|| BenchError::Usage("--bin is required".into()))?;
    Ok(Options {
        bin,
        starts,
        calls,
        idle: Duration::from_secs(idle_secs),
    })
}

impl From<tokio_tungstenite::tungstenite::Error> for BenchError {
    fn from(err: tokio_tungstenite::tungstenite::Error) -> Self {
        BenchError::WebSocket(Box::new(err))
    }
}

/// A gateway process with its own data dir; killed on drop.
struct Gateway {
    child: Child,
    port: u16,
    _data: tempfile::TempDir,
}

impl Gateway {
    fn spawn(bin: &Path) -> Result<Gateway, BenchError> {
        let data = tempfile::tempdir()?;
        let port = free_port()?;
        let child = Command::new(bin)
            .arg("gateway")
            .args(["--port", &port.to_string(), "--token", BENCH_TOKEN])
            .arg("--data-dir")
            .arg(data.path())
            .env_remove("PINCER_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Gateway {
            child,
            port,
            _data: data,
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

/// The next text frame parsed as JSON (pings are answered by tungstenite).
async fn next_json(socket: &mut Socket) -> Result<Value, BenchError> {
    loop {
        let frame = tokio::time::timeout(REPLY_TIMEOUT, socket.next())
            .await
            .map_err(|_| BenchError::Protocol("no frame within the reply timeout".into()))?
            .ok_or_else(|| BenchError::Protocol("socket closed".into()))??;
        if let Message::Text(text) = frame {
            return serde_json::from_str(text.as_str())
                .map_err(|e| BenchError::Protocol(format!("frame is not JSON: {e}")));
        }
    }
}

/// The `res` for request `id`, skipping events (ticks, presence) on the way.
async fn response_to(socket: &mut Socket, id: &str) -> Result<Value, BenchError> {
    loop {
        let frame = next_json(socket).await?;
        if frame["type"] == "res" && frame["id"] == id {
            return Ok(frame);
        }
    }
}

/// Opens a socket and completes the handshake, returning the connected socket.
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
            "minProtocol": 3, "maxProtocol": 4,
            "client": {"id": "test", "version": "bench", "platform": "linux", "mode": "test"},
            "auth": {"token": BENCH_TOKEN},
        },
    });
    socket.send(Message::text(connect.to_string())).await?;
    let res = response_to(&mut socket, "connect-1").await?;
    if res["ok"] != true || res["payload"]["type"] != "hello-ok" {
        return Err(BenchError::Protocol(format!("connect refused: {res}")));
    }
    Ok(socket)
}

/// Spawn → first successful handshake, retrying until the port accepts.
async fn start_to_ready(bin: &Path) -> Result<Duration, BenchError> {
    let started = Instant::now();
    let gateway = Gateway::spawn(bin)?;
    let url = gateway.url();
    while started.elapsed() < START_TIMEOUT {
        if let Ok(mut socket) = handshake(&url).await {
            let elapsed = started.elapsed();
            let _ = socket.close(None).await;
            return Ok(elapsed);
        }
        tokio::time::sleep(CONNECT_RETRY_INTERVAL).await;
    }
    Err(BenchError::NotReady(START_TIMEOUT))
}

/// A started gateway and one connected client socket.
async fn ready_gateway(bin: &Path) -> Result<(Gateway, Socket), BenchError> {
    let gateway = Gateway::spawn(bin)?;
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

/// Resident memory in KiB: total, private anonymous (heap, stacks) and
/// file-backed (the binary's and libraries' code pages, shared and reclaimable).
#[derive(Debug, Clone, Copy)]
struct Rss {
    total: u64,
    anon: u64,
    file: u64,
}

fn vm_rss_kib(pid: u32) -> Result<Rss, BenchError> {
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
    })
}

/// RSS after `idle` with one client connected; the client keeps reading so
/// ticks and pings are consumed as a real client would.
async fn idle_rss(bin: &Path, idle: Duration) -> Result<Rss, BenchError> {
    let (gateway, mut socket) = ready_gateway(bin).await?;
    let deadline = tokio::time::Instant::now() + idle;
    while tokio::time::timeout_at(deadline, socket.next())
        .await
        .is_ok()
    {}
    let rss = vm_rss_kib(gateway.child.id())?;
    let _ = socket.close(None).await;
    Ok(rss)
}

/// Sequential `health` round trips on one connection, sorted ascending.
async fn health_round_trips(bin: &Path, calls: usize) -> Result<Vec<Duration>, BenchError> {
    let (_gateway, mut socket) = ready_gateway(bin).await?;
    let mut samples = Vec::with_capacity(calls);
    for n in 0..calls {
        let id = format!("h{n}");
        let request = json!({"type": "req", "id": id, "method": "health", "params": {}});
        let sent = Instant::now();
        socket.send(Message::text(request.to_string())).await?;
        let res = response_to(&mut socket, &id).await?;
        samples.push(sent.elapsed());
        if res["ok"] != true {
            return Err(BenchError::Protocol(format!("health failed: {res}")));
        }
    }
    samples.sort();
    Ok(samples)
}

/// The sample at quantile `q` (0..=1) of an ascending, non-empty slice.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn run(options: Options) -> Result<(), BenchError> {
    let mut starts = Vec::with_capacity(options.starts);
    for _ in 0..options.starts {
        starts.push(start_to_ready(&options.bin).await?);
    }
    starts.sort();
    println!(
        "start-to-ready (spawn to hello-ok, median of {}): {:.1} ms (min {:.1}, max {:.1})",
        starts.len(),
        millis(quantile(&starts, 0.5)),
        millis(starts[0]),
        millis(starts[starts.len() - 1])
    );

    let rss = idle_rss(&options.bin, options.idle).await?;
    println!(
        "idle RSS (1 client, {} s): {:.1} MiB ({} KiB; private anonymous {} KiB, file-backed code {} KiB)",
        options.idle.as_secs(),
        rss.total as f64 / 1024.0,
        rss.total,
        rss.anon,
        rss.file
    );

    let trips = health_round_trips(&options.bin, options.calls).await?;
    println!(
        "health round trip ({} calls, one connection): p50 {:.3} ms, p99 {:.3} ms",
        trips.len(),
        millis(quantile(&trips, 0.5)),
        millis(quantile(&trips, 0.99))
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
        eprintln!("ws_bench: {err}");
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
        assert_eq!(quantile(&samples[..1], 0.99), Duration::from_millis(1));
    }
}
