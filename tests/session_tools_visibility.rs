//! `tools.sessions.visibility` for the session tools that read: `sessions_list` lists and
//! `sessions_history` reads only the sessions the requester may reach — `self` its own, `tree` also
//! the ones it spawned, `agent` its agent's, `all` every one (another agent's as `tools.agentToAgent`
//! allows) — as `sessions_send` already did.

use std::sync::Arc;

use pincer::store::{SessionEntry, Store, StoreOptions};
use pincer::tools::sessions::{SessionsHistoryTool, SessionsListTool};
use pincer::tools::{Tool, ToolContext};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const ME: &str = "agent:main:main";

fn context(dir: &tempfile::TempDir, store: &Store, visibility: &str) -> ToolContext {
    let config = pincer::config::parse_str(
        &format!(
            "{{ tools: {{ sessions: {{ visibility: '{visibility}' }}, agentToAgent: {{ enabled: true }} }} }}"
        ),
        "test",
    )
    .expect("config");
    ToolContext {
        agent_id: "main".into(),
        session_key: ME.into(),
        workspace: dir.path().to_path_buf(),
        store: store.clone(),
        http: reqwest::Client::new(),
        cancel: CancellationToken::new(),
        config: Arc::new(config),
        services: Default::default(),
    }
}

async fn listed(ctx: &ToolContext) -> Vec<String> {
    let out = SessionsListTool
        .execute(json!({}), ctx)
        .await
        .expect("list");
    let rows: Vec<Value> = serde_json::from_str(&out.text).expect("rows");
    let mut keys: Vec<String> = rows
        .iter()
        .map(|r| r["key"].as_str().expect("key").to_string())
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn the_reading_session_tools_see_what_visibility_allows() {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(&dir.path().join("store"), StoreOptions::default()).expect("store");
    let child = "agent:main:subagent:1";
    let mut spawned = SessionEntry::new("s-child", 2);
    spawned.spawned_by = Some(ME.into());
    for (key, entry) in [
        (ME, SessionEntry::new("s-me", 1)),
        (child, spawned),
        ("agent:main:telegram:direct:7", SessionEntry::new("s-dm", 3)),
        ("agent:ops:main", SessionEntry::new("s-ops", 4)),
    ] {
        store.put_session(key, &entry).expect("session");
    }
    let keys = |list: &[&str]| {
        let mut keys: Vec<String> = list.iter().map(|k| k.to_string()).collect();
        keys.sort();
        keys
    };
    assert_eq!(listed(&context(&dir, &store, "self")).await, keys(&[ME]));
    assert_eq!(
        listed(&context(&dir, &store, "tree")).await,
        keys(&[ME, child])
    );
    assert_eq!(
        listed(&context(&dir, &store, "agent")).await,
        keys(&[ME, child, "agent:main:telegram:direct:7"])
    );
    assert_eq!(listed(&context(&dir, &store, "all")).await.len(), 4);

    let tree = context(&dir, &store, "tree");
    let refused = SessionsHistoryTool
        .execute(json!({"sessionKey": "agent:main:telegram:direct:7"}), &tree)
        .await
        .expect_err("outside the tree");
    assert!(refused.to_string().contains("visibility=tree"), "{refused}");
    SessionsHistoryTool
        .execute(json!({"sessionKey": child}), &tree)
        .await
        .expect("a session it spawned");
}
