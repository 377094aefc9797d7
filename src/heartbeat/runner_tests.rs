//! Unit tests of the heartbeat runner with a manual clock and a host that answers each heartbeat turn
//! with a scripted reply and records what it was asked to deliver.

use std::sync::atomic::AtomicU64;

use super::*;
use crate::store::test_support::temp_store;
use crate::store::SessionEntry;

const MINUTE_MS: u64 = 60_000;
/// 2026-01-15 12:00 UTC.
const NOON_MS: u64 = 1_768_435_200_000 + 12 * 60 * MINUTE_MS;

struct ManualClock(AtomicU64);

impl CronClock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

struct FakeHost {
    config: Arc<Config>,
    min_every_ms: u64,
    store: Store,
    workspace: tempfile::TempDir,
    replies: Mutex<VecDeque<String>>,
    runs: Mutex<Vec<TurnSpec>>,
    delivered: Mutex<Vec<HeartbeatDelivery>>,
}

impl HeartbeatHost for FakeHost {
    fn config(&self) -> Arc<Config> {
        self.config.clone()
    }
    fn store(&self) -> Store {
        self.store.clone()
    }
    fn workspace(&self, _agent_id: &str) -> PathBuf {
        self.workspace.path().to_path_buf()
    }
    fn run(
        &self,
        spec: TurnSpec,
        _overrides: TurnOverrides,
    ) -> Result<HeartbeatTurnFuture, RunStartError> {
        let text = self.replies.lock().pop_front().expect("a scripted reply");
        self.runs.lock().push(spec.clone());
        let outcome = RunOutcome {
            run_id: spec.run_id,
            session_key: spec.session_key,
            session_id: "s".into(),
            status: RunStatus::Ok,
            started_at_ms: 0,
            ended_at_ms: 0,
            text,
            error: None,
            usage: Default::default(),
            provider: None,
            model: None,
            stop_reason: None,
            unrecorded: None,
        };
        Ok(Box::pin(async move {
            HeartbeatTurn {
                outcome,
                reasoning: None,
            }
        }))
    }
    fn min_every_ms(&self) -> u64 {
        self.min_every_ms
    }
    fn deliver(&self, delivery: &HeartbeatDelivery) -> Result<(), HeartbeatDeliveryError> {
        self.delivered.lock().push(delivery.clone());
        Ok(())
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    host: Arc<FakeHost>,
    clock: Arc<ManualClock>,
    runner: Arc<HeartbeatRunner>,
}

impl Fixture {
    fn new(config: serde_json::Value, heartbeat_md: Option<&str>) -> Fixture {
        Fixture::on_board(config, heartbeat_md, 0)
    }

    fn on_board(
        config: serde_json::Value,
        heartbeat_md: Option<&str>,
        min_every_ms: u64,
    ) -> Fixture {
        let (dir, store) = temp_store();
        let workspace = tempfile::tempdir().expect("workspace");
        if let Some(text) = heartbeat_md {
            std::fs::write(workspace.path().join(HEARTBEAT_FILE), text).expect("write");
        }
        let mut entry = SessionEntry::new("main-id", 1);
        entry.last_channel = Some("telegram".into());
        entry.last_to = Some("42".into());
        store
            .put_session("agent:main:main", &entry)
            .expect("session");
        let host = Arc::new(FakeHost {
            config: Arc::new(serde_json::from_value(config).expect("config")),
            min_every_ms,
            store,
            workspace,
            replies: Mutex::default(),
            runs: Mutex::default(),
            delivered: Mutex::default(),
        });
        let clock = Arc::new(ManualClock(AtomicU64::new(NOON_MS)));
        let runner = HeartbeatRunner::new(host.clone(), clock.clone());
        Fixture {
            _dir: dir,
            host,
            clock,
            runner,
        }
    }

    fn reply(&self, text: &str) {
        self.host.replies.lock().push_back(text.into());
    }

    fn advance(&self, minutes: u64) {
        self.clock
            .0
            .fetch_add(minutes * MINUTE_MS, Ordering::SeqCst);
    }

    fn delivered(&self) -> Vec<HeartbeatDelivery> {
        self.host.delivered.lock().clone()
    }

    fn prompts(&self) -> Vec<String> {
        self.host
            .runs
            .lock()
            .iter()
            .map(|s| s.message.clone())
            .collect()
    }
}

#[tokio::test]
async fn ok_replies_are_swallowed_and_other_text_goes_to_the_last_route() {
    let f = Fixture::new(serde_json::json!({}), Some("- check the mailbox"));
    assert!(f.runner.run_due().await.is_empty(), "not due before 30 min");
    f.advance(30);
    f.reply("HEARTBEAT_OK");
    let events = f.runner.run_due().await;
    assert_eq!(events[0]["status"], "ok-token");
    assert!(f.delivered().is_empty());
    assert!(f.prompts()[0].contains("HEARTBEAT.md"));

    f.advance(30);
    f.reply("You have 3 unread mails from the bank.");
    let events = f.runner.run_due().await;
    assert_eq!(events[0]["status"], "sent");
    let delivered = f.delivered();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].text, "You have 3 unread mails from the bank.");
    assert_eq!(delivered[0].session_key, "agent:main:main");
    assert_eq!(delivered[0].target.channel.as_deref(), Some("telegram"));
    assert_eq!(delivered[0].target.to.as_deref(), Some("42"));
    assert_eq!(f.runner.last_event().expect("event")["status"], "sent");

    f.advance(30);
    f.reply("You have 3 unread mails from the bank.");
    let events = f.runner.run_due().await;
    assert_eq!(events[0]["reason"], "duplicate");
    assert_eq!(f.delivered().len(), 1);
}

