//! Shared set-up for the memory tests: the real ONNX Runtime library and model installed by
//! `scripts/setup memory` (found through `PINCER_ORT_DYLIB` / `PINCER_EMBED_MODEL_DIR`, which `scripts/test`
//! exports, else where the binary looks by default), and services over temporary workspaces.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pincer::config::schema::memory::{MemorySearchConfig, ResolvedMemorySearch};
use pincer::memory::embedder::{EmbedderSettings, LocalAssets, OnnxEmbedder};
use pincer::memory::{Embedder, MemoryService};
use pincer::store::{Store, StoreOptions};

/// Real runtime + model; panics with the fix when they are not installed.
pub fn embedder_settings(idle_unload: Duration) -> EmbedderSettings {
    // Found as the binary finds them: `PINCER_ORT_DYLIB` / `PINCER_EMBED_MODEL_DIR` (which `scripts/test`
    // exports), else where `scripts/setup memory` installs them.
    let board = pincer::system::board::EmbedderProfile {
        threads: 1,
        batch: 16,
    };
    let found = EmbedderSettings::resolve(LocalAssets::default(), None, &board);
    let (runtime_library, model_dir) = (found.runtime_library, found.model_dir);
    assert!(
        runtime_library.is_file() && model_dir.join("model.onnx").is_file(),
        "ONNX Runtime or model missing ({} / {}): run scripts/setup memory",
        runtime_library.display(),
        model_dir.display()
    );
    EmbedderSettings {
        runtime_library,
        model_dir,
        intra_threads: 1,
        batch_size: 16,
        max_sequence_tokens: 256,
        idle_unload,
    }
}

pub fn open_embedder(idle_unload: Duration) -> Arc<OnnxEmbedder> {
    OnnxEmbedder::open(embedder_settings(idle_unload)).expect("open the local embedder")
}

pub fn settings(json: &str) -> ResolvedMemorySearch {
    let layer: MemorySearchConfig = serde_json::from_str(json).expect("memory search settings");
    layer.resolve()
}

/// A workspace + store in `dir`, served for agent `main`.
pub fn service(dir: &Path, embedder: Option<Arc<OnnxEmbedder>>, json: &str) -> MemoryService {
    let store = Store::open(&dir.join("store"), StoreOptions::default()).expect("store");
    let embedder: Result<Arc<dyn Embedder>, String> = match embedder {
        Some(embedder) => Ok(embedder as Arc<dyn Embedder>),
        None => Err(pincer::memory::EmbedError::Unsupported.to_string()),
    };
    MemoryService::new(
        store,
        "main",
        dir.join("workspace"),
        settings(json),
        embedder,
    )
}

pub fn write_note(dir: &Path, relative: &str, text: &str) {
    let path = dir.join("workspace").join(relative);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write note");
}

pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}
