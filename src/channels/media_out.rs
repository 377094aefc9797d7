//! Replies with attachments: the sources a reply names (`MEDIA:` lines, the
//! `message` tool's `mediaUrl(s)`) made into files (`media::outbound`: local
//! paths only from the agent's workspace or the media area, URLs downloaded
//! with a byte cap), each sent the way the platform shows it best through
//! the adapter's [`SendMedia`]:
//! - images as photos, re-encoded first when over the platform's photo size
//!   or `media::outbound::PHOTO_MAX_SIDE`; an image that cannot be made a photo (too many
//!   pixels for the board, an odd format) goes as a document when it fits;
//! - audio as a voice note when the reply asked for one (`[[audio_as_voice]]`)
//!   and the file is voice-compatible as upstream lists it (Ogg/Opus, MP3,
//!   M4A; an Ogg file is walked first and must be sound Opus), else as an
//!   audio file; video as video; anything else as a document;
//! - the reply's text is the first file's caption when it fits the
//!   platform's caption limit (Telegram's 1,024 characters), else it
//!   follows the files as its own message(s), as upstream's Telegram sends
//!   a follow-up text; with no file to send it goes alone.
//!
//! Whatever cannot be sent (a missing file, a path outside the allowed
//! places, a file over the platform's cap, a platform refusal) is said in
//! the chat in one plain message naming the file and the reason; nothing is
//! silently dropped. Files pincer wrote for the send are removed after it.
//!
//! This file sends through the `Channel` trait only.

use std::path::PathBuf;

use crate::media::outbound::{self, OutboundFile, SourceError, SourcePolicy};
use crate::media::sniff::FileKind;
use crate::media::MediaBudget;

use super::outbound::{send_quoting, with_retry, DeliveryError, ReplyQuote, RetryPolicy};
use super::{Channel, OutboundTarget, SendMedia, TextFormat, TextLimits, Upload, UploadKind};

/// Where a reply's files may come from.
#[derive(Debug, Clone)]
pub struct MediaSources {
    /// The answering agent's workspace.
    pub workspace: PathBuf,
    /// The media area's root.
    pub media_root: PathBuf,
    /// Fetches remote sources.
    pub http: reqwest::Client,
}

impl MediaSources {
    /// The source rules for a channel whose largest upload is `max_bytes`.
    fn policy(&self, max_bytes: u64) -> SourcePolicy {
        SourcePolicy {
            workspace: self.workspace.clone(),
            media_root: self.media_root.clone(),
            outbound_dir: self.media_root.join("outbound"),
            max_bytes,
            outbound_dir_bytes: MediaBudget::for_this_board().area_bytes,
        }
    }
}

/// A reply with attachments.
#[derive(Debug, Clone, Copy)]
pub struct MediaReply<'a> {
    pub text: &'a str,
    pub media: &'a [String],
    /// `MEDIA:` paths the parser refused (a `..` segment).
    pub refused: &'a [String],
    pub audio_as_voice: bool,
}

/// What went out.
#[derive(Debug, Default)]
pub struct MediaDelivery {
    /// Texts sent (for the echo tracker), captions included.
    pub texts: Vec<String>,
    /// Platform messages sent, notices included.
    pub messages: usize,
    /// Files sent.
    pub media_sent: usize,
    /// The last message sent (a file's, else a text's).
    pub last_message_id: Option<String>,
    /// What could not be sent and why (also said in the chat).
    pub notices: Vec<String>,
    pub failures: Vec<DeliveryError>,
}

/// One file ready to go.
struct Ready {
    file: OutboundFile,
    kind: UploadKind,
    /// The file before re-encoding, when pincer also wrote it.
    also_discard: Option<OutboundFile>,
}

