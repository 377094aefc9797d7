//! The gateway's guards: TLS, the per-address budget of unauthenticated
//! sockets, the auth failure limiter, Tailscale exposure rules, and device
//! pairing for remote devices.

mod support;

use std::net::IpAddr;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use pincer::config::LoadedConfig;
use pincer::gateway::device_auth::{device_id_for, payload_v3, DeviceProof, SignedContext};
use pincer::gateway::handshake::{self, Peer};
use pincer::gateway::state::{GatewayState, StateParts};
use pincer::gateway::{auth::SharedSecret, connect_params, methods};
use pincer::store::{Store, StoreOptions};
use pincer::system::board::BoardLimits;
use serde_json::{json, Value};
use support::gateway::GatewayProcess;
use support::ws_client::TestClient;

const TOKEN: &str = "security-test-token";

/// The DER certificate `port` serves over HTTPS, after checking `/healthz` answers 200.
async fn served_certificate(port: u16) -> Vec<u8> {
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(true)
        .tls_info(true)
        .build()
        .expect("client");
    let url = format!("https://127.0.0.1:{port}/healthz");
    let res = http.get(&url).send().await.expect("https request");
    assert_eq!(res.status(), 200);
    res.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .expect("the server presented a certificate")
        .to_vec()
}

/// The DER certificate in the PEM file at `path`.
fn certificate_in(path: &std::path::Path) -> Vec<u8> {
    let pem = std::fs::read(path).expect("certificate file");
    let mut reader = std::io::BufReader::new(pem.as_slice());
    let der = rustls_pemfile::certs(&mut reader)
        .next()
        .expect("a certificate in the file")
        .expect("valid PEM")
        .to_vec();
    der
}

#[tokio::test]
async fn tls_serves_https_with_a_kept_self_signed_certificate() {
    const CONFIG: &str = "{ gateway: { tls: { enabled: true } } }";
    const ARGS: [&str; 4] = ["--port", "0", "--token", TOKEN];
    let mut gateway = GatewayProcess::start(CONFIG, &ARGS);
    let cert_file = gateway.data_dir().join("tls/gateway-cert.pem");
    let first = served_certificate(gateway.port).await;
    assert_eq!(
        first,
        certificate_in(&cert_file),
        "the served certificate is the one kept in the data dir"
    );
    let plain = reqwest::get(format!("http://127.0.0.1:{}/healthz", gateway.port)).await;
    assert!(
        plain.is_err() || plain.expect("answer").status() != 200,
        "plain HTTP is not served on a TLS port"
    );
    // Kept: a restart on the same data dir serves the same certificate, not a new one.
    gateway.crash_and_restart(CONFIG, &ARGS);
    assert_eq!(
        served_certificate(gateway.port).await,
        first,
        "the certificate changed across a restart"
    );
}

#[tokio::test]
async fn the_33rd_unauthenticated_socket_from_one_address_gets_503() {
    let gateway = GatewayProcess::start("{}", &["--port", "0", "--token", TOKEN]);
    let mut open = Vec::new();
    for _ in 0..32 {
        open.push(TestClient::open(&gateway.url()).await);
    }
    let refused = tokio_tungstenite::connect_async(gateway.url()).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 503)
        }
        other => panic!("expected HTTP 503, got {other:?}"),
    }
    drop(open);
    // Slots come back when those sockets go away.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if tokio_tungstenite::connect_async(gateway.url())
            .await
            .is_ok()
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "budget never recovered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn repeated_auth_failures_lock_the_address_out() {
    let config = "{ gateway: { auth: { rateLimit: { maxAttempts: 2, windowMs: 60000, lockoutMs: 60000, exemptLoopback: false } } } }";
    let gateway = GatewayProcess::start(config, &["--port", "0", "--token", TOKEN]);
    for _ in 0..2 {
        let mut client = TestClient::open(&gateway.url()).await;
        let params = client.connect_params(Some("wrong"), &[], None);
        let id = client.request("connect", params).await;
        assert_eq!(
            client.response(&id).await["error"]["details"]["code"],
            "AUTH_TOKEN_MISMATCH"
        );
    }
    let mut client = TestClient::open(&gateway.url()).await;
    let params = client.connect_params(Some(TOKEN), &[], None);
    let id = client.request("connect", params).await;
    let res = client.response(&id).await;
    assert_eq!(
        res["error"]["details"]["code"], "AUTH_RATE_LIMITED",
        "even the right token waits: {res}"
    );
    assert!(res["error"]["retryAfterMs"]
        .as_u64()
        .is_some_and(|ms| ms > 0));
    let http = reqwest::Client::new();
    let locked = http
        .post(gateway.http("/tools/invoke"))
        .bearer_auth(TOKEN)
        .json(&json!({"tool": "x"}))
        .send()
        .await
        .expect("http");
    assert_eq!(locked.status(), 429);
    assert!(locked.headers().contains_key("retry-after"));
}

