//! Telegram attachments: photos, voice notes, audio, video and documents
//! fetched through `getFile` and the Bot API's file download, stored by the
//! shared `channels::media` (per-file cap, bounded directory, MIME
//! detection, notes). A file over the cap is never downloaded.
//!
//! This file only knows where Telegram keeps a message's file; it must not
//! decide what the message says beyond the note.

use super::api::BotApi;
use super::wire::{FileRef, Message};
use crate::channels::media::{extension_of, failed_note, too_large_note, Download};

pub use crate::channels::media::{
    mb_to_bytes, MediaKind, MediaLimits, MediaOutcome, DEFAULT_MEDIA_DIR_MAX_BYTES,
    DEFAULT_MEDIA_MAX_MB,
};

/// File name prefix of Telegram downloads.
const FILE_PREFIX: &str = "tg";

/// One attachment of a message.
#[derive(Debug, Clone)]
pub struct Attachment {
    pub kind: MediaKind,
    pub file: FileRef,
}

/// The message's attachment, if any. Of a photo's sizes the largest that
/// fits `max_bytes` is taken (the largest of all when none fits).
pub fn attachment_of(message: &Message, max_bytes: u64) -> Option<Attachment> {
    if !message.photo.is_empty() {
        let fitting = message
            .photo
            .iter()
            .filter(|p| p.file_size.is_some_and(|s| s <= max_bytes))
            .max_by_key(|p| p.width * p.height);
        let chosen = fitting.or_else(|| message.photo.iter().max_by_key(|p| p.width * p.height))?;
        return Some(Attachment {
            kind: MediaKind::Image,
            file: FileRef {
                file_id: chosen.file_id.clone(),
                file_name: None,
                mime_type: None,
                file_size: chosen.file_size,
            },
        });
    }
    let candidates = [
        (&message.voice, MediaKind::Audio),
        (&message.audio, MediaKind::Audio),
        (&message.video, MediaKind::Video),
        (&message.video_note, MediaKind::Video),
        (&message.animation, MediaKind::Video),
        (&message.sticker, MediaKind::Image),
        (&message.document, MediaKind::Document),
    ];
    candidates.into_iter().find_map(|(file, kind)| {
        file.as_ref().map(|file| Attachment {
            kind,
            file: file.clone(),
        })
    })
}

fn too_large(attachment: &Attachment, size: Option<u64>, cap: u64) -> MediaOutcome {
    MediaOutcome::Skipped(too_large_note(
        attachment.kind,
        attachment.file.file_name.as_deref(),
        size,
        cap,
    ))
}

/// Downloads `attachment` within `limits`.
pub async fn fetch(api: &BotApi, limits: &MediaLimits, attachment: &Attachment) -> MediaOutcome {
    let cap = limits.max_file_bytes;
    let kind = attachment.kind;
    if let Some(size) = attachment.file.file_size.filter(|s| *s > cap) {
        return too_large(attachment, Some(size), cap);
    }
    let file = match api.get_file(&attachment.file.file_id).await {
        Ok(file) => file,
        Err(error) => return MediaOutcome::Skipped(failed_note(kind, &error.to_string())),
    };
    if let Some(size) = file.file_size.filter(|s| *s > cap) {
        return too_large(attachment, Some(size), cap);
    }
    let Some(file_path) = file.file_path.filter(|p| !p.is_empty()) else {
        return MediaOutcome::Skipped(failed_note(kind, "no file path"));
    };
    let response = match api.download(&file_path).await {
        Ok(response) => response,
        Err(error) => return MediaOutcome::Skipped(failed_note(kind, &error.to_string())),
    };
    let download = Download {
        prefix: FILE_PREFIX,
        extension: extension_of(&file_path),
        declared_mime: attachment.file.mime_type.clone(),
        file_name: attachment.file.file_name.clone(),
    };
    let saved = download
        .save(limits, response, |e| api.stream_error(e).to_string())
        .await;
    match saved {
        Ok(Some(item)) => MediaOutcome::Saved(item),
        Ok(None) => too_large(attachment, None, cap),
        Err(reason) => MediaOutcome::Skipped(failed_note(kind, &reason)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_photo_within_the_cap_is_chosen() {
        let message: Message = serde_json::from_value(serde_json::json!({
            "message_id": 1, "date": 0, "chat": {"id": 1, "type": "private"},
            "photo": [
                {"file_id": "small", "width": 90, "height": 90, "file_size": 1_000},
                {"file_id": "mid", "width": 320, "height": 320, "file_size": 20_000},
                {"file_id": "big", "width": 1280, "height": 1280, "file_size": 900_000}
            ]
        }))
        .expect("message");
        let chosen = attachment_of(&message, 100_000).expect("photo");
        assert_eq!(chosen.file.file_id, "mid");
        assert_eq!(chosen.kind, MediaKind::Image);
        let none_fit = attachment_of(&message, 10).expect("photo");
        assert_eq!(none_fit.file.file_id, "big");
    }
}
