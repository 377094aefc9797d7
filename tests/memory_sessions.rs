//! Session transcripts as a memory source (`sources: ["memory", "sessions"]` with
//! `experimental.sessionMemory`): a session's messages become searchable under `sessions/<id>.jsonl`, a
//! growing session is indexed again only past the delta thresholds, other agents' sessions stay out, and
//! without the source nothing of the transcripts is indexed. Also `cache.maxEntries` bounding the embedding
//! cache during a real sync.

mod memory_support;

use std::time::Duration;

use pincer::memory::MemoryService;
use pincer::store::{SessionEntry, Store, StoreOptions, TranscriptEntry};

const SESSIONS_ON: &str = r#"{"sources":["memory","sessions"],"experimental":{"sessionMemory":true},
    "sync":{"sessions":{"deltaMessages":5,"deltaBytes":100000}},"query":{"minScore":0.0}}"#;

fn say(store: &Store, session_id: &str, role: &str, text: &str) {
    let entry = TranscriptEntry {
        role: role.into(),
        text: text.into(),
        timestamp_ms: 1,
        ..TranscriptEntry::default()
    };
    store.append_transcript(session_id, &entry).expect("append");
}

fn session(store: &Store, key: &str, session_id: &str) {
    store
        .put_session(key, &SessionEntry::new(session_id, 1))
        .expect("session");
}

/// A keyword-only service over a store the test writes sessions into.
fn keyword_service(dir: &std::path::Path, json: &str) -> (MemoryService, Store) {
    let store = Store::open(&dir.join("store"), StoreOptions::default()).expect("store");
    let service = MemoryService::new(
        store.clone(),
        "main",
        dir.join("workspace"),
        memory_support::settings(json),
        Err("keyword-only in this test".to_string()),
    );
    (service, store)
}

fn paths(service: &MemoryService, query: &str) -> Vec<String> {
    service
        .search(query)
        .expect("search")
        .results
        .into_iter()
        .map(|hit| hit.path)
        .collect()
}

#[test]
fn session_messages_are_searchable_and_regrow_past_the_deltas() {
    let dir = tempfile::tempdir().expect("dir");
    let (service, store) = keyword_service(dir.path(), SESSIONS_ON);
    session(&store, "agent:main:main", "s-main");
    session(&store, "agent:other:main", "s-other");
    say(
        &store,
        "s-main",
        "user",
        "Book the ferry to Hydra for the 12th",
    );
    say(&store, "s-main", "tool", "ferrytool internal output");
    say(
        &store,
        "s-main",
        "assistant",
        "Booked the morning ferry to Hydra.",
    );
    say(&store, "s-other", "user", "The zeppelin leaves at noon");

    let first = service.sync(false, &mut |_| {}).expect("sync");
    assert_eq!(first.files_indexed, 1, "{first:?}");
    assert_eq!(
        paths(&service, "ferry Hydra"),
        vec!["sessions/s-main.jsonl"]
    );
    assert!(
        paths(&service, "ferrytool").is_empty(),
        "tool output is not indexed"
    );
    assert!(
        paths(&service, "zeppelin").is_empty(),
        "another agent's session"
    );

    // Two new messages: below deltaMessages (5) and deltaBytes, so not indexed yet.
    say(
        &store,
        "s-main",
        "user",
        "Also reserve a taverna by the harbour",
    );
    say(&store, "s-main", "assistant", "Reserved.");
    let small = service.sync(false, &mut |_| {}).expect("sync");
    assert_eq!(
        (small.files_indexed, small.files_unchanged),
        (0, 1),
        "{small:?}"
    );
    assert!(paths(&service, "taverna").is_empty());
    for i in 0..3 {
        say(&store, "s-main", "user", &format!("filler message {i}"));
    }
    let grown = service.sync(false, &mut |_| {}).expect("sync");
    assert_eq!(grown.files_indexed, 1, "{grown:?}");
    assert_eq!(
        paths(&service, "taverna harbour"),
        vec!["sessions/s-main.jsonl"]
    );

    // A reset points the key at a new session: the old one leaves the index.
    session(&store, "agent:main:main", "s-new");
    say(&store, "s-new", "user", "Water the basil");
    service.sync(false, &mut |_| {}).expect("sync");
    assert_eq!(paths(&service, "basil"), vec!["sessions/s-new.jsonl"]);
    assert!(paths(&service, "taverna").is_empty());
}

#[test]
fn without_the_sessions_source_transcripts_stay_out() {
    let dir = tempfile::tempdir().expect("dir");
    let (service, store) = keyword_service(dir.path(), r#"{"query":{"minScore":0.0}}"#);
    session(&store, "agent:main:main", "s1");
    say(&store, "s1", "user", "The ferry to Hydra");
    memory_support::write_note(
        dir.path(),
        "MEMORY.md",
        "Ferry tickets are in the drawer.\n",
    );
    let report = service.sync(false, &mut |_| {}).expect("sync");
    assert_eq!(report.files_seen, 1, "{report:?}");
    assert_eq!(paths(&service, "ferry"), vec!["MEMORY.md"]);
}

#[test]
fn the_embedding_cache_stays_within_max_entries() {
    let dir = tempfile::tempdir().expect("dir");
    let embedder = memory_support::open_embedder(Duration::from_secs(300));
    for i in 0..30 {
        memory_support::write_note(
            dir.path(),
            &format!("memory/n{i:02}.md"),
            &format!("Note {i}: the parcel number {i} arrived on day {i}.\n"),
        );
    }
    let service = memory_support::service(
        dir.path(),
        Some(embedder.clone()),
        r#"{"cache":{"maxEntries":10}}"#,
    );
    let report = service.sync(false, &mut |_| {}).expect("sync");
    assert_eq!(report.chunks_embedded, 30, "{report:?}");
    let status = service.status().expect("status");
    assert!(status.embed_cache_entries <= 10, "{status:?}");
    assert!(status.embed_cache_entries >= 9, "{status:?}");
    assert_eq!(status.vectors, 30, "the index itself keeps every vector");
}
