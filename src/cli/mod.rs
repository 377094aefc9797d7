//! Command-line interface: `pincer gateway`, `config`, `status`, `doctor`,
//! `devices`, `pairing`, `update`, `store`. Parsing and printing only; the work happens in the library.

mod channels;
mod client;
mod commands;
mod cron;
pub mod firstboot;
mod import_state;
mod memory;
mod pairing;
mod update;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// pincer: a personal AI assistant gateway for small boards, speaking OpenClaw's gateway protocol.
#[derive(Debug, Parser)]
#[command(name = "pincer", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand accepts.
#[derive(Debug, Args, Clone)]
pub struct GlobalArgs {
    /// Config file (JSON5). Default lookup: $PINCER_CONFIG, ~/.config/pincer/pincer.json5, /etc/pincer/pincer.json5.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Data directory (LMDB store, generated token, TLS files).
    /// Default: $PINCER_DATA_DIR, /var/lib/pincer as root, ~/.local/share/pincer otherwise.
    #[arg(long, global = true, value_name = "DIR", env = "PINCER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Log level: error, warn, info, debug, trace (default: logging.level, else info).
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log_level: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway (HTTP + WebSocket on one port) until SIGTERM/SIGINT.
    Gateway(GatewayArgs),
    /// Check, show or import configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Ask a running gateway for its status over the protocol.
    Status(ConnectArgs),
    /// Paths, limits, store statistics and a store write/read check.
    Doctor,
    /// List, approve or reject devices asking to pair with a running gateway.
    #[command(subcommand)]
    Devices(DevicesCommand),
    /// List or approve DM pairing codes of chat senders (asks a running gateway).
    #[command(subcommand)]
    Pairing(PairingCommand),
    /// Link a chat account by QR code: `pincer channels login whatsapp` (asks a running gateway).
    #[command(subcommand)]
    Channels(ChannelsCommand),
    /// Index, inspect and search the agent's long-term memory.
    #[command(subcommand)]
    Memory(memory::MemoryCommand),
    /// List, add, edit, remove or run scheduled jobs (asks a running gateway).
    #[command(subcommand)]
    Cron(cron::CronCommand),
    /// Import an OpenClaw state directory: config, sessions and transcripts, cron jobs, paired devices,
    /// DM pairing approvals and the workspace. Safe to run again: nothing is imported twice.
    ImportOpenclaw(ImportOpenclawArgs),
    /// The appliance's A/B updates through RAUC: status, install a signed bundle, confirm a boot.
    #[command(subcommand)]
    Update(update::UpdateCommand),
    /// The LMDB store's schema version and the versions this pincer opens.
    #[command(subcommand)]
    Store(update::StoreCommand),
    /// Apply what the boot partition carries (pincer.json5, wifi.json5, hostname, ssh) and make the
    /// gateway token; run as root by the appliance's pincer-firstboot.service (see image/FIRSTBOOT.md).
    Firstboot(FirstbootArgs),
    /// Runs the model of local embeddings for a gateway that started this process with pipes (internal:
    /// see `memory::worker`).
    #[cfg(not(target_arch = "arm"))]
    #[command(name = "embed-worker", hide = true)]
    EmbedWorker,
}

/// Where `pincer firstboot` reads and writes (defaults: the appliance's layout; `--data-dir`
/// is the global flag).
#[derive(Debug, Args)]
pub struct FirstbootArgs {
    /// The boot partition (FAT) the user writes to.
    #[arg(long, value_name = "DIR", default_value = "/boot/firmware")]
    pub boot_dir: PathBuf,
    /// Where pincer.json5 goes.
    #[arg(long, value_name = "DIR", default_value = "/etc/pincer")]
    pub config_dir: PathBuf,
    /// The hostname file written.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/var/lib/pincer/system/hostname"
    )]
    pub hostname_file: PathBuf,
    /// The wpa_supplicant config for wpa_supplicant@wlan0.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/var/lib/pincer/system/wpa_supplicant-wlan0.conf"
    )]
    pub wpa_conf: PathBuf,
    /// The marker that exists while SSH is wanted.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/var/lib/pincer/system/ssh-enabled"
    )]
    pub ssh_marker: PathBuf,
    /// Root's authorized SSH keys, installed from `authorized_keys` on the boot partition.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/var/lib/pincer/system/ssh/authorized_keys"
    )]
    pub ssh_authorized_keys: PathBuf,
    /// The user that gets the config dir, the config, the token and gateway.env.
    #[arg(long, value_name = "USER")]
    pub owner: Option<String>,
    /// Also set the running system's hostname.
    #[arg(long)]
    pub apply_hostname: bool,
}

