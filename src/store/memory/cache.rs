//! The embedding cache (`embed_cache`, key `model key 0 sha256`) and the raw int8 vector layout of
//! `memory_vectors`: `1, scale f32 LE, i8 × dims`, read in place by the vector scan. Cache values carry an
//! insertion number in front (`2, seq u64 LE, scale f32 LE, i8 × dims`; version-1 values read as number 0) so
//! `memorySearch.cache.maxEntries` can drop the oldest entries: once the cache passes the limit, one scan
//! removes the oldest down to 90 % of it, so the scan runs once per tenth of the limit written.
//!
//! This file must not know about chunks or files; it stores and returns vectors by content hash.

use std::collections::BinaryHeap;

use heed::RwTxn;

use super::{check_scope, scoped, RAW_LAYOUT_VERSION};
use crate::store::env::{Databases, TxnError};
use crate::store::{Store, StoreError};

/// Version byte of cache values (insertion number + raw vector).
const CACHE_LAYOUT_VERSION: u8 = 2;
/// Meta key holding the next cache insertion number.
const NEXT_CACHE_SEQ_KEY: &str = "embed_cache_next_seq";

/// An int8 vector with one scale: value ≈ `scale × q`.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedVector {
    pub scale: f32,
    pub values: Vec<i8>,
}

impl QuantizedVector {
    /// Quantizes `vector` symmetrically (largest magnitude maps to ±127).
    pub fn quantize(vector: &[f32]) -> QuantizedVector {
        let max = vector.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        let values = vector
            .iter()
            .map(|v| (v / scale).round().clamp(-127.0, 127.0) as i8)
            .collect();
        QuantizedVector { scale, values }
    }

    /// The approximate f32 vector.
    pub fn dequantize(&self) -> Vec<f32> {
        self.values
            .iter()
            .map(|&q| f32::from(q) * self.scale)
            .collect()
    }

    pub(super) fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(5 + self.values.len());
        bytes.push(RAW_LAYOUT_VERSION);
        bytes.extend_from_slice(&self.scale.to_le_bytes());
        bytes.extend(self.values.iter().map(|&v| v as u8));
        bytes
    }

    pub(super) fn from_bytes(bytes: &[u8]) -> Option<QuantizedVector> {
        let (scale, values) = raw_vector(bytes)?;
        Some(QuantizedVector {
            scale,
            values: values.iter().map(|&b| b as i8).collect(),
        })
    }
}

fn cache_value(seq: u64, vector: &QuantizedVector) -> Vec<u8> {
    let raw = vector.to_bytes();
    let mut bytes = Vec::with_capacity(raw.len() + 8);
    bytes.push(CACHE_LAYOUT_VERSION);
    bytes.extend_from_slice(&seq.to_le_bytes());
    bytes.extend_from_slice(&raw[1..]);
    bytes
}

/// The insertion number and vector of a cache value (version 1: number 0).
fn parse_cache_value(bytes: &[u8]) -> Option<(u64, QuantizedVector)> {
    match *bytes.first()? {
        RAW_LAYOUT_VERSION => Some((0, QuantizedVector::from_bytes(bytes)?)),
        CACHE_LAYOUT_VERSION => {
            let seq = u64::from_le_bytes(bytes.get(1..9)?.try_into().ok()?);
            let mut raw = vec![RAW_LAYOUT_VERSION];
            raw.extend_from_slice(bytes.get(9..)?);
            Some((seq, QuantizedVector::from_bytes(&raw)?))
        }
        _ => None,
    }
}

/// Stores `entries` under `model_key` and, with `max_entries`, drops the oldest entries (all models) once
/// the cache is past it.
pub(super) fn put_cache_entries(
    txn: &mut RwTxn<'_>,
    dbs: &Databases,
    model_key: &str,
    entries: &[([u8; 32], QuantizedVector)],
    max_entries: Option<u64>,
) -> Result<(), TxnError> {
    if entries.is_empty() {
        return Ok(());
    }
    let mut seq = match dbs.meta.get(txn, NEXT_CACHE_SEQ_KEY.as_bytes())? {
        Some(bytes) => bytes.try_into().map_or(0, u64::from_le_bytes),
        None => 0,
    };
    for (hash, vector) in entries {
        dbs.embed_cache
            .put(txn, &scoped(model_key, hash), &cache_value(seq, vector))?;
        seq += 1;
    }
    dbs.meta
        .put(txn, NEXT_CACHE_SEQ_KEY.as_bytes(), &seq.to_le_bytes())?;
    let Some(max) = max_entries else {
        return Ok(());
    };
    let count = dbs.embed_cache.len(txn)?;
    if count <= max {
        return Ok(());
    }
    let excess = (count - (max - max / 10)) as usize;
    // The `excess` oldest entries: a max-heap of (seq, key) holding the smallest numbers seen.
    let mut oldest: BinaryHeap<(u64, Vec<u8>)> = BinaryHeap::with_capacity(excess + 1);
    for item in dbs.embed_cache.iter(txn)? {
        let (key, value) = item?;
        let seq = parse_cache_value(value).map_or(0, |(seq, _)| seq);
        if oldest.len() < excess {
            oldest.push((seq, key.to_vec()));
        } else if oldest.peek().is_some_and(|(top, _)| seq < *top) {
            oldest.pop();
            oldest.push((seq, key.to_vec()));
        }
    }
    for (_, key) in oldest {
        dbs.embed_cache.delete(txn, &key)?;
    }
    Ok(())
}

