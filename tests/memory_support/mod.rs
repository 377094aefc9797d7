//! Shared set-up for the memory tests: the real ONNX Runtime library and model installed by
//! `scripts/setup memory` (found through `PINCER_ORT_DYLIB` / `PINCER_EMBED_MODEL_DIR`, which `scripts/test`
//! exports, else in this checkout's `.tools/onnx`), and services over temporary workspaces.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pincer::config::schema::memory::{MemorySearchConfig, ResolvedMemorySearch};
use pincer::memory::embedder::{EmbedderSettings, OnnxEmbedder};
use pincer::memory::{Embedder, MemoryService};
use pincer::store::{Store, StoreOptions};

fn tools_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/onnx")
}

/// Real runtime + model; panics with the fix when they are not installed.
pub fn embedder_settings(idle_unload: Duration) -> EmbedderSettings {
    let runtime_library = std::env::var_os("PINCER_ORT_DYLIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| tools_dir().join("lib/libonnxruntime.so.1.31.1"));
    let model_dir = std::env::var_os("PINCER_EMBED_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| tools_dir().join("all-MiniLM-L6-v2"));
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
