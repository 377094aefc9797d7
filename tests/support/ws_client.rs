//! A protocol-level WebSocket client for tests that need to send exactly the
//! frames a case calls for (bad ones included). It is not a stand-in for
//! OpenClaw's clients — those run for real in `openclaw_clients.rs` — but a
//! probe that speaks the same wire format, with an optional Ed25519 device.

use std::collections::VecDeque;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use futures_util::{SinkExt, StreamExt};
use pincer::gateway::device_auth::{device_id_for, payload_v3, DeviceProof, SignedContext};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long a test waits for one frame.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// What ended a read.
#[derive(Debug)]
pub enum Read {
    Frame(Value),
    Closed { code: u16, reason: String },
}

/// Most frames a client keeps for later reads while it waits for one response.
pub const MAX_KEPT_FRAMES: usize = 10_000;

pub struct TestClient {
    pub socket: Socket,
    pub nonce: String,
    pub challenge_ts: u64,
    next_id: u64,
    /// Frames read while waiting for a response (events a request caused may come before its
    /// `res`): served first by the next reads, so no event is lost either way round.
    kept: VecDeque<Value>,
}

/// How to sign the device part of `connect`.
#[derive(Clone)]
pub struct Device {
    pub key: SigningKey,
    /// Override the signed time (for stale-signature tests).
    pub signed_at: Option<u64>,
    /// Override the nonce that is signed and sent.
    pub nonce: Option<String>,
}

impl Device {
    pub fn new(seed: u8) -> Device {
        Device {
            key: SigningKey::from_bytes(&[seed; 32]),
            signed_at: None,
            nonce: None,
        }
    }

    pub fn id(&self) -> String {
        device_id_for(&self.key.verifying_key().to_bytes())
    }
}

impl TestClient {
    /// Opens the socket and reads the challenge.
    pub async fn open(url: &str) -> TestClient {
        TestClient::open_with_headers(url, &[]).await
    }

    /// Opens the socket with extra upgrade headers (`Origin`, `X-Forwarded-For`, …).
    pub async fn open_with_headers(url: &str, headers: &[(&str, &str)]) -> TestClient {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut request = url.into_client_request().expect("websocket request");
        for (name, value) in headers {
            request.headers_mut().insert(
                tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(name.as_bytes())
                    .expect("header name"),
                value.parse().expect("header value"),
            );
        }
        let (socket, _) = tokio_tungstenite::connect_async(request)
            .await
            .expect("websocket connect");
        let mut client = TestClient {
            socket,
            nonce: String::new(),
            challenge_ts: 0,
            next_id: 1,
            kept: VecDeque::new(),
        };
        match client.read().await {
            Read::Frame(frame) => {
                assert_eq!(
                    frame["event"], "connect.challenge",
                    "first frame is the challenge: {frame}"
                );
                client.nonce = frame["payload"]["nonce"]
                    .as_str()
                    .expect("nonce")
                    .to_string();
                client.challenge_ts = frame["payload"]["ts"].as_u64().expect("ts");
            }
            Read::Closed { code, reason } => panic!("closed before the challenge: {code} {reason}"),
        }
        client
    }

    /// The connect params a well-behaved operator client sends.
    pub fn connect_params(
        &self,
        token: Option<&str>,
        scopes: &[&str],
        device: Option<&Device>,
    ) -> Value {
        let auth = json!({ "token": token });
        self.connect_params_with_auth(auth, token.unwrap_or(""), scopes, device)
    }

    /// Connect params that authenticate with a device token instead of the
    /// gateway's shared token (the device signs the device token).
    pub fn connect_params_with_device_token(
        &self,
        device_token: &str,
        scopes: &[&str],
        device: &Device,
    ) -> Value {
        let auth = json!({ "deviceToken": device_token });
        self.connect_params_with_auth(auth, device_token, scopes, Some(device))
    }

    fn connect_params_with_auth(
        &self,
        auth: Value,
        signed_token: &str,
        scopes: &[&str],
        device: Option<&Device>,
    ) -> Value {
        self.connect_params_as(("test", "test"), auth, signed_token, scopes, device)
    }

