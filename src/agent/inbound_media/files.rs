//! Images and documents of a message, on blocking threads: an image is measured from its header,
//! refused over the board's pixel cap or decode budget before anything is decoded, re-encoded to
//! the board's `imageMaxSide` when it must be, and read once as base64; a document's text is read
//! within `maxChars` and pages and put in a `<file>` block as untrusted content (upstream's
//! format), "(truncated)" when text was left out.
//!
//! This file must not decide what the sender is told beyond the reason's text.

use std::path::{Path, PathBuf};

use base64::Engine;

use crate::media::document::{self, DocumentError, DocumentLimits};
use crate::media::image::{self, ImageLimits};
use crate::pipeline::context::MediaItem;

use super::{display_name, Block, MediaInput};
use crate::agent::providers::ImagePart;

/// A JPEG or PNG within the side limit and this size goes to the model unchanged.
pub const KEEP_ORIGINAL_BYTES: u64 = 1024 * 1024;
/// JPEG quality of a re-encoded image.
const JPEG_QUALITY: u8 = 82;
/// Characters of one document's text (upstream's `DEFAULT_INPUT_FILE_MAX_CHARS`).
pub const DOCUMENT_MAX_CHARS: usize = 60_000;
/// PDF pages read (upstream's default `pdfMaxPages`).
pub const DOCUMENT_MAX_PAGES: usize = 20;

/// The image prepared for the model, or why not (for the sender).
pub(super) async fn prepare_image(
    input: &MediaInput<'_>,
    item: &MediaItem,
) -> Result<ImagePart, String> {
    let source = PathBuf::from(&item.path);
    let out_dir = input.prepared_dir.clone();
    let budget = input.budget;
    let limits = ImageLimits {
        max_side: budget.image_max_side,
        max_source_bytes: input.config.tools.media.image.effective_max_bytes(),
        keep_original_bytes: KEEP_ORIGINAL_BYTES,
        quality: JPEG_QUALITY,
    };
    let work = move || -> Result<ImagePart, String> {
        // Room for one more prepared image within the area's share.
        let keep = budget.area_bytes.saturating_sub(KEEP_ORIGINAL_BYTES * 4);
        std::fs::create_dir_all(&out_dir)
            .and_then(|()| crate::media::area::make_room(&out_dir, keep))
            .map_err(|e| format!("the media directory is not usable ({e})"))?;
        let prepared =
            image::prepare(&source, &out_dir, &budget, &limits).map_err(|e| e.to_string())?;
        let bytes = std::fs::read(&prepared.path);
        if !prepared.original {
            if let Err(error) = std::fs::remove_file(&prepared.path) {
                log::warn!("cannot remove a prepared image: {error}");
            }
        }
        let bytes = bytes.map_err(|e| format!("the prepared image could not be read ({e})"))?;
        Ok(ImagePart {
            mime: prepared.mime.to_string(),
            base64: base64::engine::general_purpose::STANDARD
                .encode(bytes)
                .into(),
        })
    };
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| format!("the image job failed ({e})"))?
}

/// A document's block for the model and, when it could not be read, the sender's notice.
pub(super) async fn read_document(
    input: &MediaInput<'_>,
    item: &MediaItem,
) -> (Block, Option<String>) {
    let path = PathBuf::from(&item.path);
    let name = display_name(item);
    let declared = item.mime_type.clone();
    let limits = DocumentLimits {
        max_chars: DOCUMENT_MAX_CHARS,
        max_pages: DOCUMENT_MAX_PAGES,
        inflate_bytes: input.budget.pdf_inflate_bytes,
    };
    let file_name = name.clone();
    let read = tokio::task::spawn_blocking(move || {
        document::extract(&path, &file_name, declared.as_deref(), limits)
    })
    .await;
    match read {
        Ok(Ok(text)) if text.text.trim().is_empty() => (
            Block::content(file_block(&name, &text.mime, "[No extractable text]")),
            None,
        ),
        Ok(Ok(text)) => {
            let mut body = untrusted(&text.text);
            if text.truncated {
                body.push_str("\n(truncated)");
            }
            (Block::content(file_block(&name, &text.mime, &body)), None)
        }
        Ok(Err(error)) => {
            let marker = match &error {
                DocumentError::NotWhatItClaims { .. } | DocumentError::Unsupported { .. } => {
                    let mime = actual_mime(&item.path);
                    format!("[Unsupported document format: {mime}. PDF and plain-text attachments can be read.]")
                }
                DocumentError::Pdf { .. } | DocumentError::Io { .. } => {
                    "[Attachment could not be read]".to_string()
                }
            };
            (
                Block::marker(marker),
                Some(format!("Your file could not be read: {error}.")),
            )
        }
        Err(error) => (
            Block::marker("[Attachment could not be read]".to_string()),
            Some(format!(
                "Your file could not be read: the job failed ({error})."
            )),
        ),
    }
}

/// The type a file's bytes say it is.
fn actual_mime(path: &str) -> String {
    let mut head = vec![0u8; crate::media::sniff::SNIFF_BYTES];
    let got = std::fs::File::open(Path::new(path))
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .unwrap_or(0);
    head.truncate(got);
    crate::media::sniff::sniff_mime(&head)
        .unwrap_or("application/octet-stream")
        .to_string()
}

/// `<file name="…" mime="…">\n…\n</file>`, with file tags inside the text defused.
fn file_block(name: &str, mime: &str, content: &str) -> String {
    let content = defuse_file_tags(content);
    format!(
        "<file name=\"{}\" mime=\"{}\">\n{content}\n</file>",
        xml_attr(name),
        xml_attr(mime)
    )
}

fn xml_attr(value: &str) -> String {
    value
        .replace(['\r', '\n', '\t'], " ")
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// `</file>` and `<file` in a document's text cannot close or open a block.
fn defuse_file_tags(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let rest = &lower[i..];
        if rest.starts_with("</file>") {
            out.push_str("&lt;/file&gt;");
            i += "</file>".len();
        } else if rest.starts_with("<file") {
            out.push_str("&lt;file");
            i += "<file".len();
        } else {
            let c = text[i..].chars().next().unwrap_or('\u{fffd}');
            out.push(c);
            i += c.len_utf8().max(1);
        }
    }
    out
}

/// Text from outside, between upstream's untrusted-content markers (their id unguessable).
fn untrusted(text: &str) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let id = &id[..16];
    let text = text
        .replace(
            "<<<EXTERNAL_UNTRUSTED_CONTENT",
            "<<EXTERNAL_UNTRUSTED_CONTENT",
        )
        .replace(
            "<<<END_EXTERNAL_UNTRUSTED_CONTENT",
            "<<END_EXTERNAL_UNTRUSTED_CONTENT",
        );
    format!(
        "<<<EXTERNAL_UNTRUSTED_CONTENT id=\"{id}\">>>\nSource: External\n---\n{text}\n<<<END_EXTERNAL_UNTRUSTED_CONTENT id=\"{id}\">>>"
    )
}

#[cfg(test)]
pub(super) fn file_block_for_tests(name: &str, mime: &str, content: &str) -> String {
    file_block(name, mime, content)
}
