//! The gateway: one port serving HTTP and OpenClaw's WebSocket protocol.
//!
//! `serve` resolves the secret and bind address, opens listeners (optionally
//! with TLS), runs the accept loops, ticks, store maintenance and config
//! reload, and on SIGTERM/SIGINT drains: it stops taking work, tells clients
//! `shutdown`, lets running turns finish up to a deadline and syncs the store.
//! A restart in place (`/restart`, SIGUSR1, a config change that needs one) drains the
//! same way and then re-execs the binary (`system::restart`): same PID, and
//! the messages the inbox acknowledged are replayed by the new image.
//! It never runs agents itself.

pub mod auth;
pub mod bind;
pub mod chat_media;
pub mod clients;
pub mod connect_params;
pub mod control_ui;
pub mod device_auth;
pub mod discovery;
pub mod frames;
pub mod handshake;
pub mod health_events;
pub mod http;
pub mod idempotency;
pub mod launcher;
pub mod memory_events;
pub mod methods;
pub mod openai_http;
pub mod origin;
pub mod pairing;
pub mod preauth_io;
pub mod runs;
pub mod scopes;
pub mod secret;
pub mod session_runner;
pub mod setup;
pub mod state;
pub mod tailscale;
pub mod tls;
mod watchdog;
pub mod webchat;
pub mod ws;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::config::{BindMode, LoadedConfig, ReloadMode};
use crate::store::{MaintenancePolicy, Store, StoreOptions};
use crate::system::clock::now_ms;

use self::clients::BroadcastOptions;
use self::state::{GatewayState, StateParts};
use crate::system::board::BoardLimits;
use futures_util::future::BoxFuture;

/// How long running turns may take to finish once shutdown starts.
pub const SHUTDOWN_DRAIN_MS: u64 = 15_000;
/// How often the store is pruned.
pub const MAINTENANCE_INTERVAL_MS: u64 = 60 * 60 * 1000;
/// How long a client may take to send its HTTP request head.
pub const HEADER_READ_TIMEOUT_MS: u64 = 10_000;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("{0}")]
    Refused(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("cannot restart in place: {0}")]
    Restart(std::io::Error),
}

/// What `pincer gateway` hands over.
pub struct ServeOptions {
    pub loaded: LoadedConfig,
    pub data_dir: PathBuf,
    /// `--port` (0 picks a free port); overrides `gateway.port`.
    pub port: Option<u16>,
    /// `--bind`; overrides `gateway.bind`.
    pub bind: Option<BindMode>,
    /// `--token`; overrides `gateway.auth.token`.
    pub token: Option<String>,
    pub limits: BoardLimits,
    /// The port the previous image listened on when it restarted in place
    /// after listening on a kernel-picked port (`system::restart`).
    pub restart_port: Option<u16>,
}

/// Where the gateway's services come from: the composition root (`crate::app`) builds them around the
/// protocol parts, and starts their background work once the gateway is ready.
pub trait Composer: Send + Sync {
    fn build(&self, parts: StateParts) -> Arc<GatewayState>;
    fn start<'a>(&'a self, state: &'a Arc<GatewayState>) -> BoxFuture<'a, ()>;
}

