//! Unit tests of the sub-agent registry with a launcher that records what it is asked and lets each test
//! decide when (and how) a launched run ends.

use std::collections::HashMap;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::*;
use crate::agent::providers::Usage;
use crate::agent::subagents::control::RESTART_FAILURE_REASON;
use crate::agent::subagents::steer::{SteerMode, SteerOutcome};
use crate::store::test_support::temp_store;

#[derive(Default)]
struct FakeLauncher {
    launched: Mutex<Vec<(TurnSpec, LaneKind)>>,
    pending: Mutex<HashMap<String, oneshot::Sender<RunOutcome>>>,
    aborted: Mutex<Vec<String>>,
    announced: Mutex<Vec<(String, String, String)>>,
    inboxes: Mutex<HashMap<String, SteerInbox>>,
}

fn outcome(spec: &TurnSpec, status: RunStatus, text: &str) -> RunOutcome {
    RunOutcome {
        run_id: spec.run_id.clone(),
        session_key: spec.session_key.clone(),
        session_id: "s".into(),
        status,
        started_at_ms: 0,
        ended_at_ms: 0,
        text: text.into(),
        error: None,
        usage: Usage {
            input_tokens: 7,
            output_tokens: 3,
        },
        provider: None,
        model: None,
        stop_reason: None,
        unrecorded: None,
    }
}

impl FakeLauncher {
    fn specs(&self) -> Vec<(TurnSpec, LaneKind)> {
        self.launched.lock().clone()
    }

    fn complete(&self, run_id: &str, status: RunStatus, text: &str) {
        let spec = self
            .specs()
            .into_iter()
            .find(|(s, _)| s.run_id == run_id)
            .expect("launched run")
            .0;
        let sender = self.pending.lock().remove(run_id);
        let _ = sender
            .expect("pending run")
            .send(outcome(&spec, status, text));
    }

    fn inbox(&self, run_id: &str) -> SteerInbox {
        self.inboxes
            .lock()
            .get(run_id)
            .cloned()
            .expect("launched with an inbox")
    }

    fn announcements(&self) -> Vec<(String, String, String)> {
        self.announced.lock().clone()
    }
}

impl RunLauncher for FakeLauncher {
    fn launch(
        &self,
        spec: TurnSpec,
        lane: LaneKind,
        steer: SteerInbox,
    ) -> Result<OutcomeFuture, RunStartError> {
        self.inboxes.lock().insert(spec.run_id.clone(), steer);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(spec.run_id.clone(), tx);
        self.launched.lock().push((spec.clone(), lane));
        Ok(Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| outcome(&spec, RunStatus::Aborted, ""))
        }))
    }

    fn abort_run(&self, run_id: &str) -> bool {
        self.aborted.lock().push(run_id.to_string());
        // A real abort ends the run with an aborted outcome.
        self.pending.lock().remove(run_id).is_some()
    }

    fn announce(
        &self,
        agent_id: &str,
        session_key: &str,
        message: String,
    ) -> Result<(), AnnounceError> {
        self.announced
            .lock()
            .push((agent_id.into(), session_key.into(), message));
        Ok(())
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    launcher: Arc<FakeLauncher>,
    registry: Arc<SubagentRegistry>,
}

fn fixture() -> Fixture {
    let (dir, store) = temp_store();
    let launcher = Arc::new(FakeLauncher::default());
    let registry = SubagentRegistry::new(store.clone(), launcher.clone());
    store
        .put_session("agent:main:main", &SessionEntry::new("main-id", 1))
        .expect("main session");
    Fixture {
        _dir: dir,
        store,
        launcher,
        registry,
    }
}

fn config(json: serde_json::Value) -> Config {
    serde_json::from_value(json).expect("config")
}

fn main_requester() -> Requester {
    Requester {
        agent_id: "main".into(),
        session_key: "agent:main:main".into(),
    }
}

fn task(text: &str) -> SpawnRequest {
    SpawnRequest {
        task: text.into(),
        ..SpawnRequest::default()
    }
}

/// Lets the watcher tasks run until `done` holds (bounded).
async fn settle_until(done: impl Fn() -> bool) {
    for _ in 0..1_000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("condition never held");
}

fn status_of(registry: &SubagentRegistry, id: &str) -> SubagentStatus {
    registry
        .runs()
        .expect("runs")
        .into_iter()
        .find(|r| r.id == id)
        .expect("record")
        .status
}

