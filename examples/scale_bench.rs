//! The gateway under many connections, run by `scripts/bench --scale`: `--idle` WebSocket clients
//! connected and idle (each reads everything the gateway sends: ticks, presence, health events), plus
//! `--sessions` clients each taking `--turns` web chat turns (`chat.send` → final `chat` event) against
//! the integration tests' fake OpenAI server (zero latency), while one more client sends `health` every
//! `--probe-ms`. It reports:
//! - the gateway's RSS with the idle clients connected, its peak while the turns run (sampled every
//!   100 ms), and after;
//! - `health` round trips during the load, p50/p99/max;
//! - turns done and their latency (the board profile's lane admits a few runs at a time; the rest wait);
//! - starvation: after the load every idle client sends `health`; how many answered within
//!   `REPLY_TIMEOUT` and the slowest, and the fewest frames any idle client received meanwhile.
//!
//! The gateway gets `PINCER_MAX_CONNECTIONS` above the client count (board profiles cap connections far
//! lower). It reports numbers only; `scripts/bench` prints the goals beside them.
//!
//!   cargo run --release --example scale_bench -- --bin target/release/pincer
//!       [--idle 1000] [--sessions 200] [--turns 5] [--probe-ms 50]

#[allow(dead_code)]
#[path = "../tests/support/fake_openai.rs"]
mod fake_openai;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_openai::FakeOpenAi;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const TOKEN: &str = "scale-bench-token-0123456789abcdef";
const START_TIMEOUT: Duration = Duration::from_secs(30);
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Handshakes in flight at once: the gateway allows 32 unauthenticated sockets per address.
const CONCURRENT_HANDSHAKES: usize = 16;

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;
type Error = Box<dyn std::error::Error + Send + Sync>;

struct Options {
    bin: PathBuf,
    idle: usize,
    sessions: usize,
    turns: usize,
    probe: Duration,
}

fn parse_options() -> Result<Options, Error> {
    let mut options = Options {
        bin: PathBuf::new(),
        idle: 1000,
        sessions: 200,
        turns: 5,
        probe: Duration::from_millis(50),
    };
    let mut bin = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag} expects a number"))
        };
        match flag.as_str() {
            "--bin" => bin = Some(PathBuf::from(&value)),
            "--idle" => options.idle = number()? as usize,
            "--sessions" => options.sessions = number()? as usize,
            "--turns" => options.turns = number()? as usize,
            "--probe-ms" => options.probe = Duration::from_millis(number()?),
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    options.bin = bin.ok_or(
        "usage: scale_bench --bin PATH [--idle N] [--sessions N] [--turns N] [--probe-ms N]",
    )?;
    Ok(options)
}

