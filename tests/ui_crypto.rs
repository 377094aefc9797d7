//! The Control UI's own SHA-256, SHA-512 and Ed25519 (`ui/assets/crypto.js`),
//! which signs the browser's device identity where WebCrypto is withheld
//! (pages over plain HTTP on the LAN), checked with Node against FIPS 180-4
//! and RFC 8032 vectors and Node's own crypto (`tests/clients/ui_crypto.mjs`).
//! That the gateway accepts its signatures is `tests/pincer_ui.rs`'s part.

use std::path::{Path, PathBuf};

mod support;
use support::skip::{in_ci, skip};

fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

#[test]
fn the_ui_crypto_matches_the_standards_vectors_and_node() {
    let node = std::env::var_os("PINCER_NODE24").map_or_else(
        || manifest_path(".tools/node24/node_modules/.bin/node"),
        PathBuf::from,
    );
    if !node.exists() {
        let reason = format!(
            "Node 24 not found at {} (run `scripts/setup node`)",
            node.display()
        );
        assert!(!in_ci(), "{reason}");
        skip(
            "the_ui_crypto_matches_the_standards_vectors_and_node",
            &reason,
        );
        return;
    }
    let output = std::process::Command::new(node)
        .arg(manifest_path("tests/clients/ui_crypto.mjs"))
        .arg(manifest_path("ui/assets/crypto.js"))
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("\"ok\":true"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
