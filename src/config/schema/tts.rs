//! `tts` (OpenClaw's `TtsConfigSchema`, formerly `messages.tts`): spoken
//! replies. pincer speaks through the `openai` provider, an OpenAI-compatible
//! `/audio/speech` endpoint (OpenAI, or a LAN server such as Kokoro or
//! LocalAI), as Ogg/Opus voice notes. Honoured: `auto` (`off`, `always`,
//! `inbound`, `tagged`), the legacy `enabled`, `mode: "final"`, `provider: "openai"`,
//! `providers.openai` (`apiKey`, `baseUrl`, `model`, `speakerVoice` / `voice`,
//! `instructions`, `responseFormat` `opus`/`wav`/`pcm`, `extraBody`),
//! `maxTextLength`, `timeoutMs`, and the same block per channel and account
//! (`channels.<telegram|discord|slack>[.accounts.<id>].tts`) deep-merged
//! over it. Refused by validation as "not supported by pincer": `mode:
//! "all"`, other providers, compressed response formats other than Opus
//! (pincer encodes uncompressed speech to Opus, `media::voice_encode`, but
//! decodes no MP3, AAC or FLAC); refused by
//! name (`unsupported.rs`): personas, `summaryModel`, `modelOverrides`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Characters spoken at most unless configured (upstream's default).
pub const DEFAULT_TTS_MAX_TEXT_LENGTH: usize = 4096;
/// Milliseconds one synthesis may take unless configured (upstream's default).
pub const DEFAULT_TTS_TIMEOUT_MS: u64 = 30_000;
/// The OpenAI provider's defaults (upstream's).
pub const DEFAULT_TTS_OPENAI_MODEL: &str = "gpt-4o-mini-tts";
pub const DEFAULT_TTS_OPENAI_VOICE: &str = "coral";
pub const DEFAULT_TTS_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TtsConfig {
    /// `off`, `always`, `inbound` (after an inbound voice note), `tagged`
    /// (a reply with a `[[tts…]]` tag, `reply::tts_tags`).
    pub auto: Option<String>,
    /// Legacy toggle: `true` is `auto: "always"` when `auto` is unset.
    pub enabled: Option<bool>,
    /// `final` (the default); `all` is refused.
    pub mode: Option<String>,
    /// `openai` (the only one pincer has).
    pub provider: Option<String>,
    pub providers: BTreeMap<String, TtsProviderConfig>,
    pub max_text_length: Option<usize>,
    pub timeout_ms: Option<u64>,
}

/// `tts.providers.openai`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TtsProviderConfig {
    pub api_key: Option<String>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub speaker_voice: Option<String>,
    /// Legacy alias of `speakerVoice`.
    pub voice: Option<String>,
    pub instructions: Option<String>,
    /// `opus` (the default), or `wav`/`pcm`, which pincer encodes to Opus.
    pub response_format: Option<String>,
    pub extra_body: Option<serde_json::Map<String, serde_json::Value>>,
}

impl TtsConfig {
    /// `other` deep-merged over `self` (later layers win key by key).
    pub fn merged(&self, other: &TtsConfig) -> TtsConfig {
        let mut providers = self.providers.clone();
        for (id, provider) in &other.providers {
            let base = providers.remove(id).unwrap_or_default();
            providers.insert(id.clone(), base.merged(provider));
        }
        TtsConfig {
            auto: other.auto.clone().or_else(|| self.auto.clone()),
            enabled: other.enabled.or(self.enabled),
            mode: other.mode.clone().or_else(|| self.mode.clone()),
            provider: other.provider.clone().or_else(|| self.provider.clone()),
            providers,
            max_text_length: other.max_text_length.or(self.max_text_length),
            timeout_ms: other.timeout_ms.or(self.timeout_ms),
        }
    }

    /// The auto mode: `auto`, else `always` when the legacy `enabled` is
    /// true, else `off`.
    pub fn effective_auto(&self) -> &str {
        match (self.auto.as_deref(), self.enabled) {
            (Some(auto), _) => auto,
            (None, Some(true)) => "always",
            _ => "off",
        }
    }
}

impl TtsProviderConfig {
    fn merged(&self, other: &TtsProviderConfig) -> TtsProviderConfig {
        TtsProviderConfig {
            api_key: other.api_key.clone().or_else(|| self.api_key.clone()),
            base_url: other.base_url.clone().or_else(|| self.base_url.clone()),
            model: other.model.clone().or_else(|| self.model.clone()),
            speaker_voice: other
                .speaker_voice
                .clone()
                .or_else(|| self.speaker_voice.clone()),
            voice: other.voice.clone().or_else(|| self.voice.clone()),
            instructions: other
                .instructions
                .clone()
                .or_else(|| self.instructions.clone()),
            response_format: other
                .response_format
                .clone()
                .or_else(|| self.response_format.clone()),
            extra_body: other.extra_body.clone().or_else(|| self.extra_body.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_merge_key_by_key_and_enabled_means_always() {
        let base: TtsConfig = serde_json::from_str(
            r#"{"enabled": true, "providers": {"openai": {"apiKey": "k", "speakerVoice": "coral"}}}"#,
        )
        .expect("base");
        assert_eq!(base.effective_auto(), "always");
        let channel: TtsConfig = serde_json::from_str(
            r#"{"auto": "inbound", "providers": {"openai": {"speakerVoice": "shimmer"}}}"#,
        )
        .expect("channel");
        let merged = base.merged(&channel);
        assert_eq!(merged.effective_auto(), "inbound");
        let openai = &merged.providers["openai"];
        assert_eq!(openai.api_key.as_deref(), Some("k"));
        assert_eq!(openai.speaker_voice.as_deref(), Some("shimmer"));
        assert_eq!(TtsConfig::default().effective_auto(), "off");
    }
}
