//! Audio attachments to transcripts: which models `tools.media` offers for audio (the `models`
//! entries tagged or known for audio, else the Groq or OpenAI provider when configured, as
//! upstream's auto-detection), each tried in order within its `maxBytes`; an Ogg voice note is
//! checked page by page first, so a truncated recording is named instead of uploaded.
//!
//! This file must not format for the model beyond the transcript text.

use std::path::Path;
use std::time::Duration;

use crate::config::schema::{
    MediaModelEntry, DEFAULT_AUDIO_MAX_BYTES, DEFAULT_AUDIO_TIMEOUT_SECONDS,
};
use crate::config::Config;
use crate::media::audio::{transcribe, AudioEndpoint, Transcription};
use crate::media::sniff;
use crate::pipeline::context::MediaItem;

use super::MediaInput;

/// Audio files smaller than this are taken as empty (upstream's `MIN_AUDIO_FILE_BYTES`).
pub const MIN_AUDIO_FILE_BYTES: u64 = 1024;
/// The transcript of such a file (upstream's wording).
pub const EMPTY_VOICE_NOTE_PLACEHOLDER: &str =
    "[Voice note could not be transcribed because the audio attachment was too small]";

/// Providers whose entries handle audio without `capabilities` (upstream's table).
const AUDIO_PROVIDERS: &[&str] = &[
    "groq",
    "xai",
    "deepgram",
    "senseaudio",
    "mistral",
    "openrouter",
    "google",
    "deepinfra",
    "elevenlabs",
];
/// Providers tried when no entry handles audio, in upstream's priority order, with their
/// default transcription models.
const AUTO_PROVIDERS: &[(&str, &str)] = &[
    ("groq", "whisper-large-v3-turbo"),
    ("openai", "gpt-4o-transcribe"),
];

/// One transcription model, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AudioModel {
    /// `provider/model`, for logs and notices.
    pub label: String,
    pub model: String,
    pub endpoint: AudioEndpoint,
    pub max_bytes: u64,
    pub max_chars: Option<usize>,
    pub prompt: Option<String>,
    pub language: Option<String>,
    pub timeout: Duration,
}

/// What became of one audio attachment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AudioOutcome {
    Transcript(String),
    Disabled,
    NoModel,
    /// Why, for the sender.
    Failed(String),
}

/// The audio models `config` offers, in the order they are tried (empty when audio is off).
pub fn audio_models(config: &Config) -> Result<Vec<AudioModel>, String> {
    let media = &config.tools.media;
    if !media.audio.is_enabled() {
        return Ok(Vec::new());
    }
    let explicit: Vec<&MediaModelEntry> = media
        .models
        .iter()
        .filter(|entry| handles_audio(entry))
        .collect();
    if !explicit.is_empty() {
        return explicit.into_iter().map(|e| resolve(config, e)).collect();
    }
    Ok(AUTO_PROVIDERS
        .iter()
        .filter(|(id, _)| config.models.providers.contains_key(*id))
        .filter_map(|(id, model)| {
            let entry = MediaModelEntry {
                provider: Some(id.to_string()),
                model: Some(model.to_string()),
                ..MediaModelEntry::default()
            };
            resolve(config, &entry).ok()
        })
        .collect())
}

fn handles_audio(entry: &MediaModelEntry) -> bool {
    // Provider entries only (validation refuses `cli`).
    if entry.kind.as_deref().is_some_and(|k| k != "provider") {
        return false;
    }
    if entry.capabilities.is_empty() {
        entry
            .provider
            .as_deref()
            .is_some_and(|p| AUDIO_PROVIDERS.contains(&p))
    } else {
        entry.capabilities.iter().any(|c| c == "audio")
    }
}

