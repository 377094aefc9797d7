//! Device pairing: which device identities may connect, with which role and
//! scopes, and the device tokens they are issued.
//!
//! A device on loopback is approved silently (it is on the box already); a
//! remote one gets a pending request an operator approves with
//! `device.pair.approve` (or `pincer devices approve`). Device tokens are kept
//! only as hashes; a token is shown once, when issued.

use crate::store::{DeviceRecord, DeviceToken, PairRequest, Store, StoreError};

use super::device_auth::{new_device_token, token_hash};

/// Pending requests kept at most (the oldest expire after five minutes).
pub const MAX_PENDING_PAIR_REQUESTS: usize = 64;

/// Who is asking to connect.
#[derive(Debug, Clone)]
pub struct PairingAsk<'a> {
    pub device_id: &'a str,
    pub public_key: &'a str,
    pub role: &'a str,
    pub scopes: &'a [String],
    pub client_id: &'a str,
    pub client_mode: &'a str,
    pub display_name: Option<&'a str>,
    pub platform: Option<&'a str>,
    pub device_family: Option<&'a str>,
    pub remote_ip: String,
    pub is_loopback: bool,
}

/// The outcome of a pairing check.
#[derive(Debug, Clone, PartialEq)]
pub enum PairingDecision {
    Approved(Box<DeviceRecord>),
    /// The device must be approved first; `reason` is upstream's word for why.
    Required {
        request_id: String,
        reason: &'static str,
        created: bool,
    },
}

fn covers(record: &DeviceRecord, role: &str, scopes: &[String]) -> bool {
    record.roles.iter().any(|r| r == role) && scopes.iter().all(|s| record.scopes.contains(s))
}

fn merge_into(record: &mut DeviceRecord, ask: &PairingAsk<'_>, now_ms: u64) {
    if !record.roles.iter().any(|r| r == ask.role) {
        record.roles.push(ask.role.to_string());
    }
    for scope in ask.scopes {
        if !record.scopes.contains(scope) {
            record.scopes.push(scope.clone());
        }
    }
    record.display_name = ask
        .display_name
        .map(String::from)
        .or(record.display_name.take());
    record.platform = ask.platform.map(String::from).or(record.platform.take());
    record.device_family = ask
        .device_family
        .map(String::from)
        .or(record.device_family.take());
    record.client_id = Some(ask.client_id.to_string());
    record.client_mode = Some(ask.client_mode.to_string());
    record.last_seen_at_ms = Some(now_ms);
    record.remote_ip = Some(ask.remote_ip.clone());
}

/// Decides whether a verified device may connect, approving loopback devices.
pub fn evaluate(
    store: &Store,
    ask: &PairingAsk<'_>,
    now_ms: u64,
) -> Result<PairingDecision, StoreError> {
    let existing = store.device(ask.device_id)?;
    let reason = match &existing {
        Some(record) if record.approved_at_ms.is_some() && covers(record, ask.role, ask.scopes) => {
            let mut record = record.clone();
            merge_into(&mut record, ask, now_ms);
            store.put_device(&record)?;
            return Ok(PairingDecision::Approved(Box::new(record)));
        }
        Some(record) if record.approved_at_ms.is_some() => {
            if record.roles.iter().any(|r| r == ask.role) {
                "scope-upgrade"
            } else {
                "role-upgrade"
            }
        }
        _ => "not-paired",
    };
    if ask.is_loopback {
        let mut record = existing.unwrap_or_else(|| new_record(ask, now_ms));
        merge_into(&mut record, ask, now_ms);
        record.approved_at_ms.get_or_insert(now_ms);
        store.put_device(&record)?;
        return Ok(PairingDecision::Approved(Box::new(record)));
    }
    let pending = store.pair_requests()?;
    if let Some(open) = pending.iter().find(|r| r.device_id == ask.device_id) {
        return Ok(PairingDecision::Required {
            request_id: open.request_id.clone(),
            reason,
            created: false,
        });
    }
    let request_id = uuid::Uuid::new_v4().to_string();
    let created = pending.len() < MAX_PENDING_PAIR_REQUESTS;
    if created {
        store.put_pair_request(&PairRequest {
            request_id: request_id.clone(),
            device_id: ask.device_id.to_string(),
            public_key: ask.public_key.to_string(),
            display_name: ask.display_name.map(String::from),
            platform: ask.platform.map(String::from),
            client_id: Some(ask.client_id.to_string()),
            client_mode: Some(ask.client_mode.to_string()),
            role: ask.role.to_string(),
            scopes: ask.scopes.to_vec(),
            remote_ip: Some(ask.remote_ip.clone()),
            reason: reason.to_string(),
            created_at_ms: now_ms,
        })?;
    }
    Ok(PairingDecision::Required {
        request_id,
        reason,
        created,
    })
}