#[tokio::test]
async fn child_runs_on_the_subagent_lane_and_its_result_is_announced_to_the_requester() {
    let f = fixture();
    let run = f
        .registry
        .spawn(
            &Config::default(),
            &main_requester(),
            task("count the files"),
        )
        .expect("spawn");
    assert!(run.child_session_key.starts_with("agent:main:subagent:"));
    let (spec, lane) = f.launcher.specs().remove(0);
    assert_eq!(lane, LaneKind::Subagent);
    assert_eq!(spec.session_key, run.child_session_key);
    assert!(spec
        .extra_system_prompt
        .as_deref()
        .is_some_and(|p| p.contains("count the files")));
    let child = f
        .store
        .session(&run.child_session_key)
        .expect("read")
        .expect("child session");
    assert_eq!(child.spawn_depth, Some(1));
    assert_eq!(child.spawned_by.as_deref(), Some("agent:main:main"));

    f.launcher.complete(&spec.run_id, RunStatus::Ok, "12 files");
    settle_until(|| !f.launcher.announcements().is_empty()).await;
    let (agent, key, message) = f.launcher.announcements().remove(0);
    assert_eq!((agent.as_str(), key.as_str()), ("main", "agent:main:main"));
    assert!(message.contains("12 files"), "{message}");
    assert!(message.contains("tokens 10 (in 7 / out 3)"), "{message}");
    assert_eq!(status_of(&f.registry, &run.id), SubagentStatus::Done);
    let child = f.store.session(&run.child_session_key).expect("read");
    assert_eq!(child.and_then(|c| c.status).as_deref(), Some("done"));
}

#[tokio::test]
async fn spawning_past_the_depth_limit_is_refused_with_the_setting_named() {
    let f = fixture();
    let mut entry = SessionEntry::new("child-id", 1);
    entry.spawn_depth = Some(1);
    f.store
        .put_session("agent:main:subagent:x", &entry)
        .expect("child");
    let requester = Requester {
        agent_id: "main".into(),
        session_key: "agent:main:subagent:x".into(),
    };
    let error = f
        .registry
        .spawn(&Config::default(), &requester, task("deeper"))
        .expect_err("depth 1 of 1");
    assert!(matches!(
        error,
        SubagentError::DepthLimit { depth: 1, max: 1 }
    ));
    assert!(error.to_string().contains("maxSpawnDepth is 1"), "{error}");
    let deeper =
        config(serde_json::json!({"agents": {"defaults": {"subagents": {"maxSpawnDepth": 2}}}}));
    let run = f
        .registry
        .spawn(&deeper, &requester, task("deeper"))
        .expect("depth 2 allowed");
    assert_eq!(run.depth, 2);
    assert!(f.launcher.specs().len() == 1);
}

#[tokio::test]
async fn active_children_past_the_limit_are_refused_until_one_ends() {
    let f = fixture();
    let limited = config(
        serde_json::json!({"agents": {"defaults": {"subagents": {"maxChildrenPerAgent": 2}}}}),
    );
    let first = f
        .registry
        .spawn(&limited, &main_requester(), task("a"))
        .expect("first");
    f.registry
        .spawn(&limited, &main_requester(), task("b"))
        .expect("second");
    let error = f
        .registry
        .spawn(&limited, &main_requester(), task("c"))
        .expect_err("third");
    assert!(
        matches!(error, SubagentError::TooManyChildren { active: 2, max: 2 }),
        "{error}"
    );
    f.launcher.complete(&first.run_id, RunStatus::Ok, "done");
    settle_until(|| status_of(&f.registry, &first.id) == SubagentStatus::Done).await;
    f.registry
        .spawn(&limited, &main_requester(), task("c"))
        .expect("room again");
}

#[tokio::test]
async fn other_agents_need_allow_agents() {
    let f = fixture();
    let request = SpawnRequest {
        agent_id: Some("ops".into()),
        ..task("x")
    };
    let plain = config(serde_json::json!({"agents": {"list": [{"id": "main"}, {"id": "ops"}]}}));
    let error = f
        .registry
        .spawn(&plain, &main_requester(), request.clone())
        .expect_err("not allowed");
    assert!(error.to_string().contains("allowAgents"), "{error}");
    let allowed = config(serde_json::json!({"agents": {"list": [
        {"id": "main", "subagents": {"allowAgents": ["ops"]}}, {"id": "ops"}]}}));
    let run = f
        .registry
        .spawn(&allowed, &main_requester(), request)
        .expect("allowed");
    assert!(run.child_session_key.starts_with("agent:ops:subagent:"));
}

