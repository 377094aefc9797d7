//! Long-term memory: the agent's markdown notes, indexed on the board into LMDB with local ONNX embeddings
//! and BM25, searched hybrid (vector + keyword) within bounded memory.
//!
//! `MemoryService` is the face of the module for one agent: it discovers files (`discovery`), keeps the index
//! in sync (`index`, `watch`), searches (`search`) and serves the tools (`tools`). Embedding goes through the
//! `Embedder` trait (`embedder`, `onnx`); without a model the service runs keyword-only and says why. Every
//! method blocks (LMDB, file reads, inference): async callers use `spawn_blocking`.
//!
//! `sessions` indexes session transcripts when `sources` lists `"sessions"`. Writing notes with the model's help
//! (the `/new` session note, the pre-compaction flush turn) belongs to the agent (`agent::session_note`,
//! `agent::memory_flush`): this module never calls a model.

pub mod chunker;
pub mod discovery;
pub mod embedder;
mod freshness;
pub mod index;
pub mod keywords;
#[cfg(not(target_arch = "arm"))]
mod onnx;
pub mod registry;
pub mod search;
pub mod sessions;
pub mod tools;
pub mod watch;
#[cfg(not(target_arch = "arm"))]
pub mod wordpiece;
#[cfg(not(target_arch = "arm"))]
pub mod worker;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::schema::memory::{MemorySource, ResolvedMemorySearch};
use crate::config::Config;
use crate::store::{Store, StoreError};
use crate::system::clock::now_ms;

pub use discovery::MemoryFile;
pub use embedder::{EmbedError, Embedder, EmbedderSettings};
pub use index::{ChunkLimits, SyncProgress, SyncReport};
pub use search::{SearchHit, SearchMode, SearchOptions, SearchOutcome};

/// Everything that can go wrong in memory indexing and search.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
    #[error("memory search is disabled for this agent (memorySearch.enabled is false)")]
    Disabled,
}

/// The workspace of `agent_id`, by upstream's rule: its own `workspace`; for the default agent
/// `agents.defaults.workspace`, else `<data_dir>/workspace`; for any other agent
/// `<agents.defaults.workspace>/<agentId>`, else `<data_dir>/workspace-<agentId>`. The one
/// answer for the agent's runs, its memory and its heartbeat.
pub fn workspace_for(config: &Config, agent_id: &str, data_dir: &Path) -> PathBuf {
    let agents = &config.agents;
    if let Some(path) = agents.entry(agent_id).and_then(|a| a.workspace.as_deref()) {
        return expand_home(path);
    }
    let defaults = agents.defaults.workspace.as_deref().map(expand_home);
    match defaults {
        _ if agent_id == agents.default_agent_id() => {
            defaults.unwrap_or_else(|| data_dir.join("workspace"))
        }
        Some(root) => root.join(agent_id),
        None => data_dir.join(format!("workspace-{agent_id}")),
    }
}

/// `~/…` under `$HOME` (config paths are written that way).
pub fn expand_home(path: &Path) -> PathBuf {
    match (path.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => path.to_path_buf(),
    }
}

/// Counts and settings for `memory status`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStatus {
    pub agent_id: String,
    pub workspace: String,
    pub files: u64,
    pub chunks: u64,
    pub vectors: u64,
    /// `Embedder::key()`, absent in keyword-only mode.
    pub model: Option<String>,
    pub model_loaded: bool,
    pub mode: SearchMode,
    pub keyword_only_reason: Option<String>,
    pub chunk_tokens: usize,
    pub chunk_overlap_tokens: usize,
    /// Set when the configured chunk size was lowered to the model's sequence length.
    pub chunk_tokens_note: Option<String>,
    pub embed_cache_entries: u64,
    /// Bytes of the whole LMDB data file (memory shares it with the rest of the store).
    pub store_file_bytes: u64,
    pub last_sync_ms: Option<u64>,
    pub last_sync: Option<SyncReport>,
}

/// Memory search for one agent.
pub struct MemoryService {
    store: Store,
    agent_id: String,
    workspace: PathBuf,
    settings: ResolvedMemorySearch,
    embedder: Option<Arc<dyn Embedder>>,
    keyword_only_reason: Option<String>,
    limits: ChunkLimits,
    sync_gate: Mutex<Option<(u64, SyncReport)>>,
    /// What the last sync saw and which sessions searched (`sync.onSearch`, `sync.onSessionStart`).
    freshness: freshness::Freshness,
}

impl std::fmt::Debug for MemoryService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryService")
            .field("agent_id", &self.agent_id)
            .field("workspace", &self.workspace)
            .field(
                "model",
                &self.embedder.as_ref().map(|e| e.key().to_string()),
            )
            .finish()
    }
}

/// Meta key holding the last sync of an agent (JSON: `atMs`, `report`).
fn last_sync_key(agent_id: &str) -> String {
    format!("memory_last_sync:{agent_id}")
}