/// An entry with its provider's base URL, key and headers, and the `tools.media.audio` defaults.
fn resolve(config: &Config, entry: &MediaModelEntry) -> Result<AudioModel, String> {
    let audio = &config.tools.media.audio;
    let provider_id = entry.provider.as_deref().unwrap_or_default();
    let provider = config.models.providers.get(provider_id);
    let model = entry
        .model
        .clone()
        .or_else(|| {
            AUTO_PROVIDERS
                .iter()
                .find(|(id, _)| *id == provider_id)
                .map(|(_, m)| m.to_string())
        })
        .ok_or_else(|| format!("tools.media.models entry for {provider_id:?} names no model"))?;
    let base_url = entry
        .base_url
        .clone()
        .or_else(|| audio.base_url.clone())
        .or_else(|| provider.map(|p| p.base_url.clone()))
        .filter(|u| !u.trim().is_empty())
        .ok_or_else(|| {
            format!("{provider_id:?} has no baseUrl (set models.providers.{provider_id} or tools.media.audio.baseUrl)")
        })?;
    let mut headers: Vec<(String, String)> = Vec::new();
    for map in [
        provider.map(|p| &p.headers),
        Some(&audio.headers),
        Some(&entry.headers),
    ]
    .into_iter()
    .flatten()
    {
        for (name, value) in map {
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            headers.push((name.clone(), value.clone()));
        }
    }
    let seconds = entry
        .timeout_seconds
        .or(audio.timeout_seconds)
        .unwrap_or(DEFAULT_AUDIO_TIMEOUT_SECONDS);
    Ok(AudioModel {
        label: format!("{provider_id}/{model}"),
        model,
        endpoint: AudioEndpoint {
            base_url,
            api_key: provider.and_then(|p| p.api_key.clone()),
            headers,
        },
        max_bytes: entry
            .max_bytes
            .or(audio.max_bytes)
            .unwrap_or(DEFAULT_AUDIO_MAX_BYTES),
        max_chars: entry.max_chars.or(audio.max_chars),
        prompt: entry.prompt.clone().or_else(|| audio.prompt.clone()),
        language: entry.language.clone().or_else(|| audio.language.clone()),
        timeout: Duration::from_secs(seconds),
    })
}

/// Transcribes one attachment with the first model that takes it.
pub(super) async fn transcribe_item(
    input: &MediaInput<'_>,
    models: &Result<Vec<AudioModel>, String>,
    item: &MediaItem,
) -> AudioOutcome {
    if !input.config.tools.media.audio.is_enabled() {
        return AudioOutcome::Disabled;
    }
    let models = match models {
        Ok(models) if models.is_empty() => return AudioOutcome::NoModel,
        Ok(models) => models,
        Err(reason) => return AudioOutcome::Failed(reason.clone()),
    };
    let path = Path::new(&item.path);
    let checked = {
        let path = path.to_path_buf();
        tokio::task::spawn_blocking(move || check_file(&path)).await
    };
    let size = match checked {
        Ok(Ok(size)) => size,
        Ok(Err(reason)) => return AudioOutcome::Failed(reason),
        Err(error) => return AudioOutcome::Failed(format!("the check failed ({error})")),
    };
    if size < MIN_AUDIO_FILE_BYTES {
        return AudioOutcome::Transcript(EMPTY_VOICE_NOTE_PLACEHOLDER.to_string());
    }
    let mime = item.mime_type.as_deref().unwrap_or("audio/ogg");
    let mime = mime.split(';').next().unwrap_or(mime).trim();
    let file_name = format!("audio.{}", sniff::extension_for(mime));
    let mut reasons: Vec<String> = Vec::new();
    for model in models {
        if size > model.max_bytes {
            reasons.push(format!(
                "{}: the recording is {} bytes, over its {} byte limit",
                model.label, size, model.max_bytes
            ));
            continue;
        }
        let job = Transcription {
            model: &model.model,
            language: model.language.as_deref(),
            prompt: model.prompt.as_deref(),
            file: path,
            file_name: &file_name,
            mime,
            timeout: model.timeout,
        };
        match transcribe(input.http, &model.endpoint, job).await {
            Ok(text) => {
                let text = match model.max_chars {
                    Some(max) => text.chars().take(max).collect(),
                    None => text,
                };
                return AudioOutcome::Transcript(text);
            }
            Err(error) => {
                log::warn!("transcription with {} failed: {error}", model.label);
                reasons.push(format!("{}: {error}", model.label));
            }
        }
    }
    AudioOutcome::Failed(reasons.join("; "))
}

/// The file's size once it is known to be sound: an Ogg file is walked page by page (blocking).
fn check_file(path: &Path) -> Result<u64, String> {
    let size = std::fs::metadata(path)
        .map_err(|e| format!("the file could not be read ({e})"))?
        .len();
    let mut head = [0u8; 4];
    let is_ogg = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok()
        && &head == b"OggS";
    if is_ogg {
        crate::media::ogg::check(path).map_err(|e| e.to_string())?;
    }
    Ok(size)
}