#[tokio::test]
async fn require_agent_id_refuses_a_spawn_that_names_no_agent() {
    let f = fixture();
    let strict = config(
        serde_json::json!({"agents": {"defaults": {"subagents": {"requireAgentId": true}}}}),
    );
    let error = f
        .registry
        .spawn(&strict, &main_requester(), task("x"))
        .expect_err("agentId required");
    assert!(error.to_string().contains("agentId"), "{error}");
    let named = SpawnRequest {
        agent_id: Some("main".into()),
        ..task("x")
    };
    f.registry
        .spawn(&strict, &main_requester(), named)
        .expect("naming the agent is enough");
    // The agent's own setting wins over the defaults'.
    let relaxed = config(serde_json::json!({"agents": {
        "defaults": {"subagents": {"requireAgentId": true}},
        "list": [{"id": "main", "subagents": {"requireAgentId": false}}]}}));
    f.registry
        .spawn(&relaxed, &main_requester(), task("y"))
        .expect("the agent relaxes it");
}

/// The child session's thinking level: the spawn's own, else `subagents.thinking` of the requester, of the
/// target agent, of the defaults.
#[tokio::test]
async fn the_child_thinks_at_the_configured_subagent_level_unless_the_spawn_says_otherwise() {
    let thinking_of = |config: &Config, request: SpawnRequest| {
        let f = fixture();
        let run = f
            .registry
            .spawn(config, &main_requester(), request)
            .expect("spawn");
        f.store
            .session(&run.child_session_key)
            .expect("read")
            .expect("child")
            .thinking_level
    };
    let defaults =
        config(serde_json::json!({"agents": {"defaults": {"subagents": {"thinking": "low"}}}}));
    assert_eq!(thinking_of(&defaults, task("a")).as_deref(), Some("low"));
    let own = config(serde_json::json!({"agents": {
        "defaults": {"subagents": {"thinking": "low", "allowAgents": ["*"]}},
        "list": [{"id": "main", "subagents": {"thinking": "high"}}, {"id": "ops", "subagents": {"thinking": "minimal"}}]}}));
    assert_eq!(thinking_of(&own, task("b")).as_deref(), Some("high"));
    let into_ops = SpawnRequest {
        agent_id: Some("ops".into()),
        ..task("c")
    };
    // The requester's own setting comes before the target's.
    assert_eq!(thinking_of(&own, into_ops).as_deref(), Some("high"));
    let asked = SpawnRequest {
        thinking: Some("off".into()),
        ..task("d")
    };
    assert_eq!(thinking_of(&own, asked).as_deref(), Some("off"));
    assert_eq!(thinking_of(&Config::default(), task("e")), None);
    let bad = SpawnRequest {
        thinking: Some("loud".into()),
        ..task("f")
    };
    let error = fixture()
        .registry
        .spawn(&Config::default(), &main_requester(), bad)
        .expect_err("unknown level");
    assert!(error.to_string().contains("loud"), "{error}");
}

#[tokio::test]
async fn kill_cascades_to_grandchildren_and_announces_nothing() {
    let f = fixture();
    let nested =
        config(serde_json::json!({"agents": {"defaults": {"subagents": {"maxSpawnDepth": 2}}}}));
    let child = f
        .registry
        .spawn(&nested, &main_requester(), task("child"))
        .expect("child");
    let as_child = Requester {
        agent_id: "main".into(),
        session_key: child.child_session_key.clone(),
    };
    let grandchild = f
        .registry
        .spawn(&nested, &as_child, task("grandchild"))
        .expect("grandchild");
    let killed = f.registry.kill("agent:main:main", "1").expect("kill");
    let ids: Vec<&str> = killed.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, [child.id.as_str(), grandchild.id.as_str()]);
    assert_eq!(
        status_of(&f.registry, &grandchild.id),
        SubagentStatus::Killed
    );
    let aborted = f.launcher.aborted.lock().clone();
    assert_eq!(aborted, [child.run_id.clone(), grandchild.run_id.clone()]);
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert!(f.launcher.announcements().is_empty());
    assert!(matches!(
        f.registry.kill("agent:main:main", "nobody"),
        Err(SubagentError::NotFound(_))
    ));
}

