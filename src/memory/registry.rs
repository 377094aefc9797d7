//! One `MemoryService` per (store, agent) and one local embedder per model directory, shared by the gateway
//! methods and the watcher in this process, created on first use.
//!
//! The embedder is shared because ONNX Runtime is initialised once per process and the model's memory
//! should be paid once. This file must not search or index; it only builds and caches services.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::embedder::{open_local, Embedder, EmbedderSettings};
use super::{workspace_for, MemoryService};
use crate::config::schema::memory::ResolvedMemorySearch;
use crate::config::Config;
use crate::store::Store;

type EmbedderSlot = Result<Arc<dyn Embedder>, String>;

static EMBEDDERS: OnceLock<Mutex<HashMap<PathBuf, EmbedderSlot>>> = OnceLock::new();
/// Services by (store directory, agent id).
type ServiceMap = HashMap<(PathBuf, String), Arc<MemoryService>>;

static SERVICES: OnceLock<Mutex<ServiceMap>> = OnceLock::new();

/// The process's embedder for `settings` (board profile threads and batch), or why there is none.
pub fn shared_embedder(settings: &ResolvedMemorySearch) -> EmbedderSlot {
    match settings.provider.as_str() {
        "auto" | "local" => {}
        other => {
            return Err(format!(
                "embedding provider `{other}` is not supported: pincer embeds locally (provider \"local\")"
            ))
        }
    }
    let board = crate::system::board::detect();
    let embedder_settings =
        EmbedderSettings::resolve(settings.local_model_path.as_deref(), &board.embedder);
    let mut slots = EMBEDDERS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    slots
        .entry(embedder_settings.model_dir.clone())
        .or_insert_with(|| open_local(embedder_settings).map_err(|e| e.to_string()))
        .clone()
}

/// The memory service of `agent_id` over `store`, created on first use (`created` says whether it was).
pub fn service_for(
    store: &Store,
    config: &Config,
    agent_id: &str,
    data_dir: &Path,
) -> (Arc<MemoryService>, bool) {
    let key = (store.path().to_path_buf(), agent_id.to_string());
    let mut services = SERVICES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(service) = services.get(&key) {
        return (Arc::clone(service), false);
    }
    let settings = config.memory_search_for(agent_id);
    let embedder = shared_embedder(&settings);
    let service = Arc::new(MemoryService::new(
        store.clone(),
        agent_id,
        workspace_for(config, agent_id, data_dir),
        settings,
        embedder,
    ));
    services.insert(key, Arc::clone(&service));
    (service, true)
}
