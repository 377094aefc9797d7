//! What a bundle says about itself, read before it is installed: its manifest, through
//! `rauc info --no-verify --output-format=json`, and the store schemas its pincer opens.
//!
//! The manifest is read without verifying the bundle's signature, and it is only ever used to
//! refuse: whatever passes goes to RAUC, which verifies the signature of everything it installs
//! (and runs the bundle's install-check hook, which repeats the store check on the verified
//! manifest). Verifying here as well would read the whole bundle once more: `rauc info` with
//! verification peaked at 80 MB RSS for a 64 MiB bundle, 15 MB without (measured 2026-11-27),
//! and it needs a file lease only the bundle's owner or root gets.
//!
//! The claim: the manifest's `build` field is a space-separated list of words, one of them
//! `store-schema=<min>-<max>` (or `store-schema=<n>`), the LMDB store schema versions the
//! release's pincer opens. `scripts/image` writes it; `pincer update apply`, the gateway's
//! `update.apply` and the bundle's install-check hook compare it with the store on this box.
//! RAUC 1.8 has no custom manifest sections and its D-Bus `Info` returns only the compatible
//! string and the version, hence the `build` field and `rauc info`.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

/// Most bytes of `rauc info` output read.
const MAX_INFO_OUTPUT_BYTES: u64 = 256 * 1024;
/// How long `rauc info` may take (without verification it reads the manifest only).
const INFO_TIMEOUT: Duration = Duration::from_secs(120);

/// The manifest fields pincer reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub compatible: String,
    pub version: String,
    pub description: Option<String>,
    pub build: Option<String>,
}

/// Store schema versions a release opens, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaRange {
    pub min: u32,
    pub max: u32,
}

impl SchemaRange {
    pub fn contains(&self, version: u32) -> bool {
        self.min <= version && version <= self.max
    }
}

impl std::fmt::Display for SchemaRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.min, self.max)
    }
}

/// Why a bundle's manifest could not be read, or why it is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error("cannot run `rauc info`: {0}")]
    Spawn(String),
    /// RAUC's own words (a truncated or malformed bundle, a file it cannot read).
    #[error("rauc info refused the bundle: {0}")]
    Refused(String),
    #[error("rauc info printed no manifest: {0}")]
    BadOutput(String),
    #[error("the bundle's manifest has a bad store-schema claim {claim:?}: expected store-schema=MIN-MAX")]
    BadClaim { claim: String },
    #[error(
        "the bundle does not say which store schemas its pincer opens (its manifest's build \
         field has no store-schema=MIN-MAX): refusing it, since it might not open this box's store"
    )]
    NoClaim,
    #[error(
        "the bundle's pincer opens store schemas {range}, but the store here is at schema \
         {found}: installing it would leave a pincer that cannot open today's store"
    )]
    StoreMismatch { range: SchemaRange, found: u32 },
}

/// Reads the `store-schema=` word of a manifest's `build` field.
pub fn store_schema_claim(build: &str) -> Result<Option<SchemaRange>, BundleError> {
    let Some(claim) = build
        .split_whitespace()
        .find_map(|word| word.strip_prefix("store-schema="))
    else {
        return Ok(None);
    };
    let bad = || BundleError::BadClaim {
        claim: claim.to_string(),
    };
    let (min, max) = match claim.split_once('-') {
        Some((min, max)) => (min, max),
        None => (claim, claim),
    };
    let min: u32 = min.parse().map_err(|_| bad())?;
    let max: u32 = max.parse().map_err(|_| bad())?;
    if min > max {
        return Err(bad());
    }
    Ok(Some(SchemaRange { min, max }))
}

/// Whether a release claiming `claim` opens the store at `store` (`None`: no store yet, which
/// any release creates).
pub fn check_store(manifest: &Manifest, store: Option<u32>) -> Result<(), BundleError> {
    let claim = store_schema_claim(manifest.build.as_deref().unwrap_or_default())?;
    let range = claim.ok_or(BundleError::NoClaim)?;
    match store {
        Some(found) if !range.contains(found) => Err(BundleError::StoreMismatch { range, found }),
        _ => Ok(()),
    }
}