#[tokio::test]
async fn outside_active_hours_no_turn_runs() {
    let config = serde_json::json!({"agents": {"defaults": {"heartbeat": {"every": "30m",
        "activeHours": {"start": "08:00", "end": "12:00", "timezone": "UTC"}}}}});
    let f = Fixture::new(config, Some("- check"));
    f.advance(30);
    let events = f.runner.run_due().await;
    assert_eq!(events[0]["reason"], "quiet-hours");
    assert!(f.prompts().is_empty());
}

#[tokio::test]
async fn empty_heartbeat_file_skips_until_a_wake_brings_an_event() {
    let f = Fixture::new(serde_json::json!({}), Some("# Heartbeat\n\n- [ ]\n"));
    f.advance(30);
    assert_eq!(
        f.runner.run_due().await[0]["reason"],
        "empty-heartbeat-file"
    );
    f.runner.wake(false, Some("The laundry is done"));
    f.advance(30);
    f.reply("HEARTBEAT_OK");
    assert_eq!(f.runner.run_due().await[0]["status"], "ok-token");
    assert!(f.prompts()[0].contains("- The laundry is done"));
}

#[tokio::test]
async fn paused_heartbeats_skip_but_wake_now_still_runs() {
    let f = Fixture::new(serde_json::json!({}), Some("- check"));
    f.runner.set_enabled(false);
    f.advance(30);
    assert_eq!(f.runner.run_due().await[0]["reason"], "disabled");
    f.reply("Door left open");
    let events = f.runner.run_now().await;
    assert_eq!(events[0]["status"], "sent");
}

#[tokio::test]
async fn agents_with_their_own_block_beat_alone_at_their_own_interval() {
    let config = serde_json::json!({"agents": {"defaults": {"heartbeat": {"every": "30m"}},
        "list": [{"id": "main"}, {"id": "ops", "heartbeat": {"every": "10m", "target": "none"}}]}});
    let f = Fixture::new(config, Some("- check"));
    f.advance(10);
    f.reply("disk 91% full");
    let events = f.runner.run_due().await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["agentId"], "ops");
    assert_eq!(events[0]["sessionKey"], "agent:ops:main");
    assert_eq!(events[0]["reason"], "no-target");
    assert!(f.delivered().is_empty());
    assert_eq!(f.runner.next_due_ms(), Some(NOON_MS + 20 * MINUTE_MS));
}

#[tokio::test]
async fn a_board_floor_lengthens_a_shorter_interval() {
    let f = Fixture::on_board(serde_json::json!({}), Some("- check"), 60 * MINUTE_MS);
    f.advance(30);
    assert!(
        f.runner.run_due().await.is_empty(),
        "30 min is below the board's 60"
    );
    f.advance(30);
    f.reply("HEARTBEAT_OK");
    assert_eq!(f.runner.run_due().await.len(), 1);
}

#[tokio::test]
async fn an_isolated_heartbeat_runs_in_a_fresh_side_session_and_delivers_to_the_main_route() {
    let f = Fixture::new(
        serde_json::json!({"agents": {"defaults": {"heartbeat": {"isolatedSession": true}}}}),
        Some("- check the mailbox"),
    );
    let side = "agent:main:main:heartbeat";
    f.host
        .store
        .put_session(side, &SessionEntry::new("old-side", 1))
        .expect("side session");
    f.reply("The bank wrote twice.");
    let events = f.runner.run_now().await;
    assert_eq!(events[0]["status"], "sent", "{}", events[0]);
    let runs = f.host.runs.lock().clone();
    assert_eq!(runs[0].session_key, side);
    assert!(
        f.host.store.session(side).expect("read").is_none(),
        "the side session is emptied before the turn"
    );
    let delivered = f.delivered();
    assert_eq!(delivered[0].session_key, "agent:main:main");
    assert_eq!(delivered[0].target.to.as_deref(), Some("42"));
}

#[test]
fn the_heartbeat_runs_in_the_global_session_under_global_scope() {
    let config: Config =
        serde_json::from_value(serde_json::json!({"session": {"scope": "global"}}))
            .expect("config");
    assert_eq!(heartbeat_session(&config, "main", None), "global");
    assert_eq!(heartbeat_session(&config, "main", Some("main")), "global");
    assert_eq!(
        heartbeat_session(&config, "main", Some("side")),
        "agent:main:side"
    );
    assert_eq!(
        heartbeat_session(&Config::default(), "main", None),
        "agent:main:main"
    );
}
