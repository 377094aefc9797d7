//! The decision `pincer update confirm` makes after every boot: is the booted slot on trial?
//!
//! A slot is on trial when it runs an installation RAUC made (its `installed.timestamp` and
//! `installed.count` in `GetSlotStatus`) that no earlier boot confirmed. What was confirmed is
//! kept in the confirmation ledger, `confirmed.json` in a root-owned state directory, one entry
//! per slot naming the installation it decided on. RAUC writes the installation record as root
//! and only root writes the ledger, so neither the gateway's user nor a crafted file can put a
//! healthy system on trial or spare a fresh one its check.
//!
//! A trial needs somewhere to fall back to: when no other slot of the booted slot's class is
//! `good` in the boot loader's eyes, the boot counts as normal (marking the only bootable slot
//! bad would leave nothing to boot). A normal boot is marked good whatever the gateway's
//! health: a bad config must not roll the system back.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::status::{Slot, Status};

/// The ledger's file name in the state directory.
pub const LEDGER_FILE: &str = "confirmed.json";
/// Most slots the ledger remembers (RAUC systems have a handful).
pub const MAX_LEDGER_SLOTS: usize = 16;
/// Largest ledger file read.
const MAX_LEDGER_BYTES: u64 = 64 * 1024;

/// What an earlier boot decided about one installation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Confirmation {
    pub installed_timestamp: String,
    pub installed_count: Option<u64>,
    /// `good` or `bad`.
    pub decision: String,
    pub reason: String,
    pub at_ms: u64,
}

/// The confirmation ledger: slot name → the installation last decided on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub slots: BTreeMap<String, Confirmation>,
}

impl Ledger {
    fn path(dir: &Path) -> PathBuf {
        dir.join(LEDGER_FILE)
    }

    /// Reads the ledger in `dir` (empty when there is none yet).
    pub fn load(dir: &Path) -> Result<Ledger, String> {
        let path = Ledger::path(dir);
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Ledger::default()),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_LEDGER_BYTES), &mut text)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a confirmation ledger: {e}", path.display()))
    }

    /// Writes the ledger into `dir` atomically (a new file renamed over the old, both synced).
    pub fn save(&self, dir: &Path) -> Result<(), String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let path = Ledger::path(dir);
        let tmp = dir.join(format!(".{LEDGER_FILE}.tmp"));
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(dir)?.sync_all()
        };
        write().map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Whether the installation now in `slot` was decided on before.
    pub fn confirmed(&self, slot: &Slot) -> Option<&Confirmation> {
        let entry = self.slots.get(&slot.name)?;
        (Some(entry.installed_timestamp.as_str()) == slot.installed_timestamp.as_deref()
            && entry.installed_count == slot.installed_count)
            .then_some(entry)
    }

    /// Records a decision on the installation now in `slot` (a slot with no installation record
    /// needs none).
    pub fn record(&mut self, slot: &Slot, decision: &str, reason: &str, at_ms: u64) {
        let Some(installed) = slot.installed_timestamp.clone() else {
            return;
        };
        if !self.slots.contains_key(&slot.name) && self.slots.len() >= MAX_LEDGER_SLOTS {
            if let Some(oldest) = self
                .slots
                .iter()
                .min_by_key(|(_, c)| c.at_ms)
                .map(|(k, _)| k.clone())
            {
                self.slots.remove(&oldest);
            }
        }
        self.slots.insert(
            slot.name.clone(),
            Confirmation {
                installed_timestamp: installed,
                installed_count: slot.installed_count,
                decision: decision.to_string(),
                reason: reason.to_string(),
                at_ms,
            },
        );
    }
}

/// What kind of boot this is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Boot {
    /// Mark the booted slot good now, whatever the gateway's health.
    Normal { slot: String, reason: String },
    /// The booted slot runs an unconfirmed installation: the gateway's health decides.
    Trial {
        slot: String,
        version: Option<String>,
        reason: String,
    },
}