/// Sends `reply`'s text and files to `target`.
#[allow(clippy::too_many_arguments)]
pub async fn send_media_reply(
    channel: &dyn Channel,
    target: &OutboundTarget,
    quote: &ReplyQuote,
    retry: RetryPolicy,
    limits: TextLimits,
    sources: &MediaSources,
    reply: MediaReply<'_>,
) -> MediaDelivery {
    let mut delivery = MediaDelivery::default();
    let mut notices: Vec<String> = reply
        .refused
        .iter()
        .map(|source| format!("{}: {}", short(source), refusal_reason(source)))
        .collect();
    let mut ready = Vec::new();
    match channel.media() {
        None => notices.extend(reply.media.iter().map(|source| {
            format!(
                "{}: {} cannot send files from pincer",
                short(source),
                platform(channel)
            )
        })),
        Some(media) => {
            let policy = sources.policy(largest_upload(media));
            for source in reply.media {
                match prepare(
                    &sources.http,
                    source,
                    &policy,
                    media,
                    reply.audio_as_voice,
                    channel,
                )
                .await
                {
                    Ok(file) => ready.push(file),
                    Err(notice) => notices.push(notice),
                }
            }
        }
    }
    let text = reply.text.trim();
    let caption_fits = channel
        .media()
        .is_some_and(|m| text.chars().count() <= m.max_caption_chars());
    let caption = (!text.is_empty() && !ready.is_empty() && caption_fits).then_some(text);
    if ready.is_empty() && !text.is_empty() {
        send_text(
            channel,
            target,
            quote,
            retry,
            limits,
            text,
            TextFormat::Markdown,
            &mut delivery,
        )
        .await;
    }
    for (index, item) in ready.iter().enumerate() {
        let caption = if index == 0 { caption } else { None };
        let Some(media) = channel.media() else { break };
        let upload = Upload {
            path: &item.file.path,
            file_name: &item.file.file_name,
            mime: &item.file.mime,
            kind: item.kind,
            caption,
            bytes: item.file.bytes,
        };
        let piece_target = quote.next_target(target);
        let sent = with_retry(retry, channel.id(), || {
            media.send_media(&piece_target, upload)
        })
        .await;
        match sent {
            Ok(message) => {
                delivery.messages += 1;
                delivery.media_sent += 1;
                delivery.last_message_id = Some(message.message_id);
                delivery.texts.extend(caption.map(str::to_string));
            }
            Err(error) => {
                let reason = match &error {
                    DeliveryError::Failed { last, .. } => last.to_string(),
                    other => other.to_string(),
                };
                notices.push(format!(
                    "{}: {} did not take the {}: {reason}",
                    item.file.file_name,
                    platform(channel),
                    item.kind.noun()
                ));
                if let Some(caption) = caption {
                    // The caption was the reply's text: it must still arrive.
                    send_text(
                        channel,
                        target,
                        quote,
                        retry,
                        limits,
                        caption,
                        TextFormat::Markdown,
                        &mut delivery,
                    )
                    .await;
                }
                delivery.failures.push(error);
            }
        }
    }
    if caption.is_none() && !ready.is_empty() && !text.is_empty() {
        send_text(
            channel,
            target,
            quote,
            retry,
            limits,
            text,
            TextFormat::Markdown,
            &mut delivery,
        )
        .await;
    }
    for item in &ready {
        item.file.discard();
        if let Some(original) = &item.also_discard {
            original.discard();
        }
    }
    if !notices.is_empty() {
        let notice = notice_text(&notices);
        send_text(
            channel,
            target,
            quote,
            retry,
            limits,
            &notice,
            TextFormat::Plain,
            &mut delivery,
        )
        .await;
        delivery.notices = notices;
    }
    delivery
}

/// Why the parser refused a source.
fn refusal_reason(_source: &str) -> &'static str {
    "paths that leave a folder with `..` are not sent"
}

/// The message that says what was not sent.
pub fn notice_text(notices: &[String]) -> String {
    let mut text = if notices.len() == 1 {
        "⚠️ Not sent: ".to_string()
    } else {
        "⚠️ Not sent:\n".to_string()
    };
    let lines: Vec<String> = if notices.len() == 1 {
        notices.to_vec()
    } else {
        notices.iter().map(|n| format!("- {n}")).collect()
    };
    text.push_str(&lines.join("\n"));
    text
}

#[allow(clippy::too_many_arguments)]
async fn send_text(
    channel: &dyn Channel,
    target: &OutboundTarget,
    quote: &ReplyQuote,
    retry: RetryPolicy,
    limits: TextLimits,
    text: &str,
    format: TextFormat,
    delivery: &mut MediaDelivery,
) {
    match send_quoting(channel, target, quote, text, format, retry, limits).await {
        Ok(sent) => {
            delivery.messages += sent.len();
            if delivery.media_sent == 0 {
                delivery.last_message_id = sent.last().map(|m| m.message_id.clone());
            }
            delivery.texts.push(text.to_string());
        }
        Err(error) => {
            log::warn!("{}: text with media not delivered: {error}", channel.id());
            delivery.failures.push(error);
        }
    }
}

fn largest_upload(media: &dyn SendMedia) -> u64 {
    [
        UploadKind::Photo,
        UploadKind::Video,
        UploadKind::Audio,
        UploadKind::Voice,
        UploadKind::Document,
    ]
    .into_iter()
    .map(|kind| media.max_upload_bytes(kind))
    .max()
    .unwrap_or(0)
}

