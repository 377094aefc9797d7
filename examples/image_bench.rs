//! Boot figures of the appliance image (`scripts/bench --image` runs this after building
//! it): the image booted on QEMU `-M virt` (through U-Boot, as on the Pi) with 512 MiB of RAM, as a user's card would be
//! (a config and an SSH key on its FAT partition), then, read over SSH:
//! - boot to `READY=1`: QEMU started → systemd reports `pincer.service` started (a
//!   `Type=notify` unit is "Started" only after READY=1), and → `/readyz` answers;
//! - memory used by the whole system after boot (`free`: total − available), and the
//!   gateway's own VmRSS, after the box has settled;
//! - bytes written to the disk while idle (`/sys/block/vda/stat`, sectors written), over
//!   `--idle-minutes` (default 10) and scaled to an hour.
//!
//! Run: `cargo run --release --example image_bench -- --image target/image/pincer-…-arm64.img
//! [--idle-minutes N] [--settle-secs S]`.
//!
//! It prints figures; it asserts nothing (that is tests/image_boot.rs's job).

#[path = "../tests/image_support/mod.rs"]
mod image_support;

use std::process::Command;
use std::time::{Duration, Instant};

use image_support::{free_port, http_status, qemu_virt, run, Card, Ssh};

const TOKEN: &str = "image-bench-token-0123456789abcdef";
const MEMORY_MIB: u32 = 512;
const MEMORY_GOAL_MIB: f64 = 64.0;
const WRITES_GOAL_BYTES_PER_HOUR: f64 = 1024.0 * 1024.0;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn main() {
    if let Some(image) = arg("--image") {
        std::env::set_var("PINCER_IMAGE", image);
    }
    let idle_minutes: u64 =
        arg("--idle-minutes").map_or(10, |v| v.parse().expect("--idle-minutes N"));
    let settle_secs: u64 =
        arg("--settle-secs").map_or(120, |v| v.parse().expect("--settle-secs S"));

    let card = Card::new();
    let key = card.dir.path().join("id_ed25519");
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "image-bench", "-f"])
        .arg(&key));
    let config = format!(
        r#"{{
  gateway: {{ auth: {{ token: "{TOKEN}" }} }},
  models: {{ providers: {{ lan: {{ baseUrl: "http://10.0.2.2:9/v1", apiKey: "sk-none",
    api: "openai-completions", models: [{{ id: "m", contextWindow: 32000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "lan/m" }} }} }},
}}"#
    );
    card.put("pincer.json5", config.as_bytes());
    card.put("ssh", b"");
    card.put(
        "authorized_keys",
        &std::fs::read(key.with_extension("pub")).expect("public key"),
    );
    let (gateway_port, ssh_port) = (free_port(), free_port());

    let started = Instant::now();
    let mut qemu = qemu_virt(&card, gateway_port, ssh_port, MEMORY_MIB, false);
    let boot_timeout = Duration::from_secs(900);
    qemu.wait_for("pincer.service started", boot_timeout, |q| {
        q.console().contains("Started pincer.service")
    });
    let ready = started.elapsed();
    qemu.wait_for("/readyz", boot_timeout, |_| {
        http_status(gateway_port, "/readyz") == Some(200)
    });
    let readyz = started.elapsed();
    let ssh = Ssh {
        port: ssh_port,
        key,
    };
    qemu.wait_for("SSH", Duration::from_secs(120), |_| {
        ssh.try_run("true").status.success()
    });
    println!("image boot (QEMU -M virt, Cortex-A53 x2 under TCG emulation, {MEMORY_MIB} MiB):");
    println!(
        "  boot to READY=1 (pincer.service started): {:.1} s",
        ready.as_secs_f64()
    );
    println!(
        "  boot to /readyz on the forwarded port:     {:.1} s",
        readyz.as_secs_f64()
    );

    std::thread::sleep(Duration::from_secs(settle_secs));
    let meminfo = ssh.run("cat /proc/meminfo");
    let field = |name: &str| -> f64 {
        meminfo
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} missing from /proc/meminfo"))
            / 1024.0
    };
    let (total, available, free, cached) = (
        field("MemTotal:"),
        field("MemAvailable:"),
        field("MemFree:"),
        field("Cached:"),
    );
    let used = total - available;
    let rss_kib: f64 = ssh
        .run("grep VmRSS /proc/$(systemctl show pincer -p MainPID --value)/status | awk '{print $2}'")
        .parse()
        .expect("VmRSS");
    println!("memory after boot ({settle_secs} s settled; free's 'used' = total - available):");
    println!(
        "  used {used:.1} MiB of {total:.1} MiB (goal <= {MEMORY_GOAL_MIB} MiB: {}); free {free:.1}, page cache {cached:.1}",
        if used <= MEMORY_GOAL_MIB { "met" } else { "not met" }
    );
    println!("  pincer VmRSS {:.1} MiB", rss_kib / 1024.0);
    println!(
        "  processes by RSS: {}",
        ssh.run("ps -eo rss=,comm= --sort=-rss | head -8 | awk '{printf \"%s %.1f MiB; \", $2, $1/1024}'")
    );

    let sectors = || -> f64 {
        ssh.run("awk '{print $7}' /sys/block/vda/stat")
            .parse()
            .expect("sectors written")
    };
    // Bytes each process (kernel threads too) caused to be written, to say who writes.
    let writers = || -> std::collections::BTreeMap<String, u64> {
        let mut by_name = std::collections::BTreeMap::new();
        let listing = ssh.run(
            "for p in /proc/[0-9]*; do echo \"$(cat $p/comm 2>/dev/null) $(sed -n 's/^write_bytes: //p' $p/io 2>/dev/null)\"; done",
        );
        for line in listing.lines() {
            if let Some((name, bytes)) = line.rsplit_once(' ') {
                if let Ok(bytes) = bytes.parse::<u64>() {
                    *by_name.entry(name.to_string()).or_insert(0) += bytes;
                }
            }
        }
        by_name
    };
    let before = sectors();
    let writers_before = writers();
    let idle = Duration::from_secs(idle_minutes * 60);
    std::thread::sleep(idle);
    let written = (sectors() - before) * 512.0;
    let mut grew: Vec<(u64, String)> = writers()
        .into_iter()
        .filter_map(|(name, bytes)| {
            let delta = bytes.saturating_sub(*writers_before.get(&name).unwrap_or(&0));
            (delta > 0).then_some((delta, name))
        })
        .collect();
    grew.sort_unstable_by(|a, b| b.cmp(a));
    let per_hour = written * 3600.0 / idle.as_secs_f64();
    println!("disk writes while idle ({idle_minutes} min measured, scaled to an hour):");
    println!(
        "  {:.0} bytes in {idle_minutes} min = {:.1} KiB/hour (goal <= 1024 KiB/hour: {})",
        written,
        per_hour / 1024.0,
        if per_hour <= WRITES_GOAL_BYTES_PER_HOUR {
            "met"
        } else {
            "not met"
        }
    );
    println!(
        "  written by (process write_bytes over the same time): {}",
        if grew.is_empty() {
            "nobody".to_string()
        } else {
            grew.iter()
                .take(8)
                .map(|(bytes, name)| format!("{name} {bytes} B"))
                .collect::<Vec<_>>()
                .join("; ")
        }
    );
    let _ = ssh.try_run("systemctl poweroff");
}
