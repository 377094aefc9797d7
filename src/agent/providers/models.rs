//! Model resolution: from `agents.*.model` and `models.providers` to a
//! provider instance and the model id it expects.
//!
//! A model reference is `provider/model` (the model part may itself contain
//! slashes). The `api` of the model (or its provider) picks the wire format:
//! OpenAI-compatible chat completions (the default), Anthropic Messages or
//! Ollama's native chat; other values are refused with an error naming the
//! key. Each provider's `apiKey` plus its `authProfiles` become the auth
//! profiles failover rotates through. This file builds providers; it holds
//! no retry policy of its own (see `failover.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{Config, ModelApi, ModelProviderConfig};

use super::anthropic::{AnthropicProvider, KeyHeader};
use super::ollama::OllamaProvider;
use super::openai::OpenAiCompatProvider;
use super::provider::Provider;
use crate::agent::failover::{FailoverPolicy, ThinkingLevel};

/// Builds the provider for one credential at a given thinking level.
pub type ProviderBuilder = Arc<dyn Fn(ThinkingLevel) -> Arc<dyn Provider> + Send + Sync>;

/// One credential of a provider, ready to build calls with.
#[derive(Clone)]
pub struct AuthProfile {
    /// `<provider>:default` for `apiKey`, else the configured profile id.
    pub id: String,
    pub build: ProviderBuilder,
}

/// One candidate model for a run, ready to call.
#[derive(Clone)]
pub struct ResolvedModel {
    pub provider_id: String,
    pub model_id: String,
    /// The first auth profile at the configured thinking level.
    pub provider: Arc<dyn Provider>,
    pub context_window: Option<u32>,
    pub max_tokens: Option<u32>,
    /// The thinking level asked for (`thinkingDefault`).
    pub thinking: ThinkingLevel,
    /// Every credential, in rotation order (never empty when resolved from
    /// config; a hand-built model with none always uses `provider`).
    pub auth_profiles: Arc<[AuthProfile]>,
    /// Retry policy and backoff sleeper (tests inject their own sleeper).
    pub policy: Arc<FailoverPolicy>,
}

impl ResolvedModel {
    /// A model around one ready provider: no extra profiles, default retry.
    pub fn new(provider_id: &str, model_id: &str, provider: Arc<dyn Provider>) -> Self {
        ResolvedModel {
            provider_id: provider_id.to_string(),
            model_id: model_id.to_string(),
            provider,
            context_window: None,
            max_tokens: None,
            thinking: ThinkingLevel::Off,
            auth_profiles: Arc::from(Vec::new()),
            policy: Arc::new(FailoverPolicy::default()),
        }
    }

    /// This model with auth profile `index` at `thinking` as its provider.
    pub fn with_profile(&self, index: usize, thinking: ThinkingLevel) -> ResolvedModel {
        let mut model = self.clone();
        if let Some(profile) = self.auth_profiles.get(index) {
            model.provider = (profile.build)(thinking);
        }
        model.thinking = thinking;
        model
    }
}

/// Why no model could be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("no model configured: set agents.defaults.model.primary to \"<provider>/<model>\" and models.providers.<provider>.baseUrl in the config file")]
    NotConfigured,
    #[error("model reference {0:?} is not of the form \"<provider>/<model>\"")]
    BadReference(String),
    #[error(
        "model {reference:?} names provider {provider:?}, which models.providers does not define"
    )]
    UnknownProvider { reference: String, provider: String },
    #[error(
        "models.providers.{provider}.api is {api:?}; pincer speaks \"openai-completions\", \"anthropic-messages\" and \"ollama\""
    )]
    UnsupportedApi { provider: String, api: String },
}

/// The ordered model references for an agent: primary, then fallbacks.
pub fn model_chain(config: &Config, agent_id: &str, override_ref: Option<&str>) -> Vec<String> {
    let mut chain = Vec::new();
    if let Some(reference) = override_ref.filter(|r| !r.trim().is_empty()) {
        chain.push(reference.trim().to_string());
    }
    let agent_model = config
        .agents
        .list
        .iter()
        .find(|a| a.id == agent_id)
        .and_then(|a| a.model.as_ref());
    for model in [agent_model, config.agents.defaults.model.as_ref()]
        .into_iter()
        .flatten()
    {
        if let Some(primary) = model.primary() {
            chain.push(primary.to_string());
        }
        chain.extend(model.fallbacks().iter().cloned());
    }
    let mut seen = std::collections::HashSet::new();
    chain.retain(|r| seen.insert(r.clone()));
    chain
}

/// Whether the agent's primary model takes images: its `models.providers` entry lists `input`
/// `"image"` (upstream's model definition field).
pub fn primary_takes_images(config: &Config, agent_id: &str) -> bool {
    let chain = model_chain(config, agent_id, None);
    let Some((provider, model)) = chain.first().and_then(|r| r.split_once('/')) else {
        return false;
    };
    config
        .models
        .providers
        .get(provider)
        .and_then(|p| p.model(model))
        .is_some_and(|m| m.input.iter().any(|i| i == "image"))
}

