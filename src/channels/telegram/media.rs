//! Inbound attachments: photos, voice notes, audio, video and documents
//! fetched through `getFile` into a bounded media directory. A file over the
//! size cap (`mediaMaxMb`) is never downloaded: the message gets a
//! placeholder and a note instead. The directory as a whole is capped too:
//! the oldest files go first. MIME types come from the API, else from the
//! file's first bytes, else from its extension.
//!
//! This file must not decide what the message says beyond the note, and
//! must not delete files of a run in progress other than by the dir cap.

use std::path::{Path, PathBuf};

use tokio::io::AsyncWriteExt;

use super::api::BotApi;
use super::wire::{FileRef, Message};
use crate::pipeline::context::MediaItem;

/// Per-file cap when neither the account nor `agents.defaults` set one.
pub const DEFAULT_MEDIA_MAX_MB: f64 = 5.0;
/// Cap of the whole media directory.
pub const DEFAULT_MEDIA_DIR_MAX_BYTES: u64 = 64 * 1024 * 1024;
const BYTES_PER_MB: f64 = 1024.0 * 1024.0;

/// Where attachments go and how big they may be.
#[derive(Debug, Clone)]
pub struct MediaLimits {
    pub dir: PathBuf,
    pub max_file_bytes: u64,
    pub max_dir_bytes: u64,
}

/// Megabytes (as config spells them) to bytes.
pub fn mb_to_bytes(mb: f64) -> u64 {
    if mb.is_finite() && mb > 0.0 {
        (mb * BYTES_PER_MB) as u64
    } else {
        0
    }
}

/// What kind of attachment a message carries, for MIME guesses and notes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    Image,
    Audio,
    Video,
    Document,
}

impl MediaKind {
    fn name(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Audio => "audio",
            MediaKind::Video => "video",
            MediaKind::Document => "document",
        }
    }
}

/// One attachment of a message.
#[derive(Debug, Clone)]
pub struct Attachment {
    pub kind: MediaKind,
    pub file: FileRef,
}

/// What became of an attachment.
#[derive(Debug, Clone, PartialEq)]
pub enum MediaOutcome {
    Saved(MediaItem),
    /// Not downloaded; the note goes into the message body.
    Skipped(String),
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

/// `1.5 MB`, `900.0 KB`, `12 B`.
fn human_size(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let value = bytes as f64;
    if value >= BYTES_PER_MB {
        format!("{:.1} MB", value / BYTES_PER_MB)
    } else if value >= KIB {
        format!("{:.1} KB", value / KIB)
    } else {
        format!("{bytes} B")
    }
}

/// The note for a file over the cap; `size` when known.
fn too_large_note(attachment: &Attachment, size: Option<u64>, cap: u64) -> String {
    let mut what: Vec<String> = attachment.file.file_name.iter().cloned().collect();
    what.extend(size.map(human_size));
    let what = if what.is_empty() {
        String::new()
    } else {
        format!("{}: ", what.join(", "))
    };
    format!(
        "<media:{}> ({what}over the {} limit, not downloaded)",
        attachment.kind.name(),
        human_size(cap)
    )
}

fn failed_note(attachment: &Attachment, reason: &str) -> String {
    format!(
        "<media:{}> (could not be downloaded: {reason})",
        attachment.kind.name()
    )
}

/// Downloads `attachment` within `limits`.
pub async fn fetch(api: &BotApi, limits: &MediaLimits, attachment: &Attachment) -> MediaOutcome {
    let cap = limits.max_file_bytes;
    if let Some(size) = attachment.file.file_size.filter(|s| *s > cap) {
        return MediaOutcome::Skipped(too_large_note(attachment, Some(size), cap));
    }
    let file = match api.get_file(&attachment.file.file_id).await {
        Ok(file) => file,
        Err(error) => return MediaOutcome::Skipped(failed_note(attachment, &error.to_string())),
    };
    if let Some(size) = file.file_size.filter(|s| *s > cap) {
        return MediaOutcome::Skipped(too_large_note(attachment, Some(size), cap));
    }
    let Some(file_path) = file.file_path.filter(|p| !p.is_empty()) else {
        return MediaOutcome::Skipped(failed_note(attachment, "no file path"));
    };
    match download(api, limits, attachment, &file_path).await {
        Ok(Some(item)) => MediaOutcome::Saved(item),
        Ok(None) => MediaOutcome::Skipped(too_large_note(attachment, None, cap)),
        Err(reason) => MediaOutcome::Skipped(failed_note(attachment, &reason)),
    }
}

/// Streams the file to disk; `None` when it outgrew the cap (nothing kept).
async fn download(
    api: &BotApi,
    limits: &MediaLimits,
    attachment: &Attachment,
    file_path: &str,
) -> Result<Option<MediaItem>, String> {
    let cap = limits.max_file_bytes;
    prepare_dir(&limits.dir, limits.max_dir_bytes.saturating_sub(cap))
        .await
        .map_err(|e| format!("media directory: {e}"))?;
    let mut response = api.download(file_path).await.map_err(|e| e.to_string())?;
    let extension = Path::new(file_path)
        .extension()
        .and_then(|e| e.to_str())
        .filter(|e| e.len() <= 8 && e.chars().all(|c| c.is_ascii_alphanumeric()))
        .unwrap_or("bin")
        .to_lowercase();
    let target = limits
        .dir
        .join(format!("tg-{}.{extension}", uuid::Uuid::new_v4()));
    let mut out = tokio::fs::File::create(&target)
        .await
        .map_err(|e| format!("cannot create file: {e}"))?;
    let mut written: u64 = 0;
    let mut head: Vec<u8> = Vec::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(error) => {
                discard(&target).await;
                return Err(api.stream_error(error).to_string());
            }
        };
        written += chunk.len() as u64;
        if written > cap {
            discard(&target).await;
            return Ok(None);
        }
        if head.len() < SNIFF_BYTES {
            head.extend(chunk.iter().take(SNIFF_BYTES - head.len()));
        }
        if let Err(error) = out.write_all(&chunk).await {
            discard(&target).await;
            return Err(format!("cannot write file: {error}"));
        }
    }
    out.flush()
        .await
        .map_err(|e| format!("cannot write file: {e}"))?;
    let mime = attachment
        .file
        .mime_type
        .clone()
        .or_else(|| sniff_mime(&head).map(str::to_string))
        .or_else(|| mime_from_extension(&extension).map(str::to_string));
    Ok(Some(MediaItem {
        path: target.to_string_lossy().into_owned(),
        mime_type: mime,
        caption: None,
        transcript: None,
    }))
}

