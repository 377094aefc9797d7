//! Incremental indexing: brings the LMDB index of one agent in line with its memory files.
//!
//! A file whose size, modification time and index settings are unchanged is skipped; otherwise its content
//! hash decides. A changed file is streamed through the chunker and written batch by batch; each chunk's
//! vector comes from the embedding cache (keyed by model and chunk hash) or, only on a miss, from the model —
//! so editing one paragraph re-embeds only the chunks that contain it. Files that disappeared (deleted or
//! renamed) lose all their chunks. Session transcripts (`sessions`) go through the same chunk-embed-write path,
//! streamed from LMDB. This file must not rank or search.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::time::UNIX_EPOCH;

use sha2::{Digest, Sha256};

use super::chunker::{StreamingChunker, TextChunk, TokenCounter, WordCounter};
use super::discovery::MemoryFile;
use super::embedder::Embedder;
use super::keywords::term_counts;
use super::sessions::{self, SessionDeltas, SessionSource, TranscriptText};
use super::MemoryError;
use crate::store::{
    CacheWrite, MemoryFileRecord, MemoryFileWrite, NewMemoryChunk, QuantizedVector, Store,
};

/// Chunks written per transaction when there is no embedder to set the batch size.
const KEYWORD_ONLY_BATCH_CHUNKS: usize = 64;
/// Read buffer for hashing and chunking, in bytes.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Chunk size and overlap in the measuring tokenizer's tokens, after clamping to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkLimits {
    pub max_tokens: usize,
    pub overlap_tokens: usize,
    /// Whether `max_tokens` was lowered to fit the model's sequence length.
    pub clamped: bool,
}

impl ChunkLimits {
    /// Configured limits, clamped to what `embedder` can take in one input.
    pub fn for_model(
        chunk_tokens: u32,
        overlap_tokens: u32,
        embedder: Option<&dyn Embedder>,
    ) -> Self {
        let configured = (chunk_tokens as usize).max(1);
        let model_max = embedder.map_or(usize::MAX, Embedder::max_input_tokens);
        let max_tokens = configured.min(model_max);
        ChunkLimits {
            max_tokens,
            overlap_tokens: (overlap_tokens as usize).min(max_tokens / 2),
            clamped: max_tokens < configured,
        }
    }
}

/// What one sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncReport {
    pub files_seen: u64,
    pub files_indexed: u64,
    pub files_unchanged: u64,
    pub files_removed: u64,
    pub chunks_written: u64,
    /// Chunks whose vector came from the model (cache misses).
    pub chunks_embedded: u64,
    pub cache_hits: u64,
    pub keyword_only: bool,
}

/// Progress callback payload: files done of total, chunks written so far.
#[derive(Clone, Copy, Debug)]
pub struct SyncProgress {
    pub files_done: u64,
    pub files_total: u64,
    pub chunks_written: u64,
}

/// One sync run over a scope.
pub struct Indexer<'a> {
    pub store: &'a Store,
    pub scope: &'a str,
    pub embedder: Option<&'a dyn Embedder>,
    pub limits: ChunkLimits,
    /// Session transcripts to index besides the files, and when a grown one is indexed again.
    pub sessions: &'a [SessionSource],
    pub session_deltas: SessionDeltas,
    /// `memorySearch.cache`: whether vectors are cached by content hash, and at most how many.
    pub cache_enabled: bool,
    pub cache_max_entries: Option<u64>,
}

fn modified_ms(meta: &std::fs::Metadata) -> u64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64)
}

/// SHA-256 of a file, read in bounded pieces.
pub fn hash_file(file: &MemoryFile) -> Result<[u8; 32], MemoryError> {
    let io_error = |source| MemoryError::Io {
        path: file.absolute.clone(),
        source,
    };
    let mut reader = File::open(&file.absolute).map_err(io_error)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; READ_BUFFER_BYTES];
    loop {
        let read = reader.read(&mut buffer).map_err(io_error)?;
        if read == 0 {
            return Ok(hasher.finalize().into());
        }
        hasher.update(&buffer[..read]);
    }
}