/// Resolves one `provider/model` reference against `models.providers`.
pub fn resolve(
    config: &Config,
    reference: &str,
    http: &reqwest::Client,
) -> Result<ResolvedModel, ModelError> {
    let (provider_id, model_id) = reference
        .split_once('/')
        .filter(|(p, m)| !p.is_empty() && !m.is_empty())
        .ok_or_else(|| ModelError::BadReference(reference.to_string()))?;
    let provider_config =
        config
            .models
            .providers
            .get(provider_id)
            .ok_or_else(|| ModelError::UnknownProvider {
                reference: reference.to_string(),
                provider: provider_id.to_string(),
            })?;
    let definition = provider_config.model(model_id);
    let api = definition
        .and_then(|d| d.api)
        .or(provider_config.api)
        .unwrap_or(ModelApi::OpenaiCompletions);
    if !matches!(
        api,
        ModelApi::OpenaiCompletions | ModelApi::AnthropicMessages | ModelApi::Ollama
    ) {
        let api_name = serde_json::to_value(api)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        return Err(ModelError::UnsupportedApi {
            provider: provider_id.to_string(),
            api: api_name,
        });
    }
    let mut headers = provider_config.headers.clone();
    if let Some(model) = definition {
        headers.extend(model.headers.clone());
    }
    let auth_profiles = auth_profiles(provider_id, provider_config, api, &headers, http);
    let thinking = thinking_default(config, None);
    let first = auth_profiles
        .first()
        .expect("auth_profiles always holds at least the default profile");
    Ok(ResolvedModel {
        provider_id: provider_id.to_string(),
        model_id: model_id.to_string(),
        provider: (first.build)(thinking),
        context_window: definition.and_then(|d| d.context_window),
        max_tokens: definition.and_then(|d| d.max_tokens),
        thinking,
        auth_profiles: Arc::from(auth_profiles),
        policy: Arc::new(FailoverPolicy::default()),
    })
}

/// `apiKey` (as `<provider>:default`, even when absent) then `authProfiles`.
fn auth_profiles(
    provider_id: &str,
    config: &ModelProviderConfig,
    api: ModelApi,
    headers: &BTreeMap<String, String>,
    http: &reqwest::Client,
) -> Vec<AuthProfile> {
    let default = (format!("{provider_id}:default"), config.api_key.clone());
    let extra = config
        .auth_profiles
        .iter()
        .map(|p| (p.id.clone(), p.api_key.clone()));
    std::iter::once(default)
        .chain(extra)
        .map(|(id, key)| AuthProfile {
            id,
            build: provider_builder(
                api,
                &config.base_url,
                key,
                headers.clone(),
                http.clone(),
                config.auth_header.unwrap_or(false),
            ),
        })
        .collect()
}

fn provider_builder(
    api: ModelApi,
    base_url: &str,
    key: Option<String>,
    headers: BTreeMap<String, String>,
    http: reqwest::Client,
    auth_header: bool,
) -> ProviderBuilder {
    let base_url = base_url.to_string();
    // OpenAI-compatible and Ollama servers take the key as `Authorization:
    // Bearer` already; `authHeader` changes only Anthropic's `x-api-key`.
    let key_header = if auth_header {
        KeyHeader::AuthorizationBearer
    } else {
        KeyHeader::ApiKey
    };
    Arc::new(move |thinking: ThinkingLevel| -> Arc<dyn Provider> {
        let (key, headers, http) = (key.clone(), headers.clone(), http.clone());
        match api {
            ModelApi::AnthropicMessages => Arc::new(
                AnthropicProvider::with_key_header(&base_url, key, headers, http, key_header)
                    .with_thinking(thinking),
            ),
            ModelApi::Ollama => {
                Arc::new(OllamaProvider::new(&base_url, key, headers, http).with_thinking(thinking))
            }
            _ => Arc::new(
                OpenAiCompatProvider::new(&base_url, key, headers, http).with_thinking(thinking),
            ),
        }
    })
}

/// The agent's `thinkingDefault`, else `agents.defaults.thinkingDefault`.
fn thinking_default(config: &Config, agent_id: Option<&str>) -> ThinkingLevel {
    let agent_level = agent_id.and_then(|id| {
        config
            .agents
            .list
            .iter()
            .find(|a| a.id == id)
            .and_then(|a| a.thinking_default.as_deref())
    });
    agent_level
        .or(config.agents.defaults.thinking_default.as_deref())
        .and_then(ThinkingLevel::parse)
        .unwrap_or_default()
}

/// Resolves the whole chain; errors only when nothing at all resolves.
pub fn resolve_chain(
    config: &Config,
    agent_id: &str,
    override_ref: Option<&str>,
    http: &reqwest::Client,
) -> Result<Vec<ResolvedModel>, ModelError> {
    let chain = model_chain(config, agent_id, override_ref);
    if chain.is_empty() {
        return Err(ModelError::NotConfigured);
    }
    let mut resolved = Vec::new();
    let mut first_error = None;
    for reference in &chain {
        match resolve(config, reference, http) {
            Ok(model) => {
                let thinking = thinking_default(config, Some(agent_id));
                resolved.push(model.with_profile(0, thinking));
            }
            Err(e) => {
                log::warn!("skipping model {reference}: {e}");
                first_error.get_or_insert(e);
            }
        }
    }
    match (resolved.is_empty(), first_error) {
        (true, Some(e)) => Err(e),
        _ => Ok(resolved),
    }
}