fn steer(f: &Fixture, message: &str) -> Result<SteerOutcome, SubagentError> {
    f.registry
        .steer(&Config::default(), "agent:main:main", "last", message)
}

#[tokio::test]
async fn steer_reaches_the_running_turn_and_starts_no_new_one() {
    let f = fixture();
    let run = f
        .registry
        .spawn(&Config::default(), &main_requester(), task("draft"))
        .expect("spawn");
    let steered = steer(&f, "make it shorter").expect("steer");
    assert_eq!(steered.mode, SteerMode::Injected);
    assert_eq!(steered.run.run_id, run.run_id);
    // The child's tool loop takes the message before its next model call.
    let taken: Vec<String> = f
        .launcher
        .inbox(&run.run_id)
        .take()
        .into_iter()
        .map(|m| m.text)
        .collect();
    assert_eq!(taken, ["make it shorter"]);
    f.launcher.complete(&run.run_id, RunStatus::Ok, "short");
    settle_until(|| f.launcher.announcements().len() == 1).await;
    assert!(f.launcher.announcements()[0].2.contains("short"));
    assert_eq!(f.launcher.specs().len(), 1, "steer started another turn");
    assert!(f.launcher.aborted.lock().is_empty());
}

#[tokio::test]
async fn steer_the_turn_never_took_starts_the_next_turn_and_only_that_one_reports() {
    let f = fixture();
    let run = f
        .registry
        .spawn(&Config::default(), &main_requester(), task("draft"))
        .expect("spawn");
    assert_eq!(
        steer(&f, "make it shorter").expect("steer").mode,
        SteerMode::Injected
    );
    // The turn had already made its last model call: it ends without taking the message.
    f.launcher
        .complete(&run.run_id, RunStatus::Ok, "long draft");
    settle_until(|| f.launcher.specs().len() == 2).await;
    let next = f.launcher.specs()[1].0.clone();
    assert_eq!(next.message, "make it shorter");
    assert_eq!(next.session_key, run.child_session_key);
    assert_eq!(status_of(&f.registry, &run.id), SubagentStatus::Running);
    assert!(f.launcher.announcements().is_empty());
    f.launcher.complete(&next.run_id, RunStatus::Ok, "short");
    settle_until(|| f.launcher.announcements().len() == 1).await;
    let announced = &f.launcher.announcements()[0].2;
    assert!(announced.contains("short") && !announced.contains("long draft"));
    let record = f.registry.runs().expect("runs").remove(0);
    assert_eq!(record.input_tokens, 14, "both turns' tokens are counted");
}

#[tokio::test]
async fn steer_without_a_live_turn_stops_it_and_restarts_with_the_message() {
    let f = fixture();
    let run = f
        .registry
        .spawn(&Config::default(), &main_requester(), task("draft"))
        .expect("spawn");
    f.registry.live.close(&run.id, &run.run_id);
    let steered = steer(&f, "make it shorter").expect("steer");
    assert_eq!(steered.mode, SteerMode::Restarted);
    assert_ne!(steered.run.run_id, run.run_id);
    assert_eq!(*f.launcher.aborted.lock(), vec![run.run_id]);
    let specs = f.launcher.specs();
    assert_eq!(specs.len(), 2);
    assert_eq!(specs[1].0.message, "make it shorter");
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert_eq!(status_of(&f.registry, &run.id), SubagentStatus::Running);
    f.launcher
        .complete(&steered.run.run_id, RunStatus::Ok, "short");
    settle_until(|| f.launcher.announcements().len() == 1).await;
}

#[tokio::test]
async fn steering_too_often_or_a_finished_child_is_refused() {
    let f = fixture();
    let run = f
        .registry
        .spawn(&Config::default(), &main_requester(), task("draft"))
        .expect("spawn");
    steer(&f, "first").expect("first steer");
    let error = steer(&f, "second").expect_err("rate limited");
    assert!(
        matches!(error, SubagentError::SteerRateLimited { .. }),
        "{error}"
    );
    f.launcher.inbox(&run.run_id).take();
    f.launcher.complete(&run.run_id, RunStatus::Ok, "done");
    settle_until(|| status_of(&f.registry, &run.id) == SubagentStatus::Done).await;
    let error = f
        .registry
        .steer(&Config::default(), "agent:main:main", "1", "again")
        .expect_err("finished");
    assert!(matches!(error, SubagentError::NotRunning(_)), "{error}");
}

