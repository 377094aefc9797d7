//! Embeds the Control UI (`ui/`) in the binary: each file gzip-compressed
//! once, here, at build time (zopfli), with a strong ETag from its content's
//! SHA-256. `src/gateway/control_ui/assets.rs` includes the generated table;
//! the gateway serves the compressed bytes as they are, so the binary holds
//! only the compressed form and nothing is compressed at run time.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The UI's source folder, relative to the manifest.
const UI_DIR: &str = "ui";

fn main() {
    let manifest = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let root = manifest.join(UI_DIR);
    println!("cargo:rerun-if-changed={UI_DIR}");
    let mut files = Vec::new();
    collect(&root, &root, &mut files);
    files.sort();
    let mut table = String::from("&[\n");
    for relative in &files {
        let source = root.join(relative);
        println!("cargo:rerun-if-changed={}", source.display());
        let raw =
            std::fs::read(&source).unwrap_or_else(|e| panic!("read {}: {e}", source.display()));
        let mut gzip = Vec::new();
        zopfli::compress(
            zopfli::Options::default(),
            zopfli::Format::Gzip,
            raw.as_slice(),
            &mut gzip,
        )
        .unwrap_or_else(|e| panic!("gzip {}: {e}", source.display()));
        let target = out.join("ui").join(format!("{relative}.gz"));
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("mkdir {}: {e}", parent.display()));
        }
        std::fs::write(&target, &gzip)
            .unwrap_or_else(|e| panic!("write {}: {e}", target.display()));
        let digest = Sha256::digest(&raw);
        let etag: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        let _ = writeln!(
            table,
            "    Asset {{ path: {relative:?}, content_type: {:?}, etag: \"\\\"{etag}\\\"\", raw_bytes: {}, gzip: include_bytes!({:?}) }},",
            content_type(relative),
            raw.len(),
            target.display().to_string(),
        );
    }
    table.push(']');
    let generated = out.join("ui_assets.rs");
    std::fs::write(&generated, table)
        .unwrap_or_else(|e| panic!("write {}: {e}", generated.display()));
}

/// Every file under `dir`, as `/`-separated paths relative to `root` (dot files left out).
fn collect(root: &Path, dir: &Path, files: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect(root, &path, files);
        } else if let Ok(relative) = path.strip_prefix(root) {
            let parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().to_string())
                .collect();
            files.push(parts.join("/"));
        }
    }
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "webmanifest" => "application/manifest+json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        other => panic!("ui/{path}: no content type for .{other} files; add one in build.rs"),
    }
}
