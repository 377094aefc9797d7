//! The gateway's resident memory as issue 22 defines it, run by `scripts/bench --rss`:
//! - idle: a release `pincer gateway` with the Telegram channel long-polling its test fake
//!   (`tests/support/fake_telegram.rs`) and one `openclaw-node` 0.14.0 client connected
//!   (`tests/clients/hold_client.mjs`), read `--idle-secs` after the process started: `VmRSS`, split into
//!   `RssFile` (file-backed: the binary's and libraries' pages), `RssAnon` and `RssShmem`;
//! - back to idle after memory work: `--notes` notes are then written to the (so far empty) workspace,
//!   the gateway's memory watcher indexes them (real ONNX embeddings), the client calls `memory.search`,
//!   the RSS of the gateway and of its embedding worker is read, then, once the embedder's idle period
//!   (`PINCER_EMBED_IDLE_UNLOAD_MS`, `--unload-ms`) has passed and the worker has exited, the gateway's RSS
//!   again.
//!
//! It reports numbers only; `scripts/bench` prints the goals beside them.
//!
//!   cargo run --release --example rss_bench -- --bin target/release/pincer --node node
//!       --clients-dir tests/clients [--idle-secs 10] [--unload-ms 3000] [--notes 200] [--no-memory]

#[allow(dead_code)]
#[path = "../tests/support/fake_telegram.rs"]
mod fake_telegram;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const TOKEN: &str = "rss-bench-token-0123456789abcdef";
const TELEGRAM_TOKEN: &str = "123456789:AAE-bench_TOKEN_value";
const READY_PREFIX: &str = "pincer: listening on ";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const POLL_INTERVAL: Duration = Duration::from_millis(20);

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("usage: rss_bench --bin PATH --node NODE --clients-dir DIR [--idle-secs N] [--unload-ms N] [--notes N] [--no-memory]: {0}")]
    Usage(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Failed(String),
}

struct Options {
    bin: PathBuf,
    node: PathBuf,
    clients_dir: PathBuf,
    idle: Duration,
    unload: Duration,
    notes: usize,
    memory: bool,
}

fn parse_options() -> Result<Options, BenchError> {
    let (mut bin, mut node, mut clients_dir) = (None, None, None);
    let mut options = Options {
        bin: PathBuf::new(),
        node: PathBuf::new(),
        clients_dir: PathBuf::new(),
        idle: Duration::from_secs(10),
        unload: Duration::from_secs(3),
        notes: 200,
        memory: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--no-memory" {
            options.memory = false;
            continue;
        }
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
            "--node" => node = Some(PathBuf::from(&value)),
            "--clients-dir" => clients_dir = Some(PathBuf::from(&value)),
            "--idle-secs" => options.idle = Duration::from_secs(number()?),
            "--unload-ms" => options.unload = Duration::from_millis(number()?),
            "--notes" => options.notes = number()? as usize,
            other => return Err(BenchError::Usage(format!("unknown flag {other}"))),
        }
    }
    let missing = |what: &str| BenchError::Usage(format!("{what} is required"));
    options.bin = bin.ok_or_else(|| missing("--bin"))?;
    options.node = node.ok_or_else(|| missing("--node"))?;
    options.clients_dir = clients_dir
        .ok_or_else(|| missing("--clients-dir"))?
        .canonicalize()?;
    Ok(options)
}

/// `VmRSS`, `RssAnon`, `RssFile`, `RssShmem` of a process, in KiB.
#[derive(Clone, Copy, Debug, Default)]
struct Rss {
    total: u64,
    anon: u64,
    file: u64,
    shmem: u64,
}

fn rss(pid: u32) -> Option<Rss> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
    };
    Some(Rss {
        total: field("VmRSS:")?,
        anon: field("RssAnon:")?,
        file: field("RssFile:")?,
        shmem: field("RssShmem:")?,
    })
}

fn mib(kib: u64) -> String {
    format!("{:.2} MiB", kib as f64 / 1024.0)
}

