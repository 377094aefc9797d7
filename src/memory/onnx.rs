//! The local embedder: fastembed's user-defined model on ONNX Runtime, loaded dynamically with `ort` from a
//! shared library path (an error, never a panic or a download, when it is missing).
//!
//! Owns the model's lifecycle: loaded on first `embed`, dropped by a small reaper thread once idle for
//! `idle_unload`, reloaded on the next call. This file must not know about chunks, storage or scoring.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use fastembed::{
    InitOptionsUserDefined, Pooling, QuantizationMode, TextEmbedding, TokenizerFiles,
    UserDefinedEmbeddingModel,
};

use super::embedder::{
    model_shape, read_model_file, EmbedError, Embedder, EmbedderSettings, SPECIAL_TOKENS_PER_INPUT,
};

/// Shortest and longest wait of the idle reaper between checks.
const REAPER_MIN_TICK: Duration = Duration::from_millis(50);
const REAPER_MAX_TICK: Duration = Duration::from_secs(30);

/// ONNX Runtime may be initialised once per process; the first library path wins.
static ORT_ENVIRONMENT: OnceLock<Result<ort::environment::Environment, String>> = OnceLock::new();

fn ort_environment(library: &PathBuf) -> Result<ort::environment::Environment, EmbedError> {
    if !library.exists() {
        return Err(EmbedError::RuntimeMissing {
            path: library.clone(),
        });
    }
    ORT_ENVIRONMENT
        .get_or_init(|| {
            ort::init_from(library)
                .map_err(|e| e.to_string())?
                .with_name("pincer-memory")
                .build()
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|reason| EmbedError::RuntimeLoad {
            path: library.clone(),
            reason,
        })
}

struct LoadedModel {
    embedding: TextEmbedding,
    last_used: Instant,
}

/// fastembed + ONNX Runtime, lazily loaded, dropped when idle.
pub struct OnnxEmbedder {
    settings: EmbedderSettings,
    key: String,
    dimensions: usize,
    max_sequence_tokens: usize,
    tokenizer: tokenizers::Tokenizer,
    model: Mutex<Option<LoadedModel>>,
    inferences: AtomicU64,
    loads: AtomicU64,
}

impl OnnxEmbedder {
    /// Checks the runtime library and the model directory, loads the tokenizer, and starts the idle reaper.
    /// The ONNX model itself is loaded on the first `embed`.
    pub fn open(settings: EmbedderSettings) -> Result<Arc<OnnxEmbedder>, EmbedError> {
        ort_environment(&settings.runtime_library)?;
        let dir = settings.model_dir.clone();
        let (dimensions, positions) = model_shape(&dir)?;
        let onnx = dir.join("model.onnx");
        if !onnx.is_file() {
            return Err(EmbedError::ModelFile {
                path: onnx,
                reason: "not found".into(),
            });
        }
        let mut tokenizer =
            tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).map_err(|e| {
                EmbedError::ModelFile {
                    path: dir.join("tokenizer.json"),
                    reason: e.to_string(),
                }
            })?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| EmbedError::ModelLoad {
                dir: dir.clone(),
                reason: e.to_string(),
            })?;
        let name = dir
            .file_name()
            .map_or_else(|| "model".to_string(), |n| n.to_string_lossy().into_owned());
        let max_sequence_tokens = settings.max_sequence_tokens.min(positions).max(8);
        let embedder = Arc::new(OnnxEmbedder {
            key: format!("{name}:{dimensions}"),
            dimensions,
            max_sequence_tokens,
            tokenizer,
            settings,
            model: Mutex::new(None),
            inferences: AtomicU64::new(0),
            loads: AtomicU64::new(0),
        });
        spawn_idle_reaper(Arc::downgrade(&embedder));
        Ok(embedder)
    }

    /// How many times the model has been loaded (first use and every reload after an idle unload).
    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }

    /// Drops the model if unused for `idle_unload`; returns whether it did.
    pub fn unload_if_idle(&self) -> bool {
        let mut model = self.model.lock().unwrap_or_else(PoisonError::into_inner);
        let idle = model
            .as_ref()
            .is_some_and(|m| m.last_used.elapsed() >= self.settings.idle_unload);
        if idle {
            *model = None;
            release_freed_memory();
            log::info!("memory: embedding model unloaded after idle period");
        }
        idle
    }

    fn load(&self) -> Result<TextEmbedding, EmbedError> {
        let dir = &self.settings.model_dir;
        let model_error = |reason: String| EmbedError::ModelLoad {
            dir: dir.clone(),
            reason,
        };
        let files = TokenizerFiles {
            tokenizer_file: read_model_file(dir, "tokenizer.json")?,
            config_file: read_model_file(dir, "config.json")?,
            special_tokens_map_file: read_model_file(dir, "special_tokens_map.json")?,
            tokenizer_config_file: read_model_file(dir, "tokenizer_config.json")?,
        };
        let model = UserDefinedEmbeddingModel::new(read_model_file(dir, "model.onnx")?, files)
            .with_pooling(Pooling::Mean)
            .with_quantization(QuantizationMode::Static);
        let mut options = InitOptionsUserDefined::new()
            .with_max_length(self.max_sequence_tokens)
            .with_execution_providers(vec![ort::ep::CPU::default()
                .with_arena_allocator(false)
                .build()]);
        options.environment = Some(ort_environment(&self.settings.runtime_library)?);
        options.intra_threads = Some(self.settings.intra_threads);

        let started = Instant::now();
        let embedding = TextEmbedding::try_new_from_user_defined(model, options)
            .map_err(|e| model_error(e.to_string()))?;
        // Graph optimisation leaves large freed buffers behind; return them before inference starts.
        release_freed_memory();
        self.loads.fetch_add(1, Ordering::Relaxed);
        log::info!(
            "memory: embedding model {} loaded in {} ms",
            self.key,
            started.elapsed().as_millis()
        );
        Ok(embedding)
    }
}

