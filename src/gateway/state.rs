//! The gateway's shared state: the protocol's own (connected clients, auth
//! limiter, idempotency, TLS, limits, lifecycle) and the handles of the
//! services its methods call, which `crate::app` builds and wires.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::agent::AgentRuntime;
use crate::config::ConfigHandle;
use crate::system::lifecycle::Lifecycle;

use parking_lot::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agent::RunRegistry;
use crate::config::{Config, LoadedConfig};
use crate::store::Store;
use crate::system::board::BoardLimits;

use super::auth::{AuthRateLimiter, SharedSecret};
use super::clients::ClientRegistry;
use super::idempotency::IdempotencyCache;

/// Largest frame after the handshake (upstream's `MAX_PAYLOAD_BYTES`).
pub const MAX_PAYLOAD_BYTES: usize = 25 * 1024 * 1024;
/// Largest frame before the handshake completes.
pub const MAX_PREAUTH_PAYLOAD_BYTES: usize = 64 * 1024;
/// Unauthenticated sockets allowed per address.
pub const MAX_PREAUTH_CONNECTIONS_PER_IP: usize = 32;
/// Largest HTTP request body the gateway reads.
pub const MAX_HTTP_BODY_BYTES: usize = 2 * 1024 * 1024;
/// Requests one connection may have in progress at once.
pub const MAX_IN_FLIGHT_REQUESTS: usize = 64;
/// `config.apply` / `config.patch` allowed per minute.
pub const CONFIG_WRITES_PER_MINUTE: usize = 3;

/// The protocol's own state (clients, auth limiter, idempotency, TLS, lifecycle, limits) and the
/// service handles its methods call into, which the composition root (`crate::app`) builds.
pub struct GatewayState {
    pub version: &'static str,
    /// The services the methods reach (built and wired by `crate::app`, never here).
    pub services: GatewayServices,
    /// Ready, draining, shutdown and background tasks, shared with every layer.
    pub lifecycle: Arc<Lifecycle>,
    pub secret: RwLock<SharedSecret>,
    pub limiter: AuthRateLimiter,
    pub clients: ClientRegistry,
    pub idempotency: IdempotencyCache,
    /// Paths on the gateway port that adapters serve (webhooks, Slack events).
    pub http_routes: Arc<crate::channels::http_routes::HttpRoutes>,
    pub limits: BoardLimits,
    pub started_at_ms: u64,
    pub started: std::time::Instant,
    pub shutdown: CancellationToken,
    pub tasks: TaskTracker,
    pub host_name: String,
    pub tls_fingerprint: Option<String>,
    /// Whether the secret is the generated token (`setup.rs`), read once.
    pub secret_generated: std::sync::OnceLock<bool>,
    /// A `pincer.memory.index` re-index is running (one at a time).
    pub memory_reindex: Arc<std::sync::atomic::AtomicBool>,
    preauth: Mutex<HashMap<IpAddr, usize>>,
    config_writes: Mutex<VecDeque<u64>>,
}

/// The services behind the gateway's methods: narrow handles, each owned by its layer.
pub struct GatewayServices {
    /// The running config, shared with every layer.
    pub config: Arc<ConfigHandle>,
    /// Prepares, admits and executes every run.
    pub runtime: Arc<AgentRuntime>,
    pub store: Store,
    pub data_dir: PathBuf,
    /// Active and finished runs, with the one lane gate.
    pub runs: Arc<RunRegistry>,
    pub tools: Arc<crate::tools::ToolRegistry>,
    /// Background processes and the exec approval gate, shared by every run's tools.
    pub tool_services: crate::tools::ToolServices,
    /// The sub-agent registry (also behind `tool_services.subagents`).
    pub subagents: Arc<crate::agent::SubagentRegistry>,
    /// Pending exec approvals (`exec.approval.*`).
    pub approvals: Arc<crate::tools::approval::ApprovalTable>,
    /// The cron service (its timer starts with the gateway).
    pub cron: Arc<crate::cron::CronService>,
    /// The heartbeat runner (its timer starts with the gateway).
    pub heartbeat: Arc<crate::heartbeat::HeartbeatRunner>,
    /// The chat channel adapters (started with the gateway).
    pub channels: Arc<crate::channels::registry::ChannelRegistry>,
    /// The message path: pipeline and command queue.
    pub hub: Arc<crate::channels::hub::ChannelHub>,
    /// Memory search services and their watchers, per agent (kept in line with the config).
    pub memory: Arc<crate::memory::registry::MemoryServices>,
    /// Reset, patch, compact and delete of sessions (methods and chat commands alike).
    pub sessions: Arc<crate::agent::SessionOps>,
    /// What the sandbox can do on this host (probed once, after start).
    pub sandbox_layers: std::sync::OnceLock<serde_json::Value>,
}

/// The protocol state's own parts (the composition root adds the services).
pub struct StateParts {
    pub loaded: LoadedConfig,
    pub store: Store,
    pub data_dir: PathBuf,
    pub secret: SharedSecret,
    pub limits: BoardLimits,
    pub tls_fingerprint: Option<String>,
}

/// What the protocol state needs of the services while it is built.
pub struct ProtocolParts {
    pub config: Arc<Config>,
    pub store: Store,
    pub secret: SharedSecret,
    pub limits: BoardLimits,
    pub tls_fingerprint: Option<String>,
    pub lifecycle: Arc<Lifecycle>,
}

