//! The local embedder: a sentence-embedding ONNX model (BERT-style inputs, mean pooling, L2-normalised) on
//! ONNX Runtime, loaded dynamically with `ort` from a shared library path (an error, never a panic or a
//! download, when it is missing), tokenized with the model's own `tokenizer.json`: by the compact
//! `wordpiece` tokenizer when the file describes a BERT WordPiece one (a few hundred KB instead of the
//! `tokenizers` crate's ~10 MiB), else by `tokenizers` (e.g. a multilingual SentencePiece model) when pincer
//! is built with the non-default `hf-tokenizers` feature; without it such a file is refused with a clear error.
//!
//! Owns the model's lifecycle and its memory: loaded on first `embed`, dropped by a small reaper thread once
//! idle for `idle_unload`, reloaded on the next call. The session is built for small boards, measured with
//! `examples/ort_probe.rs`: graph optimisation off (level 1 and up constant-fold the int8 model's weights into
//! ~90 MB of float32), CPU memory arena and memory pattern off, one inter-op thread, intra-op threads from the
//! board profile, the model read by ONNX Runtime from its file: its weights sit in `model.onnx.data` (external
//! data, written by `scripts/setup`), which the runtime maps instead of copying, so they are clean file pages.
//! Once a loaded model has run, the runtime library's pages go back to the kernel: loading touches most of
//! the library, inference a third of it. A batch is split further so that batch × sequence² stays within one
//! full-length input (attention activations grow with the square), and freed heap pages are returned after
//! every call.
//! This file must not know about chunks, storage or scoring.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use ort::value::Tensor;
use parking_lot::Mutex;

use super::embedder::{
    model_shape, EmbedError, Embedder, EmbedderSettings, DEFAULT_MAX_SEQUENCE_TOKENS,
    SPECIAL_TOKENS_PER_INPUT,
};
use super::wordpiece::{WordPieceError, WordPieceTokenizer};
use crate::system::mapped_files::{self, Advice};

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

/// Most attention cells (batch × sequence²) one inference may hold: one input of the default maximum length.
const MAX_ATTENTION_CELLS: usize = DEFAULT_MAX_SEQUENCE_TOKENS * DEFAULT_MAX_SEQUENCE_TOKENS;
/// Most padded tokens (batch × sequence) one inference may hold. Without a memory arena or plan the runtime
/// allocates every intermediate per inference, about 45 KiB per token in flight (measured: a batch of 8 notes of
/// ~30 tokens swung anonymous memory by 11 MiB, one note by 5 MiB); half a maximum-length input's worth keeps that
/// swing to a few MiB while short notes still share a batch.
const MAX_BATCH_TOKENS: usize = DEFAULT_MAX_SEQUENCE_TOKENS / 2;
/// Heap blocks from this size up are mapped and unmapped on their own (glibc), so the freed activations of
/// one inference leave RSS at once instead of lingering in the heap.
const MMAP_THRESHOLD_BYTES: i32 = 128 * 1024;
/// ONNX Runtime session config key listing optimizers to skip.
const DISABLED_OPTIMIZERS_KEY: &str = "optimization.disable_specified_optimizers";
/// The padding token id of BERT vocabularies (`[PAD]`).
const PAD_TOKEN_ID: i64 = 0;

struct LoadedModel {
    session: Session,
    needs_token_types: bool,
    last_used: Instant,
    /// Whether the runtime's start-up code was handed back after the first inference.
    cold_code_reclaimed: bool,
}

/// One tokenized input, truncated to the model's sequence length.
struct Encoded {
    ids: Vec<i64>,
    type_ids: Vec<i64>,
}

/// The model's tokenizer, never padding or truncating: the compact WordPiece one when `tokenizer.json`
/// describes exactly what it implements, else the `tokenizers` crate's (`hf-tokenizers` feature).
pub(crate) enum ModelTokenizer {
    WordPiece(WordPieceTokenizer),
    #[cfg(feature = "hf-tokenizers")]
    Hugging(Box<tokenizers::Tokenizer>),
}

impl ModelTokenizer {
    /// Reads `path`, choosing the tokenizer (see the type comment).
    pub(crate) fn load(path: &Path) -> Result<ModelTokenizer, String> {
        let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
        let refused = match WordPieceTokenizer::from_json(&bytes) {
            Ok(wordpiece) => return Ok(ModelTokenizer::WordPiece(wordpiece)),
            Err(refused) => refused,
        };
        Self::load_other(path, &bytes, &refused)
    }