#[test]
fn tailscale_funnel_without_password_and_serve_beyond_loopback_refuse_to_start() {
    let (status, stderr) = GatewayProcess::refuse(
        "{ gateway: { tailscale: { mode: \"funnel\" } } }",
        &["--port", "0", "--token", TOKEN],
    );
    assert!(!status.success());
    assert!(
        stderr.contains("gateway.auth.mode") && stderr.contains("password"),
        "{stderr}"
    );
    let (status, stderr) = GatewayProcess::refuse(
        "{ gateway: { bind: \"lan\", tailscale: { mode: \"serve\" } } }",
        &["--port", "0", "--token", TOKEN],
    );
    assert!(!status.success());
    assert!(
        stderr.contains("gateway.bind") && stderr.contains("loopback"),
        "{stderr}"
    );
}

#[test]
fn tailscale_serve_is_started_and_reset_through_the_cli() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("tailscale.log");
    let fake = dir.path().join("tailscale");
    // Written by a child process: a file this (multi-threaded) test process
    // held open for writing could leak into another test's fork and make the
    // exec fail with ETXTBSY.
    let script = format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display());
    let status = std::process::Command::new("sh")
        .args([
            "-c",
            "printf '%s' \"$1\" > \"$2\" && chmod 755 \"$2\"",
            "sh",
        ])
        .arg(&script)
        .arg(&fake)
        .status()
        .expect("write the fake tailscale");
    assert!(status.success());
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    std::env::set_var("PATH", &path);
    let mut gateway = GatewayProcess::start(
        "{ gateway: { tailscale: { mode: \"serve\", resetOnExit: true } } }",
        &["--port", "0", "--token", TOKEN],
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("serve --bg --yes")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "tailscale serve was not run"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(gateway.terminate().success());
    let calls = std::fs::read_to_string(&log).expect("log");
    assert!(
        calls.contains(&format!("serve --bg --yes {}", gateway.port)),
        "{calls}"
    );
    assert!(
        calls.lines().last().is_some_and(|l| l == "serve reset"),
        "{calls}"
    );
}

fn state(dir: &std::path::Path) -> std::sync::Arc<GatewayState> {
    let store = Store::open(&dir.join("store"), StoreOptions::default()).expect("store");
    let state = pincer::app::build(StateParts {
        loaded: LoadedConfig {
            config: Default::default(),
            path: None,
            raw: String::new(),
            hash: String::new(),
        },
        store,
        data_dir: dir.to_path_buf(),
        secret: SharedSecret::Token(TOKEN.into()),
        limits: BoardLimits::default(),
        tls_fingerprint: None,
    });
    state.set_ready();
    state
}

