//! `tools.exec.security` and `tools.exec.ask` through the real `exec` tool, as upstream defines
//! them: `deny` runs nothing whatever `ask` says, `allowlist` runs listed commands and asks about
//! (`on-miss`) or refuses (`off`) the others, `full` runs everything unless `ask: "always"`, and
//! `agents.list[].tools.exec` overrides the global keys for its agent. Each command would create
//! a file in the workspace; whether the file exists says whether it ran.
//!
//! The sandbox is off here (`sandbox.mode: "off"`): these tests are about the gate before the
//! sandbox, and must not depend on the host's namespaces (the sandbox suites cover those).

use std::path::Path;
use std::sync::Arc;

use pincer::store::{Store, StoreOptions};
use pincer::tools::{exec::ExecTool, Tool, ToolContext};
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct Setup {
    dir: tempfile::TempDir,
    ctx: ToolContext,
}

/// A `main` agent's exec context under `config` (JSON5 text), sandbox off.
fn setup(config: &str) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let store = Store::open(&dir.path().join("store"), StoreOptions::default()).expect("store");
    let config = pincer::config::parse_str(config, "test").expect("config parses");
    let ctx = ToolContext {
        agent_id: "main".into(),
        session_key: "agent:main:telegram:direct:42".into(),
        workspace,
        store,
        http: reqwest::Client::new(),
        cancel: CancellationToken::new(),
        config: Arc::new(config),
        services: Default::default(),
    };
    Setup { dir, ctx }
}

fn config(exec: &str, agents: &str) -> String {
    format!(
        r#"{{ agents: {{ defaults: {{ sandbox: {{ mode: "off" }} }}, list: [{agents}] }},
             tools: {{ exec: {exec} }} }}"#
    )
}

/// Runs `touch <name>` as the tool; `Ok` with the output or `Err` with the refusal.
async fn touch(ctx: &ToolContext, name: &str) -> Result<String, String> {
    ExecTool
        .execute(
            json!({"command": format!("touch {name}"), "timeout": 20}),
            ctx,
        )
        .await
        .map(|out| out.text)
        .map_err(|e| e.to_string())
}

fn ran(workspace: &Path, name: &str) -> bool {
    workspace.join(name).exists()
}

#[tokio::test]
async fn deny_runs_nothing_whatever_ask_says() {
    for exec in [
        r#"{ security: "deny" }"#,
        r#"{ security: "deny", ask: "off" }"#,
        r#"{ security: "deny", ask: "always" }"#,
        r#"{ security: "deny", ask: "on-miss", allowlist: ["touch"] }"#,
    ] {
        let s = setup(&config(exec, ""));
        let refused = touch(&s.ctx, "denied").await.expect_err(exec);
        assert!(
            refused.contains("tools.exec.security: \"deny\""),
            "{exec}: {refused}"
        );
        assert!(!ran(&s.ctx.workspace, "denied"), "{exec}: the command ran");
    }
}

#[tokio::test]
async fn allowlist_with_ask_off_runs_listed_commands_and_refuses_the_rest() {
    let s = setup(&config(
        r#"{ security: "allowlist", ask: "off", allowlist: ["touch listed"] }"#,
        "",
    ));
    touch(&s.ctx, "listed")
        .await
        .expect("a listed command runs");
    assert!(ran(&s.ctx.workspace, "listed"));
    let refused = touch(&s.ctx, "unlisted").await.expect_err("not listed");
    assert!(refused.contains("allowlist"), "{refused}");
    assert!(!ran(&s.ctx.workspace, "unlisted"));
}

#[tokio::test]
async fn allowlist_with_ask_on_miss_asks_about_unlisted_commands_only() {
    // Nobody can answer in this context, so an asked command is denied for want of an approver:
    // the refusal naming the approver shows it was asked, not refused by the allowlist.
    let s = setup(&config(
        r#"{ security: "allowlist", ask: "on-miss", allowlist: ["touch listed"] }"#,
        "",
    ));
    touch(&s.ctx, "listed")
        .await
        .expect("a listed command runs unasked");
    assert!(ran(&s.ctx.workspace, "listed"));
    let refused = touch(&s.ctx, "unlisted")
        .await
        .expect_err("asked, nobody answers");
    assert!(refused.contains("approval required"), "{refused}");
    assert!(!ran(&s.ctx.workspace, "unlisted"));
}

#[tokio::test]
async fn full_runs_everything_and_ask_always_still_asks() {
    let s = setup(&config(r#"{ security: "full", ask: "on-miss" }"#, ""));
    touch(&s.ctx, "anything")
        .await
        .expect("full runs an unlisted command");
    assert!(ran(&s.ctx.workspace, "anything"));
    let s = setup(&config(r#"{ security: "full", ask: "always" }"#, ""));
    let refused = touch(&s.ctx, "asked")
        .await
        .expect_err("asked, nobody answers");
    assert!(refused.contains("approval required"), "{refused}");
    assert!(!ran(&s.ctx.workspace, "asked"));
}

#[tokio::test]
async fn an_agent_override_applies_to_that_agent_only() {
    let agents = r#"{ id: "main", tools: { exec: { security: "deny" } } }, { id: "helper" }"#;
    let mut s = setup(&config(r#"{ security: "full" }"#, agents));
    let refused = touch(&s.ctx, "main-file")
        .await
        .expect_err("main is denied");
    assert!(refused.contains("deny"), "{refused}");
    assert!(!ran(&s.ctx.workspace, "main-file"));
    s.ctx.agent_id = "helper".into();
    s.ctx.session_key = "agent:helper:telegram:direct:42".into();
    touch(&s.ctx, "helper-file")
        .await
        .expect("helper keeps full");
    assert!(ran(&s.ctx.workspace, "helper-file"));
    drop(s.dir);
}

/// `tools.exec.host`: `sandbox` refuses a session no sandbox confines; `gateway` runs on the host
/// outside the sandbox, in the agent's workspace, even where a sandbox confines the session (a path
/// outside the workspace is written, which no sandbox layer allows).
#[tokio::test]
async fn exec_host_sandbox_needs_a_sandbox_and_gateway_runs_on_the_host() {
    let s = setup(&config(r#"{ host: "sandbox", security: "full" }"#, ""));
    let refused = touch(&s.ctx, "nowhere").await.expect_err("no sandbox");
    assert!(refused.contains("exec host=sandbox"), "{refused}");
    assert!(!ran(&s.ctx.workspace, "nowhere"));

    let s = setup(
        r#"{ agents: { defaults: { sandbox: { mode: "all", workspaceAccess: "none" } } },
             tools: { exec: { host: "gateway", security: "full" } } }"#,
    );
    let outside = s.dir.path().join("outside.txt");
    let out = ExecTool
        .execute(
            json!({"command": format!("touch in-workspace && echo host > {}", outside.display()), "timeout": 20}),
            &s.ctx,
        )
        .await
        .map(|o| o.text)
        .map_err(|e| e.to_string());
    assert!(out.is_ok(), "{out:?}");
    assert!(
        outside.exists(),
        "the command ran outside the sandbox: {out:?}"
    );
    assert!(
        ran(&s.ctx.workspace, "in-workspace"),
        "in the agent's workspace"
    );
}
