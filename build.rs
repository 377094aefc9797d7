//! Build steps of pincer:
//! 1. The Control UI (`ui/`) is embedded in the binary: each file gzip-compressed once, here, at
//!    build time (zopfli), with a strong ETag from its content's SHA-256.
//!    `src/gateway/control_ui/assets.rs` includes the generated table; the gateway serves the
//!    compressed bytes as they are, so the binary holds only the compressed form and nothing is
//!    compressed at run time.
//! 2. Link settings of the release binary (the `pincer` bin only: dependencies, tests and
//!    examples are built as cargo says). Measured with `scripts/bench --size` (README, "Binary size"):
//!    - LLD, the toolchain's own `rust-lld` (through the `gcc-ld` wrapper rustup ships), for what follows;
//!    - packed relative relocations (`-z pack-relative-relocs`, DT_RELR): a position-independent
//!      binary's ~30,000 relocations take a few KiB instead of ~450 KiB, and are not read page by page
//!      at every start. The binary then needs glibc 2.36 or later (Debian 12 "bookworm", Raspberry Pi
//!      OS bookworm);
//!    - the release profile unwinds (Cargo.toml: a panicking connection task closes that connection,
//!      not the gateway). Built with `CARGO_PROFILE_RELEASE_PANIC=abort` instead, nothing unwinds and
//!      the unwind tables (`.eh_frame`, ~1 MiB) are left out too: the smallest binary, for those who
//!      prefer a restart by systemd to a closed connection.
//!
//!    `PINCER_PLAIN_LINK=1` turns the link settings off (an older glibc, or a linker without them).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// The UI's source folder, relative to the manifest.
const UI_DIR: &str = "ui";

fn main() {
    embed_ui();
    link_settings();
}

fn embed_ui() {
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

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

/// rustup's `gcc-ld` directory (its `ld.lld` runs `rust-lld`) for the host the compiler runs on.
fn gcc_ld_dir() -> Option<PathBuf> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = String::from_utf8(output.stdout).ok()?;
    let dir = Path::new(sysroot.trim())
        .join("lib/rustlib")
        .join(env("HOST"))
        .join("bin/gcc-ld");
    dir.join("ld.lld").is_file().then_some(dir)
}

fn link_arg(arg: &str) {
    println!("cargo:rustc-link-arg-bins={arg}");
}

fn link_settings() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PINCER_PLAIN_LINK");
    println!("cargo:rerun-if-env-changed=CARGO_PROFILE_RELEASE_PANIC");
    let release = env("PROFILE") == "release";
    let linux_gnu = env("CARGO_CFG_TARGET_OS") == "linux" && env("CARGO_CFG_TARGET_ENV") == "gnu";
    if !release || !linux_gnu || !env("PINCER_PLAIN_LINK").is_empty() {
        return;
    }
    let Some(lld) = gcc_ld_dir() else {
        println!("cargo:warning=rust-lld not found in the toolchain: the release binary is linked without packed relocations");
        return;
    };
    link_arg("-fuse-ld=lld");
    link_arg(&format!("-B{}", lld.display()));
    link_arg("-Wl,-z,pack-relative-relocs");
    // Cargo does not tell build scripts the profile's panic strategy: the release profile's is
    // "unwind" (Cargo.toml) unless overridden the usual way, by this variable.
    if env("CARGO_PROFILE_RELEASE_PANIC") == "abort" {
        let script = Path::new(&env("OUT_DIR")).join("no-unwind-tables.ld");
        let written = std::fs::write(
            &script,
            "SECTIONS { /DISCARD/ : { *(.eh_frame) } } INSERT AFTER .text;\n",
        );
        if written.is_ok() {
            link_arg("-Wl,--no-eh-frame-hdr");
            link_arg(&format!("-Wl,-T,{}", script.display()));
        }
    }
}
