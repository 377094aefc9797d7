//! The agent runtime: the one way a run starts. It registers the run (a duplicate active run id is
//! refused), prepares its environment (config, workspace, tools), admits it through its session's
//! lane and the global lane it belongs to, runs the turn and marks it finished. Who hears about the run
//! is a [`RunObserver`] handed down by the composition root: the gateway turns events into protocol
//! frames, a channel turn reads a copy of them (`RunOrigin::tap`) to stream its reply.
//!
//! This file must not know the protocol: connection ids and idempotency keys are opaque strings here,
//! carried to the observer.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::runs::{RunEvent, RunOutcome, RunRegistry, RunStatus, RunTicket};
use super::turn::{run_turn, ReplySettlement, TurnEnv, TurnOverrides, TurnSpec};
use crate::config::{Config, ConfigHandle};
use crate::queue::{Admission, LaneKind, LanePass, LaneSlot, SteerInbox};
use crate::store::Store;
use crate::system::clock::now_ms;
use crate::system::lifecycle::Lifecycle;
use crate::tools::{ToolRegistry, ToolServices};
use futures_util::future::BoxFuture;

/// Run events one run may buffer for its observer before the run waits.
const RUN_EVENT_BUFFER: usize = 64;

/// The `agent` request waiting for the run's final answer (opaque to the agent).
#[derive(Debug, Clone)]
pub struct FinalReply {
    pub conn_id: String,
    pub request_id: String,
}

/// Who hears about a run besides the observer's readers.
#[derive(Debug, Default)]
pub struct RunOrigin {
    /// The client that asked: it gets the run's own events.
    pub requester: Option<String>,
    /// The request to answer with the final result.
    pub final_reply: Option<FinalReply>,
    /// The idempotency key to settle when the run ends.
    pub idempotency_key: Option<String>,
    /// A copy of every run event (channel replies and the HTTP endpoints stream from it).
    pub tap: Option<mpsc::Sender<RunEvent>>,
}

/// Where a run executes and whether readers see it.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunPlacement {
    /// The global lane the run takes (sub-agent and cron runs have their own).
    pub lane: LaneKind,
    /// No reader events: the caller decides what readers see (heartbeat runs).
    pub quiet: bool,
}

/// Who follows one run: its requester, its tap and whether it is quiet.
#[derive(Debug)]
pub struct RunListeners {
    pub requester: Option<String>,
    pub tap: Option<mpsc::Sender<RunEvent>>,
    pub quiet: bool,
}

/// The waiters of a finished run: the request to answer and the idempotency key to settle.
#[derive(Debug, Default)]
pub struct RunWaiters {
    pub final_reply: Option<FinalReply>,
    pub idempotency_key: Option<String>,
}

/// Listens to runs; the gateway implements it (protocol events, answers to waiting requests).
pub trait RunObserver: Send + Sync {
    /// Follows one run's events until [`RunEvent::Finished`]; returns the run's reasoning block
    /// (reasoning level `on`) for the final answer.
    fn follow(
        &self,
        spec: TurnSpec,
        listeners: RunListeners,
        events: mpsc::Receiver<RunEvent>,
    ) -> BoxFuture<'static, Option<String>>;
    /// The run has ended and is marked finished: answer its waiters, tell readers.
    fn finished(&self, outcome: &RunOutcome, reasoning: Option<String>, waiters: RunWaiters);
}

/// An observer that hears nothing (runs outside a gateway).
pub struct NoObserver;

impl RunObserver for NoObserver {
    fn follow(
        &self,
        _spec: TurnSpec,
        listeners: RunListeners,
        mut events: mpsc::Receiver<RunEvent>,
    ) -> BoxFuture<'static, Option<String>> {
        Box::pin(async move {
            while let Some(event) = events.recv().await {
                if let Some(tap) = &listeners.tap {
                    let _ = tap.send(event).await;
                }
            }
            None
        })
    }

    fn finished(&self, _outcome: &RunOutcome, _reasoning: Option<String>, _waiters: RunWaiters) {}
}

/// Why a run did not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunStartError {
    #[error("the gateway is shutting down")]
    ShuttingDown,
    #[error("cannot create the workspace {path}: {error}")]
    Workspace { path: String, error: String },
    #[error("run {0} is already active")]
    AlreadyActive(String),
}

