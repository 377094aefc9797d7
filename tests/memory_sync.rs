//! When the memory index is brought up to date, after `memorySearch.sync`: `onSearch` (default on)
//! syncs before a search once the memory files changed, `onSessionStart` (default on) does so for the
//! first search of each session, and `intervalMinutes` syncs that often even without the file watch.
//! Keyword-only services over temporary workspaces (the ranking does not matter here, only whether the
//! new note's words are in the index).

mod memory_support;

use std::sync::Arc;
use std::time::Duration;

use memory_support::write_note;
use pincer::memory::watch::{self, IndexProgress, WatchPlan};
use pincer::memory::MemoryService;
use pincer::store::{Store, StoreOptions};
use tokio_util::sync::CancellationToken;

fn keyword_service(dir: &std::path::Path, json: &str) -> MemoryService {
    let store = Store::open(&dir.join("store"), StoreOptions::default()).expect("store");
    MemoryService::new(
        store,
        "main",
        dir.join("workspace"),
        memory_support::settings(json),
        Err("keyword-only in this test".to_string()),
    )
}

fn finds(service: &MemoryService, word: &str) -> bool {
    !service.search(word).expect("search").results.is_empty()
}

#[test]
fn on_search_syncs_changed_files_before_the_search_and_off_it_does_not() {
    for (json, synced) in [
        (r#"{"query":{"minScore":0.0}}"#, true),
        (
            r#"{"sync":{"onSearch":false,"onSessionStart":false},"query":{"minScore":0.0}}"#,
            false,
        ),
    ] {
        let dir = tempfile::tempdir().expect("dir");
        write_note(dir.path(), "MEMORY.md", "# Notes\nthe alpha project\n");
        let service = keyword_service(dir.path(), json);
        service.before_search(Some("s1")).expect("first sync");
        assert!(finds(&service, "alpha"), "{json}");
        write_note(dir.path(), "memory/new.md", "# New\nthe zebra crossing\n");
        service.before_search(Some("s1")).expect("sync or not");
        assert_eq!(finds(&service, "zebra"), synced, "{json}");
    }
}

#[test]
fn on_session_start_syncs_the_first_search_of_each_session() {
    let dir = tempfile::tempdir().expect("dir");
    write_note(dir.path(), "MEMORY.md", "# Notes\nthe alpha project\n");
    let service = keyword_service(
        dir.path(),
        r#"{"sync":{"onSearch":false},"query":{"minScore":0.0}}"#,
    );
    service.before_search(Some("s1")).expect("first sync");
    write_note(dir.path(), "memory/new.md", "# New\nthe zebra crossing\n");
    service.before_search(Some("s1")).expect("no sync");
    assert!(!finds(&service, "zebra"), "s1 searched before: no sync");
    service.before_search(Some("s2")).expect("sync");
    assert!(finds(&service, "zebra"), "the first search of s2 synced");
}

/// Waits (ten minutes of the test's clock at most) for the next finished sync the watcher reports.
async fn next_sync(progress: &mut tokio::sync::broadcast::Receiver<IndexProgress>) {
    let wait = async {
        loop {
            match progress.recv().await {
                Ok(step) if step.done => return,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(error) => panic!("watcher gone: {error}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(600), wait)
        .await
        .expect("a sync within ten minutes");
}

#[tokio::test(start_paused = true)]
async fn interval_minutes_syncs_without_watching() {
    let dir = tempfile::tempdir().expect("dir");
    write_note(dir.path(), "MEMORY.md", "# Notes\nthe alpha project\n");
    let service = Arc::new(keyword_service(
        dir.path(),
        r#"{"sync":{"watch":false,"intervalMinutes":2,"onSearch":false,"onSessionStart":false},"query":{"minScore":0.0}}"#,
    ));
    let plan = WatchPlan::of(&service);
    assert_eq!(
        plan,
        WatchPlan {
            watch: None,
            every: Some(Duration::from_secs(120))
        }
    );
    let (progress, mut heard) = tokio::sync::broadcast::channel(watch::PROGRESS_CAPACITY);
    let cancel = CancellationToken::new();
    let watcher = tokio::spawn(watch::run(service.clone(), plan, cancel.clone(), progress));
    next_sync(&mut heard).await;
    write_note(dir.path(), "memory/new.md", "# New\nthe zebra crossing\n");
    assert!(!finds(&service, "zebra"));
    // The paused clock runs ahead to the next interval: the periodic sync indexes the new note.
    next_sync(&mut heard).await;
    assert!(finds(&service, "zebra"));
    cancel.cancel();
    watcher.await.expect("watcher ends");

    // Without watch or interval the watcher syncs once and is done.
    let other = tempfile::tempdir().expect("dir");
    let once = Arc::new(keyword_service(other.path(), r#"{"sync":{"watch":false}}"#));
    let (progress, _heard) = tokio::sync::broadcast::channel(watch::PROGRESS_CAPACITY);
    tokio::time::timeout(
        Duration::from_secs(5),
        watch::run(
            once.clone(),
            WatchPlan::of(&once),
            CancellationToken::new(),
            progress,
        ),
    )
    .await
    .expect("nothing more to do");
}
