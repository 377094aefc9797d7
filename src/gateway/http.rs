//! The HTTP side of the gateway port: liveness and readiness, the WebSocket
//! upgrade (on any path), the OpenAI-compatible endpoint, `/tools/invoke`,
//! and the paths adapters registered (`channels::http_routes`).
//!
//! Bodies are read with a hard size cap; errors are JSON with upstream's
//! shapes. Nothing here runs an agent itself: runs go through `runs.rs`.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

use super::auth::{secrets_equal, SharedSecret};
use super::preauth_io::PreauthLimitedIo;
use super::state::{GatewayState, MAX_HTTP_BODY_BYTES, MAX_PAYLOAD_BYTES};

/// The WebSocket read buffer's chunk and the write buffer's flush threshold, per socket.
const WS_BUFFER_BYTES: usize = 8 * 1024;
use super::ws::{self, PREAUTH_READ_BUDGET_BYTES};
use crate::system::clock::now_ms;

/// The body type of every response.
pub type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A JSON response.
pub fn json_response(status: StatusCode, value: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(value.to_string())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *response.status_mut() = status;
    response
}

/// The paths this file serves itself; adapters' inbound routes
/// (`channels::http_routes`) may not take them.
pub const GATEWAY_PATHS: &[&str] = &[
    "/health",
    "/healthz",
    "/ready",
    "/readyz",
    "/v1/chat/completions",
    "/tools/invoke",
];

/// Serves one HTTP request.
pub async fn handle(
    state: Arc<GatewayState>,
    req: Request<Incoming>,
    ip: IpAddr,
) -> Result<Response<Body>, Infallible> {
    if is_websocket_upgrade(&req) {
        return Ok(upgrade(state, req, ip));
    }
    let path = req.uri().path().to_string();
    let response = match path.as_str() {
        "/health" | "/healthz" => {
            probe(&req, StatusCode::OK, json!({"ok": true, "status": "live"}))
        }
        "/ready" | "/readyz" => {
            let ready = state.is_ready();
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            probe(&req, status, json!({"ready": ready}))
        }
        "/v1/chat/completions"
            if state
                .config()
                .gateway
                .http
                .endpoints
                .chat_completions
                .enabled =>
        {
            super::openai_http::chat_completions(state, req, ip).await
        }
        "/tools/invoke" => tools_invoke(state, req, ip).await,
        _ => match state.http_routes.get(&path) {
            Some(route) => route.handle(req).await.map(|body| body.boxed()),
            None => control_ui(&state, &req, ip).unwrap_or_else(|| {
                json_response(
                    StatusCode::NOT_FOUND,
                    &json!({"error": {"type": "not_found", "message": format!("no route for {path}")}}),
                )
            }),
        },
    };
    Ok(response)
}

/// The Control UI's answer, when the path is the UI's and the UI is enabled.
fn control_ui(state: &GatewayState, req: &Request<Incoming>, ip: IpAddr) -> Option<Response<Body>> {
    use super::control_ui::{self as ui, Route};
    let config = state.config();
    if !config.gateway.control_ui.enabled {
        return None;
    }
    let base = config.gateway.control_ui.normalized_base_path();
    let uri = req.uri();
    let response = match ui::route(&base, req.method(), uri.path(), uri.query()) {
        Route::NotUi => return None,
        Route::NotFound => ui::not_found(),
        Route::Redirect(location) => ui::redirect(&location),
        Route::Asset(path) => match ui::assets::find(path) {
            Some(asset) => ui::serve_asset(asset, req.method(), req.headers()),
            None => ui::not_found(),
        },
        Route::Bootstrap => {
            let peer = peer_of(req, ip);
            let setup = super::setup::bootstrap(state, &peer);
            let document =
                ui::bootstrap_document(&base, state.secret().mode_name(), state.version, setup);
            ui::bootstrap(&document)
        }
    };
    Some(response)
}

fn probe(req: &Request<Incoming>, status: StatusCode, body: Value) -> Response<Body> {
    match *req.method() {
        Method::GET => json_response(status, &body),
        Method::HEAD => {
            let mut response = json_response(status, &body);
            *response.body_mut() = Full::new(Bytes::new()).boxed();
            response
        }
        _ => method_not_allowed("GET, HEAD"),
    }
}

/// 405 with the `Allow` header.
pub fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut response = json_response(
        StatusCode::METHOD_NOT_ALLOWED,
        &json!({"error": {"type": "method_not_allowed", "message": format!("method not allowed; use {allow}")}}),
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}

