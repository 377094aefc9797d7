//! RAUC, the A/B update engine of the appliance, driven over its D-Bus API
//! (`de.pengutronix.rauc` on `/`, interface `de.pengutronix.rauc.Installer`, as RAUC 1.8
//! ships it in `/usr/share/dbus-1/interfaces/de.pengutronix.rauc.Installer.xml`): methods
//! `InstallBundle(s, a{sv})`, `Info(s) -> (s, s)`, `Mark(s, s) -> (s, s)`,
//! `GetSlotStatus() -> a(sa{sv})`, `GetPrimary() -> s`; properties `Operation`, `LastError`,
//! `Progress (isi)`, `Compatible`, `Variant`, `BootSlot`; signal `Completed(i)`.
//! (1.8 has no `InspectBundle`: see `bundle.rs` for how a manifest is read.)
//!
//! One [`Rauc`] is one bus connection. An installation follows RAUC's `Progress` through
//! `PropertiesChanged` and ends with `Completed`; a non-zero result is RAUC's `LastError`.
//! Files: `status.rs` (what RAUC reports, typed), `bundle.rs` (manifests, the store-schema
//! claim), `confirm.rs` (the decision after a boot).

pub mod bundle;
pub mod confirm;
pub mod status;

use std::time::Duration;

use crate::system::dbus::{Connection, DbusError, Message, Value};

pub use status::{Outcome, Progress, Slot, Status};

/// RAUC's well-known bus name.
pub const SERVICE: &str = "de.pengutronix.rauc";
/// The object RAUC serves.
pub const OBJECT_PATH: &str = "/";
/// RAUC's interface.
pub const INSTALLER: &str = "de.pengutronix.rauc.Installer";
/// How long an installation may go without a word from RAUC before it is given up on.
pub const INSTALL_SILENCE: Duration = Duration::from_secs(600);

const PROPERTIES: &str = "org.freedesktop.DBus.Properties";

/// What went wrong driving RAUC.
#[derive(Debug, thiserror::Error)]
pub enum RaucError {
    /// No system bus, or RAUC is not on it: not an appliance (or rauc.service is down).
    #[error("RAUC is not available: {0}")]
    Unavailable(String),
    /// RAUC is doing something else (another installation).
    #[error("RAUC is busy: {0}")]
    Busy(String),
    /// RAUC refused or failed a request; its own words.
    #[error("{0}")]
    Refused(String),
    /// The installation ran and failed: RAUC's `LastError`.
    #[error("installation failed: {0}")]
    InstallFailed(String),
    /// Talking to RAUC failed midway.
    #[error("talking to RAUC failed: {0}")]
    Bus(DbusError),
}

impl RaucError {
    fn from_call(error: DbusError) -> RaucError {
        match &error {
            DbusError::Remote { name, message } => match name.as_str() {
                "org.freedesktop.DBus.Error.ServiceUnknown"
                | "org.freedesktop.DBus.Error.NameHasNoOwner" => RaucError::Unavailable(format!(
                    "{SERVICE} is not on the system bus ({message}): this host is not a pincer \
                     appliance, or rauc.service is not running"
                )),
                _ if message.contains("Already processing") => RaucError::Busy(message.clone()),
                _ => RaucError::Refused(message.clone()),
            },
            DbusError::Connect { .. } | DbusError::Address(_) => RaucError::Unavailable(format!(
                "no system bus ({error}): this host is not a pincer appliance"
            )),
            _ => RaucError::Bus(error),
        }
    }
}

/// A `Mark` state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    Good,
    Bad,
    Active,
}

impl Mark {
    pub fn as_str(self) -> &'static str {
        match self {
            Mark::Good => "good",
            Mark::Bad => "bad",
            Mark::Active => "active",
        }
    }
}

/// A connection to RAUC.
pub struct Rauc {
    bus: Connection,
}

impl Rauc {
    /// Connects to RAUC on the system bus (`$DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket).
    pub async fn connect() -> Result<Rauc, RaucError> {
        let bus = Connection::system().await.map_err(RaucError::from_call)?;
        Ok(Rauc { bus })
    }

    async fn call(&mut self, member: &str, body: Vec<Value>) -> Result<Vec<Value>, RaucError> {
        self.bus
            .call(Message::method_call(
                SERVICE,
                OBJECT_PATH,
                INSTALLER,
                member,
                body,
            ))
            .await
            .map_err(RaucError::from_call)
    }

