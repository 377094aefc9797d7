//! `exec.approval.*`: the gateway side of exec approvals. Implements the tools' approval gate
//! (open a pending approval, broadcast `exec.approval.requested` to approver clients, wait with
//! the timeout) and the methods `exec.approval.request`, `waitDecision`, `resolve`, `list`,
//! `get`; a resolution is broadcast as `exec.approval.resolved`.
//!
//! The pending table and the decision rules live in `tools::approval`; this file must not
//! decide whether a command needs approval, only carry the question and the answer.

use std::sync::{Arc, Weak};
use std::time::Duration;

use serde_json::{json, Value};

use super::params::Params;
use crate::gateway::clients::BroadcastOptions;
use crate::gateway::frames::ErrorShape;
use crate::gateway::scopes;
use crate::gateway::state::GatewayState;
use crate::system::clock::now_ms;
use crate::tools::approval::{
    ApprovalDecision, ApprovalError, ApprovalGate, ApprovalRequest, ApprovalTable, DecisionFuture,
    PendingApproval, DEFAULT_EXEC_APPROVAL_TIMEOUT_MS,
};

/// Longest timeout a client may ask for (10 minutes).
const MAX_APPROVAL_TIMEOUT_MS: u64 = 600_000;

/// The approval gate the gateway gives to tools.
pub struct GatewayApprovals {
    state: Weak<GatewayState>,
    table: Arc<ApprovalTable>,
}

impl GatewayApprovals {
    pub fn new(state: Weak<GatewayState>, table: Arc<ApprovalTable>) -> Self {
        Self { state, table }
    }
}

impl ApprovalGate for GatewayApprovals {
    fn decide(&self, request: ApprovalRequest, timeout: Duration) -> DecisionFuture<'_> {
        Box::pin(async move {
            let state = self.state.upgrade().ok_or(ApprovalError::NoApprover)?;
            ask(&state, None, request, timeout).await
        })
    }

    fn allowlisted(&self, agent_id: &str, command: &str) -> bool {
        self.table.allowlisted(agent_id, command)
    }
}

/// True when a connected operator can resolve approvals.
fn has_approver(state: &GatewayState) -> bool {
    state
        .clients
        .infos()
        .iter()
        .any(|info| info.may_see(Some(scopes::APPROVALS)))
}

fn pending_json(pending: &PendingApproval) -> Value {
    serde_json::to_value(pending).unwrap_or(Value::Null)
}

/// Opens a pending approval, announces it and waits for the decision or the timeout.
async fn ask(
    state: &GatewayState,
    id: Option<String>,
    request: ApprovalRequest,
    timeout: Duration,
) -> Result<ApprovalDecision, ApprovalError> {
    if !has_approver(state) {
        return Err(ApprovalError::NoApprover);
    }
    let (pending, decision) = state
        .services
        .approvals
        .open(id, request, now_ms(), timeout)?;
    state.clients.broadcast(
        "exec.approval.requested",
        &pending_json(&pending),
        BroadcastOptions {
            drop_if_slow: true,
            scope: Some(scopes::APPROVALS),
            state_version: None,
        },
    );
    match tokio::time::timeout(timeout, decision).await {
        Ok(Ok(decision)) => Ok(decision),
        Ok(Err(_)) | Err(_) => {
            state.services.approvals.expire(&pending.id);
            Err(ApprovalError::TimedOut(timeout.as_millis() as u64))
        }
    }
}

fn error_shape(error: ApprovalError) -> ErrorShape {
    ErrorShape::invalid(error.to_string())
}

/// `exec.approval.request`: a client asks for a decision; answers once decided (or with
/// `decision: null` on timeout).
pub async fn request(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("exec.approval.request", params)?;
    let command = p.str("command", false)?.to_owned();
    let timeout_ms = p
        .opt_u64("timeoutMs", 1, MAX_APPROVAL_TIMEOUT_MS)?
        .unwrap_or(DEFAULT_EXEC_APPROVAL_TIMEOUT_MS);
    let id = p
        .opt_str("id")?
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
    let text = |name: &str| -> Result<Option<String>, ErrorShape> {
        Ok(p.opt_str(name)?.map(str::to_owned))
    };
    let request = ApprovalRequest {
        command,
        cwd: text("cwd")?,
        host: text("host")?,
        security: text("security")?,
        ask: text("ask")?,
        agent_id: text("agentId")?,
        session_key: text("sessionKey")?,
    };
    let created_at_ms = now_ms();
    let timeout = Duration::from_millis(timeout_ms);
    let decision = match ask(state, Some(id.clone()), request, timeout).await {
        Ok(decision) => json!(decision),
        Err(ApprovalError::TimedOut(_) | ApprovalError::NoApprover) => Value::Null,
        Err(error) => return Err(error_shape(error)),
    };
    Ok(json!({
        "id": id, "decision": decision,
        "createdAtMs": created_at_ms, "expiresAtMs": created_at_ms + timeout_ms,
    }))
}

/// `exec.approval.waitDecision`: waits for a pending approval's decision (`null` on expiry).
pub async fn wait_decision(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("exec.approval.waitDecision", params)?;
    let id = p.str("id", false)?.trim();
    let snapshot = state.services.approvals.get(id, now_ms());
    let (Some(snapshot), Some(waiter)) = (snapshot, state.services.approvals.waiter(id)) else {
        return Err(ErrorShape::invalid("approval expired or not found"));
    };
    let left = snapshot.expires_at_ms.saturating_sub(now_ms());
    let decision = match tokio::time::timeout(Duration::from_millis(left), waiter).await {
        Ok(Ok(Some(decision))) => json!(decision),
        _ => Value::Null,
    };
    Ok(json!({
        "id": id, "decision": decision,
        "createdAtMs": snapshot.created_at_ms, "expiresAtMs": snapshot.expires_at_ms,
    }))
}

/// `exec.approval.resolve`: records an operator's decision and broadcasts it.
pub fn resolve(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("exec.approval.resolve", params)?;
    let id = p.str("id", false)?.trim();
    let text = p.str("decision", false)?;
    let decision = ApprovalDecision::parse(text).ok_or_else(|| {
        ErrorShape::invalid(format!(
            "invalid exec.approval.resolve params: decision must be allow-once, allow-always or deny, got {text:?}"
        ))
    })?;
    let resolved = state
        .services
        .approvals
        .resolve(id, decision, now_ms())
        .map_err(error_shape)?;
    state.clients.broadcast(
        "exec.approval.resolved",
        &json!({"id": resolved.id, "decision": decision, "ts": now_ms(), "request": resolved.request}),
        BroadcastOptions {
            drop_if_slow: true,
            scope: Some(scopes::APPROVALS),
            state_version: None,
        },
    );
    Ok(json!({"ok": true}))
}

/// `exec.approval.list`: the pending approvals.
pub fn list(state: &GatewayState) -> Result<Value, ErrorShape> {
    let pending: Vec<Value> = state
        .services
        .approvals
        .list(now_ms())
        .iter()
        .map(pending_json)
        .collect();
    Ok(json!({"approvals": pending}))
}

/// `exec.approval.get`: one pending approval.
pub fn get(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("exec.approval.get", params)?;
    let id = p.str("id", false)?.trim();
    state
        .services
        .approvals
        .get(id, now_ms())
        .map(|pending| pending_json(&pending))
        .ok_or_else(|| ErrorShape::invalid("unknown or expired approval id"))
}
