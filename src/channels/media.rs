//! Inbound attachments for every platform adapter: the per-file cap
//! (account `mediaMaxMb`, else `agents.defaults.mediaMaxMb`, else 5 MB), a
//! bounded media directory per channel (oldest files go first), a streamed
//! download that stops at the cap (a file is never held in RAM whole), MIME
//! detection (the platform's type, else the file's first bytes, else its
//! extension), the `<media:…>` notes for files that were not downloaded, and
//! the clean-up of a message's files once its turn has ended.
//!
//! This file must not know a platform's API beyond an HTTP URL and an
//! optional bearer token, and must never delete a file outside the media
//! root (`media_root`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::InboundEvent;
use crate::pipeline::context::{InboundMessage, MediaItem};

/// Per-file cap when neither the account nor `agents.defaults` set one.
pub const DEFAULT_MEDIA_MAX_MB: f64 = 5.0;
/// Cap of one channel's media directory.
pub const DEFAULT_MEDIA_DIR_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Longest a download may take, headers to last byte.
pub const DOWNLOAD_TIMEOUT_SECS: u64 = 60;
const BYTES_PER_MB: f64 = 1024.0 * 1024.0;
pub use crate::media::sniff::{mime_from_extension, sniff_mime, SNIFF_BYTES};

/// Where every channel's attachments live: `$TMPDIR/pincer-media`.
pub fn media_root() -> PathBuf {
    std::env::temp_dir().join("pincer-media")
}

/// Where attachments go and how big they may be.
#[derive(Debug, Clone)]
pub struct MediaLimits {
    pub dir: PathBuf,
    pub max_file_bytes: u64,
    pub max_dir_bytes: u64,
}

/// Where a channel's accounts keep attachments unless told otherwise: the
/// media root and the agents' default cap (`agents.defaults.mediaMaxMb`).
#[derive(Debug, Clone)]
pub struct MediaDefaults {
    pub root: PathBuf,
    pub default_max_mb: Option<f64>,
    pub dir_max_bytes: u64,
}

impl Default for MediaDefaults {
    fn default() -> Self {
        MediaDefaults {
            root: media_root(),
            default_max_mb: None,
            dir_max_bytes: DEFAULT_MEDIA_DIR_MAX_BYTES,
        }
    }
}

impl MediaDefaults {
    /// The defaults of a loaded config (media under the media root).
    pub fn for_config(config: &crate::config::Config) -> MediaDefaults {
        MediaDefaults {
            default_max_mb: config.agents.defaults.media_max_mb,
            ..MediaDefaults::default()
        }
    }

    /// `channel`'s directory under the root; the account's cap wins over
    /// the agents' default, else 5 MB.
    pub fn limits(&self, channel: &str, account_mb: Option<f64>) -> MediaLimits {
        let mb = account_mb
            .or(self.default_max_mb)
            .unwrap_or(DEFAULT_MEDIA_MAX_MB);
        MediaLimits {
            dir: self.root.join(channel),
            max_file_bytes: mb_to_bytes(mb),
            max_dir_bytes: self.dir_max_bytes,
        }
    }
}

/// Megabytes (as config spells them) to bytes.
pub fn mb_to_bytes(mb: f64) -> u64 {
    if mb.is_finite() && mb > 0.0 {
        (mb * BYTES_PER_MB) as u64
    } else {
        0
    }
}

/// What kind of attachment a message carries, for notes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    Image,
    Audio,
    Video,
    Document,
}

impl MediaKind {
    pub fn name(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Audio => "audio",
            MediaKind::Video => "video",
            MediaKind::Document => "document",
        }
    }

    /// The kind of a MIME type (`image/png` → image); documents otherwise.
    pub fn of_mime(mime: Option<&str>) -> MediaKind {
        match mime.unwrap_or("") {
            m if m.starts_with("image/") => MediaKind::Image,
            m if m.starts_with("audio/") => MediaKind::Audio,
            m if m.starts_with("video/") => MediaKind::Video,
            _ => MediaKind::Document,
        }
    }
}

/// What became of an attachment.
#[derive(Debug, Clone, PartialEq)]
pub enum MediaOutcome {
    Saved(MediaItem),
    /// Not downloaded; the note goes into the message body.
    Skipped(String),
}

