//! WhatsApp media, both ways, through the crate's media code: what a
//! received image, video, audio (voice note: `ptt`), document or sticker
//! message carries ([`InboundMedia`]), its download into the channel's media
//! directory, and the upload and message for a file pincer sends.
//!
//! Download: the crate fetches the blob from the CDN path in the message
//! (hosts from the `media_conn` IQ) and decrypts it as a stream (AES-256-CBC
//! with keys HKDF-expanded from the message's media key and the type's info
//! string), checking the truncated HMAC-SHA256 over IV + ciphertext before it
//! reports success; it does not check the plaintext's SHA-256, so
//! [`CappedFile`] hashes what it writes and the download is refused unless it
//! matches the message's `fileSha256` (and `fileLength`). The cap: a message
//! declaring more than it is not fetched at all, and the file refuses to grow
//! past it while decrypting (a lying `fileLength` ends at the cap). Nothing
//! is held whole in memory: the crate decrypts 8 KiB at a time into the file.
//!
//! Upload: the file is encrypted by the crate's streaming encryptor into a
//! temporary file beside the media directory, which is streamed to the CDN
//! (`upload_stream`), then deleted. The message sent carries the CDN path,
//! media key and hashes: an image, video or document with the caption, an
//! audio file or a voice note (`ptt`, Ogg/Opus sent as
//! `audio/ogg; codecs=opus`); WhatsApp shows no caption on audio, so the
//! caption follows as its own text message (upstream does the same).

use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use whatsapp_rust::buffa::Message as _;
use whatsapp_rust::download::{DownloadWriter, Downloadable, MediaType};
use whatsapp_rust::waproto::whatsapp as wa;
use whatsapp_rust::Client;

use crate::channels::media::{
    extension_of, failed_note, mime_from_extension, prepare_dir, sniff_mime, too_large_note,
    MediaKind, MediaLimits, MediaOutcome, SNIFF_BYTES,
};
use crate::channels::UploadKind;
use crate::pipeline::context::MediaItem;

/// The media part of a received message, as WhatsApp sent it.
#[derive(Debug, Clone)]
enum Part {
    Image(Box<wa::message::ImageMessage>),
    Video(Box<wa::message::VideoMessage>),
    Audio(Box<wa::message::AudioMessage>),
    Document(Box<wa::message::DocumentMessage>),
    Sticker(Box<wa::message::StickerMessage>),
}

impl Part {
    fn downloadable(&self) -> &dyn Downloadable {
        match self {
            Part::Image(m) => m.as_ref(),
            Part::Video(m) => m.as_ref(),
            Part::Audio(m) => m.as_ref(),
            Part::Document(m) => m.as_ref(),
            Part::Sticker(m) => m.as_ref(),
        }
    }

    fn encoded(&self) -> Vec<u8> {
        match self {
            Part::Image(m) => m.encode_to_vec(),
            Part::Video(m) => m.encode_to_vec(),
            Part::Audio(m) => m.encode_to_vec(),
            Part::Document(m) => m.encode_to_vec(),
            Part::Sticker(m) => m.encode_to_vec(),
        }
    }
}

/// A received attachment: what the message says about it, and the part to download it with.
#[derive(Debug, Clone)]
pub struct InboundMedia {
    pub kind: MediaKind,
    /// A voice note (`ptt`), not an audio file.
    pub voice_note: bool,
    /// The MIME type the sender declared, parameters dropped (`audio/ogg`).
    pub mime: Option<String>,
    pub file_name: Option<String>,
    /// The caption (images, videos, documents).
    pub caption: Option<String>,
    /// The plaintext size the message declares.
    pub file_length: Option<u64>,
    part: Part,
}

impl PartialEq for InboundMedia {
    fn eq(&self, other: &Self) -> bool {
        self.part.encoded() == other.part.encoded()
    }
}

impl Eq for InboundMedia {}

fn bare_mime(mime: Option<&String>) -> Option<String> {
    let mime = mime?.split(';').next()?.trim().to_ascii_lowercase();
    (!mime.is_empty()).then_some(mime)
}

