//! Spoken replies (`tts`, `schema/tts.rs`): whether a run's final reply is
//! also spoken, and the voice note that carries it.
//!
//! - The settings are `tts`, then the channel's `tts`, then the account's,
//!   deep-merged key by key (upstream's order without personas or `/tts`
//!   preferences). `auto: "always"` speaks every final reply, `"inbound"`
//!   only a reply to a message that carried audio (a voice note),
//!   `"tagged"` only a reply carrying a `[[tts…]]` tag (`reply::tts_tags`:
//!   its voice and model settings apply, a hidden `[[tts:text]]` block is
//!   what is said), `"off"` none; the legacy `enabled: true` is `always`.
//!   Whenever `tts` is not off the tags leave the shown text; a reply that
//!   sends files of its own is not spoken (upstream's rules).
//! - The text is the reply without its `MEDIA:` lines and markdown marks,
//!   cut to `maxTextLength` characters (default 4,096).
//! - The speech comes from an OpenAI-compatible `POST {baseUrl}/audio/speech`
//!   (`providers.openai`: `baseUrl`, else `OPENAI_TTS_BASE_URL`, else
//!   OpenAI's; `apiKey`, else `OPENAI_API_KEY`; `model` default
//!   `gpt-4o-mini-tts`; `speakerVoice`/`voice` default `coral`;
//!   `instructions`; `extraBody`) with `response_format` `responseFormat`
//!   (default `opus`), streamed to a file in the media area under a byte
//!   cap. Ogg/Opus is walked page by page (`media::ogg`) and goes as it is;
//!   a WAV answer (whatever was asked) or raw PCM (`pcm`: 24 kHz 16-bit
//!   mono) is encoded to Ogg/Opus (`media::voice_encode`, at most
//!   [`MAX_SPEECH_SECONDS`]) and walked too; other audio (MP3, AAC…) is
//!   refused with a message in the chat. The voice note goes out with the
//!   reply's text as its caption where the text was held for it
//!   (`channels::stream`).
//!
//! Whatever fails is said in the chat in one line after the text, so
//! nothing is lost.

use std::path::Path;
use std::time::Duration;

use crate::config::schema::{
    TtsConfig, DEFAULT_TTS_MAX_TEXT_LENGTH, DEFAULT_TTS_OPENAI_BASE_URL, DEFAULT_TTS_OPENAI_MODEL,
    DEFAULT_TTS_OPENAI_VOICE, DEFAULT_TTS_TIMEOUT_MS,
};
use crate::config::Config;
use crate::media::audio::{synthesize, AudioEndpoint, Speech};
use crate::media::ogg::{self, OggCodec};
use crate::media::voice_encode::{self, PcmInput};
use crate::reply::media_lines::split_media_lines;
use crate::reply::tts_tags::extract_tts_tags;

/// The largest answer of a speech endpoint accepted (on disk, never in
/// RAM): about 17 minutes of 24 kHz 16-bit WAV, far more of Opus.
pub const MAX_SPEECH_BYTES: u64 = 48 * 1024 * 1024;
/// The longest spoken reply encoded (4,096 characters take about 5 minutes).
pub const MAX_SPEECH_SECONDS: u64 = 15 * 60;
/// OpenAI's `pcm`: headerless 16-bit little-endian mono at 24 kHz.
const PCM_RATE: u32 = 24_000;

/// Which replies of a run are spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeechTrigger {
    /// Every final reply (`always`, or `inbound` after a voice note).
    Every,
    /// Only a reply carrying a `[[tts…]]` tag (`tagged`).
    Tagged,
    /// None (`inbound` after a typed message): the tags still leave the text.
    Never,
}

/// How one reply is spoken.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeechPlan {
    pub trigger: SpeechTrigger,
    pub endpoint: AudioEndpoint,
    pub model: String,
    pub voice: String,
    pub instructions: Option<String>,
    pub extra_body: Option<serde_json::Map<String, serde_json::Value>>,
    /// `opus`, `wav` or `pcm`.
    pub response_format: String,
    pub max_text_length: usize,
    pub timeout: Duration,
}

