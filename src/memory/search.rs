//! Hybrid search as upstream: `min(200, maxResults × multiplier)` candidates from the vector scan and from
//! BM25, merged by chunk as `vectorWeight · cosine + textWeight · bm25/(1 + bm25)`, then optional temporal
//! decay for dated daily notes (`memory/YYYY-MM-DD…`), optional MMR re-ranking, `minScore` and `maxResults`.
//! Without a usable model (none configured, or its query embedding fails) the search is keyword-only and
//! says so in its outcome.
//!
//! This file must not index or embed documents; it embeds only the query, through the `Embedder` given.

use std::collections::HashMap;

use super::embedder::Embedder;
use super::keywords::terms;
use super::MemoryError;
use crate::store::{MemoryChunk, ScoredChunk, Store};

/// Most candidates taken from each side.
pub const MAX_CANDIDATES: usize = 200;
/// Longest snippet returned, in characters.
pub const MAX_SNIPPET_CHARS: usize = 700;
const MS_PER_DAY: f64 = 86_400_000.0;

/// How results are ranked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    Hybrid,
    Vector,
    Keyword,
}

/// Search knobs, resolved from the config (see `ResolvedMemorySearch`).
#[derive(Clone, Debug, PartialEq)]
pub struct SearchOptions {
    pub max_results: usize,
    pub min_score: f32,
    pub vector_weight: f32,
    pub text_weight: f32,
    pub candidate_multiplier: usize,
    /// Requested mode; `Hybrid`/`Vector` fall back to `Keyword` without a model.
    pub mode: SearchMode,
    pub mmr_lambda: Option<f32>,
    pub temporal_half_life_days: Option<f32>,
    pub now_ms: u64,
}

/// One result, ready for citation.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
    pub snippet: String,
    pub score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector_score: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text_score: Option<f32>,
    #[serde(skip)]
    pub chunk_id: u64,
}

/// Results plus how they were produced.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchOutcome {
    pub results: Vec<SearchHit>,
    pub mode: SearchMode,
    /// Why the requested mode was not used (keyword-only fallback).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
}

/// BM25 relevance mapped into [0, 1), as upstream.
pub fn bm25_to_score(bm25: f32) -> f32 {
    let relevance = bm25.max(0.0);
    relevance / (1.0 + relevance)
}

