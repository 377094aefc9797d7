//! What RAUC reports, typed: its properties (`Operation`, `LastError`, `Progress`,
//! `Compatible`, `Variant`, `BootSlot`), each slot's status from `GetSlotStatus` and the primary
//! slot from `GetPrimary`; and what follows from them: the booted slot and the outcome of the
//! last installation (booted, waiting for a reboot, or rolled back).
//!
//! The JSON form ([`Status::to_json`]) is what `pincer update status --json` prints and what the
//! gateway's `update.status` carries under `rauc`, so the two never disagree.

use serde_json::{json, Value as Json};

use crate::system::dbus::Value;

/// RAUC's `Progress` property: `(percentage, message, nesting depth)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    pub percent: i32,
    pub message: String,
    pub depth: i32,
}

impl Progress {
    /// Reads the `(isi)` struct.
    pub fn from_value(value: &Value) -> Option<Progress> {
        let fields = value.as_struct()?;
        Some(Progress {
            percent: i32::try_from(fields.first()?.as_i64()?).ok()?,
            message: fields.get(1)?.as_str()?.to_string(),
            depth: i32::try_from(fields.get(2)?.as_i64()?).ok()?,
        })
    }

    pub fn to_json(&self) -> Json {
        json!({"percent": self.percent, "message": self.message, "depth": self.depth})
    }
}

/// One slot as `GetSlotStatus` describes it (keys of RAUC 1.8; absent ones are `None`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Slot {
    pub name: String,
    pub class: Option<String>,
    pub device: Option<String>,
    pub kind: Option<String>,
    pub bootname: Option<String>,
    /// `booted`, `active` or `inactive`.
    pub state: Option<String>,
    /// What the boot loader says: `good` or `bad`.
    pub boot_status: Option<String>,
    /// The last installation's result for this slot (`ok`, or RAUC's failure text).
    pub install_status: Option<String>,
    pub bundle_compatible: Option<String>,
    pub bundle_version: Option<String>,
    pub bundle_build: Option<String>,
    pub installed_timestamp: Option<String>,
    pub installed_count: Option<u64>,
    pub activated_timestamp: Option<String>,
    pub activated_count: Option<u64>,
}

impl Slot {
    /// Reads one `(sa{sv})` entry.
    pub fn from_value(value: &Value) -> Option<Slot> {
        let fields = value.as_struct()?;
        let name = fields.first()?.as_str()?.to_string();
        let dict = fields.get(1)?.as_string_dict()?;
        let text = |key: &str| {
            dict.iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, v)| v.as_str())
                .map(str::to_string)
        };
        let number = |key: &str| {
            dict.iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, v)| v.as_i64())
                .and_then(|n| u64::try_from(n).ok())
        };
        Some(Slot {
            class: text("class"),
            device: text("device"),
            kind: text("type"),
            bootname: text("bootname"),
            state: text("state"),
            boot_status: text("boot-status"),
            install_status: text("status"),
            bundle_compatible: text("bundle.compatible"),
            bundle_version: text("bundle.version"),
            bundle_build: text("bundle.build"),
            installed_timestamp: text("installed.timestamp"),
            installed_count: number("installed.count"),
            activated_timestamp: text("activated.timestamp"),
            activated_count: number("activated.count"),
            name,
        })
    }

    /// When RAUC last installed into this slot, in ms since the epoch.
    pub fn installed_at_ms(&self) -> Option<u64> {
        timestamp_ms(self.installed_timestamp.as_deref()?)
    }

    pub fn is_booted(&self) -> bool {
        self.state.as_deref() == Some("booted")
    }

    pub fn to_json(&self) -> Json {
        json!({
            "name": self.name,
            "class": self.class,
            "bootname": self.bootname,
            "device": self.device,
            "type": self.kind,
            "state": self.state,
            "bootStatus": self.boot_status,
            "installStatus": self.install_status,
            "bundle": {
                "compatible": self.bundle_compatible,
                "version": self.bundle_version,
                "build": self.bundle_build,
            },
            "installedAt": self.installed_timestamp,
            "installedAtMs": self.installed_at_ms(),
            "installedCount": self.installed_count,
            "activatedAt": self.activated_timestamp,
            "activatedCount": self.activated_count,
        })
    }
}

/// RAUC's timestamps (`2026-11-27T15:05:40Z`) in ms since the epoch.
pub fn timestamp_ms(text: &str) -> Option<u64> {
    let ts: jiff::Timestamp = text.parse().ok()?;
    u64::try_from(ts.as_millisecond()).ok()
}

/// What became of the last installation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The slot it went into is the one running.
    Booted,
    /// Installed and made primary; the system has not booted it yet.
    RebootPending,
    /// The boot loader gave up on the slot (or it was marked bad): the system runs the other.
    RolledBack,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Booted => "booted",
            Outcome::RebootPending => "reboot-pending",
            Outcome::RolledBack => "rolled-back",
        }
    }
}

/// Everything `update status` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    pub compatible: String,
    pub variant: String,
    /// The booted slot's bootname (RAUC's `BootSlot`).
    pub boot_slot: String,
    /// `idle` or `installing`.
    pub operation: String,
    pub last_error: String,
    pub progress: Progress,
    pub primary: Option<String>,
    /// Why the primary slot is unknown (the boot loader backend could not say).
    pub primary_error: Option<String>,
    pub slots: Vec<Slot>,
}