/// The merged `tts` settings of a channel account.
pub fn settings_for(config: &Config, channel: &str, account_id: &str) -> TtsConfig {
    let channels = &config.channels;
    let layers: [Option<&TtsConfig>; 2] = match channel {
        "telegram" => {
            let c = channels.telegram.as_ref();
            [
                c.and_then(|c| c.tts.as_ref()),
                c.and_then(|c| c.accounts.get(account_id))
                    .and_then(|a| a.tts.as_ref()),
            ]
        }
        "discord" => {
            let c = channels.discord.as_ref();
            [
                c.and_then(|c| c.tts.as_ref()),
                c.and_then(|c| c.accounts.get(account_id))
                    .and_then(|a| a.tts.as_ref()),
            ]
        }
        "slack" => {
            let c = channels.slack.as_ref();
            [
                c.and_then(|c| c.tts.as_ref()),
                c.and_then(|c| c.accounts.get(account_id))
                    .and_then(|a| a.tts.as_ref()),
            ]
        }
        _ => [None, None],
    };
    layers
        .into_iter()
        .flatten()
        .fold(config.tts.clone(), |merged, layer| merged.merged(layer))
}

/// The plan for a reply on `channel`/`account_id` (`None`: `tts` is off,
/// nothing is spoken and `[[tts…]]` tags are left alone, as upstream).
/// `inbound_audio`: the message answered carried audio.
pub fn plan(
    config: &Config,
    channel: &str,
    account_id: &str,
    inbound_audio: bool,
) -> Option<SpeechPlan> {
    let settings = settings_for(config, channel, account_id);
    let trigger = match settings.effective_auto() {
        "always" => SpeechTrigger::Every,
        "inbound" if inbound_audio => SpeechTrigger::Every,
        "inbound" => SpeechTrigger::Never,
        "tagged" => SpeechTrigger::Tagged,
        _ => return None,
    };
    let openai = settings
        .providers
        .get("openai")
        .cloned()
        .unwrap_or_default();
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let base_url = openai
        .base_url
        .or_else(|| env("OPENAI_TTS_BASE_URL"))
        .unwrap_or_else(|| DEFAULT_TTS_OPENAI_BASE_URL.to_string());
    Some(SpeechPlan {
        trigger,
        endpoint: AudioEndpoint {
            base_url,
            api_key: openai.api_key.or_else(|| env("OPENAI_API_KEY")),
            headers: Vec::new(),
        },
        model: openai
            .model
            .unwrap_or_else(|| DEFAULT_TTS_OPENAI_MODEL.to_string()),
        voice: openai
            .speaker_voice
            .or(openai.voice)
            .unwrap_or_else(|| DEFAULT_TTS_OPENAI_VOICE.to_string()),
        instructions: openai.instructions,
        extra_body: openai.extra_body,
        response_format: openai.response_format.unwrap_or_else(|| "opus".to_string()),
        max_text_length: settings
            .max_text_length
            .unwrap_or(DEFAULT_TTS_MAX_TEXT_LENGTH)
            .max(1),
        timeout: Duration::from_millis(settings.timeout_ms.unwrap_or(DEFAULT_TTS_TIMEOUT_MS)),
    })
}

impl SpeechPlan {
    /// What to say for a final reply whose text is `reply`, and the plan
    /// with the reply's tag settings (voice, model) applied; `None`: not
    /// spoken (the trigger does not fire, or the reply sends files of its
    /// own, as upstream skips those).
    pub fn for_reply(&self, reply: &str) -> Option<(SpeechPlan, String)> {
        let tags = extract_tts_tags(reply);
        let fires = match self.trigger {
            SpeechTrigger::Every => true,
            SpeechTrigger::Tagged => tags.tagged,
            SpeechTrigger::Never => false,
        };
        if !fires || !split_media_lines(&tags.visible).media.is_empty() {
            return None;
        }
        let mut plan = self.clone();
        if let Some(voice) = tags.voice {
            plan.voice = voice;
        }
        if let Some(model) = tags.model {
            plan.model = model;
        }
        let text = tags.spoken.unwrap_or(tags.visible);
        let spoken = spoken_text(&text, plan.max_text_length);
        (!spoken.is_empty()).then_some((plan, spoken))
    }
}

/// `text` without its `[[tts…]]` tags (what a reader is shown).
pub fn visible_text(text: &str) -> String {
    extract_tts_tags(text).visible
}

/// What is spoken of a reply: no `MEDIA:` lines, no markdown marks, at most
/// `max_chars` characters.
pub fn spoken_text(reply: &str, max_chars: usize) -> String {
    let text = split_media_lines(reply).text;
    let plain: String = text
        .chars()
        .filter(|c| !matches!(c, '*' | '_' | '`' | '#' | '~' | '>'))
        .collect();
    let plain = plain.split_whitespace().collect::<Vec<_>>().join(" ");
    plain.chars().take(max_chars).collect()
}

