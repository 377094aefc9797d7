//! Documents as text for the model: PDF through `pdf`, UTF-8 text files
//! (plain, Markdown, CSV, JSON, HTML) read a buffer at a time; both stop at
//! `max_chars` and say so. Which handler reads a file is decided by its bytes
//! (`sniff`), so a ZIP archive named `report.pdf` is named for what it is.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use super::pdf::{self, PdfError, PdfLimits};
use super::sniff::{self, FileKind, SNIFF_BYTES};

/// Bytes read at a time from a text file.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// Limits of one document's text.
#[derive(Debug, Clone, Copy)]
pub struct DocumentLimits {
    pub max_chars: usize,
    pub max_pages: usize,
    /// Inflated bytes a PDF may produce.
    pub inflate_bytes: usize,
}

/// A document's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentText {
    pub text: String,
    /// Text was left out (over `max_chars`, or PDF pages over `max_pages`).
    pub truncated: bool,
    /// The file's real type.
    pub mime: String,
}

/// Why a document gave no text; the text is meant for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    #[error("{name} is not a PDF: its content is {actual}")]
    NotWhatItClaims { name: String, actual: String },
    #[error("{name}: {mime} documents cannot be read (PDF and plain-text files can)")]
    Unsupported { name: String, mime: String },
    #[error("{name}: {error}")]
    Pdf { name: String, error: PdfError },
    #[error("{name} could not be read: {error}")]
    Io { name: String, error: String },
}

/// What a sniffed type is, for a person.
fn describe(mime: &str) -> String {
    match mime {
        "application/zip" => "a ZIP archive".into(),
        "application/gzip" => "a gzip archive".into(),
        m if m.starts_with("image/") => format!("an image ({m})"),
        m if m.starts_with("audio/") => format!("audio ({m})"),
        m if m.starts_with("video/") => format!("a video ({m})"),
        m => format!("of type {m}"),
    }
}

/// Reads the text of the document at `path`, announced as `declared_mime`
/// and called `name` (blocking).
pub fn extract(
    path: &Path,
    name: &str,
    declared_mime: Option<&str>,
    limits: DocumentLimits,
) -> Result<DocumentText, DocumentError> {
    let io = |e: std::io::Error| DocumentError::Io {
        name: name.to_string(),
        error: e.to_string(),
    };
    let mut head = vec![0u8; SNIFF_BYTES];
    let got = File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(io)?;
    head.truncate(got);
    let extension = Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let mime = sniff::resolve_mime(&head, declared_mime, extension.as_deref())
        .unwrap_or_else(|| "application/octet-stream".to_string());
    let claims_pdf = declared_mime.is_some_and(|m| m.starts_with("application/pdf"))
        || extension.as_deref() == Some("pdf");
    match FileKind::of_mime(&mime) {
        FileKind::Pdf => {
            let limits = PdfLimits {
                max_pages: limits.max_pages,
                max_chars: limits.max_chars,
                inflate_bytes: limits.inflate_bytes,
            };
            let text = pdf::extract(path, limits).map_err(|error| DocumentError::Pdf {
                name: name.to_string(),
                error,
            })?;
            Ok(DocumentText {
                text: text.text,
                truncated: text.truncated,
                mime,
            })
        }
        FileKind::Text if !claims_pdf => read_text(path, limits.max_chars)
            .map(|(text, truncated)| DocumentText {
                text,
                truncated,
                mime,
            })
            .map_err(io),
        _ if claims_pdf => Err(DocumentError::NotWhatItClaims {
            name: name.to_string(),
            actual: describe(&mime),
        }),
        _ => Err(DocumentError::Unsupported {
            name: name.to_string(),
            mime,
        }),
    }
}

/// Up to `max_chars` characters of a UTF-8 file (invalid bytes replaced);
/// `true` when more followed.
fn read_text(path: &Path, max_chars: usize) -> std::io::Result<(String, bool)> {
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, File::open(path)?);
    let mut text = String::new();
    let mut chars = 0usize;
    let mut carry: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    loop {
        let n = reader.read(&mut buf)?;
        let done = n == 0;
        carry.extend_from_slice(&buf[..n]);
        // Decode what is complete; keep a cut character for the next read.
        let valid = match std::str::from_utf8(&carry) {
            Ok(_) => carry.len(),
            Err(e) if e.error_len().is_none() && !done => e.valid_up_to(),
            Err(_) => carry.len(),
        };
        let piece = String::from_utf8_lossy(&carry[..valid]).into_owned();
        carry.drain(..valid);
        for c in piece.chars() {
            if chars == max_chars {
                return Ok((text, true));
            }
            text.push(c);
            chars += 1;
        }
        if done {
            return Ok((text, false));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_chars: usize) -> DocumentLimits {
        DocumentLimits {
            max_chars,
            max_pages: 20,
            inflate_bytes: 1 << 20,
        }
    }

    #[test]
    fn text_files_are_read_up_to_the_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notes.md");
        std::fs::write(&path, "äöü ".repeat(50_000)).expect("write");
        let full = extract(&path, "notes.md", None, limits(1_000_000)).expect("text");
        assert_eq!(full.text.chars().count(), 200_000);
        assert!(!full.truncated);
        assert_eq!(full.mime, "text/markdown");
        let cut = extract(&path, "notes.md", Some("text/markdown"), limits(10)).expect("text");
        assert_eq!(cut.text, "äöü äöü äö");
        assert!(cut.truncated);
    }

    #[test]
    fn a_zip_posing_as_a_pdf_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("report.pdf");
        std::fs::write(&path, b"PK\x03\x04\x14\0\0\0\x08\0 zip content").expect("write");
        let error =
            extract(&path, "report.pdf", Some("application/pdf"), limits(100)).expect_err("zip");
        assert_eq!(
            error.to_string(),
            "report.pdf is not a PDF: its content is a ZIP archive"
        );
        let docx = dir.path().join("letter.docx");
        std::fs::write(&docx, b"PK\x03\x04\x14\0\0\0").expect("write");
        let error = extract(&docx, "letter.docx", None, limits(100)).expect_err("zip");
        assert!(error.to_string().contains("cannot be read"), "{error}");
    }
}
