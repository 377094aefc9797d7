//! The methods OpenClaw's Control UI calls while it opens (`chat.startup`,
//! `sessions.subscribe`, `sessions.messages.subscribe`, `sessions.describe`,
//! `agent.identity.get`, `models.authStatus`, …) and the
//! `session.message` events it listens for.

use serde_json::{json, Value};

use super::{admin, run_agent, start};
use crate::support::fake_openai::FakeOpenAi;

#[tokio::test]
async fn chat_startup_answers_the_history_and_how_the_key_resolved() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 40).await;
    run_agent(&mut client, "main", "hello startup").await;
    let res = client
        .call("chat.startup", json!({"sessionKey": "main", "limit": 50}))
        .await;
    assert_eq!(res["ok"], true, "{res}");
    let payload = &res["payload"];
    assert_eq!(payload["sessionKey"], "agent:main:main", "{res}");
    assert_eq!(
        payload["resolution"],
        json!({"ok": true, "key": "agent:main:main", "agentId": "main"})
    );
    let texts: Vec<String> = payload["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert!(texts.iter().any(|t| t.contains("hello startup")), "{res}");
    assert!(
        texts.iter().any(|t| t.contains("echo: hello startup")),
        "{res}"
    );

    // No key (a short id pincer never issued): unresolved, not an error.
    let res = client.call("chat.startup", json!({"shortId": "abc"})).await;
    assert_eq!(
        res["payload"],
        json!({"resolution": {"ok": false}}),
        "{res}"
    );
    let res = client.call("chat.startup", json!("nope")).await;
    assert_eq!(res["ok"], false, "{res}");
    assert!(res["error"]["message"]
        .as_str()
        .unwrap()
        .contains("chat.startup"));
}

#[tokio::test]
async fn session_message_events_follow_a_turn_for_a_subscriber() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut runner = admin(&gateway, 41).await;
    let mut viewer = admin(&gateway, 42).await;
    let res = viewer
        .call(
            "sessions.messages.subscribe",
            json!({"key": "main", "includeApprovals": true}),
        )
        .await;
    assert_eq!(
        res["payload"],
        json!({"subscribed": true, "key": "agent:main:main"}),
        "{res}"
    );
    run_agent(&mut runner, "main", "watch this").await;
    let user = viewer
        .event_where("session.message", |p| p["message"]["role"] == "user")
        .await;
    assert_eq!(user["sessionKey"], "agent:main:main", "{user}");
    assert_eq!(user["agentId"], "main");
    assert_eq!(user["message"]["content"][0]["text"], "watch this");
    let reply = viewer
        .event_where("session.message", |p| p["message"]["role"] == "assistant")
        .await;
    assert_eq!(
        reply["message"]["content"][0]["text"], "echo: watch this",
        "{reply}"
    );
    assert_eq!(reply["runId"], user["runId"]);

    let res = viewer
        .call("sessions.messages.unsubscribe", json!({"key": "main"}))
        .await;
    assert_eq!(
        res["payload"],
        json!({"subscribed": false, "key": "agent:main:main"})
    );
    let res = viewer.call("sessions.messages.subscribe", json!({})).await;
    assert_eq!(res["ok"], false, "a missing key is refused: {res}");
    assert!(
        res["error"]["message"].as_str().unwrap().contains("key"),
        "{res}"
    );
}

#[tokio::test]
async fn sessions_describe_and_subscribe_show_the_stored_session() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 43).await;
    let res = client
        .call("sessions.describe", json!({"key": "main"}))
        .await;
    assert_eq!(
        res["payload"],
        json!({"session": null}),
        "no session yet: {res}"
    );
    run_agent(&mut client, "main", "describe me").await;
    let res = client
        .call("sessions.describe", json!({"key": "main"}))
        .await;
    let session = &res["payload"]["session"];
    assert_eq!(session["key"], "agent:main:main", "{res}");
    assert_eq!(session["kind"], "direct");
    assert!(
        session["sessionId"]
            .as_str()
            .is_some_and(|id| !id.is_empty()),
        "{res}"
    );

    let res = client.call("sessions.subscribe", json!({})).await;
    assert_eq!(res["payload"], json!({"subscribed": true}), "{res}");
    let res = client.call("sessions.subscribe", json!({"limit": 5})).await;
    assert_eq!(res["payload"]["subscribed"], true, "{res}");
    let keys: Vec<&Value> = res["payload"]["list"]["sessions"]
        .as_array()
        .expect("list.sessions")
        .iter()
        .map(|s| &s["key"])
        .collect();
    assert_eq!(keys, vec![&json!("agent:main:main")], "{res}");
}

#[tokio::test]
async fn identity_auth_status_and_agents_model_come_from_the_config() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 44).await;
    let res = client.call("agent.identity.get", json!({})).await;
    assert_eq!(res["payload"]["agentId"], "main", "{res}");
    assert_eq!(res["payload"]["name"], "main");
    assert_eq!(res["payload"]["avatar"], Value::Null);
    let res = client
        .call("agent.identity.get", json!({"sessionKey": "agent:main:x"}))
        .await;
    assert_eq!(res["payload"]["agentId"], "main", "{res}");

    let res = client.call("models.authStatus", json!({})).await;
    let providers = res["payload"]["providers"].as_array().expect("providers");
    assert_eq!(providers.len(), 1, "{res}");
    assert_eq!(providers[0]["provider"], "fake");
    assert_eq!(
        providers[0]["status"], "static",
        "an API key is configured: {res}"
    );
    assert!(res["payload"]["ts"].as_u64().is_some(), "{res}");

    let res = client.call("agents.list", json!({})).await;
    assert_eq!(
        res["payload"]["agents"][0]["model"],
        json!({"primary": "fake/gpt-test", "fallbacks": []}),
        "{res}"
    );
}