/// Reads a bundle's manifest with `rauc info` (not verified: see the module's note).
pub async fn read_manifest(bundle: &Path) -> Result<Manifest, BundleError> {
    let mut command = tokio::process::Command::new("rauc");
    command
        .arg("info")
        .arg("--no-verify")
        .arg("--output-format=json")
        .arg(bundle)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .map_err(|e| BundleError::Spawn(format!("rauc: {e}")))?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(BundleError::Spawn("rauc info without pipes".into()));
    };
    let run = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let mut stdout = stdout.take(MAX_INFO_OUTPUT_BYTES);
        let mut stderr = stderr.take(MAX_INFO_OUTPUT_BYTES);
        let (read_out, read_err) =
            tokio::join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err));
        read_out
            .and(read_err)
            .map_err(|e| BundleError::Spawn(e.to_string()))?;
        let status = child
            .wait()
            .await
            .map_err(|e| BundleError::Spawn(e.to_string()))?;
        Ok::<_, BundleError>((status, out, err))
    };
    let (status, out, err) = tokio::time::timeout(INFO_TIMEOUT, run)
        .await
        .map_err(|_| {
            BundleError::Spawn(format!("rauc info took over {} s", INFO_TIMEOUT.as_secs()))
        })??;
    if !status.success() {
        return Err(BundleError::Refused(rauc_complaint(&err)));
    }
    parse_info(&out)
}

/// RAUC's error lines, without its informational `rauc-Message:` lines.
fn rauc_complaint(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("rauc-Message:") && !l.contains("-WARNING **"))
        .collect();
    if lines.is_empty() {
        "rauc info failed without saying why".to_string()
    } else {
        lines.join("; ")
    }
}

/// The manifest fields of `rauc info --output-format=json`.
pub fn parse_info(stdout: &[u8]) -> Result<Manifest, BundleError> {
    let text = String::from_utf8_lossy(stdout);
    // The JSON is the last line (RAUC may print notes before it).
    let json_line = text.lines().rev().find(|l| l.trim_start().starts_with('{'));
    let value: serde_json::Value = json_line
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| BundleError::BadOutput(text.chars().take(200).collect()))?;
    let field = |key: &str| value.get(key).and_then(|v| v.as_str()).map(str::to_string);
    Ok(Manifest {
        compatible: field("compatible")
            .ok_or_else(|| BundleError::BadOutput("no compatible".into()))?,
        version: field("version").unwrap_or_default(),
        description: field("description"),
        build: field("build"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(build: Option<&str>) -> Manifest {
        Manifest {
            compatible: "pincer-rpi-arm64".into(),
            version: "2026.12.1".into(),
            description: None,
            build: build.map(str::to_string),
        }
    }

    #[test]
    fn the_claim_is_a_word_of_the_build_field() {
        assert_eq!(
            store_schema_claim("20261201 store-schema=1-3 abc").expect("claim"),
            Some(SchemaRange { min: 1, max: 3 })
        );
        assert_eq!(
            store_schema_claim("store-schema=2").expect("one"),
            Some(SchemaRange { min: 2, max: 2 })
        );
        assert_eq!(store_schema_claim("20261201").expect("none"), None);
        for bad in [
            "store-schema=",
            "store-schema=3-1",
            "store-schema=a-b",
            "store-schema=1-",
        ] {
            assert!(
                matches!(store_schema_claim(bad), Err(BundleError::BadClaim { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_bundle_whose_pincer_cannot_open_the_store_is_refused() {
        let claims = manifest(Some("x store-schema=2-3"));
        assert!(check_store(&claims, Some(2)).is_ok());
        assert!(check_store(&claims, Some(3)).is_ok());
        assert!(
            check_store(&claims, None).is_ok(),
            "no store yet: any release creates one"
        );
        let refused = check_store(&claims, Some(1)).expect_err("too old a store");
        assert_eq!(
            refused,
            BundleError::StoreMismatch {
                range: SchemaRange { min: 2, max: 3 },
                found: 1
            }
        );
        assert!(
            refused.to_string().contains("cannot open today's store"),
            "{refused}"
        );
        assert!(check_store(&claims, Some(4)).is_err());
        assert_eq!(
            check_store(&manifest(None), Some(1)),
            Err(BundleError::NoClaim)
        );
        assert_eq!(
            check_store(&manifest(Some("20261201")), None),
            Err(BundleError::NoClaim)
        );
    }

    #[test]
    fn rauc_infos_json_and_complaints_are_read() {
        let out = b"{\"compatible\":\"c\",\"version\":\"1\",\"description\":\"d\",\"build\":\"b store-schema=1-1\",\"hooks\":[]}\n";
        let m = parse_info(out).expect("manifest");
        assert_eq!(m.compatible, "c");
        assert_eq!(m.build.as_deref(), Some("b store-schema=1-1"));
        assert!(matches!(
            parse_info(b"garbage"),
            Err(BundleError::BadOutput(_))
        ));
        let err = b"rauc-Message: 15:05:24.016: Reading bundle: /x\nsignature verification failed: Verify error\n\n";
        assert_eq!(
            rauc_complaint(err),
            "signature verification failed: Verify error"
        );
    }
}
