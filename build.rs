//! Link settings of pincer's release binary (the `pincer` bin only: dependencies, tests and examples are
//! built as cargo says). Measured with `scripts/bench --size` (README, "Binary size"):
//! - LLD, the toolchain's own `rust-lld` (through the `gcc-ld` wrapper rustup ships; the cross gcc drivers of
//!   `.cargo/config.toml` pick it with `-fuse-ld=lld`), for what follows;
//! - packed relative relocations (`-z pack-relative-relocs`, DT_RELR): a position-independent binary's
//!   ~30,000 relocations take a few KiB instead of ~450 KiB, and are not read page by page at every start.
//!   The binary then needs glibc 2.36 or later (Debian 12 "bookworm", Raspberry Pi OS bookworm);
//! - with `panic = "abort"` (Cargo.toml's release profile) nothing unwinds, so the unwind tables
//!   (`.eh_frame`, ~1 MiB) are left out: a panic still prints its message and location, then the process
//!   ends. (`CARGO_PROFILE_RELEASE_PANIC=unwind` keeps them.)
//!
//! `PINCER_PLAIN_LINK=1` turns all of it off (an older glibc, or a linker without these options).

use std::path::{Path, PathBuf};
use std::process::Command;

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

fn main() {
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
    // Cargo does not tell build scripts the profile's panic strategy: the release profile's is "abort"
    // (Cargo.toml) unless overridden the usual way, by this variable.
    if env("CARGO_PROFILE_RELEASE_PANIC") != "unwind" {
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
