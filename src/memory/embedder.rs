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
//! This is the one place that reads `PINCER_ORT_DYLIB` / `PINCER_EMBED_MODEL_DIR` /
//! `PINCER_EMBED_IDLE_UNLOAD_MS`. Without them (or the
//! config's `local.modelPath` / `local.modelCacheDir`) the runtime and model are looked for where
//! `scripts/setup memory` and the appliance image install them: see `EmbedderSettings::resolve`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::memory::chunker::TokenCounter;

/// Environment variable naming the ONNX Runtime shared library (tests and development trees).
pub const ORT_DYLIB_ENV: &str = "PINCER_ORT_DYLIB";
/// Environment variable naming the embedding model directory.
pub const EMBED_MODEL_DIR_ENV: &str = "PINCER_EMBED_MODEL_DIR";
/// Environment variable setting the idle period after which the model is dropped, in milliseconds
/// (benchmarks and tests; the default is `DEFAULT_IDLE_UNLOAD`).
pub const EMBED_IDLE_UNLOAD_ENV: &str = "PINCER_EMBED_IDLE_UNLOAD_MS";
/// File name of the ONNX Runtime library `ort` is built against.
pub const ORT_LIBRARY_NAME: &str = "libonnxruntime.so.1.31.1";
/// Directory name of the default model (all-MiniLM-L6-v2, int8).
pub const DEFAULT_MODEL_NAME: &str = "all-MiniLM-L6-v2";
/// Where the appliance image installs the ONNX Runtime library.
pub const DEFAULT_ORT_DYLIB: &str = "/usr/lib/pincer/libonnxruntime.so.1.31.1";
/// Where the appliance image installs the default model.
pub const DEFAULT_EMBED_MODEL_DIR: &str = "/usr/share/pincer/models/all-MiniLM-L6-v2";
/// Folder of local embedding assets beside the data directory and under the user's data home
/// (`~/.local/share/pincer/onnx`): `lib/<ORT_LIBRARY_NAME>` and `<DEFAULT_MODEL_NAME>/`.
pub const ASSET_FOLDER: &str = "onnx";
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
    #[error("embedding worker: {0}")]
    Worker(String),
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

/// Where the config says the local model and its assets are (`agents.defaults.memorySearch.local`).
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalAssets<'a> {
    /// `local.modelPath`: the model directory itself.
    pub model_path: Option<&'a str>,
    /// `local.modelCacheDir`: a folder laid out like `ASSET_FOLDER` (runtime under `lib/`, model beside it).
    pub model_cache_dir: Option<&'a str>,
}

/// One place the runtime and the model may be installed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct AssetPlace {
    runtime_library: PathBuf,
    model_dir: PathBuf,
}

impl AssetPlace {
    fn folder(root: &Path) -> AssetPlace {
        AssetPlace {
            runtime_library: root.join("lib").join(ORT_LIBRARY_NAME),
            model_dir: root.join(DEFAULT_MODEL_NAME),
        }
    }

    fn appliance() -> AssetPlace {
        AssetPlace {
            runtime_library: PathBuf::from(DEFAULT_ORT_DYLIB),
            model_dir: PathBuf::from(DEFAULT_EMBED_MODEL_DIR),
        }
    }
}

