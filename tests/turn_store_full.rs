//! A turn whose store refuses writes for a while (the disk full, the store at its size cap): the turn waits
//! for the store and records the message and the reply once it takes writes again, rather than losing the
//! answer; a turn that stops waiting says what it could not record, so the message's keeper (the inbox)
//! keeps the message for the next start.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pincer::agent::{RunOutcome, RunStatus, Unrecorded};
use pincer::store::{SessionEntry, Store, StoreError, StoreOptions, TranscriptEntry};
use support::fake_openai::FakeReply;
use support::turn_harness::Harness;
use tokio_util::sync::CancellationToken;

const FILLER: &str = "test-filler/";
/// How long the turn is given to fail on the full store before it is looked at.
const SETTLE: Duration = Duration::from_millis(800);

async fn harness() -> Harness {
    let options = StoreOptions {
        max_disk_bytes: 1024 * 1024,
        initial_map_bytes: 256 * 1024,
        lock_dir: None,
    };
    Harness::start_with_store("", options).await
}

/// The transcript the filler writes, besides meta records and session entries (`agent:main:filler-N`).
const FILLER_SESSION_ID: &str = "filler-session";

/// Fills the store until it refuses every kind of write a turn makes (meta records, a session entry, a
/// transcript entry), in ever smaller pieces: LMDB reuses freed pages, so one refused write does not mean
/// the next, to another table, is refused too.
fn fill(store: &Store) -> Filler {
    let mut keys = Vec::new();
    let mut sessions = Vec::new();
    for size in [16 * 1024, 1024, 64, 1] {
        let mut refused_in_a_row = 0;
        while refused_in_a_row < 3 {
            let key = format!("{FILLER}{:06}", keys.len());
            let kept = [
                store
                    .put_meta(&key, &vec![0x5a_u8; size])
                    .map(|()| keys.push(key)),
                // New entries only: an overwrite frees the pages it takes, so it always fits.
                {
                    let session = format!("agent:main:filler-{}", sessions.len());
                    store
                        .put_session(&session, &SessionEntry::new(FILLER_SESSION_ID, 1))
                        .map(|()| sessions.push(session))
                },
                store
                    .append_transcript(FILLER_SESSION_ID, &filler_entry(size))
                    .map(|_| ()),
            ];
            let mut any = false;
            for result in kept {
                match result {
                    Ok(()) => any = true,
                    Err(StoreError::Full { .. }) => {}
                    Err(e) => panic!("filling the store: {e}"),
                }
            }
            refused_in_a_row = if any { 0 } else { refused_in_a_row + 1 };
            assert!(keys.len() < 100_000, "the store never filled");
        }
    }
    Filler { keys, sessions }
}

/// What [`fill`] wrote, for [`unfill`].
struct Filler {
    keys: Vec<String>,
    sessions: Vec<String>,
}

fn filler_entry(size: usize) -> TranscriptEntry {
    TranscriptEntry {
        role: "user".into(),
        text: "f".repeat(size),
        timestamp_ms: 1,
        run_id: None,
        stop_reason: None,
        input_tokens: None,
        output_tokens: None,
        extra_json: None,
    }
}

fn unfill(store: &Store, filler: &Filler) {
    for key in &filler.keys {
        store.delete_meta(key).expect("free the filler");
    }
    for session in &filler.sessions {
        store
            .delete_session(session)
            .expect("free the filler's sessions");
    }
    store
        .delete_transcript(FILLER_SESSION_ID)
        .expect("free the filler's transcript");
}

fn held(reply: &str) -> (Arc<tokio::sync::Notify>, FakeReply) {
    let gate = Arc::new(tokio::sync::Notify::new());
    let reply = FakeReply::Held {
        gate: gate.clone(),
        then: Box::new(FakeReply::Text {
            chunks: vec![reply.to_string()],
            delay_ms: 0,
        }),
    };
    (gate, reply)
}

