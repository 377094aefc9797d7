//! Channel adapters' memory cost, run by `scripts/bench --channels`.
//!
//! It starts the test fakes of Telegram (Bot API long poll), Discord
//! (gateway WebSocket + REST) and Slack (Socket Mode + Web API) on
//! 127.0.0.1, then for each scenario spawns `pincer gateway` with a fresh
//! data dir and a config naming only that channel (the baseline names
//! none), waits until the channel is connected to its fake (a parked
//! `getUpdates`, an IDENTIFY, a Socket Mode connection), lets it idle for
//! `--idle-secs`, and reads `VmRSS` and `RssAnon` (KiB) from
//! `/proc/<pid>/status`. Each figure is the median over `--runs` processes.
//!
//! It reports numbers only; it must not judge them (no thresholds here).
//!
//!   cargo run --example channel_bench -- --bin target/debug/pincer
//!       [--idle-secs 5] [--runs 3]

#[path = "../tests/support/fake_discord.rs"]
mod fake_discord;
#[path = "../tests/support/fake_slack.rs"]
mod fake_slack;
#[allow(dead_code)]
#[path = "../tests/support/fake_telegram.rs"]
mod fake_telegram;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

/// A gateway (or its channel) not ready by then counts as a failure.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between checks while waiting for a connection.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// The gateway's ready line prefix.
const READY_PREFIX: &str = "pincer: listening on ";
const TELEGRAM_TOKEN: &str = "123456789:AAE-bench_TOKEN_value";
/// HELLO's heartbeat interval given by the fake Discord.
const DISCORD_HEARTBEAT_MS: u64 = 41_250;

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("usage: channel_bench --bin PATH [--idle-secs N] [--runs N]: {0}")]
    Usage(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0} not ready within {READY_TIMEOUT:?}")]
    NotReady(String),
    #[error("cannot read /proc/{0}/status")]
    NoStatus(u32),
}

struct Options {
    bin: PathBuf,
    idle: Duration,
    runs: usize,
}

