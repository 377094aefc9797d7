//! Exec approvals (OpenClaw's `exec.approval.*`): whether a command needs an operator's yes, the
//! bounded table of pending approvals with expiry, the decisions, and the in-memory allowlist
//! that `allow-always` grows.
//!
//! The tools reach the operator only through the [`ApprovalGate`] trait object in their context;
//! the gateway implements it (broadcasting `exec.approval.requested`, resolving through its
//! methods). This file must not know about the gateway, clients or frames, and holds at most
//! [`MAX_PENDING_APPROVALS`] pending entries.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::config::schema::{ExecAsk, ExecSecurity};
use crate::config::Config;

/// How long a run waits for a decision (upstream's `DEFAULT_EXEC_APPROVAL_TIMEOUT_MS`).
pub const DEFAULT_EXEC_APPROVAL_TIMEOUT_MS: u64 = 120_000;
/// Pending approvals held at once; further requests are refused.
pub const MAX_PENDING_APPROVALS: usize = 64;
/// Characters that make a command more than one simple command: such a command never matches
/// an allowlist prefix.
const SHELL_CONTROL_CHARS: &[char] = &[';', '&', '|', '`', '$', '>', '<', '\n', '(', ')'];

/// An operator's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalDecision {
    /// Run this command this once.
    AllowOnce,
    /// Run it, and add its program to the agent's allowlist (in memory, until restart).
    AllowAlways,
    /// Do not run it.
    Deny,
}

impl ApprovalDecision {
    /// Parses upstream's spelling (`allow-once`, `allow-always`, `deny`).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "allow-once" => Some(Self::AllowOnce),
            "allow-always" => Some(Self::AllowAlways),
            "deny" => Some(Self::Deny),
            _ => None,
        }
    }

    /// True for the two allowing decisions.
    pub fn allows(self) -> bool {
        self != Self::Deny
    }
}

/// What the operator is asked about (upstream's request payload fields that apply here).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ApprovalRequest {
    pub command: String,
    pub cwd: Option<String>,
    pub host: Option<String>,
    pub security: Option<String>,
    pub ask: Option<String>,
    pub agent_id: Option<String>,
    pub session_key: Option<String>,
}

/// A pending approval as clients see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingApproval {
    pub id: String,
    pub request: ApprovalRequest,
    pub created_at_ms: u64,
    pub expires_at_ms: u64,
}

/// Why no decision came.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    #[error("no operator client that can approve commands is connected")]
    NoApprover,
    #[error("too many pending approvals (at most {MAX_PENDING_APPROVALS})")]
    TooManyPending,
    #[error("approval id {0} is already pending")]
    DuplicateId(String),
    #[error("unknown or expired approval id")]
    Unknown,
    #[error("no decision within {0} ms")]
    TimedOut(u64),
}

/// A boxed decision future for `dyn ApprovalGate`.
pub type DecisionFuture<'a> = BoxFuture<'a, Result<ApprovalDecision, ApprovalError>>;

/// How a tool asks an operator; implemented by the gateway.
pub trait ApprovalGate: Send + Sync {
    /// Asks for a decision, waiting at most `timeout`.
    fn decide(&self, request: ApprovalRequest, timeout: Duration) -> DecisionFuture<'_>;
    /// True when `allow-always` added a prefix covering `command` for `agent_id`.
    fn allowlisted(&self, agent_id: &str, command: &str) -> bool;
}

/// The gate of a context without an operator (the HTTP tool endpoint, tests): nobody can answer.
pub struct NoApprover;

impl ApprovalGate for NoApprover {
    fn decide(&self, _request: ApprovalRequest, _timeout: Duration) -> DecisionFuture<'_> {
        Box::pin(async { Err(ApprovalError::NoApprover) })
    }
    fn allowlisted(&self, _agent_id: &str, _command: &str) -> bool {
        false
    }
}

struct Pending {
    snapshot: PendingApproval,
    decision: Option<oneshot::Sender<ApprovalDecision>>,
    waiters: Vec<oneshot::Sender<Option<ApprovalDecision>>>,
}