/// Splits a stored vector into its scale and its int8 bytes, borrowing them in place.
pub(super) fn raw_vector(bytes: &[u8]) -> Option<(f32, &[u8])> {
    let (&version, rest) = bytes.split_first()?;
    if version != RAW_LAYOUT_VERSION || rest.len() < 4 {
        return None;
    }
    let scale = f32::from_le_bytes(rest[..4].try_into().ok()?);
    Some((scale, &rest[4..]))
}

impl Store {
    /// Cached vectors for `hashes` under `model_key` (None where absent), in order.
    pub fn embed_cache_get(
        &self,
        model_key: &str,
        hashes: &[[u8; 32]],
    ) -> Result<Vec<Option<QuantizedVector>>, StoreError> {
        check_scope(model_key)?;
        self.env.read("embed_cache_get", |txn, dbs| {
            let mut found = Vec::with_capacity(hashes.len());
            for hash in hashes {
                let key = scoped(model_key, hash);
                found.push(
                    dbs.embed_cache
                        .get(txn, &key)?
                        .and_then(parse_cache_value)
                        .map(|(_, vector)| vector),
                );
            }
            Ok(found)
        })
    }

    /// Stores vectors for content hashes under `model_key` in one transaction, keeping at most about
    /// `max_entries` in the cache (see the file comment).
    pub fn embed_cache_put(
        &self,
        model_key: &str,
        entries: &[([u8; 32], QuantizedVector)],
        max_entries: Option<u64>,
    ) -> Result<(), StoreError> {
        check_scope(model_key)?;
        self.env.write("embed_cache_put", |txn, dbs| {
            put_cache_entries(txn, dbs, model_key, entries, max_entries)
        })
    }

    /// Number of cached embeddings (all models).
    pub fn embed_cache_len(&self) -> Result<u64, StoreError> {
        self.env.read("embed_cache_len", |txn, dbs| {
            Ok(dbs.embed_cache.len(txn)?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    #[test]
    fn quantized_vector_round_trips_within_one_step() {
        let v = vec![0.5, -0.25, 0.0, 1.0];
        let q = QuantizedVector::quantize(&v);
        let back = QuantizedVector::from_bytes(&q.to_bytes()).expect("layout");
        for (a, b) in v.iter().zip(back.dequantize()) {
            assert!((a - b).abs() <= q.scale, "{a} vs {b}");
        }
    }

    #[test]
    fn embed_cache_is_keyed_by_model_and_hash() {
        let (_dir, store) = temp_store();
        let v = QuantizedVector::quantize(&[0.1, 0.2]);
        store
            .embed_cache_put("model-a", &[([7; 32], v.clone())], None)
            .expect("put");
        let hits = store
            .embed_cache_get("model-a", &[[7; 32], [8; 32]])
            .expect("get");
        assert_eq!(hits, vec![Some(v), None]);
        assert_eq!(
            store.embed_cache_get("model-b", &[[7; 32]]).expect("get"),
            vec![None]
        );
    }

    #[test]
    fn the_cache_keeps_at_most_max_entries_dropping_the_oldest() {
        let (_dir, store) = temp_store();
        let v = QuantizedVector::quantize(&[0.1, 0.2]);
        for i in 0..25u8 {
            store
                .embed_cache_put("m", &[([i; 32], v.clone())], Some(10))
                .expect("put");
            assert!(store.embed_cache_len().expect("len") <= 10, "after {i}");
        }
        let hashes: Vec<[u8; 32]> = (0..25u8).map(|i| [i; 32]).collect();
        let found = store.embed_cache_get("m", &hashes).expect("get");
        let kept: Vec<usize> = (0..25).filter(|&i| found[i].is_some()).collect();
        // Past 10 entries the oldest go, down to 9: the newest 9 survive the last eviction.
        assert_eq!(kept, (16..25).collect::<Vec<_>>());
        store
            .embed_cache_put("m", &[([99; 32], v)], None)
            .expect("unbounded put");
        assert_eq!(store.embed_cache_len().expect("len"), 10);
    }
}