    /// A `tokenizer.json` the compact WordPiece tokenizer refused, read by the `tokenizers` crate.
    #[cfg(feature = "hf-tokenizers")]
    fn load_other(
        path: &Path,
        bytes: &[u8],
        refused: &WordPieceError,
    ) -> Result<ModelTokenizer, String> {
        log::info!(
            "memory: {} read by the tokenizers crate ({refused})",
            path.display()
        );
        let mut tokenizer = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| e.to_string())?;
        tokenizer.with_padding(None);
        tokenizer.with_truncation(None).map_err(|e| e.to_string())?;
        Ok(ModelTokenizer::Hugging(Box::new(tokenizer)))
    }

    /// Without the `tokenizers` crate, a `tokenizer.json` the compact WordPiece tokenizer refused is an error
    /// naming the file, why it was refused and the feature that reads it.
    #[cfg(not(feature = "hf-tokenizers"))]
    fn load_other(
        path: &Path,
        _bytes: &[u8],
        refused: &WordPieceError,
    ) -> Result<ModelTokenizer, String> {
        Err(format!(
            "{} is not a BERT WordPiece tokenizer ({refused}); this pincer reads only those: \
             build it with the `hf-tokenizers` feature to read other tokenizer.json files",
            path.display()
        ))
    }

    /// Token ids and type ids of `text`, with the special tokens when `add_special_tokens`.
    fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Encoded, String> {
        match self {
            ModelTokenizer::WordPiece(wordpiece) => {
                let ids: Vec<i64> = wordpiece
                    .encode(text, add_special_tokens)
                    .into_iter()
                    .map(i64::from)
                    .collect();
                let type_ids = vec![0; ids.len()];
                Ok(Encoded { ids, type_ids })
            }
            #[cfg(feature = "hf-tokenizers")]
            ModelTokenizer::Hugging(tokenizer) => {
                let encoding = tokenizer
                    .encode(text, add_special_tokens)
                    .map_err(|e| e.to_string())?;
                let widen = |ids: &[u32]| ids.iter().map(|&id| i64::from(id)).collect();
                Ok(Encoded {
                    ids: widen(encoding.get_ids()),
                    type_ids: widen(encoding.get_type_ids()),
                })
            }
        }
    }

    /// Tokens in `text` without the special tokens (a text refused is counted by its bytes, generously).
    fn count(&self, text: &str) -> usize {
        match self {
            ModelTokenizer::WordPiece(wordpiece) => wordpiece.encode(text, false).len(),
            #[cfg(feature = "hf-tokenizers")]
            ModelTokenizer::Hugging(tokenizer) => tokenizer
                .encode(text, false)
                .map_or(text.len(), |encoding| encoding.len()),
        }
    }
}

/// ONNX Runtime session + tokenizer, lazily loaded, dropped when idle.
pub struct OnnxEmbedder {
    settings: EmbedderSettings,
    key: String,
    dimensions: usize,
    max_sequence_tokens: usize,
    tokenizer: OnceLock<Result<ModelTokenizer, String>>,
    model: Mutex<Option<LoadedModel>>,
    inferences: AtomicU64,
    loads: AtomicU64,
}

impl OnnxEmbedder {
    /// Checks that the runtime library and the model files are there and starts the idle reaper. Nothing
    /// heavy happens here (a gateway with memory search but no notes stays small): the tokenizer is read
    /// on first use, ONNX Runtime and the model on the first `embed`.
    pub fn open(settings: EmbedderSettings) -> Result<Arc<OnnxEmbedder>, EmbedError> {
        if !settings.runtime_library.exists() {
            return Err(EmbedError::RuntimeMissing {
                path: settings.runtime_library.clone(),
            });
        }
        let dir = settings.model_dir.clone();
        let (dimensions, positions) = model_shape(&dir)?;
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
        let max_sequence_tokens = settings.max_sequence_tokens.min(positions).max(8);
        tune_heap_for_inference();
        let embedder = Arc::new(OnnxEmbedder {
            key: format!("{name}:{dimensions}"),
            dimensions,
            max_sequence_tokens,
            tokenizer: OnceLock::new(),
            settings,
            model: Mutex::new(None),
            inferences: AtomicU64::new(0),
            loads: AtomicU64::new(0),
        });
        spawn_idle_reaper(Arc::downgrade(&embedder));
        Ok(embedder)
    }

