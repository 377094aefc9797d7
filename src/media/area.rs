//! The media area: `<data dir>/media`, where attachments are downloaded
//! (`inbound/<channel>`), where copies prepared for a model go (`prepared`)
//! and where files pincer sends are kept until sent (`outbound`). Each
//! directory is owner-only and bounded: before a new file goes in, the
//! oldest files go until the directory is under its cap. Files are named
//! `<prefix>-<uuid>.<ext>`, never after user input.
//!
//! This file must never delete a file outside the area.

use std::path::{Component, Path, PathBuf};

/// The media area of one data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaArea {
    root: PathBuf,
}

impl MediaArea {
    /// The area under `data_dir` (`<data_dir>/media`).
    pub fn in_data_dir(data_dir: &Path) -> MediaArea {
        MediaArea {
            root: data_dir.join("media"),
        }
    }

    /// An area rooted at `root` itself (tests, benchmarks).
    pub fn at(root: PathBuf) -> MediaArea {
        MediaArea { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a channel's downloads go.
    pub fn inbound(&self, channel: &str) -> PathBuf {
        self.root.join("inbound").join(safe_segment(channel))
    }

    /// Where copies prepared for a model go (removed after their turn).
    pub fn prepared(&self) -> PathBuf {
        self.root.join("prepared")
    }

    /// Where files waiting to be sent go (synthesized speech, fetched URLs,
    /// compressed images).
    pub fn outbound(&self) -> PathBuf {
        self.root.join("outbound")
    }

    /// Whether `path` names something inside the area (no `..` escapes).
    pub fn contains(&self, path: &Path) -> bool {
        is_inside(path, &self.root)
    }

    /// Removes `path` if it is a file inside the area (a missing file is
    /// fine; anything else is logged).
    pub fn remove(&self, path: &Path) {
        if !self.contains(path) {
            log::warn!(
                "media: not removing {}: outside the media area",
                path.display()
            );
            return;
        }
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => log::warn!("media: cannot remove {}: {error}", path.display()),
        }
    }
}

/// A channel id as one path segment (anything odd becomes `_`).
fn safe_segment(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if cleaned.is_empty() {
        "_".to_string()
    } else {
        cleaned
    }
}

/// Whether `path` is absolute, under `root` and free of `..`.
pub fn is_inside(path: &Path, root: &Path) -> bool {
    path.is_absolute()
        && path.starts_with(root)
        && !path.components().any(|c| matches!(c, Component::ParentDir))
}

/// A fresh file name in `dir`: `<prefix>-<uuid>.<extension>`.
pub fn new_file(dir: &Path, prefix: &str, extension: &str) -> PathBuf {
    dir.join(format!(
        "{prefix}-{}.{extension}",
        uuid::Uuid::new_v4().simple()
    ))
}

/// Creates `dir` (owner only) and deletes its oldest files until at most
/// `keep_bytes` remain (blocking).
pub fn make_room(dir: &Path, keep_bytes: u64) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
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
}

/// [`make_room`] off the async worker.
pub async fn make_room_async(dir: &Path, keep_bytes: u64) -> std::io::Result<()> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || make_room(&dir, keep_bytes))
        .await
        .map_err(std::io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_sit_under_the_data_dir_and_names_are_tamed() {
        let area = MediaArea::in_data_dir(Path::new("/var/lib/pincer"));
        assert_eq!(area.root(), Path::new("/var/lib/pincer/media"));
        assert_eq!(
            area.inbound("telegram"),
            Path::new("/var/lib/pincer/media/inbound/telegram")
        );
        assert_eq!(
            area.inbound("../etc"),
            Path::new("/var/lib/pincer/media/inbound/___etc")
        );
        assert!(area.contains(Path::new("/var/lib/pincer/media/prepared/a.jpg")));
        assert!(!area.contains(Path::new("/var/lib/pincer/media/../store/data.mdb")));
        assert!(!area.contains(Path::new("/etc/passwd")));
    }

    #[test]
    fn room_is_made_by_removing_the_oldest_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("d");
        make_room(&root, 0).expect("created");
        for (i, name) in ["old", "mid", "new"].iter().enumerate() {
            let path = root.join(name);
            std::fs::write(&path, vec![0u8; 100]).expect("write");
            let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000 + i as u64);
            let file = std::fs::File::options()
                .write(true)
                .open(&path)
                .expect("open");
            file.set_modified(when).expect("mtime");
        }
        make_room(&root, 200).expect("trimmed");
        assert!(!root.join("old").exists());
        assert!(root.join("mid").exists() && root.join("new").exists());
        let outside = dir.path().join("keep");
        std::fs::write(&outside, b"x").expect("write");
        let area = MediaArea::at(root.clone());
        area.remove(&outside);
        assert!(outside.exists(), "a file outside the area stays");
        area.remove(&root.join("new"));
        assert!(!root.join("new").exists());
    }
}
