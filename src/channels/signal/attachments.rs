//! Inbound attachments through signal-cli's `getAttachment` (upstream's
//! way): the daemon answers `{"data": "<base64>"}` for an attachment id,
//! asked with the sender as `recipient` (a DM) or the group's `groupId`.
//!
//! Bounded: an attachment announced over the cap is not asked for; the
//! answer is read up to the base64 size of the cap plus 64 KiB for the
//! envelope (upstream's headroom) and refused past it; the base64 text is
//! parsed in place (no copy of it) and decoded to the file in 64 KiB
//! pieces, so the RAM it takes is the answer's size, bounded by the cap.
//! The file lands in the channel's media directory as the other channels'
//! downloads do (`channels::media`).

use std::borrow::Cow;

use base64::Engine;
use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::rpc::{error_of, RpcError, SignalRpc};
use super::translate::Attachment;
use crate::channels::media::{
    extension_of, failed_note, mime_from_extension, prepare_dir, sniff_mime, too_large_note,
    MediaKind, MediaLimits, MediaOutcome,
};
use crate::pipeline::context::MediaItem;

/// Room in a `getAttachment` answer beyond the base64 text (upstream's).
pub const ATTACHMENT_ANSWER_HEADROOM_BYTES: usize = 64 * 1024;
/// Base64 characters decoded at a time (a multiple of 4).
const DECODE_CHUNK_CHARS: usize = 64 * 1024;

#[derive(serde::Deserialize)]
struct Answer<'a> {
    #[serde(borrow, default)]
    result: Option<AttachmentData<'a>>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(serde::Deserialize)]
struct AttachmentData<'a> {
    #[serde(borrow, default)]
    data: Option<Cow<'a, str>>,
}

/// The largest `getAttachment` answer read for a file of at most `cap` bytes.
pub fn answer_cap(cap: u64) -> usize {
    let base64 = cap.saturating_mul(4).div_ceil(3);
    usize::try_from(base64)
        .unwrap_or(usize::MAX)
        .saturating_add(ATTACHMENT_ANSWER_HEADROOM_BYTES)
}

/// Fetches `attachment` into `limits.dir`; `from` holds `recipient` or
/// `groupId`.
pub async fn fetch(
    rpc: &SignalRpc,
    limits: &MediaLimits,
    attachment: &Attachment,
    from: Value,
) -> MediaOutcome {
    let kind = MediaKind::of_mime(attachment.content_type.as_deref());
    let cap = limits.max_file_bytes;
    let name = attachment.filename.as_deref();
    if attachment.size.is_some_and(|size| size > cap) {
        return MediaOutcome::Skipped(too_large_note(kind, name, attachment.size, cap));
    }
    let mut params = from;
    params["id"] = Value::String(attachment.id.clone());
    let bytes = match rpc.call_raw("getAttachment", params, answer_cap(cap)).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return MediaOutcome::Skipped(failed_note(kind, "signal-cli answered without data"))
        }
        Err(RpcError::Transport(reason)) if reason.contains("answer larger than") => {
            return MediaOutcome::Skipped(too_large_note(kind, name, None, cap));
        }
        Err(error) => return MediaOutcome::Skipped(failed_note(kind, &error.to_string())),
    };
    let answer: Answer<'_> = match serde_json::from_slice(&bytes) {
        Ok(answer) => answer,
        Err(error) => {
            let reason = format!("malformed getAttachment answer: {error}");
            return MediaOutcome::Skipped(failed_note(kind, &reason));
        }
    };
    if let Some(error) = answer.error.filter(|e| !e.is_null()) {
        let reason = error_of("getAttachment", &error).to_string();
        return MediaOutcome::Skipped(failed_note(kind, &reason));
    }
    let Some(data) = answer.result.and_then(|r| r.data) else {
        return MediaOutcome::Skipped(failed_note(kind, "signal-cli answered without data"));
    };
    let decoded_estimate = (data.len() as u64 / 4) * 3;
    if decoded_estimate > cap.saturating_add(2) {
        return MediaOutcome::Skipped(too_large_note(kind, name, Some(decoded_estimate), cap));
    }
    match save(limits, attachment, &data).await {
        Ok(item) => MediaOutcome::Saved(item),
        Err(reason) => MediaOutcome::Skipped(failed_note(kind, &reason)),
    }
}