impl GatewayState {
    /// The protocol state around `services` (called by the composition root).
    pub fn new(parts: ProtocolParts, services: GatewayServices) -> GatewayState {
        let rate = parts.config.gateway.auth.rate_limit.clone();
        let policy = super::auth::RateLimitPolicy {
            max_attempts: rate.max_attempts.max(1),
            window_ms: rate.window_ms,
            lockout_ms: rate.lockout_ms,
            exempt_loopback: rate.exempt_loopback,
        };
        let lifecycle = parts.lifecycle;
        GatewayState {
            version: env!("CARGO_PKG_VERSION"),
            services,
            shutdown: lifecycle.shutdown.clone(),
            tasks: lifecycle.tasks.clone(),
            lifecycle,
            idempotency: IdempotencyCache::new(Some(parts.store)),
            secret: RwLock::new(parts.secret),
            limiter: AuthRateLimiter::new(policy),
            clients: ClientRegistry::new(),
            http_routes: Arc::new(crate::channels::http_routes::HttpRoutes::new(
                super::http::GATEWAY_PATHS,
            )),
            limits: parts.limits,
            started_at_ms: crate::system::clock::now_ms(),
            started: std::time::Instant::now(),
            host_name: crate::system::host_name(),
            tls_fingerprint: parts.tls_fingerprint,
            secret_generated: std::sync::OnceLock::new(),
            memory_reindex: Arc::default(),
            preauth: Mutex::new(HashMap::new()),
            config_writes: Mutex::new(VecDeque::new()),
        }
    }

    /// The outbound HTTP client (providers, web_fetch), built on first use.
    pub fn http(&self) -> reqwest::Client {
        self.services.runtime.http()
    }

    /// The running configuration.
    pub fn config(&self) -> Arc<Config> {
        self.services.config.config()
    }

    /// The running configuration with its file path, text and hash.
    pub fn loaded(&self) -> Arc<LoadedConfig> {
        self.services.config.loaded()
    }

    /// Swaps in a new configuration (hot reload, `config.patch`).
    /// Makes `loaded` the running config and applies what hot-applies: lane
    /// sizes, memory watchers, and a restart of each chat channel whose
    /// section changed (in the background; the other channels keep running).
    pub fn replace_config(self: &Arc<Self>, loaded: LoadedConfig) {
        let previous = self.services.config.config();
        let config = self.services.config.replace(loaded);
        let lanes = crate::queue::LaneLimits::resolve(&self.limits, &config);
        self.services.runs.gate().resize(lanes);
        self.services
            .cron
            .apply_options(super::methods::cron::options(&config));
        self.services
            .memory
            .apply(&config, &self.shutdown, &self.tasks);
        let changed = crate::config::changed_paths(&previous, &config);
        let channels = crate::channels::registry::channels_to_restart(&changed);
        if !channels.is_empty() && !self.shutdown.is_cancelled() {
            self.tasks
                .spawn(restart_channels(Arc::clone(self), channels));
        }
    }

    pub fn secret(&self) -> SharedSecret {
        self.secret.read().clone()
    }

    pub fn is_ready(&self) -> bool {
        self.lifecycle.is_ready()
    }

    /// Stops taking new work (shutdown has begun).
    pub fn set_draining(&self) {
        self.lifecycle.set_draining();
    }

    pub fn set_ready(&self) {
        self.lifecycle.set_ready();
    }

    /// The agent's workspace (`memory::workspace_for`'s rule, `~` expanded).
    pub fn workspace_for(&self, config: &Config, agent_id: &str) -> PathBuf {
        self.services.runtime.workspace_for(config, agent_id)
    }

    /// Where the LMDB environment lives (shown in session listings).
    pub fn store_path(&self) -> String {
        store_dir(&self.services.data_dir).display().to_string()
    }

    pub fn uptime_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Claims an unauthenticated-socket slot for `ip`; `false` when over budget.
    pub fn claim_preauth(&self, ip: IpAddr) -> bool {
        let mut map = self.preauth.lock();
        let count = map.entry(ip).or_insert(0);
        if *count >= MAX_PREAUTH_CONNECTIONS_PER_IP {
            return false;
        }
        *count += 1;
        true
    }

    /// Returns a slot claimed by [`claim_preauth`](Self::claim_preauth).
    pub fn release_preauth(&self, ip: IpAddr) {
        let mut map = self.preauth.lock();
        if let Some(count) = map.get_mut(&ip) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                map.remove(&ip);
            }
        }
    }

    /// Counts one config write; `Err(retry_after_ms)` past the per-minute budget.
    pub fn claim_config_write(&self, now_ms: u64) -> Result<(), u64> {
        let mut writes = self.config_writes.lock();
        while writes
            .front()
            .is_some_and(|t| now_ms.saturating_sub(*t) >= 60_000)
        {
            writes.pop_front();
        }
        if writes.len() >= CONFIG_WRITES_PER_MINUTE {
            let oldest = writes.front().copied().unwrap_or(now_ms);
            return Err(60_000 - now_ms.saturating_sub(oldest));
        }
        writes.push_back(now_ms);
        Ok(())
    }
}

/// The LMDB environment's directory inside the data dir.
pub fn store_dir(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("store")
}

/// Restarts `channels` with the adapters the running config asks for now (a
/// later change's restart, waiting behind this one, builds from its own).
async fn restart_channels(state: Arc<GatewayState>, channels: Vec<&'static str>) {
    let services = &state.services;
    let sink: Arc<dyn crate::channels::InboundSink> =
        Arc::new(crate::channels::hub::HubSink(services.hub.clone()));
    for id in channels {
        let config = state.config();
        let adapter = crate::channels::registry::configured_adapter(
            id,
            &config,
            &services.store,
            &state.http(),
            &state.http_routes,
        );
        services.channels.restart(id, adapter, sink.clone()).await;
    }
}