/// The user's data home: `$XDG_DATA_HOME`, else `$HOME/.local/share`.
fn data_home(env: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    env("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|home| PathBuf::from(home).join(".local/share")))
}

/// Places to look, in order: the configured cache folder alone if there is one; else beside the data
/// directory, under the user's data home (where `scripts/setup memory` installs), then the appliance's paths.
fn asset_places(
    cache_dir: Option<&str>,
    data_dir: Option<&Path>,
    env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> Vec<AssetPlace> {
    if let Some(dir) = cache_dir {
        return vec![AssetPlace::folder(Path::new(dir))];
    }
    let mut places = Vec::new();
    if let Some(dir) = data_dir {
        places.push(AssetPlace::folder(&dir.join(ASSET_FOLDER)));
    }
    if let Some(home) = data_home(env) {
        places.push(AssetPlace::folder(&home.join("pincer").join(ASSET_FOLDER)));
    }
    places.push(AssetPlace::appliance());
    places
}

/// The first of `candidates` that exists, else the last (so the error names the appliance's path).
fn first_existing(candidates: impl IntoIterator<Item = PathBuf>) -> PathBuf {
    let mut last = PathBuf::new();
    for candidate in candidates {
        if candidate.exists() {
            return candidate;
        }
        last = candidate;
    }
    last
}

impl EmbedderSettings {
    /// Settings for the local embedder. The model directory is `local.modelPath`, else
    /// `$PINCER_EMBED_MODEL_DIR`, else the first installed of the asset places (see `asset_places`); the
    /// runtime is `$PINCER_ORT_DYLIB`, else the first installed of the same places. Threads and batch come
    /// from the board profile.
    pub fn resolve(
        local: LocalAssets<'_>,
        data_dir: Option<&Path>,
        board: &crate::system::board::EmbedderProfile,
    ) -> EmbedderSettings {
        let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        Self::resolve_with(local, data_dir, board, &env)
    }

    fn resolve_with(
        local: LocalAssets<'_>,
        data_dir: Option<&Path>,
        board: &crate::system::board::EmbedderProfile,
        env: &dyn Fn(&str) -> Option<std::ffi::OsString>,
    ) -> EmbedderSettings {
        let places = asset_places(local.model_cache_dir, data_dir, env);
        let model_dir = local
            .model_path
            .map(PathBuf::from)
            .or_else(|| env(EMBED_MODEL_DIR_ENV).map(PathBuf::from))
            .unwrap_or_else(|| {
                first_existing(places.iter().map(|p| p.model_dir.join("model.onnx")))
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default()
            });
        let runtime_library = env(ORT_DYLIB_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| first_existing(places.iter().map(|p| p.runtime_library.clone())));
        EmbedderSettings {
            runtime_library,
            model_dir,
            intra_threads: board.threads.max(1),
            batch_size: board.batch.max(1),
            max_sequence_tokens: DEFAULT_MAX_SEQUENCE_TOKENS,
            idle_unload: env(EMBED_IDLE_UNLOAD_ENV)
                .and_then(|ms| ms.to_str()?.parse::<u64>().ok())
                .map_or(DEFAULT_IDLE_UNLOAD, Duration::from_millis),
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

/// Opens the local embedder, or says why there is none (then search is keyword-only): in a worker process
/// when the binary named one (`memory::worker::use_worker_program`), else in this process.
#[cfg(not(target_arch = "arm"))]
pub fn open_local(settings: EmbedderSettings) -> Result<std::sync::Arc<dyn Embedder>, EmbedError> {
    let embedder: std::sync::Arc<dyn Embedder> = match super::worker::worker_program() {
        Some(program) => super::worker::WorkerEmbedder::open(settings, program)?,
        None => OnnxEmbedder::open(settings)?,
    };
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
        let local = LocalAssets {
            model_path: Some("/models/multilingual"),
            model_cache_dir: None,
        };
        let settings = EmbedderSettings::resolve(local, None, &board);
        assert_eq!(settings.model_dir, PathBuf::from("/models/multilingual"));
        assert_eq!((settings.intra_threads, settings.batch_size), (1, 4));
        assert_eq!(settings.idle_unload, Duration::from_secs(300));
    }

    #[test]
    fn the_idle_period_comes_from_its_variable_when_set() {
        let env = env_of(vec![(EMBED_IDLE_UNLOAD_ENV, PathBuf::from("1500"))]);
        let settings = EmbedderSettings::resolve_with(LocalAssets::default(), None, &BOARD, &env);
        assert_eq!(settings.idle_unload, Duration::from_millis(1500));
    }

    const BOARD: EmbedderProfile = EmbedderProfile {
        threads: 1,
        batch: 1,
    };

    /// Installs an empty runtime file and model under `root` the way `scripts/setup memory` lays them out.
    fn install_assets(root: &Path) {
        std::fs::create_dir_all(root.join("lib")).expect("lib dir");
        std::fs::write(root.join("lib").join(ORT_LIBRARY_NAME), b"").expect("runtime");
        std::fs::create_dir_all(root.join(DEFAULT_MODEL_NAME)).expect("model dir");
        std::fs::write(root.join(DEFAULT_MODEL_NAME).join("model.onnx"), b"").expect("model");
    }

    fn env_of(pairs: Vec<(&'static str, PathBuf)>) -> impl Fn(&str) -> Option<std::ffi::OsString> {
        move |name: &str| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.clone().into_os_string())
        }
    }

    #[test]
    fn without_variables_the_assets_under_the_data_home_are_found() {
        let home = tempfile::tempdir().expect("home");
        install_assets(&home.path().join(".local/share/pincer/onnx"));
        let data_dir = tempfile::tempdir().expect("data");
        let env = env_of(vec![("HOME", home.path().to_path_buf())]);
        let settings = EmbedderSettings::resolve_with(
            LocalAssets::default(),
            Some(data_dir.path()),
            &BOARD,
            &env,
        );
        let root = home.path().join(".local/share/pincer/onnx");
        assert_eq!(
            settings.runtime_library,
            root.join("lib").join(ORT_LIBRARY_NAME)
        );
        assert_eq!(settings.model_dir, root.join(DEFAULT_MODEL_NAME));
    }

    #[test]
    fn assets_beside_the_data_directory_come_before_the_data_home() {
        let home = tempfile::tempdir().expect("home");
        install_assets(&home.path().join(".local/share/pincer/onnx"));
        let data_dir = tempfile::tempdir().expect("data");
        install_assets(&data_dir.path().join(ASSET_FOLDER));
        let env = env_of(vec![("HOME", home.path().to_path_buf())]);
        let settings = EmbedderSettings::resolve_with(
            LocalAssets::default(),
            Some(data_dir.path()),
            &BOARD,
            &env,
        );
        assert_eq!(
            settings.model_dir,
            data_dir.path().join("onnx").join(DEFAULT_MODEL_NAME)
        );
        assert!(settings.runtime_library.starts_with(data_dir.path()));
    }

    #[test]
    fn nothing_installed_names_the_appliance_paths() {
        let home = tempfile::tempdir().expect("home");
        let env = env_of(vec![("HOME", home.path().to_path_buf())]);
        let settings = EmbedderSettings::resolve_with(LocalAssets::default(), None, &BOARD, &env);
        assert_eq!(settings.runtime_library, PathBuf::from(DEFAULT_ORT_DYLIB));
        assert_eq!(settings.model_dir, PathBuf::from(DEFAULT_EMBED_MODEL_DIR));
    }

    #[test]
    fn the_configured_cache_dir_is_the_only_place_looked_at_and_variables_still_win() {
        let home = tempfile::tempdir().expect("home");
        install_assets(&home.path().join(".local/share/pincer/onnx"));
        let cache = tempfile::tempdir().expect("cache");
        let local = LocalAssets {
            model_path: None,
            model_cache_dir: cache.path().to_str(),
        };
        let env = env_of(vec![("HOME", home.path().to_path_buf())]);
        let settings = EmbedderSettings::resolve_with(local, None, &BOARD, &env);
        assert_eq!(settings.model_dir, cache.path().join(DEFAULT_MODEL_NAME));
        assert_eq!(
            settings.runtime_library,
            cache.path().join("lib").join(ORT_LIBRARY_NAME)
        );

        let env = env_of(vec![
            ("HOME", home.path().to_path_buf()),
            (ORT_DYLIB_ENV, PathBuf::from("/opt/ort.so")),
            (EMBED_MODEL_DIR_ENV, PathBuf::from("/opt/model")),
        ]);
        let settings = EmbedderSettings::resolve_with(local, None, &BOARD, &env);
        assert_eq!(settings.runtime_library, PathBuf::from("/opt/ort.so"));
        assert_eq!(settings.model_dir, PathBuf::from("/opt/model"));
    }

    #[test]
    fn missing_model_config_names_the_file() {
        let dir = tempfile::tempdir().expect("dir");
        let error = model_shape(dir.path()).expect_err("no config");
        assert!(error.to_string().contains("config.json"), "{error}");
    }
}