impl InboundMedia {
    /// The attachment `message` carries, if any (view-once and other wrappers unwrapped by the crate).
    pub fn of(message: &wa::Message) -> Option<InboundMedia> {
        use whatsapp_rust::wacore::proto_helpers::MessageExt;
        let base = message.get_base_message();
        let caption = |c: &Option<String>| c.clone().filter(|c| !c.trim().is_empty());
        if let Some(m) = base.image_message.as_option() {
            return Some(InboundMedia {
                kind: MediaKind::Image,
                voice_note: false,
                mime: bare_mime(m.mimetype.as_ref()),
                file_name: None,
                caption: caption(&m.caption),
                file_length: m.file_length,
                part: Part::Image(Box::new(m.clone())),
            });
        }
        if let Some(m) = base.video_message.as_option() {
            return Some(InboundMedia {
                kind: MediaKind::Video,
                voice_note: false,
                mime: bare_mime(m.mimetype.as_ref()),
                file_name: None,
                caption: caption(&m.caption),
                file_length: m.file_length,
                part: Part::Video(Box::new(m.clone())),
            });
        }
        if let Some(m) = base.audio_message.as_option() {
            return Some(InboundMedia {
                kind: MediaKind::Audio,
                voice_note: m.ptt.unwrap_or(false),
                mime: bare_mime(m.mimetype.as_ref()),
                file_name: None,
                caption: None,
                file_length: m.file_length,
                part: Part::Audio(Box::new(m.clone())),
            });
        }
        if let Some(m) = base.document_message.as_option() {
            return Some(InboundMedia {
                kind: MediaKind::Document,
                voice_note: false,
                mime: bare_mime(m.mimetype.as_ref()),
                file_name: m.file_name.clone().or_else(|| m.title.clone()),
                caption: caption(&m.caption),
                file_length: m.file_length,
                part: Part::Document(Box::new(m.clone())),
            });
        }
        if let Some(m) = base.sticker_message.as_option() {
            return Some(InboundMedia {
                kind: MediaKind::Image,
                voice_note: false,
                mime: bare_mime(m.mimetype.as_ref()),
                file_name: None,
                caption: None,
                file_length: m.file_length,
                part: Part::Sticker(Box::new(m.clone())),
            });
        }
        None
    }

    /// The extension the downloaded file gets.
    fn extension(&self) -> String {
        if let Some(name) = &self.file_name {
            let ext = extension_of(name);
            if ext != "bin" {
                return ext;
            }
        }
        match self.mime.as_deref() {
            Some(mime) => crate::media::sniff::extension_for(mime).to_string(),
            None => "bin".to_string(),
        }
    }
}

/// A file a download is decrypted into: refuses to grow past the cap and
/// hashes what it holds (the crate empties it before each attempt).
struct CappedFile {
    file: std::fs::File,
    written: u64,
    cap: u64,
    over: Arc<AtomicBool>,
    hash: Sha256,
    head: Vec<u8>,
}

impl Write for CappedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.written + buf.len() as u64 > self.cap {
            self.over.store(true, Ordering::SeqCst);
            return Err(std::io::Error::other(format!(
                "the file passes the {} byte cap",
                self.cap
            )));
        }
        let n = self.file.write(buf)?;
        self.hash.update(&buf[..n]);
        if self.head.len() < SNIFF_BYTES {
            let room = SNIFF_BYTES - self.head.len();
            self.head.extend(buf[..n].iter().take(room));
        }
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Seek for CappedFile {
    fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
        self.file.seek(pos)
    }
}

impl DownloadWriter for CappedFile {
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        if len != 0 {
            return Err(std::io::Error::other(
                "a media download is only ever emptied",
            ));
        }
        self.file.set_len(0)?;
        self.written = 0;
        self.hash = Sha256::new();
        self.head.clear();
        Ok(())
    }
}

async fn discard(path: &Path) {
    if let Err(error) = tokio::fs::remove_file(path).await {
        log::debug!("whatsapp media: cannot remove a partial file: {error}");
    }
}

