//! Building memory services: `open_service` for one-shot callers (the CLI), and `MemoryServices`, the
//! gateway's set of per-agent services with their watchers, kept in line with the config (`apply` at start
//! and after every reload). One local embedder per (model directory, threads, batch) is shared by the whole
//! process, because ONNX Runtime is initialised once per process and the model's memory should be paid once.
//!
//! This file must not search or index; it only builds services and starts or stops their watchers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::embedder::{open_local, Embedder, EmbedderSettings, LocalAssets};
use super::watch::{IndexProgress, ProgressSender, PROGRESS_CAPACITY};
use super::{workspace_for, MemoryService, MemoryStatus};
use crate::config::schema::memory::ResolvedMemorySearch;
use crate::config::Config;
use crate::store::Store;

type EmbedderSlot = Result<Arc<dyn Embedder>, String>;

static EMBEDDERS: OnceLock<Mutex<HashMap<EmbedderSettings, EmbedderSlot>>> = OnceLock::new();

/// The process's embedder for `settings` (board profile threads and batch), or why there is none.
/// `data_dir` is one of the places the runtime and model are looked for (see `EmbedderSettings::resolve`).
pub fn shared_embedder(settings: &ResolvedMemorySearch, data_dir: &Path) -> EmbedderSlot {
    match settings.provider.as_str() {
        "auto" | "local" => {}
        other => {
            return Err(format!(
                "embedding provider `{other}` is not supported: pincer embeds locally (provider \"local\")"
            ))
        }
    }
    let board = crate::system::board::detect();
    let local = LocalAssets {
        model_path: settings.local_model_path.as_deref(),
        model_cache_dir: settings.local_model_cache_dir.as_deref(),
    };
    let embedder_settings = EmbedderSettings::resolve(local, Some(data_dir), &board.embedder);
    let mut slots = EMBEDDERS.get_or_init(Mutex::default).lock();
    slots
        .entry(embedder_settings.clone())
        .or_insert_with(|| open_local(embedder_settings).map_err(|e| e.to_string()))
        .clone()
}

/// A new memory service of `agent_id` over `store`, as `config` says.
pub fn open_service(
    store: &Store,
    config: &Config,
    agent_id: &str,
    data_dir: &Path,
) -> Arc<MemoryService> {
    let settings = config.memory_search_for(agent_id);
    let embedder = shared_embedder(&settings, data_dir);
    Arc::new(MemoryService::new(
        store.clone(),
        agent_id,
        workspace_for(config, agent_id, data_dir),
        settings,
        embedder,
    ))
}

struct AgentMemory {
    service: Arc<MemoryService>,
    /// Cancels this service's watcher.
    watcher: Option<CancellationToken>,
}

impl Drop for AgentMemory {
    fn drop(&mut self) {
        if let Some(watcher) = &self.watcher {
            watcher.cancel();
        }
    }
}

/// The gateway's memory services, one per agent, each with its watcher while memory search is enabled.
pub struct MemoryServices {
    store: Store,
    data_dir: PathBuf,
    agents: Mutex<HashMap<String, AgentMemory>>,
    /// The watchers' sync progress, for whoever subscribes (the gateway's events).
    progress: ProgressSender,
}

impl std::fmt::Debug for MemoryServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryServices")
            .field("data_dir", &self.data_dir)
            .finish_non_exhaustive()
    }
}

impl MemoryServices {
    pub fn new(store: Store, data_dir: PathBuf) -> MemoryServices {
        MemoryServices {
            store,
            data_dir,
            agents: Mutex::new(HashMap::new()),
            progress: tokio::sync::broadcast::channel(PROGRESS_CAPACITY).0,
        }
    }

    /// The progress of every sync the watchers run from now on.
    pub fn subscribe_progress(&self) -> tokio::sync::broadcast::Receiver<IndexProgress> {
        self.progress.subscribe()
    }

    fn is_current(&self, service: &MemoryService, config: &Config, agent_id: &str) -> bool {
        service.settings() == &config.memory_search_for(agent_id)
            && service.workspace() == workspace_for(config, agent_id, &self.data_dir)
    }

