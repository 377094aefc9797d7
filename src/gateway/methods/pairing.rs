//! DM pairing codes for the Control UI and the CLI: `pairing.list` and
//! `pairing.approve` (the names `openclaw-node`'s client uses), and
//! upstream's `channels.pairing.list`, `.approve` and `.dismiss` (a request's
//! id is its code). All need `operator.pairing`.
//!
//! The codes and approvals live in the store; the policy constants come
//! from `pipeline::access`. This file must not decide who may DM.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::config::{Config, DmPolicy};
use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;
use crate::pipeline::access::{MAX_PENDING_PAIRINGS, PAIRING_CODE_TTL_MS};
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

/// Channel accounts that use DM pairing (`dmPolicy` pairing, the default).
fn pairing_accounts(config: &Config) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(telegram) = &config.channels.telegram {
        for id in telegram.account_ids() {
            if telegram
                .account(&id)
                .is_some_and(|a| a.effective_dm_policy() == DmPolicy::Pairing)
            {
                out.push(("telegram", id));
            }
        }
    }
    if let Some(discord) = &config.channels.discord {
        for id in discord.account_ids() {
            if discord
                .account(&id)
                .is_some_and(|a| a.effective_dm_policy() == DmPolicy::Pairing)
            {
                out.push(("discord", id));
            }
        }
    }
    if let Some(slack) = &config.channels.slack {
        for id in slack.account_ids() {
            if slack
                .account(&id)
                .is_some_and(|a| a.effective_dm_policy() == DmPolicy::Pairing)
            {
                out.push(("slack", id));
            }
        }
    }
    out
}

fn iso(ms: u64) -> String {
    jiff::Timestamp::from_millisecond(ms as i64)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn matches(filter: Option<&str>, value: &str) -> bool {
    filter.is_none_or(|f| f.trim().eq_ignore_ascii_case(value))
}

/// `channels.pairing.list {channel?, accountId?}`: upstream's
/// `{accounts, requests, commandOwnerConfigured, limits}`.
pub fn channels_list(state: &Arc<GatewayState>, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("channels.pairing.list", params)?;
    let channel = p.opt_str("channel")?;
    let account = p.opt_str("accountId")?;
    let config = state.config();
    let accounts: Vec<(&str, String)> = pairing_accounts(&config)
        .into_iter()
        .filter(|(c, a)| matches(channel, c) && matches(account, a))
        .collect();
    let store = &state.services.store;
    let pending = store
        .dm_pairing_list(channel, now_ms(), PAIRING_CODE_TTL_MS)
        .map_err(store_error)?;
    let requests: Vec<Value> = pending
        .into_iter()
        .filter(|(c, p)| {
            accounts
                .iter()
                .any(|(ac, aa)| ac == c && *aa == p.account_id)
        })
        .map(|(c, p)| {
            let mut request = json!({
                "requestId": p.code, "channel": c, "channelLabel": super::figures::label(&c),
                "accountId": p.account_id, "senderId": p.sender_id, "senderLabel": "user id",
                "createdAt": iso(p.created_at_ms), "lastSeenAt": iso(p.created_at_ms),
                "expiresAt": iso(p.created_at_ms + PAIRING_CODE_TTL_MS), "notifySupported": false,
            });
            if let Some(name) = p.sender_name {
                request["metadata"] = json!({"name": name});
            }
            request
        })
        .collect();
    let accounts: Vec<Value> = accounts
        .iter()
        .map(|(c, a)| json!({"channel": c, "channelLabel": super::figures::label(c), "accountId": a, "notifySupported": false}))
        .collect();
    let owner = store.dm_pairing_owner().map_err(store_error)?;
    Ok(json!({
        "accounts": accounts,
        "requests": requests,
        "commandOwnerConfigured": owner.is_some() || !config.commands.owner_allow_from.is_empty(),
        "limits": {"pendingPerAccount": MAX_PENDING_PAIRINGS, "ttlMs": PAIRING_CODE_TTL_MS},
    }))
}

/// The `{channel, accountId, requestId}` of an approve or dismiss, checked
/// against the accounts that use pairing.
fn target<'a>(
    state: &GatewayState,
    method: &str,
    p: &'a Params<'a>,
) -> Result<(&'a str, &'a str), ErrorShape> {
    let channel = p.str("channel", false)?;
    let account = p.str("accountId", false)?;
    let request = p.str("requestId", false)?;
    let uses_pairing = pairing_accounts(&state.config())
        .iter()
        .any(|(c, a)| c.eq_ignore_ascii_case(channel.trim()) && a == account);
    if !uses_pairing {
        return Err(ErrorShape::invalid(format!(
            "channel account does not use DM pairing: {channel}:{account} ({method})"
        )));
    }
    Ok((channel, request))
}

/// `channels.pairing.approve {channel, accountId, requestId, notify?}`.
pub fn channels_approve(state: &Arc<GatewayState>, params: &Value) -> Result<Value, ErrorShape> {
    let method = "channels.pairing.approve";
    let p = Params::new(method, params)?;
    let (channel, request) = target(state, method, &p)?;
    let notify = p.opt_bool("notify")?.unwrap_or(false);
    let approval = state
        .services
        .store
        .dm_pairing_approve(channel, request, now_ms(), PAIRING_CODE_TTL_MS)
        .map_err(store_error)?
        .ok_or_else(|| ErrorShape::invalid("pending DM access request no longer exists"))?;
    Ok(json!({
        "requestId": request, "senderId": approval.sender_id,
        // pincer's adapters send no approval notice.
        "notification": if notify { "unsupported" } else { "not-requested" },
        "commandOwnerBootstrap": if approval.seeded_owner { "configured" } else { "not-requested" },
    }))
}

/// `channels.pairing.dismiss {channel, accountId, requestId}`: the code goes
/// without approving its sender.
pub fn channels_dismiss(state: &Arc<GatewayState>, params: &Value) -> Result<Value, ErrorShape> {
    let method = "channels.pairing.dismiss";
    let p = Params::new(method, params)?;
    let (channel, request) = target(state, method, &p)?;
    let dismissed = state
        .services
        .store
        .dm_pairing_dismiss(channel, request, now_ms(), PAIRING_CODE_TTL_MS)
        .map_err(store_error)?
        .ok_or_else(|| ErrorShape::invalid("pending DM access request no longer exists"))?;
    Ok(json!({"requestId": request, "senderId": dismissed.sender_id}))
}
