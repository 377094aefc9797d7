//! The sub-agent port of the tools: what `sessions_spawn` and `subagents` may ask of the registry that
//! spawns, lists, kills and steers child runs (the agent's `SubagentRegistry` implements it), and the
//! records and errors they see. The tools only read arguments and format answers.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Config;
use crate::store::StoreError;

/// Longest steer message, in characters (upstream's 4,000).
pub const MAX_STEER_MESSAGE_CHARS: usize = 4_000;
/// Shortest gap between two steers from one session to one child (upstream's 2 s).
pub const STEER_RATE_LIMIT_MS: u64 = 2_000;
/// What happens to a child's session after its result is announced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cleanup {
    Delete,
    #[default]
    Keep,
}

/// A sub-agent run's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubagentStatus {
    Running,
    Done,
    Failed,
    Timeout,
    Killed,
}

impl SubagentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SubagentStatus::Running => "running",
            SubagentStatus::Done => "done",
            SubagentStatus::Failed => "failed",
            SubagentStatus::Timeout => "timeout",
            SubagentStatus::Killed => "killed",
        }
    }
}

/// One spawned run, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentRun {
    /// Registry id (stays the same when the child is steered).
    pub id: String,
    /// The agent run currently executing (or last executed) in the child session.
    pub run_id: String,
    pub child_session_key: String,
    pub requester_session_key: String,
    pub requester_agent_id: String,
    pub agent_id: String,
    pub task: String,
    pub label: Option<String>,
    pub cleanup: Cleanup,
    /// The child's depth: 1 for a child of a main session.
    pub depth: u32,
    pub model: Option<String>,
    pub timeout_ms: u64,
    pub created_at_ms: u64,
    pub ended_at_ms: Option<u64>,
    pub status: SubagentStatus,
    pub error: Option<String>,
    pub result: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub announced: bool,
}

impl SubagentRun {
    /// The record as tools and clients see it.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Why a spawn, kill or steer was refused.
#[derive(Debug, thiserror::Error)]
pub enum SubagentError {
    #[error("invalid arguments: {0}")]
    Invalid(String),
    #[error("sessions_spawn is not allowed at this depth: this session is at depth {depth} and agents.defaults.subagents.maxSpawnDepth is {max}")]
    DepthLimit { depth: u32, max: u32 },
    #[error("this session already has {active} active sub-agents (agents.defaults.subagents.maxChildrenPerAgent is {max}); wait for one to finish or kill one")]
    TooManyChildren { active: usize, max: usize },
    #[error("agentId {agent:?} is not allowed for sessions_spawn from agent {requester:?} (allowed: {allowed}); set subagents.allowAgents")]
    AgentNotAllowed {
        agent: String,
        requester: String,
        allowed: String,
    },
    #[error("no sub-agent run matches {0:?} among this session's children")]
    NotFound(String),
    #[error("sub-agent run {0} is not running (it already finished)")]
    NotRunning(String),
    #[error("steer message is {chars} characters; the limit is {max} (MAX_STEER_MESSAGE_CHARS)")]
    SteerTooLong { chars: usize, max: usize },
    #[error("steer rate limit: one steer per {limit} ms to a sub-agent (STEER_RATE_LIMIT_MS); try again in {wait_ms} ms", limit = STEER_RATE_LIMIT_MS)]
    SteerRateLimited { wait_ms: u64 },
    #[error("could not start the sub-agent run: {0}")]
    Launch(String),
    #[error("corrupt sub-agent record: {0}")]
    Corrupt(String),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

/// The spawn arguments (`sessions_spawn`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpawnRequest {
    pub task: String,
    pub label: Option<String>,
    pub agent_id: Option<String>,
    pub model: Option<String>,
    pub thinking: Option<String>,
    pub run_timeout_seconds: Option<u64>,
    pub cleanup: Cleanup,
}

/// Who asks for a spawn.
#[derive(Debug, Clone)]
pub struct Requester {
    pub agent_id: String,
    pub session_key: String,
}

/// How a steer reached the child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteerMode {
    /// Handed to the running turn: it reads the message before its next model call.
    Injected,
    /// The running turn was stopped and a new one started with the message.
    Restarted,
}

impl SteerMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SteerMode::Injected => "injected",
            SteerMode::Restarted => "restarted",
        }
    }
}

/// What `steer` did.
#[derive(Debug, Clone)]
pub struct SteerOutcome {
    pub run: SubagentRun,
    pub mode: SteerMode,
}

/// What the sub-agent tools ask of the registry.
pub trait SubagentControl: Send + Sync {
    /// Checks the limits, records the child and starts its run.
    fn spawn(
        self: Arc<Self>,
        config: &Config,
        requester: &Requester,
        request: SpawnRequest,
    ) -> Result<SubagentRun, SubagentError>;
    /// The requester session's children, newest first.
    fn children_of(&self, requester_key: &str) -> Result<Vec<SubagentRun>, SubagentError>;
    /// Stops a child (by index, id, label or session key) or `all`, with their descendants.
    fn kill(&self, requester_key: &str, target: &str) -> Result<Vec<SubagentRun>, SubagentError>;
    /// Hands `message` to a running child (injected, or by restarting its turn).
    fn steer(
        self: Arc<Self>,
        config: &Config,
        requester_key: &str,
        target: &str,
        message: &str,
    ) -> Result<SteerOutcome, SubagentError>;
}
