//! Memory of pincer while an update runs through it, run by `scripts/bench --update` (as root).
//!
//! It starts a real RAUC 1.8 on a private bus (`tests/support/rauc.rs`: slots are files, a
//! throwaway CA signs a plain bundle with an `--image-mib` rootfs image), then:
//! - the gateway: `pincer gateway` with that bus, idle for `--idle-secs`, its `VmRSS` read; then
//!   `update.apply` over the WebSocket protocol while a thread samples `VmRSS` every 5 ms; the
//!   peak and the peak less idle are printed, with the install time and the progress events;
//! - the CLI: `pincer update apply` of a second bundle, its `VmRSS` sampled the same way.
//!
//! It reports numbers only; the goal (≤ 16 MiB above idle, issue 19) is printed beside them.
//!
//!   cargo run --release --example update_bench -- --bin target/release/pincer
//!       [--image-mib 64] [--idle-secs 5]

#[allow(dead_code)]
#[path = "../tests/support/rauc.rs"]
mod rauc;
#[path = "../tests/support/skip.rs"]
mod skip;
#[allow(dead_code)]
#[path = "../tests/support/ws_client.rs"]
mod ws_client;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rauc::{BundleSpec, RaucSystem};
use serde_json::json;
use ws_client::{Read, TestClient};

const TOKEN: &str = "update-bench-token";
const READY_PREFIX: &str = "pincer: listening on ";
const SAMPLE_INTERVAL: Duration = Duration::from_millis(5);

struct Options {
    bin: PathBuf,
    image_mib: usize,
    idle: Duration,
}

fn parse_options() -> Result<Options, String> {
    let mut args = std::env::args().skip(1);
    let mut options = Options {
        bin: PathBuf::new(),
        image_mib: 64,
        idle: Duration::from_secs(5),
    };
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--bin" => options.bin = PathBuf::from(value()?),
            "--image-mib" => {
                options.image_mib = value()?.parse().map_err(|e| format!("--image-mib: {e}"))?
            }
            "--idle-secs" => {
                options.idle =
                    Duration::from_secs(value()?.parse().map_err(|e| format!("--idle-secs: {e}"))?)
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if options.bin.as_os_str().is_empty() {
        return Err("usage: update_bench --bin PATH [--image-mib N] [--idle-secs N]".into());
    }
    Ok(options)
}

/// `VmRSS` of a process, in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let options = match parse_options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let Some(mut system) = RaucSystem::start("update_bench") else {
        eprintln!("update_bench: RAUC cannot run here (see the SKIPPED line)");
        std::process::exit(2);
    };
    let spec = BundleSpec {
        image_bytes: options.image_mib * 1024 * 1024,
        ..BundleSpec::good()
    };
    let bundle = system.bundle(&spec);
    let second = system.bundle(&spec);
    let bundle_bytes = std::fs::metadata(&bundle.path)
        .map(|m| m.len())
        .unwrap_or(0);
    // Slots big enough for the image.
    for slot in [0, 1] {
        let file = std::fs::File::options()
            .write(true)
            .open(system.slot_file(slot))
            .expect("slot");
        file.set_len((spec.image_bytes + rauc::SLOT_BYTES) as u64)
            .expect("grow slot");
    }
    println!(
        "update bench: plain bundle of {} ({} MiB rootfs image), RAUC 1.8 on a private bus",
        mib(bundle_bytes / 1024),
        options.image_mib
    );

    // The gateway.
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("pincer.json5");
    std::fs::write(&config, "{}").expect("config");
    let mut child = Command::new(&options.bin)
        .args(["gateway", "--port", "0", "--token", TOKEN, "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .envs(system.env())
        .env_remove("PINCER_DATA_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn gateway");
    let pid = child.id();
    let stdout = child.stdout.take().expect("stdout");
    let mut port = None;
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        if let Some(rest) = line.strip_prefix(READY_PREFIX) {
            port = rest
                .rsplit(':')
                .next()
                .and_then(|p| p.trim().parse::<u16>().ok());
            break;
        }
    }
    let port = port.expect("gateway ready line");
    let url = format!("ws://127.0.0.1:{port}");
    let (mut client, _) = TestClient::connect(&url, Some(TOKEN), &["operator.admin"], None).await;
    let status = client.call("update.status", json!({})).await;
    assert_eq!(status["payload"]["rauc"]["available"], true, "{status}");
    tokio::time::sleep(options.idle).await;
    let idle = rss_kib(pid).expect("rss");

    let peak = Arc::new(AtomicU64::new(idle));
    let running = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, running) = (Arc::clone(&peak), Arc::clone(&running));
        std::thread::spawn(move || {
            while running.load(Ordering::Relaxed) {
                if let Some(now) = rss_kib(pid) {
                    peak.fetch_max(now, Ordering::Relaxed);
                }
                std::thread::sleep(SAMPLE_INTERVAL);
            }
        })
    };
    let started = Instant::now();
    let id = client
        .request("update.apply", json!({"bundle": bundle.path}))
        .await;
    let mut events = 0;
    let res = loop {
        match client.read().await {
            Read::Frame(frame)
                if frame["type"] == "event" && frame["event"] == "pincer.update.progress" =>
            {
                events += 1
            }
            Read::Frame(frame) if frame["type"] == "res" && frame["id"] == id => break frame,
            Read::Frame(_) => {}
            Read::Closed { code, reason } => panic!("closed {code} {reason}"),
        }
    };
    let took = started.elapsed();
    running.store(false, Ordering::Relaxed);
    let _ = sampler.join();
    assert_eq!(res["ok"], true, "{res}");
    let peak = peak.load(Ordering::Relaxed);
    let after = rss_kib(pid).unwrap_or(0);
    println!("gateway (update.apply over the WebSocket protocol):");
    println!(
        "  idle VmRSS after {} s: {}",
        options.idle.as_secs(),
        mib(idle)
    );
    println!(
        "  peak VmRSS during the update: {} ({} KiB above idle; goal <= 16 MiB above idle), after: {}",
        mib(peak),
        peak.saturating_sub(idle),
        mib(after)
    );
    println!(
        "  install took {:.2} s, {events} progress events",
        took.as_secs_f64()
    );
    let _ = child.kill();
    let _ = child.wait();

    // The CLI, on the other slot's next install.
    system.reboot_into("B");
    let started = Instant::now();
    let mut cli = Command::new(&options.bin)
        .args(["update", "apply"])
        .arg(&second.path)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .envs(system.env())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn CLI");
    let cli_pid = cli.id();
    let mut cli_peak = 0;
    let status = loop {
        if let Some(now) = rss_kib(cli_pid) {
            cli_peak = cli_peak.max(now);
        }
        if let Some(status) = cli.try_wait().expect("wait") {
            break status;
        }
        std::thread::sleep(SAMPLE_INTERVAL);
    };
    assert!(status.success(), "pincer update apply failed");
    println!("CLI (pincer update apply, a process of its own; rauc info runs as its child, not counted):");
    println!(
        "  peak VmRSS sampled every 5 ms: {}, install took {:.2} s",
        mib(cli_peak),
        started.elapsed().as_secs_f64()
    );
}