fn signed_connect(key: &SigningKey, nonce: &str, now: u64) -> Value {
    let scopes = vec!["operator.read".to_string(), "operator.write".to_string()];
    let raw = key.verifying_key().to_bytes();
    let mut proof = DeviceProof {
        id: device_id_for(&raw),
        public_key: URL_SAFE_NO_PAD.encode(raw),
        signature: String::new(),
        signed_at_ms: now,
        nonce: nonce.into(),
    };
    let ctx = SignedContext {
        client_id: "openclaw-ios",
        client_mode: "ui",
        role: "operator",
        scopes: &scopes,
        token: TOKEN,
        platform: Some("ios"),
        device_family: Some("iPhone"),
    };
    proof.signature =
        URL_SAFE_NO_PAD.encode(key.sign(payload_v3(&proof, &ctx).as_bytes()).to_bytes());
    json!({
        "minProtocol": 3, "maxProtocol": 4,
        "client": {"id": "openclaw-ios", "version": "1", "platform": "ios", "deviceFamily": "iPhone", "mode": "ui"},
        "role": "operator", "scopes": scopes, "auth": {"token": TOKEN},
        "device": {"id": proof.id, "publicKey": proof.public_key, "signature": proof.signature, "signedAt": now, "nonce": nonce},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_device_needs_approval_then_connects_with_its_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = state(dir.path());
    let key = SigningKey::from_bytes(&[42; 32]);
    let remote = &Peer {
        ip: Some("192.0.2.10".parse::<IpAddr>().expect("ip")),
        ..Peer::default()
    };
    let now = pincer::system::clock::now_ms();
    let params = connect_params::parse(&signed_connect(&key, "n1", now)).expect("params");
    let refusal =
        handshake::decide(&state, &params, "n1", remote, "c1", now).expect_err("not paired yet");
    assert_eq!(refusal.error.code.as_str(), "NOT_PAIRED");
    assert_eq!(refusal.close_reason, "pairing required");
    let details = refusal.error.details.clone().expect("details");
    assert_eq!(details["code"], "PAIRING_REQUIRED");
    assert_eq!(details["reason"], "not-paired");
    let request_id = details["requestId"]
        .as_str()
        .expect("request id")
        .to_string();

    // Asking again reuses the pending request instead of piling up new ones.
    let again =
        handshake::decide(&state, &params, "n1", remote, "c2", now).expect_err("still pending");
    assert_eq!(
        again.error.details.expect("details")["requestId"],
        request_id.as_str()
    );

    let info = std::sync::Arc::new(admin_info());
    let listed = methods::handle(&state, &info, request("device.pair.list", json!({}))).await;
    let methods::Reply::Ok(list) = listed else {
        panic!("list failed: {listed:?}")
    };
    assert_eq!(list["pending"][0]["requestId"], request_id.as_str());
    assert_eq!(list["pending"][0]["remoteIp"], "192.0.2.10");

    let approved = methods::handle(
        &state,
        &info,
        request("device.pair.approve", json!({"requestId": request_id})),
    )
    .await;
    assert!(matches!(approved, methods::Reply::Ok(_)), "{approved:?}");
    let accepted = handshake::decide(&state, &params, "n1", remote, "c3", now).expect("paired now");
    assert_eq!(
        accepted.info.scopes,
        vec!["operator.read".to_string(), "operator.write".to_string()]
    );
    assert!(accepted.device_token.is_some());

    // A request for more scopes than approved is a scope upgrade, not a silent grant.
    let mut wider = signed_connect(&key, "n2", now);
    wider["scopes"] = json!(["operator.admin"]);
    let wider = connect_params::parse(&wider).expect("params");
    let refusal = handshake::decide(&state, &wider, "n2", remote, "c4", now)
        .expect_err("upgrade needs approval");
    assert!(
        refusal.error.message.contains("signature")
            || refusal.error.details.expect("details")["reason"] == "scope-upgrade"
    );
}

fn request(method: &str, params: Value) -> pincer::gateway::frames::Request {
    pincer::gateway::frames::Request {
        id: "r".into(),
        method: method.into(),
        params,
    }
}

fn admin_info() -> pincer::gateway::clients::ClientInfo {
    pincer::gateway::clients::ClientInfo {
        conn_id: "admin".into(),
        ip: "127.0.0.1".parse().expect("ip"),
        role: "operator".into(),
        scopes: vec!["operator.admin".into()],
        caps: vec![],
        protocol: 4,
        client_id: "cli".into(),
        client_mode: "cli".into(),
        client_version: "1".into(),
        platform: None,
        device_family: None,
        display_name: None,
        instance_id: None,
        device_id: None,
        connected_at_ms: 0,
        setup: None,
    }
}
