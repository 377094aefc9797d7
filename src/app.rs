//! The composition root: the one place that builds pincer's services and wires them together. Every
//! other module receives the narrow handles it needs (a `Store`, an `Arc<AgentRuntime>`, a port
//! trait object) and never builds another layer's service itself.
//!
//! The gateway implements the ports the lower layers define (`RunObserver`, `HubObserver`,
//! `WebchatAnswers`, `RunLauncher`, `JobRunner`, `HeartbeatHost`, the tool ports); they hold a weak
//! handle to the gateway's state, so [`build`] makes the state and its services in one cyclic step.
//! [`start`] starts their background work once the gateway listens and is ready.

use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::agent::RunRegistry;
use crate::agent::SessionOps;
use crate::agent::SubagentRegistry;
use crate::agent::{AgentRuntime, RuntimeParts};
use crate::channels::hub::{ChannelHub, HubDeps, HubSink};
use crate::config::ConfigHandle;
use crate::config::MemoryBackend;
use crate::cron::service::SystemClock;
use crate::cron::CronService;
use crate::gateway::state::{GatewayServices, GatewayState, ProtocolParts, StateParts};
use crate::gateway::{launcher, methods, runs, session_runner, webchat, Composer, GatewayError};
use crate::gateway::{serve as serve_gateway, ServeOptions};
use crate::heartbeat::HeartbeatRunner;
use crate::memory::registry::MemoryServices;
use crate::queue::{LaneGate, LaneLimits};
use crate::system::lifecycle::Lifecycle;
use crate::tools::approval::ApprovalTable;
use crate::tools::{ToolRegistry, ToolServices};

/// Runs the gateway with pincer's services until SIGTERM or SIGINT.
pub async fn serve(options: ServeOptions) -> Result<(), GatewayError> {
    serve_gateway(options, &Pincer).await
}

/// pincer's composition: the services [`build`] makes, started by [`start`].
pub struct Pincer;

impl Composer for Pincer {
    fn build(&self, parts: StateParts) -> Arc<GatewayState> {
        build(parts)
    }

    fn start<'a>(&'a self, state: &'a Arc<GatewayState>) -> BoxFuture<'a, ()> {
        Box::pin(start(state))
    }
}

