//! The local embedder: a sentence-embedding ONNX model (BERT-style inputs, mean pooling, L2-normalised) on
//! ONNX Runtime, loaded dynamically with `ort` from a shared library path (an error, never a panic or a
//! download, when it is missing), tokenized with the model's own `tokenizer.json` (`tokenizer.rs`).
//!
//! [`OnnxEmbedder`] runs the model in this process (`session.rs`): loaded on first `embed`, dropped by a
//! small reaper thread once idle for `idle_unload` (the tokenizer with it), reloaded on the next call. The
//! gateway runs the model in a child process instead (`memory::worker`), which takes the runtime's memory
//! with it when it exits; this type is what that child runs, and what library users and tests get.
//! This file must not know about chunks, storage or scoring.

mod session;
mod tokenizer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use super::embedder::{
    model_shape, EmbedError, Embedder, EmbedderSettings, SPECIAL_TOKENS_PER_INPUT,
};
pub(crate) use session::OnnxModel;
pub(crate) use tokenizer::{Encoded, TokenizerSlot};

/// Shortest and longest wait of the idle reaper between checks.
const REAPER_MIN_TICK: Duration = Duration::from_millis(50);
const REAPER_MAX_TICK: Duration = Duration::from_secs(30);

/// What the model directory says about the model, checked before anything is loaded.
#[derive(Clone, Debug)]
pub(crate) struct ModelInfo {
    /// Model identity and dimension, e.g. `all-MiniLM-L6-v2:384`.
    pub key: String,
    pub dimensions: usize,
    /// Longest input in tokens, special tokens included.
    pub max_sequence_tokens: usize,
}

impl ModelInfo {
    /// Checks that the runtime library and the model files are there and reads the model's shape.
    pub(crate) fn check(settings: &EmbedderSettings) -> Result<ModelInfo, EmbedError> {
        if !settings.runtime_library.exists() {
            return Err(EmbedError::RuntimeMissing {
                path: settings.runtime_library.clone(),
            });
        }
        let dir = &settings.model_dir;
        let (dimensions, positions) = model_shape(dir)?;
        for name in ["model.onnx", "tokenizer.json"] {
            if !dir.join(name).is_file() {
                return Err(EmbedError::ModelFile {
                    path: dir.join(name),
                    reason: "not found".into(),
                });
            }
        }
        let name = dir
            .file_name()
            .map_or_else(|| "model".to_string(), |n| n.to_string_lossy().into_owned());
        Ok(ModelInfo {
            key: format!("{name}:{dimensions}"),
            dimensions,
            max_sequence_tokens: settings.max_sequence_tokens.min(positions).max(8),
        })
    }
}

/// Something an idle reaper checks now and then.
pub(crate) trait IdleReap: Send + Sync + 'static {
    /// How long it may stay unused.
    fn idle_period(&self) -> Duration;
    /// Drops what was unused for its idle period.
    fn reap(&self);
}

/// A thread that calls `reap` a few times per idle period until `target` is gone.
pub(crate) fn spawn_idle_reaper<T: IdleReap>(target: Weak<T>, name: &str) {
    let tick = target.upgrade().map_or(REAPER_MAX_TICK, |t| {
        (t.idle_period() / 4).clamp(REAPER_MIN_TICK, REAPER_MAX_TICK)
    });
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || loop {
            std::thread::sleep(tick);
            match target.upgrade() {
                Some(target) => target.reap(),
                None => return,
            }
        });
    if let Err(error) = spawned {
        log::warn!("memory: no idle reaper thread ({error}); what it loads stays loaded");
    }
}

/// ONNX Runtime session + tokenizer in this process, lazily loaded, dropped when idle.
pub struct OnnxEmbedder {
    settings: EmbedderSettings,
    info: ModelInfo,
    tokenizer: TokenizerSlot,
    model: Mutex<OnnxModel>,
    inferences: AtomicU64,
}

impl OnnxEmbedder {
    /// Checks that the runtime library and the model files are there and starts the idle reaper. Nothing
    /// heavy happens here (a gateway with memory search but no notes stays small): the tokenizer is read
    /// on first use, ONNX Runtime and the model on the first `embed`.
    pub fn open(settings: EmbedderSettings) -> Result<Arc<OnnxEmbedder>, EmbedError> {
        let info = ModelInfo::check(&settings)?;
        let embedder = Arc::new(OnnxEmbedder {
            tokenizer: TokenizerSlot::new(&settings.model_dir),
            model: Mutex::new(OnnxModel::new(settings.clone(), info.key.clone())),
            settings,
            info,
            inferences: AtomicU64::new(0),
        });
        spawn_idle_reaper(Arc::downgrade(&embedder), "memory-embed-reaper");
        Ok(embedder)
    }

    /// How many times the model has been loaded (first use and every reload after an idle unload).
    pub fn loads(&self) -> u64 {
        self.model.lock().loads()
    }

    /// Drops the model (and the tokenizer) if unused for `idle_unload`; returns whether the model went.
    pub fn unload_if_idle(&self) -> bool {
        self.tokenizer.drop_if_idle(self.settings.idle_unload);
        self.model.lock().unload_if_idle(self.settings.idle_unload)
    }

    /// Token ids of each text, cut to the model's sequence length.
    fn encode(&self, texts: &[&str]) -> Result<Vec<Encoded>, EmbedError> {
        let tokenizer = self.tokenizer.get()?;
        texts
            .iter()
            .map(|text| tokenizer.encode_for_model(text, self.info.max_sequence_tokens))
            .collect()
    }
}

impl IdleReap for OnnxEmbedder {
    fn idle_period(&self) -> Duration {
        self.settings.idle_unload
    }

    fn reap(&self) {
        self.unload_if_idle();
    }
}

impl Embedder for OnnxEmbedder {
    fn key(&self) -> &str {
        &self.info.key
    }

    fn dimensions(&self) -> usize {
        self.info.dimensions
    }

    fn max_input_tokens(&self) -> usize {
        self.info.max_sequence_tokens - SPECIAL_TOKENS_PER_INPUT
    }

    fn count_tokens(&self, text: &str) -> usize {
        // A text the tokenizer refuses is measured generously so it still gets split.
        self.tokenizer
            .get()
            .map_or(text.len(), |tokenizer| tokenizer.count(text))
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encoded = self.encode(texts)?;
        let vectors = self.model.lock().embed(&encoded)?;
        self.inferences
            .fetch_add(texts.len() as u64, Ordering::Relaxed);
        Ok(vectors)
    }

    fn batch_size(&self) -> usize {
        self.settings.batch_size
    }

    fn inferences(&self) -> u64 {
        self.inferences.load(Ordering::Relaxed)
    }

    fn is_loaded(&self) -> bool {
        self.model.lock().is_loaded()
    }
}