/// Hands freed heap pages back to the OS (glibc keeps them otherwise), so the unload shows in RSS.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory at the top of glibc's heaps; no pointers are affected.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn spawn_idle_reaper(embedder: Weak<OnnxEmbedder>) {
    let tick = embedder.upgrade().map_or(REAPER_MAX_TICK, |e| {
        (e.settings.idle_unload / 4).clamp(REAPER_MIN_TICK, REAPER_MAX_TICK)
    });
    let spawned = std::thread::Builder::new()
        .name("memory-embed-reaper".into())
        .spawn(move || loop {
            std::thread::sleep(tick);
            match embedder.upgrade() {
                Some(embedder) => {
                    embedder.unload_if_idle();
                }
                None => return,
            }
        });
    if let Err(error) = spawned {
        log::warn!("memory: no idle reaper thread ({error}); the model stays loaded");
    }
}

impl Embedder for OnnxEmbedder {
    fn key(&self) -> &str {
        &self.key
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    fn max_input_tokens(&self) -> usize {
        self.max_sequence_tokens - SPECIAL_TOKENS_PER_INPUT
    }

    fn count_tokens(&self, text: &str) -> usize {
        match self.tokenizer.encode(text, false) {
            Ok(encoding) => encoding.len(),
            // A text the tokenizer refuses is measured generously so it still gets split.
            Err(_) => text.len(),
        }
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let mut slot = self.model.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(LoadedModel {
                embedding: self.load()?,
                last_used: Instant::now(),
            });
        }
        let loaded = slot.as_mut().expect("model was just loaded");
        let vectors = loaded
            .embedding
            .embed(texts, Some(self.settings.batch_size))
            .map_err(|e| EmbedError::Inference(e.to_string()))?;
        loaded.last_used = Instant::now();
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
        self.model
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }
}