fn transcript(h: &Harness) -> Vec<(String, String)> {
    let session = h.session();
    h.env
        .store
        .transcript_tail(&session.session_id, 10)
        .expect("transcript")
        .into_iter()
        .map(|(_, e)| (e.role, e.text))
        .collect()
}

/// Runs the turn while `control` acts on the harness; `done` says whether the turn has ended.
async fn turn_with<F: std::future::Future<Output = ()>>(
    h: &Harness,
    cancel: CancellationToken,
    control: impl FnOnce(Arc<AtomicBool>) -> F,
) -> RunOutcome {
    let done = Arc::new(AtomicBool::new(false));
    let turn = async {
        let outcome = h.turn_cancellable("run-full", "hello there", cancel).await;
        done.store(true, Ordering::SeqCst);
        outcome
    };
    let (outcome, ()) = tokio::join!(turn, control(done.clone()));
    outcome
}

async fn wait_for_model_call(h: &Harness) {
    for _ in 0..500 {
        if !h.fake.requests().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the model was never called");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_the_full_store_refused_is_recorded_once_space_is_freed() {
    let h = harness().await;
    let (gate, reply) = held("the answer, kept");
    h.fake.push_reply(reply);
    let hr = &h;
    let outcome = turn_with(&h, CancellationToken::new(), |done| async move {
        wait_for_model_call(hr).await;
        // The user's message is recorded; now the disk fills before the reply comes.
        let filler = fill(&hr.env.store);
        gate.notify_one();
        tokio::time::sleep(SETTLE).await;
        assert!(
            !done.load(Ordering::SeqCst),
            "the turn ended while the store refused its reply (it should wait)"
        );
        unfill(&hr.env.store, &filler);
    })
    .await;
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    assert_eq!(outcome.unrecorded, None);
    assert_eq!(
        transcript(&h),
        [
            ("user".to_string(), "hello there".to_string()),
            ("assistant".to_string(), "the answer, kept".to_string())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_full_store_refused_runs_once_space_is_freed() {
    let h = harness().await;
    h.fake.push_reply(FakeReply::Text {
        chunks: vec!["answered after the wait".into()],
        delay_ms: 0,
    });
    let filler = fill(&h.env.store);
    let hr = &h;
    let outcome = turn_with(&h, CancellationToken::new(), |done| async move {
        tokio::time::sleep(SETTLE).await;
        assert!(!done.load(Ordering::SeqCst), "the turn gave up at once");
        assert!(
            hr.fake.requests().is_empty(),
            "the model ran before the message was recorded"
        );
        unfill(&hr.env.store, &filler);
    })
    .await;
    assert_eq!(outcome.status, RunStatus::Ok, "{:?}", outcome.error);
    assert_eq!(
        transcript(&h),
        [
            ("user".to_string(), "hello there".to_string()),
            (
                "assistant".to_string(),
                "answered after the wait".to_string()
            )
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_stops_waiting_names_what_it_could_not_record() {
    // The reply: streamed, but never in the transcript.
    let h = harness().await;
    let (gate, reply) = held("never kept");
    h.fake.push_reply(reply);
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let hr = &h;
    let outcome = turn_with(&h, cancel, |_| async move {
        wait_for_model_call(hr).await;
        fill(&hr.env.store);
        gate.notify_one();
        tokio::time::sleep(SETTLE).await;
        stop.cancel();
    })
    .await;
    assert_eq!(outcome.unrecorded, Some(Unrecorded::Reply), "{outcome:?}");
    assert_eq!(outcome.status, RunStatus::Error);
    let error = outcome.error.expect("error");
    assert!(error.contains("could not record the reply"), "{error}");
    assert_eq!(outcome.text, "never kept");

    // The message: no model call at all.
    let h = harness().await;
    fill(&h.env.store);
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    let outcome = turn_with(&h, cancel, |_| async move {
        tokio::time::sleep(SETTLE).await;
        stop.cancel();
    })
    .await;
    assert_eq!(outcome.unrecorded, Some(Unrecorded::Message));
    assert_eq!(outcome.status, RunStatus::Error);
    assert!(h.fake.requests().is_empty());
}
