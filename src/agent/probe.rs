//! One real call to a configured provider, to tell whether it answers: the
//! Control UI's "test" buttons (`models.probe`, the setup page). The model
//! asked is the one the default model chain names for that provider, else
//! the provider's first listed model; each credential (`apiKey`, then
//! `authProfiles`) is tried once, with a tiny prompt and a token cap.
//! Statuses are upstream's probe statuses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Config;

use super::providers::models::resolve;
use super::providers::{ChatMessage, ProviderError, ProviderRequest};

/// Output tokens one probe may cost (upstream's `PROBE_MAX_TOKENS`).
pub const PROBE_MAX_TOKENS: u32 = 8;
/// Characters of the model's answer kept for display.
pub const PROBE_REPLY_CHARS: usize = 200;
/// What the probe asks.
const PROBE_PROMPT: &str = "Reply with the single word OK.";

/// How one probe ended (upstream's statuses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeStatus {
    Ok,
    Auth,
    Billing,
    RateLimit,
    Timeout,
    Format,
    NoModel,
    Unknown,
}

impl ProbeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeStatus::Ok => "ok",
            ProbeStatus::Auth => "auth",
            ProbeStatus::Billing => "billing",
            ProbeStatus::RateLimit => "rate_limit",
            ProbeStatus::Timeout => "timeout",
            ProbeStatus::Format => "format",
            ProbeStatus::NoModel => "no_model",
            ProbeStatus::Unknown => "unknown",
        }
    }

    fn of(error: &ProviderError) -> ProbeStatus {
        match error {
            ProviderError::Http { status, .. } => match status {
                401 | 403 => ProbeStatus::Auth,
                402 => ProbeStatus::Billing,
                429 => ProbeStatus::RateLimit,
                408 | 504 => ProbeStatus::Timeout,
                400 | 404 | 405 | 415 | 422 => ProbeStatus::Format,
                _ => ProbeStatus::Unknown,
            },
            ProviderError::Protocol(_) => ProbeStatus::Format,
            ProviderError::Cancelled => ProbeStatus::Timeout,
            ProviderError::Network(message) if message.contains("timed out") => {
                ProbeStatus::Timeout
            }
            ProviderError::Network(_) => ProbeStatus::Unknown,
        }
    }
}

/// One credential's probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeResult {
    /// `<provider>:default` for `apiKey`, else the auth profile's id.
    pub profile_id: String,
    /// `provider/model` asked.
    pub model: String,
    pub status: ProbeStatus,
    pub latency_ms: u64,
    /// What went wrong, in the provider's words (keys never included).
    pub error: Option<String>,
    /// The start of the model's answer.
    pub reply: Option<String>,
}

/// Why nothing could be probed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error("models.providers has no provider {0:?}")]
    UnknownProvider(String),
    #[error("provider {0:?} lists no model and no configured model uses it")]
    NoModel(String),
    #[error("no auth profile {profile:?} for provider {provider:?}")]
    UnknownProfile { provider: String, profile: String },
    #[error("{0}")]
    Model(String),
}

/// The model reference a probe of `provider_id` asks.
fn probe_reference(config: &Config, provider_id: &str) -> Option<String> {
    let prefix = format!("{provider_id}/");
    let default_agent = config.agents.default_agent_id();
    let agent_model = config
        .agents
        .entry(&default_agent)
        .and_then(|a| a.model.as_ref());
    let configured = [agent_model, config.agents.defaults.model.as_ref()]
        .into_iter()
        .flatten()
        .flat_map(|m| {
            m.primary()
                .map(str::to_string)
                .into_iter()
                .chain(m.fallbacks().iter().cloned())
        })
        .find(|r| r.starts_with(&prefix));
    configured.or_else(|| {
        let provider = config.models.providers.get(provider_id)?;
        provider.models.first().map(|m| format!("{prefix}{}", m.id))
    })
}