/// `1.5 MB`, `900.0 KB`, `12 B`.
pub fn human_size(bytes: u64) -> String {
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

/// The note for a file over the cap: its name and size when known.
pub fn too_large_note(kind: MediaKind, name: Option<&str>, size: Option<u64>, cap: u64) -> String {
    let mut what: Vec<String> = name.iter().map(|n| n.to_string()).collect();
    what.extend(size.map(human_size));
    let what = if what.is_empty() {
        String::new()
    } else {
        format!("{}: ", what.join(", "))
    };
    format!(
        "<media:{}> ({what}over the {} limit, not downloaded)",
        kind.name(),
        human_size(cap)
    )
}

/// The note for a file that could not be fetched.
pub fn failed_note(kind: MediaKind, reason: &str) -> String {
    format!(
        "<media:{}> (could not be downloaded: {reason})",
        kind.name()
    )
}

/// The note for a file that is gone (a replayed message's, cleaned up).
pub fn gone_note(item: &MediaItem) -> String {
    let kind = MediaKind::of_mime(item.mime_type.as_deref());
    format!("<media:{}> (the file is no longer available)", kind.name())
}

/// Adds a fetched attachment to the event, or the note about a skipped one
/// to its body.
pub fn add_to_event(event: &mut InboundEvent, outcome: MediaOutcome) {
    match outcome {
        MediaOutcome::Saved(item) => event.message.media.push(item),
        MediaOutcome::Skipped(note) => {
            append_note(&mut event.message, &note);
            event.message.media_problems.push(problem_of(&note));
        }
    }
}

/// What the sender is told about a skipped file, from its note
/// (`<media:document> (report.pdf, 12.0 MB: over the 5.0 MB limit, not downloaded)`).
pub fn problem_of(note: &str) -> String {
    let parsed = note
        .strip_prefix("<media:")
        .and_then(|rest| rest.split_once("> ("))
        .and_then(|(kind, rest)| Some((kind, rest.strip_suffix(')')?)));
    match parsed {
        Some((kind, details)) => format!("The {kind} you sent was not used ({details})."),
        None => format!("An attachment was not used: {note}"),
    }
}

fn append_note(message: &mut InboundMessage, note: &str) {
    for body in [&mut message.body, &mut message.raw_body] {
        if body.is_empty() {
            *body = note.to_string();
        } else {
            body.push('\n');
            body.push_str(note);
        }
    }
}

/// A file a platform offers at a URL (Discord attachments, Slack files).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteFile {
    pub url: String,
    pub file_name: Option<String>,
    pub mime_type: Option<String>,
    /// The size the platform announced; over the cap means no fetch at all.
    pub size: Option<u64>,
}

impl RemoteFile {
    pub fn kind(&self) -> MediaKind {
        let from_name = self
            .file_name
            .as_deref()
            .and_then(|n| Path::new(n).extension())
            .and_then(|e| e.to_str())
            .and_then(|e| mime_from_extension(&e.to_lowercase()));
        MediaKind::of_mime(self.mime_type.as_deref().or(from_name))
    }
}

/// Fetches `file` (with the `Authorization` header value when given) into
/// `limits.dir`, named `<prefix>-<uuid>.<ext>`.
pub async fn fetch_remote(
    http: &reqwest::Client,
    limits: &MediaLimits,
    file: &RemoteFile,
    authorization: Option<&str>,
    prefix: &str,
) -> MediaOutcome {
    let kind = file.kind();
    let cap = limits.max_file_bytes;
    if let Some(size) = file.size.filter(|s| *s > cap) {
        return MediaOutcome::Skipped(too_large_note(
            kind,
            file.file_name.as_deref(),
            Some(size),
            cap,
        ));
    }
    let mut request = http
        .get(&file.url)
        .timeout(Duration::from_secs(DOWNLOAD_TIMEOUT_SECS));
    if let Some(value) = authorization {
        request = request.header(reqwest::header::AUTHORIZATION, value);
    }
    let response = match request.send().await.and_then(|r| r.error_for_status()) {
        Ok(response) => response,
        Err(error) => {
            let reason = error.without_url().to_string();
            return MediaOutcome::Skipped(failed_note(kind, &reason));
        }
    };
    let name_hint = file
        .file_name
        .clone()
        .or_else(|| {
            response
                .url()
                .path_segments()?
                .next_back()
                .map(str::to_string)
        })
        .unwrap_or_default();
    let download = Download {
        prefix,
        extension: extension_of(&name_hint),
        declared_mime: file.mime_type.clone(),
        file_name: file.file_name.clone(),
    };
    match download
        .save(limits, response, |e| e.without_url().to_string())
        .await
    {
        Ok(Some(item)) => MediaOutcome::Saved(item),
        Ok(None) => {
            let note = too_large_note(kind, file.file_name.as_deref(), None, cap);
            MediaOutcome::Skipped(note)
        }
        Err(reason) => MediaOutcome::Skipped(failed_note(kind, &reason)),
    }
}

