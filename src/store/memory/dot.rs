//! The vector scan's inner loop: cosine similarity between a stored int8 vector (bytes read in place from the
//! memory map) and the query, in integer arithmetic. The query is quantized once per search to i16 (so its
//! precision stays close to f32), and each stored vector costs one pass computing its dot product with the
//! query and its own squared norm. SSE2 (every x86_64) and NEON (every aarch64) do 16 elements per step;
//! other targets use the scalar loop, which gives the same integers.
//!
//! The release profile optimises for size, which turns off LLVM's loop vectorizer: the explicit SIMD paths
//! are what keeps a 10k-chunk scan within a millisecond or two. This file must not know about LMDB or keys.

/// Largest magnitude of a quantized query element. With stored elements within ±127, one 16-element step
/// adds at most 2 · 127 · 16,383 per i32 lane, so vectors of up to 4,096 dimensions cannot overflow.
const QUERY_MAX: f32 = 16_383.0;
/// Longest vector the integer kernel accepts (see `QUERY_MAX`).
pub const MAX_DIMENSIONS: usize = 4_096;

/// A query prepared for the scan.
#[derive(Clone, Debug)]
pub struct QuantizedQuery {
    values: Vec<i16>,
    /// Euclidean norm of `values`.
    norm: f32,
}

impl QuantizedQuery {
    /// Quantizes `query`; None when it is empty, all zero, not finite or too long.
    pub fn new(query: &[f32]) -> Option<QuantizedQuery> {
        let max = query.iter().fold(0f32, |m, v| m.max(v.abs()));
        if query.is_empty() || query.len() > MAX_DIMENSIONS || !max.is_finite() || max == 0.0 {
            return None;
        }
        let scale = QUERY_MAX / max;
        let values: Vec<i16> = query.iter().map(|v| (v * scale).round() as i16).collect();
        let norm = values
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt() as f32;
        Some(QuantizedQuery { values, norm })
    }

    /// Cosine similarity with a stored int8 vector (`stored` holds its i8 values as bytes); None when the
    /// dimensions differ or the stored vector is all zero.
    pub fn cosine(&self, stored: &[u8]) -> Option<f32> {
        if stored.len() != self.values.len() {
            return None;
        }
        let (dot, norm) = dot_and_norm(stored, &self.values);
        (norm > 0).then(|| dot as f32 / ((norm as f32).sqrt() * self.norm))
    }
}

/// `(Σ sᵢ·qᵢ, Σ sᵢ²)` with `s` the stored bytes read as i8; `stored.len() == query.len()`.
fn dot_and_norm(stored: &[u8], query: &[i16]) -> (i64, i64) {
    let split = stored.len() / 16 * 16;
    let (mut dot, mut norm) = simd_dot_and_norm(&stored[..split], &query[..split]);
    for (&s, &q) in stored[split..].iter().zip(&query[split..]) {
        let s = i64::from(s as i8);
        dot += s * i64::from(q);
        norm += s * s;
    }
    (dot, norm)
}

