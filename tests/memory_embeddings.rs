//! Real inference (ONNX Runtime + all-MiniLM-L6-v2 int8, installed by `scripts/setup memory`): similarity,
//! CJK notes in hybrid search, incremental sync counted in inferences, and the idle unload of the model.

mod memory_support;

use std::time::Duration;

use memory_support::{cosine, open_embedder, service, write_note};
use pincer::memory::Embedder;

#[test]
fn similar_sentences_score_higher_than_unrelated_ones() {
    let embedder = open_embedder(Duration::from_secs(300));
    let vectors = embedder
        .embed(&[
            "The cat sits on the mat.",
            "A kitten is resting on a rug.",
            "Quarterly revenue grew by ten percent.",
        ])
        .expect("embed");
    assert_eq!(vectors.len(), 3);
    assert_eq!(vectors[0].len(), 384);
    let similar = cosine(&vectors[0], &vectors[1]);
    let unrelated = cosine(&vectors[0], &vectors[2]);
    assert!(similar > 0.5, "similar {similar}");
    assert!(unrelated < 0.2, "unrelated {unrelated}");
    assert!(similar > unrelated + 0.3);
}

/// all-MiniLM-L6-v2 is an English model: its vocabulary maps most CJK characters to `[UNK]`
/// (unrelated Chinese queries score the same against a note), so it cannot retrieve CJK by
/// meaning. What holds is that CJK text embeds and that hybrid search still finds a CJK note
/// by its words (the CJK-aware keyword half), the vectors not drowning it.
#[test]
fn cjk_text_embeds_and_hybrid_search_finds_a_cjk_note_by_its_words() {
    let dir = tempfile::tempdir().expect("dir");
    let embedder = open_embedder(Duration::from_secs(300));
    let vector = embedder.embed(&["我喜欢在周末去爬山"]).expect("embed CJK");
    assert!(vector[0].iter().any(|v| *v != 0.0));
    write_note(
        dir.path(),
        "memory/family.md",
        "我妹妹下个月在杭州结婚，婚礼定在西湖边的酒店。\n",
    );
    write_note(
        dir.path(),
        "memory/work.md",
        "The quarterly report is due on Friday.\n",
    );
    write_note(
        dir.path(),
        "memory/hobby.md",
        "每周三晚上我去社区中心上太极拳课。\n",
    );
    let service = service(dir.path(), Some(embedder), "{}");
    service.sync(false, &mut |_| {}).expect("sync");
    let outcome = service.search("妹妹的婚礼在哪里").expect("search");
    assert_eq!(
        outcome.mode,
        pincer::memory::SearchMode::Hybrid,
        "{outcome:?}"
    );
    assert_eq!(outcome.results[0].path, "memory/family.md", "{outcome:?}");
}

#[test]
fn editing_one_paragraph_re_embeds_only_its_chunk() {
    let dir = tempfile::tempdir().expect("dir");
    let embedder = open_embedder(Duration::from_secs(300));
    // Ten paragraphs of ~60 tokens under headings, chunked at 80 tokens: one chunk per section.
    let section = |i: usize, extra: &str| {
        format!(
            "## Section {i}\n\nThis paragraph records fact number {i} about the garden, the shed, the tools and \
             the weather in the valley during the long and rainy month of October, when the river rises, the \
             paths turn to mud and the neighbours gather in the old barn to mend nets {extra}.\n\n"
        )
    };
    let text: String = (0..10).map(|i| section(i, "")).collect();
    write_note(dir.path(), "MEMORY.md", &text);
    let service = service(
        dir.path(),
        Some(embedder.clone()),
        r#"{"chunking":{"tokens":80,"overlap":0}}"#,
    );
    let first = service.sync(false, &mut |_| {}).expect("first sync");
    assert!(first.chunks_written >= 10, "{first:?}");
    assert_eq!(first.chunks_embedded, first.chunks_written);
    let before = embedder.inferences();
    let edited: String = (0..10)
        .map(|i| section(i, if i == 4 { "and the new fence" } else { "" }))
        .collect();
    write_note(dir.path(), "MEMORY.md", &edited);
    let second = service.sync(false, &mut |_| {}).expect("second sync");
    assert_eq!(second.files_indexed, 1);
    assert_eq!(embedder.inferences() - before, 1, "{second:?}");
    assert_eq!(second.chunks_embedded, 1);
    let status = service.status().expect("status");
    assert_eq!(status.chunks, second.chunks_written);
}

