//! A small protocol client for the CLI: connects with a device identity of
//! its own (so a loopback gateway pairs it silently) and makes calls.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::gateway::device_auth::{device_id_for, payload_v3, DeviceProof, SignedContext};
use crate::gateway::scopes::CLI_DEFAULT_SCOPES;

/// How long one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// A connected client.
pub struct GatewayClient {
    runtime: tokio::runtime::Runtime,
    socket: Socket,
    next_id: u64,
}

fn identity_path(data_dir: &Path) -> PathBuf {
    data_dir.join("cli-device.key")
}

fn load_identity(data_dir: &Path) -> Result<SigningKey, String> {
    let path = identity_path(data_dir);
    if let Ok(bytes) = std::fs::read(&path) {
        if let Ok(seed) = <[u8; 32]>::try_from(bytes.as_slice()) {
            return Ok(SigningKey::from_bytes(&seed));
        }
    }
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    std::fs::create_dir_all(data_dir)
        .map_err(|e| format!("cannot create {}: {e}", data_dir.display()))?;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    file.write_all(&key.to_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(key)
}

impl GatewayClient {
    /// Connects and completes the handshake.
    pub fn connect(
        url: &str,
        token: Option<String>,
        password: Option<String>,
        data_dir: &Path,
    ) -> Result<Self, String> {
        let key = load_identity(data_dir)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let socket = runtime.block_on(handshake(url, token, password, &key))?;
        Ok(GatewayClient {
            runtime,
            socket,
            next_id: 1,
        })
    }

    /// Calls one method and returns its payload.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.call_with_timeout(method, params, CALL_TIMEOUT)
    }

    /// Calls one method that may take up to `timeout` (a wait for a person).
    pub fn call_with_timeout(
        &mut self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, String> {
        let id = format!("cli-{}", self.next_id);
        self.next_id += 1;
        let frame = json!({"type": "req", "id": id, "method": method, "params": params});
        let socket = &mut self.socket;
        self.runtime.block_on(async {
            socket
                .send(Message::text(frame.to_string()))
                .await
                .map_err(|e| e.to_string())?;
            let response = tokio::time::timeout(timeout, wait_response(socket, &id))
                .await
                .map_err(|_| format!("{method}: no answer within {} s", timeout.as_secs()))??;
            into_payload(method, response)
        })
    }
}

fn into_payload(method: &str, response: Value) -> Result<Value, String> {
    if response["ok"].as_bool() == Some(true) {
        Ok(response["payload"].clone())
    } else {
        Err(format!(
            "{method} failed: {} ({})",
            response["error"]["message"]
                .as_str()
                .unwrap_or("unknown error"),
            response["error"]["code"].as_str().unwrap_or("?")
        ))
    }
}

async fn wait_response(socket: &mut Socket, id: &str) -> Result<Value, String> {
    while let Some(message) = socket.next().await {
        let message = message.map_err(|e| format!("connection lost: {e}"))?;
        let Message::Text(text) = message else {
            if let Message::Close(frame) = message {
                let reason = frame
                    .map(|f| format!("{} {}", u16::from(f.code), f.reason))
                    .unwrap_or_default();
                return Err(format!("gateway closed the connection: {reason}"));
            }
            continue;
        };
        let value: Value = serde_json::from_str(text.as_str())
            .map_err(|e| format!("bad frame from gateway: {e}"))?;
        if value["type"] == "res" && value["id"] == id {
            return Ok(value);
        }
    }
    Err("gateway closed the connection".into())
}

async fn handshake(
    url: &str,
    token: Option<String>,
    password: Option<String>,
    key: &SigningKey,
) -> Result<Socket, String> {
    let (mut socket, _) = tokio::time::timeout(CALL_TIMEOUT, tokio_tungstenite::connect_async(url))
        .await
        .map_err(|_| format!("cannot reach {url}: timed out"))?
        .map_err(|e| format!("cannot reach {url}: {e} (is `pincer gateway` running?)"))?;
    let challenge = tokio::time::timeout(CALL_TIMEOUT, socket.next())
        .await
        .map_err(|_| "no connect.challenge from the gateway".to_string())?
        .ok_or("connection closed before the challenge")?
        .map_err(|e| e.to_string())?;
    let challenge: Value = serde_json::from_str(challenge.to_text().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let nonce = challenge["payload"]["nonce"]
        .as_str()
        .ok_or("challenge without a nonce")?
        .to_string();
    let scopes: Vec<String> = CLI_DEFAULT_SCOPES.iter().map(|s| s.to_string()).collect();
    let raw = key.verifying_key().to_bytes();
    let mut proof = DeviceProof {
        id: device_id_for(&raw),
        public_key: URL_SAFE_NO_PAD.encode(raw),
        signature: String::new(),
        signed_at_ms: crate::system::clock::now_ms(),
        nonce,
    };
    let signed_token = token.clone().unwrap_or_default();
    let ctx = SignedContext {
        client_id: "cli",
        client_mode: "cli",
        role: "operator",
        scopes: &scopes,
        token: &signed_token,
        platform: Some(std::env::consts::OS),
        device_family: None,
    };
    proof.signature =
        URL_SAFE_NO_PAD.encode(key.sign(payload_v3(&proof, &ctx).as_bytes()).to_bytes());
    let connect = json!({
        "type": "req", "id": "connect", "method": "connect",
        "params": {
            "minProtocol": 3, "maxProtocol": 4,
            "client": {"id": "cli", "version": env!("CARGO_PKG_VERSION"), "platform": std::env::consts::OS, "mode": "cli"},
            "role": "operator", "scopes": scopes,
            "auth": {"token": token, "password": password},
            "device": {"id": proof.id, "publicKey": proof.public_key, "signature": proof.signature,
                       "signedAt": proof.signed_at_ms, "nonce": proof.nonce},
        },
    });
    socket
        .send(Message::text(connect.to_string()))
        .await
        .map_err(|e| e.to_string())?;
    let hello = tokio::time::timeout(CALL_TIMEOUT, wait_response(&mut socket, "connect"))
        .await
        .map_err(|_| "no hello from the gateway".to_string())??;
    into_payload("connect", hello)?;
    Ok(socket)
}