/// The 16-element steps of `dot_and_norm`; both slices are a multiple of 16 long.
#[cfg(target_arch = "x86_64")]
fn simd_dot_and_norm(stored: &[u8], query: &[i16]) -> (i64, i64) {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86_64 baseline; every load reads 16 bytes inside the slices (16 stored
    // bytes, or 8 i16 twice), which `chunks_exact` guarantees; unaligned loads are used throughout.
    unsafe {
        let mut dot = _mm_setzero_si128();
        let mut norm = _mm_setzero_si128();
        for (s, q) in stored.chunks_exact(16).zip(query.chunks_exact(16)) {
            let bytes = _mm_loadu_si128(s.as_ptr().cast());
            // Sign-extend i8 → i16: put each byte in the high half of a lane, then shift arithmetically.
            let low = _mm_srai_epi16(_mm_unpacklo_epi8(bytes, bytes), 8);
            let high = _mm_srai_epi16(_mm_unpackhi_epi8(bytes, bytes), 8);
            let q_low = _mm_loadu_si128(q.as_ptr().cast());
            let q_high = _mm_loadu_si128(q.as_ptr().add(8).cast());
            dot = _mm_add_epi32(dot, _mm_madd_epi16(low, q_low));
            dot = _mm_add_epi32(dot, _mm_madd_epi16(high, q_high));
            norm = _mm_add_epi32(norm, _mm_madd_epi16(low, low));
            norm = _mm_add_epi32(norm, _mm_madd_epi16(high, high));
        }
        let mut lanes = [[0i32; 4]; 2];
        _mm_storeu_si128(lanes[0].as_mut_ptr().cast(), dot);
        _mm_storeu_si128(lanes[1].as_mut_ptr().cast(), norm);
        let sum = |l: [i32; 4]| l.iter().map(|&v| i64::from(v)).sum::<i64>();
        (sum(lanes[0]), sum(lanes[1]))
    }
}

/// The 16-element steps of `dot_and_norm`; both slices are a multiple of 16 long.
#[cfg(target_arch = "aarch64")]
fn simd_dot_and_norm(stored: &[u8], query: &[i16]) -> (i64, i64) {
    use std::arch::aarch64::*;
    // SAFETY: NEON is part of the aarch64 baseline; every load reads 16 bytes inside the slices (16 stored
    // bytes, or 8 i16 twice), which `chunks_exact` guarantees.
    unsafe {
        let mut dot = vdupq_n_s32(0);
        let mut norm = vdupq_n_s32(0);
        for (s, q) in stored.chunks_exact(16).zip(query.chunks_exact(16)) {
            let bytes = vld1q_s8(s.as_ptr().cast());
            let low = vmovl_s8(vget_low_s8(bytes));
            let high = vmovl_s8(vget_high_s8(bytes));
            let q_low = vld1q_s16(q.as_ptr());
            let q_high = vld1q_s16(q.as_ptr().add(8));
            dot = vmlal_s16(dot, vget_low_s16(low), vget_low_s16(q_low));
            dot = vmlal_high_s16(dot, low, q_low);
            dot = vmlal_s16(dot, vget_low_s16(high), vget_low_s16(q_high));
            dot = vmlal_high_s16(dot, high, q_high);
            norm = vmlal_s16(norm, vget_low_s16(low), vget_low_s16(low));
            norm = vmlal_high_s16(norm, low, low);
            norm = vmlal_s16(norm, vget_low_s16(high), vget_low_s16(high));
            norm = vmlal_high_s16(norm, high, high);
        }
        (vaddlvq_s32(dot), vaddlvq_s32(norm))
    }
}

/// The 16-element steps of `dot_and_norm`; both slices are a multiple of 16 long.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn simd_dot_and_norm(stored: &[u8], query: &[i16]) -> (i64, i64) {
    let (mut dot, mut norm) = (0i64, 0i64);
    for (&s, &q) in stored.iter().zip(query) {
        let s = i64::from(s as i8);
        dot += s * i64::from(q);
        norm += s * s;
    }
    (dot, norm)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(stored: &[u8], query: &[i16]) -> (i64, i64) {
        stored.iter().zip(query).fold((0, 0), |(d, n), (&s, &q)| {
            let s = i64::from(s as i8);
            (d + s * i64::from(q), n + s * s)
        })
    }

    #[test]
    fn the_simd_kernel_matches_the_scalar_sums_at_the_extremes() {
        for dims in [1usize, 15, 16, 17, 384, 4_096] {
            let stored: Vec<u8> = (0..dims)
                .map(|i| match i % 4 {
                    0 => 127u8,
                    1 => (-127i8) as u8,
                    2 => (-128i8) as u8,
                    _ => (i % 251) as u8,
                })
                .collect();
            let query: Vec<i16> = (0..dims)
                .map(|i| {
                    if i % 3 == 0 {
                        16_383
                    } else {
                        -16_383 + i as i16 % 7
                    }
                })
                .collect();
            assert_eq!(
                dot_and_norm(&stored, &query),
                scalar(&stored, &query),
                "{dims} dims"
            );
        }
    }

    #[test]
    fn cosine_is_close_to_the_float_cosine_and_ignores_the_scale() {
        let query: Vec<f32> = (0..384)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let doc: Vec<f32> = (0..384)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 48.0)
            .collect();
        let dot: f32 = query.iter().zip(&doc).map(|(a, b)| a * b).sum();
        let norms = query.iter().map(|v| v * v).sum::<f32>().sqrt()
            * doc.iter().map(|v| v * v).sum::<f32>().sqrt();
        let max = doc.iter().fold(0f32, |m, v| m.max(v.abs()));
        let stored: Vec<u8> = doc
            .iter()
            .map(|v| ((v / max * 127.0).round() as i8) as u8)
            .collect();
        let prepared = QuantizedQuery::new(&query).expect("query");
        let cosine = prepared.cosine(&stored).expect("same dims");
        assert!(
            (cosine - dot / norms).abs() < 0.01,
            "{cosine} vs {}",
            dot / norms
        );
        let self_cosine = QuantizedQuery::new(&[2.0, 0.0])
            .expect("q")
            .cosine(&[127, 0]);
        assert!((self_cosine.expect("cos") - 1.0).abs() < 1e-6);
        assert!(prepared.cosine(&stored[..10]).is_none());
        assert!(QuantizedQuery::new(&[0.0, 0.0]).is_none());
    }
}
