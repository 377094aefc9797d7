//! The channel registry: the gateway's adapters by channel id. The gateway
//! fills it at start from the config (`configured_adapters`), starts every
//! adapter with the hub as its inbound sink, reports each account's state
//! for `channels.status` / `health`, and stops them all on shutdown.
//!
//! The registry holds adapters; it must not route, queue or shape replies.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::config::Config;
use crate::store::Store;

use super::http_routes::HttpRoutes;
use super::{AccountStatus, Channel, InboundSink};

/// One channel's state as `channels.status` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelStatus {
    pub channel: String,
    pub accounts: Vec<AccountStatus>,
    /// Why `start` failed, when it did.
    pub start_error: Option<String>,
}

/// The adapters of one gateway.
#[derive(Default)]
pub struct ChannelRegistry {
    adapters: RwLock<BTreeMap<String, Arc<dyn Channel>>>,
    start_errors: Mutex<BTreeMap<String, String>>,
}

/// The adapters the config asks for. Each platform adapter adds its line
/// here (`channels.telegram` → the Telegram adapter, …); a channel whose
/// section is absent or disabled gets no adapter.
pub fn configured_adapters(
    config: &Config,
    store: &Store,
    http: &reqwest::Client,
    routes: &Arc<HttpRoutes>,
) -> Vec<Arc<dyn Channel>> {
    let mut adapters: Vec<Arc<dyn Channel>> = Vec::new();
    if let Some(section) = config.channels.telegram.as_ref() {
        let mut options = super::telegram::TelegramOptions::for_config(config);
        options.http = Some(http.clone());
        options.http_routes = Some(Arc::clone(routes));
        adapters.push(Arc::new(super::telegram::TelegramChannel::new(
            section,
            store.clone(),
            options,
        )));
    }
    if let Some(section) = config.channels.discord.as_ref() {
        let media = super::media::MediaDefaults::for_config(config);
        match super::discord::DiscordChannel::with_media(section, http, &media) {
            Ok(adapter) => adapters.push(Arc::new(adapter)),
            Err(e) => log::error!("channels.discord: {e}; the Discord channel stays off"),
        }
    }
    if let Some(section) = config.channels.slack.as_ref() {
        let media = super::media::MediaDefaults::for_config(config);
        match super::slack::SlackChannel::with_media(section, http, &media) {
            Ok(adapter) => adapters.push(Arc::new(adapter.with_http_routes(Arc::clone(routes)))),
            Err(e) => log::error!("channels.slack: {e}; the Slack channel stays off"),
        }
    }
    adapters
}

impl ChannelRegistry {
    pub fn new() -> ChannelRegistry {
        ChannelRegistry::default()
    }

    /// Adds (or replaces) the adapter for its channel id.
    pub fn register(&self, adapter: Arc<dyn Channel>) {
        self.adapters
            .write()
            .insert(adapter.id().to_string(), adapter);
    }

    /// The adapter of `channel`.
    pub fn get(&self, channel: &str) -> Option<Arc<dyn Channel>> {
        self.adapters.read().get(channel).cloned()
    }

    /// Registered channel ids, sorted.
    pub fn ids(&self) -> Vec<String> {
        self.adapters.read().keys().cloned().collect()
    }

    fn all(&self) -> Vec<Arc<dyn Channel>> {
        self.adapters.read().values().cloned().collect()
    }

    /// Starts every adapter; a failing one is logged and reported in
    /// `status`, the others still start.
    pub async fn start_all(&self, sink: Arc<dyn InboundSink>) {
        for adapter in self.all() {
            let id = adapter.id();
            match adapter.start(sink.clone()).await {
                Ok(()) => {
                    log::info!("channel {id} started");
                    self.start_errors.lock().remove(id);
                }
                Err(error) => {
                    log::error!("channel {id} failed to start: {error}");
                    self.start_errors
                        .lock()
                        .insert(id.to_string(), error.to_string());
                }
            }
        }
    }

    /// Stops every adapter and waits for them.
    pub async fn stop_all(&self) {
        for adapter in self.all() {
            adapter.stop().await;
            log::info!("channel {} stopped", adapter.id());
        }
    }

    /// Every channel's accounts.
    pub fn status(&self) -> Vec<ChannelStatus> {
        let errors = self.start_errors.lock().clone();
        self.all()
            .into_iter()
            .map(|adapter| ChannelStatus {
                channel: adapter.id().to_string(),
                accounts: adapter.status(),
                start_error: errors.get(adapter.id()).cloned(),
            })
            .collect()
    }
}
