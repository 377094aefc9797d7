//! The soak, run by `scripts/bench --soak [MINUTES]`: a gateway fed turns without pause through the fake
//! Telegram (long poll) and its web chat (`chat.send`), killed with SIGKILL at random moments and started
//! again on the same data directory, its config rewritten now and then (hot reload), and its disk filled to
//! the brim for a while (a tmpfs of `--disk-mib` when running as root; skipped otherwise, and said so).
//!
//! At the end it waits for the backlog, stops the gateway, runs `pincer doctor` on the data directory, and
//! prints: messages sent, acknowledged (Telegram: confirmed by a later `getUpdates` offset; web chat: `chat.send`
//! answered ok), answered, unanswered-but-acknowledged (must be 0: an acknowledged message is never lost) and
//! duplicates (allowed by the inbox's at-least-once contract only when a kill fell between a send and the
//! record's removal), then RSS, open file descriptors and the media area's entries over time.
//!
//! It reports numbers; the one judgement is the exit code: 1 when an acknowledged message went unanswered,
//! the store check failed, or file descriptors or temp entries kept growing.
//!
//!   cargo run --release --example soak_bench -- --bin target/release/pincer [--minutes 30]
//!       [--kill-min-secs 120] [--kill-max-secs 300] [--disk-mib 192] [--seed N]

#[allow(dead_code)]
#[path = "../tests/support/fake_openai.rs"]
mod fake_openai;
#[allow(dead_code)]
#[path = "../tests/support/fake_telegram.rs"]
mod fake_telegram;
#[path = "support/gateway_child.rs"]
mod gateway_child;
#[allow(dead_code)]
#[path = "../tests/support/ws_client.rs"]
mod ws_client;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_openai::FakeOpenAi;
use fake_telegram::FakeTelegram;
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde_json::{json, Value};
use ws_client::{Device, TestClient};

const TOKEN: &str = "soak-token";
const TELEGRAM_TOKEN: &str = "123456789:AAE-soak_TOKEN_value";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Telegram users the feeder rotates through (one private chat each).
const TELEGRAM_USERS: i64 = 40;
/// Pause between Telegram messages, and between web chat messages.
const TELEGRAM_EVERY: Duration = Duration::from_millis(1500);
const WEBCHAT_EVERY: Duration = Duration::from_millis(3000);
/// How often the config is rewritten, the disk filled, and figures sampled.
const RELOAD_EVERY: Duration = Duration::from_secs(170);
const FILL_EVERY: Duration = Duration::from_secs(230);
const FILL_HOLD: Duration = Duration::from_secs(20);
const SAMPLE_EVERY: Duration = Duration::from_secs(30);
/// How long the backlog may take once feeding stops.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(180);
/// Web chat sessions take this many messages each (`soak-web-0`, `soak-web-1`, …), so that every answer
/// stays within one `chat.history` page.
const WEB_MESSAGES_PER_SESSION: u64 = 100;

fn web_session(n: u64) -> String {
    format!("soak-web-{}", n / WEB_MESSAGES_PER_SESSION)
}

#[derive(Debug, thiserror::Error)]
enum SoakError {
    #[error("usage: soak_bench --bin PATH [--minutes N] [--kill-min-secs N] [--kill-max-secs N] [--disk-mib N] [--seed N]: {0}")]
    Usage(String),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Failed(String),
}

struct Options {
    bin: PathBuf,
    minutes: u64,
    kill_min: u64,
    kill_max: u64,
    disk_mib: u64,
    seed: u64,
}