fn is_websocket_upgrade(req: &Request<Incoming>) -> bool {
    let has = |name: header::HeaderName, token: &str| {
        req.headers().get_all(name).iter().any(|v| {
            v.to_str()
                .map(|s| s.split(',').any(|p| p.trim().eq_ignore_ascii_case(token)))
                .unwrap_or(false)
        })
    };
    has(header::UPGRADE, "websocket") && has(header::CONNECTION, "upgrade")
}

fn upgrade(state: Arc<GatewayState>, req: Request<Incoming>, ip: IpAddr) -> Response<Body> {
    let key = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned();
    let version_ok = req
        .headers()
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_some_and(|v| v.as_bytes() == b"13");
    let (Some(key), true) = (key, version_ok) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "bad websocket upgrade: Sec-WebSocket-Key and version 13 required\n",
        );
    };
    if state.shutdown.is_cancelled() || !state.is_ready() {
        return plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "gateway is shutting down\n",
        );
    }
    if state.clients.len() >= state.limits.max_connections {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "Too many connections\n");
    }
    if !state.claim_preauth(ip) {
        return plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "Too many unauthenticated sockets\n",
        );
    }
    let peer = peer_of(&req, ip);
    let accept = derive_accept_key(key.as_bytes());
    let task_state = state.clone();
    state.tasks.spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(upgraded) => {
                let (io, gate) =
                    PreauthLimitedIo::new(TokioIo::new(upgraded), PREAUTH_READ_BUDGET_BYTES);
                let mut config = WebSocketConfig::default();
                // tungstenite's 128 KiB read and write buffers per socket were most of an idle
                // connection's memory; frames are small and the writer batches (ws.rs).
                config.read_buffer_size = WS_BUFFER_BYTES;
                config.write_buffer_size = WS_BUFFER_BYTES;
                config.max_message_size = Some(MAX_PAYLOAD_BYTES);
                config.max_frame_size = Some(MAX_PAYLOAD_BYTES);
                let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
                ws::serve(task_state, ws, gate, peer).await;
            }
            Err(e) => {
                task_state.release_preauth(ip);
                log::debug!("websocket upgrade from {ip} failed: {e}");
            }
        }
    });
    let mut response = Response::new(Full::new(Bytes::new()).boxed());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(value) = HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, value);
    }
    response
}

/// Whether a proxy stands between the caller and the socket (upstream's
/// `hasForwardedRequestHeaders`).
pub fn forwarded(headers: &hyper::HeaderMap) -> bool {
    headers.keys().any(|name| {
        let name = name.as_str();
        name == "forwarded" || name == "x-real-ip" || name.starts_with("x-forwarded-")
    })
}

/// Who sent `req`, from the socket's address and the request's headers.
pub fn peer_of<B>(req: &Request<B>, ip: IpAddr) -> super::handshake::Peer {
    let text = |name: header::HeaderName| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    super::handshake::Peer {
        ip: Some(ip),
        origin: text(header::ORIGIN),
        host: text(header::HOST),
        forwarded: forwarded(req.headers()),
    }
}

/// Why an HTTP caller was refused.
pub enum HttpAuthError {
    Unauthorized,
    RateLimited(u64),
}

/// Checks `Authorization: Bearer <token-or-password>`.
pub fn check_bearer(
    state: &GatewayState,
    req: &Request<Incoming>,
    ip: IpAddr,
) -> Result<(), HttpAuthError> {
    let now = now_ms();
    if let Some(wait) = state.limiter.locked_for(ip, now) {
        return Err(HttpAuthError::RateLimited(wait));
    }
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let ok = match (state.secret(), presented) {
        (SharedSecret::None, _) => true,
        (SharedSecret::Token(expected) | SharedSecret::Password(expected), Some(given)) => {
            secrets_equal(given, &expected)
        }
        (_, None) => false,
    };
    if ok {
        state.limiter.record_success(ip);
        Ok(())
    } else {
        state.limiter.record_failure(ip, now);
        Err(HttpAuthError::Unauthorized)
    }
}

/// The standard response for a refused HTTP caller.
pub fn auth_error_response(error: HttpAuthError) -> Response<Body> {
    match error {
        HttpAuthError::Unauthorized => json_response(
            StatusCode::UNAUTHORIZED,
            &json!({"error": {"type": "unauthorized", "message": "Unauthorized: send Authorization: Bearer <gateway token>"}}),
        ),
        HttpAuthError::RateLimited(wait_ms) => {
            let mut response = json_response(
                StatusCode::TOO_MANY_REQUESTS,
                &json!({"error": {"type": "rate_limited", "message": "too many failed authentication attempts"}}),
            );
            if let Ok(value) = HeaderValue::from_str(&wait_ms.div_ceil(1000).to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
    }
}

/// Reads a JSON body of at most `limit` bytes; `Err` is the response to send.
pub async fn read_json(req: Request<Incoming>, limit: usize) -> Result<Value, Response<Body>> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > limit as u64) {
        return Err(too_large(limit));
    }
    let body = Limited::new(req.into_body(), limit);
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Err(too_large(limit)),
    };
    serde_json::from_slice(&bytes).map_err(|e| {
        json_response(
            StatusCode::BAD_REQUEST,
            &json!({"ok": false, "error": {"type": "invalid_request", "message": format!("body is not valid JSON: {e}")}}),
        )
    })
}

