//! Model resolution: from `agents.*.model` and `models.providers` to a
//! provider instance and the model id it expects.
//!
//! A model reference is `provider/model` (the model part may itself contain
//! slashes). Only the OpenAI-compatible chat-completions API is wired so far;
//! other `api` values are refused with an error naming the key.

use std::sync::Arc;

use crate::config::Config;

use super::openai::OpenAiCompatProvider;
use super::provider::Provider;

/// One candidate model for a run, ready to call.
#[derive(Clone)]
pub struct ResolvedModel {
    pub provider_id: String,
    pub model_id: String,
    pub provider: Arc<dyn Provider>,
    pub context_window: Option<u32>,
    pub max_tokens: Option<u32>,
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
        "models.providers.{provider}.api is {api:?}; pincer speaks \"openai-completions\" so far"
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
    if let Some(api) = &provider_config.api {
        let api_name = serde_json::to_value(api)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default();
        if api_name != "openai-completions" {
            return Err(ModelError::UnsupportedApi {
                provider: provider_id.to_string(),
                api: api_name,
            });
        }
    }
    let definition = provider_config.models.iter().find(|m| m.id == model_id);
    let provider = OpenAiCompatProvider::new(
        &provider_config.base_url,
        provider_config.api_key.clone(),
        provider_config.headers.clone(),
        http.clone(),
    );
    Ok(ResolvedModel {
        provider_id: provider_id.to_string(),
        model_id: model_id.to_string(),
        provider: Arc::new(provider),
        context_window: definition.and_then(|d| d.context_window),
        max_tokens: definition.and_then(|d| d.max_tokens),
    })
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
            Ok(model) => resolved.push(model),
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
