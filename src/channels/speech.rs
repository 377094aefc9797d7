//! Spoken replies (`tts`, `schema/tts.rs`): whether a run's final reply is
//! also spoken, and the voice note that carries it.
//!
//! - The settings are `tts`, then the channel's `tts`, then the account's,
//!   deep-merged key by key (upstream's order without personas or `/tts`
//!   preferences). `auto: "always"` speaks every final reply, `"inbound"`
//!   only a reply to a message that carried audio (a voice note), `"off"`
//!   none; the legacy `enabled: true` is `always`.
//! - The text is the reply without its `MEDIA:` lines and markdown marks,
//!   cut to `maxTextLength` characters (default 4,096).
//! - The speech comes from an OpenAI-compatible `POST {baseUrl}/audio/speech`
//!   (`providers.openai`: `baseUrl`, else `OPENAI_TTS_BASE_URL`, else
//!   OpenAI's; `apiKey`, else `OPENAI_API_KEY`; `model` default
//!   `gpt-4o-mini-tts`; `speakerVoice`/`voice` default `coral`;
//!   `instructions`; `extraBody`) with `response_format: "opus"`, streamed to
//!   a file in the media area under a byte cap, then walked page by page
//!   (`media::ogg`): only a sound Ogg/Opus stream goes out, as a voice note
//!   (`channels::media_out`, Telegram's `sendVoice`). pincer has no Opus
//!   encoder: other audio is refused with a message in the chat.
//!
//! Whatever fails is said in the chat in one line; the text reply has
//! already gone out, so nothing is lost.

use std::path::Path;
use std::time::Duration;

use crate::config::schema::{
    TtsConfig, DEFAULT_TTS_MAX_TEXT_LENGTH, DEFAULT_TTS_OPENAI_BASE_URL, DEFAULT_TTS_OPENAI_MODEL,
    DEFAULT_TTS_OPENAI_VOICE, DEFAULT_TTS_TIMEOUT_MS,
};
use crate::config::Config;
use crate::media::audio::{synthesize, AudioEndpoint, Speech};
use crate::media::ogg::{self, OggCodec};
use crate::reply::media_lines::split_media_lines;
use crate::reply::tts_tags::extract_tts_tags;

/// The largest answer of a speech endpoint accepted (about 20 minutes of
/// 64 kbit/s Opus).
pub const MAX_SPEECH_BYTES: u64 = 10 * 1024 * 1024;

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
    #[error("the speech endpoint did not answer with Ogg/Opus audio ({0}); pincer has no Opus encoder, so it sends no voice note")]
    NotOpus(String),
}

/// Synthesizes `text` into `out` (Ogg/Opus, checked).
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
        response_format: "opus",
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
    let bytes = synthesize(http, &plan.endpoint, job, out)
        .await
        .map_err(|e| SpeechError::Synthesis(e.to_string()))?;
    let path = out.to_path_buf();
    let checked = tokio::task::spawn_blocking(move || ogg::check(&path))
        .await
        .map_err(|e| SpeechError::Synthesis(e.to_string()))?;
    let verdict = match checked {
        Ok(info) if info.codec == OggCodec::Opus => Ok(bytes),
        Ok(_) => Err(SpeechError::NotOpus("an Ogg stream without Opus".into())),
        Err(error) => Err(SpeechError::NotOpus(error.to_string())),
    };
    if verdict.is_err() {
        let _ = tokio::fs::remove_file(out).await;
    }
    verdict
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
                "no Opus encoder",
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
    fn spoken_text_drops_media_lines_and_marks() {
        assert_eq!(
            spoken_text("**Hi** there,\nMEDIA: ./a.png\n`code`", 100),
            "Hi there, code"
        );
        assert_eq!(spoken_text("abcdef", 3), "abc");
    }
}