/// What every run shares: the store, the config, the tools, the run registry with its lanes.
pub struct AgentRuntime {
    pub store: Store,
    pub config: Arc<ConfigHandle>,
    pub data_dir: PathBuf,
    pub runs: Arc<RunRegistry>,
    pub tools: Arc<ToolRegistry>,
    pub tool_services: ToolServices,
    pub lifecycle: Arc<Lifecycle>,
    observer: Arc<dyn RunObserver>,
    /// Built on first use: the TLS root store costs memory and start-up time.
    http: OnceLock<reqwest::Client>,
}

/// What the runtime is built from (the composition root has them).
pub struct RuntimeParts {
    pub store: Store,
    pub config: Arc<ConfigHandle>,
    pub data_dir: PathBuf,
    pub runs: Arc<RunRegistry>,
    pub tools: Arc<ToolRegistry>,
    pub tool_services: ToolServices,
    pub lifecycle: Arc<Lifecycle>,
    pub observer: Arc<dyn RunObserver>,
}

impl AgentRuntime {
    pub fn new(parts: RuntimeParts) -> AgentRuntime {
        AgentRuntime {
            store: parts.store,
            config: parts.config,
            data_dir: parts.data_dir,
            runs: parts.runs,
            tools: parts.tools,
            tool_services: parts.tool_services,
            lifecycle: parts.lifecycle,
            observer: parts.observer,
            http: OnceLock::new(),
        }
    }

    /// The running configuration.
    pub fn config(&self) -> Arc<Config> {
        self.config.config()
    }