impl MemoryService {
    /// A service over `workspace` for `agent_id`. `embedder` is the local model or why there is none.
    pub fn new(
        store: Store,
        agent_id: &str,
        workspace: PathBuf,
        settings: ResolvedMemorySearch,
        embedder: Result<Arc<dyn Embedder>, String>,
    ) -> MemoryService {
        let (embedder, keyword_only_reason) = match embedder {
            Ok(embedder) => (Some(embedder), None),
            Err(reason) => {
                log::warn!("memory: keyword-only search for agent {agent_id}: {reason}");
                (None, Some(reason))
            }
        };
        let limits = ChunkLimits::for_model(
            settings.chunk_tokens,
            settings.chunk_overlap_tokens,
            embedder.as_deref(),
        );
        MemoryService {
            store,
            agent_id: agent_id.to_string(),
            workspace,
            settings,
            embedder,
            keyword_only_reason,
            limits,
            sync_gate: Mutex::new(None),
            freshness: freshness::Freshness::default(),
        }
    }

    pub fn agent_id(&self) -> &str {
        &self.agent_id
    }

    pub fn settings(&self) -> &ResolvedMemorySearch {
        &self.settings
    }

    /// The workspace whose memory files this service indexes.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// The memory files as they are on disk now.
    pub fn files(&self) -> Vec<MemoryFile> {
        discovery::discover(&self.workspace, &self.settings.extra_paths)
    }

    /// Brings the index in line with the files (`force`: re-index every file). One sync at a time.
    pub fn sync(
        &self,
        force: bool,
        progress: &mut dyn FnMut(SyncProgress),
    ) -> Result<SyncReport, MemoryError> {
        if !self.settings.enabled {
            return Err(MemoryError::Disabled);
        }
        let mut last = self.sync_gate.lock();
        let session_sources = if self.settings.sources.contains(&MemorySource::Sessions) {
            sessions::agent_sessions(&self.store, &self.agent_id)?
        } else {
            Vec::new()
        };
        let indexer = index::Indexer {
            store: &self.store,
            scope: &self.agent_id,
            embedder: self.embedder.as_deref(),
            limits: self.limits,
            sessions: &session_sources,
            session_deltas: sessions::SessionDeltas {
                bytes: self.settings.session_delta_bytes,
                messages: self.settings.session_delta_messages,
            },
            cache_enabled: self.settings.cache_enabled,
            cache_max_entries: self.settings.cache_max_entries,
        };
        // Taken first: a file changed while this sync runs then counts as a change.
        let seen = watch::fingerprint(self);
        let files = self.files();
        let report = indexer.sync(&files, force, progress)?;
        self.freshness.record(seen);
        if report.files_indexed + report.files_removed > 0 {
            log::info!(
                "memory: agent {} synced: {} of {} files indexed, {} removed, {} chunks ({} embedded)",
                self.agent_id,
                report.files_indexed,
                report.files_seen,
                report.files_removed,
                report.chunks_written,
                report.chunks_embedded
            );
        }
        let at = now_ms();
        let record = serde_json::json!({ "atMs": at, "report": report });
        // Status in another process (the CLI beside the gateway) reads the last sync from the store.
        if let Err(error) = self.store.put_meta(
            &last_sync_key(&self.agent_id),
            record.to_string().as_bytes(),
        ) {
            log::warn!("memory: cannot record the last sync: {error}");
        }
        *last = Some((at, report.clone()));
        drop(last);
        crate::system::status::changed();
        Ok(report)
    }

    /// Syncs unless this service has synced already (waits for a sync that is running).
    pub fn ensure_synced(&self) -> Result<(), MemoryError> {
        let synced = self.sync_gate.lock().is_some();
        if !synced && self.settings.enabled {
            self.sync(false, &mut |_| {})?;
        }
        Ok(())
    }

    /// Before a search: the first sync of this process (as `ensure_synced`), else a sync when the memory
    /// files changed since the last one and `sync.onSearch` is on, or this is the first search of
    /// `session_key` and `sync.onSessionStart` is on.
    pub fn before_search(&self, session_key: Option<&str>) -> Result<(), MemoryError> {
        if !self.settings.enabled {
            return Ok(());
        }
        let first_in_session = self.settings.sync_on_session_start
            && session_key.is_some_and(|key| self.freshness.claim_session(key));
        if self.sync_gate.lock().is_none() {
            return self.ensure_synced();
        }
        if (self.settings.sync_on_search || first_in_session)
            && self.freshness.is_dirty(&watch::fingerprint(self))
        {
            self.sync(false, &mut |_| {})?;
        }
        Ok(())
    }

