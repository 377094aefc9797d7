//! `models.list`, `agents.list`, `commands.list` and `send`.

use serde_json::{json, Value};

use super::{admin, ids_of, start, start_with};
use crate::support::fake_openai::FakeOpenAi;
use crate::support::gateway::config_with_provider;
use pincer::pipeline::commands::{parse_command, COMMANDS};

#[tokio::test]
async fn models_list_shows_the_configured_models() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 1).await;
    let res = client.call("models.list", json!({})).await;
    assert_eq!(res["ok"], true, "{res}");
    let models = res["payload"]["models"].as_array().expect("models");
    assert_eq!(models.len(), 1, "{res}");
    assert_eq!(models[0]["id"], "gpt-test");
    assert_eq!(models[0]["provider"], "fake");
    assert_eq!(models[0]["contextWindow"], 128000);
}

#[tokio::test]
async fn agents_list_shows_configured_agents_and_the_default() {
    let fake = FakeOpenAi::start().await;
    let config = config_with_provider(&fake.base_url()).replace(
        "agents: {",
        r#"agents: { list: [{ id: "home", name: "Home" }, { id: "work", default: true }],"#,
    );
    let gateway = start_with(&config);
    let mut client = admin(&gateway, 2).await;
    let res = client.call("agents.list", json!({})).await;
    assert_eq!(res["ok"], true, "{res}");
    let payload = &res["payload"];
    assert_eq!(payload["defaultId"], "work");
    assert_eq!(ids_of(&payload["agents"]), vec!["home", "work"]);
    let flags: Vec<&Value> = payload["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .map(|a| &a["default"])
        .collect();
    assert_eq!(flags, vec![&json!(false), &json!(true)]);
    assert_eq!(payload["agents"][0]["name"], "Home");
}

#[tokio::test]
async fn agents_list_without_configured_agents_shows_main_as_default() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 3).await;
    let res = client.call("agents.list", json!({})).await;
    assert_eq!(res["payload"]["defaultId"], "main", "{res}");
    assert_eq!(
        res["payload"]["agents"],
        json!([{"id": "main", "name": null, "default": true,
                "model": {"primary": "fake/gpt-test", "fallbacks": []}}])
    );
}

#[tokio::test]
async fn commands_list_names_every_command_the_parser_knows() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 4).await;
    let res = client.call("commands.list", json!({})).await;
    assert_eq!(res["ok"], true, "{res}");
    let commands = res["payload"]["commands"].as_array().expect("commands");
    let names: Vec<&str> = commands.iter().filter_map(|c| c["name"].as_str()).collect();
    let parsed: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
    assert_eq!(names, parsed, "{res}");
    for command in commands {
        let name = command["name"].as_str().unwrap_or_default();
        let typed = format!("/{name}");
        assert!(
            parse_command(&typed, None).is_some_and(|c| c.spec.name == name),
            "{typed} is not a command the parser knows"
        );
        assert_eq!(command["scope"], "text", "{command}");
        assert!(command["description"]
            .as_str()
            .is_some_and(|d| !d.is_empty()));
    }
    let new = commands.iter().find(|c| c["name"] == "new").expect("/new");
    assert_eq!(new["textAliases"], json!(["/new", "/reset", "/clear"]));
    let model = commands
        .iter()
        .find(|c| c["name"] == "model")
        .expect("/model");
    assert_eq!(model["acceptsArgs"], true);
    assert_eq!(model["args"][0]["name"], "name", "{model}");

    let native = client
        .call("commands.list", json!({"scope": "native"}))
        .await;
    assert_eq!(native["payload"]["commands"], json!([]), "{native}");
    let unknown = client
        .call("commands.list", json!({"agentId": "nobody"}))
        .await;
    assert_eq!(unknown["ok"], false, "{unknown}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("nobody")),
        "{unknown}"
    );
}

#[tokio::test]
async fn agents_list_reports_the_configured_session_scope() {
    let fake = FakeOpenAi::start().await;
    let config = config_with_provider(&fake.base_url()).replace(
        "agents: {",
        r#"session: { scope: "global", mainKey: "home" }, agents: {"#,
    );
    let gateway = start_with(&config);
    let mut client = admin(&gateway, 6).await;
    let res = client.call("agents.list", json!({})).await;
    assert_eq!(res["payload"]["scope"], "global", "{res}");
    assert_eq!(res["payload"]["mainKey"], "home", "{res}");
}

#[tokio::test]
async fn send_to_an_unconfigured_channel_is_unavailable_naming_it() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 5).await;
    let res = client
        .call(
            "send",
            json!({"to": "12345", "message": "hi", "channel": "telegram", "idempotencyKey": "s-1"}),
        )
        .await;
    assert_eq!(res["ok"], false, "{res}");
    assert_eq!(res["error"]["code"], "UNAVAILABLE");
    let message = res["error"]["message"].as_str().expect("message");
    assert!(message.contains("telegram"), "{message}");
}

#[tokio::test]
async fn send_to_webchat_is_refused_as_internal_only() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 6).await;
    let res = client
        .call(
            "send",
            json!({"to": "me", "message": "hi", "channel": "webchat", "idempotencyKey": "s-2"}),
        )
        .await;
    assert_eq!(res["ok"], false, "{res}");
    assert_eq!(res["error"]["code"], "INVALID_REQUEST");
    let message = res["error"]["message"].as_str().expect("message");
    assert!(message.contains("internal-only"), "{message}");
}

#[tokio::test]
async fn send_without_an_idempotency_key_is_refused_naming_it() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake);
    let mut client = admin(&gateway, 7).await;
    let res = client
        .call(
            "send",
            json!({"to": "12345", "message": "hi", "channel": "telegram"}),
        )
        .await;
    assert_eq!(res["ok"], false, "{res}");
    assert_eq!(res["error"]["code"], "INVALID_REQUEST");
    assert_eq!(
        res["error"]["message"],
        "invalid send params: idempotencyKey is required"
    );
}