/// Runs the gateway with the services `composer` builds until SIGTERM or SIGINT.
pub async fn serve(options: ServeOptions, composer: &dyn Composer) -> Result<(), GatewayError> {
    let config = options.loaded.config.clone();
    let requested_port = options.port.unwrap_or(config.gateway.port);
    // Port 0 asks for a free port: after a restart in place, the one we had.
    let port = match requested_port {
        0 => options.restart_port.unwrap_or(0),
        port => port,
    };
    let bind_mode = options.bind.unwrap_or(config.gateway.bind);
    let plan = bind::resolve(&bind_mode, config.gateway.custom_bind_host.as_deref(), port)
        .map_err(GatewayError::Refused)?;
    tailscale::check(&config, plan.loopback_only).map_err(GatewayError::Refused)?;
    let resolved = secret::resolve(&config, options.token.as_deref(), &options.data_dir)
        .map_err(GatewayError::Refused)?;
    if !plan.loopback_only && !resolved.owner_set {
        return Err(GatewayError::Refused(format!(
            "refusing to bind gateway to {} without auth: set gateway.auth.token (or OPENCLAW_GATEWAY_TOKEN, or --token) \
             or gateway.auth.password (or OPENCLAW_GATEWAY_PASSWORD) first",
            plan.addrs[0]
        )));
    }
    let tls = if config.gateway.tls.enabled {
        Some(tls::setup(
            config.gateway.tls.cert_path.as_deref(),
            config.gateway.tls.key_path.as_deref(),
            config.gateway.tls.auto_generate,
            &options.data_dir,
            &hostname(),
        )?)
    } else {
        None
    };
    let store = Store::open(
        &state::store_dir(&options.data_dir),
        StoreOptions::default(),
    )?;
    let listeners = bind_listeners(&plan).await?;
    let local = listeners[0]
        .local_addr()
        .map_err(|source| GatewayError::Bind {
            addr: plan.addrs[0],
            source,
        })?;
    let configured = setup::provider_configured(&options.loaded.config);
    let data_dir = options.data_dir.clone();
    let state = composer.build(StateParts {
        loaded: options.loaded,
        store,
        data_dir: options.data_dir,
        secret: resolved.secret,
        limits: options.limits,
        tls_fingerprint: tls.as_ref().map(|t| t.fingerprint_sha256.clone()),
    });
    let acceptor = tls.map(|t| t.acceptor);
    for listener in listeners {
        tokio::spawn(accept_loop(state.clone(), listener, acceptor.clone()));
    }
    // Signal handlers go in before anyone can learn we are up, so an early
    // SIGTERM is a clean shutdown and not the default kill.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| GatewayError::Refused(format!("cannot watch SIGTERM: {e}")))?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| GatewayError::Refused(format!("cannot watch SIGINT: {e}")))?;
    let mut usr1 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
        .map_err(|e| GatewayError::Refused(format!("cannot watch SIGUSR1: {e}")))?;
    watchdog::spawn(&state);
    spawn_background(&state);
    let prober = state.clone();
    tokio::task::spawn_blocking(move || {
        let capabilities = crate::sandbox::probe();
        log::info!("{}", capabilities.summary());
        let _ = prober.services.sandbox_layers.set(capabilities.to_json());
    });
    state.set_ready();
    composer.start(&state).await;
    let setup = SetupHint {
        configured,
        loopback_only: plan.loopback_only,
        data_dir: &data_dir,
    };
    announce(
        &state,
        local,
        acceptor.is_some(),
        &resolved.generated_path,
        &setup,
    );
    let tailscale = config.gateway.tailscale.clone();
    tailscale::expose(tailscale.mode, local.port()).await;
    let mdns = discovery::start(&discovery::GatewayFacts {
        mode: config.discovery.mdns.mode,
        port: local.port(),
        tls_fingerprint: state.tls_fingerprint.clone(),
        direct_reachable: !plan.loopback_only,
        system_host: hostname(),
    });
    let restart = loop {
        tokio::select! {
            _ = term.recv() => { log::info!("SIGTERM received, shutting down"); break false }
            _ = int.recv() => { log::info!("SIGINT received, shutting down"); break false }
            _ = usr1.recv() => sigusr1(&state),
            _ = state.lifecycle.restart.cancelled() => { log::info!("restarting in place"); break true }
        }
    };
    // Withdrawn first, so that no client finds a gateway that is going away.
    if let Some(advertiser) = mdns {
        let _ = tokio::task::spawn_blocking(move || advertiser.stop()).await;
    }
    drain(&state, restart).await;
    let wait = Duration::from_millis(crate::channels::hub::SHUTDOWN_DELIVERY_WAIT_MS);
    state.services.hub.wait_idle(wait).await;
    state.services.channels.stop_all().await;
    if restart {
        // Nothing below runs destructors: messages still queued keep their
        // inbox records, and the new image replays them.
        let keep_port = (requested_port == 0).then_some(local.port());
        return Err(GatewayError::Restart(crate::system::restart::reexec(
            keep_port,
        )));
    }
    if tailscale.reset_on_exit {
        tailscale::reset(tailscale.mode).await;
    }
    Ok(())
}

/// SIGUSR1 asks for a restart in place (as upstream's `gateway restart`
/// does), allowed when `commands.restart` is on.
fn sigusr1(state: &GatewayState) {
    if state.config().commands.restart {
        state.lifecycle.request_restart("SIGUSR1");
    } else {
        log::warn!("SIGUSR1 ignored: restarts are disabled (commands.restart is false)");
    }
}

fn hostname() -> String {
    crate::system::host_name()
}

