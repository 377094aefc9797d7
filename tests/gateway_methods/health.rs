//! `health`, `status`, `system-presence` and `logs.tail`.

use serde_json::{json, Value};

use super::{admin, poll_until, start, TOKEN};
use crate::support::fake_openai::FakeOpenAi;
use crate::support::ws_client::{Device, TestClient};

#[tokio::test]
async fn health_has_upstream_shape_for_a_client_without_scopes() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let (mut client, hello) = TestClient::connect(&gateway.url(), Some(TOKEN), &[], None).await;
    assert_eq!(hello["auth"]["scopes"], json!([]));

    let res = client.call("health", json!({})).await;
    assert_eq!(res["ok"], true, "{res}");
    let health = &res["payload"];
    assert_eq!(health["ok"], true);
    assert!(health["ts"].as_u64().is_some_and(|ts| ts > 0), "{health}");
    assert!(health["durationMs"].as_u64().is_some(), "{health}");
    assert!(health["channels"].is_object(), "{health}");
    assert_eq!(health["defaultAgentId"], "main");
    let agents = health["agents"].as_array().expect("agents");
    assert_eq!(agents.len(), 1);
    assert_eq!(agents[0]["agentId"], "main");
    assert_eq!(agents[0]["isDefault"], true);
    assert!(health["sessions"]["count"].as_u64().is_some(), "{health}");
    assert!(health["sessions"]["recent"].is_array(), "{health}");

    // The same client really holds no scope: anything else is refused.
    let status = client.call("status", json!({})).await;
    assert_eq!(status["error"]["message"], "missing scope: operator.read");
}

#[tokio::test]
async fn status_shows_the_store_to_admins_only() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut admin = admin(&gateway, 1).await;
    let as_admin = admin.call("status", json!({})).await;
    assert_eq!(as_admin["ok"], true, "{as_admin}");
    let store_path = as_admin["payload"]["store"]["path"]
        .as_str()
        .expect("store path for an admin");
    assert!(store_path.starts_with(gateway.data_dir().to_str().expect("utf-8 path")));

    let reader = Device::new(2);
    let (mut reader, _) = TestClient::connect(
        &gateway.url(),
        Some(TOKEN),
        &["operator.read"],
        Some(&reader),
    )
    .await;
    let as_reader = reader.call("status", json!({})).await;
    assert_eq!(as_reader["ok"], true, "{as_reader}");
    let payload = as_reader["payload"].as_object().expect("status object");
    assert_eq!(payload["version"], as_admin["payload"]["version"]);
    for hidden in ["store", "configPath", "dataDir", "pid"] {
        assert!(!payload.contains_key(hidden), "{hidden} shown to a reader");
    }
}

fn presence_device_ids(presence: &Value) -> Vec<String> {
    presence
        .as_array()
        .expect("presence list")
        .iter()
        .filter_map(|entry| entry["deviceId"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn system_presence_lists_the_gateway_and_connected_clients() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let (first, second) = (Device::new(3), Device::new(4));
    let scopes = ["operator.read"];
    let (mut client, _) =
        TestClient::connect(&gateway.url(), Some(TOKEN), &scopes, Some(&first)).await;
    let (other, hello) =
        TestClient::connect(&gateway.url(), Some(TOKEN), &scopes, Some(&second)).await;
    // The hello snapshot already lists the new client with the ones before it.
    let snapshot_ids = presence_device_ids(&hello["snapshot"]["presence"]);
    assert!(
        snapshot_ids.contains(&first.id()) && snapshot_ids.contains(&second.id()),
        "{}",
        hello["snapshot"]["presence"]
    );

    let res = client.call("system-presence", json!({})).await;
    let presence = &res["payload"];
    let gateway_entries: Vec<&Value> = presence
        .as_array()
        .expect("presence list")
        .iter()
        .filter(|entry| entry["mode"] == "gateway")
        .collect();
    assert_eq!(gateway_entries.len(), 1, "{presence}");
    assert_eq!(gateway_entries[0]["reason"], "self");
    assert!(gateway_entries[0]["ts"].as_u64().is_some());
    let ids = presence_device_ids(presence);
    assert!(
        ids.contains(&first.id()) && ids.contains(&second.id()),
        "{presence}"
    );

    drop(other);
    poll_until(&mut client, "system-presence", json!({}), |presence| {
        !presence_device_ids(presence).contains(&second.id())
    })
    .await;
}

fn lines_of(tail: &Value) -> Vec<String> {
    tail["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|line| line.as_str().expect("line text").to_string())
        .collect()
}

/// The log line the gateway writes when connection `conn_id` completes its handshake.
fn connected_line(conn_id: &str) -> impl Fn(&String) -> bool + '_ {
    move |line| line.contains(&format!("client {conn_id} ")) && line.contains("connected")
}

#[tokio::test]
async fn logs_tail_cursor_returns_only_newer_lines() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let device = Device::new(5);
    let (mut client, hello) = TestClient::connect(
        &gateway.url(),
        Some(TOKEN),
        &["operator.read"],
        Some(&device),
    )
    .await;
    let first_conn = hello["server"]["connId"]
        .as_str()
        .expect("connId")
        .to_string();

    let first = client.call("logs.tail", json!({})).await["payload"].clone();
    let first_lines = lines_of(&first);
    assert!(
        first_lines.iter().any(connected_line(&first_conn)),
        "{first}"
    );
    let first_cursor = first["cursor"].as_u64().expect("cursor");
    assert_eq!(first_cursor, first["size"].as_u64().expect("size"));

    let (_other, other_hello) = TestClient::connect(&gateway.url(), Some(TOKEN), &[], None).await;
    let other_conn = other_hello["server"]["connId"].as_str().expect("connId");

    // The gateway logs a connection just after its hello-ok: poll for it.
    let second = poll_until(
        &mut client,
        "logs.tail",
        json!({"cursor": first_cursor}),
        |tail| lines_of(tail).iter().any(connected_line(other_conn)),
    )
    .await;
    let second_lines = lines_of(&second);
    assert!(
        !second_lines.iter().any(connected_line(&first_conn)),
        "{second}"
    );
    assert!(second_lines.iter().all(|line| !first_lines.contains(line)));
    let second_cursor = second["cursor"].as_u64().expect("cursor");
    assert!(second_cursor > first_cursor, "cursor advanced: {second}");

    let third = client
        .call("logs.tail", json!({"cursor": second_cursor}))
        .await["payload"]
        .clone();
    assert!(
        lines_of(&third)
            .iter()
            .all(|line| !second_lines.contains(line)),
        "{third}"
    );
    assert!(third["cursor"].as_u64().expect("cursor") >= second_cursor);
}

#[tokio::test]
async fn logs_tail_refuses_a_zero_limit_naming_the_field() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 6).await;
    let res = client.call("logs.tail", json!({"limit": 0})).await;
    assert_eq!(res["ok"], false);
    assert_eq!(res["error"]["code"], "INVALID_REQUEST");
    let message = res["error"]["message"].as_str().expect("message");
    assert!(
        message.contains("logs.tail") && message.contains("limit"),
        "{message}"
    );
}