/// Downloads `media` into `limits.dir` (`wa-<uuid>.<ext>`), or says why not.
pub async fn download(client: &Client, media: &InboundMedia, limits: &MediaLimits) -> MediaOutcome {
    let kind = media.kind;
    let name = media.file_name.as_deref();
    let cap = limits.max_file_bytes;
    if let Some(size) = media.file_length.filter(|size| *size > cap) {
        return MediaOutcome::Skipped(too_large_note(kind, name, Some(size), cap));
    }
    if let Err(error) = prepare_dir(&limits.dir, limits.max_dir_bytes.saturating_sub(cap)).await {
        return MediaOutcome::Skipped(failed_note(kind, &format!("media directory: {error}")));
    }
    let path = limits.dir.join(format!(
        "wa-{}.{}",
        uuid::Uuid::new_v4().simple(),
        media.extension()
    ));
    let file = match std::fs::File::create(&path) {
        Ok(file) => file,
        Err(error) => {
            return MediaOutcome::Skipped(failed_note(
                kind,
                &format!("cannot create file: {error}"),
            ))
        }
    };
    let over = Arc::new(AtomicBool::new(false));
    let writer = CappedFile {
        file,
        written: 0,
        cap,
        over: Arc::clone(&over),
        hash: Sha256::new(),
        head: Vec::new(),
    };
    let written = match client
        .download_to_writer(media.part.downloadable(), writer)
        .await
    {
        Ok(written) => written,
        Err(error) => {
            discard(&path).await;
            if over.load(Ordering::SeqCst) {
                return MediaOutcome::Skipped(too_large_note(kind, name, None, cap));
            }
            log::warn!("whatsapp media: download failed: {error:#}");
            return MediaOutcome::Skipped(failed_note(kind, &download_reason(&error)));
        }
    };
    let digest = written.hash.clone().finalize();
    let declared_hash = media.part.downloadable().file_sha256();
    let mismatch = match (declared_hash, media.file_length) {
        (Some(hash), _) if hash != digest.as_slice() => {
            Some("its SHA-256 differs from the message's")
        }
        (_, Some(length)) if length != written.written => {
            Some("its size differs from the message's")
        }
        _ => None,
    };
    if let Some(reason) = mismatch {
        discard(&path).await;
        return MediaOutcome::Skipped(failed_note(
            kind,
            &format!("the decrypted file is not the one sent: {reason}"),
        ));
    }
    let mime = media
        .mime
        .clone()
        .or_else(|| sniff_mime(&written.head).map(str::to_string))
        .or_else(|| mime_from_extension(&media.extension()).map(str::to_string));
    MediaOutcome::Saved(MediaItem {
        path: path.to_string_lossy().into_owned(),
        mime_type: mime,
        caption: None,
        transcript: None,
        file_name: media.file_name.clone(),
    })
}

/// What the sender is told about a failed download (the crate's chain, without URLs or tokens).
fn download_reason(error: &whatsapp_rust::anyhow::Error) -> String {
    let text = format!("{error:#}");
    if text.contains("MAC mismatch") || text.contains("InvalidMac") {
        return "the file failed its integrity check (MAC mismatch)".into();
    }
    if text.contains("Missing") {
        return format!("the message lacks what a download needs ({text})");
    }
    if let Some(status) = text
        .split("status: ")
        .nth(1)
        .and_then(|rest| rest.get(..3))
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
    {
        return format!("WhatsApp's media server answered HTTP {status}");
    }
    "WhatsApp's media server could not be reached or sent a bad file".into()
}

/// WhatsApp's largest file per kind (its documented limits: 16 MB for
/// photos, videos and audio, 100 MB for documents).
pub fn max_upload_bytes(kind: UploadKind) -> u64 {
    match kind {
        UploadKind::Document => 100 * 1024 * 1024,
        _ => 16 * 1024 * 1024,
    }
}

/// The longest caption WhatsApp shows, in characters.
pub const MAX_CAPTION_CHARS: usize = 1024;

/// One file to send.
#[derive(Debug, Clone)]
pub struct OutboundMedia<'a> {
    pub path: &'a Path,
    pub file_name: &'a str,
    pub mime: &'a str,
    pub kind: UploadKind,
    pub caption: Option<&'a str>,
}

fn media_type(kind: UploadKind) -> MediaType {
    match kind {
        UploadKind::Photo => MediaType::Image,
        UploadKind::Video => MediaType::Video,
        UploadKind::Audio | UploadKind::Voice => MediaType::Audio,
        UploadKind::Document => MediaType::Document,
    }
}

/// The encrypted copy of a file, streamed to the CDN from disk.
struct EncryptedFile {
    path: PathBuf,
    len: u64,
}

impl whatsapp_rust::wacore::upload::UploadSource for EncryptedFile {
    fn len(&self) -> u64 {
        self.len
    }

    fn reader_from(&self, offset: u64) -> std::io::Result<Box<dyn std::io::Read + Send>> {
        let mut file = std::fs::File::open(&self.path)?;
        file.seek(std::io::SeekFrom::Start(offset))?;
        Ok(Box::new(file))
    }
}

/// Where encrypted copies wait for their upload.
fn outgoing_dir() -> PathBuf {
    crate::channels::media::media_root().join("whatsapp-out")
}

