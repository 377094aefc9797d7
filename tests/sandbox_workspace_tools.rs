//! `sandbox.workspaceAccess` through the agent's tools (`exec`, `read`, `write`, `edit`,
//! `apply_patch`) in a sandboxed session, as upstream defines it: `none` gives the session a
//! private workspace and nothing of the agent's; `ro` the private one plus the agent's workspace
//! read-only (at `/agent`), with the writing file tools disabled; `rw` the agent's workspace.
//!
//! These run the real sandbox: on a host with neither namespaces nor Landlock the test says it
//! was skipped (tests/sandbox_support), it does not pass silently.
// sandbox_support includes support/skip.rs by path (so the sandbox tests need not build all of
// support); this file needs both, hence skip.rs twice.
#![allow(clippy::duplicate_mod)]

mod sandbox_support;
mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pincer::sandbox::Layer;
use pincer::store::{Store, StoreOptions};
use pincer::tools::exec::ExecTool;
use pincer::tools::fs::{ReadTool, WriteTool};
use pincer::tools::patch::ApplyPatchTool;
use pincer::tools::{Tool, ToolContext};
use sandbox_support::{capabilities, confined_modes, report};
use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::gateway::GatewayProcess;
use support::ws_client::TestClient;
use tokio_util::sync::CancellationToken;

const NOTES: &str = "agent-notes-4f1c";

struct Setup {
    _dir: tempfile::TempDir,
    workspace: PathBuf,
    sandboxes: PathBuf,
    ctx: ToolContext,
}

/// A non-main session of agent `main` under `sandbox: { mode: "all", workspaceAccess: <access> }`,
/// the agent's workspace holding `notes.txt`.
fn setup(access: &str) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().canonicalize().expect("canonical");
    let workspace = base.join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("notes.txt"), format!("{NOTES}\n")).expect("notes");
    let sandboxes = base.join("sandboxes");
    let config = format!(
        r#"{{ agents: {{ defaults: {{ sandbox: {{ mode: "all", workspaceAccess: "{access}",
                                              workspaceRoot: "{}" }} }} }} }}"#,
        sandboxes.display()
    );
    let config = pincer::config::parse_str(&config, "test").expect("config");
    let store = Store::open(&base.join("store"), StoreOptions::default()).expect("store");
    let ctx = ToolContext {
        agent_id: "main".into(),
        session_key: "agent:main:telegram:group:-100".into(),
        workspace: workspace.clone(),
        store,
        http: reqwest::Client::new(),
        cancel: CancellationToken::new(),
        config: Arc::new(config),
        services: Default::default(),
    };
    Setup {
        _dir: dir,
        workspace,
        sandboxes,
        ctx,
    }
}

/// The sandbox can run here; otherwise the test reports the skip.
fn sandbox_available(test: &str) -> bool {
    if confined_modes(test).is_empty() {
        report(&format!(
            "SKIPPED {test}: neither namespaces nor Landlock is available on this host"
        ));
        return false;
    }
    true
}

/// Where the read-only agent workspace appears to a command: `/agent` with namespaces, its own
/// path with Landlock alone.
fn agent_path_in_sandbox(workspace: &Path) -> String {
    if capabilities().status(Layer::Namespaces).is_available() {
        "/agent".to_owned()
    } else {
        workspace.display().to_string()
    }
}

async fn call(tool: &dyn Tool, ctx: &ToolContext, args: Value) -> Result<String, String> {
    tool.execute(args, ctx)
        .await
        .map(|out| out.text)
        .map_err(|e| e.to_string())
}

