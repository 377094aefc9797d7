//! What first boot could not apply from the boot partition (a malformed
//! `pincer.json5` or `wifi.json5`), kept in the data dir so the gateway can log it at
//! start and the setup page can show it. `pincer firstboot` writes and clears the
//! entries; this file owns only the record's format.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The record's file name in the data dir.
pub const FIRSTBOOT_ERROR_FILE: &str = "firstboot-error.json";
/// The largest record read back (a handful of short entries; anything bigger is not ours).
pub const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// One file first boot refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusedFile {
    /// Where the user can find the file now (renamed on the boot partition).
    pub kept_as: PathBuf,
    /// The parser's message.
    pub error: String,
    /// The JSON path of the offending key, when the error names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_path: Option<String>,
    /// When first boot refused it (ms since the epoch).
    pub at_ms: u64,
}

/// Refused files by their name on the boot partition (`pincer.json5`, `wifi.json5`).
pub type Record = BTreeMap<String, RefusedFile>;

fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(FIRSTBOOT_ERROR_FILE)
}

/// The record, empty when there is none; `Err` when a file is there but unreadable.
pub fn load(data_dir: &Path) -> Result<Record, String> {
    let path = path(data_dir);
    let text = match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Record::new()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
        Ok(meta) if meta.len() > MAX_RECORD_BYTES => {
            return Err(format!(
                "{}: {} bytes, more than {MAX_RECORD_BYTES}",
                path.display(),
                meta.len()
            ))
        }
        Ok(_) => std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?,
    };
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes the record (mode 0600), or removes the file when the record is empty.
pub fn store(data_dir: &Path, record: &Record) -> std::io::Result<()> {
    let path = path(data_dir);
    if record.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let text = serde_json::to_string_pretty(record).map_err(std::io::Error::other)?;
    let temp = path.with_extension("json.tmp");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&temp, &path)
}

/// One log line per refused file, or `None` when first boot refused nothing.
pub fn read(data_dir: &Path) -> Option<String> {
    let record = match load(data_dir) {
        Ok(record) => record,
        Err(e) => return Some(format!("first boot's error record is unreadable: {e}")),
    };
    if record.is_empty() {
        return None;
    }
    let lines: Vec<String> = record
        .iter()
        .map(|(name, refused)| {
            format!(
                "{name} from the boot partition was refused{}: {} (kept as {})",
                refused
                    .key_path
                    .as_deref()
                    .map(|p| format!(" at {p}"))
                    .unwrap_or_default(),
                refused.error,
                refused.kept_as.display()
            )
        })
        .collect();
    Some(lines.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_an_empty_one_removes_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(read(dir.path()), None);
        let mut record = Record::new();
        record.insert(
            "pincer.json5".into(),
            RefusedFile {
                kept_as: "/boot/firmware/pincer.json5.invalid-20261125T044500Z".into(),
                error: "unknown key gateway.prot".into(),
                key_path: Some("gateway.prot".into()),
                at_ms: 1,
            },
        );
        store(dir.path(), &record).expect("store");
        assert_eq!(load(dir.path()).expect("load"), record);
        let line = read(dir.path()).expect("a line");
        assert!(line.contains("pincer.json5"), "{line}");
        assert!(line.contains("at gateway.prot"), "{line}");
        assert!(line.contains("invalid-20261125T044500Z"), "{line}");
        store(dir.path(), &Record::new()).expect("clear");
        assert!(!dir.path().join(FIRSTBOOT_ERROR_FILE).exists());
    }

    #[test]
    fn an_oversized_record_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big = vec![b' '; MAX_RECORD_BYTES as usize + 1];
        std::fs::write(dir.path().join(FIRSTBOOT_ERROR_FILE), big).expect("write");
        let err = load(dir.path()).expect_err("too big");
        assert!(err.contains("more than"), "{err}");
    }
}
