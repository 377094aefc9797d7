//! What each subcommand does.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::config::{self, BindMode, LoadedConfig};
use crate::gateway::state::store_dir;
use crate::gateway::{self, ServeOptions};
use crate::store::{Store, StoreOptions};
use crate::system::board::BoardLimits;

use super::client::GatewayClient;
use super::{Cli, Command, ConfigCommand, ConnectArgs, DevicesCommand, GlobalArgs};

/// The data dir: the flag (or `$PINCER_DATA_DIR`), else the per-user or system default.
pub fn data_dir(global: &GlobalArgs) -> PathBuf {
    if let Some(dir) = &global.data_dir {
        return dir.clone();
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/var/lib/pincer");
    }
    match std::env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".local/share/pincer"),
        None => PathBuf::from("/var/lib/pincer"),
    }
}

/// Loads the config; its `logging.level` applies unless `--log-level` was given.
fn load(global: &GlobalArgs) -> Result<LoadedConfig, String> {
    let loaded = config::load(global.config.as_deref()).map_err(|e| e.to_string())?;
    if global.log_level.is_none() {
        if let Some(level) = loaded.config.logging.level {
            crate::system::logging::set_level(level.to_filter());
        }
    }
    Ok(loaded)
}

pub fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Gateway(args) => {
            // Before any thread starts: the variable is removed from our environment.
            let restart_port = crate::system::restart::take_restart_port();
            let loaded = load(&cli.global)?;
            let bind = args.bind.as_deref().map(parse_bind).transpose()?;
            let options = ServeOptions {
                loaded,
                data_dir: data_dir(&cli.global),
                port: args.port,
                bind,
                token: args.token,
                limits: crate::system::board::detect().limits(),
                restart_port,
            };
            runtime()?
                .block_on(crate::app::serve(options))
                .map_err(|e| e.to_string())
        }
        Command::Config(ConfigCommand::Check { path }) => check(&cli.global, path.as_deref()),
        Command::Config(ConfigCommand::Show) => {
            let loaded = load(&cli.global)?;
            let text = serde_json::to_string_pretty(&loaded.config.redacted())
                .map_err(|e| e.to_string())?;
            println!("{text}");
            Ok(())
        }
        Command::Config(ConfigCommand::Keys) => {
            print!("{}", config::render_register()?);
            Ok(())
        }
        Command::Config(ConfigCommand::ImportOpenclaw { path, output }) => import(path, output),
        Command::Status(connect) => status(&cli.global, &connect),
        Command::Doctor => doctor(&cli.global),
        Command::Firstboot(args) => firstboot(&cli.global, args),
        #[cfg(not(target_arch = "arm"))]
        Command::EmbedWorker => crate::memory::worker::serve_stdio(),
        Command::Devices(command) => devices(&cli.global, command),
        Command::Pairing(command) => super::pairing::run(&cli.global, command, client),
        Command::Channels(command) => super::channels::run(&cli.global, command, client),
        Command::Memory(command) => {
            let loaded = load(&cli.global)?;
            super::memory::run(&loaded, &data_dir(&cli.global), command)
        }
        Command::Cron(command) => super::cron::run(&cli.global, command, client),
        Command::ImportOpenclaw(args) => import_state(&cli.global, args),
        // Run by `cli::main` itself (their own exit codes).
        Command::Update(_) | Command::Store(_) => {
            Err("update/store commands run from cli::main".into())
        }
    }
}