/// Probes `provider_id` (every credential, or only `profile`), each call
/// bounded by `timeout`.
pub async fn probe_provider(
    config: &Config,
    provider_id: &str,
    profile: Option<&str>,
    http: &reqwest::Client,
    timeout: Duration,
) -> Result<Vec<ProbeResult>, ProbeError> {
    if !config.models.providers.contains_key(provider_id) {
        return Err(ProbeError::UnknownProvider(provider_id.to_string()));
    }
    let reference = probe_reference(config, provider_id)
        .ok_or_else(|| ProbeError::NoModel(provider_id.to_string()))?;
    let model = resolve(config, &reference, http).map_err(|e| ProbeError::Model(e.to_string()))?;
    let profiles: Vec<_> = model
        .auth_profiles
        .iter()
        .filter(|p| profile.is_none_or(|wanted| p.id == wanted))
        .cloned()
        .collect();
    if let (Some(wanted), true) = (profile, profiles.is_empty()) {
        return Err(ProbeError::UnknownProfile {
            provider: provider_id.to_string(),
            profile: wanted.to_string(),
        });
    }
    let mut results = Vec::new();
    for auth in profiles {
        let provider = (auth.build)(model.thinking);
        let request = ProviderRequest {
            model: model.model_id.clone(),
            messages: vec![ChatMessage::user(PROBE_PROMPT)],
            max_tokens: Some(PROBE_MAX_TOKENS),
            tools: Arc::from(Vec::new()),
        };
        let (tx, mut rx) = mpsc::channel(32);
        let cancel = CancellationToken::new();
        let started = Instant::now();
        let call = provider.stream(request, tx, cancel.clone());
        let drain = async { while rx.recv().await.is_some() {} };
        let outcome = tokio::time::timeout(timeout, async { tokio::join!(call, drain).0 }).await;
        let latency_ms = started.elapsed().as_millis() as u64;
        let (status, error, reply) = match outcome {
            Ok(Ok(done)) => {
                let reply: String = done.text.chars().take(PROBE_REPLY_CHARS).collect();
                (ProbeStatus::Ok, None, Some(reply))
            }
            Ok(Err(e)) => (ProbeStatus::of(&e), Some(e.to_string()), None),
            Err(_) => {
                cancel.cancel();
                let message = format!("no answer within {} ms", timeout.as_millis());
                (ProbeStatus::Timeout, Some(message), None)
            }
        };
        results.push(ProbeResult {
            profile_id: auth.id.clone(),
            model: reference.clone(),
            status,
            latency_ms,
            error,
            reply,
        });
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_failures_map_to_upstream_statuses() {
        let http = |status| ProviderError::Http {
            status,
            message: String::new(),
            retry_after_ms: None,
        };
        assert_eq!(ProbeStatus::of(&http(401)), ProbeStatus::Auth);
        assert_eq!(ProbeStatus::of(&http(402)), ProbeStatus::Billing);
        assert_eq!(ProbeStatus::of(&http(429)), ProbeStatus::RateLimit);
        assert_eq!(ProbeStatus::of(&http(404)), ProbeStatus::Format);
        assert_eq!(ProbeStatus::of(&http(500)), ProbeStatus::Unknown);
        assert_eq!(
            ProbeStatus::of(&ProviderError::Network("connection refused".into())),
            ProbeStatus::Unknown
        );
    }

    #[test]
    fn the_probed_model_is_the_chains_else_the_first_listed() {
        let config: Config = serde_json::from_value(serde_json::json!({
            "models": {"providers": {
                "a": {"baseUrl": "http://127.0.0.1:1", "models": [{"id": "m1"}, {"id": "m2"}]},
                "b": {"baseUrl": "http://127.0.0.1:1", "models": []},
            }},
            "agents": {"defaults": {"model": {"primary": "x/y", "fallbacks": ["a/m2"]}}},
        }))
        .expect("config");
        assert_eq!(probe_reference(&config, "a").as_deref(), Some("a/m2"));
        assert_eq!(probe_reference(&config, "b"), None);
    }
}
