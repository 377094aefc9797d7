//! Tools the agent can call: the `Tool` trait, the registry, the policy that
//! decides which tools a run may see, and the built-in tools.
//!
//! Tools never spawn processes themselves: `exec` goes through `sandbox/`.
//! File tools are confined to the agent's workspace (`workspace.rs`), or to what a sandboxed
//! session sees of it (`sandbox_workspace.rs`).

pub mod approval;
pub mod cron;
pub mod exec;
pub mod fs;
pub mod hooks;
pub mod memory;
pub mod message;
pub mod patch;
pub mod policy;
pub mod process;
pub mod sandbox_workspace;
pub mod schema;
pub mod sessions;
pub mod sessions_a2a;
pub mod sessions_send;
pub mod sessions_spawn;
pub mod subagent_control;
pub mod subagents;
pub mod web_fetch;
pub mod workspace;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::store::Store;

/// A tool the model may call: name, description and JSON-schema parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// The most characters of one tool result given back to the model.
pub const MAX_TOOL_RESULT_CHARS: usize = 64 * 1024;

/// A boxed future for `dyn Tool`.
pub type ToolFuture<'a> = BoxFuture<'a, Result<ToolOutput, ToolError>>;

/// What a tool run may use.
#[derive(Clone)]
pub struct ToolContext {
    pub agent_id: String,
    pub session_key: String,
    pub workspace: PathBuf,
    pub store: Store,
    pub http: reqwest::Client,
    pub cancel: CancellationToken,
    pub config: Arc<crate::config::Config>,
    /// Gateway-wide services: background runs and the approval gate.
    pub services: ToolServices,
}

/// What tools share across runs: the background process registry and the way to ask an
/// operator. The gateway builds one and hands clones to every run; the agent layer only passes
/// it through.
#[derive(Clone)]
pub struct ToolServices {
    pub processes: Arc<process::ProcessRegistry>,
    pub approvals: Arc<dyn approval::ApprovalGate>,
    /// Hooks run around every tool call, in order.
    pub hooks: Arc<hooks::ToolHooks>,
    /// Starts and awaits runs in other sessions (`sessions_send`).
    pub sessions: Arc<dyn sessions_send::SessionRunner>,
    /// The sub-agent registry (`sessions_spawn`, `subagents`); absent outside a gateway.
    pub subagents: Option<Arc<dyn subagent_control::SubagentControl>>,
    /// The cron service (`cron`); absent outside a gateway.
    pub cron: Option<Arc<dyn cron::CronAccess>>,
    /// Where backgrounded `exec` runs announce their exit (`tools.exec.notifyOnExit`): the
    /// gateway's heartbeat queue; absent outside a gateway.
    pub exec_exits: Option<Arc<dyn process::ExecExitNotifier>>,
    /// Outbound chat delivery for the `message` tool (the gateway's channels).
    pub messenger: Option<Arc<dyn message::Messenger>>,
    /// Per-agent memory search (`memory_search`, `memory_get`).
    pub memory: Option<Arc<dyn memory::MemoryAccess>>,
    /// Where private sandbox workspaces live unless `sandbox.workspaceRoot` says
    /// (`<data dir>/sandboxes` in the gateway).
    pub sandbox_root: PathBuf,
}

impl Default for ToolServices {
    /// A private process registry, no operator to ask, the standard hooks, private sandbox
    /// workspaces under the system's temporary directory.
    fn default() -> Self {
        ToolServices {
            processes: Arc::new(process::ProcessRegistry::default()),
            approvals: Arc::new(approval::NoApprover),
            hooks: Arc::new(hooks::ToolHooks::standard()),
            sessions: Arc::new(sessions_send::NoSessionRunner),
            subagents: None,
            cron: None,
            exec_exits: None,
            messenger: None,
            memory: None,
            sandbox_root: std::env::temp_dir().join("pincer-sandboxes"),
        }
    }
}

/// A tool's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// What the model reads.
    pub text: String,
    /// Structured details for clients (not sent to the model).
    pub details: Option<Value>,
}

impl ToolOutput {
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            details: None,
        }
    }
}

/// Why a tool failed; the message is shown to the model, so it says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("{0}")]
    Denied(String),
    #[error("{0}")]
    Failed(String),
    #[error("cancelled")]
    Cancelled,
}

