//! `memory_search` and `memory_get` called by the model (the fake OpenAI
//! server) inside a real gateway with the real embedding model: the tool
//! results carry the note, its path and lines; a path outside the memory
//! files is refused as a tool error, not a failed run.

mod memory_support;
mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::GatewayProcess;
use support::ws_client::{Device, Read, TestClient};

const TOKEN: &str = "memory-tools-test-token";

fn call(id: &str, name: &str, args: Value) -> (String, String, String) {
    (id.to_string(), name.to_string(), args.to_string())
}

/// The tool message the model got back for `call_id`.
fn tool_result(body: &Value, call_id: &str) -> String {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .map(|m| m["content"].to_string())
        .unwrap_or_else(|| panic!("no tool result for {call_id} in {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_searches_and_reads_memory_through_its_tools() {
    let settings = memory_support::embedder_settings(Duration::from_secs(300));
    std::env::set_var("PINCER_ORT_DYLIB", &settings.runtime_library);
    std::env::set_var("PINCER_EMBED_MODEL_DIR", &settings.model_dir);
    let dir = tempfile::tempdir().expect("dir");
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(workspace.join("memory")).expect("mkdir");
    std::fs::write(
        workspace.join("MEMORY.md"),
        "# People\n\nMy sister Lena is allergic to peanuts.\n",
    )
    .expect("write");
    std::fs::write(dir.path().join("secret.md"), "SECRET-CONTENT\n").expect("write");

    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![call(
            "s1",
            "memory_search",
            json!({"query": "is my sister allergic to anything", "minScore": 0.0}),
        )],
    });
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![
            call("g1", "memory_get", json!({"path": "MEMORY.md", "from": 3})),
            call("g2", "memory_get", json!({"path": "../secret.md"})),
        ],
    });
    fake.push_reply(FakeReply::Text {
        chunks: vec!["Lena is allergic to peanuts.".into()],
        delay_ms: 1,
    });
    let config = format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
                                   models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }}, workspace: "{}" }} }},
}}"#,
        fake.base_url(),
        workspace.display()
    );
    let gateway = GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN]);
    let mut client = TestClient::open(&gateway.url()).await;
    let device = Device::new(61);
    let params = client.connect_params(
        Some(TOKEN),
        &["operator.read", "operator.write"],
        Some(&device),
    );
    let id = client.request("connect", params).await;
    assert_eq!(client.response(&id).await["ok"], true);

    let id = client
        .request(
            "agent",
            json!({"message": "what is my sister allergic to?", "idempotencyKey": "mem-1"}),
        )
        .await;
    let res = loop {
        let Read::Frame(frame) = client.read().await else {
            panic!("closed during the run")
        };
        if frame["type"] == "res"
            && frame["id"] == id.as_str()
            && frame["payload"]["status"] != "accepted"
        {
            break frame;
        }
    };
    assert_eq!(res["ok"], true, "{res}\n{}", gateway.stderr());

    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "{}", gateway.stderr());
    let offered: Vec<String> = requests[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
        .collect();
    assert!(offered.iter().any(|n| n == "memory_search"), "{offered:?}");
    assert!(offered.iter().any(|n| n == "memory_get"), "{offered:?}");

    let search = tool_result(&requests[1].body, "s1");
    assert!(search.contains("MEMORY.md"), "{search}");
    assert!(search.contains("peanuts"), "{search}");

    let get = tool_result(&requests[2].body, "g1");
    assert!(get.contains("allergic to peanuts"), "{get}");
    assert!(!get.contains("# People"), "reading starts at line 3: {get}");
    let refused = tool_result(&requests[2].body, "g2");
    assert!(!refused.contains("SECRET-CONTENT"), "{refused}");
    assert!(refused.contains("is not a memory file"), "{refused}");
}
