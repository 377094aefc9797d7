//! `pincer update status | apply <bundle> | confirm` (RAUC over D-Bus) and `pincer store schema`.
//! Printing and sequencing only: RAUC's client, the bundle check and the boot decision are
//! `system::rauc`'s; the store's schema is `store`'s.
//!
//! Exit codes: 0 done; 1 refused (a bundle RAUC or the store check turned down, or `confirm`
//! marked the slot bad and asked for a reboot); 2 could not do it (no RAUC, bad arguments).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::gateway::state::store_dir;

use super::commands::data_dir;
use super::GlobalArgs;
use crate::store::{read_schema_version, OLDEST_SCHEMA_VERSION, SCHEMA_VERSION};
use crate::system::clock::now_ms;
use crate::system::rauc::bundle::{self, BundleError};
use crate::system::rauc::confirm::{classify, Boot, Ledger};
use crate::system::rauc::{Mark, Progress, Rauc, RaucError, Status};

/// Where `confirm` keeps its ledger unless told otherwise (root's part of the data partition).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/pincer/system/update";
/// Width of the progress bar, in characters.
const PROGRESS_BAR_CHARS: i32 = 30;
/// How long `confirm` waits for RAUC to appear on the bus (it may start after us at boot).
const RAUC_WAIT: Duration = Duration::from_secs(30);
/// Pause between two `/readyz` probes, and the longest one probe may take.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Subcommand)]
pub enum UpdateCommand {
    /// The booted slot, each slot's state, bundle version and installation time, the primary
    /// slot and RAUC's last error.
    Status {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Install a signed RAUC bundle into the other slot (after checking that its pincer opens
    /// this box's store); it boots on trial after the next reboot.
    Apply {
        /// The bundle (.raucb).
        bundle: PathBuf,
    },
    /// After a boot (run as root by a oneshot unit): on a trial boot of a fresh installation,
    /// mark the slot good once the gateway is ready, else mark it bad and reboot into the other
    /// slot; on any other boot, mark the booted slot good.
    Confirm(ConfirmArgs),
}

#[derive(Debug, Args)]
pub struct ConfirmArgs {
    /// Seconds the gateway has, on a trial boot, to answer 200 on /readyz.
    #[arg(
        long,
        value_name = "SECS",
        env = "PINCER_UPDATE_CONFIRM_TIMEOUT",
        default_value_t = 120
    )]
    pub timeout: u64,
    /// The gateway's readiness URL (default: `/readyz` on 127.0.0.1 at the config's
    /// gateway.port, https when gateway.tls.enabled).
    #[arg(long, value_name = "URL")]
    pub readyz: Option<String>,
    /// Root-owned directory of the confirmation ledger (confirmed.json).
    #[arg(long, value_name = "DIR", env = "PINCER_UPDATE_STATE_DIR", default_value = DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// The command that reboots the system after a failed trial (split at spaces).
    #[arg(long, value_name = "CMD", default_value = "systemctl reboot")]
    pub reboot_command: String,
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// The schema version of the store in the data dir and the versions this pincer opens.
    Schema {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// A bundle manifest's build field (RAUC's $RAUC_MF_BUILD in a hook): check its
        /// store-schema=MIN-MAX claim against the store; exit 1 if it cannot open it.
        #[arg(long, value_name = "TEXT")]
        bundle_build: Option<String>,
    },
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("pincer: {message}");
    ExitCode::from(code)
}

/// Runs one `pincer update …` command.
pub fn run(global: &GlobalArgs, command: UpdateCommand) -> ExitCode {
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(e) => return fail(2, &e),
    };
    match command {
        UpdateCommand::Status { json } => runtime.block_on(status(json)),
        UpdateCommand::Apply { bundle } => runtime.block_on(apply(&data_dir(global), &bundle)),
        UpdateCommand::Confirm(args) => {
            let readyz = args
                .readyz
                .clone()
                .unwrap_or_else(|| default_readyz(global));
            runtime.block_on(confirm(&args, &readyz))
        }
    }
}

