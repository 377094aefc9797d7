//! The long-term memory databases: indexed files (`memory_files`), their chunks (`memory_chunks`), one int8
//! vector per chunk (`memory_vectors`), keyword postings (`memory_terms`) and the embedding cache
//! (`embed_cache`), all scoped by an index name (the agent id) so agents never see each other's notes.
//!
//! Key layouts (`scope` is UTF-8 without NUL, chunk ids are big-endian u64):
//! - files:   `scope 0 path`            → `MemoryFileRecord`
//! - chunks:  `scope 0 id`              → `ChunkRecord` (text, lines, distinct terms, token length)
//! - vectors: `scope 0 id`              → `1, scale f32 LE, i8 × dims` (raw so a scan reads it in place)
//! - terms:   `scope 0 term 0 id`       → `1, tf u32 LE, chunk length u32 LE`
//! - cache:   `model key 0 sha256`      → same layout as vectors
//!
//! Replacing a file's chunks is one transaction, so a reader never sees half a file. This file must not
//! tokenize, chunk or embed: callers hand it finished chunks; ranking lives in `search.rs`.

mod cache;
mod dot;
mod search;
mod sessions;

use heed::RwTxn;
use serde::{Deserialize, Serialize};

use super::codec::{decode_at, encode, key_text, Record};
use super::env::{Databases, TxnError, MEMORY_CHUNKS_DB, MEMORY_FILES_DB};
use super::map_pages::PageRelease;
use super::{Store, StoreError};
pub use cache::QuantizedVector;
pub use search::ScoredChunk;

/// Version byte of the raw vector and posting layouts.
pub(super) const RAW_LAYOUT_VERSION: u8 = 1;
/// Longest term kept in the keyword index, in bytes (longer tokens are cut on a char boundary).
pub const MAX_TERM_BYTES: usize = 64;
/// Meta key (per scope) holding the running chunk count and token total for BM25.
const STATS_KEY_PREFIX: &str = "memory_stats:";
/// Meta key holding the next chunk id.
const NEXT_CHUNK_ID_KEY: &str = "memory_next_chunk_id";

/// One indexed file: what its content was when indexed and which chunks it produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryFileRecord {
    /// SHA-256 of the whole file.
    pub content_hash: [u8; 32],
    pub size_bytes: u64,
    pub modified_ms: u64,
    /// "memory" or "sessions".
    pub source: String,
    /// `Embedder::key()` of the vectors, empty when indexed keyword-only.
    pub embed_key: String,
    pub chunk_ids: Vec<u64>,
}

impl Record for MemoryFileRecord {
    const VERSION: u8 = 1;
}

/// A stored chunk, as returned to callers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryChunk {
    pub id: u64,
    pub path: String,
    /// 1-based, inclusive.
    pub start_line: u32,
    pub end_line: u32,
    pub text: String,
    pub content_hash: [u8; 32],
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct ChunkRecord {
    path: String,
    start_line: u32,
    end_line: u32,
    text: String,
    content_hash: [u8; 32],
    /// Distinct terms, so the postings can be removed with the chunk.
    terms: Vec<String>,
    token_count: u32,
}

impl Record for ChunkRecord {
    const VERSION: u8 = 1;
}

/// A chunk ready to be stored with its vector (absent in keyword-only mode) and term frequencies.
#[derive(Clone, Debug)]
pub struct NewMemoryChunk {
    pub start_line: u32,
    pub end_line: u32,
    pub text: String,
    pub content_hash: [u8; 32],
    pub vector: Option<QuantizedVector>,
    /// Distinct terms with their counts in this chunk.
    pub term_counts: Vec<(String, u32)>,
    /// Total keyword tokens in the chunk (BM25 document length).
    pub token_count: u32,
}

/// New embedding-cache entries written with a batch, and the cache's size limit.
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheWrite<'a> {
    pub model_key: &'a str,
    pub entries: &'a [([u8; 32], QuantizedVector)],
    /// `memorySearch.cache.maxEntries`.
    pub max_entries: Option<u64>,
}

