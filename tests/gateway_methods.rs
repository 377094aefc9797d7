//! The gateway's RPC methods through the real binary: each test starts a
//! `pincer gateway` with the fake OpenAI server as its only model, talks to it
//! over the WebSocket protocol and checks one behaviour a client relies on
//! (shapes, refusals naming the field, effects on the store and the config
//! file). Families live in `tests/gateway_methods/`; this file holds the
//! shared set-up. Protocol basics (handshake, scopes, streaming) are in
//! `gateway_protocol.rs`, the HTTP OpenAI endpoint in `openai_http.rs`.

mod support;

#[path = "gateway_methods/catalog.rs"]
mod catalog;
#[path = "gateway_methods/config.rs"]
mod config;
#[path = "gateway_methods/devices.rs"]
mod devices;
#[path = "gateway_methods/health.rs"]
mod health;
#[path = "gateway_methods/pairing.rs"]
mod pairing;
#[path = "gateway_methods/sessions.rs"]
mod sessions;
#[path = "gateway_methods/shutdown.rs"]
mod shutdown;
#[path = "gateway_methods/views.rs"]
mod views;

use std::time::Duration;

use serde_json::{json, Value};
use support::fake_openai::FakeOpenAi;
use support::gateway::{config_with_provider, GatewayProcess};
use support::ws_client::{Device, TestClient};

/// The shared token every test gateway runs with.
pub const TOKEN: &str = "methods-test-token";
/// Every operator scope: what OpenClaw's CLI asks for.
pub const ALL_SCOPES: &[&str] = &[
    "operator.admin",
    "operator.read",
    "operator.write",
    "operator.approvals",
    "operator.pairing",
];
/// How long a poll for an eventually visible change may take (a hang guard).
pub const POLL_DEADLINE: Duration = Duration::from_secs(10);
/// Pause between two polls.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// A gateway whose only model is the fake's `fake/gpt-test`.
pub fn start(fake: &FakeOpenAi) -> GatewayProcess {
    start_with(&config_with_provider(&fake.base_url()))
}

/// A gateway with this config text and the shared token.
pub fn start_with(config: &str) -> GatewayProcess {
    GatewayProcess::start(config, &["--port", "0", "--token", TOKEN])
}

/// A client holding every operator scope, with its own device identity.
pub async fn admin(gateway: &GatewayProcess, seed: u8) -> TestClient {
    let device = Device::new(seed);
    TestClient::connect(&gateway.url(), Some(TOKEN), ALL_SCOPES, Some(&device))
        .await
        .0
}

/// Runs one `agent` turn to its end and returns the final `res` frame.
pub async fn run_agent(client: &mut TestClient, session_key: &str, message: &str) -> Value {
    let run_id = uuid::Uuid::new_v4().to_string();
    let id = client
        .request(
            "agent",
            json!({"message": message, "sessionKey": session_key, "idempotencyKey": run_id}),
        )
        .await;
    loop {
        let res = client.response(&id).await;
        if res["payload"]["status"] != "accepted" {
            assert_eq!(res["ok"], true, "the turn succeeded: {res}");
            return res;
        }
    }
}

/// Calls `method` until `done` accepts the answer's payload; panics past
/// [`POLL_DEADLINE`]. Returns the accepted payload.
pub async fn poll_until(
    client: &mut TestClient,
    method: &str,
    params: Value,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + POLL_DEADLINE;
    loop {
        let res = client.call(method, params.clone()).await;
        assert_eq!(res["ok"], true, "{method} answered: {res}");
        if done(&res["payload"]) {
            return res["payload"].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{method} never reached the expected state; last answer: {res}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The ids `models.list` shows.
pub async fn model_ids(client: &mut TestClient) -> Vec<String> {
    let res = client.call("models.list", json!({})).await;
    ids_of(&res["payload"]["models"])
}

/// The `id` members of an array of objects.
pub fn ids_of(items: &Value) -> Vec<String> {
    items
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|item| item["id"].as_str().map(str::to_string))
        .collect()
}