    /// The service of `agent_id` under `config`: the running one while its settings and workspace are
    /// unchanged, else a new one (without a watcher until the next `apply`).
    pub fn service(&self, config: &Config, agent_id: &str) -> Arc<MemoryService> {
        let mut agents = self.agents.lock();
        if let Some(agent) = agents.get(agent_id) {
            if self.is_current(&agent.service, config, agent_id) {
                return Arc::clone(&agent.service);
            }
        }
        let service = open_service(&self.store, config, agent_id, &self.data_dir);
        agents.insert(
            agent_id.to_string(),
            AgentMemory {
                service: Arc::clone(&service),
                watcher: None,
            },
        );
        service
    }

    /// Brings the services in line with `config`: a service whose settings or workspace changed is replaced,
    /// every agent with memory search enabled has a watcher (a sync on start, then debounced syncs on
    /// change) under `shutdown`, and agents that are gone or disabled lose theirs. Call at gateway start and
    /// after every config reload; without a tokio runtime no watcher starts.
    pub fn apply(&self, config: &Config, shutdown: &CancellationToken, tasks: &TaskTracker) {
        let mut ids = vec![config.agents.default_agent_id()];
        ids.extend(config.agents.list.iter().map(|a| a.id.clone()));
        ids.sort();
        ids.dedup();
        let mut agents = self.agents.lock();
        agents.retain(|id, _| ids.contains(id));
        for id in ids {
            let current = agents
                .get(&id)
                .is_some_and(|a| self.is_current(&a.service, config, &id));
            if !current {
                let service = open_service(&self.store, config, &id, &self.data_dir);
                agents.insert(
                    id.clone(),
                    AgentMemory {
                        service,
                        watcher: None,
                    },
                );
            }
            let agent = agents.get_mut(&id).expect("inserted above");
            if !agent.service.settings().enabled {
                if let Some(watcher) = agent.watcher.take() {
                    watcher.cancel();
                }
            } else if agent.watcher.is_none() {
                agent.watcher = start_watcher(&agent.service, shutdown, tasks, &self.progress);
            }
        }
    }

    /// The running services' index state (`health`, `status`), by agent id;
    /// agents whose service has not been opened yet are absent.
    pub fn statuses(&self) -> Vec<(MemoryStatus, bool)> {
        let agents: Vec<(Arc<MemoryService>, bool)> = {
            let agents = self.agents.lock();
            let mut list: Vec<_> = agents
                .values()
                .map(|a| {
                    let watching = a.watcher.as_ref().is_some_and(|w| !w.is_cancelled());
                    (Arc::clone(&a.service), watching)
                })
                .collect();
            list.sort_by(|a, b| a.0.agent_id().cmp(b.0.agent_id()));
            list
        };
        agents
            .into_iter()
            .filter_map(|(service, watching)| match service.status() {
                Ok(status) => Some((status, watching)),
                Err(error) => {
                    log::warn!("memory: status of {}: {error}", service.agent_id());
                    None
                }
            })
            .collect()
    }

    /// Whether `agent_id`'s watcher is running (tests and status).
    pub fn is_watching(&self, agent_id: &str) -> bool {
        self.agents
            .lock()
            .get(agent_id)
            .and_then(|a| a.watcher.as_ref())
            .is_some_and(|w| !w.is_cancelled())
    }
}

/// Starts the watcher of `service` on `tasks` (a sync at once, then the debounced watch and the periodic
/// sync its settings ask for); returns its cancel token.
fn start_watcher(
    service: &Arc<MemoryService>,
    shutdown: &CancellationToken,
    tasks: &TaskTracker,
    progress: &ProgressSender,
) -> Option<CancellationToken> {
    let progress = progress.clone();
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let cancel = shutdown.child_token();
    let service = Arc::clone(service);
    let plan = super::watch::WatchPlan::of(&service);
    let token = cancel.clone();
    tasks.spawn_on(
        async move { super::watch::run(service, plan, token, progress).await },
        &runtime,
    );
    Some(cancel)
}
