//! The agent's `cron` tool through a real gateway process and the fake OpenAI provider: a job the model
//! adds runs as the calling agent with this conversation's last route as its `announce` target, and when
//! it runs its summary is delivered to the agent's main session readers.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::{config_with_provider, GatewayProcess};
use support::ws_client::{Device, TestClient};

const TOKEN: &str = "cron-tool-test-token";
const SCOPES: &[&str] = &["operator.admin", "operator.read", "operator.write"];

async fn listed_jobs(client: &mut TestClient) -> Vec<Value> {
    for _ in 0..300 {
        let res = client.call("cron.list", json!({})).await;
        let jobs = res["payload"]["jobs"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !jobs.is_empty() {
            return jobs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the model's cron add never created a job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_added_by_the_model_announces_its_result_to_the_conversation() {
    let fake = FakeOpenAi::start().await;
    let job = json!({"name": "digest", "schedule": {"kind": "every", "everyMs": 3_600_000},
        "sessionTarget": "isolated", "payload": {"kind": "agentTurn", "message": "JOB-MESSAGE summarise"}});
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![(
            "call-1".into(),
            "cron".into(),
            json!({"action": "add", "job": job}).to_string(),
        )],
    });
    let gateway = GatewayProcess::start(
        &config_with_provider(&fake.base_url()),
        &["--port", "0", "--token", TOKEN],
    );
    let (mut client, _) =
        TestClient::connect(&gateway.url(), Some(TOKEN), SCOPES, Some(&Device::new(3))).await;
    let sent = json!({"sessionKey": "main", "message": "remind me hourly", "idempotencyKey": "p1"});
    assert_eq!(client.call("chat.send", sent).await["ok"], true);

    let jobs = listed_jobs(&mut client).await;
    assert_eq!(jobs[0]["agentId"], "main", "{jobs:?}");
    assert_eq!(
        jobs[0]["delivery"],
        json!({"mode": "announce", "channel": "webchat"})
    );
    let id = jobs[0]["id"].as_str().expect("id").to_string();
    let ran = client.call("cron.run", json!({"id": id})).await;
    assert_eq!(ran["payload"]["ran"], true, "{ran}");
    let announced = client
        .event_where("chat", |p| {
            p["sessionKey"] == "agent:main:main"
                && p["message"]["content"][0]["text"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("[cron: digest]"))
        })
        .await;
    let text = announced["message"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("JOB-MESSAGE summarise"), "{text}");
    let history = client
        .call("chat.history", json!({"sessionKey": "main"}))
        .await;
    let recorded = history["payload"]["messages"].to_string();
    assert!(recorded.contains("[cron: digest]"), "{recorded}");
}