/// Per-scope counts for `memory status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryIndexStats {
    pub files: u64,
    pub chunks: u64,
    pub vectors: u64,
    /// Sum of the chunks' keyword token counts.
    pub total_tokens: u64,
}

impl Record for MemoryIndexStats {
    const VERSION: u8 = 1;
}

pub(super) fn scoped(scope: &str, tail: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(scope.len() + 1 + tail.len());
    key.extend_from_slice(scope.as_bytes());
    key.push(0);
    key.extend_from_slice(tail);
    key
}

pub(super) fn term_prefix(scope: &str, term: &str) -> Vec<u8> {
    let mut key = scoped(scope, term.as_bytes());
    key.push(0);
    key
}

/// Marks a document-frequency key: `scope 0 0xFF term` → chunks containing `term` (u32 LE). No UTF-8 term
/// starts with 0xFF, so it never collides with a posting.
const DF_KEY_MARKER: u8 = 0xff;

pub(super) fn df_key(scope: &str, term: &str) -> Vec<u8> {
    let mut key = scoped(scope, &[DF_KEY_MARKER]);
    key.extend_from_slice(term.as_bytes());
    key
}

/// Chunks of `scope` containing `term`.
pub(super) fn read_df(
    txn: &heed::RoTxn<'_>,
    dbs: &Databases,
    scope: &str,
    term: &str,
) -> Result<u32, TxnError> {
    Ok(dbs
        .memory_terms
        .get(txn, &df_key(scope, term))?
        .and_then(|bytes| bytes.try_into().ok())
        .map_or(0, u32::from_le_bytes))
}

fn add_df(
    txn: &mut RwTxn<'_>,
    dbs: &Databases,
    scope: &str,
    term: &str,
    delta: i64,
) -> Result<(), TxnError> {
    let key = df_key(scope, term);
    let now = i64::from(read_df(txn, dbs, scope, term)?) + delta;
    if now <= 0 {
        dbs.memory_terms.delete(txn, &key)?;
    } else {
        let count = u32::try_from(now).unwrap_or(u32::MAX);
        dbs.memory_terms.put(txn, &key, &count.to_le_bytes())?;
    }
    Ok(())
}

pub(super) fn check_scope(scope: &str) -> Result<(), StoreError> {
    if scope.is_empty() || scope.contains('\0') || scope.len() > 128 {
        return Err(StoreError::InvalidKey {
            db: MEMORY_FILES_DB,
            reason: "memory scope must be 1..=128 bytes without NUL".to_string(),
        });
    }
    Ok(())
}

pub(super) fn read_stats(
    txn: &heed::RoTxn<'_>,
    dbs: &Databases,
    scope: &str,
) -> Result<MemoryIndexStats, TxnError> {
    let key = format!("{STATS_KEY_PREFIX}{scope}");
    match dbs.meta.get(txn, key.as_bytes())? {
        Some(bytes) => Ok(decode_at(super::env::META_DB, &key, bytes)?),
        None => Ok(MemoryIndexStats::default()),
    }
}

fn write_stats(
    txn: &mut RwTxn<'_>,
    dbs: &Databases,
    scope: &str,
    stats: &MemoryIndexStats,
) -> Result<(), TxnError> {
    let key = format!("{STATS_KEY_PREFIX}{scope}");
    let bytes = encode(super::env::META_DB, &key, stats)?;
    dbs.meta.put(txn, key.as_bytes(), &bytes)?;
    Ok(())
}

fn next_chunk_id(txn: &mut RwTxn<'_>, dbs: &Databases) -> Result<u64, TxnError> {
    let current = match dbs.meta.get(txn, NEXT_CHUNK_ID_KEY.as_bytes())? {
        Some(bytes) => u64::from_be_bytes(bytes.try_into().map_err(|_| {
            super::codec::corrupt(super::env::META_DB, NEXT_CHUNK_ID_KEY, "not 8 bytes".into())
        })?),
        None => 1,
    };
    dbs.meta.put(
        txn,
        NEXT_CHUNK_ID_KEY.as_bytes(),
        &(current + 1).to_be_bytes(),
    )?;
    Ok(current)
}