    /// The outbound HTTP client (providers, web_fetch), built on first use.
    pub fn http(&self) -> reqwest::Client {
        self.http
            .get_or_init(|| {
                reqwest::Client::builder()
                    .connect_timeout(std::time::Duration::from_secs(10))
                    .user_agent(concat!("pincer/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .unwrap_or_else(|_| reqwest::Client::new())
            })
            .clone()
    }

    /// The agent's workspace (`memory::workspace_for`'s rule, `~` expanded).
    pub fn workspace_for(&self, config: &Config, agent_id: &str) -> PathBuf {
        crate::memory::workspace_for(config, agent_id, &self.data_dir)
    }

    /// Registers the run and prepares its environment, without starting it.
    pub fn prepare(
        self: &Arc<Self>,
        spec: TurnSpec,
        origin: RunOrigin,
    ) -> Result<PreparedRun, RunStartError> {
        if !self.lifecycle.is_ready() {
            return Err(RunStartError::ShuttingDown);
        }
        let config = self.config();
        let workspace = self.workspace_for(&config, &spec.agent_id);
        if let Err(e) = std::fs::create_dir_all(&workspace) {
            return Err(RunStartError::Workspace {
                path: workspace.display().to_string(),
                error: e.to_string(),
            });
        }
        let Some(ticket) = self.runs.register(&spec.run_id, &spec.session_key) else {
            return Err(RunStartError::AlreadyActive(spec.run_id));
        };
        let env = TurnEnv {
            store: self.store.clone(),
            config,
            http: self.http(),
            tools: self.tools.clone(),
            workspace,
            services: self.tool_services.clone(),
            steer: None,
            overrides: Default::default(),
            settlement: None,
        };
        Ok(PreparedRun {
            runtime: self.clone(),
            spec,
            ticket,
            env,
            origin,
            placement: RunPlacement::default(),
            held: None,
        })
    }

    /// Prepares a run and starts it in the background on `placement`.
    pub fn start(
        self: &Arc<Self>,
        spec: TurnSpec,
        origin: RunOrigin,
        placement: RunPlacement,
    ) -> Result<(), RunStartError> {
        self.start_settling(spec, origin, placement, None)
    }

    /// [`AgentRuntime::start`], with writes of the run's owner committed together with its reply.
    pub fn start_settling(
        self: &Arc<Self>,
        spec: TurnSpec,
        origin: RunOrigin,
        placement: RunPlacement,
        settlement: Option<Arc<dyn ReplySettlement>>,
    ) -> Result<(), RunStartError> {
        let mut prepared = self.prepare(spec, origin)?;
        prepared.placement = placement;
        if let Some(settlement) = settlement {
            prepared.set_settlement(settlement);
        }
        self.lifecycle.tasks.spawn(prepared.execute());
        Ok(())
    }
}

/// A registered run that has not started: [`PreparedRun::execute`] runs it to its end.
pub struct PreparedRun {
    runtime: Arc<AgentRuntime>,
    spec: TurnSpec,
    ticket: RunTicket,
    env: TurnEnv,
    origin: RunOrigin,
    placement: RunPlacement,
    /// What the run already holds in the lanes (the command queue's pass, a cron job's slot).
    held: Option<Admission>,
}

impl PreparedRun {
    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.spec.run_id
    }

    /// Lets the command queue steer messages into the run (steer modes).
    pub fn set_steer(&mut self, inbox: SteerInbox) {
        self.env.steer = Some(inbox);
    }

    /// Per-run departures from an ordinary turn (heartbeat `lightContext`, `includeReasoning`).
    pub fn set_overrides(&mut self, overrides: TurnOverrides) {
        self.env.overrides = overrides;
    }

    /// Writes to commit with the run's reply (the web chat's idempotency answers).
    pub fn set_settlement(&mut self, owner: Arc<dyn ReplySettlement>) {
        self.env.settlement = Some(owner);
    }

    /// Where the run executes and whether readers see it (default: main lane, visible).
    pub fn set_placement(&mut self, placement: RunPlacement) {
        self.placement = placement;
    }

    /// The command queue already waited for the session and a lane slot: the run uses them.
    pub fn set_admitted(&mut self, pass: LanePass) {
        self.held = Some(Admission::Admitted(pass));
    }

    /// The caller holds the run's lane slot (a cron job): the run waits for its session only.
    pub fn set_lane_slot(&mut self, slot: LaneSlot) {
        self.placement.lane = slot.lane();
        self.held = Some(Admission::HoldingSlot(slot));
    }

    /// The run's abort switch (the same one `chat.abort` pulls).
    pub fn cancel_token(&self) -> CancellationToken {
        self.ticket.cancel.clone()
    }

    /// Waits for the session's lane, runs the turn, tells the observer and returns the outcome.
    pub async fn execute(self) -> RunOutcome {
        let PreparedRun {
            runtime,
            spec,
            ticket,
            env,
            origin,
            placement,
            held,
        } = self;
        let admission = held.unwrap_or(Admission::Wait(placement.lane));
        let (tx, rx) = mpsc::channel(RUN_EVENT_BUFFER);
        let listeners = RunListeners {
            requester: origin.requester,
            tap: origin.tap,
            quiet: placement.quiet,
        };
        let follower = tokio::spawn(runtime.observer.follow(spec.clone(), listeners, rx));
        let cancel = ticket.cancel.clone();
        let outcome = tokio::select! {
            pass = runtime.runs.admit_with(&spec.session_key, admission) => {
                let _pass = pass;
                run_turn(&env, &spec, cancel, tx.clone()).await
            }
            _ = cancel.cancelled() => aborted_before_start(&spec),
        };
        let _ = tx.send(RunEvent::Finished(Box::new(outcome.clone()))).await;
        drop(tx);
        let reasoning = follower.await.ok().flatten();
        let waiters = RunWaiters {
            final_reply: origin.final_reply,
            idempotency_key: origin.idempotency_key,
        };
        // Only an idempotency key writes to the store; the rest is memory.
        let writes = waiters.idempotency_key.is_some();
        let finish = || {
            runtime.runs.finish(ticket, outcome.clone(), now_ms());
            runtime.observer.finished(&outcome, reasoning, waiters);
        };
        if writes {
            runtime.store.run_blocking(finish);
        } else {
            finish();
        }
        outcome
    }
}

fn aborted_before_start(spec: &TurnSpec) -> RunOutcome {
    let mut outcome = RunOutcome::without_turn(
        &spec.run_id,
        &spec.session_key,
        RunStatus::Aborted,
        now_ms(),
    );
    outcome.stop_reason = Some("aborted".into());
    outcome
}
