//! `memory.status` and `memory.search` over the gateway protocol, against a real `pincer gateway` process
//! with the real embedding model, plus the watcher picking up a new note without a restart.

mod memory_support;
mod support;

use std::time::Duration;

use serde_json::json;
use support::gateway::GatewayProcess;
use support::ws_client::TestClient;

const TOKEN: &str = "memory-gateway-test-token";

fn start_with_workspace(workspace: &std::path::Path) -> GatewayProcess {
    // The child inherits these: the real runtime and model.
    let settings = memory_support::embedder_settings(Duration::from_secs(300));
    std::env::set_var("PINCER_ORT_DYLIB", &settings.runtime_library);
    std::env::set_var("PINCER_EMBED_MODEL_DIR", &settings.model_dir);
    let config = format!(
        r#"{{ agents: {{ defaults: {{ workspace: "{}", memorySearch: {{ sync: {{ watchDebounceMs: 300 }} }} }} }} }}"#,
        workspace.display()
    );
    GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN])
}

#[tokio::test]
async fn control_ui_can_read_memory_status_and_search_and_sees_new_notes() {
    let dir = tempfile::tempdir().expect("dir");
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(workspace.join("memory")).expect("mkdir");
    std::fs::write(
        workspace.join("MEMORY.md"),
        "# People\n\nMy sister Lena is allergic to peanuts.\n",
    )
    .expect("write");
    let gateway = start_with_workspace(&workspace);
    let (mut client, hello) =
        TestClient::connect(&gateway.url(), Some(TOKEN), &["operator.read"], None).await;
    let methods = hello["features"]["methods"].to_string();
    assert!(methods.contains("memory.search"), "{methods}");

    let res = client
        .call(
            "memory.search",
            json!({ "query": "is my sister allergic to peanuts" }),
        )
        .await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(res["payload"]["mode"], "hybrid", "{res}");
    assert_eq!(
        res["payload"]["results"][0]["path"],
        "MEMORY.md",
        "{res}\n{}",
        gateway.stderr()
    );
    assert_eq!(res["payload"]["results"][0]["startLine"], 1, "{res}");

    let status = client.call("memory.status", json!({})).await;
    assert_eq!(status["ok"], true, "{status}");
    assert_eq!(status["payload"]["files"], 1, "{status}");
    assert_eq!(
        status["payload"]["model"], "all-MiniLM-L6-v2:384",
        "{status}"
    );

    std::fs::write(
        workspace.join("memory/2026-01-05.md"),
        "The boiler service is booked for Friday morning.\n",
    )
    .expect("write new note");
    let mut found = false;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let res = client
            .call(
                "memory.search",
                json!({ "query": "boiler service", "minScore": 0.0 }),
            )
            .await;
        let paths = res["payload"]["results"].to_string();
        if paths.contains("memory/2026-01-05.md") {
            found = true;
            break;
        }
    }
    assert!(found, "the watcher indexed the new note");

    let bad = client.call("memory.search", json!({ "query": "" })).await;
    assert_eq!(bad["ok"], false, "{bad}");
    assert!(
        bad["error"]["message"].to_string().contains("query"),
        "{bad}"
    );
    let unknown = client
        .call("memory.status", json!({ "agentId": "nobody" }))
        .await;
    assert_eq!(unknown["ok"], false, "{unknown}");
}

#[tokio::test]
async fn the_watcher_starts_with_the_gateway_before_any_memory_call() {
    let dir = tempfile::tempdir().expect("dir");
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::write(
        workspace.join("MEMORY.md"),
        "The spare key is under the blue pot.\n",
    )
    .expect("write");
    let gateway = start_with_workspace(&workspace);
    // No memory.* call: only the watcher started with the gateway can index the note. The CLI reads the
    // index beside the running gateway.
    let mut files = serde_json::Value::Null;
    for _ in 0..80 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pincer"))
            .arg("--config")
            .arg(gateway.config_path())
            .arg("--data-dir")
            .arg(gateway.data_dir())
            .args(["--log-level", "warn", "memory", "status", "--json"])
            .env_remove("PINCER_CONFIG")
            .env_remove("PINCER_DATA_DIR")
            .output()
            .expect("run pincer memory status");
        let status: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        files = status["files"].clone();
        if files == 1 {
            break;
        }
    }
    assert_eq!(files, 1, "indexed at start; {}", gateway.stderr());
}

/// The watcher's syncs reach the gateway's clients as `pincer.memory.index.progress` events: a step
/// per file, then `done` with the totals (keyword-only here: the embedding runtime is absent).
#[tokio::test]
async fn index_progress_reaches_clients_as_events() {
    let dir = tempfile::tempdir().expect("dir");
    let workspace = dir.path().join("ws");
    std::fs::create_dir_all(workspace.join("memory")).expect("mkdir");
    for n in 1..=3 {
        std::fs::write(
            workspace.join(format!("memory/2026-04-0{n}.md")),
            format!("Note {n} about the allotment.\n"),
        )
        .expect("write");
    }
    let config = format!(
        r#"{{ agents: {{ defaults: {{ workspace: "{}", memorySearch: {{ sync: {{ watchDebounceMs: 300 }} }} }} }} }}"#,
        workspace.display()
    );
    let gateway = GatewayProcess::start_with_env(
        &config,
        &["--port", "0", "--token", TOKEN],
        &[
            ("PINCER_ORT_DYLIB", "/nonexistent/libonnxruntime.so"),
            ("PINCER_EMBED_MODEL_DIR", "/nonexistent/model"),
        ],
    );
    let (mut client, _) =
        TestClient::connect(&gateway.url(), Some(TOKEN), &["operator.read"], None).await;
    std::fs::write(
        workspace.join("memory/2026-04-04.md"),
        "The new shed arrives on Tuesday.\n",
    )
    .expect("write new note");
    let wait = Duration::from_secs(30);
    let event = "pincer.memory.index.progress";
    let step = tokio::time::timeout(
        wait,
        client.event_where(event, |p| p["done"] == false && p["filesTotal"] == 4),
    )
    .await
    .unwrap_or_else(|_| panic!("no progress step\n{}", gateway.stderr()));
    assert_eq!(step["agentId"], "main", "{step}");
    assert!(step["filesDone"].as_u64().is_some_and(|n| n >= 1), "{step}");
    let done = tokio::time::timeout(
        wait,
        client.event_where(event, |p| p["done"] == true && p["filesTotal"] == 4),
    )
    .await
    .unwrap_or_else(|_| panic!("no final progress event\n{}", gateway.stderr()));
    assert_eq!(done["filesDone"], 4, "{done}");
    assert!(done["error"].is_null(), "{done}");
}