/// Removes one file's chunks, vectors and postings; returns the stats after removal.
fn remove_file_chunks(
    txn: &mut RwTxn<'_>,
    dbs: &Databases,
    scope: &str,
    file: &MemoryFileRecord,
    mut stats: MemoryIndexStats,
    pages: &mut PageRelease<'_>,
) -> Result<MemoryIndexStats, TxnError> {
    for &id in &file.chunk_ids {
        let key = scoped(scope, &id.to_be_bytes());
        let Some(bytes) = dbs.memory_chunks.get(txn, &key)? else {
            continue;
        };
        let chunk: ChunkRecord = decode_at(MEMORY_CHUNKS_DB, &id.to_string(), bytes)?;
        for term in &chunk.terms {
            let mut posting = term_prefix(scope, term);
            posting.extend_from_slice(&id.to_be_bytes());
            if dbs.memory_terms.delete(txn, &posting)? {
                add_df(txn, dbs, scope, term, -1)?;
            }
            pages.count(2);
        }
        dbs.memory_chunks.delete(txn, &key)?;
        if dbs.memory_vectors.delete(txn, &key)? {
            stats.vectors = stats.vectors.saturating_sub(1);
        }
        stats.chunks = stats.chunks.saturating_sub(1);
        stats.total_tokens = stats
            .total_tokens
            .saturating_sub(u64::from(chunk.token_count));
    }
    Ok(stats)
}

/// One file's share of a write batch. With `replace`, the file's previous chunks go first; without, the chunks
/// are appended to those already recorded. `record` (hash, size, …) is stored as given with the chunk ids filled
/// in; a large file arrives in several writes so indexing never holds all of its chunks (the indexer marks the
/// hash pending until the last one).
#[derive(Clone, Debug)]
pub struct MemoryFileWrite {
    pub path: String,
    pub record: MemoryFileRecord,
    pub chunks: Vec<NewMemoryChunk>,
    pub replace: bool,
}

fn write_file_chunks(
    txn: &mut RwTxn<'_>,
    dbs: &Databases,
    scope: &str,
    write: &MemoryFileWrite,
    mut stats: MemoryIndexStats,
    pages: &mut PageRelease<'_>,
) -> Result<MemoryIndexStats, TxnError> {
    let key = scoped(scope, write.path.as_bytes());
    let mut chunk_ids = Vec::new();
    if let Some(bytes) = dbs.memory_files.get(txn, &key)? {
        let old: MemoryFileRecord = decode_at(MEMORY_FILES_DB, &write.path, bytes)?;
        if write.replace {
            stats = remove_file_chunks(txn, dbs, scope, &old, stats, pages)?;
        } else {
            chunk_ids = old.chunk_ids;
        }
        stats.files = stats.files.saturating_sub(1);
    }
    for chunk in &write.chunks {
        chunk_ids.push(insert_chunk(txn, dbs, scope, &write.path, chunk, pages)?);
        stats.chunks += 1;
        stats.vectors += u64::from(chunk.vector.is_some());
        stats.total_tokens += u64::from(chunk.token_count);
    }
    stats.files += 1;
    let record = MemoryFileRecord {
        chunk_ids,
        ..write.record.clone()
    };
    dbs.memory_files
        .put(txn, &key, &encode(MEMORY_FILES_DB, &write.path, &record)?)?;
    Ok(stats)
}