async fn bind_listeners(plan: &bind::BindPlan) -> Result<Vec<TcpListener>, GatewayError> {
    let mut listeners = Vec::new();
    let mut port = plan.addrs[0].port();
    for (i, addr) in plan.addrs.iter().enumerate() {
        let addr = SocketAddr::new(addr.ip(), port);
        match TcpListener::bind(addr).await {
            Ok(listener) => {
                if port == 0 {
                    port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
                }
                listeners.push(listener);
            }
            // The IPv6 loopback is a convenience; a host without it still serves IPv4.
            Err(e) if i > 0 => log::debug!("not listening on {addr}: {e}"),
            Err(source) => return Err(GatewayError::Bind { addr, source }),
        }
    }
    Ok(listeners)
}

/// What the ready announcement needs to say where to go.
struct SetupHint<'a> {
    /// A provider credential is configured (else the gateway waits for setup).
    configured: bool,
    loopback_only: bool,
    data_dir: &'a std::path::Path,
}

impl SetupHint<'_> {
    /// The address a browser on the LAN (or this host, when bound to loopback) opens.
    fn url(&self, tls: bool, port: u16) -> String {
        let scheme = if tls { "https" } else { "http" };
        let host = if self.loopback_only {
            "127.0.0.1".to_string()
        } else {
            format!("{}.local", hostname())
        };
        format!("{scheme}://{host}:{port}/")
    }
}

fn announce(
    state: &GatewayState,
    local: SocketAddr,
    tls: bool,
    generated: &Option<PathBuf>,
    setup: &SetupHint,
) {
    let scheme = if tls { "wss" } else { "ws" };
    let host = if local.ip().is_unspecified() {
        "0.0.0.0".to_string()
    } else {
        local.ip().to_string()
    };
    // Tests and scripts wait for exactly this line on stdout.
    println!("pincer: listening on {scheme}://{host}:{}", local.port());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    if let Some(path) = generated {
        log::info!(
            "gateway token generated and kept in {} (clients need it: pincer status shows how)",
            path.display()
        );
    }
    if let Some(fp) = &state.tls_fingerprint {
        log::info!("TLS certificate SHA-256 fingerprint: {fp}");
    }
    let url = setup.url(tls, local.port());
    if let Some(refused) = crate::system::firstboot_error::read(setup.data_dir) {
        log::error!("{refused}");
    }
    let status = if setup.configured {
        format!("listening on {host}:{}; open {url}", local.port())
    } else {
        log::warn!("no model provider configured: pincer runs unconfigured; set it up at {url}");
        format!("unconfigured: set up at {url}")
    };
    crate::system::notify::notify(&format!("READY=1\nSTATUS={status}"));
}

async fn accept_loop(state: Arc<GatewayState>, listener: TcpListener, tls: Option<TlsAcceptor>) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = state.shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                log::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_connection(state, stream, peer).await,
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(
                        Duration::from_millis(HEADER_READ_TIMEOUT_MS),
                        acceptor.accept(stream),
                    );
                    match handshake.await {
                        Ok(Ok(tls_stream)) => serve_connection(state, tls_stream, peer).await,
                        Ok(Err(e)) => log::debug!("TLS handshake with {peer} failed: {e}"),
                        Err(_) => log::debug!("TLS handshake with {peer} timed out"),
                    }
                }
            }
        });
    }
}

async fn serve_connection<S>(state: Arc<GatewayState>, stream: S, peer: SocketAddr)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let ip = peer.ip();
    let service_state = state.clone();
    let service = service_fn(move |req| http::handle(service_state.clone(), req, ip));
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(HEADER_READ_TIMEOUT_MS))
        .max_buf_size(64 * 1024)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        result = &mut connection => {
            if let Err(e) = result {
                log::debug!("HTTP connection from {peer} ended: {e}");
            }
        }
        _ = state.shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), connection).await;
        }
    }
}

fn spawn_background(state: &Arc<GatewayState>) {
    let ticker = state.clone();
    tokio::spawn(async move {
        let mut interval =
            tokio::time::interval(Duration::from_millis(ticker.limits.tick_interval_ms));
        interval.tick().await;
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = ticker.shutdown.cancelled() => break,
            }
            let options = BroadcastOptions {
                drop_if_slow: true,
                ..Default::default()
            };
            ticker
                .clients
                .broadcast("tick", &json!({"ts": now_ms()}), options);
        }
    });
    let maintainer = state.clone();
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_millis(MAINTENANCE_INTERVAL_MS));
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = maintainer.shutdown.cancelled() => break,
            }
            let config = maintainer.config();
            let policy = MaintenancePolicy::from_config(&config.session.maintenance);
            match maintainer.services.store.maintain(&policy, now_ms()) {
                Ok(report) => log::debug!("store maintenance: {report:?}"),
                Err(e) => log::warn!("store maintenance failed: {e}"),
            }
        }
    });
    health_events::spawn(state);
    memory_events::spawn(state);
    spawn_reload(state);
    let settling = state.clone();
    tokio::spawn(async move {
        // Start-up's code (argument parsing, config loading, building the services, the channels'
        // first connections) has run by then: its pages leave the process, what runs again maps back.
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(STARTUP_SETTLE_MS)) => {}
            _ = settling.shutdown.cancelled() => return,
        }
        let released = crate::system::memory::release_code_pages();
        log::debug!(
            "start-up over: {} KiB of code pages released",
            released / 1024
        );
    });
}