async fn discard(path: &Path) {
    if let Err(error) = tokio::fs::remove_file(path).await {
        log::debug!("telegram media: cannot remove partial file: {error}");
    }
}

/// Creates the directory (owner only) and deletes its oldest files until
/// at most `keep_bytes` remain.
async fn prepare_dir(dir: &Path, keep_bytes: u64) -> std::io::Result<()> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_file() {
                let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                files.push((modified, meta.len(), entry.path()));
            }
        }
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, path) in files {
            if total <= keep_bytes {
                break;
            }
            std::fs::remove_file(&path)?;
            total = total.saturating_sub(len);
        }
        Ok(())
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Bytes looked at to recognise a file.
const SNIFF_BYTES: usize = 16;

/// The MIME type of a file's first bytes, for the common formats.
pub fn sniff_mime(head: &[u8]) -> Option<&'static str> {
    let starts = |magic: &[u8]| head.starts_with(magic);
    if starts(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if starts(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if starts(b"GIF87a") || starts(b"GIF89a") {
        Some("image/gif")
    } else if starts(b"RIFF") && head.get(8..12) == Some(b"WEBP") {
        Some("image/webp")
    } else if starts(b"OggS") {
        Some("audio/ogg")
    } else if starts(b"%PDF-") {
        Some("application/pdf")
    } else if starts(b"ID3") {
        Some("audio/mpeg")
    } else if head.get(4..8) == Some(b"ftyp") {
        Some("video/mp4")
    } else {
        None
    }
}

fn mime_from_extension(extension: &str) -> Option<&'static str> {
    Some(match extension {
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "webp" => "image/webp",
        "oga" | "ogg" => "audio/ogg",
        "mp3" => "audio/mpeg",
        "mp4" => "video/mp4",
        "pdf" => "application/pdf",
        "txt" => "text/plain",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_name_the_file_its_size_and_the_limit() {
        let attachment = Attachment {
            kind: MediaKind::Document,
            file: FileRef {
                file_id: "f".into(),
                file_name: Some("report.pdf".into()),
                mime_type: None,
                file_size: None,
            },
        };
        assert_eq!(
            too_large_note(
                &attachment,
                Some(12 * 1024 * 1024 + 300_000),
                5 * 1024 * 1024
            ),
            "<media:document> (report.pdf, 12.3 MB: over the 5.0 MB limit, not downloaded)"
        );
        let photo = Attachment {
            kind: MediaKind::Image,
            file: FileRef::default(),
        };
        assert_eq!(
            too_large_note(&photo, None, 1_048),
            "<media:image> (over the 1.0 KB limit, not downloaded)"
        );
    }

    #[test]
    fn common_formats_are_sniffed() {
        assert_eq!(sniff_mime(&[0xff, 0xd8, 0xff, 0xe0, 0]), Some("image/jpeg"));
        assert_eq!(sniff_mime(b"\x89PNG\r\n\x1a\n...."), Some("image/png"));
        assert_eq!(sniff_mime(b"OggS\0\x02"), Some("audio/ogg"));
        assert_eq!(sniff_mime(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff_mime(b"%PDF-1.7"), Some("application/pdf"));
        assert_eq!(sniff_mime(b"hello"), None);
    }

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

    #[tokio::test]
    async fn directory_cap_removes_the_oldest_files_first() {
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, age_secs) in [("old", 300), ("mid", 200), ("new", 100)] {
            let path = dir.path().join(name);
            std::fs::write(&path, vec![0u8; 1000]).expect("write");
            let when = std::time::SystemTime::now() - std::time::Duration::from_secs(age_secs);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .expect("open")
                .set_modified(when)
                .expect("mtime");
        }
        prepare_dir(dir.path(), 2000).await.expect("prepare");
        assert!(!dir.path().join("old").exists());
        assert!(dir.path().join("mid").exists());
        assert!(dir.path().join("new").exists());
    }
}