fn parse_options() -> Result<Options, SoakError> {
    let mut options = Options {
        bin: PathBuf::new(),
        minutes: 30,
        kill_min: 120,
        kill_max: 300,
        disk_mib: 192,
        seed: std::process::id().into(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args
            .next()
            .ok_or_else(|| SoakError::Usage(format!("{flag} needs a value")))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| SoakError::Usage(format!("{flag} {value}: not a number")))
        };
        match flag.as_str() {
            "--bin" => options.bin = PathBuf::from(&value),
            "--minutes" => options.minutes = number()?,
            "--kill-min-secs" => options.kill_min = number()?,
            "--kill-max-secs" => options.kill_max = number()?,
            "--disk-mib" => options.disk_mib = number()?,
            "--seed" => options.seed = number()?,
            other => return Err(SoakError::Usage(format!("unknown flag {other}"))),
        }
    }
    if options.bin.as_os_str().is_empty() || options.kill_min > options.kill_max {
        return Err(SoakError::Usage(
            "--bin is required; kill min <= max".into(),
        ));
    }
    Ok(options)
}

/// The soak's directory: the data directory on a tmpfs of its own when root may mount one.
struct Place {
    root: tempfile::TempDir,
    data: PathBuf,
    mounted: bool,
}

impl Place {
    fn new(disk_mib: u64) -> Result<Place, SoakError> {
        let root = tempfile::tempdir()?;
        let data = root.path().join("data");
        std::fs::create_dir_all(&data)?;
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={disk_mib}m"), "tmpfs"])
            .arg(&data)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        Ok(Place {
            root,
            data,
            mounted,
        })
    }

    fn config_path(&self) -> PathBuf {
        self.root.path().join("pincer.json5")
    }

    fn filler(&self) -> PathBuf {
        self.data.join("soak-filler")
    }

    /// Fills the data disk to the last byte; returns the bytes written.
    fn fill(&self) -> u64 {
        use std::io::Write;
        let Ok(mut file) = std::fs::File::create(self.filler()) else {
            return 0;
        };
        let block = vec![0x5a_u8; 1 << 20];
        let mut written = 0u64;
        loop {
            match file.write(&block) {
                Ok(0) | Err(_) => break,
                Ok(n) => written += n as u64,
            }
        }
        let small = [0x5a_u8; 512];
        while let Ok(n) = file.write(&small) {
            if n == 0 {
                break;
            }
            written += n as u64;
        }
        written
    }

    fn unfill(&self) {
        let _ = std::fs::remove_file(self.filler());
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.data).status();
        }
    }
}

