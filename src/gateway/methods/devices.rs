//! `device.pair.*` and `device.token.*`: approving, rejecting and removing
//! paired devices, and rotating or revoking their tokens.

use serde_json::{json, Value};

use crate::gateway::clients::{BroadcastOptions, ClientInfo};
use crate::gateway::frames::ErrorShape;
use crate::gateway::pairing;
use crate::gateway::scopes;
use crate::gateway::state::GatewayState;
use crate::store::DeviceRecord;
use crate::system::clock::now_ms;

use super::params::Params;
use super::sessions::store_error;

/// A paired device as listed: token metadata, never token material.
fn device_json(state: &GatewayState, record: &DeviceRecord) -> Value {
    let connected = state
        .clients
        .infos()
        .iter()
        .any(|c| c.device_id.as_deref() == Some(record.device_id.as_str()));
    let tokens: Vec<Value> = record
        .tokens
        .iter()
        .map(|t| json!({"role": t.role, "scopes": t.scopes, "createdAtMs": t.issued_at_ms, "revokedAtMs": t.revoked_at_ms}))
        .collect();
    json!({
        "deviceId": record.device_id,
        "publicKey": record.public_key,
        "displayName": record.display_name,
        "platform": record.platform,
        "deviceFamily": record.device_family,
        "clientId": record.client_id,
        "clientMode": record.client_mode,
        "role": record.roles.first(),
        "roles": record.roles,
        "scopes": record.scopes,
        "remoteIp": record.remote_ip,
        "createdAtMs": record.created_at_ms,
        "approvedAtMs": record.approved_at_ms,
        "lastSeenAtMs": record.last_seen_at_ms,
        "connected": connected,
        "tokens": tokens,
    })
}

fn resolved(state: &GatewayState, request_id: &str, device_id: &str, decision: &str) {
    state.clients.broadcast(
        "device.pair.resolved",
        &json!({"requestId": request_id, "deviceId": device_id, "decision": decision, "ts": now_ms()}),
        BroadcastOptions { drop_if_slow: true, scope: Some(scopes::PAIRING), state_version: None },
    );
}

/// `device.pair.list`.
pub fn list(state: &GatewayState) -> Result<Value, ErrorShape> {
    let pending: Vec<Value> = state
        .services.store
        .pair_requests()
        .map_err(store_error)?
        .into_iter()
        .map(|r| {
            json!({
                "requestId": r.request_id, "deviceId": r.device_id, "publicKey": r.public_key,
                "displayName": r.display_name, "platform": r.platform, "clientId": r.client_id,
                "clientMode": r.client_mode, "role": r.role, "scopes": r.scopes, "remoteIp": r.remote_ip,
                "reason": r.reason, "ts": r.created_at_ms,
            })
        })
        .collect();
    let paired: Vec<Value> = state
        .services
        .store
        .devices()
        .map_err(store_error)?
        .iter()
        .filter(|d| d.approved_at_ms.is_some())
        .map(|d| device_json(state, d))
        .collect();
    Ok(json!({"pending": pending, "paired": paired}))
}

/// `device.pair.approve`.
pub fn approve(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("device.pair.approve", params)?;
    let request_id = p.str("requestId", false)?;
    let record = pairing::approve(&state.services.store, request_id, now_ms())
        .map_err(store_error)?
        .ok_or_else(|| ErrorShape::invalid("unknown requestId"))?;
    log::info!("device {} paired (request {request_id})", record.device_id);
    resolved(state, request_id, &record.device_id, "approved");
    Ok(json!({"requestId": request_id, "device": device_json(state, &record)}))
}

/// `device.pair.reject`.
pub fn reject(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("device.pair.reject", params)?;
    let request_id = p.str("requestId", false)?;
    let request = state
        .services
        .store
        .take_pair_request(request_id)
        .map_err(store_error)?
        .ok_or_else(|| ErrorShape::invalid("unknown requestId"))?;
    resolved(state, request_id, &request.device_id, "rejected");
    Ok(json!({"requestId": request_id, "deviceId": request.device_id}))
}

/// `device.pair.remove`: forgets a device and closes its connections.
pub fn remove(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("device.pair.remove", params)?;
    let device_id = p.str("deviceId", false)?.trim().to_ascii_lowercase();
    if !state
        .services
        .store
        .remove_device(&device_id)
        .map_err(store_error)?
    {
        return Err(ErrorShape::invalid(format!(
            "unknown deviceId: {device_id}"
        )));
    }
    state
        .clients
        .close_device(&device_id, 1008, "device removed");
    Ok(json!({"deviceId": device_id, "removedAtMs": now_ms()}))
}

fn load_device(state: &GatewayState, device_id: &str) -> Result<DeviceRecord, ErrorShape> {
    state
        .services
        .store
        .device(device_id)
        .map_err(store_error)?
        .filter(|d| d.approved_at_ms.is_some())
        .ok_or_else(|| ErrorShape::invalid(format!("unknown deviceId: {device_id}")))
}

/// `device.token.rotate`: a new token for a role; only the device itself
/// receives the secret in-band.
pub fn rotate(
    state: &GatewayState,
    caller: &ClientInfo,
    params: &Value,
) -> Result<Value, ErrorShape> {
    let p = Params::new("device.token.rotate", params)?;
    let device_id = p.str("deviceId", false)?.trim().to_ascii_lowercase();
    let role = p.str("role", false)?;
    let mut record = load_device(state, &device_id)?;
    if !record.roles.iter().any(|r| r == role) {
        return Err(ErrorShape::invalid(format!(
            "device {device_id} is not paired for role {role}"
        )));
    }
    let scopes: Vec<String> = match p.raw("scopes") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| v.as_str().map(String::from))
            .collect(),
        Some(_) => {
            return Err(ErrorShape::invalid(
                "invalid device.token.rotate params: scopes must be an array of strings",
            ))
        }
        None => record.scopes.clone(),
    };
    if let Some(extra) = scopes.iter().find(|s| !record.scopes.contains(s)) {
        return Err(ErrorShape::invalid(format!(
            "device token rotation denied: scope {extra} was never approved for this device"
        )));
    }
    let now = now_ms();
    let token = pairing::issue_token(&state.services.store, &mut record, role, &scopes, now)
        .map_err(store_error)?;
    let mut answer =
        json!({"deviceId": device_id, "role": role, "scopes": scopes, "rotatedAtMs": now});
    if caller.device_id.as_deref() == Some(device_id.as_str()) {
        answer["token"] = json!(token);
    }
    Ok(answer)
}

/// `device.token.revoke`: the role's token stops working at once.
pub fn revoke(state: &GatewayState, params: &Value) -> Result<Value, ErrorShape> {
    let p = Params::new("device.token.revoke", params)?;
    let device_id = p.str("deviceId", false)?.trim().to_ascii_lowercase();
    let role = p.str("role", false)?;
    let mut record = load_device(state, &device_id)?;
    let now = now_ms();
    let mut revoked = false;
    for token in record
        .tokens
        .iter_mut()
        .filter(|t| t.role == role && t.revoked_at_ms.is_none())
    {
        token.revoked_at_ms = Some(now);
        revoked = true;
    }
    if !revoked {
        return Err(ErrorShape::invalid(format!(
            "device {device_id} has no live token for role {role}"
        )));
    }
    state
        .services
        .store
        .put_device(&record)
        .map_err(store_error)?;
    Ok(json!({"deviceId": device_id, "role": role, "revokedAtMs": now}))
}
