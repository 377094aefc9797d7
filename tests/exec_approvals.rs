//! Exec approvals end to end: with `tools.exec.ask` set, the model's `exec` call waits for an
//! operator; the gateway broadcasts `exec.approval.requested`, `exec.approval.resolve` answers,
//! `exec.approval.resolved` follows, and the command runs (or not) accordingly.

mod support;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::GatewayProcess;
use support::ws_client::TestClient;

const TOKEN: &str = "approvals-test-token";

fn config(base_url: &str, exec: &str) -> String {
    format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{base_url}", apiKey: "sk-test", api: "openai-completions",
                                   models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }} }} }},
  tools: {{ exec: {exec} }},
}}"#
    )
}

fn exec_call(id: &str, command: &str) -> FakeReply {
    FakeReply::ToolCalls {
        calls: vec![(
            id.to_string(),
            "exec".to_string(),
            json!({ "command": command }).to_string(),
        )],
    }
}

fn answer() -> FakeReply {
    FakeReply::Text {
        chunks: vec!["ok".into()],
        delay_ms: 1,
    }
}

async fn connect(gateway: &GatewayProcess, scopes: &[&str]) -> TestClient {
    let mut client = TestClient::open(&gateway.url()).await;
    let params = client.connect_params(Some(TOKEN), scopes, None);
    let id = client.request("connect", params).await;
    let hello = client.response(&id).await;
    assert_eq!(hello["ok"], true, "{hello}");
    client
}

async fn final_response(client: &mut TestClient, id: &str) -> Value {
    loop {
        let frame = client.response(id).await;
        if frame["payload"]["status"] != "accepted" {
            return frame;
        }
    }
}

/// The content of the last tool message the model was sent.
fn last_tool_result(fake: &FakeOpenAi) -> String {
    let requests = fake.requests();
    requests
        .last()
        .and_then(|r| r.body["messages"].as_array().cloned())
        .and_then(|m| m.into_iter().rev().find(|m| m["role"] == "tool"))
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .expect("a tool result")
}

