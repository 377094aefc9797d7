//! The embedding cache (`embed_cache`, key `model key 0 sha256`) and the raw int8 vector layout shared with
//! `memory_vectors`: `1, scale f32 LE, i8 × dims`, read in place by the vector scan.
//!
//! This file must not know about chunks or files; it stores and returns vectors by content hash.

use super::memory::{check_scope, scoped, RAW_LAYOUT_VERSION};
use super::{Store, StoreError};

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
                        .and_then(QuantizedVector::from_bytes),
                );
            }
            Ok(found)
        })
    }

    /// Stores vectors for content hashes under `model_key`, in one transaction.
    pub fn embed_cache_put(
        &self,
        model_key: &str,
        entries: &[([u8; 32], QuantizedVector)],
    ) -> Result<(), StoreError> {
        check_scope(model_key)?;
        self.env.write("embed_cache_put", |txn, dbs| {
            for (hash, vector) in entries {
                dbs.embed_cache
                    .put(txn, &scoped(model_key, hash), &vector.to_bytes())?;
            }
            Ok(())
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
            .embed_cache_put("model-a", &[([7; 32], v.clone())])
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
}
