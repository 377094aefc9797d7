//! Files pincer sends: a source the agent named (a `MEDIA:` line, the
//! `message` tool's `mediaUrl`) made into a file on disk that is safe to
//! upload, and an image made small enough for a platform's photo limit.
//!
//! - A local path is read only when it resolves (symbolic links followed)
//!   inside one of the allowed roots: the agent's workspace and the media
//!   area. `~/` is the user's home, a relative path is the workspace's. A
//!   path elsewhere (`/etc/shadow`, a link out of the workspace) is refused
//!   by name, never opened.
//! - A remote `https` URL is downloaded into the area's `outbound`
//!   directory, streamed with a byte cap (the platform's largest upload or
//!   what the directory may hold, the smaller; the announced length is
//!   checked first, then every chunk), and removed after sending.
//! - An image over the photo limit (bytes or pixels per side) is re-encoded
//!   as a JPEG within it through `media::image`, whose decode is bounded by
//!   the board's budget.
//!
//! This file knows no chat platform: the caps come from the caller.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::budget::MediaBudget;
use super::image::{self, ImageLimits};
use super::sniff::{self, FileKind};

/// Longer side of an image sent as a photo, in pixels (a larger one is
/// re-encoded: chat apps show photos scaled down anyway).
pub const PHOTO_MAX_SIDE: u32 = 2048;
/// JPEG quality of a re-encoded photo.
const PHOTO_QUALITY: u8 = 85;
/// How long a remote file may take to download.
pub const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a source cannot be sent; the text is meant for the chat.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    #[error("{0}: no such file")]
    Missing(String),
    #[error("{0}: outside the agent's workspace and media folder, so it is not sent")]
    OutsideRoots(String),
    #[error("{0}: not a regular file")]
    NotAFile(String),
    #[error("{name} is {}, over the {} limit", human(*bytes), human(*max_bytes))]
    TooLarge {
        name: String,
        bytes: u64,
        max_bytes: u64,
    },
    #[error("{0}: only public https:// URLs are fetched")]
    RefusedUrl(String),
    #[error("{url}: download failed: {reason}")]
    Download { url: String, reason: String },
    #[error("{name}: {reason}")]
    Io { name: String, reason: String },
}

/// `1.5 MB`, `900.0 KB`, `12 B`.
pub fn human(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let value = bytes as f64;
    if value >= KIB * KIB {
        format!("{:.1} MB", value / (KIB * KIB))
    } else if value >= KIB {
        format!("{:.1} KB", value / KIB)
    } else {
        format!("{bytes} B")
    }
}

/// Where sources may come from and where downloads go.
#[derive(Debug, Clone)]
pub struct SourcePolicy {
    /// The agent's workspace: relative paths start here; files inside it
    /// may be sent.
    pub workspace: PathBuf,
    /// The media area's root: files inside it may be sent.
    pub media_root: PathBuf,
    /// Where downloads and re-encoded images go (inside `media_root`).
    pub outbound_dir: PathBuf,
    /// The largest file accepted or downloaded.
    pub max_bytes: u64,
    /// Bytes `outbound_dir` may hold before its oldest files go.
    pub outbound_dir_bytes: u64,
}

/// A file ready to upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundFile {
    pub path: PathBuf,
    /// The name it is uploaded as.
    pub file_name: String,
    pub mime: String,
    pub kind: FileKind,
    pub bytes: u64,
    /// Pincer wrote it (a download, a re-encoded copy): remove after sending.
    pub temporary: bool,
}

impl OutboundFile {
    /// Removes the file when pincer made it.
    pub fn discard(&self) {
        if self.temporary {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Makes `source` a file on disk (see the module's rules).
pub async fn open_source(
    http: &reqwest::Client,
    source: &str,
    policy: &SourcePolicy,
) -> Result<OutboundFile, SourceError> {
    let lower = source.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        if !crate::reply::media_lines::allowed_remote_url(source) {
            return Err(SourceError::RefusedUrl(source.to_string()));
        }
        return download(http, source, policy).await;
    }
    let policy = policy.clone();
    let source = source.to_string();
    tokio::task::spawn_blocking(move || open_local(&source, &policy))
        .await
        .map_err(|e| SourceError::Io {
            name: "file".into(),
            reason: e.to_string(),
        })?
}

/// `source` as an absolute path: `file:` removed, `~/` the home, relative
/// paths under the workspace.
fn absolute(source: &str, workspace: &Path) -> PathBuf {
    let source = source
        .strip_prefix("file://")
        .or_else(|| source.strip_prefix("file:"))
        .unwrap_or(source);
    if let Some(rest) = source.strip_prefix("~/") {
        if let Some(home) = std::env::var_os("HOME") {
            return PathBuf::from(home).join(rest);
        }
    }
    let path = Path::new(source);
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        workspace.join(path)
    }
}

/// A local file inside the allowed roots.
pub fn open_local(source: &str, policy: &SourcePolicy) -> Result<OutboundFile, SourceError> {
    let name = display_name(source);
    let path = absolute(source, &policy.workspace);
    let real = match std::fs::canonicalize(&path) {
        Ok(real) => real,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SourceError::Missing(source.to_string()))
        }
        Err(e) => {
            return Err(SourceError::Io {
                name,
                reason: e.to_string(),
            })
        }
    };
    let inside = [&policy.workspace, &policy.media_root]
        .iter()
        .filter_map(|root| std::fs::canonicalize(root).ok())
        .any(|root| real.starts_with(&root));
    if !inside {
        return Err(SourceError::OutsideRoots(source.to_string()));
    }
    let meta = std::fs::metadata(&real).map_err(|e| SourceError::Io {
        name: name.clone(),
        reason: e.to_string(),
    })?;
    if !meta.is_file() {
        return Err(SourceError::NotAFile(source.to_string()));
    }
    if meta.len() > policy.max_bytes {
        return Err(SourceError::TooLarge {
            name,
            bytes: meta.len(),
            max_bytes: policy.max_bytes,
        });
    }
    let mime = mime_of(&real, &name);
    Ok(OutboundFile {
        kind: FileKind::of_mime(&mime),
        mime,
        file_name: name,
        bytes: meta.len(),
        path: real,
        temporary: false,
    })
}