fn start(fake: &FakeOpenAi, exec: &str) -> GatewayProcess {
    let gateway = GatewayProcess::start(
        &config(&fake.base_url(), exec),
        &["--port", "0", "--token", TOKEN],
    );
    std::fs::create_dir_all(gateway.data_dir().join("workspace")).expect("workspace");
    gateway
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_command_runs_after_the_operator_approves() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(exec_call("c1", "echo approved > out.txt"));
    fake.push_reply(answer());
    let gateway = start(&fake, r#"{ ask: "always" }"#);
    let mut runner = connect(&gateway, &["operator.write"]).await;
    let mut approver = connect(&gateway, &["operator.approvals"]).await;
    let run = runner
        .request("agent", json!({"message": "go", "idempotencyKey": "a1"}))
        .await;
    let requested = approver
        .event_where("exec.approval.requested", |_| true)
        .await;
    assert_eq!(requested["request"]["command"], "echo approved > out.txt");
    assert!(requested["expiresAtMs"].as_u64() > requested["createdAtMs"].as_u64());
    let id = requested["id"].as_str().expect("id").to_string();
    let listed = approver.call("exec.approval.list", json!({})).await;
    assert_eq!(
        listed["payload"]["approvals"][0]["id"],
        id.as_str(),
        "{listed}"
    );
    let resolve = approver
        .request(
            "exec.approval.resolve",
            json!({"id": id, "decision": "allow-once"}),
        )
        .await;
    let event = approver
        .event_where("exec.approval.resolved", |p| p["id"] == id.as_str())
        .await;
    let resolved = approver.response(&resolve).await;
    assert_eq!(resolved["ok"], true, "{resolved}");
    assert_eq!(event["decision"], "allow-once");
    let res = final_response(&mut runner, &run).await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(
        std::fs::read_to_string(gateway.data_dir().join("workspace/out.txt")).expect("ran"),
        "approved\n"
    );
    let again = approver
        .call(
            "exec.approval.resolve",
            json!({"id": id, "decision": "deny"}),
        )
        .await;
    assert_eq!(
        again["ok"], false,
        "a resolved approval cannot be resolved twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_command_never_runs() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(exec_call("c1", "echo nope > out.txt"));
    fake.push_reply(answer());
    let gateway = start(&fake, r#"{ ask: "always" }"#);
    let mut runner = connect(&gateway, &["operator.write", "operator.approvals"]).await;
    let run = runner
        .request("agent", json!({"message": "go", "idempotencyKey": "d1"}))
        .await;
    let requested = runner
        .event_where("exec.approval.requested", |_| true)
        .await;
    let bad = runner
        .call(
            "exec.approval.resolve",
            json!({"id": requested["id"], "decision": "maybe"}),
        )
        .await;
    assert_eq!(bad["ok"], false);
    assert!(bad["error"]["message"]
        .as_str()
        .unwrap_or("")
        .contains("allow-once"));
    runner
        .call(
            "exec.approval.resolve",
            json!({"id": requested["id"], "decision": "deny"}),
        )
        .await;
    let res = final_response(&mut runner, &run).await;
    assert_eq!(res["ok"], true, "{res}");
    assert!(last_tool_result(&fake).contains("denied"));
    assert!(!gateway.data_dir().join("workspace/out.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_always_adds_the_program_to_the_allowlist_and_listed_commands_skip_asking() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(exec_call("c1", "touch one.txt"));
    fake.push_reply(exec_call("c2", "mkdir two"));
    fake.push_reply(exec_call("c3", "touch three.txt"));
    fake.push_reply(exec_call("c4", "touch four.txt; true"));
    fake.push_reply(answer());
    let gateway = start(
        &fake,
        r#"{ security: "allowlist", ask: "on-miss", allowlist: ["mkdir"] }"#,
    );
    let mut runner = connect(&gateway, &["operator.write", "operator.approvals"]).await;
    let run = runner
        .request("agent", json!({"message": "go", "idempotencyKey": "w1"}))
        .await;
    let first = runner
        .event_where("exec.approval.requested", |_| true)
        .await;
    assert_eq!(first["request"]["command"], "touch one.txt");
    runner
        .call(
            "exec.approval.resolve",
            json!({"id": first["id"], "decision": "allow-always"}),
        )
        .await;
    // `mkdir` is configured and `touch` was just allowed: the next ask is the compound command.
    let next = runner
        .event_where("exec.approval.requested", |_| true)
        .await;
    assert_eq!(next["request"]["command"], "touch four.txt; true");
    runner
        .call(
            "exec.approval.resolve",
            json!({"id": next["id"], "decision": "deny"}),
        )
        .await;
    let res = final_response(&mut runner, &run).await;
    assert_eq!(res["ok"], true, "{res}");
    let workspace = gateway.data_dir().join("workspace");
    assert!(workspace.join("one.txt").exists());
    assert!(workspace.join("two").is_dir());
    assert!(workspace.join("three.txt").exists());
    assert!(!workspace.join("four.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_deny_refuses_the_models_exec_call_with_approvals_off() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(exec_call("c1", "echo ran > out.txt"));
    fake.push_reply(answer());
    let gateway = start(&fake, r#"{ security: "deny", ask: "off" }"#);
    let mut runner = connect(&gateway, &["operator.write", "operator.approvals"]).await;
    let run = runner
        .request("agent", json!({"message": "go", "idempotencyKey": "s1"}))
        .await;
    let res = final_response(&mut runner, &run).await;
    assert_eq!(res["ok"], true, "{res}");
    let result = last_tool_result(&fake);
    assert!(result.contains("tools.exec.security"), "{result}");
    assert!(!gateway.data_dir().join("workspace/out.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_connected_approver_the_command_is_denied_at_once() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(exec_call("c1", "echo alone > out.txt"));
    fake.push_reply(answer());
    let gateway = start(&fake, r#"{ ask: "always" }"#);
    let mut runner = connect(&gateway, &["operator.write"]).await;
    let run = runner
        .request("agent", json!({"message": "go", "idempotencyKey": "n1"}))
        .await;
    let res = final_response(&mut runner, &run).await;
    assert_eq!(res["ok"], true, "{res}");
    let result = last_tool_result(&fake);
    assert!(result.contains("no operator client"), "{result}");
    assert!(!gateway.data_dir().join("workspace/out.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_request_waits_for_the_decision_of_another_client() {
    let fake = FakeOpenAi::start().await;
    let gateway = start(&fake, "{}");
    let mut asker = connect(&gateway, &["operator.approvals"]).await;
    let mut approver = connect(&gateway, &["operator.approvals"]).await;
    let asked = asker
        .request(
            "exec.approval.request",
            json!({"id": "ask-1", "command": "uptime", "timeoutMs": 60000}),
        )
        .await;
    let requested = approver
        .event_where("exec.approval.requested", |p| p["id"] == "ask-1")
        .await;
    assert_eq!(requested["request"]["command"], "uptime");
    let got = approver
        .call("exec.approval.get", json!({"id": "ask-1"}))
        .await;
    assert_eq!(got["payload"]["request"]["command"], "uptime", "{got}");
    approver
        .call(
            "exec.approval.resolve",
            json!({"id": "ask-1", "decision": "allow-once"}),
        )
        .await;
    let answer = asker.response(&asked).await;
    assert_eq!(answer["payload"]["decision"], "allow-once", "{answer}");
    let mut reader = connect(&gateway, &["operator.read"]).await;
    let refused = reader.call("exec.approval.list", json!({})).await;
    assert_eq!(refused["ok"], false, "approvals need operator.approvals");
}
