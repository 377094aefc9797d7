//! Retrieval quality on a corpus written for it: 32 target notes (tests/fixtures/memory/retrieval.json, each
//! with a query phrased differently from its note, two in Chinese) among 300 deterministic distractor notes.
//! Reports recall@5 for keyword-only, vector-only and hybrid search; hybrid must beat keyword-only.

mod memory_support;

use std::time::Duration;

use memory_support::{open_embedder, service, write_note};
use pincer::memory::SearchMode;

#[derive(serde::Deserialize)]
struct Case {
    note: String,
    query: String,
}

const DISTRACTORS: usize = 300;
const PEOPLE: [&str; 10] = [
    "Ana",
    "Jonas",
    "Lena",
    "Tomas",
    "Mum",
    "Dad",
    "Mr. Haddad",
    "Priya",
    "Kenji",
    "Olu",
];
const ACTIVITIES: [&str; 12] = [
    "had coffee",
    "talked about the trip",
    "planned the weekend",
    "fixed the fence",
    "cooked dinner",
    "went for a walk",
    "watched a film",
    "discussed the budget",
    "visited the market",
    "cleaned the garage",
    "called the bank",
    "played cards",
];
const PLACES: [&str; 9] = [
    "at home",
    "in the park",
    "near the station",
    "at the library",
    "by the lake",
    "in town",
    "at the office",
    "at the cafe",
    "in the garden",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// A plausible daily-log line, different for every `i`.
fn distractor(i: usize) -> String {
    format!(
        "On {} {} {} {}. Note {i}: nothing else worth remembering.\n",
        DAYS[i % DAYS.len()],
        PEOPLE[(i / 7) % PEOPLE.len()],
        ACTIVITIES[(i * 5 + 3) % ACTIVITIES.len()],
        PLACES[(i * 7 + 1) % PLACES.len()],
    )
}

fn recall_at_5(service: &pincer::memory::MemoryService, cases: &[Case], mode: SearchMode) -> f64 {
    let mut found = 0;
    for (i, case) in cases.iter().enumerate() {
        let mut options = service.search_options(Some(5), Some(0.0));
        options.mode = mode;
        let outcome = service.search_with(&case.query, &options).expect("search");
        let expected = format!("memory/target-{i:02}.md");
        if outcome.results.iter().any(|hit| hit.path == expected) {
            found += 1;
        }
    }
    found as f64 / cases.len() as f64
}

#[test]
fn hybrid_recall_at_5_beats_keyword_only() {
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/memory/retrieval.json"
    ))
    .expect("fixture");
    let cases: Vec<Case> = serde_json::from_str(&fixture).expect("cases");
    let dir = tempfile::tempdir().expect("dir");
    for (i, case) in cases.iter().enumerate() {
        write_note(dir.path(), &format!("memory/target-{i:02}.md"), &case.note);
    }
    for i in 0..DISTRACTORS {
        write_note(dir.path(), &format!("memory/log-{i:03}.md"), &distractor(i));
    }
    let service = service(
        dir.path(),
        Some(open_embedder(Duration::from_secs(300))),
        "{}",
    );
    let report = service.sync(false, &mut |_| {}).expect("index corpus");
    assert_eq!(report.files_indexed as usize, cases.len() + DISTRACTORS);

    let keyword = recall_at_5(&service, &cases, SearchMode::Keyword);
    let vector = recall_at_5(&service, &cases, SearchMode::Vector);
    let hybrid = recall_at_5(&service, &cases, SearchMode::Hybrid);
    println!(
        "recall@5 over {} queries, {} notes: keyword {keyword:.3}, vector {vector:.3}, hybrid {hybrid:.3}",
        cases.len(),
        cases.len() + DISTRACTORS
    );
    assert!(hybrid > keyword, "hybrid {hybrid} vs keyword {keyword}");
    assert!(vector > keyword, "vector {vector} vs keyword {keyword}");
}