fn import_state(global: &GlobalArgs, args: super::ImportOpenclawArgs) -> Result<(), String> {
    let state_dir = match args.state_dir {
        Some(dir) => dir,
        None => match std::env::var_os("OPENCLAW_STATE_DIR").filter(|d| !d.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => {
                PathBuf::from(std::env::var_os("HOME").ok_or("HOME is not set; give --state-dir")?)
                    .join(".openclaw")
            }
        },
    };
    let config_path = config::candidate_paths(global.config.as_deref())
        .into_iter()
        .next()
        .ok_or("no place for pincer's config; give --config")?;
    let data_dir = data_dir(global);
    let store = Store::open(&store_dir(&data_dir), StoreOptions::default())
        .map_err(|e| format!("cannot open pincer's store: {e}"))?;
    let options = super::import_state::ImportOptions {
        state_dir,
        data_dir,
        config_path,
        reference_workspace: args.reference_workspace,
    };
    let report = super::import_state::import_state(&options, &store)?;
    print!("{}", report.render());
    Ok(())
}

/// One async worker: the gateway's async work is I/O multiplexing and small
/// frames, while slow store commits, file reads, embeddings and the sandbox
/// run on blocking threads (`block_in_place` hands the worker's queue to a
/// fresh thread meanwhile; quick commits stay, see `Store::run_blocking`). A second worker mostly woke up to steal one task and
/// parked again: in alternating `turn_bench` runs, one worker used 10–17 %
/// less CPU per turn and cut the overhead's p99 from 1.20–1.51 to 0.98–1.05 ms.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(8)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

fn parse_bind(text: &str) -> Result<BindMode, String> {
    serde_json::from_value(json!(text)).map_err(|_| {
        format!("--bind must be one of loopback, lan, tailnet, auto, custom; got {text:?}")
    })
}

fn check(global: &GlobalArgs, path: Option<&Path>) -> Result<(), String> {
    match path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            config::parse_str(&text, &path.display().to_string()).map_err(|e| e.to_string())?;
            println!("config ok: {}", path.display());
        }
        None => {
            let loaded = load(global)?;
            match loaded.path {
                Some(path) => println!("config ok: {}", path.display()),
                None => println!("config ok: no config file found, using the embedded defaults"),
            }
        }
    }
    Ok(())
}

fn import(path: Option<PathBuf>, output: Option<PathBuf>) -> Result<(), String> {
    let path = match path {
        Some(path) => path,
        None => {
            let home =
                std::env::var_os("HOME").ok_or("HOME is not set; give the OpenClaw config path")?;
            PathBuf::from(home).join(".openclaw/openclaw.json")
        }
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let report = config::import_openclaw(&text).map_err(|e| e.to_string())?;
    for (key, why) in &report.skipped {
        eprintln!("not carried over: {key}: {why}");
    }
    let rendered = serde_json::to_string_pretty(&report.config_json).map_err(|e| e.to_string())?;
    match output {
        Some(out) => {
            config::write_atomic(&out, &rendered).map_err(|e| e.to_string())?;
            eprintln!(
                "wrote {} ({} keys not carried over)",
                out.display(),
                report.skipped.len()
            );
        }
        None => println!("{rendered}"),
    }
    Ok(())
}

pub(super) fn client(global: &GlobalArgs, connect: &ConnectArgs) -> Result<GatewayClient, String> {
    let loaded = load(global)?;
    let dir = data_dir(global);
    let url = connect
        .url
        .clone()
        .unwrap_or_else(|| format!("ws://127.0.0.1:{}", loaded.config.gateway.port));
    let token = connect
        .token
        .clone()
        .or_else(|| loaded.config.gateway.auth.token.clone())
        .or_else(|| gateway::secret::read_generated(&dir));
    let password = loaded.config.gateway.auth.password.clone();
    GatewayClient::connect(&url, token, password, &dir)
}

fn status(global: &GlobalArgs, connect: &ConnectArgs) -> Result<(), String> {
    let mut client = client(global, connect)?;
    let status = client.call("status", json!({}))?;
    if connect.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&status).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    println!(
        "pincer {} on {}",
        status["version"].as_str().unwrap_or("?"),
        status["host"].as_str().unwrap_or("?")
    );
    println!(
        "  uptime: {} s",
        status["uptimeMs"].as_u64().unwrap_or(0) / 1000
    );
    println!("  clients connected: {}", status["clients"]);
    println!("  active runs: {}", status["activeRuns"]);
    println!("  sessions: {}", status["sessions"]["count"]);
    println!("  auth: {}", status["authMode"].as_str().unwrap_or("?"));
    print_figures(&status);
    Ok(())
}

