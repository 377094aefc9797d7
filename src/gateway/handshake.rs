//! The `connect` decision: protocol negotiation, shared-secret or device-token
//! auth with the failure limiter, device proof, pairing, scopes, and the
//! `hello-ok` payload.
//!
//! Produces either an accepted client or a refusal carrying the error, the
//! close code and the close reason; `ws.rs` does the socket work.

use std::net::IpAddr;

use serde_json::{json, Value};

use super::auth::check_shared_secret;
use super::clients::ClientInfo;
use super::connect_params::ConnectParams;
use super::device_auth::{self, SignedContext};
use super::frames::{ErrorCode, ErrorShape, MIN_PROTOCOL_VERSION, PROTOCOL_VERSION};
use super::pairing::{self, PairingAsk, PairingDecision};
use super::scopes;
use super::state::GatewayState;
use crate::routing::session_key::scoped_main_session_key;

/// A refused handshake.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub error: ErrorShape,
    pub close_code: u16,
    pub close_reason: String,
}

impl Refusal {
    fn policy(error: ErrorShape, reason: &str) -> Refusal {
        Refusal {
            error,
            close_code: 1008,
            close_reason: reason.to_string(),
        }
    }
}

/// An accepted handshake.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub info: ClientInfo,
    pub device_token: Option<String>,
    pub issued_at_ms: Option<u64>,
}

/// Picks the protocol version both sides speak.
pub fn negotiate(min: u32, max: u32) -> Result<u32, Refusal> {
    if max < MIN_PROTOCOL_VERSION || min > PROTOCOL_VERSION || min > max {
        return Err(Refusal {
            error: ErrorShape::invalid("protocol mismatch").with_details(json!({
                "expectedProtocol": PROTOCOL_VERSION,
                "minimumProbeProtocol": MIN_PROTOCOL_VERSION,
            })),
            close_code: 1002,
            close_reason: "protocol mismatch".into(),
        });
    }
    Ok(max.min(PROTOCOL_VERSION))
}

fn auth_refusal(code: &str, message: &str, next_step: &str) -> Refusal {
    Refusal::policy(
        ErrorShape::invalid(message).with_details(json!({
            "code": code,
            "authReason": code.to_ascii_lowercase(),
            "canRetryWithDeviceToken": false,
            "recommendedNextStep": next_step,
        })),
        "unauthorized",
    )
}

/// Where a connection comes from, as its upgrade request said.
#[derive(Debug, Clone, Default)]
pub struct Peer {
    pub ip: Option<IpAddr>,
    /// The `Origin` header: a browser page.
    pub origin: Option<String>,
    /// The `Host` header.
    pub host: Option<String>,
    /// A proxy's headers (`Forwarded`, `X-Forwarded-*`, `X-Real-IP`): the
    /// caller is not the socket's peer (Tailscale serve and funnel set them).
    pub forwarded: bool,
}