fn insert_chunk(
    txn: &mut RwTxn<'_>,
    dbs: &Databases,
    scope: &str,
    path: &str,
    chunk: &NewMemoryChunk,
    pages: &mut PageRelease<'_>,
) -> Result<u64, TxnError> {
    let id = next_chunk_id(txn, dbs)?;
    let key = scoped(scope, &id.to_be_bytes());
    let record = ChunkRecord {
        path: path.to_string(),
        start_line: chunk.start_line,
        end_line: chunk.end_line,
        text: chunk.text.clone(),
        content_hash: chunk.content_hash,
        terms: chunk.term_counts.iter().map(|(t, _)| t.clone()).collect(),
        token_count: chunk.token_count,
    };
    dbs.memory_chunks
        .put(txn, &key, &encode(MEMORY_CHUNKS_DB, path, &record)?)?;
    if let Some(vector) = &chunk.vector {
        dbs.memory_vectors.put(txn, &key, &vector.to_bytes())?;
    }
    for (term, count) in &chunk.term_counts {
        let mut posting = term_prefix(scope, term);
        posting.extend_from_slice(&id.to_be_bytes());
        let mut value = vec![RAW_LAYOUT_VERSION];
        value.extend_from_slice(&count.to_le_bytes());
        value.extend_from_slice(&chunk.token_count.to_le_bytes());
        dbs.memory_terms.put(txn, &posting, &value)?;
        add_df(txn, dbs, scope, term, 1)?;
        pages.count(2);
    }
    Ok(id)
}

impl Store {
    /// The indexed record of `path` in `scope`, if any.
    pub fn memory_file(
        &self,
        scope: &str,
        path: &str,
    ) -> Result<Option<MemoryFileRecord>, StoreError> {
        check_scope(scope)?;
        let key = scoped(scope, path.as_bytes());
        self.env.read("memory_file", |txn, dbs| {
            match dbs.memory_files.get(txn, &key)? {
                Some(bytes) => Ok(Some(decode_at(MEMORY_FILES_DB, path, bytes)?)),
                None => Ok(None),
            }
        })
    }

    /// Every indexed path in `scope`, sorted.
    pub fn memory_paths(&self, scope: &str) -> Result<Vec<String>, StoreError> {
        check_scope(scope)?;
        let prefix = scoped(scope, b"");
        self.env.read("memory_paths", |txn, dbs| {
            let mut paths = Vec::new();
            for item in dbs.memory_files.prefix_iter(txn, &prefix)? {
                let (key, _) = item?;
                paths.push(key_text(MEMORY_FILES_DB, &key[prefix.len()..])?.to_string());
            }
            Ok(paths)
        })
    }

    /// Replaces everything indexed for `path` with `chunks`, in one transaction.
    pub fn memory_replace_file(
        &self,
        scope: &str,
        path: &str,
        file: &MemoryFileRecord,
        chunks: &[NewMemoryChunk],
    ) -> Result<(), StoreError> {
        self.memory_write_chunks(scope, path, file, chunks, true)
    }

    /// Writes several files' chunk batches and their new cache entries in one transaction (one fsync), in
    /// order. See `MemoryFileWrite` for what each write does.
    pub fn memory_write_batch(
        &self,
        scope: &str,
        writes: &[MemoryFileWrite],
        cache: &CacheWrite<'_>,
    ) -> Result<(), StoreError> {
        let (cache_model_key, cache_entries) = (cache.model_key, cache.entries);
        check_scope(scope)?;
        if !cache_entries.is_empty() {
            check_scope(cache_model_key)?;
        }
        let dir = self.env.path();
        self.env.write("memory_write_batch", |txn, dbs| {
            let mut pages = PageRelease::new(dir);
            let mut stats = read_stats(txn, dbs, scope)?;
            for write in writes {
                stats = write_file_chunks(txn, dbs, scope, write, stats, &mut pages)?;
            }
            write_stats(txn, dbs, scope, &stats)?;
            cache::put_cache_entries(txn, dbs, cache_model_key, cache_entries, cache.max_entries)
        })?;
        self.release_after_memory_write();
        Ok(())
    }

