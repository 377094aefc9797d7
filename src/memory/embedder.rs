//! Text embeddings: the `Embedder` trait the index and search depend on, and its local implementation on
//! ONNX Runtime through `ort` (loaded dynamically from a shared library, never downloaded).
//!
//! The ONNX model is loaded on first use and dropped after an idle period so its memory returns to the OS;
//! the tokenizer (a few MB) stays loaded to measure chunks. Session options are tuned for small boards (see
//! `onnx`): no constant folding, CPU memory arena and memory pattern off, intra-op threads and batch size from
//! the board profile, sequence length capped, long inputs batched alone. Every
//! call blocks: callers on the async runtime use `spawn_blocking`. On 32-bit ARM (no ONNX Runtime exists)
//! this file has no local embedder and memory search is keyword-only.
//!
//! This is the one place that reads `PINCER_ORT_DYLIB` / `PINCER_EMBED_MODEL_DIR`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::memory::chunker::TokenCounter;

/// Environment variable naming the ONNX Runtime shared library (tests and development trees).
pub const ORT_DYLIB_ENV: &str = "PINCER_ORT_DYLIB";
/// Environment variable naming the embedding model directory.
pub const EMBED_MODEL_DIR_ENV: &str = "PINCER_EMBED_MODEL_DIR";
/// Where the appliance image installs the ONNX Runtime library.
pub const DEFAULT_ORT_DYLIB: &str = "/usr/lib/pincer/libonnxruntime.so.1.31.1";
/// Where the appliance image installs the default model (all-MiniLM-L6-v2, int8).
pub const DEFAULT_EMBED_MODEL_DIR: &str = "/usr/share/pincer/models/all-MiniLM-L6-v2";
/// Default longest input the model sees, in tokens (all-MiniLM-L6-v2 was trained on 256).
pub const DEFAULT_MAX_SEQUENCE_TOKENS: usize = 256;
/// Default idle period after which the model is dropped: 5 minutes.
pub const DEFAULT_IDLE_UNLOAD: Duration = Duration::from_secs(300);
/// Special tokens the model adds around every input ([CLS] and [SEP]).
pub const SPECIAL_TOKENS_PER_INPUT: usize = 2;

/// Why embedding failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("local embeddings are unavailable on this platform (no ONNX Runtime for 32-bit ARM): keyword-only search")]
    Unsupported,
    #[error("ONNX Runtime library not found at {path} (set {ORT_DYLIB_ENV} or install it there; `scripts/setup memory` fetches it)")]
    RuntimeMissing { path: PathBuf },
    #[error("cannot load ONNX Runtime from {path}: {reason}")]
    RuntimeLoad { path: PathBuf, reason: String },
    #[error("embedding model file {path} is missing or unreadable: {reason} (`scripts/setup memory` installs the default model)")]
    ModelFile { path: PathBuf, reason: String },
    #[error("cannot load the embedding model from {dir}: {reason}")]
    ModelLoad { dir: PathBuf, reason: String },
    #[error("embedding inference failed: {0}")]
    Inference(String),
}

/// Turns text into vectors. `key()` names model + dimension so vectors of different models never mix.
pub trait Embedder: Send + Sync {
    /// Model identity and dimension, e.g. `all-MiniLM-L6-v2:384`.
    fn key(&self) -> &str;
    fn dimensions(&self) -> usize;
    /// Longest input in model tokens, special tokens excluded.
    fn max_input_tokens(&self) -> usize;
    /// Model tokens in `text`, special tokens excluded.
    fn count_tokens(&self, text: &str) -> usize;
    /// One vector per text, in order (one inference batch).
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Largest batch this embedder should be given.
    fn batch_size(&self) -> usize;
    /// `embed` in batches of `batch_size()`.
    fn embed_batched(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.batch_size().max(1)) {
            out.extend(self.embed(batch)?);
        }
        Ok(out)
    }
    /// Texts embedded so far (each one is one inference row).
    fn inferences(&self) -> u64;
    /// Whether the model is in memory now.
    fn is_loaded(&self) -> bool;
}