    /// The model's tokenizer (no padding, no truncation), read on first use and kept.
    fn tokenizer(&self) -> Result<&ModelTokenizer, EmbedError> {
        let dir = &self.settings.model_dir;
        self.tokenizer
            .get_or_init(|| ModelTokenizer::load(&dir.join("tokenizer.json")))
            .as_ref()
            .map_err(|reason| EmbedError::ModelFile {
                path: dir.join("tokenizer.json"),
                reason: reason.clone(),
            })
    }

    /// How many times the model has been loaded (first use and every reload after an idle unload).
    pub fn loads(&self) -> u64 {
        self.loads.load(Ordering::Relaxed)
    }

    /// Drops the model if unused for `idle_unload`; returns whether it did.
    pub fn unload_if_idle(&self) -> bool {
        let mut model = self.model.lock();
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

    fn load(&self) -> Result<LoadedModel, EmbedError> {
        let dir = &self.settings.model_dir;
        let model_error = |reason: String| EmbedError::ModelLoad {
            dir: dir.clone(),
            reason,
        };
        let environment = ort_environment(&self.settings.runtime_library)?;
        let started = Instant::now();
        let session = small_board_session(&environment, self.settings.intra_threads)
            .and_then(|mut builder| {
                builder
                    .commit_from_file(dir.join("model.onnx"))
                    .map_err(|e| e.to_string())
            })
            .map_err(model_error)?;
        let needs_token_types = session
            .inputs()
            .iter()
            .any(|input| input.name() == "token_type_ids");
        // Loading leaves large freed buffers behind; return them before inference starts.
        release_freed_memory();
        self.loads.fetch_add(1, Ordering::Relaxed);
        log::info!(
            "memory: embedding model {} loaded in {} ms",
            self.key,
            started.elapsed().as_millis()
        );
        Ok(LoadedModel {
            session,
            needs_token_types,
            last_used: Instant::now(),
            cold_code_reclaimed: false,
        })
    }

    /// Token ids of `text` with the special tokens, cut to the model's sequence length (keeping `[SEP]`).
    fn encode(&self, text: &str) -> Result<Encoded, EmbedError> {
        let Encoded {
            mut ids,
            mut type_ids,
        } = self
            .tokenizer()?
            .encode(text, true)
            .map_err(|e| EmbedError::Inference(format!("tokenizer: {e}")))?;
        let max = self.max_sequence_tokens;
        if ids.len() > max {
            let last = ids[ids.len() - 1];
            ids.truncate(max);
            type_ids.truncate(max);
            ids[max - 1] = last;
        }
        Ok(Encoded { ids, type_ids })
    }
}

/// A session builder with the small-board options (see the file comment).
fn small_board_session(
    environment: &ort::environment::Environment,
    intra_threads: usize,
) -> Result<ort::session::builder::SessionBuilder, String> {
    let text = |e: ort::Error<ort::session::builder::SessionBuilder>| e.to_string();
    Session::builder(environment)
        .map_err(|e| e.to_string())?
        .with_execution_providers([ort::ep::CPU::default().with_arena_allocator(false).build()])
        .map_err(text)?
        .with_optimization_level(GraphOptimizationLevel::Level2)
        .map_err(text)?
        // Constant folding would expand the int8 weights to float32 once and keep them (~90 MB).
        .with_config_entry(DISABLED_OPTIMIZERS_KEY, "ConstantFolding")
        .map_err(text)?
        .with_intra_threads(intra_threads.max(1))
        .map_err(text)?
        .with_inter_threads(1)
        .map_err(text)?
        .with_parallel_execution(false)
        .map_err(text)?
        .with_memory_pattern(false)
        .map_err(text)
}

/// Splits `inputs` (in order) into runs of at most `batch` whose padded attention stays within
/// `MAX_ATTENTION_CELLS` and whose padded tokens stay within `MAX_BATCH_TOKENS` (an input longer than that
/// runs alone); returns the run lengths.
fn attention_batches(lengths: &[usize], batch: usize) -> Vec<usize> {
    let mut runs = Vec::new();
    let (mut count, mut longest) = (0usize, 0usize);
    for &len in lengths {
        let widest = longest.max(len);
        let too_big = (count + 1) * widest * widest > MAX_ATTENTION_CELLS
            || (count + 1) * widest > MAX_BATCH_TOKENS;
        if count > 0 && (count == batch || too_big) {
            runs.push(count);
            (count, longest) = (0, 0);
        }
        count += 1;
        longest = longest.max(len);
    }
    if count > 0 {
        runs.push(count);
    }
    runs
}

/// Runs one padded batch and returns its mean-pooled, L2-normalised vectors.
fn run_batch(model: &mut LoadedModel, batch: &[Encoded]) -> Result<Vec<Vec<f32>>, EmbedError> {
    let inference = |e: ort::Error| EmbedError::Inference(e.to_string());
    let width = batch.iter().map(|e| e.ids.len()).max().unwrap_or(0).max(1);
    let cells = batch.len() * width;
    let (mut ids, mut mask, mut types) = (
        Vec::with_capacity(cells),
        Vec::with_capacity(cells),
        Vec::with_capacity(cells),
    );
    for encoded in batch {
        let pad = width - encoded.ids.len();
        ids.extend(
            encoded
                .ids
                .iter()
                .copied()
                .chain(std::iter::repeat_n(PAD_TOKEN_ID, pad)),
        );
        mask.extend(
            std::iter::repeat_n(1i64, encoded.ids.len()).chain(std::iter::repeat_n(0, pad)),
        );
        types.extend(
            encoded
                .type_ids
                .iter()
                .copied()
                .chain(std::iter::repeat_n(0, pad)),
        );
    }
    let shape = [batch.len(), width];
    let mut inputs = ort::inputs![
        "input_ids" => Tensor::from_array((shape, ids)).map_err(inference)?,
        "attention_mask" => Tensor::from_array((shape, mask)).map_err(inference)?,
    ];
    if model.needs_token_types {
        inputs.push((
            "token_type_ids".into(),
            Tensor::from_array((shape, types))
                .map_err(inference)?
                .into(),
        ));
    }
    let outputs = model.session.run(inputs).map_err(inference)?;
    let (out_shape, hidden) = outputs[0].try_extract_tensor::<f32>().map_err(inference)?;
    let dims = out_shape.get(2).copied().unwrap_or(0).max(0) as usize;
    if out_shape.len() != 3 || dims == 0 || hidden.len() != cells * dims {
        return Err(EmbedError::Inference(format!(
            "unexpected output shape {out_shape:?}"
        )));
    }
    Ok(batch
        .iter()
        .enumerate()
        .map(|(row, encoded)| {
            let tokens = encoded.ids.len();
            let mut pooled = vec![0f32; dims];
            for token in 0..tokens {
                let start = (row * width + token) * dims;
                for (sum, value) in pooled.iter_mut().zip(&hidden[start..start + dims]) {
                    *sum += value;
                }
            }
            let norm = pooled.iter().map(|v| v * v).sum::<f32>().sqrt();
            let divisor = if norm > 0.0 {
                norm
            } else {
                tokens.max(1) as f32
            };
            pooled.iter_mut().for_each(|v| *v /= divisor);
            pooled
        })
        .collect())
}

/// Hands freed heap pages back to the OS (glibc keeps them otherwise), so the unload shows in RSS.
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory at the top of glibc's heaps; no pointers are affected.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Asks the kernel to reclaim the runtime library's resident pages once a model is loaded and has run.
///
/// Loading touches most of the 29 MB library (every operator kernel registers itself), about 18 MiB of RSS,
/// while inference runs a few MiB of it. The pages are clean file pages the kernel would reclaim under memory
/// pressure anyway; asking now keeps them out of RSS, and the code inference runs comes back on its next call
/// (read from the file once).
fn reclaim_runtime_code(library: &Path) {
    match mapped_files::advise(library, Advice::Reclaim) {
        Ok(bytes) => log::debug!(
            "memory: asked to reclaim {} KiB of runtime code",
            bytes / 1024
        ),
        Err(e) => log::debug!("memory: could not reclaim the runtime's code pages: {e}"),
    }
}

/// Fixes glibc's mmap threshold (it otherwise grows with the largest freed block, after which large tensors
/// stay in the heap once freed): large inference buffers then go back to the OS when ONNX Runtime frees them.
fn tune_heap_for_inference() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes an allocator parameter; it does not touch allocated memory.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
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
        // A text the tokenizer refuses is measured generously so it still gets split.
        self.tokenizer()
            .map_or(text.len(), |tokenizer| tokenizer.count(text))
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encoded = texts
            .iter()
            .map(|text| self.encode(text))
            .collect::<Result<Vec<_>, _>>()?;
        let mut slot = self.model.lock();
        if slot.is_none() {
            *slot = Some(self.load()?);
        }
        let loaded = slot.as_mut().expect("model was just loaded");
        let lengths: Vec<usize> = encoded.iter().map(|e| e.ids.len()).collect();
        let mut vectors = Vec::with_capacity(texts.len());
        let mut rest = encoded.as_slice();
        for run in attention_batches(&lengths, self.settings.batch_size.max(1)) {
            let (batch, tail) = rest.split_at(run);
            vectors.extend(run_batch(loaded, batch)?);
            rest = tail;
        }
        loaded.last_used = Instant::now();
        release_freed_memory();
        if !loaded.cold_code_reclaimed {
            loaded.cold_code_reclaimed = true;
            reclaim_runtime_code(&self.settings.runtime_library);
        }
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
        self.model.lock().is_some()
    }
}