/// The lower-cased extension of a file name, when it looks like one.
pub fn extension_of(name: &str) -> String {
    Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .filter(|e| e.len() <= 8 && e.chars().all(|c| c.is_ascii_alphanumeric()))
        .unwrap_or("bin")
        .to_lowercase()
}

/// How one streamed download is stored.
pub struct Download<'a> {
    /// File name prefix (`tg`, `dc`, `sl`).
    pub prefix: &'a str,
    pub extension: String,
    /// The MIME type the platform announced.
    pub declared_mime: Option<String>,
    /// The name the sender gave the file.
    pub file_name: Option<String>,
}

impl Download<'_> {
    /// Streams `response` to disk; `None` when it outgrew the cap (nothing
    /// is kept). `stream_error` renders a body error (it may redact).
    pub async fn save(
        self,
        limits: &MediaLimits,
        mut response: reqwest::Response,
        stream_error: impl Fn(reqwest::Error) -> String,
    ) -> Result<Option<MediaItem>, String> {
        let cap = limits.max_file_bytes;
        prepare_dir(&limits.dir, limits.max_dir_bytes.saturating_sub(cap))
            .await
            .map_err(|e| format!("media directory: {e}"))?;
        let target = limits.dir.join(format!(
            "{}-{}.{}",
            self.prefix,
            uuid::Uuid::new_v4().simple(),
            self.extension
        ));
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
                    return Err(stream_error(error));
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
        if let Err(error) = out.flush().await {
            discard(&target).await;
            return Err(format!("cannot write file: {error}"));
        }
        let mime = self
            .declared_mime
            .filter(|m| !m.trim().is_empty())
            .or_else(|| sniff_mime(&head).map(str::to_string))
            .or_else(|| mime_from_extension(&self.extension).map(str::to_string));
        Ok(Some(MediaItem {
            path: target.to_string_lossy().into_owned(),
            mime_type: mime,
            caption: None,
            transcript: None,
            file_name: self.file_name,
        }))
    }
}

async fn discard(path: &Path) {
    if let Err(error) = tokio::fs::remove_file(path).await {
        log::debug!("media: cannot remove partial file: {error}");
    }
}

/// Creates the directory (owner only) and deletes its oldest files until
/// at most `keep_bytes` remain.
pub async fn prepare_dir(dir: &Path, keep_bytes: u64) -> std::io::Result<()> {
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

/// Whether `path` names a file inside `root` (no `..` escapes).
fn is_inside(path: &Path, root: &Path) -> bool {
    use std::path::Component;
    path.is_absolute()
        && path.starts_with(root)
        && !path.components().any(|c| matches!(c, Component::ParentDir))
}

/// Removes a finished message's downloaded files (blocking: call it from a
/// blocking context). Paths outside `root` are left alone.
pub fn remove_files(items: &[MediaItem], root: &Path) {
    for item in items {
        let path = Path::new(&item.path);
        if !is_inside(path, root) {
            continue;
        }
        match std::fs::remove_file(path) {
            Ok(()) => log::debug!("media file {} removed after its turn", item.path),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => log::warn!("cannot remove media file {}: {error}", item.path),
        }
    }
}

/// A replayed message's files that are gone become notes in its body, so
/// the turn still runs (blocking: it checks the file system).
pub fn drop_missing(message: &mut InboundMessage) {
    let (present, gone): (Vec<MediaItem>, Vec<MediaItem>) = std::mem::take(&mut message.media)
        .into_iter()
        .partition(|item| Path::new(&item.path).is_file());
    message.media = present;
    for item in &gone {
        append_note(message, &gone_note(item));
    }
}

#[cfg(test)]
mod tests;
