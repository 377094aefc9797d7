//! The command queue: one run per session, N per global lane, each queue
//! mode's observable behaviour, cap + drop policies, and bounded memory
//! under a flood for one busy session.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use pincer::config::schema::messages::{QueueDrop, QueueMode};
use pincer::queue::{
    CommandQueue, EnqueueOutcome, LaneGate, LaneKind, LaneLimits, QueueSettings, QueuedMessage,
    Turn, TurnContext, TurnRunner,
};
use tokio::sync::Semaphore;

/// Records every turn and holds it until the test releases a permit.
struct HeldRunner {
    prompts: Mutex<Vec<(String, String)>>,
    steered: Mutex<Vec<String>>,
    cancelled: AtomicUsize,
    running: AtomicUsize,
    max_running: AtomicUsize,
    per_session: Mutex<HashMap<String, usize>>,
    max_per_session: AtomicUsize,
    release: Arc<Semaphore>,
    take_steer: bool,
}

impl HeldRunner {
    fn new(take_steer: bool) -> Arc<HeldRunner> {
        Arc::new(HeldRunner {
            prompts: Mutex::default(),
            steered: Mutex::default(),
            cancelled: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            per_session: Mutex::default(),
            max_per_session: AtomicUsize::new(0),
            release: Arc::new(Semaphore::new(0)),
            take_steer,
        })
    }
    fn prompts(&self) -> Vec<String> {
        self.prompts
            .lock()
            .expect("lock")
            .iter()
            .map(|(_, p)| p.clone())
            .collect()
    }
    fn started(&self) -> usize {
        self.prompts.lock().expect("lock").len()
    }
}

struct Handle(Arc<HeldRunner>);

impl TurnRunner for Handle {
    fn run(&self, turn: Turn, ctx: TurnContext) -> BoxFuture<'static, ()> {
        let me = self.0.clone();
        Box::pin(async move {
            // The turn's place in the lanes is held until the turn ends.
            let _pass = ctx.pass;
            let now = me.running.fetch_add(1, Ordering::SeqCst) + 1;
            me.max_running.fetch_max(now, Ordering::SeqCst);
            {
                let mut per = me.per_session.lock().expect("lock");
                let n = per.entry(turn.session_key.clone()).or_default();
                *n += 1;
                me.max_per_session.fetch_max(*n, Ordering::SeqCst);
            }
            me.prompts
                .lock()
                .expect("lock")
                .push((turn.session_key.clone(), turn.prompt.clone()));
            tokio::select! {
                permit = me.release.acquire() => permit.expect("open").forget(),
                _ = ctx.cancel.cancelled() => { me.cancelled.fetch_add(1, Ordering::SeqCst); }
            }
            if me.take_steer {
                for m in ctx.steer.take() {
                    me.steered.lock().expect("lock").push(m.text);
                }
            }
            *me.per_session
                .lock()
                .expect("lock")
                .entry(turn.session_key)
                .or_default() -= 1;
            me.running.fetch_sub(1, Ordering::SeqCst);
        })
    }
}