/// The bounded table of pending approvals and the in-memory allowlist additions.
#[derive(Default)]
pub struct ApprovalTable {
    pending: Mutex<BTreeMap<String, Pending>>,
    allowlist: Mutex<BTreeMap<String, BTreeSet<String>>>,
}

impl ApprovalTable {
    /// Opens a pending approval; the receiver gets the decision (dropped on expiry).
    pub fn open(
        &self,
        id: Option<String>,
        request: ApprovalRequest,
        now_ms: u64,
        timeout: Duration,
    ) -> Result<(PendingApproval, oneshot::Receiver<ApprovalDecision>), ApprovalError> {
        let mut pending = self.pending.lock();
        pending.retain(|_, p| p.snapshot.expires_at_ms > now_ms);
        if pending.len() >= MAX_PENDING_APPROVALS {
            return Err(ApprovalError::TooManyPending);
        }
        let id = id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        if pending.contains_key(&id) {
            return Err(ApprovalError::DuplicateId(id));
        }
        let snapshot = PendingApproval {
            id: id.clone(),
            request,
            created_at_ms: now_ms,
            expires_at_ms: now_ms + timeout.as_millis() as u64,
        };
        let (sender, receiver) = oneshot::channel();
        pending.insert(
            id,
            Pending {
                snapshot: snapshot.clone(),
                decision: Some(sender),
                waiters: Vec::new(),
            },
        );
        Ok((snapshot, receiver))
    }

    /// Records a decision; `allow-always` adds the command's program to its agent's allowlist.
    pub fn resolve(
        &self,
        id: &str,
        decision: ApprovalDecision,
        now_ms: u64,
    ) -> Result<PendingApproval, ApprovalError> {
        let entry = {
            let mut pending = self.pending.lock();
            match pending.remove(id) {
                Some(entry) if entry.snapshot.expires_at_ms > now_ms => entry,
                _ => return Err(ApprovalError::Unknown),
            }
        };
        if decision == ApprovalDecision::AllowAlways {
            let request = &entry.snapshot.request;
            if let Some(program) = program_of(&request.command) {
                let agent = request.agent_id.clone().unwrap_or_default();
                self.allowlist
                    .lock()
                    .entry(agent)
                    .or_default()
                    .insert(program.to_owned());
            }
        }
        if let Some(sender) = entry.decision {
            let _ = sender.send(decision);
        }
        for waiter in entry.waiters {
            let _ = waiter.send(Some(decision));
        }
        Ok(entry.snapshot)
    }

    /// Drops a pending approval (its time ran out); waiters learn there was no decision.
    pub fn expire(&self, id: &str) -> Option<PendingApproval> {
        let entry = self.pending.lock().remove(id)?;
        for waiter in entry.waiters {
            let _ = waiter.send(None);
        }
        Some(entry.snapshot)
    }

    /// A receiver for the decision of a pending approval (`None` on expiry).
    pub fn waiter(&self, id: &str) -> Option<oneshot::Receiver<Option<ApprovalDecision>>> {
        let mut pending = self.pending.lock();
        let entry = pending.get_mut(id)?;
        let (sender, receiver) = oneshot::channel();
        entry.waiters.push(sender);
        Some(receiver)
    }

    /// The pending approvals that have not expired, oldest first.
    pub fn list(&self, now_ms: u64) -> Vec<PendingApproval> {
        let pending = self.pending.lock();
        let mut list: Vec<PendingApproval> = pending
            .values()
            .filter(|p| p.snapshot.expires_at_ms > now_ms)
            .map(|p| p.snapshot.clone())
            .collect();
        list.sort_by_key(|p| p.created_at_ms);
        list
    }

    /// One pending approval.
    pub fn get(&self, id: &str, now_ms: u64) -> Option<PendingApproval> {
        self.pending
            .lock()
            .get(id)
            .filter(|p| p.snapshot.expires_at_ms > now_ms)
            .map(|p| p.snapshot.clone())
    }

    /// True when an `allow-always` decision covers `command` for `agent_id`.
    pub fn allowlisted(&self, agent_id: &str, command: &str) -> bool {
        self.allowlist
            .lock()
            .get(agent_id)
            .is_some_and(|prefixes| prefixes.iter().any(|p| matches_prefix(command, p)))
    }
}