/// `telegram` → `Telegram`.
fn platform(channel: &dyn Channel) -> String {
    let id = channel.id();
    let mut chars = id.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A source as the user reads it (a long URL cut).
fn short(source: &str) -> String {
    if source.chars().count() <= 80 {
        return source.to_string();
    }
    let cut: String = source.chars().take(79).collect();
    format!("{cut}…")
}

/// Whether upstream sends this audio as a voice note when asked: Ogg/Opus,
/// MP3 or M4A, by type or by extension.
fn voice_compatible(file: &OutboundFile) -> bool {
    let mime = file.mime.as_str();
    let by_type = matches!(
        mime,
        "audio/ogg"
            | "audio/opus"
            | "audio/mpeg"
            | "audio/mp3"
            | "audio/mp4"
            | "audio/x-m4a"
            | "audio/m4a"
    );
    let extension = std::path::Path::new(&file.file_name)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    by_type
        || matches!(
            extension.as_deref(),
            Some("oga" | "ogg" | "opus" | "mp3" | "m4a")
        )
}

/// One source made ready, or the notice saying why not.
async fn prepare(
    http: &reqwest::Client,
    source: &str,
    policy: &SourcePolicy,
    media: &dyn SendMedia,
    audio_as_voice: bool,
    channel: &dyn Channel,
) -> Result<Ready, String> {
    let file = outbound::open_source(http, source, policy)
        .await
        .map_err(|error| match error {
            SourceError::TooLarge {
                name,
                bytes,
                max_bytes,
            } => format!(
                "{name} is {}; {} takes files up to {}",
                outbound::human(bytes),
                platform(channel),
                outbound::human(max_bytes)
            ),
            other => other.to_string(),
        })?;
    let result = choose(file.clone(), policy, media, audio_as_voice, channel).await;
    if result.is_err() {
        file.discard();
    }
    result
}

async fn choose(
    file: OutboundFile,
    policy: &SourcePolicy,
    media: &dyn SendMedia,
    audio_as_voice: bool,
    channel: &dyn Channel,
) -> Result<Ready, String> {
    let over = |file: &OutboundFile, kind: UploadKind| {
        let cap = media.max_upload_bytes(kind);
        format!(
            "{} is {}; {} takes {}s up to {}",
            file.file_name,
            outbound::human(file.bytes),
            platform(channel),
            kind.noun(),
            outbound::human(cap)
        )
    };
    let fits = |file: &OutboundFile, kind: UploadKind| file.bytes <= media.max_upload_bytes(kind);
    let photo = file.kind == FileKind::Image
        && matches!(
            file.mime.as_str(),
            "image/jpeg" | "image/png" | "image/webp"
        );
    if photo {
        let cap = media.max_upload_bytes(UploadKind::Photo);
        let out_dir = policy.outbound_dir.clone();
        let source = file.clone();
        let fitted = tokio::task::spawn_blocking(move || {
            outbound::fit_photo(&source, cap, &out_dir, &MediaBudget::for_this_board())
        })
        .await
        .map_err(|e| e.to_string())?;
        return match fitted {
            Ok(fitted) if fitted.path == file.path => Ok(Ready {
                file,
                kind: UploadKind::Photo,
                also_discard: None,
            }),
            Ok(fitted) => Ok(Ready {
                file: fitted,
                kind: UploadKind::Photo,
                also_discard: Some(file),
            }),
            Err(error) if fits(&file, UploadKind::Document) => {
                log::info!(
                    "{}: {} goes as a file: {error}",
                    channel.id(),
                    file.file_name
                );
                Ok(Ready {
                    file,
                    kind: UploadKind::Document,
                    also_discard: None,
                })
            }
            Err(error) => Err(format!("{}: {error}", file.file_name)),
        };
    }
    let kind = match file.kind {
        FileKind::Audio if audio_as_voice && voice_compatible(&file) => voice_or_audio(&file)?,
        FileKind::Audio => UploadKind::Audio,
        FileKind::Video => UploadKind::Video,
        _ => UploadKind::Document,
    };
    if !fits(&file, kind) {
        return Err(over(&file, kind));
    }
    Ok(Ready {
        file,
        kind,
        also_discard: None,
    })
}

/// An Ogg file must be a sound Opus stream to be a voice note (a damaged
/// one is refused by name; Vorbis goes as an audio file); MP3 and M4A go
/// as they are.
fn voice_or_audio(file: &OutboundFile) -> Result<UploadKind, String> {
    if file.mime != "audio/ogg" {
        return Ok(UploadKind::Voice);
    }
    match crate::media::ogg::check(&file.path) {
        Ok(info) if info.codec == crate::media::ogg::OggCodec::Opus => Ok(UploadKind::Voice),
        Ok(_) => {
            log::info!("{}: not Opus, sent as an audio file", file.file_name);
            Ok(UploadKind::Audio)
        }
        Err(error) => Err(format!("{}: {error}", file.file_name)),
    }
}