/// The last path segment (or the URL's), for captions and upload names.
fn display_name(source: &str) -> String {
    let without_query = source.split(['?', '#']).next().unwrap_or(source);
    let name = without_query
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("")
        .trim();
    if name.is_empty() {
        "file".to_string()
    } else {
        name.chars().take(128).collect()
    }
}

/// The file's type: its bytes first, then its name's extension.
fn mime_of(path: &Path, name: &str) -> String {
    use std::io::Read;
    let mut head = vec![0u8; sniff::SNIFF_BYTES];
    let read = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    head.truncate(read);
    let extension = Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    sniff::resolve_mime(&head, None, extension.as_deref())
        .unwrap_or_else(|| "application/octet-stream".to_string())
}

/// Downloads `url` into the outbound directory within `policy.max_bytes`.
pub async fn download(
    http: &reqwest::Client,
    url: &str,
    policy: &SourcePolicy,
) -> Result<OutboundFile, SourceError> {
    let failed = |reason: String| SourceError::Download {
        url: url.to_string(),
        reason,
    };
    super::area::make_room_async(&policy.outbound_dir, policy.outbound_dir_bytes)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let name = display_name(url);
    // A download lands in the media area: never more than the area may hold.
    let cap = policy.max_bytes.min(policy.outbound_dir_bytes);
    let path = super::area::new_file(&policy.outbound_dir, "fetched", "bin");
    let work = async {
        let mut response = http
            .get(url)
            .send()
            .await
            .map_err(|e| failed(e.without_url().to_string()))?;
        if !response.status().is_success() {
            return Err(failed(format!("HTTP {}", response.status().as_u16())));
        }
        let too_large = |bytes| SourceError::TooLarge {
            name: name.clone(),
            bytes,
            max_bytes: cap,
        };
        if let Some(length) = response.content_length().filter(|l| *l > cap) {
            return Err(too_large(length));
        }
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let mut written: u64 = 0;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| failed(e.without_url().to_string()))?
        {
            written += chunk.len() as u64;
            if written > cap {
                return Err(too_large(written));
            }
            file.write_all(&chunk)
                .await
                .map_err(|e| failed(e.to_string()))?;
        }
        file.flush().await.map_err(|e| failed(e.to_string()))?;
        Ok(written)
    };
    let result = match tokio::time::timeout(DOWNLOAD_TIMEOUT, work).await {
        Ok(result) => result,
        Err(_) => Err(failed(format!(
            "timed out after {} s",
            DOWNLOAD_TIMEOUT.as_secs()
        ))),
    };
    let bytes = match result {
        Ok(bytes) => bytes,
        Err(error) => {
            let _ = tokio::fs::remove_file(&path).await;
            return Err(error);
        }
    };
    let mime = mime_of(&path, &name);
    Ok(OutboundFile {
        kind: FileKind::of_mime(&mime),
        mime,
        file_name: name,
        bytes,
        path,
        temporary: true,
    })
}

