//! The coalescer driven on tokio's paused clock, feeding a real dispatcher:
//! small blocks merge and go out once idle past the low mark, a full buffer
//! goes out at once, and the end of the run flushes whatever is left.

#[path = "support/reply_sink.rs"]
mod reply_sink;

use std::time::Duration;

use pincer::config::BreakPreference;
use pincer::reply::{
    CoalesceLimits, Coalescer, DispatcherOptions, ReplyDispatcher, ReplyKind, ReplyPayload,
};
use reply_sink::RecordingSink;

const IDLE: Duration = Duration::from_millis(1000);

fn setup(
    min: usize,
    max: usize,
) -> (
    std::sync::Arc<RecordingSink>,
    ReplyDispatcher,
    pincer::reply::CoalescerHandle,
) {
    let sink = RecordingSink::new();
    let dispatcher = ReplyDispatcher::new(sink.clone(), DispatcherOptions::default());
    let limits = CoalesceLimits::new(min, max, IDLE, BreakPreference::Paragraph);
    let handle = Coalescer::new(limits).spawn(dispatcher.clone());
    (sink, dispatcher, handle)
}

/// Lets the coalescer and dispatcher tasks run without moving the clock.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn small_blocks_go_out_merged_once_idle_past_the_low_mark() {
    let (sink, dispatcher, handle) = setup(20, 500);
    for block in ["First block.\n\n", "Second block.\n\n", "Third."] {
        handle.push(ReplyPayload::text(block)).await;
        settle().await;
        tokio::time::advance(Duration::from_millis(300)).await;
    }
    settle().await;
    assert_eq!(
        sink.delivered(),
        0,
        "blocks keep arriving: nothing sent yet"
    );
    tokio::time::advance(Duration::from_millis(699)).await;
    settle().await;
    assert_eq!(sink.delivered(), 0, "idle time not reached");
    tokio::time::advance(Duration::from_millis(1)).await;
    settle().await;
    assert_eq!(
        sink.texts(),
        vec!["First block.\n\nSecond block.\n\nThird."]
    );
    handle.finish().await;
    dispatcher.mark_complete();
    dispatcher.wait_idle().await;
    assert_eq!(sink.delivered(), 1);
}

#[tokio::test(start_paused = true)]
async fn text_below_the_low_mark_waits_for_the_end_of_the_run() {
    let (sink, dispatcher, handle) = setup(1500, 2000);
    handle.push(ReplyPayload::text("A short answer.")).await;
    tokio::time::advance(Duration::from_secs(30)).await;
    settle().await;
    assert_eq!(sink.delivered(), 0);
    handle.finish().await;
    dispatcher.mark_complete();
    dispatcher.wait_idle().await;
    assert_eq!(sink.texts(), vec!["A short answer."]);
}

#[tokio::test(start_paused = true)]
async fn reaching_max_chars_sends_without_waiting_for_idle() {
    let (sink, dispatcher, handle) = setup(10, 40);
    handle
        .push(ReplyPayload::text("0123456789012345678\n\n"))
        .await;
    handle.push(ReplyPayload::text("abcdefghijklmnopqrs")).await;
    settle().await;
    assert_eq!(
        sink.texts(),
        vec!["0123456789012345678\n\nabcdefghijklmnopqrs"]
    );
    handle.push(ReplyPayload::text("next")).await;
    handle.finish().await;
    dispatcher.mark_complete();
    dispatcher.wait_idle().await;
    let deliveries = sink.deliveries();
    assert_eq!(deliveries.len(), 2);
    assert!(deliveries.iter().all(|d| d.kind == ReplyKind::Block));
    assert_eq!(deliveries[1].text, "next");
}
