//! Cron through a real gateway process: jobs added over the protocol run as agent turns against the fake
//! provider, land in `cron.runs`, and survive `kill -9`.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::fake_openai::FakeOpenAi;
use support::gateway::{config_with_provider, GatewayProcess};
use support::ws_client::{Device, TestClient};

const TOKEN: &str = "cron-test-token";
const SCOPES: &[&str] = &["operator.admin", "operator.read", "operator.write"];

async fn admin(gateway: &GatewayProcess) -> TestClient {
    let device = Device::new(7);
    TestClient::connect(&gateway.url(), Some(TOKEN), SCOPES, Some(&device))
        .await
        .0
}

async fn poll_runs(client: &mut TestClient, id: &str) -> Value {
    for _ in 0..100 {
        let res = client.call("cron.runs", json!({"id": id})).await;
        assert_eq!(res["ok"], true, "{res}");
        if res["payload"]["entries"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
        {
            return res["payload"]["entries"][0].clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the job never recorded a run");
}

#[tokio::test]
async fn job_added_over_the_protocol_runs_and_survives_kill_9() {
    let fake = FakeOpenAi::start().await;
    let config = config_with_provider(&fake.base_url());
    let args = ["--port", "0", "--token", TOKEN];
    let mut gateway = GatewayProcess::start(&config, &args);
    let mut client = admin(&gateway).await;
    let add = json!({
        "name": "digest",
        "schedule": {"kind": "every", "everyMs": 3_600_000},
        "sessionTarget": "isolated",
        "payload": {"kind": "agentTurn", "message": "summarise the day"},
    });
    let res = client.call("cron.add", add).await;
    assert_eq!(res["ok"], true, "{res}");
    let id = res["payload"]["id"].as_str().expect("id").to_string();
    let res = client.call("cron.run", json!({"id": id})).await;
    assert_eq!(res["payload"]["ran"], true, "{res}");
    let entry = poll_runs(&mut client, &id).await;
    assert_eq!(entry["status"], "ok", "{entry}");

    gateway.crash_and_restart(&config, &args);
    let mut client = admin(&gateway).await;
    let res = client.call("cron.list", json!({})).await;
    let jobs = res["payload"]["jobs"].as_array().expect("jobs").clone();
    assert_eq!(jobs.len(), 1, "{res}");
    assert_eq!(jobs[0]["id"], id.as_str());
    let status = client.call("cron.status", json!({})).await;
    assert_eq!(status["payload"]["jobs"], 1, "{status}");
    let bad = client.call("cron.add", json!({"name": "x"})).await;
    assert_eq!(bad["ok"], false, "{bad}");
}

/// `cron.status` reports what the cron service runs with: the config's
/// `cron.enabled` at start, and the new value once a reload applied it.
#[tokio::test]
async fn cron_status_reports_enabled_as_the_service_runs_it_after_a_reload() {
    let fake = FakeOpenAi::start().await;
    let with_cron = |enabled: bool| {
        config_with_provider(&fake.base_url()).replacen(
            '{',
            &format!("{{ cron: {{ enabled: {enabled} }},"),
            1,
        )
    };
    let args = ["--port", "0", "--token", TOKEN];
    let gateway = GatewayProcess::start(&with_cron(false), &args);
    let mut client = admin(&gateway).await;
    let status = client.call("cron.status", json!({})).await;
    assert_eq!(status["payload"]["enabled"], false, "{status}");

    std::fs::write(gateway.config_path(), with_cron(true)).expect("rewrite config");
    let mut enabled = Value::Null;
    for _ in 0..100 {
        let status = client.call("cron.status", json!({})).await;
        enabled = status["payload"]["enabled"].clone();
        if enabled == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(enabled, true, "the reload reached the cron service");
}