/// An image within `max_bytes` and [`PHOTO_MAX_SIDE`]: the file itself when
/// it already is (a JPEG or PNG), else a re-encoded JPEG copy (blocking).
pub fn fit_photo(
    file: &OutboundFile,
    max_bytes: u64,
    out_dir: &Path,
    budget: &MediaBudget,
) -> Result<OutboundFile, image::ImageError> {
    let limits = ImageLimits {
        max_side: PHOTO_MAX_SIDE,
        max_source_bytes: u64::MAX,
        keep_original_bytes: max_bytes,
        quality: PHOTO_QUALITY,
    };
    std::fs::create_dir_all(out_dir).map_err(|e| image::ImageError::Io(e.to_string()))?;
    let prepared = image::prepare(&file.path, out_dir, budget, &limits)?;
    if prepared.original {
        return Ok(file.clone());
    }
    if prepared.bytes > max_bytes {
        let _ = std::fs::remove_file(&prepared.path);
        return Err(image::ImageError::FileTooLarge {
            bytes: prepared.bytes,
            max_bytes,
        });
    }
    let stem = Path::new(&file.file_name)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("image");
    Ok(OutboundFile {
        path: prepared.path,
        file_name: format!("{stem}.jpg"),
        mime: prepared.mime.to_string(),
        kind: FileKind::Image,
        bytes: prepared.bytes,
        temporary: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(dir: &Path) -> SourcePolicy {
        let workspace = dir.join("workspace");
        let media_root = dir.join("media");
        std::fs::create_dir_all(&workspace).expect("workspace");
        std::fs::create_dir_all(&media_root).expect("media");
        SourcePolicy {
            outbound_dir: media_root.join("outbound"),
            workspace,
            media_root,
            max_bytes: 1000,
            outbound_dir_bytes: 10_000,
        }
    }

    #[test]
    fn local_files_come_from_the_workspace_or_media_area_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let policy = policy(dir.path());
        std::fs::write(policy.workspace.join("chart.png"), b"\x89PNG\r\n\x1a\nrest").expect("w");
        let file = open_local("./chart.png", &policy).expect("inside the workspace");
        assert_eq!(file.mime, "image/png");
        assert_eq!(file.file_name, "chart.png");
        assert!(!file.temporary);
        std::fs::write(policy.media_root.join("a.txt"), b"hello").expect("w");
        let inside = policy.media_root.join("a.txt");
        assert!(open_local(inside.to_str().expect("utf-8"), &policy).is_ok());
        let outside = dir.path().join("secret.txt");
        std::fs::write(&outside, b"secret").expect("w");
        let outside = outside.to_str().expect("utf-8").to_string();
        assert_eq!(
            open_local(&outside, &policy),
            Err(SourceError::OutsideRoots(outside.clone()))
        );
        assert!(matches!(
            open_local("/etc/shadow", &policy),
            Err(SourceError::OutsideRoots(_) | SourceError::Io { .. })
        ));
        std::os::unix::fs::symlink(&outside, policy.workspace.join("link.txt")).expect("link");
        assert!(
            matches!(
                open_local("link.txt", &policy),
                Err(SourceError::OutsideRoots(_))
            ),
            "a link out of the workspace is refused"
        );
        assert_eq!(
            open_local("./missing.png", &policy),
            Err(SourceError::Missing("./missing.png".into()))
        );
        std::fs::write(policy.workspace.join("big.bin"), vec![0u8; 1001]).expect("w");
        let error = open_local("big.bin", &policy).expect_err("over the cap");
        assert_eq!(
            error.to_string(),
            "big.bin is 1001 B, over the 1000 B limit"
        );
        assert!(matches!(
            open_local("./", &policy),
            Err(SourceError::NotAFile(_))
        ));
    }

    #[tokio::test]
    async fn private_urls_are_never_fetched() {
        let dir = tempfile::tempdir().expect("tempdir");
        let policy = policy(dir.path());
        let http = reqwest::Client::new();
        for url in ["http://example.com/a.png", "https://127.0.0.1/a.png"] {
            assert_eq!(
                open_source(&http, url, &policy).await,
                Err(SourceError::RefusedUrl(url.into()))
            );
        }
    }

    #[tokio::test]
    async fn a_download_stops_at_its_byte_cap_and_leaves_nothing() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().expect("tempdir");
        let policy = policy(dir.path());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            for body_len in [600usize, 5000] {
                let (mut socket, _) = listener.accept().await.expect("accept");
                let mut buf = [0u8; 1024];
                let _ = socket.read(&mut buf).await;
                // No Content-Length: the cap must hold while streaming.
                let head =
                    "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nConnection: close\r\n\r\n";
                let _ = socket.write_all(head.as_bytes()).await;
                let mut body = b"\x89PNG\r\n\x1a\n".to_vec();
                body.resize(body_len, 7);
                let _ = socket.write_all(&body).await;
            }
        });
        let http = reqwest::Client::new();
        let url = format!("http://{addr}/pics/cat.png?x=1");
        let file = download(&http, &url, &policy)
            .await
            .expect("within the cap");
        assert_eq!((file.bytes, file.mime.as_str()), (600, "image/png"));
        assert_eq!(file.file_name, "cat.png");
        assert!(
            file.temporary
                && policy
                    .outbound_dir
                    .join(&file.path)
                    .starts_with(&policy.outbound_dir)
        );
        file.discard();
        let error = download(&http, &url, &policy).await.expect_err("over");
        assert!(matches!(error, SourceError::TooLarge { .. }), "{error}");
        let left = std::fs::read_dir(&policy.outbound_dir)
            .expect("dir")
            .count();
        assert_eq!(left, 0, "nothing left behind");
    }
}