/// A gateway process with its own data dir; killed on drop.
struct Gateway {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_gateway(options: &Options, provider_url: &str) -> Result<Gateway, Error> {
    let dir = tempfile::tempdir()?;
    let config = json!({
        "models": {"providers": {"fake": {"baseUrl": provider_url, "apiKey": "sk-bench",
            "api": "openai-completions", "models": [{"id": "gpt-bench", "contextWindow": 128000}]}}},
        "agents": {"defaults": {"model": {"primary": "fake/gpt-bench"}}},
    });
    let config_path = dir.path().join("pincer.json5");
    std::fs::write(&config_path, config.to_string())?;
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let connections = options.idle + options.sessions + 16;
    let child = Command::new(&options.bin)
        .arg("gateway")
        .args(["--port", &port.to_string(), "--token", TOKEN])
        .arg("--config")
        .arg(&config_path)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_DATA_DIR")
        .env("PINCER_MAX_CONNECTIONS", connections.to_string())
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

async fn next_json(socket: &mut Socket) -> Result<Value, Error> {
    loop {
        let frame = tokio::time::timeout(REPLY_TIMEOUT, socket.next())
            .await
            .map_err(|_| "no frame within the reply timeout")?
            .ok_or("socket closed")??;
        if let Message::Text(text) = frame {
            return Ok(serde_json::from_str(text.as_str())?);
        }
    }
}

/// Opens a socket and completes the handshake as a local operator client.
async fn handshake(url: &str) -> Result<Socket, Error> {
    // The gateway refuses more than a few unauthenticated sockets per address at once (503), as
    // it should: back off and try again, as a real client reconnects.
    let mut attempts = 0;
    let mut socket = loop {
        match tokio_tungstenite::connect_async(url).await {
            Ok((socket, _)) => break socket,
            Err(tokio_tungstenite::tungstenite::Error::Http(response))
                if response.status() == 503 && attempts < 200 =>
            {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Err(e) => return Err(e.into()),
        }
    };
    loop {
        let frame = next_json(&mut socket).await?;
        if frame["event"] == "connect.challenge" {
            break;
        }
    }
    let connect = json!({
        "type": "req", "id": "connect-1", "method": "connect",
        "params": {
            "minProtocol": 3, "maxProtocol": 4, "role": "operator",
            "scopes": ["operator.read", "operator.write"],
            "client": {"id": "test", "version": "bench", "platform": "linux", "mode": "test"},
            "auth": {"token": TOKEN},
        },
    });
    socket.send(Message::text(connect.to_string())).await?;
    loop {
        let frame = next_json(&mut socket).await?;
        if frame["type"] == "res" && frame["id"] == "connect-1" {
            if frame["ok"] != true {
                return Err(format!("connect refused: {frame}").into());
            }
            return Ok(socket);
        }
    }
}

/// Sends a request and reads until its answer; returns the round trip.
async fn call(
    socket: &mut Socket,
    id: &str,
    method: &str,
    params: Value,
) -> Result<Duration, Error> {
    let sent = Instant::now();
    let request = json!({"type": "req", "id": id, "method": method, "params": params});
    socket.send(Message::text(request.to_string())).await?;
    loop {
        let frame = next_json(socket).await?;
        if frame["type"] == "res" && frame["id"] == id {
            if frame["ok"] != true {
                return Err(format!("{method} failed: {frame}").into());
            }
            return Ok(sent.elapsed());
        }
    }
}

/// An idle client: reads (and counts) everything until told to finish, then sends one `health`.
async fn idle_client(
    mut socket: Socket,
    mut finish: watch::Receiver<bool>,
) -> Result<(u64, Duration), Error> {
    let mut frames = 0u64;
    loop {
        tokio::select! {
            frame = socket.next() => match frame {
                Some(Ok(_)) => frames += 1,
                Some(Err(error)) => return Err(error.into()),
                None => return Err("closed by the gateway".into()),
            },
            _ = finish.changed() => break,
        }
    }
    let took = call(&mut socket, "idle-health", "health", json!({})).await?;
    let _ = socket.close(None).await;
    Ok((frames, took))
}

/// One session's turns, one after another; returns each turn's latency.
async fn session(url: String, n: usize, turns: usize) -> Result<Vec<Duration>, Error> {
    let mut socket = handshake(&url).await?;
    let mut latencies = Vec::with_capacity(turns);
    for t in 0..turns {
        let run_id = format!("scale-{n}-{t}");
        let sent = Instant::now();
        let request = json!({"type": "req", "id": format!("req-{run_id}"), "method": "chat.send",
            "params": {"sessionKey": format!("scale-{n}"), "message": "hi", "idempotencyKey": run_id}});
        socket.send(Message::text(request.to_string())).await?;
        loop {
            let frame = next_json(&mut socket).await?;
            if frame["type"] == "res" && frame["ok"] != true {
                return Err(format!("chat.send refused: {frame}").into());
            }
            let payload = &frame["payload"];
            if frame["event"] == "chat" && payload["runId"] == run_id.as_str() {
                match payload["state"].as_str() {
                    Some("final") => break,
                    Some("delta") => continue,
                    _ => return Err(format!("turn failed: {payload}").into()),
                }
            }
        }
        latencies.push(sent.elapsed());
    }
    let _ = socket.close(None).await;
    Ok(latencies)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

fn quantile(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let index = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

async fn connect_idle(url: &str, count: usize) -> Result<Vec<Socket>, Error> {
    let gate = Arc::new(Semaphore::new(CONCURRENT_HANDSHAKES));
    let mut tasks = Vec::with_capacity(count);
    for _ in 0..count {
        let (gate, url) = (gate.clone(), url.to_string());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await?;
            handshake(&url).await
        }));
    }
    let mut sockets = Vec::with_capacity(count);
    for task in tasks {
        sockets.push(task.await??);
    }
    Ok(sockets)
}

async fn run(options: Options) -> Result<(), Error> {
    let fake = FakeOpenAi::start().await;
    let gateway = spawn_gateway(&options, &fake.base_url())?;
    let url = format!("ws://127.0.0.1:{}", gateway.port);
    let pid = gateway.child.id();
    let started = Instant::now();
    let mut probe = loop {
        match handshake(&url).await {
            Ok(socket) => break socket,
            Err(_) if started.elapsed() < START_TIMEOUT => {
                tokio::time::sleep(Duration::from_millis(5)).await
            }
            Err(error) => return Err(format!("gateway not ready: {error}").into()),
        }
    };
    let base = rss_kib(pid);
    let connecting = Instant::now();
    let idle = connect_idle(&url, options.idle).await?;
    println!(
        "connected {} idle clients in {:.1} s; gateway RSS {} (alone with one client: {})",
        idle.len(),
        connecting.elapsed().as_secs_f64(),
        mib(rss_kib(pid)),
        mib(base)
    );
    let (finish_tx, finish_rx) = watch::channel(false);
    let idle_tasks: Vec<_> = idle
        .into_iter()
        .map(|socket| tokio::spawn(idle_client(socket, finish_rx.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_rss = rss_kib(pid);
    let peak = Arc::new(AtomicU64::new(idle_rss));
    let sampling = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let load = Instant::now();
    let sessions: Vec<_> = (0..options.sessions)
        .map(|n| tokio::spawn(session(url.clone(), n, options.turns)))
        .collect();
    let mut health = Vec::new();
    let mut probes = 0u64;
    while sessions.iter().any(|s| !s.is_finished()) {
        probes += 1;
        health.push(call(&mut probe, &format!("probe-{probes}"), "health", json!({})).await?);
        tokio::time::sleep(options.probe).await;
    }
    let load_secs = load.elapsed().as_secs_f64();
    let mut turns = Vec::new();
    let mut failed_sessions = 0;
    for task in sessions {
        match task.await? {
            Ok(latencies) => turns.extend(latencies),
            Err(error) => {
                failed_sessions += 1;
                eprintln!("scale_bench: a session failed: {error}");
            }
        }
    }
    sampling.abort();
    let after_rss = rss_kib(pid);
    finish_tx.send(true)?;
    let (mut answered, mut fewest_frames, mut idle_health) = (0usize, u64::MAX, Vec::new());
    for task in idle_tasks {
        if let Ok(Ok((frames, took))) = task.await {
            answered += 1;
            fewest_frames = fewest_frames.min(frames);
            idle_health.push(took);
        }
    }
    health.sort();
    turns.sort();
    idle_health.sort();
    println!(
        "gateway RSS: {} with {} idle clients, peak {} while {} sessions took turns, {} after",
        mib(idle_rss),
        options.idle,
        mib(peak.load(Ordering::Relaxed)),
        options.sessions,
        mib(after_rss)
    );
    println!(
        "health during the load ({} calls): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        health.len(),
        quantile(&health, 0.5),
        quantile(&health, 0.99),
        quantile(&health, 1.0)
    );
    println!(
        "turns: {} of {} done in {load_secs:.1} s ({:.0} turns/s; {failed_sessions} sessions failed), latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        turns.len(),
        options.sessions * options.turns,
        turns.len() as f64 / load_secs,
        quantile(&turns, 0.5),
        quantile(&turns, 0.99),
        quantile(&turns, 1.0)
    );
    println!(
        "idle clients after the load: {answered} of {} answered health (slowest {:.2} ms); fewest frames received by one: {}",
        options.idle,
        quantile(&idle_health, 1.0),
        if fewest_frames == u64::MAX { 0 } else { fewest_frames }
    );
    Ok(())
}

fn main() {
    let options = match parse_options() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("scale_bench: {error}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    if let Err(error) = runtime.block_on(run(options)) {
        eprintln!("scale_bench: {error}");
        std::process::exit(1);
    }
}
