use super::*;
use crate::store::test_support::temp_store;

fn chunk(text: &str, terms: &[(&str, u32)], vector: Option<Vec<f32>>) -> NewMemoryChunk {
    NewMemoryChunk {
        start_line: 1,
        end_line: 2,
        text: text.to_string(),
        content_hash: [text.len() as u8; 32],
        vector: vector.map(|v| QuantizedVector::quantize(&v)),
        term_counts: terms.iter().map(|(t, c)| (t.to_string(), *c)).collect(),
        token_count: terms.iter().map(|(_, c)| c).sum(),
    }
}

fn file() -> MemoryFileRecord {
    MemoryFileRecord {
        content_hash: [1; 32],
        size_bytes: 10,
        modified_ms: 5,
        source: "memory".into(),
        embed_key: String::new(),
        chunk_ids: Vec::new(),
    }
}

#[test]
fn replacing_a_file_drops_its_old_chunks_and_postings() {
    let (_dir, store) = temp_store();
    let first = [chunk(
        "alpha beta",
        &[("alpha", 1), ("beta", 1)],
        Some(vec![1.0, 0.0]),
    )];
    store
        .memory_replace_file("main", "a.md", &file(), &first)
        .expect("first");
    let second = [chunk("gamma", &[("gamma", 1)], None)];
    store
        .memory_replace_file("main", "a.md", &file(), &second)
        .expect("second");
    let stats = store.memory_stats("main").expect("stats");
    assert_eq!((stats.files, stats.chunks, stats.vectors), (1, 1, 0));
    assert!(store
        .memory_keyword_top_k("main", &["alpha".into()], 5)
        .expect("search")
        .is_empty());
    assert_eq!(
        store
            .memory_keyword_top_k("main", &["gamma".into()], 5)
            .expect("search")
            .len(),
        1
    );
}

#[test]
fn removing_a_file_leaves_nothing_and_scopes_are_separate() {
    let (_dir, store) = temp_store();
    let chunks = [chunk("alpha", &[("alpha", 1)], Some(vec![1.0, 0.0]))];
    store
        .memory_replace_file("main", "a.md", &file(), &chunks)
        .expect("main");
    store
        .memory_replace_file("other", "a.md", &file(), &chunks)
        .expect("other");
    assert!(store.memory_remove_file("main", "a.md").expect("remove"));
    assert!(store.memory_remove_file("other", "a.md").expect("remove"));
    let entries = store.stats().expect("stats").entries;
    // Postings and document-frequency counters leave with the last chunk that had them.
    assert_eq!(entries.get("memory_terms"), Some(&0), "{entries:?}");
    store
        .memory_replace_file("other", "a.md", &file(), &chunks)
        .expect("other again");
    assert_eq!(
        store.memory_stats("main").expect("stats"),
        MemoryIndexStats::default()
    );
    assert!(store.memory_paths("main").expect("paths").is_empty());
    assert_eq!(store.memory_paths("other").expect("paths"), vec!["a.md"]);
    assert_eq!(
        store
            .memory_vector_top_k("other", &[1.0, 0.0], 3)
            .expect("scan")
            .len(),
        1
    );
}