fn too_large(limit: usize) -> Response<Body> {
    let mut response = json_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        &json!({"ok": false, "error": {"type": "invalid_request", "message": format!("request body exceeds {limit} bytes")}}),
    );
    // The unread body makes the connection unusable for another request.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Tools HTTP callers may not use unless `gateway.tools.allow` names them.
pub const HTTP_DEFAULT_DENY: &[&str] = &[
    "exec",
    "spawn",
    "shell",
    "fs_write",
    "fs_delete",
    "fs_move",
    "apply_patch",
    "sessions_spawn",
    "sessions_send",
    "cron",
    "gateway",
    "nodes",
];

async fn tools_invoke(
    state: Arc<GatewayState>,
    req: Request<Incoming>,
    ip: IpAddr,
) -> Response<Body> {
    if req.method() != Method::POST {
        return method_not_allowed("POST");
    }
    if let Err(error) = check_bearer(&state, &req, ip) {
        return auth_error_response(error);
    }
    let body = match read_json(req, MAX_HTTP_BODY_BYTES).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let tool = body
        .get("tool")
        .or_else(|| body.get("name"))
        .and_then(Value::as_str)
        .map(str::trim);
    let Some(tool) = tool.filter(|t| !t.is_empty()) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"ok": false, "error": {"type": "invalid_request", "message": "tool (or name) is required"}}),
        );
    };
    let config = state.config();
    let allowed = &config.gateway.tools.allow;
    let denied = config.gateway.tools.deny.iter().any(|d| d == tool)
        || (HTTP_DEFAULT_DENY.contains(&tool) && !allowed.iter().any(|a| a == tool));
    if denied {
        return json_response(
            StatusCode::FORBIDDEN,
            &json!({"ok": false, "error": {"type": "forbidden", "message": format!("tool {tool} is not available over HTTP (gateway.tools.allow)")}}),
        );
    }
    let Some(tool_impl) = state.services.tools.get(tool) else {
        return json_response(
            StatusCode::NOT_FOUND,
            &json!({"ok": false, "error": {"type": "not_found", "message": format!("unknown tool: {tool}")}}),
        );
    };
    let agent_id = body
        .get("agentId")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| config.agents.default_agent_id());
    // No model runs here: `byProvider` has nothing to match.
    if !crate::tools::policy::allowed_tools(&config, &agent_id, None, &[tool])
        .iter()
        .any(|t| t == tool)
    {
        return json_response(
            StatusCode::FORBIDDEN,
            &json!({"ok": false, "error": {"type": "tool_call_blocked", "message": format!("tool {tool} is not allowed for agent {agent_id}")}}),
        );
    }
    let session_key = super::methods::sessions::canonical_key(
        &config,
        Some(&agent_id),
        body.get("sessionKey").and_then(Value::as_str),
    );
    let workspace = state.workspace_for(&config, &agent_id);
    if let Err(e) = std::fs::create_dir_all(&workspace) {
        return json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({"ok": false, "error": {"type": "tool_error", "message": format!("workspace: {e}")}}),
        );
    }
    let ctx = crate::tools::ToolContext {
        agent_id,
        session_key,
        workspace,
        store: state.services.store.clone(),
        http: state.http(),
        cancel: state.shutdown.child_token(),
        config: config.clone(),
        services: state.services.tool_services.clone(),
    };
    let args = body.get("args").cloned().unwrap_or_else(|| json!({}));
    match tool_impl.execute(args, &ctx).await {
        Ok(output) => json_response(
            StatusCode::OK,
            &json!({"ok": true, "result": {"text": output.text, "details": output.details}}),
        ),
        Err(crate::tools::ToolError::InvalidArguments(m)) => json_response(
            StatusCode::BAD_REQUEST,
            &json!({"ok": false, "error": {"type": "invalid_request", "message": m}}),
        ),
        Err(crate::tools::ToolError::Denied(m)) => json_response(
            StatusCode::FORBIDDEN,
            &json!({"ok": false, "error": {"type": "forbidden", "message": m}}),
        ),
        Err(e) => json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({"ok": false, "error": {"type": "tool_error", "message": e.to_string()}}),
        ),
    }
}