/// Decides what kind of boot this is from RAUC's status and the ledger.
pub fn classify(status: &Status, ledger: &Ledger) -> Result<Boot, String> {
    let booted = status.booted().ok_or_else(|| {
        format!(
            "RAUC names no booted slot (BootSlot {:?} matches none of {})",
            status.boot_slot,
            status
                .slots
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let slot = booted.name.clone();
    let Some(installed) = booted.installed_timestamp.as_deref() else {
        return Ok(Boot::Normal {
            reason: format!("{slot} has no RAUC installation record (it was flashed, not updated)"),
            slot,
        });
    };
    if let Some(done) = ledger.confirmed(booted) {
        return Ok(Boot::Normal {
            reason: format!(
                "{slot}'s installation of {installed} was confirmed {} before ({})",
                done.decision, done.reason
            ),
            slot,
        });
    }
    let fallback = status.slots.iter().find(|other| {
        other.name != booted.name
            && other.class == booted.class
            && other.boot_status.as_deref() == Some("good")
    });
    let Some(fallback) = fallback else {
        return Ok(Boot::Normal {
            reason: format!(
                "{slot} runs the unconfirmed installation of {installed}, but no other slot is \
                 bootable to fall back to, so it stays"
            ),
            slot,
        });
    };
    Ok(Boot::Trial {
        reason: format!(
            "{slot} runs the installation of {installed} (version {}), not yet confirmed; {} \
             is the fallback",
            booted.bundle_version.as_deref().unwrap_or("unknown"),
            fallback.name
        ),
        version: booted.bundle_version.clone(),
        slot,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(name: &str, state: &str, boot: &str, installed: Option<(&str, u64)>) -> Slot {
        Slot {
            name: name.into(),
            class: Some("rootfs".into()),
            bootname: Some(if name.ends_with('0') { "A" } else { "B" }.into()),
            state: Some(state.into()),
            boot_status: Some(boot.into()),
            installed_timestamp: installed.map(|(t, _)| t.to_string()),
            installed_count: installed.map(|(_, c)| c),
            bundle_version: installed.map(|_| "2026.12.1".to_string()),
            ..Slot::default()
        }
    }

    fn status(slots: Vec<Slot>) -> Status {
        Status {
            slots,
            ..Status::default()
        }
    }

    #[test]
    fn a_flashed_slot_boots_normally() {
        let s = status(vec![
            slot("rootfs.0", "booted", "good", None),
            slot("rootfs.1", "inactive", "bad", None),
        ]);
        let boot = classify(&s, &Ledger::default()).expect("classify");
        assert!(
            matches!(&boot, Boot::Normal { slot, reason } if slot == "rootfs.0" && reason.contains("flashed")),
            "{boot:?}"
        );
    }

    #[test]
    fn a_fresh_installation_is_on_trial_until_confirmed() {
        let installed = Some(("2026-11-27T15:05:40Z", 1));
        let s = status(vec![
            slot("rootfs.0", "inactive", "good", None),
            slot("rootfs.1", "booted", "good", installed),
        ]);
        let mut ledger = Ledger::default();
        let boot = classify(&s, &ledger).expect("classify");
        assert!(
            matches!(&boot, Boot::Trial { slot, .. } if slot == "rootfs.1"),
            "{boot:?}"
        );
        ledger.record(&s.slots[1], "good", "healthy", 5);
        let boot = classify(&s, &ledger).expect("classify");
        assert!(
            matches!(&boot, Boot::Normal { reason, .. } if reason.contains("confirmed good")),
            "{boot:?}"
        );
        // A new installation into the same slot is a new trial.
        let again = status(vec![
            slot("rootfs.0", "inactive", "good", None),
            slot(
                "rootfs.1",
                "booted",
                "good",
                Some(("2026-12-01T00:00:00Z", 2)),
            ),
        ]);
        assert!(matches!(classify(&again, &ledger), Ok(Boot::Trial { .. })));
    }

    #[test]
    fn without_a_slot_to_fall_back_to_the_boot_is_normal() {
        let s = status(vec![
            slot("rootfs.0", "inactive", "bad", None),
            slot(
                "rootfs.1",
                "booted",
                "good",
                Some(("2026-11-27T15:05:40Z", 1)),
            ),
        ]);
        let boot = classify(&s, &Ledger::default()).expect("classify");
        assert!(
            matches!(&boot, Boot::Normal { reason, .. } if reason.contains("no other slot")),
            "{boot:?}"
        );
        assert!(classify(
            &status(vec![slot("rootfs.0", "inactive", "good", None)]),
            &Ledger::default()
        )
        .is_err());
    }

    #[test]
    fn the_ledger_survives_a_save_and_stays_bounded() {
        let dir = tempfile::tempdir().expect("dir");
        assert_eq!(Ledger::load(dir.path()).expect("empty"), Ledger::default());
        let mut ledger = Ledger::default();
        for i in 0..(MAX_LEDGER_SLOTS + 4) {
            let s = slot(
                &format!("slot.{i}"),
                "booted",
                "good",
                Some(("2026-11-27T15:05:40Z", 1)),
            );
            ledger.record(&s, "good", "healthy", i as u64);
        }
        assert_eq!(ledger.slots.len(), MAX_LEDGER_SLOTS);
        assert!(
            !ledger.slots.contains_key("slot.0"),
            "the oldest entry went first"
        );
        ledger.save(dir.path()).expect("save");
        assert_eq!(Ledger::load(dir.path()).expect("load"), ledger);
        std::fs::write(dir.path().join(LEDGER_FILE), "not json").expect("write");
        assert!(Ledger::load(dir.path())
            .expect_err("bad")
            .contains("not a confirmation ledger"));
    }
}