#[derive(Debug, Args)]
pub struct ImportOpenclawArgs {
    /// OpenClaw's state directory (default: $OPENCLAW_STATE_DIR, else ~/.openclaw).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Use OpenClaw's workspace where it is (agents.defaults.workspace) instead of copying it.
    #[arg(long)]
    pub reference_workspace: bool,
}

#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// Port (default gateway.port, 18789; 0 picks a free one).
    #[arg(long)]
    pub port: Option<u16>,
    /// Bind mode: loopback, lan, tailnet, auto or custom (default gateway.bind).
    #[arg(long, value_name = "MODE")]
    pub bind: Option<String>,
    /// Shared token clients must present (default gateway.auth.token or OPENCLAW_GATEWAY_TOKEN).
    #[arg(long)]
    pub token: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a config file (default: the one pincer would load).
    Check {
        /// File to check.
        path: Option<PathBuf>,
    },
    /// Print the effective config with secrets redacted.
    Show,
    /// List every key pincer accepts, with its default and what it does.
    Keys,
    /// Convert an OpenClaw config (default ~/.openclaw/openclaw.json) and report what could not be carried over.
    ImportOpenclaw {
        /// OpenClaw config file.
        path: Option<PathBuf>,
        /// Write the result here instead of printing it.
        #[arg(long, value_name = "PATH")]
        output: Option<PathBuf>,
    },
}

/// How to reach a running gateway.
#[derive(Debug, Args, Clone)]
pub struct ConnectArgs {
    /// Gateway URL (default ws://127.0.0.1:<gateway.port>).
    #[arg(long)]
    pub url: Option<String>,
    /// Gateway token (default: config, OPENCLAW_GATEWAY_TOKEN, or the generated token in the data dir).
    #[arg(long)]
    pub token: Option<String>,
    /// Print the raw JSON answers.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum DevicesCommand {
    /// Pending pairing requests and paired devices.
    List(ConnectArgs),
    /// Approve a pending request.
    Approve {
        request_id: String,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Reject a pending request.
    Reject {
        request_id: String,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum PairingCommand {
    /// Pending DM pairing codes (of one channel, or all).
    List {
        channel: Option<String>,
        #[command(flatten)]
        connect: ConnectArgs,
    },
    /// Approve a sender's pairing code on a channel.
    Approve {
        channel: String,
        code: String,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum ChannelsCommand {
    /// Link an account that signs in by QR code (WhatsApp): prints the code to scan with the phone
    /// (WhatsApp → Settings → Linked devices → Link a device) and waits until it is linked.
    Login {
        /// The channel (default whatsapp, the one that links by QR code).
        #[arg(value_name = "CHANNEL")]
        channel: Option<String>,
        /// The channel, as OpenClaw's CLI spells it (`--channel whatsapp`).
        #[arg(long = "channel", value_name = "CHANNEL", conflicts_with = "channel")]
        channel_flag: Option<String>,
        /// The account (default: the channel's default account).
        #[arg(long, value_name = "ID")]
        account: Option<String>,
        /// Forget the linked device and link again with a new QR code.
        #[arg(long)]
        force: bool,
        /// Give up after this many seconds without a scan.
        #[arg(long, value_name = "SECONDS", default_value_t = 180)]
        timeout: u64,
        #[command(flatten)]
        connect: ConnectArgs,
    },
}

/// Entry point used by `main.rs`.
pub fn main() -> ExitCode {
    crate::system::memory::tune_allocator();
    let cli = Cli::parse();
    // Local embeddings run in a worker: this very binary, whatever its path now (`/proc/self/exe`).
    #[cfg(not(target_arch = "arm"))]
    crate::memory::worker::use_worker_program("/proc/self/exe".into());
    crate::system::logging::init(cli.global.log_level.as_deref().unwrap_or("info"));
    let cli = match cli.command {
        Command::Update(command) => return update::run(&cli.global, command),
        Command::Store(command) => return update::store(&cli.global, command),
        command => Cli { command, ..cli },
    };
    match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("pincer: {message}");
            ExitCode::from(2)
        }
    }
}
