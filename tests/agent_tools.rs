//! The agent's tool loop end to end: the model (the fake OpenAI server) calls
//! tools, pincer runs them in the agent's workspace — `exec` inside the
//! sandbox — and feeds the results back until the final answer.

mod support;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::{config_with_provider, GatewayProcess};
use support::ws_client::{Device, Read, TestClient};

const TOKEN: &str = "tools-test-token";

fn call(id: &str, name: &str, args: Value) -> (String, String, String) {
    (id.to_string(), name.to_string(), args.to_string())
}

/// Runs one `agent` turn and returns (final res, tool events seen).
async fn run(client: &mut TestClient, key: &str, message: &str) -> (Value, Vec<Value>) {
    let id = client
        .request("agent", json!({"message": message, "idempotencyKey": key}))
        .await;
    let mut tools = Vec::new();
    loop {
        let Read::Frame(frame) = client.read().await else {
            panic!("closed during the run")
        };
        if frame["event"] == "agent" && frame["payload"]["stream"] == "tool" {
            tools.push(frame["payload"]["data"].clone());
        }
        if frame["type"] == "res"
            && frame["id"] == id.as_str()
            && frame["payload"]["status"] != "accepted"
        {
            return (frame, tools);
        }
    }
}

async fn connect(gateway: &GatewayProcess, seed: u8) -> TestClient {
    let mut client = TestClient::open(&gateway.url()).await;
    let device = Device::new(seed);
    let mut params = client.connect_params(
        Some(TOKEN),
        &["operator.read", "operator.write"],
        Some(&device),
    );
    params["caps"] = json!(["tool-events"]);
    let id = client.request("connect", params).await;
    assert_eq!(client.response(&id).await["ok"], true);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_step_turn_reads_writes_and_answers() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![call("c1", "read", json!({"path": "notes/todo.md"}))],
    });
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![call(
            "c2",
            "write",
            json!({"path": "notes/done.md", "content": "milk bought\n"}),
        )],
    });
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Your list: ".into(), "buy milk.".into()],
        delay_ms: 1,
    });
    let gateway = GatewayProcess::start(
        &config_with_provider(&fake.base_url()),
        &["--port", "0", "--token", TOKEN],
    );
    let workspace = gateway.data_dir().join("workspace/notes");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("todo.md"), "- buy milk\n").expect("todo");
    let mut client = connect(&gateway, 30).await;
    let (res, tools) = run(&mut client, "tools-1", "what is on my list?").await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(
        res["payload"]["result"]["payloads"][0]["text"],
        "Your list: buy milk."
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("done.md")).expect("written"),
        "milk bought\n"
    );
    let phases: Vec<(String, String)> = tools
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap_or("").to_string(),
                t["phase"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        phases,
        vec![
            ("read".into(), "start".into()),
            ("read".into(), "result".into()),
            ("write".into(), "start".into()),
            ("write".into(), "result".into()),
        ]
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[0].body["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "exec")));
    let second = &requests[1].body["messages"];
    let tool_msg = second
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("tool result sent");
    assert_eq!(tool_msg["tool_call_id"], "c1");
    assert!(tool_msg["content"]
        .as_str()
        .expect("content")
        .contains("- buy milk"));
    // The history keeps the whole round, so a later turn sees it too.
    let history = client
        .call("chat.history", json!({"sessionKey": "main"}))
        .await;
    let roles: Vec<&str> = history["payload"]["messages"]
        .as_array()
        .expect("msgs")
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(
        roles,
        vec![
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escapes_from_the_workspace_come_back_as_tool_errors() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![
            call("e1", "read", json!({"path": "../../etc/passwd"})),
            call(
                "e2",
                "write",
                json!({"path": "/tmp/pincer-escape-test", "content": "x"}),
            ),
            call("e3", "nonexistent_tool", json!({})),
        ],
    });
    fake.push_reply(FakeReply::Text {
        chunks: vec!["ok".into()],
        delay_ms: 0,
    });
    let gateway = GatewayProcess::start(
        &config_with_provider(&fake.base_url()),
        &["--port", "0", "--token", TOKEN],
    );
    let mut client = connect(&gateway, 31).await;
    let (res, tools) = run(&mut client, "escape-1", "try to escape").await;
    assert_eq!(res["ok"], true);
    assert!(!std::path::Path::new("/tmp/pincer-escape-test").exists());
    let errors: Vec<bool> = tools
        .iter()
        .filter(|t| t["phase"] == "result")
        .map(|t| t["isError"] == true)
        .collect();
    assert_eq!(errors, vec![true, true, true]);
    let results: Vec<String> = fake.requests()[1].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(results[0].contains("outside the workspace"), "{results:?}");
    assert!(
        results[2].contains("no tool named nonexistent_tool"),
        "{results:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_runs_inside_the_sandbox_and_denied_tools_are_not_offered() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![call(
            "x1",
            "exec",
            json!({"command": "echo sandboxed > out.txt; cat out.txt; ls /home | wc -l"}),
        )],
    });
    fake.push_reply(FakeReply::Text {
        chunks: vec!["ran".into()],
        delay_ms: 0,
    });
    let config = config_with_provider(&fake.base_url()).replacen(
        '{',
        "{ tools: { deny: [\"web_fetch\"] },",
        1,
    );
    let gateway = GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN]);
    let mut client = connect(&gateway, 32).await;
    let (res, _) = run(&mut client, "exec-1", "run it").await;
    assert_eq!(res["ok"], true, "{res}");
    let requests = fake.requests();
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        !offered.contains(&"web_fetch"),
        "denied tool not offered: {offered:?}"
    );
    let result = requests[1].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("result")["content"]
        .as_str()
        .expect("text")
        .to_string();
    assert!(result.contains("sandboxed"), "{result}");
    assert_eq!(
        std::fs::read_to_string(gateway.data_dir().join("workspace/out.txt")).expect("out"),
        "sandboxed\n"
    );
}

