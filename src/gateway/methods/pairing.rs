//! `pairing.list` and `pairing.approve`: DM pairing codes for the Control
//! UI and the CLI (the names `openclaw-node`'s client uses; OpenClaw itself
//! only offers these through its CLI). Both need `operator.pairing`.
//!
//! The codes and approvals live in the store; the policy constants come
//! from `pipeline::access`. This file must not decide who may DM.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;
use crate::pipeline::access::PAIRING_CODE_TTL_MS;
use crate::system::clock::now_ms;

use super::params::Params;

fn store_error(error: crate::store::StoreError) -> ErrorShape {
    ErrorShape::unavailable(format!("pairing store: {error}"))
}

/// `pairing.list {channel?}` → `{pending: [{channel, code, accountId, id, name, createdAt}]}`.
pub fn list(state: &Arc<GatewayState>, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("pairing.list", params)?;
    let channel = p.opt_str("channel")?;
    let pending = state
        .services
        .store
        .dm_pairing_list(channel, now_ms(), PAIRING_CODE_TTL_MS)
        .map_err(store_error)?;
    let rows: Vec<Value> = pending
        .into_iter()
        .map(|(channel, p)| {
            json!({
                "channel": channel, "code": p.code, "accountId": p.account_id,
                "id": p.sender_id, "name": p.sender_name, "createdAt": p.created_at_ms,
            })
        })
        .collect();
    Ok(json!({ "pending": rows }))
}

/// `pairing.approve {channel, code}` → `{approved, channel, id, accountId, ownerSeeded}`.
pub fn approve(state: &Arc<GatewayState>, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("pairing.approve", params)?;
    let channel = p.str("channel", false)?;
    let code = p.str("code", false)?;
    let approval = state
        .services
        .store
        .dm_pairing_approve(channel, code, now_ms(), PAIRING_CODE_TTL_MS)
        .map_err(store_error)?;
    match approval {
        None => Err(ErrorShape::invalid(format!(
            "no pending pairing code {code} for channel {channel} (unknown or expired)"
        ))),
        Some(approval) => Ok(json!({
            "approved": true, "channel": channel.trim().to_lowercase(), "id": approval.sender_id,
            "accountId": approval.account_id, "ownerSeeded": approval.seeded_owner,
        })),
    }
}