/// Why a reply was not spoken; the text is meant for the chat.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpeechError {
    #[error("the spoken reply failed: {0}")]
    Synthesis(String),
    #[error("the speech endpoint answered with audio pincer cannot make a voice note of ({0}); it takes Ogg/Opus, WAV, or raw PCM with responseFormat \"pcm\"")]
    NotOpus(String),
    #[error("the spoken reply could not be encoded: {0}")]
    Encode(String),
}

/// Synthesizes `text` into `out` (Ogg/Opus, checked; WAV and raw PCM
/// encoded first).
pub async fn synthesize_voice_note(
    http: &reqwest::Client,
    plan: &SpeechPlan,
    text: &str,
    out: &Path,
) -> Result<u64, SpeechError> {
    let job = Speech {
        model: &plan.model,
        voice: &plan.voice,
        input: text,
        response_format: &plan.response_format,
        instructions: plan.instructions.as_deref(),
        extra_body: plan.extra_body.as_ref(),
        timeout: plan.timeout,
        max_bytes: MAX_SPEECH_BYTES,
    };
    if let Some(dir) = out.parent() {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| SpeechError::Synthesis(e.to_string()))?;
    }
    synthesize(http, &plan.endpoint, job, out)
        .await
        .map_err(|e| SpeechError::Synthesis(e.to_string()))?;
    let path = out.to_path_buf();
    let raw_pcm = plan.response_format == "pcm";
    let made = tokio::task::spawn_blocking(move || voice_note_of(&path, raw_pcm))
        .await
        .map_err(|e| SpeechError::Synthesis(e.to_string()));
    let verdict = made.and_then(|r| r);
    if verdict.is_err() {
        let _ = tokio::fs::remove_file(out).await;
    }
    verdict
}

/// The downloaded answer at `path` made a checked Ogg/Opus voice note in
/// place (blocking); its size.
fn voice_note_of(path: &Path, raw_pcm: bool) -> Result<u64, SpeechError> {
    let not_opus = match ogg::check(path) {
        Ok(info) if info.codec == OggCodec::Opus => return file_size(path),
        Ok(_) => "an Ogg stream without Opus".to_string(),
        Err(error) => error.to_string(),
    };
    let mut head = vec![0u8; crate::media::sniff::SNIFF_BYTES];
    let read = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .map_err(|e| SpeechError::Synthesis(e.to_string()))?;
    let head = &head[..read];
    let known = crate::media::sniff::sniff_mime(head);
    let kind = if voice_encode::is_wav(head) {
        PcmInput::Wav
    } else if let Some(mime) = known {
        // A container or compressed format: never read it as samples.
        return Err(SpeechError::NotOpus(format!("{mime}: {not_opus}")));
    } else if raw_pcm {
        PcmInput::Raw {
            rate: PCM_RATE,
            channels: 1,
        }
    } else {
        return Err(SpeechError::NotOpus(not_opus));
    };
    let encoded = path.with_extension("opus.tmp");
    voice_encode::encode_file(path, kind, &encoded, MAX_SPEECH_SECONDS)
        .map_err(|e| SpeechError::Encode(e.to_string()))?;
    std::fs::rename(&encoded, path).map_err(|e| SpeechError::Encode(e.to_string()))?;
    match ogg::check(path) {
        Ok(info) if info.codec == OggCodec::Opus => file_size(path),
        Ok(_) => Err(SpeechError::Encode("the encoder wrote no Opus".into())),
        Err(error) => Err(SpeechError::Encode(error.to_string())),
    }
}

