//! Ranking straight from the memory map: the vector scan (integer cosine over int8 vectors, `dot.rs`,
//! with a top-k heap) and BM25 over the keyword postings. Neither copies the index into RAM: the scan reads
//! each vector in place and keeps only `k` candidates; BM25 reads postings in place and keeps one score per
//! chunk that contains a query term.
//!
//! This file must not decide how scores are merged (that is `crate::memory::search`) nor tokenize queries.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::cache::raw_vector;
use super::dot::QuantizedQuery;
use super::{read_df, read_stats, scoped, term_prefix, RAW_LAYOUT_VERSION};
use crate::store::env::MEMORY_TERMS_DB;
use crate::store::{Store, StoreError};

/// BM25 term-frequency saturation.
const BM25_K1: f32 = 1.2;
/// BM25 length normalisation.
const BM25_B: f32 = 0.75;
/// Terms whose inverse document frequency is below this (in nearly every chunk, like "the") add almost
/// nothing to any score: their postings are not read, which keeps a query's work bounded on large indexes.
const MIN_TERM_IDF: f32 = 0.01;

/// A chunk id with a score (cosine similarity or BM25).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoredChunk {
    pub id: u64,
    pub score: f32,
}

/// Min-heap entry: the worst candidate sits on top so it is the one evicted.
struct Candidate(ScoredChunk);

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: lower score = "greater" = top of the max-heap; ties keep the lower id.
        other
            .0
            .score
            .total_cmp(&self.0.score)
            .then(self.0.id.cmp(&other.0.id))
    }
}

/// Keeps the `k` best scores seen.
struct TopK {
    k: usize,
    heap: BinaryHeap<Candidate>,
}

impl TopK {
    fn new(k: usize) -> TopK {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k + 1),
        }
    }

    fn offer(&mut self, id: u64, score: f32) {
        if self.k == 0 || !score.is_finite() {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(Candidate(ScoredChunk { id, score }));
        } else if let Some(worst) = self.heap.peek() {
            if score > worst.0.score {
                self.heap.pop();
                self.heap.push(Candidate(ScoredChunk { id, score }));
            }
        }
    }

    /// Best first.
    fn into_sorted(self) -> Vec<ScoredChunk> {
        let mut out: Vec<ScoredChunk> = self.heap.into_iter().map(|c| c.0).collect();
        out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        out
    }
}

fn chunk_id_of(key: &[u8]) -> Option<u64> {
    let tail: [u8; 8] = key.get(key.len().checked_sub(8)?..)?.try_into().ok()?;
    Some(u64::from_be_bytes(tail))
}

impl Store {
    /// The `k` chunks of `scope` whose vectors are most similar (cosine) to `query`, best first.
    pub fn memory_vector_top_k(
        &self,
        scope: &str,
        query: &[f32],
        k: usize,
    ) -> Result<Vec<ScoredChunk>, StoreError> {
        let prefix = scoped(scope, b"");
        let Some(query) = QuantizedQuery::new(query) else {
            return Ok(Vec::new());
        };
        self.env.read("memory_vector_top_k", |txn, dbs| {
            let mut top = TopK::new(k);
            for item in dbs.memory_vectors.prefix_iter(txn, &prefix)? {
                let (key, bytes) = item?;
                let (Some(id), Some((_scale, values))) = (chunk_id_of(key), raw_vector(bytes))
                else {
                    continue;
                };
                if let Some(score) = query.cosine(values) {
                    top.offer(id, score);
                }
            }
            Ok(top.into_sorted())
        })
    }

    /// The `k` chunks of `scope` with the highest BM25 score for `terms` (duplicates count once), best first.
    pub fn memory_keyword_top_k(
        &self,
        scope: &str,
        terms: &[String],
        k: usize,
    ) -> Result<Vec<ScoredChunk>, StoreError> {
        let mut distinct: Vec<&String> = terms.iter().collect();
        distinct.sort();
        distinct.dedup();
        self.env.read("memory_keyword_top_k", |txn, dbs| {
            let stats = read_stats(txn, dbs, scope)?;
            if stats.chunks == 0 {
                return Ok(Vec::new());
            }
            let docs = stats.chunks as f32;
            let average_len = (stats.total_tokens as f32 / docs).max(1.0);
            let mut scores: HashMap<u64, f32> = HashMap::new();
            for term in &distinct {
                let df = read_df(txn, dbs, scope, term)? as f32;
                let idf = (1.0 + (docs - df + 0.5) / (df + 0.5)).ln();
                if df == 0.0 || idf < MIN_TERM_IDF {
                    continue;
                }
                let prefix = term_prefix(scope, term);
                for item in dbs.memory_terms.prefix_iter(txn, &prefix)? {
                    let (key, value) = item?;
                    let (tf, len) = parse_posting(value).ok_or_else(|| {
                        crate::store::codec::corrupt(
                            MEMORY_TERMS_DB,
                            &String::from_utf8_lossy(key),
                            "bad posting".into(),
                        )
                    })?;
                    let Some(id) = chunk_id_of(key) else {
                        continue;
                    };
                    let tf = tf as f32;
                    let norm = 1.0 - BM25_B + BM25_B * (len as f32 / average_len);
                    *scores.entry(id).or_insert(0.0) +=
                        idf * tf * (BM25_K1 + 1.0) / (tf + BM25_K1 * norm);
                }
            }
            let mut top = TopK::new(k);
            for (id, score) in scores {
                top.offer(id, score);
            }
            Ok(top.into_sorted())
        })
    }
}

fn parse_posting(value: &[u8]) -> Option<(u32, u32)> {
    if value.len() != 9 || value[0] != RAW_LAYOUT_VERSION {
        return None;
    }
    let tf = u32::from_le_bytes(value[1..5].try_into().ok()?);
    let len = u32::from_le_bytes(value[5..9].try_into().ok()?);
    Some((tf, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_keeps_the_best_scores_in_order() {
        let mut top = TopK::new(2);
        for (id, score) in [(1, 0.1), (2, 0.9), (3, 0.5), (4, f32::NAN), (5, 0.7)] {
            top.offer(id, score);
        }
        let ids: Vec<u64> = top.into_sorted().iter().map(|c| c.id).collect();
        assert_eq!(ids, vec![2, 5]);
    }
}