#[tokio::test]
async fn tools_invoke_over_http_runs_allowed_tools_and_blocks_exec() {
    let gateway = GatewayProcess::start("{}", &["--port", "0", "--token", TOKEN]);
    std::fs::create_dir_all(gateway.data_dir().join("workspace")).expect("ws");
    std::fs::write(gateway.data_dir().join("workspace/hello.txt"), "hi there\n").expect("file");
    let http = reqwest::Client::new();
    let res = http
        .post(gateway.http("/tools/invoke"))
        .bearer_auth(TOKEN)
        .json(&json!({"tool": "read", "args": {"path": "hello.txt"}}))
        .send()
        .await
        .expect("invoke");
    assert_eq!(res.status(), 200);
    let body: Value = res.json().await.expect("json");
    assert_eq!(body["ok"], true);
    assert_eq!(body["result"]["text"], "hi there\n");
    let bad = http
        .post(gateway.http("/tools/invoke"))
        .bearer_auth(TOKEN)
        .json(&json!({"tool": "read", "args": {}}))
        .send()
        .await
        .expect("400");
    assert_eq!(bad.status(), 400);
    let exec = http
        .post(gateway.http("/tools/invoke"))
        .bearer_auth(TOKEN)
        .json(&json!({"tool": "exec", "args": {"command": "id"}}))
        .send()
        .await
        .expect("403");
    assert_eq!(exec.status(), 403, "exec is on the HTTP deny list");
}

/// `tools.byProvider`: the policy for the run's `provider/model` (or its
/// provider) narrows what the model is offered; other providers' entries
/// do not apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_provider_policy_narrows_the_tools_offered_to_that_model() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec!["ok".into()],
        delay_ms: 0,
    });
    let config = config_with_provider(&fake.base_url()).replacen(
        '{',
        r#"{ tools: { byProvider: { "fake/gpt-test": { deny: ["web_fetch"] }, other: { deny: ["read"] } } },"#,
        1,
    );
    let gateway = GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN]);
    let mut client = connect(&gateway, 41).await;
    let (res, _) = run(&mut client, "by-provider-1", "hello").await;
    assert_eq!(res["ok"], true, "{res}");
    let requests = fake.requests();
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(!offered.contains(&"web_fetch"), "{offered:?}");
    assert!(offered.contains(&"read"), "{offered:?}");
}

/// The tools one run of the gateway offers the model: `agents` holds the keys of the `agents` section
/// besides the model, `extra` further top-level keys.
async fn offered_tools(agents: &str, extra: &str, seed: u8) -> Vec<String> {
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::Text {
        chunks: vec!["ok".into()],
        delay_ms: 0,
    });
    let config = format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
                                   models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }}, {agents} }},
  {extra}
}}"#,
        fake.base_url()
    );
    let gateway = GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN]);
    let mut client = connect(&gateway, seed).await;
    let (res, _) = run(&mut client, &format!("sandbox-tools-{seed}"), "hello").await;
    assert_eq!(res["ok"], true, "{res}");
    let requests = fake.requests();
    requests[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect()
}

/// `tools.sandbox.tools`: a session a configured sandbox confines is offered upstream's default
/// sandbox allowlist (no web_fetch, memory, message or cron); `alsoAllow` adds to it, `deny` replaces
/// the default denylist, an agent's own lists win over the global ones; a session the sandbox does not
/// confine keeps every tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxed_sessions_get_the_sandbox_tool_policy() {
    let sandboxed = offered_tools(r#"sandbox: { mode: "all" } }"#, "", 51).await;
    for tool in ["read", "write", "exec", "sessions_list"] {
        assert!(sandboxed.iter().any(|t| t == tool), "{tool}: {sandboxed:?}");
    }
    for tool in ["web_fetch", "memory_search", "message", "cron"] {
        assert!(
            !sandboxed.iter().any(|t| t == tool),
            "{tool}: {sandboxed:?}"
        );
    }
    let widened = offered_tools(
        r#"sandbox: { mode: "all" } },
           list: [ { id: "main", tools: { sandbox: { tools: { alsoAllow: ["memory_search"] } } } } ]"#,
        r#"tools: { sandbox: { tools: { alsoAllow: ["web_fetch"], deny: ["exec"] } } },"#,
        52,
    )
    .await;
    assert!(widened.iter().any(|t| t == "memory_search"), "{widened:?}");
    assert!(
        !widened.iter().any(|t| t == "web_fetch"),
        "the agent's alsoAllow replaces the global one: {widened:?}"
    );
    assert!(!widened.iter().any(|t| t == "exec"), "{widened:?}");
    assert!(widened.iter().any(|t| t == "read"), "{widened:?}");
    let main_unconfined = offered_tools(r#"sandbox: { mode: "non-main" } }"#, "", 53).await;
    for tool in ["web_fetch", "memory_search", "cron"] {
        assert!(
            main_unconfined.iter().any(|t| t == tool),
            "{tool}: {main_unconfined:?}"
        );
    }
}