#[tokio::test]
async fn announcement_bubbles_to_the_grandparent_when_the_parent_is_gone() {
    let f = fixture();
    let nested =
        config(serde_json::json!({"agents": {"defaults": {"subagents": {"maxSpawnDepth": 2}}}}));
    let child = f
        .registry
        .spawn(&nested, &main_requester(), task("child"))
        .expect("child");
    let as_child = Requester {
        agent_id: "main".into(),
        session_key: child.child_session_key.clone(),
    };
    let grandchild = f
        .registry
        .spawn(&nested, &as_child, task("grandchild"))
        .expect("grandchild");
    f.store
        .delete_session(&child.child_session_key)
        .expect("parent gone");
    f.launcher
        .complete(&grandchild.run_id, RunStatus::Ok, "found it");
    settle_until(|| !f.launcher.announcements().is_empty()).await;
    let (_, key, message) = f.launcher.announcements().remove(0);
    assert_eq!(key, "agent:main:main");
    assert!(message.contains("found it"));
}

#[tokio::test]
async fn restart_fails_interrupted_runs_with_a_reason_and_removes_orphans() {
    let f = fixture();
    let run = f
        .registry
        .spawn(&Config::default(), &main_requester(), task("long"))
        .expect("spawn");
    f.store
        .put_session("agent:main:subagent:orphan", &SessionEntry::new("o", 1))
        .expect("orphan");
    // A new registry over the same store: the process that ran the child is gone.
    let launcher = Arc::new(FakeLauncher::default());
    let restarted = SubagentRegistry::new(f.store.clone(), launcher.clone());
    let report = restarted.reconcile().expect("reconcile");
    assert_eq!(report.failed, 1);
    assert_eq!(report.announced, 1);
    assert_eq!(report.pruned, 1);
    let record = restarted.runs().expect("runs").remove(0);
    assert_eq!(record.status, SubagentStatus::Failed);
    assert_eq!(record.error.as_deref(), Some(RESTART_FAILURE_REASON));
    assert!(record.announced);
    assert!(launcher.announcements()[0]
        .2
        .contains(RESTART_FAILURE_REASON));
    assert_eq!(
        f.store
            .session(&run.child_session_key)
            .expect("read")
            .and_then(|e| e.status)
            .as_deref(),
        Some("failed")
    );
    assert!(f
        .store
        .session("agent:main:subagent:orphan")
        .expect("read")
        .is_none());
    let again = restarted.reconcile().expect("second pass");
    assert_eq!(again, Default::default());
}

#[tokio::test]
async fn run_timeout_comes_from_the_request_and_a_timeout_is_announced_as_such() {
    let f = fixture();
    let request = SpawnRequest {
        run_timeout_seconds: Some(30),
        ..task("slow job")
    };
    let run = f
        .registry
        .spawn(&Config::default(), &main_requester(), request)
        .expect("spawn");
    assert_eq!(f.launcher.specs()[0].0.timeout_ms, 30_000);
    f.launcher.complete(&run.run_id, RunStatus::Timeout, "");
    settle_until(|| !f.launcher.announcements().is_empty()).await;
    assert_eq!(status_of(&f.registry, &run.id), SubagentStatus::Timeout);
    assert!(f.launcher.announcements()[0].2.contains("timed out"));
}

#[tokio::test]
async fn announced_runs_are_forgotten_after_the_archive_window() {
    let f = fixture();
    let run = f
        .registry
        .spawn(&Config::default(), &main_requester(), task("quick"))
        .expect("spawn");
    f.launcher.complete(&run.run_id, RunStatus::Ok, "done");
    settle_until(|| !f.launcher.announcements().is_empty()).await;
    settle_until(|| f.registry.runs().expect("runs")[0].announced).await;
    let ended = f.registry.runs().expect("runs")[0]
        .ended_at_ms
        .expect("ended");
    let config = Config::default();
    assert_eq!(
        f.registry
            .prune_archived(&config, ended + 59 * 60_000)
            .expect("prune"),
        0
    );
    assert_eq!(
        f.registry
            .prune_archived(&config, ended + 61 * 60_000)
            .expect("prune"),
        1
    );
    assert!(f.registry.runs().expect("runs").is_empty());
    assert!(f
        .store
        .session(&run.child_session_key)
        .expect("read")
        .is_none());
}
