//! The running configuration, shared by every layer and swapped whole on a
//! hot reload or a `config.patch`: readers take an `Arc` of the version that
//! is current and keep it for as long as their work lasts.
//!
//! This file holds and swaps; it must not load, validate or apply anything
//! (what a new config changes is each owner's business).

use std::sync::Arc;

use parking_lot::RwLock;

use super::{Config, LoadedConfig};

/// The current config, hot-swappable, readable from any layer.
pub struct ConfigHandle {
    loaded: RwLock<Arc<LoadedConfig>>,
    config: RwLock<Arc<Config>>,
}

impl ConfigHandle {
    pub fn new(loaded: LoadedConfig) -> ConfigHandle {
        ConfigHandle {
            config: RwLock::new(Arc::new(loaded.config.clone())),
            loaded: RwLock::new(Arc::new(loaded)),
        }
    }

    /// The running configuration.
    pub fn config(&self) -> Arc<Config> {
        self.config.read().clone()
    }

    /// The running configuration with its file path, text and hash.
    pub fn loaded(&self) -> Arc<LoadedConfig> {
        self.loaded.read().clone()
    }

    /// Swaps in a new configuration; returns it.
    pub fn replace(&self, loaded: LoadedConfig) -> Arc<Config> {
        let config = Arc::new(loaded.config.clone());
        let mut slot = self.loaded.write();
        *slot = Arc::new(loaded);
        *self.config.write() = config.clone();
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_keep_their_version_across_a_swap() {
        let loaded = |port: u16| {
            let mut config = Config::default();
            config.gateway.port = port;
            LoadedConfig {
                config,
                path: None,
                raw: String::new(),
                hash: String::new(),
            }
        };
        let handle = ConfigHandle::new(loaded(1000));
        let before = handle.config();
        let swapped = handle.replace(loaded(before.gateway.port + 1));
        assert_eq!(handle.config().gateway.port, before.gateway.port + 1);
        assert_eq!(handle.loaded().config.gateway.port, swapped.gateway.port);
        assert_ne!(before.gateway.port, handle.config().gateway.port);
    }
}