/// The date of a daily note (`…/YYYY-MM-DD…md`) as days since the epoch.
pub fn daily_note_day(path: &str) -> Option<i64> {
    let name = path.rsplit('/').next()?;
    let date = name.get(..10)?;
    let mut parts = date.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (y, m, d): (i64, i64, i64) = (y.parse().ok()?, m.parse().ok()?, d.parse().ok()?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

struct Candidate {
    chunk: MemoryChunk,
    vector: Option<f32>,
    text: Option<f32>,
    score: f32,
}

/// Runs one search over `scope`.
pub fn search(
    store: &Store,
    scope: &str,
    embedder: Option<&dyn Embedder>,
    unavailable_reason: Option<&str>,
    query: &str,
    options: &SearchOptions,
) -> Result<SearchOutcome, MemoryError> {
    let pool = (options.max_results * options.candidate_multiplier.max(1)).clamp(1, MAX_CANDIDATES);
    let (mut mode, mut fallback_reason) = match (options.mode, embedder) {
        (SearchMode::Keyword, _) => (SearchMode::Keyword, None),
        (requested, Some(_)) => (requested, None),
        (_, None) => (
            SearchMode::Keyword,
            Some(
                unavailable_reason
                    .unwrap_or("no embedding model")
                    .to_string(),
            ),
        ),
    };
    let query_vector = match (mode, embedder) {
        (SearchMode::Hybrid | SearchMode::Vector, Some(embedder)) => {
            match embedder.embed(&[query]).map(|mut v| v.pop()) {
                Ok(Some(vector)) => Some(vector),
                Ok(None) => None,
                // A model that fails at run time (runtime library unusable, say) still leaves keywords.
                Err(error) => {
                    log::warn!("memory: query embedding failed, searching keywords only: {error}");
                    (mode, fallback_reason) = (SearchMode::Keyword, Some(error.to_string()));
                    None
                }
            }
        }
        _ => None,
    };
    let vector_hits = match &query_vector {
        Some(vector) => store.memory_vector_top_k(scope, vector, pool)?,
        None => Vec::new(),
    };
    let keyword_hits = match mode {
        SearchMode::Hybrid | SearchMode::Keyword => {
            store.memory_keyword_top_k(scope, &terms(query), pool)?
        }
        SearchMode::Vector => Vec::new(),
    };
    let mut candidates = merge(store, scope, &vector_hits, &keyword_hits, mode, options)?;
    if let Some(half_life) = options.temporal_half_life_days {
        apply_temporal_decay(&mut candidates, half_life, options.now_ms);
    }
    candidates.sort_by(|a, b| b.score.total_cmp(&a.score));
    candidates.retain(|c| c.score >= options.min_score);
    if let Some(lambda) = options.mmr_lambda {
        candidates = mmr(candidates, lambda, options.max_results);
    }
    candidates.truncate(options.max_results);
    let results = candidates.into_iter().map(into_hit).collect();
    Ok(SearchOutcome {
        results,
        mode,
        fallback_reason,
    })
}

fn merge(
    store: &Store,
    scope: &str,
    vector_hits: &[ScoredChunk],
    keyword_hits: &[ScoredChunk],
    mode: SearchMode,
    options: &SearchOptions,
) -> Result<Vec<Candidate>, MemoryError> {
    let mut by_id: HashMap<u64, (Option<f32>, Option<f32>)> = HashMap::new();
    for hit in vector_hits {
        by_id.entry(hit.id).or_default().0 = Some(hit.score);
    }
    for hit in keyword_hits {
        by_id.entry(hit.id).or_default().1 = Some(bm25_to_score(hit.score));
    }
    let ids: Vec<u64> = by_id.keys().copied().collect();
    let chunks = store.memory_chunks(scope, &ids)?;
    let mut candidates = Vec::with_capacity(by_id.len());
    for (id, chunk) in ids.into_iter().zip(chunks) {
        let Some(chunk) = chunk else {
            continue;
        };
        let (vector, text) = by_id[&id];
        let score = match mode {
            SearchMode::Hybrid => {
                options.vector_weight * vector.unwrap_or(0.0)
                    + options.text_weight * text.unwrap_or(0.0)
            }
            SearchMode::Vector => vector.unwrap_or(0.0),
            SearchMode::Keyword => text.unwrap_or(0.0),
        };
        candidates.push(Candidate {
            chunk,
            vector,
            text,
            score,
        });
    }
    Ok(candidates)
}

fn apply_temporal_decay(candidates: &mut [Candidate], half_life_days: f32, now_ms: u64) {
    let today = (now_ms as f64 / MS_PER_DAY).floor() as i64;
    for candidate in candidates {
        if let Some(day) = daily_note_day(&candidate.chunk.path) {
            let age = (today - day).max(0) as f32;
            candidate.score *= 0.5f32.powf(age / half_life_days.max(1.0));
        }
    }
}

/// Jaccard similarity of two texts' term sets (MMR's redundancy measure, as upstream).
fn text_similarity(a: &str, b: &str) -> f32 {
    let a: std::collections::HashSet<String> = terms(a).into_iter().collect();
    let b: std::collections::HashSet<String> = terms(b).into_iter().collect();
    let union = a.union(&b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(&b).count() as f32 / union as f32
}

/// Maximal marginal relevance: picks `limit` candidates trading relevance against redundancy.
fn mmr(mut pool: Vec<Candidate>, lambda: f32, limit: usize) -> Vec<Candidate> {
    let mut picked: Vec<Candidate> = Vec::with_capacity(limit);
    while picked.len() < limit && !pool.is_empty() {
        let mut best = (0usize, f32::NEG_INFINITY);
        for (i, candidate) in pool.iter().enumerate() {
            let redundancy = picked
                .iter()
                .map(|p| text_similarity(&p.chunk.text, &candidate.chunk.text))
                .fold(0.0, f32::max);
            let value = lambda * candidate.score - (1.0 - lambda) * redundancy;
            if value > best.1 {
                best = (i, value);
            }
        }
        picked.push(pool.swap_remove(best.0));
    }
    picked
}

fn into_hit(candidate: Candidate) -> SearchHit {
    let snippet: String = candidate
        .chunk
        .text
        .chars()
        .take(MAX_SNIPPET_CHARS)
        .collect();
    SearchHit {
        path: candidate.chunk.path,
        start_line: candidate.chunk.start_line,
        end_line: candidate.chunk.end_line,
        snippet,
        score: candidate.score,
        vector_score: candidate.vector,
        text_score: candidate.text,
        chunk_id: candidate.chunk.id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bm25_maps_into_the_unit_interval() {
        assert_eq!(bm25_to_score(0.0), 0.0);
        assert!((bm25_to_score(1.0) - 0.5).abs() < 1e-6);
        assert!(bm25_to_score(50.0) < 1.0);
        assert!(bm25_to_score(2.0) > bm25_to_score(1.0));
    }

    #[test]
    fn daily_notes_are_dated_and_other_files_are_not() {
        assert_eq!(daily_note_day("memory/1970-01-02.md"), Some(1));
        assert_eq!(daily_note_day("memory/2024-03-01-trip.md"), Some(19_783));
        assert_eq!(daily_note_day("MEMORY.md"), None);
        assert_eq!(daily_note_day("memory/2024-13-01.md"), None);
    }

    fn candidate(id: u64, text: &str, score: f32) -> Candidate {
        Candidate {
            chunk: MemoryChunk {
                id,
                path: format!("{id}.md"),
                start_line: 1,
                end_line: 1,
                text: text.into(),
                content_hash: [0; 32],
            },
            vector: None,
            text: None,
            score,
        }
    }

    #[test]
    fn mmr_prefers_a_diverse_second_result() {
        let pool = vec![
            candidate(1, "tea kettle boil water", 0.9),
            candidate(2, "tea kettle boil water now", 0.85),
            candidate(3, "garden roses bloom", 0.6),
        ];
        let ids: Vec<u64> = mmr(pool, 0.5, 2).iter().map(|c| c.chunk.id).collect();
        assert_eq!(ids, vec![1, 3]);
    }

    #[test]
    fn temporal_decay_halves_a_note_one_half_life_old() {
        let mut pool = vec![candidate(1, "x", 1.0)];
        pool[0].chunk.path = "memory/1970-01-01.md".into();
        apply_temporal_decay(&mut pool, 30.0, 30 * 86_400_000);
        assert!((pool[0].score - 0.5).abs() < 1e-4, "{}", pool[0].score);
    }
}