    async fn property(&mut self, name: &str) -> Result<Value, RaucError> {
        self.bus
            .get_property(SERVICE, OBJECT_PATH, INSTALLER, name)
            .await
            .map_err(RaucError::from_call)
    }

    /// RAUC's properties, every slot and the primary slot.
    pub async fn status(&mut self) -> Result<Status, RaucError> {
        let properties = self
            .bus
            .get_all_properties(SERVICE, OBJECT_PATH, INSTALLER)
            .await
            .map_err(RaucError::from_call)?;
        let text = |key: &str| {
            properties
                .iter()
                .find(|(k, _)| k == key)
                .and_then(|(_, v)| v.as_str())
                .unwrap_or_default()
                .to_string()
        };
        let progress = properties
            .iter()
            .find(|(k, _)| k == "Progress")
            .and_then(|(_, v)| Progress::from_value(v))
            .unwrap_or_default();
        let mut status = Status {
            compatible: text("Compatible"),
            variant: text("Variant"),
            boot_slot: text("BootSlot"),
            operation: text("Operation"),
            last_error: text("LastError"),
            progress,
            ..Status::default()
        };
        status.slots = self.slots().await?;
        match self.primary().await {
            Ok(primary) => status.primary = Some(primary),
            Err(RaucError::Refused(why)) => status.primary_error = Some(why.trim().to_string()),
            Err(other) => return Err(other),
        }
        Ok(status)
    }

    /// `GetSlotStatus`.
    pub async fn slots(&mut self) -> Result<Vec<Slot>, RaucError> {
        let reply = self.call("GetSlotStatus", vec![]).await?;
        let items = reply
            .first()
            .and_then(Value::as_array)
            .ok_or_else(|| RaucError::Refused("GetSlotStatus answered no a(sa{sv})".into()))?;
        items
            .iter()
            .map(|item| {
                Slot::from_value(item).ok_or_else(|| {
                    RaucError::Refused("GetSlotStatus answered a malformed slot".into())
                })
            })
            .collect()
    }

    /// `GetPrimary`: the slot the boot loader starts next.
    pub async fn primary(&mut self) -> Result<String, RaucError> {
        let reply = self.call("GetPrimary", vec![]).await?;
        first_string(&reply, "GetPrimary")
    }

