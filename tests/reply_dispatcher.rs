//! The reply dispatcher: strict ordering per run, exactly-once idle under
//! concurrent enqueue / mark_complete, human delay on tokio's paused clock,
//! failure isolation, backpressure, and the registry graceful shutdown uses.

#[path = "support/reply_sink.rs"]
mod reply_sink;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pincer::reply::dispatcher::{DrainTimeout, KindCounts};
use pincer::reply::{
    DispatchOutcome, DispatcherOptions, DispatcherRegistry, HumanDelay, ReplyDispatcher, ReplyKind,
    ReplyPayload, ShapeOptions, SkipReason,
};
use rand::{rngs::StdRng, Rng, SeedableRng};
use reply_sink::{RecordingSink, SendTime};
use tokio::time::Instant;

fn text(t: &str) -> ReplyPayload {
    ReplyPayload::text(t)
}

/// An `on_idle` hook that counts its calls and records how many replies the
/// sink had delivered at that moment.
fn idle_probe(
    sink: &Arc<RecordingSink>,
) -> (DispatcherOptions, Arc<AtomicUsize>, Arc<Mutex<Vec<usize>>>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (calls2, seen2, sink2) = (calls.clone(), seen.clone(), sink.clone());
    let options = DispatcherOptions {
        on_idle: Some(Arc::new(move || {
            calls2.fetch_add(1, Ordering::SeqCst);
            seen2.lock().expect("probe lock").push(sink2.delivered());
        })),
        ..DispatcherOptions::default()
    };
    (options, calls, seen)
}

#[tokio::test(start_paused = true)]
async fn tool_results_blocks_and_final_reply_are_delivered_in_enqueue_order() {
    // Early sends are slow and later ones fast: any concurrency would reorder.
    let sink = RecordingSink::with_latency(Box::new(|i| {
        SendTime::Sleep(Duration::from_millis(500 - 100 * i as u64))
    }));
    let dispatcher = ReplyDispatcher::new(sink.clone(), DispatcherOptions::default());
    let plan = [
        (ReplyKind::Tool, "tool: searched the web"),
        (ReplyKind::Block, "block one"),
        (ReplyKind::Tool, "tool: read a file"),
        (ReplyKind::Block, "block two"),
        (ReplyKind::Final, "final answer"),
    ];
    for (kind, t) in plan {
        assert_eq!(
            dispatcher.enqueue(kind, text(t)).await,
            DispatchOutcome::Queued
        );
    }
    dispatcher.mark_complete();
    dispatcher.wait_idle().await;
    let got: Vec<(ReplyKind, String)> = sink
        .deliveries()
        .into_iter()
        .map(|d| (d.kind, d.text))
        .collect();
    let want: Vec<(ReplyKind, String)> = plan.iter().map(|(k, t)| (*k, t.to_string())).collect();
    assert_eq!(got, want);
    assert_eq!(sink.max_in_flight(), 1);
    let counts = KindCounts {
        tool: 2,
        block: 2,
        final_reply: 1,
    };
    assert_eq!(dispatcher.queued_counts(), counts);
}