#[tokio::test]
async fn features_pincer_lacks_answer_empty_or_unavailable() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 45).await;
    let empty = [
        ("plugin.approval.list", json!({}), json!([])),
        ("openclaw.approval.list", json!({}), json!([])),
        ("question.list", json!({}), json!({"questions": []})),
        ("tasks.list", json!({}), json!({"tasks": []})),
        (
            "progressCard.get",
            json!({"sessionKey": "main"}),
            json!({"card": null}),
        ),
        (
            "sessions.branches.list",
            json!({"key": "main"}),
            json!({"branches": []}),
        ),
    ];
    for (method, params, expected) in empty {
        let res = client.call(method, params).await;
        assert_eq!(res["ok"], true, "{method}: {res}");
        assert_eq!(res["payload"], expected, "{method}: {res}");
    }
    for method in [
        "talk.catalog",
        "sessions.companion.state",
        "chat.metadata",
        "sessions.observer.visibility",
        "approval.history",
    ] {
        let res = client.call(method, json!({})).await;
        assert_eq!(res["ok"], false, "{method}: {res}");
        assert_eq!(res["error"]["code"], "UNAVAILABLE", "{method}: {res}");
    }
}

/// A cron job that runs hourly, as `cron.add` takes one.
fn cron_job(name: &str) -> Value {
    json!({
        "name": name,
        "schedule": {"kind": "every", "everyMs": 3_600_000},
        "sessionTarget": "isolated",
        "payload": {"kind": "agentTurn", "message": format!("run {name}")},
    })
}

#[tokio::test]
async fn cron_list_and_runs_answer_in_pages_as_the_automations_view_reads_them() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 46).await;
    let mut ids = Vec::new();
    for name in ["alpha", "beta", "gamma"] {
        let res = client.call("cron.add", cron_job(name)).await;
        ids.push(res["payload"]["id"].as_str().expect("id").to_string());
    }
    let res = client
        .call(
            "cron.update",
            json!({"id": ids[2], "patch": {"enabled": false}}),
        )
        .await;
    assert_eq!(res["ok"], true, "{res}");

    let res = client
        .call(
            "cron.list",
            json!({"includeDisabled": true, "limit": 2, "offset": 0}),
        )
        .await;
    let first = &res["payload"];
    assert_eq!(first["jobs"].as_array().map(Vec::len), Some(2), "{res}");
    assert_eq!(
        (first["total"].clone(), first["offset"].clone()),
        (json!(3), json!(0))
    );
    assert_eq!(
        (first["hasMore"].clone(), first["nextOffset"].clone()),
        (json!(true), json!(2))
    );
    let revision = first["snapshotRevision"]
        .as_str()
        .expect("revision")
        .to_string();
    let res = client
        .call(
            "cron.list",
            json!({"includeDisabled": true, "limit": 2, "offset": 2}),
        )
        .await;
    assert_eq!(res["payload"]["jobs"][0]["name"], "gamma", "{res}");
    assert_eq!(res["payload"]["nextOffset"], Value::Null);
    assert_eq!(res["payload"]["hasMore"], false);

    let enabled = client
        .call("cron.list", json!({"enabled": "enabled"}))
        .await;
    assert_eq!(enabled["payload"]["total"], 2, "{enabled}");
    let disabled = client
        .call("cron.list", json!({"enabled": "disabled"}))
        .await;
    assert_eq!(
        disabled["payload"]["jobs"][0]["name"], "gamma",
        "{disabled}"
    );
    let found = client.call("cron.list", json!({"query": "BET"})).await;
    assert_eq!(found["payload"]["total"], 1, "{found}");
    let bad = client.call("cron.list", json!({"enabled": "maybe"})).await;
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("enabled"),
        "{bad}"
    );

    // Running a job changes it, and with it the revision.
    let res = client.call("cron.run", json!({"id": ids[0]})).await;
    assert_eq!(res["payload"]["ran"], true, "{res}");
    let mut runs = Value::Null;
    for _ in 0..100 {
        runs = client.call("cron.runs", json!({"limit": 10})).await;
        if runs["payload"]["total"] == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        runs["payload"]["total"], 1,
        "every job's runs, no id needed: {runs}"
    );
    assert_eq!(
        runs["payload"]["entries"][0]["jobId"],
        ids[0].as_str(),
        "{runs}"
    );
    assert_eq!(runs["payload"]["hasMore"], false);
    let res = client
        .call("cron.list", json!({"includeDisabled": true, "limit": 2}))
        .await;
    assert_ne!(res["payload"]["snapshotRevision"], json!(revision), "{res}");
    let res = client.call("cron.runs", json!({"scope": "job"})).await;
    assert!(
        res["error"]["message"]
            .as_str()
            .unwrap()
            .contains("id is required"),
        "{res}"
    );
}