    /// `LastError`.
    pub async fn last_error(&mut self) -> Result<String, RaucError> {
        Ok(self
            .property("LastError")
            .await?
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// `Mark(state, slot)`: `slot` is `booted`, `other` or a slot name. Returns the slot marked
    /// and RAUC's message.
    pub async fn mark(&mut self, state: Mark, slot: &str) -> Result<(String, String), RaucError> {
        let reply = self
            .call("Mark", vec![Value::str(state.as_str()), Value::str(slot)])
            .await?;
        Ok((
            first_string(&reply, "Mark")?,
            reply
                .get(1)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        ))
    }

    /// `Info(bundle)`: the bundle's compatible string and version, as RAUC reads them.
    pub async fn info(&mut self, bundle: &str) -> Result<(String, String), RaucError> {
        let reply = self.call("Info", vec![Value::str(bundle)]).await?;
        Ok((
            first_string(&reply, "Info")?,
            reply
                .get(1)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        ))
    }

    /// Installs `bundle` (an absolute path RAUC can read), calling `on_progress` for every
    /// `Progress` RAUC reports, until `Completed`.
    pub async fn install(
        &mut self,
        bundle: &str,
        on_progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Result<(), RaucError> {
        for rule in [
            format!("type='signal',sender='{SERVICE}',path='{OBJECT_PATH}',interface='{PROPERTIES}',member='PropertiesChanged'"),
            format!("type='signal',sender='{SERVICE}',path='{OBJECT_PATH}',interface='{INSTALLER}',member='Completed'"),
            format!("type='signal',sender='org.freedesktop.DBus',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='{SERVICE}'"),
        ] {
            self.bus.add_match(&rule).await.map_err(RaucError::from_call)?;
        }
        self.call(
            "InstallBundle",
            vec![Value::str(bundle), Value::string_dict(vec![])],
        )
        .await?;
        loop {
            let signal = self
                .bus
                .next_signal(INSTALL_SILENCE)
                .await
                .map_err(RaucError::Bus)?
                .ok_or_else(|| {
                    RaucError::InstallFailed(format!(
                        "no word from RAUC for {} s",
                        INSTALL_SILENCE.as_secs()
                    ))
                })?;
            match install_event(&signal) {
                Some(InstallEvent::Progress(progress)) => on_progress(&progress),
                Some(InstallEvent::Completed(0)) => return Ok(()),
                Some(InstallEvent::Completed(code)) => {
                    let why = self.last_error().await.unwrap_or_default();
                    let why = if why.is_empty() {
                        format!("RAUC ended the installation with result {code}")
                    } else {
                        why
                    };
                    return Err(RaucError::InstallFailed(why));
                }
                Some(InstallEvent::ServiceGone) => {
                    return Err(RaucError::InstallFailed(
                        "RAUC left the bus during the installation".into(),
                    ))
                }
                None => {}
            }
        }
    }
}

fn first_string(reply: &[Value], method: &str) -> Result<String, RaucError> {
    reply
        .first()
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| RaucError::Refused(format!("{method} answered no string")))
}

/// What a signal means to a running installation.
#[derive(Debug, PartialEq)]
enum InstallEvent {
    Progress(Progress),
    Completed(i32),
    ServiceGone,
}

fn install_event(signal: &Message) -> Option<InstallEvent> {
    let member = signal.member.as_deref()?;
    let interface = signal.interface.as_deref()?;
    match (interface, member) {
        (INSTALLER, "Completed") => {
            let code = signal.body.first()?.as_i64()?;
            Some(InstallEvent::Completed(
                i32::try_from(code).unwrap_or(i32::MAX),
            ))
        }
        (PROPERTIES, "PropertiesChanged") => {
            if signal.body.first()?.as_str()? != INSTALLER {
                return None;
            }
            let changed = signal.body.get(1)?.as_string_dict()?;
            let progress = changed.iter().find(|(k, _)| *k == "Progress")?.1;
            Progress::from_value(progress).map(InstallEvent::Progress)
        }
        ("org.freedesktop.DBus", "NameOwnerChanged") => {
            let name = signal.body.first()?.as_str()?;
            let new_owner = signal.body.get(2)?.as_str()?;
            (name == SERVICE && new_owner.is_empty()).then_some(InstallEvent::ServiceGone)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::dbus::Type;

    #[test]
    fn signals_become_install_events() {
        let progress = Message::signal(
            OBJECT_PATH,
            PROPERTIES,
            "PropertiesChanged",
            vec![
                Value::str(INSTALLER),
                Value::string_dict(vec![(
                    "Progress".into(),
                    Value::Struct(vec![
                        Value::Int32(40),
                        Value::str("Checking"),
                        Value::Int32(1),
                    ]),
                )]),
                Value::Array {
                    item: Type::Str,
                    items: vec![],
                },
            ],
        );
        assert_eq!(
            install_event(&progress),
            Some(InstallEvent::Progress(Progress {
                percent: 40,
                message: "Checking".into(),
                depth: 1
            }))
        );
        let completed = Message::signal(OBJECT_PATH, INSTALLER, "Completed", vec![Value::Int32(1)]);
        assert_eq!(install_event(&completed), Some(InstallEvent::Completed(1)));
        let gone = Message::signal(
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus",
            "NameOwnerChanged",
            vec![Value::str(SERVICE), Value::str(":1.3"), Value::str("")],
        );
        assert_eq!(install_event(&gone), Some(InstallEvent::ServiceGone));
        let other = Message::signal(OBJECT_PATH, INSTALLER, "Completed", vec![Value::str("x")]);
        assert_eq!(install_event(&other), None);
    }

    #[test]
    fn bus_errors_map_to_what_they_mean() {
        let remote = |name: &str, message: &str| DbusError::Remote {
            name: name.into(),
            message: message.into(),
        };
        assert!(matches!(
            RaucError::from_call(remote("org.freedesktop.DBus.Error.ServiceUnknown", "x")),
            RaucError::Unavailable(_)
        ));
        assert!(matches!(
            RaucError::from_call(remote(
                "org.gtk.GDBus.UnmappedGError.Quark._g_2dio_2derror_2dquark.Code30",
                "Already processing a different method"
            )),
            RaucError::Busy(_)
        ));
        assert!(matches!(
            RaucError::from_call(remote(
                "org.freedesktop.DBus.Error.Failed",
                "Failed to mark"
            )),
            RaucError::Refused(_)
        ));
    }
}