/// Pairs a device as approved for `ask`'s role and scopes, with no request
/// (the browser that completed first-run setup: its owner's).
pub fn approve_directly(
    store: &Store,
    ask: &PairingAsk<'_>,
    now_ms: u64,
) -> Result<DeviceRecord, StoreError> {
    let mut record = store
        .device(ask.device_id)?
        .unwrap_or_else(|| new_record(ask, now_ms));
    merge_into(&mut record, ask, now_ms);
    record.approved_at_ms = Some(now_ms);
    store.put_device(&record)?;
    Ok(record)
}

fn new_record(ask: &PairingAsk<'_>, now_ms: u64) -> DeviceRecord {
    DeviceRecord {
        device_id: ask.device_id.to_string(),
        public_key: ask.public_key.to_string(),
        display_name: None,
        platform: None,
        device_family: None,
        client_id: None,
        client_mode: None,
        roles: Vec::new(),
        scopes: Vec::new(),
        tokens: Vec::new(),
        created_at_ms: now_ms,
        approved_at_ms: None,
        last_seen_at_ms: None,
        remote_ip: None,
    }
}

/// Approves a pending request; returns the paired device.
pub fn approve(
    store: &Store,
    request_id: &str,
    now_ms: u64,
) -> Result<Option<DeviceRecord>, StoreError> {
    let Some(request) = store.take_pair_request(request_id)? else {
        return Ok(None);
    };
    let mut record = match store.device(&request.device_id)? {
        Some(record) => record,
        None => new_record_from(&request, now_ms),
    };
    if !record.roles.contains(&request.role) {
        record.roles.push(request.role.clone());
    }
    for scope in &request.scopes {
        if !record.scopes.contains(scope) {
            record.scopes.push(scope.clone());
        }
    }
    record.approved_at_ms = Some(now_ms);
    store.put_device(&record)?;
    Ok(Some(record))
}

fn new_record_from(request: &PairRequest, now_ms: u64) -> DeviceRecord {
    DeviceRecord {
        device_id: request.device_id.clone(),
        public_key: request.public_key.clone(),
        display_name: request.display_name.clone(),
        platform: request.platform.clone(),
        device_family: None,
        client_id: request.client_id.clone(),
        client_mode: request.client_mode.clone(),
        roles: Vec::new(),
        scopes: Vec::new(),
        tokens: Vec::new(),
        created_at_ms: now_ms,
        approved_at_ms: None,
        last_seen_at_ms: None,
        remote_ip: request.remote_ip.clone(),
    }
}

/// Issues (or replaces) the device token for one role; returns the secret.
pub fn issue_token(
    store: &Store,
    record: &mut DeviceRecord,
    role: &str,
    scopes: &[String],
    now_ms: u64,
) -> Result<String, StoreError> {
    let token = new_device_token();
    record.tokens.retain(|t| t.role != role);
    record.tokens.push(DeviceToken {
        token_hash: token_hash(&token),
        role: role.to_string(),
        scopes: scopes.to_vec(),
        issued_at_ms: now_ms,
        revoked_at_ms: None,
    });
    store.put_device(record)?;
    Ok(token)
}

/// Whether `token` is this device's live token for `role`.
pub fn token_valid(record: &DeviceRecord, role: &str, token: &str) -> bool {
    let hash = token_hash(token);
    record.tokens.iter().any(|t| {
        t.role == role
            && t.revoked_at_ms.is_none()
            && super::auth::secrets_equal(&t.token_hash, &hash)
    })
}

/// Whether this device holds a live token for `role` at all.
pub fn has_live_token(record: &DeviceRecord, role: &str) -> bool {
    record
        .tokens
        .iter()
        .any(|t| t.role == role && t.revoked_at_ms.is_none())
}