/// Builds every service around the gateway's protocol state. Nothing runs yet: timers, adapters and
/// watchers start in [`start`].
pub fn build(parts: StateParts) -> Arc<GatewayState> {
    let StateParts {
        loaded,
        store,
        data_dir,
        secret,
        limits,
        tls_fingerprint,
    } = parts;
    // One lane gate for every run: the command queue, the runtime and cron share it.
    let gate = Arc::new(LaneGate::new(LaneLimits::resolve(&limits, &loaded.config)));
    // `memory.backend` picks the memory index; pincer has one, the built-in LMDB + ONNX index
    // (upstream's other backend, `qmd`, is refused when the config is read).
    let memory = match loaded.config.memory.backend {
        MemoryBackend::Builtin => Arc::new(MemoryServices::new(store.clone(), data_dir.clone())),
    };
    let config = Arc::new(ConfigHandle::new(loaded));
    let lifecycle = Arc::new(Lifecycle::default());
    let runs = Arc::new(RunRegistry::with_gate(gate.clone()));
    let tools = Arc::new(ToolRegistry::builtin());
    let approvals = Arc::new(ApprovalTable::default());
    let channels = Arc::default();
    Arc::new_cyclic(|state| {
        let subagents = SubagentRegistry::new(
            store.clone(),
            Arc::new(launcher::GatewayLauncher {
                state: state.clone(),
            }),
        );
        let tool_services = ToolServices {
            processes: Arc::default(),
            approvals: Arc::new(methods::approvals::GatewayApprovals::new(
                state.clone(),
                approvals.clone(),
            )),
            subagents: Some(subagents.clone()),
            cron: Some(Arc::new(launcher::GatewayCron {
                state: state.clone(),
            })),
            exec_exits: Some(Arc::new(launcher::GatewayExecExits {
                state: state.clone(),
            })),
            sessions: Arc::new(session_runner::GatewaySessionRunner::new(state.clone())),
            messenger: Some(Arc::new(methods::send::GatewayMessenger::new(
                state.clone(),
            ))),
            memory: Some(Arc::new(methods::memory::GatewayMemory {
                state: state.clone(),
            })),
            sandbox_root: data_dir.join("sandboxes"),
            ..Default::default()
        };
        let runtime = Arc::new(AgentRuntime::new(RuntimeParts {
            store: store.clone(),
            config: config.clone(),
            data_dir: data_dir.clone(),
            runs: runs.clone(),
            tools: tools.clone(),
            tool_services: tool_services.clone(),
            lifecycle: lifecycle.clone(),
            observer: Arc::new(runs::GatewayRunObserver {
                state: state.clone(),
            }),
        }));
        let sessions = Arc::new(SessionOps::new(runtime.clone(), memory.clone()));
        let hub = ChannelHub::new(HubDeps {
            runtime: runtime.clone(),
            channels: Arc::clone(&channels),
            sessions: sessions.clone(),
            subagents: subagents.clone(),
            observer: Arc::new(webchat::GatewayHubObserver {
                state: state.clone(),
            }),
            answers: Arc::new(webchat::GatewayAnswers {
                state: state.clone(),
            }),
        });
        let current = config.config();
        let cron = CronService::new(
            store.clone(),
            Arc::new(SystemClock),
            Arc::new(methods::cron::GatewayRunner {
                state: state.clone(),
            }),
            methods::cron::options(&current),
            gate,
        );
        let heartbeat = HeartbeatRunner::new(
            Arc::new(methods::heartbeat::GatewayHeartbeatHost {
                state: state.clone(),
                store: store.clone(),
            }),
            Arc::new(SystemClock),
        );
        let protocol = ProtocolParts {
            config: current,
            store: store.clone(),
            secret,
            limits,
            tls_fingerprint,
            lifecycle: lifecycle.clone(),
        };
        let services = GatewayServices {
            config,
            runtime,
            store,
            data_dir,
            runs,
            tools,
            tool_services,
            subagents,
            approvals,
            cron,
            heartbeat,
            channels,
            hub,
            memory,
            sessions,
            sandbox_layers: std::sync::OnceLock::new(),
        };
        GatewayState::new(protocol, services)
    })
}

/// Starts the services' background work: the cron and heartbeat timers, the chat adapters (and the
/// replay of messages accepted before a crash), sub-agent recovery and the memory watchers.
pub async fn start(state: &Arc<GatewayState>) {
    let services = &state.services;
    state
        .tasks
        .spawn(services.cron.clone().run_timer(state.shutdown.clone()));
    start_channels(state).await;
    launcher::reconcile_subagents(state);
    state
        .tasks
        .spawn(services.heartbeat.clone().run_timer(state.shutdown.clone()));
    services
        .memory
        .apply(&state.config(), &state.shutdown, &state.tasks);
}

/// Registers the adapters the config asks for and starts them with the hub as their inbound sink.
async fn start_channels(state: &Arc<GatewayState>) {
    let services = &state.services;
    // Web chat messages accepted before a crash but never answered run now.
    state
        .tasks
        .spawn(methods::chat::replay_webchat(state.clone()));
    let config = state.config();
    for adapter in crate::channels::registry::configured_adapters(
        &config,
        &services.store,
        &state.http(),
        &state.http_routes,
    ) {
        services.channels.register(adapter);
    }
    if services.channels.ids().is_empty() {
        return;
    }
    let hub = services.hub.clone();
    let sink = Arc::new(HubSink(hub.clone()));
    services.channels.start_all(sink).await;
    // Messages accepted before a crash but never answered run now.
    state.tasks.spawn(hub.replay_inbox());
}