/// The first word of a simple command.
fn program_of(command: &str) -> Option<&str> {
    if command.contains(SHELL_CONTROL_CHARS) {
        return None;
    }
    command.split_whitespace().next()
}

/// True when `command` is one simple command that is `prefix` or starts with `prefix` and a
/// space. Commands chaining or substituting other commands never match.
pub fn matches_prefix(command: &str, prefix: &str) -> bool {
    let command = command.trim();
    let prefix = prefix.trim();
    if prefix.is_empty() || command.contains(SHELL_CONTROL_CHARS) {
        return false;
    }
    command == prefix
        || command
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with(char::is_whitespace))
}

/// What happens to a command before it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecGate {
    /// Run it.
    Run,
    /// Ask an operator first.
    Ask,
    /// Refuse it (the reason is shown to the model).
    Refuse(String),
}

/// The exec approval settings of one agent (`tools.exec`, overridden key by key by
/// `agents.list[].tools.exec`), as upstream layers them: an unset `security` is `full` and an
/// unset `ask` is `off` (every command already runs in the sandbox).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecApprovalPolicy {
    pub ask: Option<ExecAsk>,
    pub security: Option<ExecSecurity>,
    pub allowlist: Vec<String>,
}

impl ExecApprovalPolicy {
    /// The effective settings for `agent_id`.
    pub fn for_agent(config: &Config, agent_id: &str) -> Self {
        let global = &config.tools.exec;
        let agent = config
            .agents
            .list
            .iter()
            .find(|a| a.id == agent_id)
            .and_then(|a| a.tools.as_ref())
            .and_then(|t| t.exec.as_ref());
        let pick = |f: fn(&crate::config::schema::ExecToolConfig) -> Option<Vec<String>>| {
            agent.and_then(f).or_else(|| f(global)).unwrap_or_default()
        };
        Self {
            ask: agent.and_then(|a| a.ask).or(global.ask),
            security: agent.and_then(|a| a.security).or(global.security),
            allowlist: pick(|e| e.allowlist.clone()),
        }
    }

