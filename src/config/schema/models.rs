//! The `models` section: custom model providers (base URL, API key, wire
//! API, headers) and the models each one serves.
//!
//! Names follow OpenClaw's `ModelProviderConfig` / `ModelDefinitionConfig`
//! (`src/config/types.models.ts`). `apiKey` is usually written as
//! `"${OPENAI_API_KEY}"`; substitution happens at load time, not here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ModelsConfig {
    /// "merge" (default) adds to the built-in catalog, "replace" replaces it.
    pub mode: Option<String>,
    pub providers: BTreeMap<String, ModelProviderConfig>,
}

/// The wire API a provider speaks (upstream `MODEL_APIS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelApi {
    OpenaiCompletions,
    OpenaiResponses,
    OpenaiCodexResponses,
    AnthropicMessages,
    GoogleGenerativeAi,
    GithubCopilot,
    BedrockConverseStream,
    Ollama,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ModelProviderConfig {
    /// Required: the provider's API root.
    pub base_url: String,
    pub api_key: Option<String>,
    pub api: Option<ModelApi>,
    /// Extra request headers (values are secrets).
    pub headers: BTreeMap<String, String>,
    /// Send the key as `Authorization: Bearer` (provider default otherwise).
    pub auth_header: Option<bool>,
    /// More credentials for this provider, tried in order after `apiKey`
    /// when a key is refused or rate limited (upstream's auth profiles,
    /// `<provider>:<name>` ids).
    pub auth_profiles: Vec<AuthProfileConfig>,
    pub models: Vec<ModelDefinition>,
}

/// One extra credential of a provider.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AuthProfileConfig {
    /// Profile id, e.g. `anthropic:work`.
    pub id: String,
    /// Usually `"${ANTHROPIC_API_KEY_WORK}"`.
    pub api_key: Option<String>,
}

impl ModelProviderConfig {
    /// The model with this id.
    pub fn model(&self, model_id: &str) -> Option<&ModelDefinition> {
        self.models.iter().find(|model| model.id == model_id)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ModelDefinition {
    pub id: String,
    pub name: Option<String>,
    /// Overrides the provider's API for this model.
    pub api: Option<ModelApi>,
    pub context_window: Option<u32>,
    pub context_tokens: Option<u32>,
    pub max_tokens: Option<u32>,
    pub reasoning: Option<bool>,
    /// "text" and/or "image".
    pub input: Vec<String>,
    pub headers: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_with_models_parses_upstream_names() {
        let provider: ModelProviderConfig = serde_json::from_str(
            r#"{"baseUrl":"http://127.0.0.1:11434","api":"ollama","models":[
                {"id":"qwen3:4b","contextWindow":32768,"maxTokens":8192,"input":["text"]}]}"#,
        )
        .expect("provider");
        assert_eq!(provider.api, Some(ModelApi::Ollama));
        assert_eq!(
            provider.model("qwen3:4b").and_then(|m| m.context_window),
            Some(32768)
        );
        let api: ModelApi = serde_json::from_str("\"anthropic-messages\"").expect("api name");
        assert_eq!(api, ModelApi::AnthropicMessages);
        let api: ModelApi = serde_json::from_str("\"openai-completions\"").expect("api name");
        assert_eq!(api, ModelApi::OpenaiCompletions);
    }
}