/// Decodes `data` into a new file of the media directory.
async fn save(
    limits: &MediaLimits,
    attachment: &Attachment,
    data: &str,
) -> Result<MediaItem, String> {
    prepare_dir(
        &limits.dir,
        limits.max_dir_bytes.saturating_sub(limits.max_file_bytes),
    )
    .await
    .map_err(|e| format!("media directory: {e}"))?;
    let extension = match attachment.filename.as_deref() {
        Some(name) => extension_of(name),
        None => attachment
            .content_type
            .as_deref()
            .and_then(|m| m.split('/').nth(1))
            .map(extension_of_subtype)
            .unwrap_or_else(|| "bin".into()),
    };
    let path = limits
        .dir
        .join(format!("sg-{}.{extension}", uuid::Uuid::new_v4().simple()));
    let written = write_decoded(&path, data).await;
    let head = match written {
        Ok(head) => head,
        Err(error) => {
            let _ = tokio::fs::remove_file(&path).await;
            return Err(error);
        }
    };
    let mime = attachment
        .content_type
        .clone()
        .filter(|m| !m.trim().is_empty())
        .or_else(|| sniff_mime(&head).map(str::to_string))
        .or_else(|| mime_from_extension(&extension).map(str::to_string));
    Ok(MediaItem {
        path: path.to_string_lossy().into_owned(),
        mime_type: mime,
        caption: None,
        transcript: None,
        file_name: attachment.filename.clone(),
    })
}

/// `jpeg` from `image/jpeg`, `bin` for what does not look like an extension.
fn extension_of_subtype(subtype: &str) -> String {
    extension_of(&format!("x.{subtype}"))
}

/// Writes the decoded `data` in pieces; returns the file's first bytes.
async fn write_decoded(path: &std::path::Path, data: &str) -> Result<Vec<u8>, String> {
    let mut out = tokio::fs::File::create(path)
        .await
        .map_err(|e| format!("cannot create file: {e}"))?;
    let engine = base64::engine::general_purpose::STANDARD;
    let data = data.trim().as_bytes();
    let mut head = Vec::new();
    for piece in data.chunks(DECODE_CHUNK_CHARS) {
        let bytes = engine
            .decode(piece)
            .map_err(|e| format!("signal-cli sent invalid base64: {e}"))?;
        if head.len() < crate::channels::media::SNIFF_BYTES {
            let room = crate::channels::media::SNIFF_BYTES - head.len();
            head.extend(bytes.iter().take(room));
        }
        out.write_all(&bytes)
            .await
            .map_err(|e| format!("cannot write file: {e}"))?;
    }
    out.flush()
        .await
        .map_err(|e| format!("cannot write file: {e}"))?;
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_cap_is_the_base64_size_plus_headroom() {
        assert_eq!(answer_cap(3), 4 + ATTACHMENT_ANSWER_HEADROOM_BYTES);
        assert_eq!(
            answer_cap(5 * 1024 * 1024),
            6_990_507 + ATTACHMENT_ANSWER_HEADROOM_BYTES
        );
    }

    #[tokio::test]
    async fn base64_is_decoded_in_pieces_to_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let path = dir.path().join("f.bin");
        let head = write_decoded(&path, &data).await.expect("decoded");
        assert_eq!(std::fs::read(&path).expect("file"), bytes);
        assert_eq!(head.len(), crate::channels::media::SNIFF_BYTES);
        assert!(write_decoded(&path, "not base64!").await.is_err());
    }
}
