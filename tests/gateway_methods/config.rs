//! `config.get`, `config.patch`, `config.apply` and hot reload of the file.

use serde_json::{json, Value};

use super::{admin, model_ids, poll_until, start, ALL_SCOPES};
use crate::support::fake_openai::FakeOpenAi;
use crate::support::gateway::{config_with_provider, GatewayProcess};
use crate::support::ws_client::{Device, TestClient};

/// What `config.get` shows instead of a secret.
const REDACTED: &str = "__OPENCLAW_REDACTED__";

/// The current config hash, as `config.get` reports it.
async fn current_hash(client: &mut TestClient) -> String {
    let res = client.call("config.get", json!({})).await;
    assert_eq!(res["ok"], true, "{res}");
    res["payload"]["hash"].as_str().expect("hash").to_string()
}

async fn patch(client: &mut TestClient, raw: &str, base_hash: &str) -> Value {
    client
        .call("config.patch", json!({"raw": raw, "baseHash": base_hash}))
        .await
}

/// A `models.providers.fake` patch whose model list is `ids`.
fn models_patch(fake: &FakeOpenAi, ids: &[&str]) -> String {
    let models: Vec<Value> = ids
        .iter()
        .map(|id| json!({"id": id, "contextWindow": 32000}))
        .collect();
    json!({"models": {"providers": {"fake": {
        "baseUrl": fake.base_url(), "apiKey": "sk-test", "api": "openai-completions", "models": models,
    }}}})
    .to_string()
}

#[tokio::test]
async fn config_get_redacts_secrets_and_reports_a_hash() {
    let fake = FakeOpenAi::start().await;
    let secret = "file-secret-token-7f3a9c";
    let config = config_with_provider(&fake.base_url()).replacen(
        "{",
        &format!("{{\n  gateway: {{ auth: {{ token: \"{secret}\" }} }},"),
        1,
    );
    // No --token: the gateway's token comes from the file.
    let gateway = GatewayProcess::start(&config, &["--port", "0"]);
    let device = Device::new(1);
    let (mut client, _) =
        TestClient::connect(&gateway.url(), Some(secret), ALL_SCOPES, Some(&device)).await;
    let res = client.call("config.get", json!({})).await;
    assert_eq!(res["ok"], true, "{res}");
    let snapshot = &res["payload"];
    assert_eq!(snapshot["config"]["gateway"]["auth"]["token"], REDACTED);
    assert_eq!(
        snapshot["config"]["models"]["providers"]["fake"]["apiKey"],
        REDACTED
    );
    let text = res.to_string();
    assert!(
        !text.contains(secret) && !text.contains("sk-test"),
        "{text}"
    );
    let hash = snapshot["hash"].as_str().expect("hash");
    assert!(
        hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()),
        "{hash}"
    );
}

#[tokio::test]
async fn config_patch_writes_the_file_and_applies_live() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 2).await;
    let base = current_hash(&mut client).await;
    assert!(!model_ids(&mut client).await.contains(&"gpt-new".into()));

    let res = patch(
        &mut client,
        &models_patch(&fake, &["gpt-test", "gpt-new"]),
        &base,
    )
    .await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(res["payload"]["restart"]["required"], false, "{res}");
    let new_hash = res["payload"]["hash"].as_str().expect("hash");
    assert_ne!(new_hash, base);
    assert_eq!(current_hash(&mut client).await, new_hash);
    assert!(gateway.read_config().contains("gpt-new"));
    // Keys the patch did not touch stay.
    assert!(gateway.read_config().contains("fake/gpt-test"));
    let ids = model_ids(&mut client).await;
    assert!(
        ids.contains(&"gpt-new".into()) && ids.contains(&"gpt-test".into()),
        "{ids:?}"
    );
}

#[tokio::test]
async fn config_patch_of_a_gateway_key_reports_restart_required() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 3).await;
    let base = current_hash(&mut client).await;
    let res = patch(&mut client, r#"{ gateway: { port: 45111 } }"#, &base).await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(res["payload"]["restart"]["required"], true, "{res}");
    assert_eq!(res["payload"]["restart"]["paths"], json!(["gateway.port"]));
    // The running listener stays where it is until a restart.
    assert_eq!(client.call("health", json!({})).await["ok"], true);
}

#[tokio::test]
async fn config_patch_with_a_stale_base_hash_is_refused() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 4).await;
    let stale = current_hash(&mut client).await;
    let first = patch(
        &mut client,
        r#"{ agents: { defaults: { timeoutSeconds: 120 } } }"#,
        &stale,
    )
    .await;
    assert_eq!(first["ok"], true, "{first}");
    let written = gateway.read_config();

    let res = patch(
        &mut client,
        r#"{ agents: { defaults: { timeoutSeconds: 240 } } }"#,
        &stale,
    )
    .await;
    assert_eq!(res["ok"], false, "{res}");
    assert_eq!(res["error"]["code"], "INVALID_REQUEST");
    assert!(
        res["error"]["message"]
            .as_str()
            .expect("message")
            .contains("config.get"),
        "{res}"
    );
    assert_eq!(gateway.read_config(), written, "file unchanged");
}