    /// Connect params of client `(id, mode)` with `auth` as given (the device
    /// signs `signed_token`).
    pub fn connect_params_as(
        &self,
        (client_id, client_mode): (&str, &str),
        auth: Value,
        signed_token: &str,
        scopes: &[&str],
        device: Option<&Device>,
    ) -> Value {
        let scopes: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
        let mut params = json!({
            "minProtocol": 3, "maxProtocol": 4,
            "client": {"id": client_id, "version": "1.0", "platform": "linux", "mode": client_mode},
            "role": "operator", "scopes": scopes, "auth": auth,
        });
        if let Some(device) = device {
            let raw = device.key.verifying_key().to_bytes();
            let mut proof = DeviceProof {
                id: device_id_for(&raw),
                public_key: URL_SAFE_NO_PAD.encode(raw),
                signature: String::new(),
                signed_at_ms: device.signed_at.unwrap_or(self.challenge_ts),
                nonce: device.nonce.clone().unwrap_or_else(|| self.nonce.clone()),
            };
            let ctx = SignedContext {
                client_id,
                client_mode,
                role: "operator",
                scopes: &scopes,
                token: signed_token,
                platform: Some("linux"),
                device_family: None,
            };
            proof.signature = URL_SAFE_NO_PAD.encode(
                device
                    .key
                    .sign(payload_v3(&proof, &ctx).as_bytes())
                    .to_bytes(),
            );
            params["device"] = json!({"id": proof.id, "publicKey": proof.public_key, "signature": proof.signature,
                                     "signedAt": proof.signed_at_ms, "nonce": proof.nonce});
        }
        params
    }

    /// Sends raw text.
    pub async fn send_text(&mut self, text: String) {
        self.socket
            .send(Message::text(text))
            .await
            .expect("send frame");
    }

    /// Sends a frame that may be cut off by the gateway mid-way (errors ignored).
    pub async fn send_big(&mut self, text: String) {
        let _ = tokio::time::timeout(FRAME_TIMEOUT, self.socket.send(Message::text(text))).await;
    }

    /// Sends a request and returns its id.
    pub async fn request(&mut self, method: &str, params: Value) -> String {
        let id = format!("t{}", self.next_id);
        self.next_id += 1;
        self.send_text(
            json!({"type": "req", "id": id, "method": method, "params": params}).to_string(),
        )
        .await;
        id
    }

    /// The next frame, or the close.
    pub async fn read(&mut self) -> Read {
        if let Some(frame) = self.kept.pop_front() {
            return Read::Frame(frame);
        }
        self.read_socket().await
    }

    /// The next frame from the socket itself (not one kept by [`TestClient::response`]).
    async fn read_socket(&mut self) -> Read {
        loop {
            let next = tokio::time::timeout(FRAME_TIMEOUT, self.socket.next())
                .await
                .expect("a frame within the timeout");
            match next {
                Some(Ok(Message::Text(text))) => {
                    return Read::Frame(serde_json::from_str(text.as_str()).expect("JSON frame"))
                }
                Some(Ok(Message::Close(frame))) => {
                    let (code, reason) = frame
                        .map(|f| (u16::from(f.code), f.reason.to_string()))
                        .unwrap_or((1005, String::new()));
                    return Read::Closed { code, reason };
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => {
                    return Read::Closed {
                        code: 1006,
                        reason: String::new(),
                    }
                }
            }
        }
    }

    /// Reads until the `res` for `id` (skipping events).
    pub async fn response(&mut self, id: &str) -> Value {
        let is_answer = |frame: &Value| frame["type"] == "res" && frame["id"] == id;
        if let Some(at) = self.kept.iter().position(is_answer) {
            return self.kept.remove(at).expect("position is in range");
        }
        loop {
            match self.read_socket().await {
                Read::Frame(frame) if is_answer(&frame) => return frame,
                Read::Frame(frame) => {
                    assert!(
                        self.kept.len() < MAX_KEPT_FRAMES,
                        "{MAX_KEPT_FRAMES} frames kept while waiting for the answer to {id}"
                    );
                    self.kept.push_back(frame);
                }
                Read::Closed { code, reason } => {
                    panic!("closed ({code} {reason}) before the answer to {id}")
                }
            }
        }
    }

    /// Reads until the connection closes; returns the close code and reason.
    pub async fn closed(&mut self) -> (u16, String) {
        loop {
            if let Read::Closed { code, reason } = self.read().await {
                return (code, reason);
            }
        }
    }

    /// Reads until an event named `name` whose payload satisfies `matches`
    /// (skipping everything else); panics if the socket closes first.
    pub async fn event_where(&mut self, name: &str, matches: impl Fn(&Value) -> bool) -> Value {
        loop {
            match self.read().await {
                Read::Frame(frame) if frame["event"] == name && matches(&frame["payload"]) => {
                    return frame["payload"].clone()
                }
                Read::Frame(_) => continue,
                Read::Closed { code, reason } => {
                    panic!("closed ({code} {reason}) before a {name} event")
                }
            }
        }
    }

    /// Opens and authenticates; panics unless hello-ok arrives.
    pub async fn connect(
        url: &str,
        token: Option<&str>,
        scopes: &[&str],
        device: Option<&Device>,
    ) -> (TestClient, Value) {
        let mut client = TestClient::open(url).await;
        let params = client.connect_params(token, scopes, device);
        let id = client.request("connect", params).await;
        let hello = client.response(&id).await;
        assert_eq!(hello["ok"], true, "hello-ok expected: {hello}");
        (client, hello["payload"].clone())
    }

    /// Calls a method and returns the whole `res`.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params).await;
        self.response(&id).await
    }
}