fn file_size(path: &Path) -> Result<u64, SpeechError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| SpeechError::Synthesis(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_modes_and_layers_decide() {
        let config: Config = crate::config::parse_str(
            r#"{ tts: { auto: "inbound", providers: { openai: { apiKey: "k", baseUrl: "http://tts.lan/v1" } } },
                 channels: { telegram: { botToken: "1:a", tts: { providers: { openai: { speakerVoice: "nova" } } },
                   accounts: { loud: { botToken: "2:b", tts: { auto: "always" } } } } } }"#,
            "test",
        )
        .expect("config");
        let typed = plan(&config, "telegram", "default", false).expect("inbound mode");
        assert_eq!(typed.trigger, SpeechTrigger::Never);
        assert_eq!(typed.for_reply("[[tts]]Hello there."), None);
        let spoken = plan(&config, "telegram", "default", true).expect("inbound audio");
        assert_eq!(spoken.voice, "nova");
        assert_eq!(spoken.model, DEFAULT_TTS_OPENAI_MODEL);
        assert_eq!(spoken.endpoint.base_url, "http://tts.lan/v1");
        assert_eq!(spoken.endpoint.api_key.as_deref(), Some("k"));
        assert!(
            plan(&config, "telegram", "loud", false).is_some(),
            "account layer"
        );
        assert!(plan(&config, "discord", "default", true).is_some());
        let off: Config = crate::config::parse_str("{}", "test").expect("config");
        assert_eq!(plan(&off, "telegram", "default", true), None);
    }

    #[test]
    fn what_pincer_cannot_speak_is_refused_by_name() {
        for (config, path, word) in [
            (r#"{ tts: { mode: "all" } }"#, "tts.mode", "all"),
            (
                r#"{ tts: { provider: "elevenlabs" } }"#,
                "tts.provider",
                "elevenlabs",
            ),
            (
                r#"{ tts: { providers: { microsoft: { apiKey: "x" } } } }"#,
                "tts.providers.microsoft",
                "openai provider",
            ),
            (
                r#"{ channels: { telegram: { botToken: "1:a", tts: { providers: { openai: { responseFormat: "mp3" } } } } } }"#,
                "channels.telegram.tts.providers.openai.responseFormat",
                "encodes \"wav\" or \"pcm\"",
            ),
            (
                r#"{ tts: { personas: {} } }"#,
                "tts.personas",
                "not supported by pincer",
            ),
        ] {
            let error = crate::config::parse_str(config, "test")
                .expect_err(config)
                .to_string();
            assert!(
                error.contains(path)
                    && error.contains(word)
                    && error.contains("not supported by pincer"),
                "{config}: {error}"
            );
        }
        let fine = r#"{ tts: { auto: "always", mode: "final", provider: "openai", providers: { openai: { responseFormat: "opus" } }, timeoutMs: 5000 } }"#;
        assert!(crate::config::parse_str(fine, "test").is_ok());
    }

    #[test]
    fn tagged_speaks_only_tagged_replies_with_their_settings() {
        let config: Config = crate::config::parse_str(
            r#"{ tts: { auto: "tagged", providers: { openai: { apiKey: "k", speakerVoice: "coral" } } } }"#,
            "test",
        )
        .expect("config");
        let plan = plan(&config, "telegram", "default", false).expect("tagged");
        assert_eq!(plan.trigger, SpeechTrigger::Tagged);
        assert_eq!(plan.for_reply("Just text, nothing said."), None);
        let (tagged, said) = plan
            .for_reply("[[tts:voice=nova]]It is **sunny** today.")
            .expect("a tagged reply");
        assert_eq!(said, "It is sunny today.");
        assert_eq!(tagged.voice, "nova");
        let (_, said) = plan
            .for_reply("| a | b |\n[[tts:text]]Two columns.[[/tts:text]]")
            .expect("hidden text");
        assert_eq!(said, "Two columns.");
        assert_eq!(
            plan.for_reply("[[tts]]Here.\nMEDIA: ./a.png"),
            None,
            "a reply with files is not spoken"
        );
        assert_eq!(visible_text("[[tts]]Hi [[tts:voice=x]]there"), "Hi there");
    }

    #[test]
    fn raw_pcm_answers_become_voice_notes_in_place_and_mp3_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pcm: Vec<u8> = (0..24_000u32)
            .flat_map(|i| (((i % 55) as i16 - 27) * 300).to_le_bytes())
            .collect();
        let path = dir.path().join("speech.ogg");
        std::fs::write(&path, &pcm).expect("pcm");
        let size = voice_note_of(&path, true).expect("raw PCM encoded");
        assert_eq!(size, std::fs::metadata(&path).expect("meta").len());
        let info = ogg::check(&path).expect("a sound Ogg stream");
        assert_eq!((info.codec, info.duration_ms), (OggCodec::Opus, Some(1000)));
        assert_eq!(
            voice_note_of(&path, true).expect("Opus stays as it is"),
            size
        );
        std::fs::write(&path, &pcm).expect("pcm");
        assert!(
            matches!(voice_note_of(&path, false), Err(SpeechError::NotOpus(_))),
            "headerless audio is read as PCM only when pcm was asked for"
        );
        std::fs::write(&path, b"ID3\x04\0\0\0\0\0\0 mp3").expect("mp3");
        let error = voice_note_of(&path, true).expect_err("mp3");
        assert!(
            matches!(error, SpeechError::NotOpus(_)) && error.to_string().contains("audio/mpeg"),
            "{error}"
        );
    }

    #[test]
    fn spoken_text_drops_media_lines_and_marks() {
        assert_eq!(
            spoken_text("**Hi** there,\nMEDIA: ./a.png\n`code`", 100),
            "Hi there, code"
        );
        assert_eq!(spoken_text("abcdef", 3), "abc");
    }
}
