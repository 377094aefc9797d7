//! First-run setup: when is it open, and who may use it.
//!
//! Setup is open while the Control UI is enabled, the running config names
//! no provider credential for the default model (an Ollama provider needs
//! none) and the gateway's secret is not one its owner chose (none but the
//! token the gateway or `pincer firstboot` generated; a password, a
//! `--token`, a token in the config or the environment other than the
//! generated one all close it). While it is open, a browser page of the
//! Control UI on the LAN or this machine — never through a proxy such as
//! Tailscale serve or funnel — may connect without credentials and gets a
//! setup session: no scopes, only the `pincer.setup.*` methods
//! (`methods/setup.rs`), which test a provider, check chat tokens, and
//! write the config with a password (then the gateway restarts in place
//! and setup is closed for good).

use serde_json::{json, Value};

use crate::config::{Config, ModelApi};

use super::auth::SharedSecret;
use super::connect_params::ConnectParams;
use super::handshake::{Peer, CONTROL_UI_CLIENT_ID};
use super::state::GatewayState;

/// The methods a setup session may call (and only a setup session).
pub const SETUP_METHODS: &[&str] = &[
    "pincer.setup.status",
    "pincer.setup.test",
    "pincer.setup.channel",
    "pincer.setup.apply",
];

/// What a setup session was granted at connect: the device it will pair as
/// the owner's when setup is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupGrant {
    pub device_id: String,
    pub public_key: String,
    /// The scopes the page asked for (granted to its device by `apply`).
    pub scopes: Vec<String>,
    pub client_id: String,
    pub client_mode: String,
    pub display_name: Option<String>,
    pub platform: Option<String>,
}

fn non_empty(value: Option<&str>) -> bool {
    value.is_some_and(|v| !v.trim().is_empty())
}

/// Whether the default model's provider has a credential configured (or
/// needs none: Ollama).
pub fn provider_configured(config: &Config) -> bool {
    let agent = config.agents.default_agent_id();
    let model = config
        .agents
        .entry(&agent)
        .and_then(|a| a.model.as_ref())
        .and_then(|m| m.primary())
        .or_else(|| {
            config
                .agents
                .defaults
                .model
                .as_ref()
                .and_then(|m| m.primary())
        });
    let Some((provider_id, model_id)) = model.and_then(|r| r.split_once('/')) else {
        return false;
    };
    let Some(provider) = config.models.providers.get(provider_id) else {
        return false;
    };
    let api = provider
        .model(model_id)
        .and_then(|m| m.api)
        .or(provider.api);
    api == Some(ModelApi::Ollama)
        || non_empty(provider.api_key.as_deref())
        || provider
            .auth_profiles
            .iter()
            .any(|p| non_empty(p.api_key.as_deref()))
        || provider.headers.keys().any(|h| {
            let h = h.to_ascii_lowercase();
            h == "authorization" || h == "x-api-key" || h == "api-key"
        })
}

/// Whether the running secret is the generated token (nobody chose it).
fn secret_is_generated(state: &GatewayState) -> bool {
    *state.secret_generated.get_or_init(|| match state.secret() {
        SharedSecret::Token(token) => {
            super::secret::read_generated(&state.services.data_dir).is_some_and(|g| g == token)
        }
        SharedSecret::Password(_) | SharedSecret::None => false,
    })
}

/// Whether first-run setup is open now.
pub fn is_open(state: &GatewayState) -> bool {
    let config = state.config();
    config.gateway.control_ui.enabled && !provider_configured(&config) && secret_is_generated(state)
}

/// The bootstrap document's `setup` part for this caller.
pub fn bootstrap(state: &GatewayState, peer: &Peer) -> Value {
    json!({"needed": is_open(state), "allowed": peer.lan_direct()})
}

/// A connect that presented no credential becomes a setup session when
/// setup is open, the caller is a Control UI page with a device identity,
/// on the LAN or this machine, not proxied.
pub fn grant(state: &GatewayState, params: &ConnectParams, peer: &Peer) -> Option<SetupGrant> {
    let auth = &params.auth;
    let presented = non_empty(auth.token.as_deref())
        || non_empty(auth.password.as_deref())
        || non_empty(auth.device_token.as_deref())
        || non_empty(params.bootstrap_token.as_deref());
    if presented
        || params.client.id != CONTROL_UI_CLIENT_ID
        || !peer.browser()
        || !peer.lan_direct()
        || !is_open(state)
    {
        return None;
    }
    let device = params.device.as_ref()?;
    Some(SetupGrant {
        device_id: device.id.trim().to_ascii_lowercase(),
        public_key: device.public_key.clone(),
        scopes: params.scopes.clone(),
        client_id: params.client.id.clone(),
        client_mode: params.client.mode.clone(),
        display_name: params.client.display_name.clone(),
        platform: Some(params.client.platform.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(value: Value) -> Config {
        serde_json::from_value(value).expect("config")
    }

    #[test]
    fn a_provider_needs_a_key_unless_it_is_ollama() {
        assert!(!provider_configured(&Config::default()));
        let keyless = json!({
            "models": {"providers": {"openai": {"baseUrl": "https://api.openai.com/v1", "models": [{"id": "gpt"}]}}},
            "agents": {"defaults": {"model": {"primary": "openai/gpt"}}},
        });
        assert!(!provider_configured(&config(keyless.clone())));
        let mut keyed = keyless.clone();
        keyed["models"]["providers"]["openai"]["apiKey"] = json!("sk-1");
        assert!(provider_configured(&config(keyed)));
        let mut ollama = keyless;
        ollama["models"]["providers"]["openai"]["api"] = json!("ollama");
        assert!(provider_configured(&config(ollama)));
        let dangling = json!({"agents": {"defaults": {"model": {"primary": "nowhere/m"}}}});
        assert!(!provider_configured(&config(dangling)));
    }
}