impl<E: Embedder + ?Sized> TokenCounter for E {
    fn count_tokens(&self, text: &str) -> usize {
        Embedder::count_tokens(self, text)
    }
}

/// Where the runtime and model are and how to run them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EmbedderSettings {
    pub runtime_library: PathBuf,
    pub model_dir: PathBuf,
    pub intra_threads: usize,
    pub batch_size: usize,
    pub max_sequence_tokens: usize,
    pub idle_unload: Duration,
}

impl EmbedderSettings {
    /// Settings from the config's `local.modelPath` (else `$PINCER_EMBED_MODEL_DIR`, else the platform
    /// default), the runtime from `$PINCER_ORT_DYLIB` (else the platform default), threads and batch from the
    /// board profile.
    pub fn resolve(
        local_model_path: Option<&str>,
        board: &crate::system::board::EmbedderProfile,
    ) -> EmbedderSettings {
        let env_path = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let model_dir = local_model_path
            .map(PathBuf::from)
            .or_else(|| env_path(EMBED_MODEL_DIR_ENV).map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_EMBED_MODEL_DIR));
        let runtime_library = env_path(ORT_DYLIB_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_ORT_DYLIB));
        EmbedderSettings {
            runtime_library,
            model_dir,
            intra_threads: board.threads.max(1),
            batch_size: board.batch.max(1),
            max_sequence_tokens: DEFAULT_MAX_SEQUENCE_TOKENS,
            idle_unload: DEFAULT_IDLE_UNLOAD,
        }
    }
}

/// Reads `name` from the model directory, with a precise error.
pub(crate) fn read_model_file(dir: &Path, name: &str) -> Result<Vec<u8>, EmbedError> {
    let path = dir.join(name);
    std::fs::read(&path).map_err(|e| EmbedError::ModelFile {
        path,
        reason: e.to_string(),
    })
}

/// The model's output dimension and position limit from its `config.json`.
pub(crate) fn model_shape(dir: &Path) -> Result<(usize, usize), EmbedError> {
    let bytes = read_model_file(dir, "config.json")?;
    let config: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| EmbedError::ModelFile {
            path: dir.join("config.json"),
            reason: e.to_string(),
        })?;
    let field = |name: &str| config.get(name).and_then(serde_json::Value::as_u64);
    let dims = field("hidden_size").ok_or_else(|| EmbedError::ModelFile {
        path: dir.join("config.json"),
        reason: "no hidden_size".into(),
    })?;
    let positions = field("max_position_embeddings").unwrap_or(512);
    Ok((dims as usize, positions as usize))
}

#[cfg(not(target_arch = "arm"))]
pub use super::onnx::OnnxEmbedder;

/// Opens the local embedder, or says why there is none (then search is keyword-only).
#[cfg(not(target_arch = "arm"))]
pub fn open_local(settings: EmbedderSettings) -> Result<std::sync::Arc<dyn Embedder>, EmbedError> {
    let embedder: std::sync::Arc<dyn Embedder> = OnnxEmbedder::open(settings)?;
    Ok(embedder)
}

/// Opens the local embedder, or says why there is none (then search is keyword-only).
#[cfg(target_arch = "arm")]
pub fn open_local(_settings: EmbedderSettings) -> Result<std::sync::Arc<dyn Embedder>, EmbedError> {
    Err(EmbedError::Unsupported)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::board::EmbedderProfile;

    #[test]
    fn configured_model_path_wins_and_board_sets_threads_and_batch() {
        let board = EmbedderProfile {
            threads: 1,
            batch: 4,
        };
        let settings = EmbedderSettings::resolve(Some("/models/multilingual"), &board);
        assert_eq!(settings.model_dir, PathBuf::from("/models/multilingual"));
        assert_eq!((settings.intra_threads, settings.batch_size), (1, 4));
        assert_eq!(settings.idle_unload, Duration::from_secs(300));
    }

    #[test]
    fn missing_model_config_names_the_file() {
        let dir = tempfile::tempdir().expect("dir");
        let error = model_shape(dir.path()).expect_err("no config");
        assert!(error.to_string().contains("config.json"), "{error}");
    }
}
