//! The Control UI's files, embedded at build time (`build.rs`): gzip bytes,
//! content type and ETag of each file under `ui/`.

/// One embedded file.
#[derive(Debug)]
pub struct Asset {
    /// Path under `ui/`, `/`-separated (`index.html`, `assets/app.js`).
    pub path: &'static str,
    pub content_type: &'static str,
    /// Strong ETag (quoted), from the SHA-256 of the uncompressed file.
    pub etag: &'static str,
    /// Size of the uncompressed file.
    pub raw_bytes: usize,
    /// The file, gzip-compressed.
    pub gzip: &'static [u8],
}

/// Every file of the UI, sorted by path.
pub static ASSETS: &[Asset] = include!(concat!(env!("OUT_DIR"), "/ui_assets.rs"));

/// The file at `path` (relative to `ui/`).
pub fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|asset| asset.path == path)
}

/// What the binary carries for the UI: the compressed bytes of every file.
pub fn embedded_bytes() -> usize {
    ASSETS.iter().map(|asset| asset.gzip.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds_the_entry_page_compressed() {
        let index = find("index.html").expect("index.html is embedded");
        assert!(index.content_type.starts_with("text/html"));
        assert_eq!(&index.gzip[..2], &[0x1f, 0x8b], "gzip magic");
        assert!(index.etag.starts_with('"') && index.etag.ends_with('"'));
        assert!(index.gzip.len() < index.raw_bytes, "compression pays");
        assert!(embedded_bytes() >= index.gzip.len());
    }
}
