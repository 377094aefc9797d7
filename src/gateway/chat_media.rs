//! Attachments of a reply in the web chat, as upstream's web chat shows them:
//! the assistant message's `MEDIA:` lines leave its text, and each image
//! becomes an `input_image` block whose `image_url` is a `data:` URL (JPEG,
//! PNG or WebP of at most [`MAX_WEBCHAT_IMAGE_DATA_BYTES`], re-encoded within
//! `media::outbound::PHOTO_MAX_SIDE` and that size when larger); each audio
//! file becomes upstream's audio block, `{"type": "attachment",
//! "attachment": {"url", "kind": "audio", "label", "mimeType",
//! "isVoiceNote"?}}`, its `url` a `data:` URL (upstream points at a local
//! path its own media route serves; pincer has no such route). A reply of
//! files only reads "Image reply", "Audio reply" or "Media reply", as
//! upstream's. Local paths are read only from the agent's workspace or the
//! media area (`media::outbound`); what is neither image nor audio, not
//! readable, not allowed or over a cap stays out of the blocks, named in a
//! `📎` line of the text so the reader knows a file was meant.
//!
//! Bounded: at most [`MAX_WEBCHAT_IMAGES`] images per message, each at most
//! [`MAX_WEBCHAT_IMAGE_DATA_BYTES`] before base64, and at most
//! [`MAX_WEBCHAT_AUDIO`] audio files of [`MAX_WEBCHAT_AUDIO_BYTES`] each.

use base64::Engine;
use serde_json::{json, Value};

use crate::media::outbound::{fit_photo, open_local, OutboundFile, SourcePolicy};
use crate::media::sniff::FileKind;
use crate::media::MediaBudget;
use crate::reply::media_lines::split_media_lines;

/// Upstream's cap on an image embedded in a web chat message.
pub const MAX_WEBCHAT_IMAGE_DATA_BYTES: u64 = 1_500_000;
/// Images embedded in one message at most.
pub const MAX_WEBCHAT_IMAGES: usize = 4;
/// Largest audio file embedded (upstream allows 15 MiB behind a media route;
/// an embedded file travels in the event itself, to every reader).
pub const MAX_WEBCHAT_AUDIO_BYTES: u64 = 2 * 1024 * 1024;
/// Audio files embedded in one message at most.
pub const MAX_WEBCHAT_AUDIO: usize = 2;

/// The content blocks of an assistant message whose text has `MEDIA:` lines
/// (`None`: it has none; the text goes as it is). Blocking: call it off the
/// async workers.
pub fn assistant_content(text: &str, policy: &SourcePolicy) -> Option<Vec<Value>> {
    let split = split_media_lines(text);
    if split.media.is_empty() && split.refused.is_empty() {
        return None;
    }
    let mut images = Vec::new();
    let mut audio = Vec::new();
    let mut missing = Vec::new();
    for source in &split.media {
        match embed(source, policy, split.audio_as_voice) {
            Some(Embedded::Image(url)) if images.len() < MAX_WEBCHAT_IMAGES => {
                images.push(json!({"type": "input_image", "image_url": url}))
            }
            Some(Embedded::Audio(block)) if audio.len() < MAX_WEBCHAT_AUDIO => audio.push(block),
            _ => missing.push(source.clone()),
        }
    }
    missing.extend(split.refused.iter().cloned());
    let mut text = split.text;
    for source in &missing {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!("📎 {source}"));
    }
    if text.trim().is_empty() {
        text = match (images.is_empty(), audio.is_empty()) {
            (false, false) => "Media reply",
            (true, false) => "Audio reply",
            _ => "Image reply",
        }
        .to_string();
    }
    let mut content = vec![json!({"type": "text", "text": text})];
    content.extend(images);
    content.extend(audio);
    Some(content)
}

/// A file shown inside the message.
enum Embedded {
    /// An image's `data:` URL.
    Image(String),
    /// An audio file's attachment block.
    Audio(Value),
}

/// A local image or audio file made a block, within the caps.
fn embed(source: &str, policy: &SourcePolicy, voice: bool) -> Option<Embedded> {
    let lower = source.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return None;
    }
    let file = open_local(source, policy).ok()?;
    match file.kind {
        FileKind::Image => image_data_url(&file, policy).map(Embedded::Image),
        FileKind::Audio if file.bytes <= MAX_WEBCHAT_AUDIO_BYTES => {
            let url = encode(&file, MAX_WEBCHAT_AUDIO_BYTES)?;
            let mut attachment = json!({
                "url": url, "kind": "audio", "label": file.file_name, "mimeType": file.mime,
            });
            if voice {
                attachment["isVoiceNote"] = json!(true);
            }
            Some(Embedded::Audio(
                json!({"type": "attachment", "attachment": attachment}),
            ))
        }
        _ => None,
    }
}