#[test]
fn deleted_files_leave_no_chunks_and_renamed_files_no_duplicates() {
    let dir = tempfile::tempdir().expect("dir");
    let embedder = open_embedder(Duration::from_secs(300));
    write_note(
        dir.path(),
        "memory/a.md",
        "The heron fishes in the reeds at dawn.\n",
    );
    write_note(dir.path(), "memory/b.md", "Buy oat milk and rye bread.\n");
    let service = service(dir.path(), Some(embedder.clone()), "{}");
    service.sync(false, &mut |_| {}).expect("sync");
    let ws = dir.path().join("workspace");
    std::fs::rename(ws.join("memory/a.md"), ws.join("memory/birds.md")).expect("rename");
    let before = embedder.inferences();
    let report = service.sync(false, &mut |_| {}).expect("sync after rename");
    assert_eq!(report.files_removed, 1);
    assert_eq!(embedder.inferences(), before, "a rename costs no inference");
    let hits = service.search("heron").expect("search").results;
    let paths: Vec<&str> = hits.iter().map(|h| h.path.as_str()).collect();
    assert_eq!(paths, ["memory/birds.md"]);
    std::fs::remove_file(ws.join("memory/b.md")).expect("delete");
    service.sync(false, &mut |_| {}).expect("sync after delete");
    let status = service.status().expect("status");
    assert_eq!((status.files, status.chunks, status.vectors), (1, 1, 1));
    let options = service.search_options(None, Some(0.0));
    let results = service
        .search_with("oat milk rye bread", &options)
        .expect("search")
        .results;
    assert!(
        results.iter().all(|h| h.path != "memory/b.md"),
        "{results:?}"
    );
}

#[test]
fn the_model_is_dropped_when_idle_and_reloaded_on_demand() {
    let embedder = open_embedder(Duration::from_millis(200));
    assert!(!embedder.is_loaded(), "loaded lazily");
    embedder
        .embed(&["first use loads the model"])
        .expect("embed");
    assert!(embedder.is_loaded());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while embedder.is_loaded() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!embedder.is_loaded(), "the reaper unloads an idle model");
    embedder
        .embed(&["second use reloads it"])
        .expect("embed again");
    assert_eq!(embedder.loads(), 2);
}

#[test]
fn status_reports_the_clamped_chunk_size_and_the_model() {
    let dir = tempfile::tempdir().expect("dir");
    let service = service(
        dir.path(),
        Some(open_embedder(Duration::from_secs(300))),
        "{}",
    );
    let status = service.status().expect("status");
    assert_eq!(status.chunk_tokens, 254);
    assert!(status
        .chunk_tokens_note
        .expect("clamp noted")
        .contains("400"));
    assert_eq!(status.model.as_deref(), Some("all-MiniLM-L6-v2:384"));
}

#[test]
fn without_a_model_search_is_keyword_only_and_says_so() {
    let dir = tempfile::tempdir().expect("dir");
    write_note(
        dir.path(),
        "MEMORY.md",
        "The spare key is under the blue flowerpot.\n",
    );
    let service = service(dir.path(), None, "{}");
    service.sync(false, &mut |_| {}).expect("sync");
    let options = service.search_options(None, Some(0.0));
    let outcome = service.search_with("spare key", &options).expect("search");
    assert_eq!(outcome.mode, pincer::memory::SearchMode::Keyword);
    assert!(outcome.fallback_reason.is_some());
    assert_eq!(outcome.results[0].path, "MEMORY.md");
}

#[test]
fn the_runtime_code_only_loading_needs_is_handed_back_after_the_first_inference() {
    let embedder = open_embedder(Duration::from_secs(300));
    embedder.embed(&["warm up the model"]).expect("embed");
    let library = memory_support::embedder_settings(Duration::from_secs(300)).runtime_library;
    let file_kib = std::fs::metadata(&library).expect("runtime library").len() / 1024;
    let resident = pincer::system::mapped_files::resident_kib(&library).expect("smaps");
    // Loading maps about 63 % of the library (every kernel registers itself); inference runs far less.
    assert!(
        resident * 100 < file_kib * 40,
        "{resident} KiB of the {file_kib} KiB runtime library stay resident"
    );
}