#[tokio::test(start_paused = true)]
async fn idle_is_signalled_once_after_completion_and_the_last_send() {
    let sink = RecordingSink::with_latency(Box::new(|_| SendTime::Sleep(Duration::from_secs(1))));
    let (options, calls, seen) = idle_probe(&sink);
    let dispatcher = ReplyDispatcher::new(sink.clone(), options);
    for t in ["a", "b", "c"] {
        dispatcher.enqueue(ReplyKind::Block, text(t)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !dispatcher.is_idle(),
        "not complete yet: the reservation holds"
    );
    dispatcher.mark_complete();
    dispatcher.mark_complete();
    assert!(!dispatcher.is_idle(), "sends are still pending");
    assert_eq!(dispatcher.pending_replies(), 2);
    dispatcher.wait_idle().await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(*seen.lock().expect("probe"), vec![3]);
    assert_eq!(
        dispatcher.enqueue(ReplyKind::Final, text("late")).await,
        DispatchOutcome::Closed
    );
    assert_eq!(sink.delivered(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_run_without_replies_is_idle_as_soon_as_it_completes() {
    let sink = RecordingSink::new();
    let (options, calls, _) = idle_probe(&sink);
    let dispatcher = ReplyDispatcher::new(sink.clone(), options);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    dispatcher.mark_complete();
    assert!(dispatcher.is_idle());
    dispatcher.wait_idle().await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn dropping_every_handle_completes_the_run_and_queued_replies_still_go_out() {
    let sink =
        RecordingSink::with_latency(Box::new(|_| SendTime::Sleep(Duration::from_millis(100))));
    let (options, calls, seen) = idle_probe(&sink);
    let registry = DispatcherRegistry::new();
    let dispatcher = ReplyDispatcher::new(
        sink.clone(),
        DispatcherOptions {
            registry: Some(registry.clone()),
            ..options
        },
    );
    let clone = dispatcher.clone();
    dispatcher.enqueue(ReplyKind::Block, text("one")).await;
    clone.enqueue(ReplyKind::Final, text("two")).await;
    drop(dispatcher);
    drop(clone);
    registry
        .wait_all(Instant::now() + Duration::from_secs(5))
        .await
        .expect("drained");
    assert_eq!(sink.texts(), vec!["one", "two"]);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(*seen.lock().expect("probe"), vec![2]);
}

const PRODUCERS: usize = 3;
const PER_PRODUCER: usize = 8;

/// Producers that enqueue labelled blocks with random pauses; returns the
/// labels that were accepted, in each producer's order.
fn spawn_producers(
    dispatcher: &ReplyDispatcher,
    rng: &mut StdRng,
) -> Vec<tokio::task::JoinHandle<Vec<String>>> {
    (0..PRODUCERS)
        .map(|producer| {
            let dispatcher = dispatcher.clone();
            let pause = rng.gen_range(0..3);
            tokio::spawn(async move {
                let mut queued = Vec::new();
                for seq in 0..PER_PRODUCER {
                    for _ in 0..pause {
                        tokio::task::yield_now().await;
                    }
                    let label = format!("p{producer}-{seq:02}");
                    if dispatcher.enqueue(ReplyKind::Block, text(&label)).await
                        == DispatchOutcome::Queued
                    {
                        queued.push(label);
                    }
                }
                queued
            })
        })
        .collect()
}

/// Two tasks that each call `mark_complete` after a random number of yields.
fn spawn_completers(
    dispatcher: &ReplyDispatcher,
    rng: &mut StdRng,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..2)
        .map(|i| {
            let dispatcher = dispatcher.clone();
            let wait = rng.gen_range(0..6) + i;
            tokio::spawn(async move {
                for _ in 0..wait {
                    tokio::task::yield_now().await;
                }
                dispatcher.mark_complete();
            })
        })
        .collect()
}

/// One racing round; returns how many replies were accepted.
async fn race_round(round: u64) -> usize {
    let mut rng = StdRng::seed_from_u64(round);
    let yields: Vec<usize> = (0..64).map(|_| rng.gen_range(0..4)).collect();
    let sink = RecordingSink::with_latency(Box::new(move |i| SendTime::Yields(yields[i % 64])));
    let (options, calls, seen) = idle_probe(&sink);
    let dispatcher = ReplyDispatcher::new(sink.clone(), options);
    let producers = spawn_producers(&dispatcher, &mut rng);
    let completers = spawn_completers(&dispatcher, &mut rng);
    let mut queued = Vec::new();
    for producer in producers {
        queued.extend(producer.await.expect("producer"));
    }
    for completer in completers {
        completer.await.expect("completer");
    }
    tokio::time::timeout(Duration::from_secs(10), dispatcher.wait_idle())
        .await
        .expect("idle must come");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "round {round}: idle exactly once"
    );
    assert_eq!(
        *seen.lock().expect("probe"),
        vec![queued.len()],
        "round {round}: idle after the last send"
    );
    let delivered = sink.texts();
    let mut sorted_delivered = delivered.clone();
    sorted_delivered.sort();
    queued.sort();
    assert_eq!(
        sorted_delivered, queued,
        "round {round}: every queued reply, nothing else"
    );
    for producer in 0..PRODUCERS {
        let prefix = format!("p{producer}-");
        let own: Vec<&String> = delivered
            .iter()
            .filter(|t| t.starts_with(&prefix))
            .collect();
        assert!(
            own.windows(2).all(|w| w[0] < w[1]),
            "round {round}: producer order kept: {own:?}"
        );
    }
    assert!(
        sink.max_in_flight() <= 1,
        "round {round}: one send at a time"
    );
    queued.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueue_and_mark_complete_signal_idle_exactly_once() {
    let (mut rounds_all_queued, mut rounds_some_refused) = (0, 0);
    for round in 0..150 {
        let queued = race_round(round).await;
        rounds_all_queued += usize::from(queued == PRODUCERS * PER_PRODUCER);
        rounds_some_refused += usize::from(queued < PRODUCERS * PER_PRODUCER);
    }
    // Both interleavings happened: completion after all enqueues, and
    // completion racing ahead of some of them (those were refused, not lost).
    assert!(
        rounds_all_queued > 0 && rounds_some_refused > 0,
        "{rounds_all_queued} / {rounds_some_refused}"
    );
}

#[tokio::test(start_paused = true)]
async fn human_delay_pauses_between_blocks_but_never_before_the_first() {
    let sink = RecordingSink::new();
    let options = DispatcherOptions {
        human_delay: HumanDelay::Custom {
            min_ms: 700,
            max_ms: 700,
        },
        ..DispatcherOptions::default()
    };
    let dispatcher = ReplyDispatcher::new(sink.clone(), options);
    let start = Instant::now();
    dispatcher.enqueue(ReplyKind::Tool, text("tool")).await;
    dispatcher
        .enqueue(ReplyKind::Block, text("first block"))
        .await;
    dispatcher
        .enqueue(ReplyKind::Block, text("second block"))
        .await;
    dispatcher
        .enqueue(ReplyKind::Block, text("third block"))
        .await;
    dispatcher.enqueue(ReplyKind::Final, text("final")).await;
    dispatcher.mark_complete();
    dispatcher.wait_idle().await;
    let offsets: Vec<u128> = sink
        .deliveries()
        .iter()
        .map(|d| (d.at - start).as_millis())
        .collect();
    assert_eq!(offsets, vec![0, 0, 700, 1400, 1400]);
}

#[tokio::test(start_paused = true)]
async fn natural_human_delay_stays_between_800_and_2500_ms() {
    let sink = RecordingSink::new();
    let options = DispatcherOptions {
        human_delay: HumanDelay::Natural,
        ..DispatcherOptions::default()
    };
    let dispatcher = ReplyDispatcher::new(sink.clone(), options);
    for i in 0..40 {
        dispatcher
            .enqueue(ReplyKind::Block, text(&format!("block {i}")))
            .await;
    }
    dispatcher.mark_complete();
    dispatcher.wait_idle().await;
    let times: Vec<Instant> = sink.deliveries().iter().map(|d| d.at).collect();
    for gap in times.windows(2).map(|w| (w[1] - w[0]).as_millis()) {
        assert!((800..=2500).contains(&gap), "gap {gap} ms");
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_send_is_counted_and_later_replies_still_go_out_in_order() {
    let sink = RecordingSink::new();
    let dispatcher = ReplyDispatcher::new(sink.clone(), DispatcherOptions::default());
    dispatcher.enqueue(ReplyKind::Block, text("before")).await;
    dispatcher
        .enqueue(ReplyKind::Block, text("this will FAIL"))
        .await;
    dispatcher.enqueue(ReplyKind::Final, text("after")).await;
    dispatcher.mark_complete();
    dispatcher.wait_idle().await;
    assert_eq!(sink.texts(), vec!["before", "after"]);
    assert_eq!(
        dispatcher.failed_counts(),
        KindCounts {
            tool: 0,
            block: 1,
            final_reply: 0
        }
    );
}

#[tokio::test(start_paused = true)]
async fn silent_empty_and_hidden_reasoning_payloads_are_skipped() {
    let sink = RecordingSink::new();
    let options = DispatcherOptions {
        shape: ShapeOptions {
            show_reasoning: false,
        },
        ..DispatcherOptions::default()
    };
    let dispatcher = ReplyDispatcher::new(sink.clone(), options);
    let reasoning = ReplyPayload {
        is_reasoning: true,
        ..text("I think...")
    };
    assert_eq!(
        dispatcher.enqueue(ReplyKind::Final, text("NO_REPLY")).await,
        DispatchOutcome::Skipped(SkipReason::Silent)
    );
    assert_eq!(
        dispatcher.enqueue(ReplyKind::Block, text(" \n")).await,
        DispatchOutcome::Skipped(SkipReason::Empty)
    );
    assert_eq!(
        dispatcher.enqueue(ReplyKind::Block, reasoning).await,
        DispatchOutcome::Skipped(SkipReason::Reasoning)
    );
    assert_eq!(
        dispatcher
            .enqueue(ReplyKind::Final, text("Done. NO_REPLY"))
            .await,
        DispatchOutcome::Queued
    );
    dispatcher.mark_complete();
    dispatcher.wait_idle().await;
    assert_eq!(sink.texts(), vec!["Done."]);
}

#[tokio::test(start_paused = true)]
async fn enqueue_waits_for_room_when_the_queue_is_full() {
    let sink = RecordingSink::with_latency(Box::new(|_| SendTime::Sleep(Duration::from_secs(1))));
    let options = DispatcherOptions {
        queue_capacity: 2,
        ..DispatcherOptions::default()
    };
    let dispatcher = ReplyDispatcher::new(sink.clone(), options);
    dispatcher.enqueue(ReplyKind::Block, text("one")).await;
    dispatcher.enqueue(ReplyKind::Block, text("two")).await;
    let start = Instant::now();
    dispatcher.enqueue(ReplyKind::Block, text("three")).await;
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(1),
        "third waited for the first send"
    );
    assert_eq!(sink.delivered(), 1);
    dispatcher.mark_complete();
    dispatcher.wait_idle().await;
    assert_eq!(sink.texts(), vec!["one", "two", "three"]);
}

#[tokio::test(start_paused = true)]
async fn registry_waits_for_every_live_dispatcher_before_shutdown() {
    let registry = DispatcherRegistry::new();
    let sink = RecordingSink::with_latency(Box::new(|_| SendTime::Sleep(Duration::from_secs(2))));
    let options = DispatcherOptions {
        registry: Some(registry.clone()),
        ..DispatcherOptions::default()
    };
    let runs: Vec<ReplyDispatcher> = (0..2)
        .map(|_| ReplyDispatcher::new(sink.clone(), options.clone()))
        .collect();
    for (i, run) in runs.iter().enumerate() {
        run.enqueue(ReplyKind::Final, text(&format!("answer {i}")))
            .await;
        run.mark_complete();
    }
    assert_eq!(registry.live_count(), 2);
    assert_eq!(registry.pending_replies(), 2);
    registry
        .wait_all(Instant::now() + Duration::from_secs(10))
        .await
        .expect("all drained");
    assert_eq!(sink.delivered(), 2);
    assert_eq!(registry.live_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn registry_gives_up_at_the_deadline_when_a_run_never_completes() {
    let registry = DispatcherRegistry::new();
    let sink = RecordingSink::new();
    let options = DispatcherOptions {
        registry: Some(registry.clone()),
        ..DispatcherOptions::default()
    };
    let stuck = ReplyDispatcher::new(sink.clone(), options);
    stuck.enqueue(ReplyKind::Block, text("partial")).await;
    let start = Instant::now();
    let result = registry.wait_all(start + Duration::from_secs(3)).await;
    assert_eq!(
        result,
        Err(DrainTimeout {
            dispatchers: 1,
            replies: 0
        })
    );
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    stuck.mark_complete();
    assert_eq!(registry.live_count(), 0);
}