    /// Search options from the config, with the per-call overrides of the tool.
    pub fn search_options(
        &self,
        max_results: Option<usize>,
        min_score: Option<f32>,
    ) -> SearchOptions {
        let s = &self.settings;
        SearchOptions {
            max_results: max_results.unwrap_or(s.max_results as usize).max(1),
            min_score: min_score.unwrap_or(s.min_score as f32),
            vector_weight: s.vector_weight as f32,
            text_weight: s.text_weight as f32,
            candidate_multiplier: s.candidate_multiplier as usize,
            mode: if s.hybrid_enabled {
                SearchMode::Hybrid
            } else {
                SearchMode::Vector
            },
            mmr_lambda: s.mmr_enabled.then_some(s.mmr_lambda as f32),
            temporal_half_life_days: s
                .temporal_decay_enabled
                .then_some(s.temporal_half_life_days as f32),
            now_ms: now_ms(),
        }
    }

    /// Searches with explicit options.
    pub fn search_with(
        &self,
        query: &str,
        options: &SearchOptions,
    ) -> Result<SearchOutcome, MemoryError> {
        if !self.settings.enabled {
            return Err(MemoryError::Disabled);
        }
        search::search(
            &self.store,
            &self.agent_id,
            self.embedder.as_deref(),
            self.keyword_only_reason.as_deref(),
            query,
            options,
        )
    }

    /// Searches with the configured options.
    pub fn search(&self, query: &str) -> Result<SearchOutcome, MemoryError> {
        self.search_with(query, &self.search_options(None, None))
    }

    fn recorded_last_sync(&self) -> Option<(u64, SyncReport)> {
        let bytes = self.store.meta(&last_sync_key(&self.agent_id)).ok()??;
        let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        let report = serde_json::from_value(value.get("report")?.clone()).ok()?;
        Some((value.get("atMs")?.as_u64()?, report))
    }

    /// Index counts, model and settings.
    pub fn status(&self) -> Result<MemoryStatus, MemoryError> {
        let stats = self.store.memory_stats(&self.agent_id)?;
        let last = self
            .sync_gate
            .try_lock()
            .and_then(|guard| guard.clone())
            .or_else(|| self.recorded_last_sync());
        let note = self.limits.clamped.then(|| {
            format!(
                "chunking.tokens {} lowered to {} (the model's maximum sequence length)",
                self.settings.chunk_tokens, self.limits.max_tokens
            )
        });
        Ok(MemoryStatus {
            agent_id: self.agent_id.clone(),
            workspace: self.workspace.display().to_string(),
            files: stats.files,
            chunks: stats.chunks,
            vectors: stats.vectors,
            model: self.embedder.as_ref().map(|e| e.key().to_string()),
            model_loaded: self.embedder.as_ref().is_some_and(|e| e.is_loaded()),
            mode: if self.embedder.is_some() {
                SearchMode::Hybrid
            } else {
                SearchMode::Keyword
            },
            keyword_only_reason: self.keyword_only_reason.clone(),
            chunk_tokens: self.limits.max_tokens,
            chunk_overlap_tokens: self.limits.overlap_tokens,
            chunk_tokens_note: note,
            embed_cache_entries: self.store.embed_cache_len()?,
            store_file_bytes: self.store.stats()?.file_bytes,
            last_sync_ms: last.as_ref().map(|(at, _)| *at),
            last_sync: last.map(|(_, report)| report),
        })
    }

    /// Lines `from..from+lines` (1-based) of a memory file; only indexed-or-discoverable memory files.
    pub fn read_lines(
        &self,
        path: &str,
        from: usize,
        lines: Option<usize>,
    ) -> Result<(String, usize, usize), MemoryError> {
        tools::read_memory_lines(&self.files(), path, from, lines)
    }
}

#[cfg(test)]
mod workspace_tests {
    use super::*;

    fn config(json: serde_json::Value) -> Config {
        serde_json::from_value(json).expect("config")
    }

    #[test]
    fn each_agent_gets_upstreams_workspace() {
        let data = Path::new("/data");
        let plain = config(serde_json::json!({"agents": {"list": [
            {"id": "main", "default": true}, {"id": "ops"},
            {"id": "own", "workspace": "/srv/own"}]}}));
        assert_eq!(workspace_for(&plain, "main", data), data.join("workspace"));
        assert_eq!(
            workspace_for(&plain, "ops", data),
            data.join("workspace-ops")
        );
        assert_eq!(
            workspace_for(&plain, "own", data),
            PathBuf::from("/srv/own")
        );
        let rooted = config(serde_json::json!({"agents": {
            "defaults": {"workspace": "/srv/ws"},
            "list": [{"id": "main", "default": true}, {"id": "ops"}]}}));
        assert_eq!(
            workspace_for(&rooted, "main", data),
            PathBuf::from("/srv/ws")
        );
        assert_eq!(
            workspace_for(&rooted, "ops", data),
            PathBuf::from("/srv/ws/ops")
        );
    }
}