/// An encrypted copy older than this was left by a crash (an upload takes
/// at most its 300 s timeout after a much shorter encryption).
const STALE_COPY_SECS: u64 = 3600;

/// Creates `dir` (owner only) and removes copies left there by a crash;
/// copies of uploads in flight (younger) are left alone.
async fn prepare_outgoing(dir: &Path, stale_after: std::time::Duration) -> std::io::Result<()> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            let age = meta
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .unwrap_or_default();
            if meta.is_file() && age > stale_after {
                std::fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Encrypts `media` into a temporary file, uploads it and returns the message to send.
pub async fn upload(client: &Client, media: &OutboundMedia<'_>) -> Result<wa::Message, String> {
    let kind = media_type(media.kind);
    let dir = outgoing_dir();
    prepare_outgoing(&dir, std::time::Duration::from_secs(STALE_COPY_SECS))
        .await
        .map_err(|e| format!("media directory: {e}"))?;
    let encrypted = dir.join(format!("{}.enc", uuid::Uuid::new_v4().simple()));
    let source = media.path.to_path_buf();
    let target = encrypted.clone();
    let ogg = kind == MediaType::Audio && media.mime == "audio/ogg";
    let info = tokio::task::spawn_blocking(move || {
        // A voice note shows its length: read from the Ogg pages (streamed).
        let seconds = ogg
            .then(|| crate::media::ogg::check(&source).ok()?.duration_ms)
            .flatten()
            .map(|ms| u32::try_from(ms.div_ceil(1000)).unwrap_or(u32::MAX));
        let reader = std::io::BufReader::new(std::fs::File::open(&source)?);
        let writer = std::io::BufWriter::new(std::fs::File::create(&target)?);
        whatsapp_rust::wacore::upload::encrypt_media_streaming(reader, writer, kind)
            .map(|info| (info, seconds))
            .map_err(|e| std::io::Error::other(e.to_string()))
    })
    .await
    .map_err(|e| format!("encryption task: {e}"))
    .and_then(|r| r.map_err(|e| format!("cannot encrypt {}: {e}", media.file_name)));
    let (info, seconds) = match info {
        Ok(done) => done,
        Err(error) => {
            discard(&encrypted).await;
            return Err(error);
        }
    };
    let len = tokio::fs::metadata(&encrypted)
        .await
        .map(|m| m.len())
        .unwrap_or(0);
    let source = EncryptedFile {
        path: encrypted.clone(),
        len,
    };
    let uploaded = client.upload_stream(source, info, kind).await;
    discard(&encrypted).await;
    let uploaded =
        uploaded.map_err(|e| format!("upload to WhatsApp's media server failed: {e:#}"))?;
    let caption = media
        .caption
        .filter(|c| !c.trim().is_empty())
        .map(str::to_string);
    let mut message = wa::Message::default();
    match media.kind {
        UploadKind::Photo => {
            message.image_message =
                whatsapp_rust::buffa::MessageField::some(wa::message::ImageMessage {
                    url: Some(uploaded.url),
                    direct_path: Some(uploaded.direct_path),
                    media_key: Some(uploaded.media_key.to_vec()),
                    file_enc_sha256: Some(uploaded.file_enc_sha256.to_vec()),
                    file_sha256: Some(uploaded.file_sha256.to_vec()),
                    file_length: Some(uploaded.file_length),
                    media_key_timestamp: Some(uploaded.media_key_timestamp),
                    mimetype: Some(media.mime.to_string()),
                    caption,
                    ..Default::default()
                });
        }
        UploadKind::Video => {
            message.video_message =
                whatsapp_rust::buffa::MessageField::some(wa::message::VideoMessage {
                    url: Some(uploaded.url),
                    direct_path: Some(uploaded.direct_path),
                    media_key: Some(uploaded.media_key.to_vec()),
                    file_enc_sha256: Some(uploaded.file_enc_sha256.to_vec()),
                    file_sha256: Some(uploaded.file_sha256.to_vec()),
                    file_length: Some(uploaded.file_length),
                    media_key_timestamp: Some(uploaded.media_key_timestamp),
                    streaming_sidecar: uploaded.streaming_sidecar,
                    mimetype: Some(media.mime.to_string()),
                    caption,
                    ..Default::default()
                });
        }
        UploadKind::Audio | UploadKind::Voice => {
            let voice = media.kind == UploadKind::Voice;
            let mime = if voice && media.mime == "audio/ogg" {
                "audio/ogg; codecs=opus".to_string()
            } else {
                media.mime.to_string()
            };
            message.audio_message =
                whatsapp_rust::buffa::MessageField::some(wa::message::AudioMessage {
                    url: Some(uploaded.url),
                    direct_path: Some(uploaded.direct_path),
                    media_key: Some(uploaded.media_key.to_vec()),
                    file_enc_sha256: Some(uploaded.file_enc_sha256.to_vec()),
                    file_sha256: Some(uploaded.file_sha256.to_vec()),
                    file_length: Some(uploaded.file_length),
                    media_key_timestamp: Some(uploaded.media_key_timestamp),
                    streaming_sidecar: uploaded.streaming_sidecar,
                    mimetype: Some(mime),
                    ptt: Some(voice),
                    seconds,
                    ..Default::default()
                });
        }
        UploadKind::Document => {
            message.document_message =
                whatsapp_rust::buffa::MessageField::some(wa::message::DocumentMessage {
                    url: Some(uploaded.url),
                    direct_path: Some(uploaded.direct_path),
                    media_key: Some(uploaded.media_key.to_vec()),
                    file_enc_sha256: Some(uploaded.file_enc_sha256.to_vec()),
                    file_sha256: Some(uploaded.file_sha256.to_vec()),
                    file_length: Some(uploaded.file_length),
                    media_key_timestamp: Some(uploaded.media_key_timestamp),
                    mimetype: Some(media.mime.to_string()),
                    file_name: Some(media.file_name.to_string()),
                    title: Some(media.file_name.to_string()),
                    caption,
                    ..Default::default()
                });
        }
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_voice_note_is_described_from_its_message() {
        let message = wa::Message {
            audio_message: whatsapp_rust::buffa::MessageField::some(wa::message::AudioMessage {
                mimetype: Some("audio/ogg; codecs=opus".into()),
                ptt: Some(true),
                file_length: Some(1234),
                ..Default::default()
            }),
            ..Default::default()
        };
        let media = InboundMedia::of(&message).expect("media");
        assert_eq!(media.kind, MediaKind::Audio);
        assert!(media.voice_note);
        assert_eq!(media.mime.as_deref(), Some("audio/ogg"));
        assert_eq!(media.file_length, Some(1234));
        assert_eq!(media.extension(), "ogg");
        let text = wa::Message {
            conversation: Some("hi".into()),
            ..Default::default()
        };
        assert!(InboundMedia::of(&text).is_none());
    }

    #[test]
    fn documents_keep_their_name_and_caption() {
        let message = wa::Message {
            document_message: whatsapp_rust::buffa::MessageField::some(
                wa::message::DocumentMessage {
                    mimetype: Some("application/pdf".into()),
                    file_name: Some("Report.PDF".into()),
                    caption: Some("the report".into()),
                    ..Default::default()
                },
            ),
            ..Default::default()
        };
        let media = InboundMedia::of(&message).expect("media");
        assert_eq!(media.kind, MediaKind::Document);
        assert_eq!(media.file_name.as_deref(), Some("Report.PDF"));
        assert_eq!(media.caption.as_deref(), Some("the report"));
        assert_eq!(media.extension(), "pdf");
    }

    #[tokio::test]
    async fn only_stale_encrypted_copies_are_removed() {
        let dir = tempfile::tempdir().expect("dir");
        let old = dir.path().join("old.enc");
        let fresh = dir.path().join("fresh.enc");
        std::fs::write(&old, b"left by a crash").expect("old");
        std::fs::write(&fresh, b"an upload in flight").expect("fresh");
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3700);
        std::fs::File::options()
            .write(true)
            .open(&old)
            .and_then(|f| f.set_modified(hour_ago))
            .expect("age the old copy");
        prepare_outgoing(dir.path(), std::time::Duration::from_secs(STALE_COPY_SECS))
            .await
            .expect("prepare");
        assert!(!old.exists(), "a crash's copy is removed");
        assert!(fresh.exists(), "an upload in flight keeps its copy");
    }

    #[test]
    fn failed_downloads_are_told_without_urls() {
        let mac = whatsapp_rust::anyhow::anyhow!("MAC mismatch");
        assert!(download_reason(&mac).contains("integrity"));
        let status = whatsapp_rust::anyhow::anyhow!(
            "Download media not found/expired with status: 404 at https://mmg/x?token=secret"
        );
        let reason = download_reason(&status);
        assert_eq!(reason, "WhatsApp's media server answered HTTP 404");
    }
}
