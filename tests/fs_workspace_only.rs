//! `tools.fs.workspaceOnly` through the file tools: unset or `true`, `read`,
//! `write`, `edit` and `apply_patch` stay inside the agent's workspace;
//! `false` lets a session no sandbox mode confines reach host paths, as
//! upstream's unsandboxed tools do. An agent's own `tools.fs` wins.

use std::path::PathBuf;
use std::sync::Arc;

use pincer::store::{Store, StoreOptions};
use pincer::tools::fs::{ReadTool, WriteTool};
use pincer::tools::patch::ApplyPatchTool;
use pincer::tools::{Tool, ToolContext, ToolError};
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct Setup {
    _dir: tempfile::TempDir,
    outside: PathBuf,
    ctx: ToolContext,
}

/// A Telegram group session of agent `main` under `config`, with a file
/// outside its workspace.
fn setup(config: &str) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = dir.path().canonicalize().expect("canonical");
    let workspace = base.join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let outside = base.join("elsewhere");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::write(outside.join("notes.txt"), "host notes\n").expect("notes");
    let config = pincer::config::parse_str(config, "test").expect("config");
    let store = Store::open(&base.join("store"), StoreOptions::default()).expect("store");
    let ctx = ToolContext {
        agent_id: "main".into(),
        session_key: "agent:main:telegram:group:-100".into(),
        workspace,
        store,
        http: reqwest::Client::new(),
        cancel: CancellationToken::new(),
        config: Arc::new(config),
        services: Default::default(),
    };
    Setup {
        _dir: dir,
        outside,
        ctx,
    }
}

async fn read(setup: &Setup) -> Result<String, ToolError> {
    let path = setup.outside.join("notes.txt");
    ReadTool
        .execute(json!({"path": path.to_str().expect("utf8")}), &setup.ctx)
        .await
        .map(|out| out.text)
}

#[tokio::test]
async fn unset_or_true_keeps_the_file_tools_in_the_workspace() {
    for config in ["{}", r#"{ tools: { fs: { workspaceOnly: true } } }"#] {
        let setup = setup(config);
        assert!(
            matches!(read(&setup).await, Err(ToolError::Denied(_))),
            "{config}"
        );
        let target = setup.outside.join("new.txt");
        let wrote = WriteTool
            .execute(
                json!({"path": target.to_str().expect("utf8"), "content": "x"}),
                &setup.ctx,
            )
            .await;
        assert!(matches!(wrote, Err(ToolError::Denied(_))), "{config}");
        assert!(!target.exists());
    }
}

#[tokio::test]
async fn false_lets_an_unsandboxed_session_reach_host_paths() {
    let setup = setup(r#"{ tools: { fs: { workspaceOnly: false } } }"#);
    assert_eq!(read(&setup).await.expect("read"), "host notes\n");
    let target = setup.outside.join("new.txt");
    WriteTool
        .execute(
            json!({"path": target.to_str().expect("utf8"), "content": "written"}),
            &setup.ctx,
        )
        .await
        .expect("write");
    assert_eq!(std::fs::read_to_string(&target).expect("new"), "written");
    let patched = setup.outside.join("patched.txt");
    let patch = format!(
        "*** Begin Patch\n*** Add File: {}\n+patched\n*** End Patch",
        patched.display()
    );
    ApplyPatchTool
        .execute(json!({"input": patch}), &setup.ctx)
        .await
        .expect("apply_patch");
    assert_eq!(
        std::fs::read_to_string(&patched).expect("patched"),
        "patched\n"
    );
}

#[tokio::test]
async fn a_sandbox_mode_or_the_agents_own_setting_keeps_them_confined() {
    let sandboxed = setup(
        r#"{ tools: { fs: { workspaceOnly: false } },
             agents: { defaults: { sandbox: { mode: "all", workspaceAccess: "rw" } } } }"#,
    );
    assert!(matches!(read(&sandboxed).await, Err(ToolError::Denied(_))));
    let agent = setup(
        r#"{ tools: { fs: { workspaceOnly: false } },
             agents: { list: [{ id: "main", tools: { fs: { workspaceOnly: true } } }] } }"#,
    );
    assert!(matches!(read(&agent).await, Err(ToolError::Denied(_))));
}
