//! The channel registry: the gateway's adapters by channel id. The gateway
//! fills it at start from the config (`configured_adapters`), starts every
//! adapter with the hub as its inbound sink, reports each account's state
//! for `channels.status` / `health`, and stops them all on shutdown. A
//! channel whose config section changed is restarted alone (`restart`):
//! its adapter stops and a new one starts with the new settings.
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
    /// One restart at a time: a second config change waits for the first's
    /// stop and start to end.
    restarts: tokio::sync::Mutex<()>,
}

/// The channel ids that can have an adapter (`configured_adapter`; a
/// channel whose cargo feature is off has none in this build).
pub const ADAPTER_CHANNELS: [&str; 6] = [
    "discord", "matrix", "signal", "slack", "telegram", "whatsapp",
];

/// The channels whose adapter must restart after a config change from
/// `changed` (paths as `config::changed_paths` names them): any change under
/// `channels.<id>` restarts that channel's adapter, as upstream's reload plan
/// does; the others keep running.
pub fn channels_to_restart(changed: &[String]) -> Vec<&'static str> {
    ADAPTER_CHANNELS
        .into_iter()
        .filter(|id| {
            let section = format!("channels.{id}");
            changed
                .iter()
                .any(|path| *path == section || path.starts_with(&format!("{section}.")))
        })
        .collect()
}

/// The adapters the config asks for. Each platform adapter adds its line
/// in `configured_adapter`; a channel whose section is absent gets no adapter.
pub fn configured_adapters(
    config: &Config,
    store: &Store,
    http: &reqwest::Client,
    routes: &Arc<HttpRoutes>,
) -> Vec<Arc<dyn Channel>> {
    ADAPTER_CHANNELS
        .into_iter()
        .filter_map(|id| configured_adapter(id, config, store, http, routes))
        .collect()
}

/// The adapter of channel `id` the config asks for (`channels.telegram` →
/// the Telegram adapter, …); `None` when its section is absent or invalid.
pub fn configured_adapter(
    id: &str,
    config: &Config,
    store: &Store,
    http: &reqwest::Client,
    routes: &Arc<HttpRoutes>,
) -> Option<Arc<dyn Channel>> {
    let media = || super::media::MediaDefaults::for_config(config);
    match id {
        "telegram" => {
            let section = config.channels.telegram.as_ref()?;
            let mut options = super::telegram::TelegramOptions::for_config(config);
            options.http = Some(http.clone());
            options.http_routes = Some(Arc::clone(routes));
            Some(Arc::new(super::telegram::TelegramChannel::new(
                section,
                store.clone(),
                options,
            )))
        }
        "discord" => {
            let section = config.channels.discord.as_ref()?;
            match super::discord::DiscordChannel::with_media(section, http, &media()) {
                Ok(adapter) => Some(Arc::new(adapter)),
                Err(e) => {
                    log::error!("channels.discord: {e}; the Discord channel stays off");
                    None
                }
            }
        }
        "slack" => {
            let section = config.channels.slack.as_ref()?;
            match super::slack::SlackChannel::with_media(section, http, &media()) {
                Ok(adapter) => Some(Arc::new(adapter.with_http_routes(Arc::clone(routes)))),
                Err(e) => {
                    log::error!("channels.slack: {e}; the Slack channel stays off");
                    None
                }
            }
        }
        #[cfg(feature = "matrix")]
        "matrix" => {
            let section = config.channels.matrix.as_ref()?;
            Some(Arc::new(super::matrix::MatrixChannel::new(
                section,
                store.clone(),
                http,
                &media(),
            )))
        }
        #[cfg(feature = "signal")]
        "signal" => {
            let section = config.channels.signal.as_ref()?;
            Some(Arc::new(super::signal::SignalChannel::with_media(
                section,
                http,
                &media(),
            )))
        }
        #[cfg(feature = "whatsapp")]
        "whatsapp" => {
            let section = config.channels.whatsapp.as_ref()?;
            Some(Arc::new(
                super::whatsapp::WhatsAppChannel::new(
                    section,
                    store.clone(),
                    http,
                    super::whatsapp::channel::socket_url(),
                )
                .with_media(&media()),
            ))
        }
        _ => None,
    }
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

    /// Restarts channel `id`: its running adapter (if any) stops and is
    /// waited for, then `replacement` (if any: the channel may have been
    /// removed from the config) starts with `sink`.
    pub async fn restart(
        &self,
        id: &str,
        replacement: Option<Arc<dyn Channel>>,
        sink: Arc<dyn InboundSink>,
    ) {
        let _one_at_a_time = self.restarts.lock().await;
        let old = self.adapters.write().remove(id);
        if let Some(old) = old {
            old.stop().await;
            log::info!("channel {id} stopped for its new settings");
        }
        self.start_errors.lock().remove(id);
        let Some(adapter) = replacement else {
            return;
        };
        self.register(adapter.clone());
        match adapter.start(sink).await {
            Ok(()) => log::info!("channel {id} restarted with its new settings"),
            Err(error) => {
                log::error!("channel {id} failed to restart: {error}");
                self.start_errors
                    .lock()
                    .insert(id.to_string(), error.to_string());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_changed_channel_restarts() {
        let changed = vec![
            "channels.telegram.botToken".to_string(),
            "agents.defaults.timeoutSeconds".to_string(),
            "channels.slackish".to_string(),
        ];
        assert_eq!(channels_to_restart(&changed), vec!["telegram"]);
        assert_eq!(
            channels_to_restart(&[
                "channels.slack".to_string(),
                "channels.discord.token".into()
            ]),
            vec!["discord", "slack"]
        );
        assert!(channels_to_restart(&["channels.defaults".to_string()]).is_empty());
    }
}