/// One tool.
pub trait Tool: Send + Sync {
    fn name(&self) -> &'static str;
    /// One or two sentences for the model.
    fn description(&self) -> &'static str;
    /// JSON schema of the arguments (a top-level object).
    fn parameters(&self) -> Value;
    /// Runs the tool; must return promptly once `ctx.cancel` fires.
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a>;
}

/// The tools a gateway knows, by name.
#[derive(Default)]
pub struct ToolRegistry {
    tools: BTreeMap<&'static str, Arc<dyn Tool>>,
    /// Normalised specs by (allowed tools, dialect): every model call offers
    /// the same few sets, so they are built once (at most
    /// `MAX_CACHED_SPEC_SETS`, the oldest dropped first).
    spec_cache: parking_lot::Mutex<Vec<SpecSet>>,
}

/// One cached set of normalised tool specs.
struct SpecSet {
    allowed: Vec<String>,
    dialect: schema::SchemaDialect,
    specs: Arc<[ToolSpec]>,
}

/// Distinct spec sets kept (agents × tool policies × dialects in use).
const MAX_CACHED_SPEC_SETS: usize = 16;

impl Clone for ToolRegistry {
    /// The same tools; the copy builds its own spec cache.
    fn clone(&self) -> Self {
        ToolRegistry {
            tools: self.tools.clone(),
            spec_cache: Default::default(),
        }
    }
}

impl ToolRegistry {
    /// Every built-in tool.
    pub fn builtin() -> Self {
        let mut registry = ToolRegistry::default();
        for tool in [
            Arc::new(fs::ReadTool) as Arc<dyn Tool>,
            Arc::new(fs::WriteTool),
            Arc::new(fs::EditTool),
            Arc::new(patch::ApplyPatchTool),
            Arc::new(exec::ExecTool),
            Arc::new(process::ProcessTool),
            Arc::new(sessions::SessionsListTool),
            Arc::new(sessions::SessionsHistoryTool),
            Arc::new(sessions_send::SessionsSendTool),
            Arc::new(sessions::SessionStatusTool),
            Arc::new(sessions_spawn::SessionsSpawnTool),
            Arc::new(subagents::SubagentsTool),
            Arc::new(cron::CronTool),
            Arc::new(web_fetch::WebFetchTool::default()),
            Arc::new(message::MessageTool),
            Arc::new(memory::MemorySearchTool),
            Arc::new(memory::MemoryGetTool),
        ] {
            registry.register(tool);
        }
        registry
    }

    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.spec_cache.get_mut().clear();
        self.tools.insert(tool.name(), tool);
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.tools.keys().copied().collect()
    }

    /// The specs of the allowed tools normalised for `dialect`, in name
    /// order; shared, built once per distinct set.
    pub fn specs_for(&self, allowed: &[String], dialect: schema::SchemaDialect) -> Arc<[ToolSpec]> {
        let mut cache = self.spec_cache.lock();
        if let Some(set) = cache
            .iter()
            .find(|set| set.dialect == dialect && set.allowed == allowed)
        {
            return set.specs.clone();
        }
        let specs: Arc<[ToolSpec]> = schema::normalize_specs(&self.specs(allowed), dialect).into();
        if cache.len() >= MAX_CACHED_SPEC_SETS {
            cache.remove(0);
        }
        cache.push(SpecSet {
            allowed: allowed.to_vec(),
            dialect,
            specs: specs.clone(),
        });
        specs
    }

    /// The specs of the named tools, in name order.
    pub fn specs(&self, allowed: &[String]) -> Vec<ToolSpec> {
        self.tools
            .values()
            .filter(|t| allowed.iter().any(|a| a == t.name()))
            .map(|t| ToolSpec {
                name: t.name().to_string(),
                description: t.description().to_string(),
                parameters: t.parameters(),
            })
            .collect()
    }
}

/// Cuts a tool result to what the model may read, saying how much was cut.
pub fn cap_result(text: String) -> String {
    if text.len() <= MAX_TOOL_RESULT_CHARS {
        return text;
    }
    let mut end = MAX_TOOL_RESULT_CHARS;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n…[{} more bytes cut]", &text[..end], text.len() - end)
}

/// Reads a required string argument.
pub fn arg_str<'a>(args: &'a Value, name: &str) -> Result<&'a str, ToolError> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::InvalidArguments(format!("{name} (string) is required")))
}

/// Reads an optional non-negative integer argument.
pub fn arg_u64(args: &Value, name: &str) -> Result<Option<u64>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            ToolError::InvalidArguments(format!("{name} must be a non-negative integer"))
        }),
    }
}