#[tokio::test]
async fn config_patch_with_an_unknown_key_is_refused_naming_it() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 5).await;
    let base = current_hash(&mut client).await;
    let before = gateway.read_config();
    let res = patch(
        &mut client,
        r#"{ agents: { defaults: { bogusKey: true } } }"#,
        &base,
    )
    .await;
    assert_eq!(res["ok"], false, "{res}");
    assert_eq!(res["error"]["code"], "INVALID_REQUEST");
    let message = res["error"]["message"].as_str().expect("message");
    assert!(message.contains("agents.defaults.bogusKey"), "{message}");
    assert_eq!(gateway.read_config(), before, "file unchanged");
    assert_eq!(
        current_hash(&mut client).await,
        base,
        "running config unchanged"
    );
}

#[tokio::test]
async fn fourth_config_write_within_a_minute_is_unavailable_with_retry_after() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 6).await;
    let mut hash = current_hash(&mut client).await;
    for seconds in [100, 200, 300] {
        let raw = format!("{{ agents: {{ defaults: {{ timeoutSeconds: {seconds} }} }} }}");
        let res = patch(&mut client, &raw, &hash).await;
        assert_eq!(res["ok"], true, "write {seconds}: {res}");
        hash = res["payload"]["hash"].as_str().expect("hash").to_string();
    }
    let res = patch(
        &mut client,
        r#"{ agents: { defaults: { timeoutSeconds: 400 } } }"#,
        &hash,
    )
    .await;
    assert_eq!(res["ok"], false, "{res}");
    assert_eq!(res["error"]["code"], "UNAVAILABLE");
    assert_eq!(res["error"]["retryable"], true);
    let retry = res["error"]["retryAfterMs"].as_u64().expect("retryAfterMs");
    assert!(retry > 0 && retry <= 60_000, "{retry}");
    let on_disk: Value = json5::from_str(&gateway.read_config()).expect("file parses");
    assert_eq!(on_disk["agents"]["defaults"]["timeoutSeconds"], 300);
}

#[tokio::test]
async fn config_apply_replaces_the_whole_file() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 7).await;
    let base = current_hash(&mut client).await;
    let replacement = config_with_provider(&fake.base_url()).replace("gpt-test", "gpt-other");
    let res = client
        .call(
            "config.apply",
            json!({"raw": replacement, "baseHash": base}),
        )
        .await;
    assert_eq!(res["ok"], true, "{res}");
    // A merge patch would have kept gpt-test; a replacement drops it.
    assert_eq!(model_ids(&mut client).await, vec!["gpt-other".to_string()]);
    let on_disk: Value = json5::from_str(&gateway.read_config()).expect("file parses");
    assert_eq!(
        on_disk["agents"]["defaults"]["model"]["primary"],
        "fake/gpt-other"
    );
    assert!(!gateway.read_config().contains("gpt-test"));
}

#[tokio::test]
async fn editing_the_config_file_is_applied_without_a_call() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 8).await;
    let edited = config_with_provider(&fake.base_url()).replace(
        r#"{ id: "gpt-test", contextWindow: 128000 }"#,
        r#"{ id: "gpt-test", contextWindow: 128000 }, { id: "gpt-hot", contextWindow: 8000 }"#,
    );
    assert!(
        edited.contains("gpt-hot"),
        "the edit applies to the template"
    );
    std::fs::write(gateway.config_path(), edited).expect("edit the config file");
    poll_until(&mut client, "models.list", json!({}), |payload| {
        super::ids_of(&payload["models"]).contains(&"gpt-hot".to_string())
    })
    .await;
}

#[tokio::test]
async fn a_broken_config_file_leaves_the_running_config_in_place() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 9).await;
    let before = model_ids(&mut client).await;
    let cursor = client.call("logs.tail", json!({})).await["payload"]["cursor"].clone();

    std::fs::write(gateway.config_path(), "{ models: { providers: ").expect("break the file");
    // The gateway says so in its log once it has read the broken file.
    poll_until(
        &mut client,
        "logs.tail",
        json!({"cursor": cursor}),
        |tail| {
            tail["lines"].as_array().expect("lines").iter().any(|line| {
                line.as_str()
                    .is_some_and(|l| l.contains("config change rejected"))
            })
        },
    )
    .await;
    assert_eq!(model_ids(&mut client).await, before);
    assert_eq!(client.call("health", json!({})).await["ok"], true);
}