/// The tests' skip convention (`SKIPPED: <test>: <reason>`, counted by `scripts/test`).
#[cfg(test)]
#[path = "../../tests/support/skip.rs"]
mod test_skip;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_inputs_get_their_own_batch_and_short_ones_share() {
        // Short inputs share a batch up to the token budget (128 padded tokens).
        assert_eq!(attention_batches(&[30; 10], 8), vec![4, 4, 2]);
        assert_eq!(attention_batches(&[10; 20], 8), vec![8, 8, 4]);
        assert_eq!(attention_batches(&[256, 256, 20], 8), vec![1, 1, 1]);
        assert_eq!(attention_batches(&[64; 5], 8), vec![2, 2, 1]);
        assert!(attention_batches(&[], 8).is_empty());
    }

    #[test]
    fn a_bert_wordpiece_tokenizer_json_gets_the_compact_tokenizer() {
        const TEST: &str = "a_bert_wordpiece_tokenizer_json_gets_the_compact_tokenizer";
        let Some(dir) = std::env::var_os("PINCER_EMBED_MODEL_DIR") else {
            assert!(
                !test_skip::in_ci(),
                "{TEST}: PINCER_EMBED_MODEL_DIR is not set"
            );
            test_skip::skip(
                TEST,
                "PINCER_EMBED_MODEL_DIR is not set (scripts/setup memory installs the model, scripts/test sets it)",
            );
            return;
        };
        let path = std::path::Path::new(&dir).join("tokenizer.json");
        assert!(
            path.is_file(),
            "{} is missing (PINCER_EMBED_MODEL_DIR; run scripts/setup memory)",
            path.display()
        );
        let tokenizer = ModelTokenizer::load(&path).expect("MiniLM tokenizer");
        assert!(matches!(tokenizer, ModelTokenizer::WordPiece(_)));
        let encoded = tokenizer.encode("Hello world", true).expect("encode");
        assert_eq!(encoded.ids, vec![101, 7592, 2088, 102]);
        assert_eq!(encoded.type_ids, vec![0; 4]);
        assert_eq!(tokenizer.count("Hello world"), 2);
    }

    /// A tokenizer.json the compact WordPiece tokenizer does not implement (a WordLevel model).
    const WORD_LEVEL_TOKENIZER_JSON: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
            "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"world":2},"unk_token":"[UNK]"}}"#;

    #[cfg(feature = "hf-tokenizers")]
    #[test]
    fn another_tokenizer_json_stays_with_the_tokenizers_crate() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, WORD_LEVEL_TOKENIZER_JSON).expect("write");
        let tokenizer = ModelTokenizer::load(&path).expect("WordLevel tokenizer");
        assert!(matches!(tokenizer, ModelTokenizer::Hugging(_)));
        let encoded = tokenizer.encode("hello there world", true).expect("encode");
        assert_eq!(encoded.ids, vec![1, 0, 2]);
    }

    #[cfg(not(feature = "hf-tokenizers"))]
    #[test]
    fn another_tokenizer_json_is_refused_naming_the_feature() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, WORD_LEVEL_TOKENIZER_JSON).expect("write");
        let error = match ModelTokenizer::load(&path) {
            Ok(_) => panic!("a WordLevel tokenizer.json must be refused without hf-tokenizers"),
            Err(error) => error,
        };
        assert!(error.contains(&path.display().to_string()), "{error}");
        assert!(
            error.contains("not what the compact WordPiece tokenizer implements"),
            "{error}"
        );
        assert!(error.contains("`hf-tokenizers` feature"), "{error}");
    }
}
