//! `multipart/form-data` request bodies whose file parts stream from disk
//! (64 KiB at a time) with an exact `Content-Length`, for the uploads pincer
//! makes: audio to a transcription endpoint, photos, documents and voice
//! notes to the chat platforms. A file part's bytes never sit in memory whole.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use tokio::io::AsyncReadExt;

/// Bytes of a file read per chunk.
const CHUNK_BYTES: usize = 64 * 1024;

enum Segment {
    Bytes(Bytes),
    File(PathBuf),
}

/// A form being built.
pub struct Multipart {
    boundary: String,
    segments: Vec<Segment>,
    length: u64,
}

impl Default for Multipart {
    fn default() -> Self {
        Multipart::new()
    }
}

/// A header value's quoted string: quotes and backslashes escaped, line
/// breaks dropped.
fn quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\r' | '\n' => out.push(' '),
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Multipart {
    pub fn new() -> Multipart {
        Multipart {
            boundary: format!("pincer-{}", uuid::Uuid::new_v4().simple()),
            segments: Vec::new(),
            length: 0,
        }
    }

    fn push(&mut self, bytes: impl Into<Bytes>) {
        let bytes = bytes.into();
        self.length += bytes.len() as u64;
        self.segments.push(Segment::Bytes(bytes));
    }

    /// A text field.
    pub fn text(mut self, name: &str, value: &str) -> Multipart {
        let head = format!(
            "--{}\r\nContent-Disposition: form-data; name={}\r\n\r\n",
            self.boundary,
            quoted(name)
        );
        self.push(head);
        self.push(value.to_string());
        self.push("\r\n");
        self
    }

    /// A file field streamed from `path`, sent as `file_name` of type `mime`.
    pub fn file(
        mut self,
        name: &str,
        file_name: &str,
        mime: &str,
        path: &Path,
    ) -> std::io::Result<Multipart> {
        let len = std::fs::metadata(path)?.len();
        let head = format!(
            "--{}\r\nContent-Disposition: form-data; name={}; filename={}\r\nContent-Type: {}\r\n\r\n",
            self.boundary,
            quoted(name),
            quoted(file_name),
            mime
        );
        self.push(head);
        self.length += len;
        self.segments.push(Segment::File(path.to_path_buf()));
        self.push("\r\n");
        Ok(self)
    }

    /// The `Content-Type` header value.
    pub fn content_type(&self) -> String {
        format!("multipart/form-data; boundary={}", self.boundary)
    }

    /// The body's exact length (with the closing boundary).
    pub fn content_length(&self) -> u64 {
        self.length + self.boundary.len() as u64 + 6
    }

    /// The body as a stream: text parts from memory, file parts from disk.
    pub fn into_body(mut self) -> reqwest::Body {
        let closing = format!("--{}--\r\n", self.boundary);
        self.push(closing);
        let queue: VecDeque<Segment> = self.segments.into();
        let stream = futures_util::stream::unfold(
            (queue, None::<tokio::fs::File>),
            |(mut queue, mut open)| async move {
                loop {
                    if let Some(file) = open.as_mut() {
                        let mut buf = vec![0u8; CHUNK_BYTES];
                        match file.read(&mut buf).await {
                            Ok(0) => open = None,
                            Ok(n) => {
                                buf.truncate(n);
                                return Some((Ok(Bytes::from(buf)), (queue, open)));
                            }
                            Err(e) => return Some((Err(e), (VecDeque::new(), None))),
                        }
                    }
                    match queue.pop_front()? {
                        Segment::Bytes(bytes) => return Some((Ok(bytes), (queue, open))),
                        Segment::File(path) => match tokio::fs::File::open(&path).await {
                            Ok(file) => open = Some(file),
                            Err(e) => return Some((Err(e), (VecDeque::new(), None))),
                        },
                    }
                }
            },
        );
        reqwest::Body::wrap_stream(stream)
    }

    /// Sets the form's headers and body on `request`.
    pub fn attach(self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        request
            .header(reqwest::header::CONTENT_TYPE, self.content_type())
            .header(reqwest::header::CONTENT_LENGTH, self.content_length())
            .body(self.into_body())
    }
}

/// A file's bytes as a streamed request body (a raw upload, such as
/// Matrix's media repository takes), read `CHUNK_BYTES` at a time.
pub fn file_body(file: tokio::fs::File) -> reqwest::Body {
    let stream = futures_util::stream::unfold(Some(file), |open| async move {
        let mut file = open?;
        let mut buf = vec![0u8; CHUNK_BYTES];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), Some(file)))
            }
            Err(e) => Some((Err(e), None)),
        }
    });
    reqwest::Body::wrap_stream(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    #[tokio::test]
    async fn the_body_streams_fields_and_files_with_an_exact_length() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("voice.ogg");
        let content: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).expect("write");
        let form = Multipart::new()
            .text("model", "whisper-1")
            .file("file", "vo\"ice.ogg", "audio/ogg", &path)
            .expect("file");
        let boundary = form.boundary.clone();
        let length = form.content_length();
        let body = form.into_body();
        let mut collected = Vec::new();
        let mut frames = http_body_util::BodyStream::new(body);
        while let Some(frame) = frames.next().await {
            let frame = frame.expect("frame");
            if let Ok(data) = frame.into_data() {
                collected.extend_from_slice(&data);
            }
        }
        assert_eq!(collected.len() as u64, length);
        let text = String::from_utf8_lossy(&collected);
        assert!(text.starts_with(&format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
        )));
        assert!(text.contains("filename=\"vo\\\"ice.ogg\"\r\nContent-Type: audio/ogg\r\n\r\n"));
        assert!(text.ends_with(&format!("\r\n--{boundary}--\r\n")));
        let start = collected
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("first header end");
        let file_start = collected[start + 4..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|p| p + start + 8)
            .expect("file header end");
        assert_eq!(
            &collected[file_start..file_start + content.len()],
            &content[..]
        );
    }
}