async fn eventually(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn setup(main_lane: usize, take_steer: bool) -> (CommandQueue, Arc<HeldRunner>, Arc<LaneGate>) {
    let runner = HeldRunner::new(take_steer);
    let gate = Arc::new(LaneGate::new(LaneLimits {
        main: main_lane,
        subagent: 8,
        cron: 1,
    }));
    (
        CommandQueue::new(gate.clone(), Arc::new(Handle(runner.clone()))),
        runner,
        gate,
    )
}

fn settings(mode: QueueMode, cap: usize, drop: QueueDrop) -> QueueSettings {
    QueueSettings {
        mode,
        debounce_ms: 0,
        cap,
        drop,
    }
}

fn msg(text: &str) -> QueuedMessage {
    QueuedMessage::new(text, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_messages_to_one_session_never_run_concurrently() {
    let (queue, runner, _) = setup(4, false);
    let s = settings(QueueMode::Followup, 20, QueueDrop::Summarize);
    assert_eq!(
        queue.enqueue("agent:main:main", LaneKind::Main, s, msg("one")),
        EnqueueOutcome::Started
    );
    assert_eq!(
        queue.enqueue("agent:main:main", LaneKind::Main, s, msg("two")),
        EnqueueOutcome::Queued
    );
    eventually("first turn", || runner.started() == 1).await;
    runner.release.add_permits(2);
    eventually("second turn", || runner.started() == 2).await;
    eventually("idle", || queue.session_count() == 0).await;
    assert_eq!(runner.max_per_session.load(Ordering::SeqCst), 1);
    assert_eq!(runner.prompts(), ["one", "two"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_plus_one_sessions_with_limit_n_run_n_at_a_time() {
    let (queue, runner, gate) = setup(2, false);
    let s = settings(QueueMode::Collect, 20, QueueDrop::Summarize);
    for session in ["a", "b", "c"] {
        queue.enqueue(session, LaneKind::Main, s, msg(session));
    }
    eventually("two running", || runner.started() == 2).await;
    assert_eq!(gate.available(LaneKind::Main), 0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(runner.started(), 2, "the third session waits for a slot");
    runner.release.add_permits(1);
    eventually("third starts", || runner.started() == 3).await;
    runner.release.add_permits(2);
    eventually("idle", || queue.session_count() == 0).await;
    assert_eq!(runner.max_running.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_main_lane_does_not_starve_the_cron_lane() {
    let (queue, runner, _) = setup(1, false);
    let s = settings(QueueMode::Collect, 20, QueueDrop::Summarize);
    queue.enqueue("busy", LaneKind::Main, s, msg("main"));
    queue.enqueue("waiting", LaneKind::Main, s, msg("main 2"));
    queue.enqueue("cron:nightly", LaneKind::Cron, s, msg("cron"));
    eventually("main and cron both run", || runner.started() == 2).await;
    assert!(runner.prompts().contains(&"cron".to_string()));
    runner.release.add_permits(3);
    eventually("idle", || queue.session_count() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collect_merges_waiting_messages_into_one_follow_up_turn() {
    let (queue, runner, _) = setup(4, false);
    let s = settings(QueueMode::Collect, 20, QueueDrop::Summarize);
    queue.enqueue("k", LaneKind::Main, s, msg("first"));
    eventually("first turn", || runner.started() == 1).await;
    queue.enqueue("k", LaneKind::Main, s, msg("second"));
    queue.enqueue("k", LaneKind::Main, s, msg("third"));
    runner.release.add_permits(2);
    eventually("idle", || queue.session_count() == 0).await;
    assert_eq!(
        runner.prompts(),
        ["first", "[Queued messages while agent was busy]\n\n---\nQueued #1\nsecond\n\n---\nQueued #2\nthird"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followup_runs_one_turn_per_waiting_message() {
    let (queue, runner, _) = setup(4, false);
    let s = settings(QueueMode::Followup, 20, QueueDrop::Summarize);
    queue.enqueue("k", LaneKind::Main, s, msg("first"));
    eventually("first turn", || runner.started() == 1).await;
    queue.enqueue("k", LaneKind::Main, s, msg("second"));
    queue.enqueue("k", LaneKind::Main, s, msg("third"));
    runner.release.add_permits(3);
    eventually("idle", || queue.session_count() == 0).await;
    assert_eq!(runner.prompts(), ["first", "second", "third"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steer_hands_the_message_to_the_running_turn() {
    let (queue, runner, _) = setup(4, true);
    let s = settings(QueueMode::Steer, 20, QueueDrop::Summarize);
    queue.enqueue("k", LaneKind::Main, s, msg("task"));
    eventually("first turn", || runner.started() == 1).await;
    assert_eq!(
        queue.enqueue("k", LaneKind::Main, s, msg("also this")),
        EnqueueOutcome::Steered
    );
    runner.release.add_permits(1);
    eventually("idle", || queue.session_count() == 0).await;
    assert_eq!(runner.prompts(), ["task"], "no extra turn");
    assert_eq!(*runner.steered.lock().expect("lock"), ["also this"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_the_turn_never_took_becomes_a_follow_up() {
    let (queue, runner, _) = setup(4, false);
    let s = settings(QueueMode::Steer, 20, QueueDrop::Summarize);
    queue.enqueue("k", LaneKind::Main, s, msg("task"));
    eventually("first turn", || runner.started() == 1).await;
    queue.enqueue("k", LaneKind::Main, s, msg("late"));
    runner.release.add_permits(2);
    eventually("idle", || queue.session_count() == 0).await;
    assert_eq!(runner.prompts(), ["task", "late"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steer_backlog_steers_and_keeps_a_follow_up() {
    let (queue, runner, _) = setup(4, true);
    let s = settings(QueueMode::SteerBacklog, 20, QueueDrop::Summarize);
    queue.enqueue("k", LaneKind::Main, s, msg("task"));
    eventually("first turn", || runner.started() == 1).await;
    assert_eq!(
        queue.enqueue("k", LaneKind::Main, s, msg("more")),
        EnqueueOutcome::SteeredWithBacklog
    );
    runner.release.add_permits(2);
    eventually("idle", || queue.session_count() == 0).await;
    assert_eq!(*runner.steered.lock().expect("lock"), ["more"]);
    assert_eq!(runner.prompts(), ["task", "more"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_aborts_the_running_turn_and_starts_anew() {
    let (queue, runner, _) = setup(4, false);
    let followup = settings(QueueMode::Followup, 20, QueueDrop::Summarize);
    let interrupt = settings(QueueMode::Interrupt, 20, QueueDrop::Summarize);
    queue.enqueue("k", LaneKind::Main, followup, msg("slow"));
    eventually("first turn", || runner.started() == 1).await;
    queue.enqueue("k", LaneKind::Main, followup, msg("stale"));
    assert_eq!(
        queue.enqueue("k", LaneKind::Main, interrupt, msg("now")),
        EnqueueOutcome::Interrupted
    );
    eventually("second turn", || runner.started() == 2).await;
    assert_eq!(runner.cancelled.load(Ordering::SeqCst), 1);
    runner.release.add_permits(1);
    eventually("idle", || queue.session_count() == 0).await;
    assert_eq!(
        runner.prompts(),
        ["slow", "now"],
        "the stale message was dropped"
    );
}

async fn fill_busy_session(drop: QueueDrop, total: usize) -> (CommandQueue, Arc<HeldRunner>) {
    let (queue, runner, _) = setup(4, false);
    let s = settings(QueueMode::Followup, 3, drop);
    queue.enqueue("k", LaneKind::Main, s, msg("running"));
    eventually("first turn", || runner.started() == 1).await;
    for i in 1..=total {
        queue.enqueue("k", LaneKind::Main, s, msg(&format!("m{i}")));
    }
    (queue, runner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_old_keeps_the_newest_cap_messages() {
    let (queue, runner) = fill_busy_session(QueueDrop::Old, 5).await;
    assert_eq!(queue.pending_len("k"), 3);
    runner.release.add_permits(10);
    eventually("idle", || queue.session_count() == 0).await;
    assert_eq!(runner.prompts(), ["running", "m3", "m4", "m5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_new_refuses_messages_past_the_cap() {
    let (queue, runner) = fill_busy_session(QueueDrop::New, 3).await;
    let s = settings(QueueMode::Followup, 3, QueueDrop::New);
    assert_eq!(
        queue.enqueue("k", LaneKind::Main, s, msg("m4")),
        EnqueueOutcome::Dropped
    );
    runner.release.add_permits(10);
    eventually("idle", || queue.session_count() == 0).await;
    assert_eq!(runner.prompts(), ["running", "m1", "m2", "m3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_summarize_folds_dropped_messages_into_one_summary() {
    let (queue, runner) = fill_busy_session(QueueDrop::Summarize, 5).await;
    runner.release.add_permits(10);
    eventually("idle", || queue.session_count() == 0).await;
    let prompts = runner.prompts();
    assert_eq!(
        prompts[1],
        "[Queue overflow] Dropped 2 messages due to cap.\nSummary:\n- m1\n- m2\n\nm3"
    );
    assert_eq!(&prompts[2..], ["m4", "m5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_messages_for_one_busy_session_stay_bounded() {
    let (queue, runner) = fill_busy_session(QueueDrop::Summarize, 10_000).await;
    assert_eq!(queue.pending_len("k"), 3);
    assert!(queue.summary_len("k") <= 3);
    runner.release.add_permits(10);
    eventually("idle", || queue.session_count() == 0).await;
    let prompts = runner.prompts();
    assert!(
        prompts[1].starts_with("[Queue overflow] Dropped 9997 messages due to cap."),
        "{}",
        prompts[1]
    );
    assert!(
        prompts[1].contains("- m9997\n"),
        "the last dropped ones are summarised"
    );
    assert_eq!(prompts.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_cancels_the_running_turn_and_drops_the_waiting_ones() {
    let (queue, runner) = fill_busy_session(QueueDrop::Summarize, 2).await;
    assert!(queue.abort("k"));
    eventually("idle", || queue.session_count() == 0).await;
    assert_eq!(runner.prompts(), ["running"]);
    assert!(!queue.abort("k"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_session_starts_with_the_claimed_message_alone_and_others_wait_behind_it() {
    let (queue, runner, _) = setup(4, false);
    let s = settings(QueueMode::Collect, 20, QueueDrop::Summarize);
    let claim = queue
        .claim_idle("agent:main:main", LaneKind::Main, s)
        .expect("an idle session can be claimed");
    assert!(
        queue
            .claim_idle("agent:main:main", LaneKind::Main, s)
            .is_none(),
        "a claimed session is busy"
    );
    // Arriving while the claimed message is being written: they wait, and in collect mode they are
    // merged with each other, never with the claimed message.
    for text in ["two", "three"] {
        assert_eq!(
            queue.enqueue("agent:main:main", LaneKind::Main, s, msg(text)),
            EnqueueOutcome::Queued
        );
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(runner.started(), 0, "nothing runs before the claim starts");
    assert_eq!(claim.start(msg("one")), EnqueueOutcome::Started);
    eventually("the claimed turn", || runner.started() == 1).await;
    assert_eq!(runner.prompts(), ["one"]);
    runner.release.add_permits(2);
    eventually("the follow-up", || runner.started() == 2).await;
    eventually("idle", || queue.session_count() == 0).await;
    assert!(runner.prompts()[1].contains("two") && runner.prompts()[1].contains("three"));
    assert_eq!(runner.max_per_session.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_dropped_unstarted_runs_what_arrived_meanwhile_or_forgets_the_session() {
    let (queue, runner, _) = setup(4, false);
    let s = settings(QueueMode::Followup, 20, QueueDrop::Summarize);
    let claim = queue.claim_idle("a", LaneKind::Main, s).expect("claim");
    assert_eq!(
        queue.enqueue("a", LaneKind::Main, s, msg("late")),
        EnqueueOutcome::Queued
    );
    drop(claim);
    eventually("the waiting message runs", || runner.started() == 1).await;
    runner.release.add_permits(1);
    eventually("idle", || queue.session_count() == 0).await;
    assert_eq!(runner.prompts(), ["late"]);

    drop(queue.claim_idle("b", LaneKind::Main, s).expect("claim"));
    eventually("forgotten", || queue.session_count() == 0).await;
    assert_eq!(runner.started(), 1);
}