/// The gateway's `/readyz` on loopback, from the config (its port, and TLS); the defaults
/// (port 18789, plain HTTP) when the config does not load, which is logged.
fn default_readyz(global: &GlobalArgs) -> String {
    match crate::config::load(global.config.as_deref()) {
        Ok(loaded) => {
            let gateway = &loaded.config.gateway;
            let scheme = if gateway.tls.enabled { "https" } else { "http" };
            format!("{scheme}://127.0.0.1:{}/readyz", gateway.port)
        }
        Err(e) => {
            log::warn!("update confirm: the config does not load ({e}); probing the default port");
            "http://127.0.0.1:18789/readyz".to_string()
        }
    }
}

async fn status(json: bool) -> ExitCode {
    let result = async { Rauc::connect().await?.status().await }.await;
    match result {
        Ok(status) if json => {
            println!("{}", pretty(&status.to_json()));
            ExitCode::SUCCESS
        }
        Ok(status) => {
            print!("{}", render_status(&status));
            ExitCode::SUCCESS
        }
        Err(error) => {
            if json {
                println!(
                    "{}",
                    pretty(&json!({"available": false, "reason": error.to_string()}))
                );
            }
            fail(2, &error.to_string())
        }
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// `update status` as text.
pub fn render_status(status: &Status) -> String {
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let mut out = format!(
        "RAUC: compatible {}, booted {} ({}), primary {}, {}\n",
        status.compatible,
        status.booted().map_or("?", |s| s.name.as_str()),
        status.boot_slot,
        status.primary.as_deref().unwrap_or("unknown"),
        status.operation,
    );
    if let Some(why) = &status.primary_error {
        out += &format!("primary unknown: {why}\n");
    }
    let last_error = if status.last_error.is_empty() {
        "none"
    } else {
        &status.last_error
    };
    out += &format!("last error: {last_error}\n");
    if let Some((slot, outcome)) = status.last_outcome() {
        out += &format!(
            "last update: {} into {} at {}: {}\n",
            dash(&slot.bundle_version),
            slot.name,
            dash(&slot.installed_timestamp),
            outcome.as_str()
        );
    }
    out += &format!(
        "{:<10} {:<9} {:<5} {:<16} {}\n",
        "slot", "state", "boot", "version", "installed"
    );
    for slot in &status.slots {
        let installed = match (&slot.installed_timestamp, slot.installed_count) {
            (Some(at), Some(n)) => format!("{at} (#{n})"),
            (Some(at), None) => at.clone(),
            _ => "-".into(),
        };
        out += &format!(
            "{:<10} {:<9} {:<5} {:<16} {}\n",
            slot.name,
            dash(&slot.state),
            dash(&slot.boot_status),
            dash(&slot.bundle_version),
            installed
        );
    }
    out
}

async fn apply(data_dir: &Path, bundle_path: &Path) -> ExitCode {
    let bundle_path = match std::fs::canonicalize(bundle_path) {
        Ok(path) => path,
        Err(e) => {
            return fail(
                2,
                &format!("cannot read the bundle {}: {e}", bundle_path.display()),
            )
        }
    };
    let store = store_dir(data_dir);
    let found = match read_schema_version(&store) {
        Ok(found) => found,
        Err(e) => {
            return fail(
                2,
                &format!("cannot read the store's schema in {}: {e}", store.display()),
            )
        }
    };
    let mut rauc = match Rauc::connect().await {
        Ok(rauc) => rauc,
        Err(e) => return fail(2, &e.to_string()),
    };
    let manifest = match bundle::read_manifest(&bundle_path).await {
        Ok(manifest) => manifest,
        Err(e @ BundleError::Spawn(_)) => return fail(2, &e.to_string()),
        Err(e) => return fail(1, &format!("refused: {e}")),
    };
    if let Err(e) = bundle::check_store(&manifest, found) {
        return fail(1, &format!("refused: {e}"));
    }
    eprintln!(
        "installing {} (version {}, {}) …",
        bundle_path.display(),
        manifest.version,
        manifest.compatible
    );
    let terminal = std::io::stderr().is_terminal();
    let mut printer = progress_printer(terminal);
    let result = rauc
        .install(&bundle_path.to_string_lossy(), &mut printer)
        .await;
    if terminal {
        eprintln!();
    }
    match result {
        Ok(()) => {
            println!(
                "installed {} {}: reboot to run it (it boots on trial and rolls back if the gateway does not come up)",
                manifest.compatible, manifest.version
            );
            ExitCode::SUCCESS
        }
        Err(e @ (RaucError::Unavailable(_) | RaucError::Bus(_))) => fail(2, &e.to_string()),
        Err(e) => fail(1, &format!("refused: {e}")),
    }
}

/// A bar redrawn in place on a terminal, a plain line per step otherwise.
fn progress_printer(terminal: bool) -> impl FnMut(&Progress) + Send {
    move |p: &Progress| {
        if terminal {
            let filled = p.percent.clamp(0, 100) * PROGRESS_BAR_CHARS / 100;
            let bar: String = (0..PROGRESS_BAR_CHARS)
                .map(|i| if i < filled { '#' } else { '-' })
                .collect();
            eprint!("\r\x1b[K[{bar}] {:>3}% {}", p.percent, p.message);
            let _ = std::io::stderr().flush();
        } else {
            eprintln!("install: {:>3}% {}", p.percent, p.message);
        }
    }
}

async fn confirm(args: &ConfirmArgs, readyz: &str) -> ExitCode {
    let status = match wait_for_rauc().await {
        Ok(status) => status,
        Err(e) => {
            log::error!("update confirm: cannot read RAUC's status, nothing marked: {e}");
            return fail(2, &e.to_string());
        }
    };
    let mut ledger = Ledger::load(&args.state_dir).unwrap_or_else(|e| {
        log::warn!("update confirm: {e}; deciding as if nothing was confirmed before");
        Ledger::default()
    });
    let (boot, booted) = match (classify(&status, &ledger), status.booted()) {
        (Ok(boot), Some(booted)) => (boot, booted.clone()),
        (Err(e), _) => {
            log::error!("update confirm: {e}; nothing marked");
            return fail(2, &e);
        }
        (Ok(_), None) => return fail(2, "RAUC names no booted slot"),
    };
    let (mark, reason) = judge(boot, readyz, Duration::from_secs(args.timeout)).await;
    let marked = async { Rauc::connect().await?.mark(mark, "booted").await }.await;
    match &marked {
        Ok((slot, message)) => {
            log::info!(
                "update confirm: RAUC marked {slot} {}: {message}",
                mark.as_str()
            );
            ledger.record(&booted, mark.as_str(), &reason, now_ms());
            if let Err(e) = ledger.save(&args.state_dir) {
                log::error!("update confirm: {e}");
            }
        }
        Err(e) => log::error!(
            "update confirm: RAUC did not mark {} {}: {e}",
            booted.name,
            mark.as_str()
        ),
    }
    if mark == Mark::Bad {
        // Even when the mark failed: the boot loader's attempt counter then falls back.
        if let Err(e) = reboot(&args.reboot_command) {
            log::error!("update confirm: reboot failed: {e}");
            return fail(2, &e);
        }
        log::info!("update confirm: reboot requested ({})", args.reboot_command);
    }
    match (marked, mark) {
        (Err(e), _) => fail(2, &e.to_string()),
        (Ok(_), Mark::Bad) => ExitCode::from(1),
        (Ok(_), _) => ExitCode::SUCCESS,
    }
}

/// What to mark the booted slot, and why: a normal boot good at once; a trial boot good once the
/// gateway answers 200 on `readyz` within `timeout`, else bad.
async fn judge(boot: Boot, readyz: &str, timeout: Duration) -> (Mark, String) {
    let (slot, reason) = match boot {
        Boot::Normal { slot, reason } => {
            log::info!("update confirm: normal boot of {slot}: {reason}; marking it good");
            return (Mark::Good, reason);
        }
        Boot::Trial { slot, reason, .. } => (slot, reason),
    };
    log::info!(
        "update confirm: trial boot: {reason}; waiting up to {} s for {readyz} to answer 200",
        timeout.as_secs()
    );
    match wait_ready(readyz, timeout).await {
        Ok(after) => {
            let why = format!(
                "the gateway answered 200 on {readyz} after {} ms",
                after.as_millis()
            );
            log::info!("update confirm: trial of {slot} passed: {why}; marking it good");
            (Mark::Good, why)
        }
        Err(last) => {
            let why = format!(
                "the gateway did not answer 200 on {readyz} within {} s (last: {last})",
                timeout.as_secs()
            );
            log::warn!(
                "update confirm: trial of {slot} failed: {why}; marking it bad and rebooting into \
                 the other slot"
            );
            (Mark::Bad, why)
        }
    }
}

/// RAUC's status, waiting up to [`RAUC_WAIT`] for RAUC to come onto the bus.
async fn wait_for_rauc() -> Result<Status, RaucError> {
    let deadline = Instant::now() + RAUC_WAIT;
    loop {
        let result = async { Rauc::connect().await?.status().await }.await;
        match result {
            Err(RaucError::Unavailable(why)) if Instant::now() < deadline => {
                log::debug!("update confirm: waiting for RAUC: {why}");
                tokio::time::sleep(PROBE_INTERVAL).await;
            }
            other => return other,
        }
    }
}

/// Polls `url` until it answers 200 (`Ok(elapsed)`) or `timeout` passes (`Err(last answer)`).
async fn wait_ready(url: &str, timeout: Duration) -> Result<Duration, String> {
    let started = Instant::now();
    // The gateway's own TLS certificate is self-signed: on loopback, only the status counts.
    let loopback = ["https://127.0.0.1", "https://localhost", "https://[::1]"]
        .iter()
        .any(|prefix| url.starts_with(prefix));
    let client = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .no_proxy()
        .danger_accept_invalid_certs(loopback)
        .build()
        .map_err(|e| e.to_string())?;
    loop {
        let last = match client.get(url).send().await {
            Ok(response) if response.status() == reqwest::StatusCode::OK => {
                return Ok(started.elapsed())
            }
            Ok(response) => format!("HTTP {}", response.status().as_u16()),
            Err(e) => e.to_string(),
        };
        if started.elapsed() + PROBE_INTERVAL > timeout {
            return Err(last);
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

fn reboot(command: &str) -> Result<(), String> {
    let mut words = command.split_whitespace();
    let program = words.next().ok_or("empty --reboot-command")?;
    let status = std::process::Command::new(program)
        .args(words)
        .status()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{command:?} failed ({status})"))
    }
}

/// Runs `pincer store schema`.
pub fn store(global: &GlobalArgs, command: StoreCommand) -> ExitCode {
    let StoreCommand::Schema { json, bundle_build } = command;
    let dir = store_dir(&data_dir(global));
    let found = match read_schema_version(&dir) {
        Ok(found) => found,
        Err(e) => {
            return fail(
                2,
                &format!("cannot read the store's schema in {}: {e}", dir.display()),
            )
        }
    };
    let opens = found.is_none_or(|v| (OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).contains(&v));
    let verdict = bundle_build.as_deref().map(|build| {
        let manifest = bundle::Manifest {
            compatible: String::new(),
            version: String::new(),
            description: None,
            build: Some(build.to_string()),
        };
        bundle::check_store(&manifest, found)
    });
    if json {
        let mut answer = json!({
            "store": dir,
            "schemaVersion": found,
            "opens": {"min": OLDEST_SCHEMA_VERSION, "max": SCHEMA_VERSION},
            "canOpen": opens,
        });
        if let Some(verdict) = &verdict {
            answer["bundle"] = match verdict {
                Ok(()) => json!({"accepted": true}),
                Err(e) => json!({"accepted": false, "reason": e.to_string()}),
            };
        }
        println!("{}", pretty(&answer));
    } else {
        match found {
            Some(v) => println!("store {}: schema {v}", dir.display()),
            None => println!("store {}: none yet (any release creates it)", dir.display()),
        }
        println!(
            "this pincer opens store schemas {OLDEST_SCHEMA_VERSION}-{SCHEMA_VERSION}: {}",
            if opens {
                "it opens this store"
            } else {
                "NOT this store"
            }
        );
        if let Some(Ok(())) = &verdict {
            println!("bundle: its pincer opens this store");
        }
    }
    match verdict {
        Some(Err(e)) => fail(1, &format!("refused: {e}")),
        _ => ExitCode::SUCCESS,
    }
}