/// How long after the gateway is ready its start-up code is given back (`system::memory`).
const STARTUP_SETTLE_MS: u64 = 3_000;

fn spawn_reload(state: &Arc<GatewayState>) {
    let loaded = state.loaded();
    let Some(path) = loaded.path.clone() else {
        return;
    };
    let mut events = crate::config::spawn_watcher(path.clone(), (*loaded).clone());
    let state = state.clone();
    tokio::spawn(async move {
        loop {
            let event = tokio::select! {
                event = events.recv() => event,
                _ = state.shutdown.cancelled() => break,
            };
            match event {
                Some(crate::config::ReloadEvent::Applied {
                    loaded,
                    restart_required,
                }) => {
                    let mode = loaded.config.gateway.reload.mode;
                    let restarts = matches!(mode, ReloadMode::Hybrid | ReloadMode::Restart);
                    if restarts && !restart_required.is_empty() {
                        // The new image reads the file: nothing is hot-applied first.
                        state.lifecycle.request_restart(&format!(
                            "config change in {} ({})",
                            path.display(),
                            restart_required.join(", ")
                        ));
                        break;
                    }
                    if restart_required.is_empty() {
                        log::info!("config reloaded from {}", path.display());
                    } else {
                        log::warn!(
                            "config reloaded from {}; these changes take effect after a restart: {}",
                            path.display(),
                            restart_required.join(", ")
                        );
                    }
                    state.replace_config(loaded);
                }
                Some(crate::config::ReloadEvent::Ignored { changed }) => {
                    log::info!(
                        "config change in {} not applied: gateway.reload.mode is off ({})",
                        path.display(),
                        changed.join(", ")
                    );
                }
                Some(crate::config::ReloadEvent::Rejected { error }) => {
                    log::error!("config change rejected, the running config stays: {error}");
                }
                None => break,
            }
        }
    });
}

/// How soon clients may expect the gateway back after a restart in place
/// (the `shutdown` event's `restartExpectedMs`).
pub const RESTART_EXPECTED_MS: u64 = 5_000;

/// Stops taking work, lets turns finish, closes clients, syncs the store.
/// `restart`: a restart in place follows (systemd hears `RELOADING=1`, not
/// `STOPPING=1`, and clients are told when to come back).
async fn drain(state: &Arc<GatewayState>, restart: bool) {
    let shutdown = if restart {
        crate::system::notify::reloading();
        json!({"reason": "gateway restarting", "restartExpectedMs": RESTART_EXPECTED_MS})
    } else {
        crate::system::notify::notify("STOPPING=1");
        json!({"reason": "gateway stopping", "restartExpectedMs": null})
    };
    state.set_draining();
    state
        .clients
        .broadcast("shutdown", &shutdown, BroadcastOptions::default());
    let deadline = tokio::time::Instant::now() + Duration::from_millis(SHUTDOWN_DRAIN_MS);
    while state.services.runs.active_count() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if state.services.runs.active_count() > 0 {
        log::warn!(
            "aborting {} runs still going at the shutdown deadline",
            state.services.runs.active_count()
        );
        state.services.runs.abort_all();
        let grace = tokio::time::Instant::now() + Duration::from_secs(2);
        while state.services.runs.active_count() > 0 && tokio::time::Instant::now() < grace {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let killed = state
        .services
        .tool_services
        .processes
        .kill_all(Duration::from_secs(3))
        .await;
    if killed > 0 {
        log::info!("killed {killed} background processes at shutdown");
    }
    // Give final replies a moment to reach their sockets.
    tokio::time::sleep(Duration::from_millis(100)).await;
    state.shutdown.cancel();
    state.tasks.close();
    let _ = tokio::time::timeout(Duration::from_secs(3), state.tasks.wait()).await;
    if let Err(e) = state.services.store.sync() {
        log::error!("store sync at shutdown failed: {e}");
    }
    log::info!("gateway stopped");
}