async fn exec(ctx: &ToolContext, command: &str) -> String {
    call(&ExecTool, ctx, json!({"command": command, "timeout": 20}))
        .await
        .expect("exec ran")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn none_hides_the_agent_workspace_and_gives_a_private_one() {
    if !sandbox_available("none_hides_the_agent_workspace_and_gives_a_private_one") {
        return;
    }
    let s = setup("none");
    let ws = s.workspace.display();
    let out = exec(
        &s.ctx,
        &format!("cat notes.txt {ws}/notes.txt /agent/notes.txt; touch {ws}/planted; touch made-here; pwd"),
    )
    .await;
    assert!(
        !out.contains(NOTES),
        "the agent workspace was readable: {out}"
    );
    assert!(!s.workspace.join("planted").exists(), "{out}");
    assert!(!s.workspace.join("made-here").exists(), "{out}");
    let private = s.sandboxes.join(
        std::fs::read_dir(&s.sandboxes)
            .expect("the private workspace was created")
            .next()
            .expect("one entry")
            .expect("entry")
            .file_name(),
    );
    assert!(private.join("made-here").exists(), "{out}");
    // The file tools work in the same private workspace.
    let read = call(&ReadTool, &s.ctx, json!({"path": "notes.txt"})).await;
    assert!(read.is_err(), "read saw the agent's notes: {read:?}");
    call(&WriteTool, &s.ctx, json!({"path": "w.txt", "content": "x"}))
        .await
        .expect("write in the private workspace");
    assert!(private.join("w.txt").exists());
    assert!(!s.workspace.join("w.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ro_shows_the_agent_workspace_read_only_and_disables_the_writing_tools() {
    if !sandbox_available("ro_shows_the_agent_workspace_read_only_and_disables_the_writing_tools") {
        return;
    }
    let s = setup("ro");
    let agent = agent_path_in_sandbox(&s.workspace);
    let out = exec(
        &s.ctx,
        &format!("cat {agent}/notes.txt; touch {agent}/planted; echo x >> {agent}/notes.txt; touch private-file"),
    )
    .await;
    assert!(
        out.contains(NOTES),
        "the agent workspace was not readable: {out}"
    );
    assert!(!s.workspace.join("planted").exists(), "{out}");
    assert_eq!(
        std::fs::read_to_string(s.workspace.join("notes.txt")).expect("notes"),
        format!("{NOTES}\n"),
        "{out}"
    );
    assert!(!s.workspace.join("private-file").exists(), "{out}");
    let read = call(&ReadTool, &s.ctx, json!({"path": "/agent/notes.txt"}))
        .await
        .expect("read reaches the agent workspace under /agent");
    assert!(read.contains(NOTES), "{read}");
    let write = call(&WriteTool, &s.ctx, json!({"path": "w.txt", "content": "x"})).await;
    assert!(
        write.as_ref().is_err_and(|e| e.contains("read-only")),
        "{write:?}"
    );
    let patch = "*** Begin Patch\n*** Add File: p.txt\n+x\n*** End Patch";
    let patched = call(&ApplyPatchTool, &s.ctx, json!({"input": patch})).await;
    assert!(
        patched.as_ref().is_err_and(|e| e.contains("read-only")),
        "{patched:?}"
    );
    assert!(!s.workspace.join("w.txt").exists() && !s.workspace.join("p.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw_works_in_the_agent_workspace() {
    if !sandbox_available("rw_works_in_the_agent_workspace") {
        return;
    }
    let s = setup("rw");
    let out = exec(&s.ctx, "cat notes.txt; touch made-here").await;
    assert!(out.contains(NOTES), "{out}");
    assert!(s.workspace.join("made-here").exists(), "{out}");
    call(&WriteTool, &s.ctx, json!({"path": "w.txt", "content": "x"}))
        .await
        .expect("write");
    assert!(s.workspace.join("w.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_exec_call_lands_in_the_private_workspace_under_the_data_dir() {
    if !sandbox_available("the_models_exec_call_lands_in_the_private_workspace_under_the_data_dir")
    {
        return;
    }
    const TOKEN: &str = "workspace-access-token";
    let fake = FakeOpenAi::start().await;
    fake.push_reply(FakeReply::ToolCalls {
        calls: vec![(
            "c1".to_string(),
            "exec".to_string(),
            json!({"command": "touch made-by-model"}).to_string(),
        )],
    });
    fake.push_reply(FakeReply::Text {
        chunks: vec!["done".into()],
        delay_ms: 1,
    });
    let config = format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{}", apiKey: "sk-test", api: "openai-completions",
                                   models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }},
                         sandbox: {{ mode: "all", workspaceAccess: "none" }} }} }},
}}"#,
        fake.base_url()
    );
    let gateway = GatewayProcess::start(&config, &["--port", "0", "--token", TOKEN]);
    let workspace = gateway.data_dir().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let mut client = TestClient::open(&gateway.url()).await;
    let params = client.connect_params(Some(TOKEN), &["operator.write"], None);
    let id = client.request("connect", params).await;
    assert_eq!(client.response(&id).await["ok"], true);
    let run = client
        .request("agent", json!({"message": "go", "idempotencyKey": "wa1"}))
        .await;
    loop {
        let frame = client.response(&run).await;
        if frame["payload"]["status"] != "accepted" {
            assert_eq!(frame["ok"], true, "{frame}");
            break;
        }
    }
    assert!(!workspace.join("made-by-model").exists());
    let sandboxes = gateway.data_dir().join("sandboxes");
    let made: Vec<_> = std::fs::read_dir(&sandboxes)
        .expect("the gateway made <data dir>/sandboxes")
        .filter_map(Result::ok)
        .filter(|entry| entry.path().join("made-by-model").exists())
        .map(|entry| entry.file_name())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(
        made[0].to_string_lossy().starts_with("agent-main-"),
        "{made:?}"
    );
}
