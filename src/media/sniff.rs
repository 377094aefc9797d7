//! What a file is: its MIME type from its first bytes (magic numbers of the
//! common formats), else from its extension; and which of pincer's handlers
//! takes it ([`FileKind`]). The bytes win over a declared type, so a ZIP
//! archive named `report.pdf` is recognised as the ZIP it is.

/// Bytes looked at to recognise a file.
pub const SNIFF_BYTES: usize = 64;

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
    } else if starts(b"RIFF") && head.get(8..12) == Some(b"WAVE") {
        Some("audio/wav")
    } else if starts(b"OggS") {
        Some("audio/ogg")
    } else if starts(b"fLaC") {
        Some("audio/flac")
    } else if starts(b"%PDF-") {
        Some("application/pdf")
    } else if starts(b"ID3") || (head.len() > 1 && head[0] == 0xff && head[1] & 0xe0 == 0xe0) {
        Some("audio/mpeg")
    } else if head.get(4..8) == Some(b"ftyp") {
        match head.get(8..12) {
            Some(b"M4A ") | Some(b"M4B ") => Some("audio/mp4"),
            Some(b"heic") | Some(b"heix") | Some(b"mif1") => Some("image/heic"),
            _ => Some("video/mp4"),
        }
    } else if starts(&[0x1a, 0x45, 0xdf, 0xa3]) {
        Some("video/webm")
    } else if starts(b"PK\x03\x04") || starts(b"PK\x05\x06") {
        Some("application/zip")
    } else if starts(&[0x1f, 0x8b]) {
        Some("application/gzip")
    } else {
        None
    }
}

/// The MIME type of a lower-case file extension, for the common formats.
pub fn mime_from_extension(extension: &str) -> Option<&'static str> {
    Some(match extension {
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "heic" | "heif" => "image/heic",
        "oga" | "ogg" | "opus" => "audio/ogg",
        "mp3" => "audio/mpeg",
        "m4a" => "audio/mp4",
        "wav" => "audio/wav",
        "flac" => "audio/flac",
        "mp4" => "video/mp4",
        "webm" => "video/webm",
        "pdf" => "application/pdf",
        "txt" | "log" => "text/plain",
        "md" | "markdown" => "text/markdown",
        "csv" => "text/csv",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        "zip" => "application/zip",
        _ => return None,
    })
}

/// The extension pincer gives a file of this MIME type.
pub fn extension_for(mime: &str) -> &'static str {
    match mime {
        "image/jpeg" => "jpg",
        "image/png" => "png",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "audio/ogg" | "audio/opus" => "ogg",
        "audio/mpeg" => "mp3",
        "audio/mp4" => "m4a",
        "audio/wav" => "wav",
        "video/mp4" => "mp4",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        _ => "bin",
    }
}

/// Which handler takes a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Image,
    Audio,
    Video,
    Pdf,
    /// UTF-8 text (plain, Markdown, CSV, JSON, HTML).
    Text,
    /// Anything else (archives, office files, unknown binaries).
    Other,
}

impl FileKind {
    /// The kind of a MIME type.
    pub fn of_mime(mime: &str) -> FileKind {
        let mime = mime.split(';').next().unwrap_or("").trim();
        match mime {
            m if m.starts_with("image/") => FileKind::Image,
            m if m.starts_with("audio/") => FileKind::Audio,
            m if m.starts_with("video/") => FileKind::Video,
            "application/pdf" => FileKind::Pdf,
            m if m.starts_with("text/") => FileKind::Text,
            "application/json" | "application/xml" | "application/x-yaml" => FileKind::Text,
            _ => FileKind::Other,
        }
    }
}

/// Whether `head` looks like text: valid UTF-8 (a cut last character
/// allowed) without NUL bytes or other control characters beyond
/// whitespace.
pub fn looks_like_text(head: &[u8]) -> bool {
    if head.is_empty() {
        return false;
    }
    let valid = match std::str::from_utf8(head) {
        Ok(text) => text,
        // A multi-byte character cut by the sniff window.
        Err(error) if error.error_len().is_none() => {
            std::str::from_utf8(&head[..error.valid_up_to()]).unwrap_or("")
        }
        Err(_) => return false,
    };
    valid
        .chars()
        .all(|c| !c.is_control() || matches!(c, '\n' | '\r' | '\t' | '\u{c}'))
}

/// The type a file really has: its bytes' type when they have a known
/// signature, else the declared type, else its extension's, else text when it
/// looks like text.
pub fn resolve_mime(
    head: &[u8],
    declared: Option<&str>,
    extension: Option<&str>,
) -> Option<String> {
    if let Some(sniffed) = sniff_mime(head) {
        return Some(sniffed.to_string());
    }
    let declared = declared
        .map(|m| {
            m.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|m| !m.is_empty() && m != "application/octet-stream");
    declared
        .or_else(|| extension.and_then(mime_from_extension).map(str::to_string))
        .or_else(|| looks_like_text(head).then(|| "text/plain".to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_formats_are_sniffed() {
        assert_eq!(sniff_mime(&[0xff, 0xd8, 0xff, 0xe0, 0]), Some("image/jpeg"));
        assert_eq!(sniff_mime(b"\x89PNG\r\n\x1a\n...."), Some("image/png"));
        assert_eq!(sniff_mime(b"OggS\0\x02"), Some("audio/ogg"));
        assert_eq!(sniff_mime(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff_mime(b"%PDF-1.7"), Some("application/pdf"));
        assert_eq!(sniff_mime(b"PK\x03\x04\x14\0"), Some("application/zip"));
        assert_eq!(sniff_mime(b"hello"), None);
    }

    #[test]
    fn the_bytes_beat_the_declared_type_and_name() {
        let zip = b"PK\x03\x04\x14\0\0\0";
        assert_eq!(
            resolve_mime(zip, Some("application/pdf"), Some("pdf")).as_deref(),
            Some("application/zip")
        );
        assert_eq!(
            resolve_mime(b"a,b\n1,2\n", Some("application/octet-stream"), Some("csv")).as_deref(),
            Some("text/csv")
        );
        assert_eq!(
            resolve_mime(b"plain words", None, None).as_deref(),
            Some("text/plain")
        );
        assert_eq!(resolve_mime(b"\0\x01\x02", None, None), None);
        assert_eq!(FileKind::of_mime("application/pdf"), FileKind::Pdf);
        assert_eq!(
            FileKind::of_mime("text/markdown; charset=utf-8"),
            FileKind::Text
        );
        assert_eq!(FileKind::of_mime("application/zip"), FileKind::Other);
    }

    #[test]
    fn text_detection_allows_a_cut_last_character() {
        let mut head = "grüße".as_bytes().to_vec();
        head.pop();
        assert!(looks_like_text(&head));
        assert!(!looks_like_text(b"a\0b"));
    }
}