fn parse_options() -> Result<Options, BenchError> {
    let mut bin = None;
    let (mut idle_secs, mut runs) = (5_u64, 3_usize);
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
            "--idle-secs" => idle_secs = number()?,
            "--runs" => runs = number()?.max(1) as usize,
            other => return Err(BenchError::Usage(format!("unknown flag {other}"))),
        }
    }
    Ok(Options {
        bin: bin.ok_or_else(|| BenchError::Usage("--bin is required".into()))?,
        idle: Duration::from_secs(idle_secs),
        runs,
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Scenario {
    NoChannels,
    Telegram,
    Discord,
    Slack,
}

impl Scenario {
    const ALL: [Scenario; 4] = [
        Scenario::NoChannels,
        Scenario::Telegram,
        Scenario::Discord,
        Scenario::Slack,
    ];

    fn label(self) -> &'static str {
        match self {
            Scenario::NoChannels => "0 channels",
            Scenario::Telegram => "telegram",
            Scenario::Discord => "discord",
            Scenario::Slack => "slack",
        }
    }
}

/// The fakes of one run; each run gets fresh ones so "connected" is its own.
struct Fakes {
    telegram: fake_telegram::FakeTelegram,
    discord: fake_discord::FakeDiscord,
    slack: fake_slack::FakeSlack,
}

impl Fakes {
    async fn start() -> Fakes {
        Fakes {
            telegram: fake_telegram::FakeTelegram::start(TELEGRAM_TOKEN, 4242, "BenchBot").await,
            discord: fake_discord::FakeDiscord::start(DISCORD_HEARTBEAT_MS).await,
            slack: fake_slack::FakeSlack::start().await,
        }
    }

    fn channels(&self, scenario: Scenario) -> Value {
        match scenario {
            Scenario::NoChannels => json!({}),
            Scenario::Telegram => json!({ "telegram": {
                "botToken": TELEGRAM_TOKEN, "apiRoot": self.telegram.api_root() } }),
            Scenario::Discord => json!({ "discord": {
                "token": fake_discord::TOKEN, "apiBaseUrl": self.discord.api_base_url() } }),
            Scenario::Slack => json!({ "slack": {
                "botToken": fake_slack::BOT_TOKEN, "appToken": fake_slack::APP_TOKEN,
                "apiUrl": self.slack.api_url() } }),
        }
    }

    fn connected(&self, scenario: Scenario) -> bool {
        match scenario {
            Scenario::NoChannels => true,
            Scenario::Telegram => self.telegram.unconfirmed_updates() == 0 && self.parked(),
            Scenario::Discord => !self.discord.client_frames(2).is_empty(),
            Scenario::Slack => !self.slack.connections().is_empty(),
        }
    }

    fn parked(&self) -> bool {
        self.telegram
            .calls_of("getUpdates")
            .iter()
            .any(|c| c.body["timeout"].as_u64().unwrap_or(0) > 0)
    }
}

/// A gateway process with its own data dir; killed on drop.
struct Gateway {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_gateway(bin: &Path, channels: Value) -> Result<Gateway, BenchError> {
    let dir = tempfile::tempdir()?;
    let config = json!({
        "agents": { "defaults": { "model": { "primary": "fake/gpt-test" } } },
        "models": { "providers": { "fake": { "baseUrl": "http://127.0.0.1:9/v1",
            "apiKey": "sk-bench", "api": "openai-completions",
            "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
        "channels": channels,
    });
    let config_path = dir.path().join("pincer.json5");
    std::fs::write(&config_path, config.to_string())?;
    let mut child = Command::new(bin)
        .arg("gateway")
        .args(["--port", "0", "--token", "channel-bench-token"])
        .arg("--config")
        .arg(&config_path)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or(BenchError::NoStatus(child.id()))?;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line.starts_with(READY_PREFIX) {
                let _ = ready_tx.send(());
            }
        }
    });
    let gateway = Gateway { child, _dir: dir };
    ready_rx
        .recv_timeout(READY_TIMEOUT)
        .map_err(|_| BenchError::NotReady("gateway".into()))?;
    Ok(gateway)
}

/// `(VmRSS, RssAnon)` in KiB.
fn rss_kib(pid: u32) -> Result<(u64, u64), BenchError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
    };
    match (field("VmRSS:"), field("RssAnon:")) {
        (Some(rss), Some(anon)) => Ok((rss, anon)),
        _ => Err(BenchError::NoStatus(pid)),
    }
}

async fn measure(options: &Options, scenario: Scenario) -> Result<(u64, u64), BenchError> {
    let fakes = Fakes::start().await;
    let bin = options.bin.clone();
    let channels = fakes.channels(scenario);
    let gateway = tokio::task::spawn_blocking(move || spawn_gateway(&bin, channels))
        .await
        .map_err(|e| BenchError::Io(std::io::Error::other(e)))??;
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    while !fakes.connected(scenario) {
        if tokio::time::Instant::now() >= deadline {
            return Err(BenchError::NotReady(scenario.label().into()));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    tokio::time::sleep(options.idle).await;
    rss_kib(gateway.child.id())
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BenchError> {
    let options = parse_options()?;
    println!(
        "channel RSS of {}, gateway idle {:?} after connecting, median of {} (KiB)",
        options.bin.display(),
        options.idle,
        options.runs
    );
    println!(
        "{:<12} {:>10} {:>10} {:>12} {:>12}",
        "scenario", "VmRSS", "RssAnon", "ΔVmRSS", "ΔRssAnon"
    );
    let mut baseline = None;
    for scenario in Scenario::ALL {
        let (mut rss, mut anon) = (Vec::new(), Vec::new());
        for _ in 0..options.runs {
            let (r, a) = measure(&options, scenario).await?;
            rss.push(r);
            anon.push(a);
        }
        let (rss, anon) = (median(rss), median(anon));
        let (base_rss, base_anon) = *baseline.get_or_insert((rss, anon));
        println!(
            "{:<12} {:>10} {:>10} {:>+12} {:>+12}",
            scenario.label(),
            rss,
            anon,
            rss as i64 - base_rss as i64,
            anon as i64 - base_anon as i64
        );
    }
    Ok(())
}