/// The children of `pid` (the embedding worker, sandboxed commands), whichever of its threads started
/// them.
fn children(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    tasks
        .flatten()
        .flat_map(|task| {
            std::fs::read_to_string(task.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// A gateway process with its data dir and workspace; killed on drop.
struct Gateway {
    child: Child,
    port: u16,
    started: Instant,
    dir: tempfile::TempDir,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Notes about a few topics, so a search has something to find.
fn write_notes(workspace: &Path, count: usize) -> Result<(), BenchError> {
    let topics = [
        "garden", "invoice", "dentist", "bicycle", "passport", "recipe", "concert",
    ];
    std::fs::create_dir_all(workspace.join("memory"))?;
    std::fs::write(
        workspace.join("MEMORY.md"),
        "# Memory\n\nThe user likes tea.\n",
    )?;
    for i in 0..count {
        let topic = topics[i % topics.len()];
        let text = format!(
            "# Note {i}\n\nOn day {i} the {topic} came up again: remember to check the {topic} before the weekend.\n"
        );
        std::fs::write(workspace.join(format!("memory/note-{i:04}.md")), text)?;
    }
    Ok(())
}

fn spawn_gateway(options: &Options, telegram_api: &str) -> Result<Gateway, BenchError> {
    let dir = tempfile::tempdir()?;
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace)?;
    let config = json!({
        "agents": { "defaults": { "workspace": workspace, "model": { "primary": "fake/gpt-test" } } },
        "models": { "providers": { "fake": { "baseUrl": "http://127.0.0.1:9/v1",
            "apiKey": "sk-bench", "api": "openai-completions",
            "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
        "channels": { "telegram": { "botToken": TELEGRAM_TOKEN, "apiRoot": telegram_api } },
    });
    let config_path = dir.path().join("pincer.json5");
    std::fs::write(&config_path, config.to_string())?;
    let started = Instant::now();
    let mut child = Command::new(&options.bin)
        .arg("gateway")
        .args(["--port", "0", "--token", TOKEN])
        .arg("--config")
        .arg(&config_path)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_DATA_DIR")
        .env(
            "PINCER_EMBED_IDLE_UNLOAD_MS",
            options.unload.as_millis().to_string(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| BenchError::Failed("no stdout".into()))?;
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
    let port = ready_rx
        .recv_timeout(READY_TIMEOUT)
        .ok()
        .flatten()
        .ok_or_else(|| BenchError::Failed("the gateway did not become ready".into()))?;
    Ok(Gateway {
        child,
        port,
        started,
        dir,
    })
}

/// The held openclaw-node client.
struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Client {
    fn start(options: &Options, gateway: &Gateway) -> Result<Client, BenchError> {
        let mut child = Command::new(&options.node)
            .arg(options.clients_dir.join("hold_client.mjs"))
            .args(["--url", &format!("ws://127.0.0.1:{}", gateway.port)])
            .args(["--token", TOKEN])
            .arg("--identity")
            .arg(gateway.dir.path().join("identity.json"))
            .current_dir(&options.clients_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            return Err(BenchError::Failed("client pipes".into()));
        };
        let mut client = Client {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        };
        let hello = client.line()?;
        if hello["connected"] != true {
            return Err(BenchError::Failed(format!(
                "client did not connect: {hello}"
            )));
        }
        Ok(client)
    }

    fn line(&mut self) -> Result<Value, BenchError> {
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        serde_json::from_str(&line)
            .map_err(|e| BenchError::Failed(format!("client said {line:?}: {e}")))
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, BenchError> {
        writeln!(
            self.stdin,
            "{}",
            json!({ "method": method, "params": params })
        )?;
        let answer = self.line()?;
        match answer["ok"] == true {
            true => Ok(answer["payload"].clone()),
            false => Err(BenchError::Failed(format!("{method}: {}", answer["error"]))),
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_until(
    what: &str,
    timeout: Duration,
    mut done: impl FnMut() -> bool,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() > deadline {
            return Err(BenchError::Failed(format!("{what} not within {timeout:?}")));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    Ok(())
}

fn print_rss(label: &str, rss: Rss) {
    println!(
        "{label:<44} {:>10}  (file-backed {}, anonymous {}, shared memory {})",
        mib(rss.total),
        mib(rss.file),
        mib(rss.anon),
        mib(rss.shmem)
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BenchError> {
    let options = parse_options()?;
    let telegram = fake_telegram::FakeTelegram::start(TELEGRAM_TOKEN, 4242, "BenchBot").await;
    let api = telegram.api_root();
    let run = tokio::task::spawn_blocking(move || -> Result<(), BenchError> {
        let gateway = spawn_gateway(&options, &api)?;
        let mut client = Client::start(&options, &gateway)?;
        let pid = gateway.child.id();
        let parked = || {
            telegram
                .calls_of("getUpdates")
                .iter()
                .any(|c| c.body["timeout"].as_u64().unwrap_or(0) > 0)
        };
        wait_until("a parked getUpdates", READY_TIMEOUT, parked)?;
        std::thread::sleep(options.idle.saturating_sub(gateway.started.elapsed()));
        let idle = rss(pid).ok_or_else(|| BenchError::Failed("no /proc status".into()))?;
        let label = format!("idle, {} s after start", options.idle.as_secs());
        print_rss(&label, idle);
        if !options.memory {
            return Ok(());
        }
        write_notes(&gateway.dir.path().join("workspace"), options.notes)?;
        let mut indexed = || -> Result<u64, BenchError> {
            let status = client.call("memory.status", json!({}))?;
            Ok(status["chunks"].as_u64().unwrap_or(0))
        };
        let deadline = Instant::now() + Duration::from_secs(600);
        while indexed()? < options.notes as u64 {
            if Instant::now() > deadline {
                return Err(BenchError::Failed("the notes were not indexed".into()));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let found = client.call(
            "memory.search",
            json!({ "query": "when is the dentist appointment", "maxResults": 3 }),
        )?;
        let during = rss(pid).unwrap_or_default();
        let worker: u64 = children(pid)
            .into_iter()
            .filter_map(rss)
            .map(|r| r.total)
            .sum();
        print_rss("after memory.search (gateway)", during);
        println!(
            "{:<44} {:>10}  (results: {})",
            "after memory.search (embedding worker)",
            mib(worker),
            found["results"].as_array().map_or(0, Vec::len)
        );
        wait_until("the worker's exit", Duration::from_secs(120), || {
            children(pid).is_empty()
        })?;
        // The gateway's reaper drops the tokenizer in the same pass; one more tick for the heap.
        std::thread::sleep(options.unload / 2);
        let after = rss(pid).unwrap_or_default();
        print_rss("after the idle unload", after);
        println!(
            "{:<44} {:>+10.2} MiB",
            "after the idle unload less idle",
            (after.total as f64 - idle.total as f64) / 1024.0
        );
        Ok(())
    });
    run.await.map_err(|e| BenchError::Failed(e.to_string()))?
}