impl Indexer<'_> {
    /// Identifies the embedder and chunk limits, so changing either re-indexes.
    fn index_key(&self) -> String {
        let model = self.embedder.map_or("keyword-only", Embedder::key);
        format!(
            "{model}|{}|{}",
            self.limits.max_tokens, self.limits.overlap_tokens
        )
    }

    fn batch_size(&self) -> usize {
        self.embedder
            .map_or(KEYWORD_ONLY_BATCH_CHUNKS, Embedder::batch_size)
            .max(1)
    }

    /// Indexes `files`, drops indexed paths no longer among them, reports progress after each file.
    pub fn sync(
        &self,
        files: &[MemoryFile],
        force: bool,
        progress: &mut dyn FnMut(SyncProgress),
    ) -> Result<SyncReport, MemoryError> {
        let mut report = SyncReport {
            keyword_only: self.embedder.is_none(),
            ..SyncReport::default()
        };
        let wanted: std::collections::BTreeSet<&str> = files
            .iter()
            .map(|f| f.cited_path.as_str())
            .chain(self.sessions.iter().map(|s| s.cited_path.as_str()))
            .collect();
        for path in self.store.memory_paths(self.scope)? {
            if !wanted.contains(path.as_str())
                && self.store.memory_remove_file(self.scope, &path)?
            {
                report.files_removed += 1;
            }
        }
        let mut pending = PendingWrites::default();
        for (done, file) in files.iter().enumerate() {
            report.files_seen += 1;
            match self.sync_file(file, force, &mut pending, &mut report) {
                Ok(()) => {}
                // A file that vanished between discovery and reading is simply gone.
                Err(MemoryError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    if self
                        .store
                        .memory_remove_file(self.scope, &file.cited_path)?
                    {
                        report.files_removed += 1;
                    }
                }
                Err(error) => return Err(error),
            }
            progress(SyncProgress {
                files_done: done as u64 + 1,
                files_total: files.len() as u64,
                chunks_written: report.chunks_written,
            });
        }
        for session in self.sessions {
            report.files_seen += 1;
            self.sync_session(session, force, &mut pending, &mut report)?;
        }
        self.flush(&mut pending, &mut report)?;
        Ok(report)
    }

    /// Indexes one session transcript when it is new or has grown past the deltas (`sessions`).
    fn sync_session(
        &self,
        session: &SessionSource,
        force: bool,
        pending: &mut PendingWrites,
        report: &mut SyncReport,
    ) -> Result<(), MemoryError> {
        let index_key = self.index_key();
        let stored = self.store.memory_file(self.scope, &session.cited_path)?;
        let stored = stored.filter(|s| s.embed_key == index_key && !force);
        let last_seq = self.store.transcript_last_seq(&session.session_id)?;
        let due = sessions::is_due(stored.as_ref(), last_seq, self.session_deltas, |after| {
            Ok(sessions::rendered_bytes_after(self.store, &session.session_id, after)?.0)
        })?;
        if !due {
            report.files_unchanged += 1;
            return Ok(());
        }
        let mut hasher = Sha256::new();
        let mut size_bytes = 0u64;
        let mut text = BufReader::new(TranscriptText::new(self.store, &session.session_id));
        loop {
            let piece = text.fill_buf().map_err(|source| MemoryError::Io {
                path: session.cited_path.clone().into(),
                source,
            })?;
            if piece.is_empty() {
                break;
            }
            hasher.update(piece);
            let used = piece.len();
            size_bytes += used as u64;
            text.consume(used);
        }
        let record = MemoryFileRecord {
            content_hash: hasher.finalize().into(),
            size_bytes,
            modified_ms: last_seq,
            source: "sessions".to_string(),
            embed_key: index_key,
            chunk_ids: Vec::new(),
        };
        let reader = BufReader::new(TranscriptText::new(self.store, &session.session_id));
        let path = Path::new(&session.cited_path);
        match self.embedder {
            Some(embedder) => self.write_chunks(
                &session.cited_path,
                path,
                reader,
                embedder,
                record,
                pending,
                report,
            ),
            None => self.write_chunks(
                &session.cited_path,
                path,
                reader,
                &WordCounter,
                record,
                pending,
                report,
            ),
        }?;
        report.files_indexed += 1;
        Ok(())
    }

    fn sync_file(
        &self,
        file: &MemoryFile,
        force: bool,
        pending: &mut PendingWrites,
        report: &mut SyncReport,
    ) -> Result<(), MemoryError> {
        let meta = std::fs::metadata(&file.absolute).map_err(|source| MemoryError::Io {
            path: file.absolute.clone(),
            source,
        })?;
        let index_key = self.index_key();
        let stored = self.store.memory_file(self.scope, &file.cited_path)?;
        let same_settings = stored.as_ref().is_some_and(|s| s.embed_key == index_key);
        if !force && same_settings {
            let stored = stored.as_ref().expect("checked above");
            let same_stat =
                stored.size_bytes == meta.len() && stored.modified_ms == modified_ms(&meta);
            if same_stat || stored.content_hash == hash_file(file)? {
                report.files_unchanged += 1;
                return Ok(());
            }
        }
        let record = MemoryFileRecord {
            content_hash: hash_file(file)?,
            size_bytes: meta.len(),
            modified_ms: modified_ms(&meta),
            source: "memory".to_string(),
            embed_key: index_key,
            chunk_ids: Vec::new(),
        };
        self.index_file(file, record, pending, report)?;
        report.files_indexed += 1;
        Ok(())
    }

    fn index_file(
        &self,
        file: &MemoryFile,
        record: MemoryFileRecord,
        pending: &mut PendingWrites,
        report: &mut SyncReport,
    ) -> Result<(), MemoryError> {
        let io_error = |source| MemoryError::Io {
            path: file.absolute.clone(),
            source,
        };
        let reader = BufReader::with_capacity(
            READ_BUFFER_BYTES,
            File::open(&file.absolute).map_err(io_error)?,
        );
        let (cited, path) = (file.cited_path.as_str(), file.absolute.as_path());
        match self.embedder {
            Some(embedder) => {
                self.write_chunks(cited, path, reader, embedder, record, pending, report)
            }
            None => self.write_chunks(cited, path, reader, &WordCounter, record, pending, report),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write_chunks<R: BufRead, C: TokenCounter + ?Sized>(
        &self,
        cited_path: &str,
        error_path: &Path,
        reader: R,
        counter: &C,
        record: MemoryFileRecord,
        pending: &mut PendingWrites,
        report: &mut SyncReport,
    ) -> Result<(), MemoryError> {
        let io_error = |source| MemoryError::Io {
            path: error_path.to_path_buf(),
            source,
        };
        let chunker = StreamingChunker::new(
            reader,
            counter,
            self.limits.max_tokens,
            self.limits.overlap_tokens,
        );
        // Until the last batch lands, the stored hash is "pending" so an interrupted run re-indexes the file.
        let pending_record = MemoryFileRecord {
            content_hash: [0; 32],
            ..record.clone()
        };
        let mut batch = Vec::with_capacity(self.batch_size());
        let mut first = true;
        for chunk in chunker {
            batch.push(chunk.map_err(io_error)?);
            if batch.len() >= self.batch_size() {
                pending.stage(
                    cited_path,
                    &pending_record,
                    std::mem::take(&mut batch),
                    first,
                );
                first = false;
                self.flush(pending, report)?;
            }
        }
        pending.stage(cited_path, &record, batch, first);
        if pending.chunks >= self.batch_size() {
            self.flush(pending, report)?;
        }
        Ok(())
    }

    /// Embeds what the cache lacks for every staged chunk and writes all staged files in one transaction.
    fn flush(
        &self,
        pending: &mut PendingWrites,
        report: &mut SyncReport,
    ) -> Result<(), MemoryError> {
        if pending.writes.is_empty() {
            return Ok(());
        }
        let staged = std::mem::take(&mut pending.writes);
        pending.chunks = 0;
        let texts: Vec<&TextChunk> = staged.iter().flat_map(|(_, chunks)| chunks).collect();
        let hashes: Vec<[u8; 32]> = texts
            .iter()
            .map(|c| Sha256::digest(c.text.as_bytes()).into())
            .collect();
        let (vectors, fresh) = self.vectors_for(&texts, &hashes, report)?;
        let mut vectors = vectors.into_iter();
        let mut hashes = hashes.into_iter();
        let mut writes = Vec::with_capacity(staged.len());
        for (mut write, chunks) in staged {
            for chunk in chunks {
                let (term_counts, token_count) = term_counts(&chunk.text);
                write.chunks.push(NewMemoryChunk {
                    start_line: chunk.start_line,
                    end_line: chunk.end_line,
                    content_hash: hashes.next().expect("one hash per chunk"),
                    vector: vectors.next().expect("one vector slot per chunk"),
                    text: chunk.text,
                    term_counts,
                    token_count,
                });
            }
            report.chunks_written += write.chunks.len() as u64;
            writes.push(write);
        }
        let cache = CacheWrite {
            model_key: self.embedder.map_or("", Embedder::key),
            entries: &fresh,
            max_entries: self.cache_max_entries,
        };
        self.store.memory_write_batch(self.scope, &writes, &cache)?;
        Ok(())
    }

    /// One vector per chunk: cached ones as stored, the rest embedded; also the new cache entries.
    fn vectors_for(
        &self,
        batch: &[&TextChunk],
        hashes: &[[u8; 32]],
        report: &mut SyncReport,
    ) -> Result<(Vec<Option<QuantizedVector>>, NewCacheEntries), MemoryError> {
        let Some(embedder) = self.embedder else {
            return Ok((vec![None; batch.len()], Vec::new()));
        };
        let mut vectors = if self.cache_enabled {
            self.store.embed_cache_get(embedder.key(), hashes)?
        } else {
            vec![None; batch.len()]
        };
        let missing: Vec<usize> = (0..batch.len()).filter(|&i| vectors[i].is_none()).collect();
        report.cache_hits += (batch.len() - missing.len()) as u64;
        if missing.is_empty() {
            return Ok((vectors, Vec::new()));
        }
        let texts: Vec<&str> = missing.iter().map(|&i| batch[i].text.as_str()).collect();
        let embedded = embedder.embed_batched(&texts)?;
        let mut fresh = Vec::with_capacity(missing.len());
        for (&i, vector) in missing.iter().zip(embedded) {
            let quantized = QuantizedVector::quantize(&vector);
            if self.cache_enabled {
                fresh.push((hashes[i], quantized.clone()));
            }
            vectors[i] = Some(quantized);
        }
        report.chunks_embedded += missing.len() as u64;
        Ok((vectors, fresh))
    }
}

/// Vectors embedded in this batch, to be cached under their chunk hashes.
type NewCacheEntries = Vec<([u8; 32], QuantizedVector)>;

/// Chunks staged for the next write transaction, grouped by file, in order.
#[derive(Default)]
struct PendingWrites {
    writes: Vec<(MemoryFileWrite, Vec<TextChunk>)>,
    chunks: usize,
}

impl PendingWrites {
    fn stage(
        &mut self,
        path: &str,
        record: &MemoryFileRecord,
        chunks: Vec<TextChunk>,
        replace: bool,
    ) {
        self.chunks += chunks.len();
        let write = MemoryFileWrite {
            path: path.to_string(),
            record: record.clone(),
            chunks: Vec::new(),
            replace,
        };
        self.writes.push((write, chunks));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Store, StoreOptions};

    fn workspace_file(dir: &std::path::Path, name: &str, text: &str) -> MemoryFile {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        MemoryFile {
            absolute: path,
            cited_path: name.to_string(),
        }
    }

    /// An indexer of scope `main` without a model (keyword-only).
    fn keyword_indexer(store: &Store) -> Indexer<'_> {
        Indexer {
            store,
            scope: "main",
            embedder: None,
            limits: ChunkLimits::for_model(400, 80, None),
            sessions: &[],
            session_deltas: SessionDeltas {
                bytes: 100_000,
                messages: 50,
            },
            cache_enabled: true,
            cache_max_entries: None,
        }
    }

    #[test]
    fn keyword_only_sync_indexes_skips_unchanged_and_removes_missing() {
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(&dir.path().join("db"), StoreOptions::default()).expect("store");
        let a = workspace_file(dir.path(), "a.md", "# A\nThe heron fishes at dawn.\n");
        let b = workspace_file(dir.path(), "b.md", "Another note about tea.\n");
        let indexer = keyword_indexer(&store);
        let first = indexer
            .sync(&[a.clone(), b.clone()], false, &mut |_| {})
            .expect("sync");
        assert_eq!((first.files_indexed, first.chunks_written), (2, 2));
        assert!(first.keyword_only);
        let second = indexer
            .sync(&[a.clone(), b], false, &mut |_| {})
            .expect("sync");
        assert_eq!((second.files_indexed, second.files_unchanged), (0, 2));
        let third = indexer.sync(&[a], false, &mut |_| {}).expect("sync");
        assert_eq!(third.files_removed, 1);
        assert_eq!(store.memory_paths("main").expect("paths"), vec!["a.md"]);
        let hits = store
            .memory_keyword_top_k("main", &["heron".to_string()], 3)
            .expect("bm25");
        assert_eq!(hits.len(), 1);
    }

    #[test]
    fn a_large_sync_does_not_leave_the_store_map_resident() {
        let dir = tempfile::tempdir().expect("dir");
        let db = dir.path().join("db");
        let store = Store::open(&db, StoreOptions::default()).expect("store");
        // Many distinct terms per note put postings all over the file.
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let files: Vec<MemoryFile> = (0..600)
            .map(|n| {
                let words: Vec<String> = (0..150)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        format!("term{}", seed % 40_000)
                    })
                    .collect();
                workspace_file(dir.path(), &format!("n{n}.md"), &words.join(" "))
            })
            .collect();
        let indexer = keyword_indexer(&store);
        let report = indexer.sync(&files, false, &mut |_| {}).expect("sync");
        assert_eq!(report.files_indexed, 600);
        let file_kib = std::fs::metadata(db.join("data.mdb")).expect("db").len() / 1024;
        let resident = crate::store::resident_map_kib(&db);
        assert!(
            file_kib > 4096,
            "the index is large enough to tell: {file_kib} KiB"
        );
        assert!(
            resident < file_kib / 4,
            "{resident} KiB of the {file_kib} KiB store stay resident after the sync"
        );
    }

    #[test]
    fn chunk_limits_are_clamped_to_the_model() {
        let limits = ChunkLimits::for_model(400, 80, None);
        assert_eq!(
            (limits.max_tokens, limits.overlap_tokens, limits.clamped),
            (400, 80, false)
        );
    }
}