    /// Decides for `command`; `extra_allowed` says an `allow-always` prefix covers it.
    ///
    /// Upstream's order: `deny` refuses everything, whatever `ask` says; `ask: always` asks for
    /// every command; under `allowlist` a listed command runs and any other is asked about
    /// (`on-miss`) or refused (`off`); `full` runs everything else.
    pub fn gate(&self, command: &str, extra_allowed: bool) -> ExecGate {
        let security = self.security.unwrap_or(ExecSecurity::Full);
        let ask = self.ask.unwrap_or(ExecAsk::Off);
        if security == ExecSecurity::Deny {
            return ExecGate::Refuse(
                "exec is disabled for this agent (tools.exec.security: \"deny\")".to_owned(),
            );
        }
        if ask == ExecAsk::Always {
            return ExecGate::Ask;
        }
        if security == ExecSecurity::Full {
            return ExecGate::Run;
        }
        let listed = extra_allowed || self.allowlist.iter().any(|p| matches_prefix(command, p));
        match (listed, ask) {
            (true, _) => ExecGate::Run,
            (false, ExecAsk::OnMiss) => ExecGate::Ask,
            (false, _) => ExecGate::Refuse(
                "the command is not on the exec allowlist (tools.exec.allowlist) and tools.exec.ask is \"off\""
                    .to_owned(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(command: &str) -> ApprovalRequest {
        ApprovalRequest {
            command: command.to_owned(),
            agent_id: Some("main".to_owned()),
            ..ApprovalRequest::default()
        }
    }

    #[test]
    fn prefixes_match_whole_words_of_simple_commands_only() {
        assert!(matches_prefix("git status", "git"));
        assert!(matches_prefix("git", "git"));
        assert!(!matches_prefix("gitk", "git"));
        assert!(!matches_prefix("git status; rm -rf /", "git"));
        assert!(!matches_prefix("git $(rm x)", "git"));
        assert!(!matches_prefix("ls", ""));
    }

    #[test]
    fn gate_follows_ask_and_security() {
        use ExecSecurity::{Allowlist, Deny, Full};
        let policy = |ask, security| ExecApprovalPolicy {
            ask,
            security,
            allowlist: vec!["ls".to_owned()],
        };
        let refused = |gate: ExecGate| matches!(gate, ExecGate::Refuse(_));
        // Unset: full, no asking.
        assert_eq!(policy(None, None).gate("rm x", false), ExecGate::Run);
        // deny refuses whatever ask says, listed or not.
        for ask in [
            None,
            Some(ExecAsk::Off),
            Some(ExecAsk::OnMiss),
            Some(ExecAsk::Always),
        ] {
            assert!(refused(policy(ask, Some(Deny)).gate("ls", true)), "{ask:?}");
        }
        // always asks under allowlist and full, even for listed commands.
        for security in [None, Some(Allowlist), Some(Full)] {
            assert_eq!(
                policy(Some(ExecAsk::Always), security).gate("ls", true),
                ExecGate::Ask
            );
        }
        // allowlist: listed runs; unlisted is asked about (on-miss) or refused (off).
        for ask in [None, Some(ExecAsk::Off), Some(ExecAsk::OnMiss)] {
            assert_eq!(
                policy(ask, Some(Allowlist)).gate("ls -l", false),
                ExecGate::Run
            );
            assert_eq!(
                policy(ask, Some(Allowlist)).gate("rm x", true),
                ExecGate::Run
            );
        }
        assert_eq!(
            policy(Some(ExecAsk::OnMiss), Some(Allowlist)).gate("rm x", false),
            ExecGate::Ask
        );
        assert!(refused(
            policy(Some(ExecAsk::Off), Some(Allowlist)).gate("rm x", false)
        ));
        assert!(refused(policy(None, Some(Allowlist)).gate("rm x", false)));
        // full runs unlisted commands without asking on a miss (upstream asks on-miss only under allowlist).
        assert_eq!(
            policy(Some(ExecAsk::OnMiss), Some(Full)).gate("rm x", false),
            ExecGate::Run
        );
        assert_eq!(
            policy(Some(ExecAsk::OnMiss), None).gate("rm x", false),
            ExecGate::Run
        );
    }

    #[test]
    fn expired_approvals_cannot_be_resolved_and_leave_the_list() {
        let table = ApprovalTable::default();
        let (pending, _rx) = table
            .open(None, request("ls"), 1_000, Duration::from_millis(500))
            .expect("open");
        assert_eq!(table.list(1_200).len(), 1);
        assert!(table.list(1_500).is_empty());
        assert_eq!(
            table.resolve(&pending.id, ApprovalDecision::AllowOnce, 1_600),
            Err(ApprovalError::Unknown)
        );
    }

    #[test]
    fn the_table_is_bounded() {
        let table = ApprovalTable::default();
        let mut receivers = Vec::new();
        for _ in 0..MAX_PENDING_APPROVALS {
            receivers.push(
                table
                    .open(None, request("ls"), 0, Duration::from_secs(60))
                    .expect("room"),
            );
        }
        assert_eq!(
            table
                .open(None, request("ls"), 0, Duration::from_secs(60))
                .map(|_| ()),
            Err(ApprovalError::TooManyPending)
        );
    }

    #[tokio::test]
    async fn a_decision_reaches_the_requester_and_waiters_and_allow_always_is_remembered() {
        let table = ApprovalTable::default();
        let (pending, decision) = table
            .open(
                Some("a1".into()),
                request("make build"),
                0,
                Duration::from_secs(60),
            )
            .expect("open");
        let waiter = table.waiter(&pending.id).expect("waiter");
        assert!(!table.allowlisted("main", "make test"));
        table
            .resolve("a1", ApprovalDecision::AllowAlways, 10)
            .expect("resolved");
        assert_eq!(decision.await, Ok(ApprovalDecision::AllowAlways));
        assert_eq!(waiter.await, Ok(Some(ApprovalDecision::AllowAlways)));
        assert!(table.allowlisted("main", "make test"));
        assert!(!table.allowlisted("other", "make test"));
    }
}
