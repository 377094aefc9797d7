use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::json;

use super::*;
use crate::store::{SessionEntry, Store, StoreOptions};
use crate::tools::ToolServices;

/// Records starts and answers waits with a scripted outcome; the
/// agent-to-agent flows it is given are counted, not run (they have tests of
/// their own in `sessions_a2a`).
struct RecordingRunner {
    started: Mutex<Vec<SessionSend>>,
    reply: Option<(SessionRunStatus, &'static str)>,
    flows: std::sync::atomic::AtomicUsize,
}

impl SessionRunner for RecordingRunner {
    fn start(&self, send: SessionSend) -> Result<String, SessionStartError> {
        let mut started = self.started.lock();
        started.push(send);
        Ok(format!("run-{}", started.len()))
    }
    fn wait<'a>(&'a self, run_id: &'a str, _t: Duration) -> BoxFuture<'a, Option<SessionReply>> {
        let _ = run_id;
        let outcome = self.reply.map(|(status, text)| SessionReply {
            status,
            text: text.into(),
            error: (status != SessionRunStatus::Ok).then(|| "provider down".to_string()),
        });
        Box::pin(async move { outcome })
    }
    fn spawn_flow(&self, _flow: BoxFuture<'static, ()>) {
        self.flows.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

struct Fixture {
    ctx: ToolContext,
    runner: Arc<RecordingRunner>,
    _dir: tempfile::TempDir,
}

fn fixture(config: serde_json::Value, reply: Option<(SessionRunStatus, &'static str)>) -> Fixture {
    let dir = tempfile::tempdir().expect("dir");
    let store = Store::open(&dir.path().join("store"), StoreOptions::default()).expect("store");
    let runner = Arc::new(RecordingRunner {
        started: Mutex::new(Vec::new()),
        reply,
        flows: Default::default(),
    });
    let services = ToolServices {
        sessions: runner.clone(),
        ..Default::default()
    };
    let ctx = ToolContext {
        agent_id: "main".into(),
        session_key: "agent:main:main".into(),
        workspace: dir.path().to_path_buf(),
        store,
        http: reqwest::Client::new(),
        cancel: Default::default(),
        config: Arc::new(serde_json::from_value(config).expect("config")),
        services,
    };
    Fixture {
        ctx,
        runner,
        _dir: dir,
    }
}

async fn call(f: &Fixture, args: serde_json::Value) -> serde_json::Value {
    let out = SessionsSendTool
        .execute(args, &f.ctx)
        .await
        .expect("tool answers");
    out.details.expect("details")
}

fn started(f: &Fixture) -> Vec<SessionSend> {
    f.runner.started.lock().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn waits_for_the_reply_of_a_session_of_the_same_agent() {
    let f = fixture(
        json!({"tools": {"sessions": {"visibility": "agent"}}}),
        Some((SessionRunStatus::Ok, "pong")),
    );
    let result = call(&f, json!({"sessionKey": "ops", "message": "ping"})).await;
    assert_eq!(
        result,
        json!({"runId": "run-1", "status": "ok", "reply": "pong", "sessionKey": "agent:main:ops"})
    );
    let sent = started(&f);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].message, "ping");
    assert_eq!(sent[0].agent_id, "main");
    assert!(sent[0].extra_system_prompt.contains("agent:main:main"));
    let flows = f.runner.flows.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(flows, 1, "the agent-to-agent flow follows the reply");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn zero_timeout_is_fire_and_forget_and_failures_are_reported() {
    let f = fixture(
        json!({"tools": {"sessions": {"visibility": "agent"}}}),
        Some((SessionRunStatus::Error, "")),
    );
    let accepted = call(
        &f,
        json!({"sessionKey": "ops", "text": "go", "timeoutSeconds": 0}),
    )
    .await;
    assert_eq!(accepted["status"], "accepted");
    let failed = call(&f, json!({"sessionKey": "ops", "message": "go"})).await;
    assert_eq!(failed["status"], "error");
    assert_eq!(failed["error"], "provider down");
    let flows = f.runner.flows.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        flows, 1,
        "a fire-and-forget send has a flow, a failed one none"
    );
    let silent = fixture(
        json!({"tools": {"sessions": {"visibility": "agent"}}}),
        None,
    );
    assert_eq!(
        call(&silent, json!({"sessionKey": "ops", "message": "go"})).await["status"],
        "timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_session_never_sends_to_itself() {
    let f = fixture(
        json!({"tools": {"sessions": {"visibility": "all"}}}),
        Some((SessionRunStatus::Ok, "x")),
    );
    for key in ["main", "agent:main:main"] {
        let result = call(&f, json!({"sessionKey": key, "message": "hi"})).await;
        assert_eq!(result["status"], "error", "{key}");
        assert!(result["error"]
            .as_str()
            .is_some_and(|e| e.contains("current session")));
    }
    assert!(started(&f).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn default_tree_visibility_reaches_only_spawned_sessions() {
    let f = fixture(json!({}), Some((SessionRunStatus::Ok, "done")));
    let mut child = SessionEntry::new("child-id", 1);
    child.spawned_by = Some("agent:main:main".into());
    child.label = Some("researcher".into());
    f.ctx
        .store
        .put_session("agent:main:subagent:1", &child)
        .expect("put");
    f.ctx
        .store
        .put_session("agent:main:other", &SessionEntry::new("o", 1))
        .expect("put");
    let refused = call(&f, json!({"sessionKey": "other", "message": "hi"})).await;
    assert_eq!(refused["status"], "forbidden");
    assert!(refused["error"]
        .as_str()
        .is_some_and(|e| e.contains("visibility=tree")));
    let by_label = call(&f, json!({"label": "researcher", "message": "hi"})).await;
    assert_eq!(by_label["status"], "ok");
    assert_eq!(by_label["sessionKey"], "agent:main:subagent:1");
    assert_eq!(
        call(&f, json!({"label": "nobody", "message": "hi"})).await["status"],
        "error"
    );
    assert_eq!(started(&f).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn cross_agent_sends_need_visibility_all_and_agent_to_agent() {
    let target = json!({"sessionKey": "agent:work:main", "message": "hi"});
    let agent_only = fixture(
        json!({"tools": {"sessions": {"visibility": "agent"}}}),
        None,
    );
    assert_eq!(
        call(&agent_only, target.clone()).await["status"],
        "forbidden"
    );
    let a2a_off = fixture(json!({"tools": {"sessions": {"visibility": "all"}}}), None);
    let result = call(&a2a_off, target.clone()).await;
    assert!(result["error"]
        .as_str()
        .is_some_and(|e| e.contains("agentToAgent.enabled")));
    let denied = fixture(
        json!({"tools": {"sessions": {"visibility": "all"},
        "agentToAgent": {"enabled": true, "allow": ["main", "home-*"]}}}),
        None,
    );
    assert_eq!(call(&denied, target.clone()).await["status"], "forbidden");
    let allowed = fixture(
        json!({"tools": {"sessions": {"visibility": "all"},
        "agentToAgent": {"enabled": true, "allow": ["main", "w*k"]}}}),
        Some((SessionRunStatus::Ok, "ok")),
    );
    assert_eq!(call(&allowed, target).await["status"], "ok");
    assert_eq!(started(&allowed)[0].agent_id, "work");
    for f in [&agent_only, &a2a_off, &denied] {
        assert!(started(f).is_empty());
    }
}

#[test]
fn agent_patterns_match_with_wildcards() {
    assert!(pattern_matches("*", "anything"));
    assert!(pattern_matches("home-*", "home-lab"));
    assert!(!pattern_matches("home-*", "work"));
    assert!(pattern_matches("w*k", "work"));
    assert!(!pattern_matches("w*k", "worker"));
    assert_eq!(agent_of_key("agent:ops:telegram:dm:1"), Some("ops"));
    assert_eq!(agent_of_key("global"), None);
}

#[test]
fn main_names_the_global_session_under_global_scope() {
    let config: Config =
        serde_json::from_value(json!({"session": {"scope": "global"}})).expect("config");
    assert_eq!(canonical_target(&config, "main", "main"), "global");
    assert_eq!(canonical_target(&config, "main", "side"), "agent:main:side");
    assert_eq!(
        canonical_target(&Config::default(), "main", "main"),
        "agent:main:main"
    );
}