fn write_config(
    place: &Place,
    fake_llm: &str,
    telegram_api: &str,
    timeout_s: u64,
) -> Result<(), SoakError> {
    let workspace = place.root.path().join("workspace");
    std::fs::create_dir_all(&workspace)?;
    let config = json!({
        "agents": { "defaults": { "workspace": workspace, "timeoutSeconds": timeout_s,
            "model": { "primary": "fake/gpt-test" } } },
        "models": { "providers": { "fake": { "baseUrl": fake_llm, "apiKey": "sk-soak",
            "api": "openai-completions", "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
        "messages": { "queue": { "mode": "followup" } },
        "channels": { "telegram": { "botToken": TELEGRAM_TOKEN, "apiRoot": telegram_api,
            "dmPolicy": "open", "allowFrom": ["*"], "streaming": "off" } },
    });
    let path = place.config_path();
    let staged = path.with_extension("json5.new");
    std::fs::write(&staged, config.to_string())?;
    std::fs::rename(&staged, &path)?;
    Ok(())
}

struct Gateway {
    child: Child,
    port: u16,
}

fn spawn_gateway(bin: &Path, place: &Place, log: &Path) -> Result<Gateway, SoakError> {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let mut child = Command::new(bin)
        .arg("gateway")
        .args(["--port", "0", "--token", TOKEN])
        .arg("--config")
        .arg(place.config_path())
        .arg("--data-dir")
        .arg(&place.data)
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_DATA_DIR")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()?;
    match gateway_child::wait_ready(&mut child, READY_TIMEOUT) {
        Some(port) => Ok(Gateway { child, port }),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(SoakError::Failed("the gateway did not become ready".into()))
        }
    }
}

/// One reading of the gateway process.
#[derive(Clone, Copy, Default)]
struct Sample {
    at_s: u64,
    rss_kib: u64,
    fds: usize,
    media_entries: usize,
    disk_used_kib: u64,
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Files and directories under the data directory's media area (downloads and temp dirs).
fn media_entries(data: &Path) -> usize {
    fn walk(dir: &Path) -> usize {
        std::fs::read_dir(dir).map_or(0, |entries| {
            entries
                .flatten()
                .map(|e| {
                    1 + if e.path().is_dir() {
                        walk(&e.path())
                    } else {
                        0
                    }
                })
                .sum()
        })
    }
    walk(&data.join("media"))
}

fn disk_used_kib(dir: &Path) -> u64 {
    Command::new("du")
        .args(["-sk"])
        .arg(dir)
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

fn sample(started: Instant, gateway: &Gateway, place: &Place) -> Sample {
    let pid = gateway.child.id();
    Sample {
        at_s: started.elapsed().as_secs(),
        rss_kib: gateway_child::status_kib(pid, "VmRSS:"),
        fds: fd_count(pid),
        media_entries: media_entries(&place.data),
        disk_used_kib: disk_used_kib(&place.data),
    }
}

/// What the web chat feeder saw.
#[derive(Default)]
struct WebLedger {
    sent: BTreeSet<u64>,
    acked: BTreeSet<u64>,
}

/// Feeds `chat.send` every few seconds over a connection it reopens whenever the gateway goes away; a message
/// whose `res` never came is sent again (same idempotency key) until one does.
async fn web_feeder(
    port: Arc<Mutex<u16>>,
    ledger: Arc<Mutex<WebLedger>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut next = 0u64;
    let mut unacked: Option<u64> = None;
    while !stop.is_cancelled() {
        let url = format!("ws://127.0.0.1:{}", *port.lock().expect("port"));
        let ledger2 = Arc::clone(&ledger);
        let stop2 = stop.clone();
        let start_at = unacked.unwrap_or(next);
        // The test client panics when the socket goes away: the task's end is the connection's end.
        let session = tokio::spawn(async move {
            let (mut client, _) = TestClient::connect(
                &url,
                Some(TOKEN),
                &["operator.admin"],
                Some(&Device::new(7)),
            )
            .await;
            let mut n = start_at;
            loop {
                if stop2.is_cancelled() {
                    return n;
                }
                ledger2.lock().expect("ledger").sent.insert(n);
                let params = json!({"sessionKey": web_session(n), "message": format!("w-{n}"), "idempotencyKey": format!("w-{n}")});
                let res =
                    tokio::time::timeout(Duration::from_secs(30), client.call("chat.send", params))
                        .await;
                match res {
                    Ok(res) if res["ok"] == true => {
                        ledger2.lock().expect("ledger").acked.insert(n);
                        n += 1;
                    }
                    _ => {}
                }
                tokio::time::sleep(WEBCHAT_EVERY).await;
            }
        });
        match session.await {
            Ok(n) => next = n,
            Err(_) => {
                {
                    let ledger = ledger.lock().expect("ledger");
                    let last = ledger.sent.iter().next_back().copied();
                    unacked = last.filter(|n| !ledger.acked.contains(n));
                    next = last.map_or(next, |n| n + 1);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// `echo: <marker>` replies counted per marker (the fake LLM echoes the turn's user message).
fn count_markers<'a>(texts: impl Iterator<Item = &'a str>, prefix: &str) -> BTreeMap<u64, usize> {
    let mut counts = BTreeMap::new();
    for text in texts {
        let mut rest = text;
        while let Some(at) = rest.find(prefix) {
            rest = &rest[at + prefix.len()..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(n) = digits.parse::<u64>() {
                *counts.entry(n).or_insert(0) += 1;
            }
        }
    }
    counts
}

async fn web_answers(port: u16, sent: &BTreeSet<u64>) -> Result<BTreeMap<u64, usize>, SoakError> {
    let url = format!("ws://127.0.0.1:{port}");
    let (mut client, _) = TestClient::connect(
        &url,
        Some(TOKEN),
        &["operator.admin"],
        Some(&Device::new(7)),
    )
    .await;
    let sessions: BTreeSet<String> = sent.iter().map(|n| web_session(*n)).collect();
    let mut counts = BTreeMap::new();
    for session in sessions {
        let history = client
            .call(
                "chat.history",
                json!({"sessionKey": session, "limit": 1000}),
            )
            .await;
        let messages = history["payload"]["messages"]
            .as_array()
            .cloned()
            .ok_or_else(|| SoakError::Failed(format!("chat.history: {history}")))?;
        let texts: Vec<String> = messages
            .iter()
            .filter(|m| m["role"] == "assistant")
            .map(|m| match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|p| p["text"].as_str())
                    .collect::<Vec<_>>()
                    .join(""),
                _ => String::new(),
            })
            .collect();
        for (n, c) in count_markers(texts.iter().map(String::as_str), "echo: w-") {
            *counts.entry(n).or_insert(0) += c;
        }
    }
    Ok(counts)
}

fn kill9(gateway: &mut Gateway) {
    let _ = gateway.child.kill();
    let _ = gateway.child.wait();
}

fn print_line(
    label: &str,
    sent: usize,
    acked: usize,
    answered: usize,
    lost: usize,
    duplicates: usize,
) {
    println!(
        "{label:<10} sent {sent:>6}  acknowledged {acked:>6}  answered {answered:>6}  acknowledged-unanswered {lost:>4}  duplicates {duplicates:>4}"
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), SoakError> {
    let options = parse_options()?;
    // The web chat feeder's connection task ends by panicking when the gateway is killed under it: one line.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("soak: web chat connection lost ({info})")
    }));
    let mut rng = StdRng::seed_from_u64(options.seed);
    let llm = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(TELEGRAM_TOKEN, 42, "pincer_bot").await;
    let place = Place::new(options.disk_mib)?;
    let log = place.root.path().join("gateway.log");
    let mut timeout_s = 120;
    write_config(&place, &llm.base_url(), &telegram.api_root(), timeout_s)?;
    println!(
        "soak: {} min, kills every {}-{} s, seed {}, data dir {} ({})",
        options.minutes,
        options.kill_min,
        options.kill_max,
        options.seed,
        place.data.display(),
        if place.mounted {
            format!(
                "tmpfs of {} MiB, filled every {} s for {} s",
                options.disk_mib,
                FILL_EVERY.as_secs(),
                FILL_HOLD.as_secs()
            )
        } else {
            "not root: no tmpfs, the disk-full phase is skipped".to_string()
        }
    );

    let started = Instant::now();
    let mut gateway = spawn_gateway(&options.bin, &place, &log)?;
    let port = Arc::new(Mutex::new(gateway.port));
    let ledger = Arc::new(Mutex::new(WebLedger::default()));
    let stop = tokio_util::sync::CancellationToken::new();
    let feeder = tokio::spawn(web_feeder(
        Arc::clone(&port),
        Arc::clone(&ledger),
        stop.clone(),
    ));

    let mut telegram_sent: BTreeMap<u64, i64> = BTreeMap::new();
    let mut samples = vec![sample(started, &gateway, &place)];
    let mut restarts: Vec<(u64, Sample)> = Vec::new();
    let (mut reloads, mut fills, mut filled_bytes) = (0, 0, 0u64);
    let end = started + Duration::from_secs(options.minutes * 60);
    let mut next_kill =
        Instant::now() + Duration::from_secs(rng.gen_range(options.kill_min..=options.kill_max));
    let (mut next_reload, mut next_fill, mut next_sample, mut next_message) = (
        Instant::now() + RELOAD_EVERY,
        Instant::now() + FILL_EVERY,
        Instant::now() + SAMPLE_EVERY,
        Instant::now(),
    );
    let mut fill_until: Option<Instant> = None;
    let mut failed_starts: Vec<String> = Vec::new();
    let mut n = 0u64;
    while Instant::now() < end {
        let now = Instant::now();
        if now >= next_message {
            let user = 1000 + (n as i64 % TELEGRAM_USERS);
            let id = telegram.push_message(json!({
                "chat": {"id": user, "type": "private"},
                "from": FakeTelegram::user(user, "Soak", None),
                "text": format!("t-{n}"),
            }));
            telegram_sent.insert(n, id);
            n += 1;
            next_message = now + TELEGRAM_EVERY;
        }
        if now >= next_kill {
            kill9(&mut gateway);
            gateway = match spawn_gateway(&options.bin, &place, &log) {
                Ok(gateway) => gateway,
                Err(first) => {
                    // A start refused on a full disk is counted, and retried once the disk has room again.
                    failed_starts.push(format!("{} s: {first}", started.elapsed().as_secs()));
                    place.unfill();
                    fill_until = None;
                    next_fill = Instant::now() + FILL_EVERY;
                    spawn_gateway(&options.bin, &place, &log)?
                }
            };
            *port.lock().expect("port") = gateway.port;
            tokio::time::sleep(Duration::from_secs(5)).await;
            let after = sample(started, &gateway, &place);
            println!(
                "kill {} at {:>5} s: restarted, RSS {} KiB, {} fds, {} media entries 5 s after",
                restarts.len() + 1,
                after.at_s,
                after.rss_kib,
                after.fds,
                after.media_entries
            );
            restarts.push((after.at_s, after));
            next_kill = Instant::now()
                + Duration::from_secs(rng.gen_range(options.kill_min..=options.kill_max));
        }
        if now >= next_reload {
            timeout_s = if timeout_s == 120 { 150 } else { 120 };
            write_config(&place, &llm.base_url(), &telegram.api_root(), timeout_s)?;
            reloads += 1;
            next_reload = now + RELOAD_EVERY;
        }
        if place.mounted && fill_until.is_none() && now >= next_fill {
            filled_bytes += place.fill();
            fills += 1;
            fill_until = Some(now + FILL_HOLD);
        }
        if fill_until.is_some_and(|t| now >= t) {
            place.unfill();
            fill_until = None;
            next_fill = now + FILL_EVERY;
        }
        if now >= next_sample {
            samples.push(sample(started, &gateway, &place));
            next_sample = now + SAMPLE_EVERY;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    place.unfill();
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(60), feeder).await;

    // The backlog: every acknowledged message answered, or the drain timeout.
    let drain_started = Instant::now();
    let (tg_answers, web) = loop {
        let unconfirmed: BTreeSet<i64> = telegram.unconfirmed_update_ids().into_iter().collect();
        let sends = telegram.calls_of("sendMessage");
        let tg_answers = count_markers(
            sends.iter().filter_map(|c| c.body["text"].as_str()),
            "echo: t-",
        );
        let sent = ledger.lock().expect("ledger").sent.clone();
        let web = web_answers(gateway.port, &sent).await?;
        let tg_waiting = telegram_sent
            .iter()
            .filter(|(n, id)| !unconfirmed.contains(id) && !tg_answers.contains_key(n))
            .count();
        let web_waiting = {
            let ledger = ledger.lock().expect("ledger");
            ledger.acked.iter().filter(|n| !web.contains_key(n)).count()
        };
        if (tg_waiting == 0 && web_waiting == 0 && unconfirmed.is_empty())
            || drain_started.elapsed() > DRAIN_TIMEOUT
        {
            break (tg_answers, web);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let idle = {
        tokio::time::sleep(Duration::from_secs(5)).await;
        sample(started, &gateway, &place)
    };
    // A graceful stop, then the store check on what it left.
    sigterm(&gateway);
    let _ = gateway.child.wait();
    let doctor = Command::new(&options.bin)
        .arg("doctor")
        .arg("--config")
        .arg(place.config_path())
        .arg("--data-dir")
        .arg(&place.data)
        .output()?;
    let doctor_text = String::from_utf8_lossy(&doctor.stdout).to_string();

    let unconfirmed: BTreeSet<i64> = telegram.unconfirmed_update_ids().into_iter().collect();
    let tg_acked: Vec<u64> = telegram_sent
        .iter()
        .filter(|(_, id)| !unconfirmed.contains(id))
        .map(|(n, _)| *n)
        .collect();
    let tg_lost = tg_acked
        .iter()
        .filter(|n| !tg_answers.contains_key(n))
        .count();
    let tg_dups: usize = tg_answers.values().map(|c| c.saturating_sub(1)).sum();
    let ledger = ledger.lock().expect("ledger");
    let web_lost = ledger.acked.iter().filter(|n| !web.contains_key(n)).count();
    let web_dups: usize = web.values().map(|c| c.saturating_sub(1)).sum();

    println!();
    println!(
        "soak: {} s, {} kills, {} config reloads, {} disk fills ({} MiB written to fill)",
        started.elapsed().as_secs(),
        restarts.len(),
        reloads,
        fills,
        filled_bytes >> 20
    );
    print_line(
        "telegram",
        telegram_sent.len(),
        tg_acked.len(),
        tg_answers.len(),
        tg_lost,
        tg_dups,
    );
    print_line(
        "web chat",
        ledger.sent.len(),
        ledger.acked.len(),
        web.len(),
        web_lost,
        web_dups,
    );
    let reload_lines =
        std::fs::read_to_string(&log).map_or(0, |l| l.matches("config reloaded").count());
    println!(
        "gateway log: {reload_lines} 'config reloaded' lines, {} 'panicked' lines",
        std::fs::read_to_string(&log).map_or(0, |l| l.matches("panicked").count())
    );
    println!(
        "\n{:>7} {:>10} {:>5} {:>7} {:>10}",
        "at s", "RSS KiB", "fds", "media", "disk KiB"
    );
    for s in &samples {
        println!(
            "{:>7} {:>10} {:>5} {:>7} {:>10}",
            s.at_s, s.rss_kib, s.fds, s.media_entries, s.disk_used_kib
        );
    }
    println!("after restarts (5 s in):");
    for (at, s) in &restarts {
        println!(
            "{:>7} {:>10} {:>5} {:>7} {:>10}",
            at, s.rss_kib, s.fds, s.media_entries, s.disk_used_kib
        );
    }
    println!(
        "idle at the end: RSS {} KiB, {} fds, {} media entries",
        idle.rss_kib, idle.fds, idle.media_entries
    );
    println!(
        "\npincer doctor (exit {}):\n{}",
        doctor.status.code().unwrap_or(-1),
        doctor_text.trim_end()
    );

    let first = samples.first().copied().unwrap_or_default();
    let mut failures = Vec::new();
    if tg_lost + web_lost > 0 {
        failures.push(format!(
            "{} acknowledged messages unanswered",
            tg_lost + web_lost
        ));
    }
    if !doctor.status.success() || !doctor_text.contains("store: write/read ok") {
        failures.push("the store check failed".to_string());
    }
    if idle.fds > first.fds + 8 {
        failures.push(format!(
            "file descriptors grew from {} to {}",
            first.fds, idle.fds
        ));
    }
    if idle.media_entries > first.media_entries + 2 {
        failures.push(format!(
            "media entries grew from {} to {}",
            first.media_entries, idle.media_entries
        ));
    }
    if !failures.is_empty() {
        let missing: Vec<String> = ledger
            .acked
            .iter()
            .filter(|n| !web.contains_key(n))
            .map(|n| format!("w-{n}"))
            .chain(
                tg_acked
                    .iter()
                    .filter(|n| !tg_answers.contains_key(n))
                    .map(|n| format!("t-{n}")),
            )
            .collect();
        println!("unanswered: {}", missing.join(" "));
        let kept = std::env::temp_dir().join(format!("soak-gateway-{}.log", std::process::id()));
        if std::fs::copy(&log, &kept).is_ok() {
            println!("the gateway's log is kept at {}", kept.display());
        }
    }
    if failures.is_empty() {
        println!("\nsoak: ok");
        Ok(())
    } else {
        Err(SoakError::Failed(failures.join("; ")))
    }
}

fn sigterm(gateway: &Gateway) {
    let _ = Command::new("kill")
        .args(["-TERM", &gateway.child.id().to_string()])
        .status();
}
