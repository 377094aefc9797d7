//! The agent runtime: turns a user message into a streamed model reply.
//!
//! This module owns providers and the run of one turn. It never formats for a
//! chat platform and never talks to gateway connections directly: it emits
//! values that the gateway turns into protocol events.
//!
//! Other layers use the façade below (`crate::agent::RunOutcome`), not the
//! submodules; only `providers` stays public as a folder of its own, for the
//! provider integration tests.

mod compaction;
mod context;
mod failover;
mod history;
pub mod inbound_media;
mod memory_flush;
mod probe;
mod prompt;
mod prompt_files;
pub mod providers;
mod reasoning;
mod runs;
mod runtime;
mod session_note;
mod session_reset;
mod sessions;
mod skills;
mod store_wait;
mod subagents;
mod tool_loop;
mod turn;
mod user_turn;

// Runs: starting, observing and ending them (the gateway, channels, cron, heartbeat).
pub use inbound_media::MAX_TURN_IMAGES;
pub use runs::{RunEvent, RunOutcome, RunRegistry, RunStatus, Unrecorded};
pub use runtime::{
    AgentRuntime, FinalReply, NoObserver, PreparedRun, RunListeners, RunObserver, RunOrigin,
    RunPlacement, RunStartError, RunWaiters, RuntimeParts,
};
pub use turn::{ReplySettlement, TurnOverrides, TurnSpec, DEFAULT_RUN_TIMEOUT_MS};
pub use user_turn::{record_user_message, UserMessage};

// Reasoning levels and their display.
pub use reasoning::{format_reasoning_block, ReasoningLevel};

// Sessions: resets, patches, compactions and deletes; when a session goes stale on its own.
pub use session_reset::{
    daily_boundary_ms, evaluate as evaluate_freshness, Freshness, ResetKind, ResetPolicy,
};
pub use sessions::{
    Compacted, FieldPatch, LastRoute, ResetChat, SessionError, SessionIndex, SessionOps,
    SessionPatch,
};

// Sub-agents: the registry and the launcher the gateway implements.
pub use subagents::steer::SteerMode;
pub use subagents::{AnnounceError, OutcomeFuture, RunLauncher, SubagentRegistry, SubagentRun};

// One real call to a provider (the Control UI's test buttons).
pub use probe::{probe_provider, ProbeError, ProbeResult, ProbeStatus};

// Model resolution (the `/model` and `/status` commands name the model in force).
pub use providers::models::resolve_chain;

// The turn engine, for the integration tests that drive one turn or one model
// loop directly (tests/support/).
pub use context::resolve_window;
pub use failover::{FailoverPolicy, RetryPolicy, Sleeper};
pub use tool_loop::{run as run_tool_loop, LoopInput, LoopResult};
pub use turn::{run_turn, TurnEnv};
