//! The ONNX Runtime side of local embeddings: the runtime initialised once per process from its shared
//! library, the model's session built for small boards, and inference over token ids, batched so that
//! memory stays bounded. Used in the gateway's own process ([`super::OnnxEmbedder`]) or in the embedding
//! worker, a child process that holds the runtime only while it is needed (`memory::worker`).
//!
//! The session is built for small boards, measured with `examples/ort_probe.rs`: graph optimisation without
//! constant folding (it would expand the int8 model's weights into ~90 MB of float32), CPU memory arena and
//! memory pattern off, one inter-op thread, intra-op threads from the board profile, the model read by ONNX
//! Runtime from its file: its weights sit in `model.onnx.data` (external data, written by `scripts/setup`),
//! which the runtime maps instead of copying, so they are clean file pages. Once a loaded model has run, the
//! runtime library's pages go back to the kernel: loading touches most of the library, inference a third of
//! it. A batch is split further so that batch × sequence² stays within one full-length input (attention
//! activations grow with the square), and freed heap pages are returned after every call.
//! This file must not tokenize, and must not know about chunks, storage or scoring.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use ort::value::Tensor;

use super::tokenizer::Encoded;
use crate::memory::embedder::{EmbedError, EmbedderSettings, DEFAULT_MAX_SEQUENCE_TOKENS};
use crate::system::mapped_files::{self, Advice};

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

/// The model of one embedder: loaded on first use, dropped when idle.
pub(crate) struct OnnxModel {
    settings: EmbedderSettings,
    key: String,
    loaded: Option<LoadedModel>,
    loads: u64,
}

impl OnnxModel {
    /// A model not loaded yet; `key` names it in logs. Fixes the heap's mmap threshold for inference.
    pub(crate) fn new(settings: EmbedderSettings, key: String) -> OnnxModel {
        tune_heap_for_inference();
        OnnxModel {
            settings,
            key,
            loaded: None,
            loads: 0,
        }
    }

    pub(crate) fn is_loaded(&self) -> bool {
        self.loaded.is_some()
    }

    /// How many times the model has been loaded (first use and every reload after an idle unload).
    pub(crate) fn loads(&self) -> u64 {
        self.loads
    }

    /// Drops the model if unused for `idle`; returns whether it did.
    pub(crate) fn unload_if_idle(&mut self, idle: Duration) -> bool {
        let unused = self
            .loaded
            .as_ref()
            .is_some_and(|m| m.last_used.elapsed() >= idle);
        if unused {
            self.loaded = None;
            release_freed_memory();
            log::info!("memory: embedding model unloaded after idle period");
        }
        unused
    }

    fn load(&mut self) -> Result<&mut LoadedModel, EmbedError> {
        if self.loaded.is_none() {
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
            self.loads += 1;
            log::info!(
                "memory: embedding model {} loaded in {} ms",
                self.key,
                started.elapsed().as_millis()
            );
            self.loaded = Some(LoadedModel {
                session,
                needs_token_types,
                last_used: Instant::now(),
                cold_code_reclaimed: false,
            });
        }
        Ok(self.loaded.as_mut().expect("the model was just loaded"))
    }

    /// One vector per input, in order; loads the model first when it is not loaded.
    pub(crate) fn embed(&mut self, encoded: &[Encoded]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let batch_size = self.settings.batch_size.max(1);
        let runtime_library = self.settings.runtime_library.clone();
        let loaded = self.load()?;
        let lengths: Vec<usize> = encoded.iter().map(|e| e.ids.len()).collect();
        let mut vectors = Vec::with_capacity(encoded.len());
        let mut rest = encoded;
        for run in attention_batches(&lengths, batch_size) {
            let (batch, tail) = rest.split_at(run);
            vectors.extend(run_batch(loaded, batch)?);
            rest = tail;
        }
        loaded.last_used = Instant::now();
        release_freed_memory();
        if !loaded.cold_code_reclaimed {
            loaded.cold_code_reclaimed = true;
            reclaim_runtime_code(&runtime_library);
        }
        Ok(vectors)
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
}
