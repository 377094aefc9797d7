//! `tools.media`: understanding inbound media (OpenClaw's `ToolsMediaSchema`).
//! pincer implements audio transcription through OpenAI-compatible
//! `/audio/transcriptions` endpoints (a capability-tagged `models` list, or
//! the Groq or OpenAI provider when one is configured) and hands images to a
//! vision model as image parts. Keys upstream accepts that pincer does not
//! implement (`video`, `concurrency`, CLI entries, scopes, attachment
//! policies, transcript echo) are refused by `unsupported.rs` or validation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Largest audio file sent for transcription unless configured (upstream's default).
pub const DEFAULT_AUDIO_MAX_BYTES: u64 = 20 * 1024 * 1024;
/// Largest image handed to a model unless configured (upstream's default).
pub const DEFAULT_IMAGE_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Seconds one transcription may take unless configured (upstream's default).
pub const DEFAULT_AUDIO_TIMEOUT_SECONDS: u64 = 60;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MediaToolsConfig {
    /// Capability-tagged model entries, tried in order.
    pub models: Vec<MediaModelEntry>,
    pub audio: MediaAudioConfig,
    pub image: MediaImageConfig,
}

/// One `tools.media.models[]` entry (provider entries only).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MediaModelEntry {
    /// `provider` (the default); `cli` is refused by validation.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// A `models.providers` id (its base URL, key and headers are used).
    pub provider: Option<String>,
    pub model: Option<String>,
    /// `audio` and/or `image`; empty: the provider's own capabilities.
    pub capabilities: Vec<String>,
    pub max_bytes: Option<u64>,
    pub max_chars: Option<usize>,
    pub prompt: Option<String>,
    pub timeout_seconds: Option<u64>,
    pub language: Option<String>,
    pub base_url: Option<String>,
    pub headers: BTreeMap<String, String>,
}

/// `tools.media.audio`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MediaAudioConfig {
    /// `false` turns transcription off.
    pub enabled: Option<bool>,
    pub max_bytes: Option<u64>,
    /// Transcripts are cut to this many characters (unset: whole).
    pub max_chars: Option<usize>,
    /// Sent as the transcription `prompt` (unset: none).
    pub prompt: Option<String>,
    pub timeout_seconds: Option<u64>,
    /// Sent as the transcription `language` hint.
    pub language: Option<String>,
    /// The endpoint root for entries that name none.
    pub base_url: Option<String>,
    pub headers: BTreeMap<String, String>,
}

/// `tools.media.image`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MediaImageConfig {
    /// Images larger than this are not handed to the model.
    pub max_bytes: Option<u64>,
}

impl MediaAudioConfig {
    /// Whether transcription runs (unset: it does when a model is found).
    pub fn is_enabled(&self) -> bool {
        self.enabled != Some(false)
    }
}

impl MediaImageConfig {
    /// The image byte cap in force.
    pub fn effective_max_bytes(&self) -> u64 {
        self.max_bytes.unwrap_or(DEFAULT_IMAGE_MAX_BYTES)
    }
}