    /// Writes one batch of `path`'s chunks in one transaction (see `MemoryFileWrite`).
    pub fn memory_write_chunks(
        &self,
        scope: &str,
        path: &str,
        file: &MemoryFileRecord,
        chunks: &[NewMemoryChunk],
        replace: bool,
    ) -> Result<(), StoreError> {
        let write = MemoryFileWrite {
            path: path.to_string(),
            record: file.clone(),
            chunks: chunks.to_vec(),
            replace,
        };
        self.memory_write_batch(scope, &[write], &CacheWrite::default())
    }

    /// Removes `path` and all its chunks; returns whether it was indexed.
    pub fn memory_remove_file(&self, scope: &str, path: &str) -> Result<bool, StoreError> {
        check_scope(scope)?;
        let key = scoped(scope, path.as_bytes());
        let dir = self.env.path();
        let removed = self.env.delete("memory_remove_file", |txn, dbs| {
            let Some(bytes) = dbs.memory_files.get(txn, &key)? else {
                return Ok(false);
            };
            let old: MemoryFileRecord = decode_at(MEMORY_FILES_DB, path, bytes)?;
            let mut stats = read_stats(txn, dbs, scope)?;
            let mut pages = PageRelease::new(dir);
            stats = remove_file_chunks(txn, dbs, scope, &old, stats, &mut pages)?;
            stats.files = stats.files.saturating_sub(1);
            dbs.memory_files.delete(txn, &key)?;
            write_stats(txn, dbs, scope, &stats)?;
            Ok(true)
        })?;
        self.release_after_memory_write();
        Ok(removed)
    }

    /// Postings land all over the file: after a memory write, none of the map's pages stay resident (see
    /// `map_pages.rs`).
    fn release_after_memory_write(&self) {
        if let Err(e) = self.release_mapped_pages() {
            log::debug!("store: could not release the map's pages: {e}");
        }
    }

    /// The chunk with `id` in `scope`.
    pub fn memory_chunk(&self, scope: &str, id: u64) -> Result<Option<MemoryChunk>, StoreError> {
        Ok(self.memory_chunks(scope, &[id])?.pop().flatten())
    }

    /// The chunks with `ids` in `scope` (None where absent), in order, read in one transaction.
    pub fn memory_chunks(
        &self,
        scope: &str,
        ids: &[u64],
    ) -> Result<Vec<Option<MemoryChunk>>, StoreError> {
        check_scope(scope)?;
        self.env.read("memory_chunks", |txn, dbs| {
            let mut chunks = Vec::with_capacity(ids.len());
            for &id in ids {
                let key = scoped(scope, &id.to_be_bytes());
                let Some(bytes) = dbs.memory_chunks.get(txn, &key)? else {
                    chunks.push(None);
                    continue;
                };
                let record: ChunkRecord = decode_at(MEMORY_CHUNKS_DB, &id.to_string(), bytes)?;
                chunks.push(Some(MemoryChunk {
                    id,
                    path: record.path,
                    start_line: record.start_line,
                    end_line: record.end_line,
                    text: record.text,
                    content_hash: record.content_hash,
                }));
            }
            Ok(chunks)
        })
    }

    /// The stored vector of chunk `id`, dequantized.
    pub fn memory_vector(&self, scope: &str, id: u64) -> Result<Option<Vec<f32>>, StoreError> {
        check_scope(scope)?;
        let key = scoped(scope, &id.to_be_bytes());
        self.env.read("memory_vector", |txn, dbs| {
            Ok(dbs
                .memory_vectors
                .get(txn, &key)?
                .and_then(QuantizedVector::from_bytes)
                .map(|v| v.dequantize()))
        })
    }

    /// Files, chunks, vectors and token total of `scope`.
    pub fn memory_stats(&self, scope: &str) -> Result<MemoryIndexStats, StoreError> {
        check_scope(scope)?;
        self.env
            .read("memory_stats", |txn, dbs| read_stats(txn, dbs, scope))
    }
}

#[cfg(test)]
mod tests;