/// An assistant message of the transcript as `chat.history` shows it: the
/// text without `MEDIA:` lines and `[[audio_as_voice]]`, each file named in
/// a line as the live message names what it could not embed (history reads
/// no files: a page holds up to 1,000 messages).
pub fn history_text(text: &str) -> String {
    let lower = text.to_ascii_lowercase();
    if !lower.contains("media:") && !text.contains("[[") {
        return text.to_string();
    }
    let split = split_media_lines(text);
    let mut out = split.text;
    for source in split.media.iter().chain(&split.refused) {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("📎 {source}"));
    }
    out
}

/// An image as a `data:` URL within the web chat's cap.
fn image_data_url(file: &OutboundFile, policy: &SourcePolicy) -> Option<String> {
    let fitted = fit_photo(
        file,
        MAX_WEBCHAT_IMAGE_DATA_BYTES,
        &policy.outbound_dir,
        &MediaBudget::for_this_board(),
    )
    .ok()?;
    let url = encode(&fitted, MAX_WEBCHAT_IMAGE_DATA_BYTES);
    fitted.discard();
    url
}

fn encode(file: &OutboundFile, max_bytes: u64) -> Option<String> {
    if file.bytes > max_bytes {
        return None;
    }
    let bytes = std::fs::read(&file.path).ok()?;
    if bytes.len() as u64 > max_bytes {
        return None;
    }
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    Some(format!("data:{};base64,{data}", file.mime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_become_data_urls_and_other_files_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(&workspace).expect("ws");
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x02\0\0\0\x90wS\xde\0\0\0\x0cIDATx\x9cc\xf8\xcf\xc0\0\0\x03\x01\x01\0\xc9\xfe\x92\xef\0\0\0\0IEND\xaeB`\x82";
        std::fs::write(workspace.join("dot.png"), png).expect("png");
        std::fs::write(workspace.join("notes.txt"), "hi").expect("txt");
        let policy = SourcePolicy {
            outbound_dir: dir.path().join("media/outbound"),
            media_root: dir.path().join("media"),
            workspace,
            max_bytes: 1 << 20,
            outbound_dir_bytes: 1 << 20,
        };
        assert_eq!(assistant_content("no files here", &policy), None);
        let content = assistant_content("Look:\nMEDIA: ./dot.png\nMEDIA: ./notes.txt", &policy)
            .expect("media");
        assert_eq!(
            content[0],
            json!({"type": "text", "text": "Look:\n📎 ./notes.txt"})
        );
        let url = content[1]["image_url"].as_str().expect("image");
        let expected = base64::engine::general_purpose::STANDARD.encode(png);
        assert_eq!(url, format!("data:image/png;base64,{expected}"));
        assert_eq!(content[1]["type"], "input_image");
        let only = assistant_content("MEDIA: ./dot.png", &policy).expect("media");
        assert_eq!(only[0]["text"], "Image reply");
        let many: Vec<String> = (0..MAX_WEBCHAT_IMAGES + 1)
            .map(|_| "MEDIA: ./dot.png".to_string())
            .collect();
        let capped = assistant_content(&many.join("\n"), &policy).expect("media");
        assert_eq!(capped.len(), 1 + MAX_WEBCHAT_IMAGES, "at most four images");
        assert_eq!(
            capped[0]["text"], "📎 ./dot.png",
            "the one over the cap is named"
        );
    }

    #[test]
    fn audio_becomes_an_attachment_block_within_its_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(&workspace).expect("ws");
        // An MP3 frame header is enough for the sniffer.
        let mp3 = [b"ID3\x04\0\0\0\0\0\0".as_slice(), &[0u8; 64]].concat();
        std::fs::write(workspace.join("note.mp3"), &mp3).expect("mp3");
        let big = [b"ID3\x04\0\0\0\0\0\0".as_slice(), &vec![0u8; 3 << 20]].concat();
        std::fs::write(workspace.join("long.mp3"), &big).expect("big");
        let policy = SourcePolicy {
            outbound_dir: dir.path().join("media/outbound"),
            media_root: dir.path().join("media"),
            workspace,
            max_bytes: 64 << 20,
            outbound_dir_bytes: 64 << 20,
        };
        let content = assistant_content(
            "MEDIA: ./note.mp3\nMEDIA: ./long.mp3\n[[audio_as_voice]]",
            &policy,
        )
        .expect("media");
        assert_eq!(
            content[0],
            json!({"type": "text", "text": "📎 ./long.mp3"}),
            "the file over the audio cap is named"
        );
        let expected = base64::engine::general_purpose::STANDARD.encode(&mp3);
        assert_eq!(
            content[1],
            json!({"type": "attachment", "attachment": {
                "url": format!("data:audio/mpeg;base64,{expected}"), "kind": "audio",
                "label": "note.mp3", "mimeType": "audio/mpeg", "isVoiceNote": true}})
        );
        let only = assistant_content("MEDIA: ./note.mp3", &policy).expect("media");
        assert_eq!(only[0]["text"], "Audio reply");
        assert!(only[1]["attachment"].get("isVoiceNote").is_none());
    }
}