/// The running components' lines of `status`: channels, heartbeats, queues, memory.
fn print_figures(status: &Value) {
    let lines = status["channelSummary"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if lines.is_empty() {
        println!("  channels: none");
    }
    for line in lines {
        println!("  channel {}", line.as_str().unwrap_or("?"));
    }
    for heartbeat in status["heartbeat"]["agents"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let agent = heartbeat["agentId"].as_str().unwrap_or("?");
        if heartbeat["enabled"] != json!(true) {
            println!("  heartbeat {agent}: disabled");
            continue;
        }
        let ago = |field: &str| match heartbeat[field].as_u64() {
            Some(at) => format_time(at),
            None => "never".to_string(),
        };
        println!(
            "  heartbeat {agent}: every {}, next {}, last {}",
            heartbeat["every"].as_str().unwrap_or("?"),
            ago("nextRunAt"),
            ago("lastRunAt")
        );
    }
    let queues = &status["queues"];
    for lane in queues["lanes"].as_array().into_iter().flatten() {
        println!(
            "  lane {}: {}/{} busy, {} waiting",
            lane["lane"].as_str().unwrap_or("?"),
            lane["busy"],
            lane["limit"],
            lane["waiting"]
        );
    }
    let command = &queues["commandQueue"];
    println!(
        "  command queue: {} sessions, {} running, {} messages waiting",
        command["sessions"], command["running"], command["waiting"]
    );
    for memory in status["memory"]["agents"].as_array().into_iter().flatten() {
        let synced = memory["lastSyncAt"]
            .as_u64()
            .map_or_else(|| "never".to_string(), format_time);
        println!(
            "  memory {}: {} files, {} chunks, {} vectors, {} search, last sync {synced}",
            memory["agentId"].as_str().unwrap_or("?"),
            memory["files"],
            memory["chunks"],
            memory["vectors"],
            memory["mode"].as_str().unwrap_or("?")
        );
    }
}

/// A timestamp (ms) as UTC `YYYY-MM-DDTHH:MM:SSZ`.
fn format_time(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(
            || ms.to_string(),
            |t| {
                t.round(jiff::Unit::Second)
                    .map_or_else(|_| t.to_string(), |t| t.to_string())
            },
        )
}

fn devices(global: &GlobalArgs, command: DevicesCommand) -> Result<(), String> {
    let (connect, method, params) = match &command {
        DevicesCommand::List(connect) => (connect, "device.pair.list", json!({})),
        DevicesCommand::Approve {
            request_id,
            connect,
        } => (
            connect,
            "device.pair.approve",
            json!({"requestId": request_id}),
        ),
        DevicesCommand::Reject {
            request_id,
            connect,
        } => (
            connect,
            "device.pair.reject",
            json!({"requestId": request_id}),
        ),
    };
    let mut client = client(global, connect)?;
    let answer = client.call(method, params)?;
    if connect.json || !matches!(command, DevicesCommand::List(_)) {
        println!(
            "{}",
            serde_json::to_string_pretty(&answer).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    let empty = Vec::new();
    println!("pending:");
    for r in answer["pending"].as_array().unwrap_or(&empty) {
        println!(
            "  {}  {}  from {}  ({})",
            r["requestId"].as_str().unwrap_or("?"),
            r["clientId"],
            r["remoteIp"],
            r["reason"]
        );
    }
    println!("paired:");
    for d in answer["paired"].as_array().unwrap_or(&empty) {
        println!(
            "  {}  {}  connected={}",
            d["deviceId"].as_str().unwrap_or("?"),
            d["clientId"],
            d["connected"]
        );
    }
    Ok(())
}

fn firstboot(global: &GlobalArgs, args: super::FirstbootArgs) -> Result<(), String> {
    let owner = args
        .owner
        .as_deref()
        .map(super::firstboot::files::Owner::lookup)
        .transpose()?;
    let plan = super::firstboot::FirstbootPlan {
        boot_dir: args.boot_dir,
        config_dir: args.config_dir,
        data_dir: data_dir(global),
        hostname_file: args.hostname_file,
        wpa_conf: args.wpa_conf,
        ssh_marker: args.ssh_marker,
        ssh_authorized_keys: args.ssh_authorized_keys,
        owner,
        apply_hostname: args.apply_hostname,
    };
    let report = super::firstboot::run(&plan, jiff::Timestamp::now())?;
    super::firstboot::print(&report);
    Ok(())
}

fn doctor(global: &GlobalArgs) -> Result<(), String> {
    let dir = data_dir(global);
    let board = crate::system::board::detect();
    println!("pincer {}", env!("CARGO_PKG_VERSION"));
    match load(global) {
        Ok(loaded) => match &loaded.path {
            Some(path) => println!("config: {} (valid)", path.display()),
            None => println!("config: none found, embedded defaults"),
        },
        Err(e) => println!("config: INVALID: {e}"),
    }
    println!("data dir: {}", dir.display());
    println!(
        "board: {} ({})",
        board.name,
        board.model.as_deref().unwrap_or("model unknown")
    );
    let limits: BoardLimits = board.limits();
    println!(
        "limits: {} connections, {} KiB outbound buffer per client, {} concurrent runs, handshake {} ms",
        limits.max_connections,
        limits.max_buffered_bytes / 1024,
        limits.max_concurrent_runs,
        limits.handshake_timeout_ms
    );
    let store = Store::open(&store_dir(&dir), StoreOptions::default())
        .map_err(|e| format!("store: cannot open: {e}"))?;
    let probe_key = "doctor.probe";
    let probe_value = crate::system::clock::now_ms().to_be_bytes();
    store
        .put_meta(probe_key, &probe_value)
        .map_err(|e| format!("store: write failed: {e}"))?;
    match store
        .meta(probe_key)
        .map_err(|e| format!("store: read failed: {e}"))?
    {
        Some(read) if read == probe_value => println!("store: write/read ok"),
        other => return Err(format!("store: read back {other:?}, wrote {probe_value:?}")),
    }
    let stats = store.stats().map_err(|e| format!("store: {e}"))?;
    let stats_json: Value = json!({
        "path": stats.path, "mapSize": stats.map_size, "usedBytes": stats.used_bytes, "fileBytes": stats.file_bytes,
    });
    println!("store: {stats_json}");
    println!("store entries: {:?}", stats.entries);
    println!("{}", crate::sandbox::probe().summary());
    appliance_report(&dir);
    Ok(())
}

/// The appliance around the process: systemd, watchdog, cgroup delegation, read-only
/// root, data partition, volatile journal; each line says what it found.
fn appliance_report(data_dir: &Path) {
    use crate::system::appliance;
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let own_cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        })
        .unwrap_or_else(|| "none in cgroup v2".to_string());
    let delegation = match crate::sandbox::limits::CgroupDelegation::detect() {
        Ok(delegated) => format!(
            "yes ({} is writable, memory/pids/cpu available)",
            delegated.dir.display()
        ),
        Err(e) => format!("no (own cgroup {own_cgroup}: {e})"),
    };
    println!("appliance:");
    println!("  systemd service: {}", appliance::systemd(&env));
    println!("  watchdog: {}", appliance::watchdog(&env));
    println!("  cgroup delegation: {delegation}");
    println!(
        "  read-only root: {}",
        appliance::read_only_root(&mountinfo)
    );
    let data_dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    println!(
        "  data dir on its own file system: {}",
        appliance::data_dir_filesystem(&data_dir, &mountinfo)
    );
    println!("  journal: {}", appliance::journald(Path::new("/")));
}