impl Status {
    /// The slot running now.
    pub fn booted(&self) -> Option<&Slot> {
        self.slots.iter().find(|s| s.is_booted()).or_else(|| {
            self.slots
                .iter()
                .find(|s| s.bootname.as_deref() == Some(self.boot_slot.as_str()))
        })
    }

    /// A slot by name.
    pub fn slot(&self, name: &str) -> Option<&Slot> {
        self.slots.iter().find(|s| s.name == name)
    }

    /// The slot RAUC installed into last (newest `installed.timestamp`).
    pub fn last_installed(&self) -> Option<&Slot> {
        self.slots
            .iter()
            .filter(|s| s.installed_at_ms().is_some())
            .max_by_key(|s| (s.installed_at_ms(), s.installed_count))
    }

    /// What became of the last installation, if RAUC made one.
    pub fn last_outcome(&self) -> Option<(&Slot, Outcome)> {
        let slot = self.last_installed()?;
        let booted = self.booted().map(|b| b.name.as_str());
        let outcome = if booted == Some(slot.name.as_str()) {
            Outcome::Booted
        } else if slot.boot_status.as_deref() == Some("bad") {
            Outcome::RolledBack
        } else {
            Outcome::RebootPending
        };
        Some((slot, outcome))
    }

    pub fn to_json(&self) -> Json {
        let last = self.last_outcome().map(|(slot, outcome)| {
            json!({
                "slot": slot.name,
                "version": slot.bundle_version,
                "installedAt": slot.installed_timestamp,
                "outcome": outcome.as_str(),
            })
        });
        json!({
            "available": true,
            "compatible": self.compatible,
            "variant": self.variant,
            "bootSlot": self.boot_slot,
            "booted": self.booted().map(|s| s.name.clone()),
            "primary": self.primary,
            "primaryError": self.primary_error,
            "operation": self.operation,
            "progress": self.progress.to_json(),
            "lastError": self.last_error,
            "lastUpdate": last,
            "slots": self.slots.iter().map(Slot::to_json).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::dbus::Type;

    fn slot_value(name: &str, entries: Vec<(&str, Value)>) -> Value {
        Value::Struct(vec![
            Value::str(name),
            Value::string_dict(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            ),
        ])
    }

    fn slot(name: &str, state: &str, boot: &str, installed: Option<&str>) -> Slot {
        let mut entries = vec![
            ("state", Value::str(state)),
            ("boot-status", Value::str(boot)),
            (
                "bootname",
                Value::str(if name.ends_with('0') { "A" } else { "B" }),
            ),
        ];
        if let Some(ts) = installed {
            entries.push(("installed.timestamp", Value::str(ts)));
            entries.push(("installed.count", Value::UInt32(1)));
            entries.push(("bundle.version", Value::str("2026.12.1")));
        }
        Slot::from_value(&slot_value(name, entries)).expect("slot")
    }

    #[test]
    fn slot_status_entries_are_read_by_raucs_key_names() {
        let value = slot_value(
            "rootfs.1",
            vec![
                ("class", Value::str("rootfs")),
                ("installed.count", Value::UInt32(2)),
                ("size", Value::UInt64(4)),
                ("installed.timestamp", Value::str("2026-11-27T15:05:40Z")),
            ],
        );
        let s = Slot::from_value(&value).expect("slot");
        assert_eq!(s.name, "rootfs.1");
        assert_eq!(s.class.as_deref(), Some("rootfs"));
        assert_eq!(s.installed_count, Some(2));
        assert_eq!(s.installed_at_ms(), Some(1_795_791_940_000));
        assert!(Slot::from_value(&Value::str("x")).is_none());
        let progress = Value::Struct(vec![
            Value::Int32(40),
            Value::str("Verifying"),
            Value::Int32(1),
        ]);
        assert_eq!(
            Progress::from_value(&progress),
            Some(Progress {
                percent: 40,
                message: "Verifying".into(),
                depth: 1
            })
        );
        let _ = Type::Str;
    }

    #[test]
    fn the_last_installation_is_booted_pending_or_rolled_back() {
        let mut status = Status {
            boot_slot: "A".into(),
            slots: vec![
                slot("rootfs.0", "booted", "good", None),
                slot("rootfs.1", "inactive", "good", Some("2026-11-27T15:05:40Z")),
            ],
            ..Status::default()
        };
        assert_eq!(status.booted().map(|s| s.name.as_str()), Some("rootfs.0"));
        assert_eq!(
            status.last_outcome().map(|(s, o)| (s.name.as_str(), o)),
            Some(("rootfs.1", Outcome::RebootPending))
        );
        status.slots[1].boot_status = Some("bad".into());
        assert_eq!(
            status.last_outcome().map(|(_, o)| o),
            Some(Outcome::RolledBack)
        );
        status.slots[0].state = Some("inactive".into());
        status.slots[1].state = Some("booted".into());
        assert_eq!(status.last_outcome().map(|(_, o)| o), Some(Outcome::Booted));
        // The newer of two installations is the last.
        status.slots[0].installed_timestamp = Some("2026-11-28T00:00:00Z".into());
        assert_eq!(
            status.last_installed().map(|s| s.name.as_str()),
            Some("rootfs.0")
        );
        let json = status.to_json();
        assert_eq!(json["lastUpdate"]["slot"], "rootfs.0");
        assert_eq!(json["booted"], "rootfs.1");
        let fresh = Status {
            slots: vec![slot("rootfs.0", "booted", "good", None)],
            ..Status::default()
        };
        assert!(
            fresh.last_outcome().is_none(),
            "a flashed image has no installation"
        );
    }
}