impl Peer {
    /// The socket's address (unspecified when unknown).
    pub fn addr(&self) -> IpAddr {
        self.ip
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    pub fn browser(&self) -> bool {
        self.origin.as_deref().is_some_and(|o| !o.trim().is_empty())
    }

    /// On this machine and not through a proxy (upstream's `isLocalDirectRequest`).
    pub fn local_direct(&self) -> bool {
        self.addr().is_loopback() && !self.forwarded
    }

    /// On the LAN or this machine, not through a proxy: who may use first-run setup.
    pub fn lan_direct(&self) -> bool {
        !self.forwarded && super::origin::is_lan_or_loopback(self.addr())
    }
}

/// The Control UI's client id (upstream's `GATEWAY_CLIENT_NAMES.CONTROL_UI`).
pub const CONTROL_UI_CLIENT_ID: &str = "openclaw-control-ui";

/// Refuses a browser page whose origin is not allowed (upstream's words).
fn check_origin(state: &GatewayState, peer: &Peer) -> Result<(), Refusal> {
    let Some(origin) = peer.origin.as_deref().filter(|o| !o.trim().is_empty()) else {
        return Ok(());
    };
    let config = state.config();
    let allowed = &config.gateway.control_ui.allowed_origins;
    super::origin::check(origin, peer.host.as_deref(), allowed, peer.local_direct())
        .map(|_| ())
        .map_err(|reason| {
            let message = "origin not allowed (open the Control UI from the gateway host or allow it in gateway.controlUi.allowedOrigins)";
            Refusal::policy(
                ErrorShape::invalid(message)
                    .with_details(json!({"code": "CONTROL_UI_ORIGIN_NOT_ALLOWED", "reason": reason})),
                message,
            )
        })
}

/// Runs the whole decision for one `connect`.
pub fn decide(
    state: &GatewayState,
    params: &ConnectParams,
    nonce: &str,
    peer: &Peer,
    conn_id: &str,
    now_ms: u64,
) -> Result<Accepted, Refusal> {
    let ip = peer.addr();
    let local_non_browser = peer.local_direct() && !peer.browser();
    let protocol = negotiate(params.min_protocol, params.max_protocol)?;
    if params.role != "operator" {
        return Err(Refusal::policy(
            ErrorShape::invalid("invalid connect params: role \"node\" is not supported by pincer"),
            "role not supported",
        ));
    }
    check_origin(state, peer)?;
    if let Some(wait_ms) = state.limiter.locked_for(ip, now_ms) {
        return Err(Refusal::policy(
            ErrorShape::invalid(
                "unauthorized: too many failed authentication attempts (retry later)",
            )
            .with_details(json!({"code": "AUTH_RATE_LIMITED", "retryAfterMs": wait_ms}))
            .retry_after(wait_ms),
            "unauthorized",
        ));
    }
    let requested: Vec<String> = params
        .scopes
        .iter()
        .filter(|s| scopes::is_known_scope(s))
        .cloned()
        .collect();
    // Verify the device proof before anything is granted on its behalf.
    let signed_token = params
        .auth
        .token
        .clone()
        .or_else(|| params.auth.device_token.clone())
        .or_else(|| params.bootstrap_token.clone())
        .unwrap_or_default();
    if let Some(proof) = &params.device {
        let ctx = SignedContext {
            client_id: &params.client.id,
            client_mode: &params.client.mode,
            role: &params.role,
            scopes: &params.scopes,
            token: &signed_token,
            platform: Some(&params.client.platform),
            device_family: params.client.device_family.as_deref(),
        };
        if let Err(e) = device_auth::verify(proof, &ctx, nonce, now_ms) {
            return Err(Refusal::policy(
                ErrorShape::invalid(e.message)
                    .with_details(json!({"code": e.code, "reason": e.reason})),
                e.message,
            ));
        }
    }
    let device_id = params
        .device
        .as_ref()
        .map(|d| d.id.trim().to_ascii_lowercase());
    let secret = state.secret();
    let shared = check_shared_secret(&secret, &params.auth);
    let mut via_device_token = false;
    if let Err(failure) = &shared {
        let presented = params
            .auth
            .device_token
            .as_deref()
            .or(params.auth.token.as_deref());
        let record = match (&device_id, presented) {
            (Some(id), Some(_)) => state.services.store.device(id).ok().flatten(),
            _ => None,
        };
        via_device_token = matches!((&record, presented),
            (Some(r), Some(t)) if r.approved_at_ms.is_some() && pairing::token_valid(r, &params.role, t));
        if !via_device_token {
            // No credential at all from a Control UI page while setup is open: a setup session.
            if let Some(grant) = super::setup::grant(state, params, peer) {
                let device_id = Some(grant.device_id.clone());
                let mut info =
                    client_info(params, conn_id, ip, protocol, Vec::new(), device_id, now_ms);
                info.setup = Some(grant);
                return Ok(Accepted {
                    info,
                    device_token: None,
                    issued_at_ms: None,
                });
            }
            state.limiter.record_failure(ip, now_ms);
            let (code, message) = if params.auth.device_token.is_some() && record.is_some() {
                (
                    "AUTH_DEVICE_TOKEN_MISMATCH",
                    "unauthorized: device token mismatch (rotate or re-pair the device)"
                        .to_string(),
                )
            } else {
                (failure.code, failure.message.clone())
            };
            return Err(auth_refusal(
                code,
                &message,
                "set the gateway token (OPENCLAW_GATEWAY_TOKEN) and reconnect",
            ));
        }
    }
    state.limiter.record_success(ip);
    let control_ui = params.client.id == CONTROL_UI_CLIENT_ID;
    if control_ui && params.device.is_none() {
        // Upstream's rule: the Control UI proves a device, except on this
        // machine with `allowInsecureAuth` (pages over plain HTTP have no
        // WebCrypto); pairing is never skipped for one that has a device.
        let insecure_ok = state.config().gateway.control_ui.allow_insecure_auth
            && peer.local_direct()
            && shared.is_ok();
        if !insecure_ok {
            let message =
                "control ui requires device identity (use HTTPS or localhost secure context)";
            return Err(Refusal::policy(
                ErrorShape::invalid(message)
                    .with_details(json!({"code": "CONTROL_UI_DEVICE_IDENTITY_REQUIRED"})),
                message,
            ));
        }
        let info = client_info(params, conn_id, ip, protocol, requested, None, now_ms);
        return Ok(Accepted {
            info,
            device_token: None,
            issued_at_ms: None,
        });
    }
    let mut granted = requested.clone();
    let mut device_token = None;
    let mut issued_at_ms = None;
    match (&params.device, &device_id) {
        (Some(proof), Some(id)) => {
            let ask = PairingAsk {
                device_id: id,
                public_key: &proof.public_key,
                role: &params.role,
                scopes: &requested,
                client_id: &params.client.id,
                client_mode: &params.client.mode,
                display_name: params.client.display_name.as_deref(),
                platform: Some(&params.client.platform),
                device_family: params.client.device_family.as_deref(),
                remote_ip: ip.to_string(),
                is_loopback: peer.local_direct(),
            };
            let decision = pairing::evaluate(&state.services.store, &ask, now_ms).map_err(|e| {
                Refusal::policy(
                    ErrorShape::unavailable(format!("device store unavailable: {e}")),
                    "store error",
                )
            })?;
            let mut record = match decision {
                PairingDecision::Approved(record) => *record,
                PairingDecision::Required {
                    request_id,
                    reason,
                    created,
                } => {
                    if created {
                        announce_pair_request(state, &ask, &request_id, reason, now_ms);
                    }
                    return Err(Refusal::policy(
                        ErrorShape::new(ErrorCode::NotPaired, "pairing required").with_details(json!({
                            "code": "PAIRING_REQUIRED", "requestId": request_id, "reason": reason,
                        })),
                        "pairing required",
                    ));
                }
            };
            granted.retain(|s| record.scopes.contains(s));
            if !via_device_token {
                let token = pairing::issue_token(
                    &state.services.store,
                    &mut record,
                    &params.role,
                    &granted,
                    now_ms,
                )
                .map_err(|e| {
                    Refusal::policy(
                        ErrorShape::unavailable(format!("device store unavailable: {e}")),
                        "store error",
                    )
                })?;
                device_token = Some(token);
                issued_at_ms = Some(now_ms);
            }
        }
        // Without a device identity a shared secret keeps its scopes only for
        // a local, non-browser caller (the OpenClaw CLI and backend clients on
        // the box); anyone else gets none and can only call `health`.
        _ if local_non_browser && shared.is_ok() => {}
        _ => granted.clear(),
    }
    Ok(Accepted {
        info: client_info(params, conn_id, ip, protocol, granted, device_id, now_ms),
        device_token,
        issued_at_ms,
    })
}

/// The accepted client as the registry keeps it.
fn client_info(
    params: &ConnectParams,
    conn_id: &str,
    ip: IpAddr,
    protocol: u32,
    scopes: Vec<String>,
    device_id: Option<String>,
    now_ms: u64,
) -> ClientInfo {
    ClientInfo {
        conn_id: conn_id.to_string(),
        ip,
        role: params.role.clone(),
        scopes,
        caps: params.caps.clone(),
        protocol,
        client_id: params.client.id.clone(),
        client_mode: params.client.mode.clone(),
        client_version: params.client.version.clone(),
        platform: Some(params.client.platform.clone()),
        device_family: params.client.device_family.clone(),
        display_name: params.client.display_name.clone(),
        instance_id: params.client.instance_id.clone(),
        device_id,
        connected_at_ms: now_ms,
        setup: None,
    }
}

fn announce_pair_request(
    state: &GatewayState,
    ask: &PairingAsk<'_>,
    request_id: &str,
    reason: &str,
    now_ms: u64,
) {
    let payload = json!({
        "requestId": request_id,
        "deviceId": ask.device_id,
        "publicKey": ask.public_key,
        "displayName": ask.display_name,
        "platform": ask.platform,
        "clientId": ask.client_id,
        "clientMode": ask.client_mode,
        "role": ask.role,
        "scopes": ask.scopes,
        "remoteIp": ask.remote_ip,
        "reason": reason,
        "ts": now_ms,
    });
    log::info!(
        "device {} from {} asks to pair (request {request_id}); approve with `pincer devices approve {request_id}`",
        ask.device_id, ask.remote_ip
    );
    state.clients.broadcast(
        "device.pair.requested",
        &payload,
        super::clients::BroadcastOptions {
            drop_if_slow: true,
            scope: Some(scopes::PAIRING),
            state_version: None,
        },
    );
}

/// The `hello-ok` payload for an accepted client.
pub fn hello_ok(
    state: &GatewayState,
    accepted: &Accepted,
    methods: &[&str],
    events: &[&str],
) -> Value {
    let config = state.config();
    let default_agent = config.agents.default_agent_id();
    let main_key = config.session.main_key.clone();
    let mut auth = json!({"role": accepted.info.role, "scopes": accepted.info.scopes});
    if let Some(token) = &accepted.device_token {
        auth["deviceToken"] = json!(token);
        auth["issuedAtMs"] = json!(accepted.issued_at_ms);
    }
    let loaded = state.loaded();
    // The snapshot lists the connecting client too, as upstream's does.
    let mut presence = super::methods::health::presence_list(state);
    presence.push(accepted.info.presence());
    json!({
        "type": "hello-ok",
        "protocol": accepted.info.protocol,
        "server": {"version": state.version, "connId": accepted.info.conn_id, "host": state.host_name},
        "features": {"methods": methods, "events": events},
        "snapshot": {
            "presence": presence,
            "health": super::methods::health::summary(state),
            "stateVersion": state.clients.state_version(),
            "uptimeMs": state.uptime_ms(),
            "configPath": loaded.path.as_ref().map(|p| p.display().to_string()),
            "stateDir": state.services.data_dir.display().to_string(),
            "sessionDefaults": {
                "defaultAgentId": default_agent,
                "mainKey": main_key,
                "mainSessionKey": scoped_main_session_key(&config.session, &default_agent),
                "scope": super::methods::catalog::session_scope(&config),
            },
            "authMode": state.secret().mode_name(),
        },
        "auth": auth,
        "policy": {
            "maxPayload": super::state::MAX_PAYLOAD_BYTES,
            "maxBufferedBytes": state.limits.max_buffered_bytes,
            "tickIntervalMs": state.limits.tick_interval_ms,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_accepts_three_and_four() {
        assert_eq!(negotiate(3, 3).expect("v3"), 3);
        assert_eq!(negotiate(4, 4).expect("v4"), 4);
        assert_eq!(negotiate(3, 9).expect("range"), 4);
        let refusal = negotiate(1, 2).expect_err("too old");
        assert_eq!(refusal.close_code, 1002);
        assert_eq!(refusal.error.message, "protocol mismatch");
        assert!(negotiate(5, 6).is_err());
    }
}
