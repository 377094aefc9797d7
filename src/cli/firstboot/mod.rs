//! `pincer firstboot`: applies what the user dropped on the appliance's boot
//! partition (`image/FIRSTBOOT.md` is the user's description): the config, Wi-Fi, the
//! hostname, SSH, and the gateway token. Idempotent: a run with nothing new changes
//! nothing. A malformed file never stops the boot: it is renamed on the boot
//! partition with its error beside it, and recorded for the gateway
//! (`system::firstboot_error`). Secrets leave the boot partition once they are safely
//! written elsewhere (written, synced, renamed into place, then removed).

pub mod files;
mod ssh_keys;
mod wifi;

use std::path::PathBuf;

use crate::system::firstboot_error::{self, RefusedFile};

use self::files::{Owner, Written};

/// The config's name on the boot partition and in the config dir.
pub const CONFIG_FILE: &str = "pincer.json5";
/// The Wi-Fi settings' name on the boot partition.
pub const WIFI_FILE: &str = "wifi.json5";
/// The hostname's name on the boot partition.
pub const HOSTNAME_FILE: &str = "hostname";
/// The file whose presence switches SSH on.
pub const SSH_FILE: &str = "ssh";
/// The environment file the unit reads (`EnvironmentFile=`), in the data dir.
pub const GATEWAY_ENV_FILE: &str = "gateway.env";
/// The variable the gateway reads its token from when the config sets none (upstream's name).
pub const GATEWAY_TOKEN_ENV: &str = "OPENCLAW_GATEWAY_TOKEN";
/// The hostname when the user names none (the box is then `pincer.local`).
pub const DEFAULT_HOSTNAME: &str = "pincer";
/// The largest config read from the boot partition.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;
/// The largest `wifi.json5` or `hostname` read from the boot partition.
pub const MAX_SMALL_FILE_BYTES: u64 = 4 * 1024;

/// Where everything is.
#[derive(Debug, Clone)]
pub struct FirstbootPlan {
    pub boot_dir: PathBuf,
    pub config_dir: PathBuf,
    pub data_dir: PathBuf,
    pub hostname_file: PathBuf,
    pub wpa_conf: PathBuf,
    pub ssh_marker: PathBuf,
    /// Root's authorized SSH keys (from `authorized_keys` on the boot partition).
    pub ssh_authorized_keys: PathBuf,
    /// Who gets the config dir, the config, the token and `gateway.env` (None: the caller).
    pub owner: Option<Owner>,
    /// Also set the running hostname.
    pub apply_hostname: bool,
}

/// One thing first boot looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub changed: bool,
    pub what: String,
}

/// What a run did, in order.
#[derive(Debug, Default)]
pub struct FirstbootReport {
    pub steps: Vec<Step>,
    /// Files refused this run (their errors are in the journal and the data dir too).
    pub refused: Vec<String>,
}

impl FirstbootReport {
    fn did(&mut self, changed: bool, what: impl Into<String>) {
        self.steps.push(Step {
            changed,
            what: what.into(),
        });
    }

    /// How many steps changed something.
    pub fn changes(&self) -> usize {
        self.steps.iter().filter(|s| s.changed).count()
    }
}

/// Runs every step; `now` names renamed files. `Err` only when a step cannot write
/// where it must (a broken data partition), never for bad user input.
pub fn run(plan: &FirstbootPlan, now: jiff::Timestamp) -> Result<FirstbootReport, String> {
    let mut report = FirstbootReport::default();
    let owner = plan.owner.as_ref();
    files::ensure_dir(&plan.data_dir, 0o700, owner)?;
    files::ensure_dir(&plan.config_dir, 0o700, owner)?;
    let mut record = firstboot_error::load(&plan.data_dir).unwrap_or_else(|e| {
        log::warn!("first boot: starting a new error record: {e}");
        Default::default()
    });
    let stamp = now.strftime("%Y%m%dT%H%M%SZ").to_string();
    let refuse = |report: &mut FirstbootReport,
                  record: &mut firstboot_error::Record,
                  name: &str,
                  error: String,
                  key_path: Option<String>|
     -> Result<(), String> {
        let source = plan.boot_dir.join(name);
        let kept = files::keep_refused(&source, &stamp, &error, key_path.as_deref())?;
        log::error!(
            "first boot: {name} refused{}: {error}; kept as {}",
            key_path
                .as_deref()
                .map(|p| format!(" at {p}"))
                .unwrap_or_default(),
            kept.display()
        );
        report.refused.push(name.to_string());
        report.did(
            true,
            format!("{name}: refused, renamed to {}", kept.display()),
        );
        record.insert(
            name.to_string(),
            RefusedFile {
                kept_as: kept,
                error,
                key_path,
                at_ms: now.as_millisecond().max(0) as u64,
            },
        );
        Ok(())
    };

    // The config.
    let boot_config = plan.boot_dir.join(CONFIG_FILE);
    match files::read_capped(&boot_config, MAX_CONFIG_BYTES)? {
        None => report.did(false, format!("{CONFIG_FILE}: none on the boot partition")),
        Some(Err(e)) => refuse(&mut report, &mut record, CONFIG_FILE, e, None)?,
        Some(Ok(text)) => match crate::config::parse_str(&text, &boot_config.display().to_string())
        {
            Err(e) => {
                let key_path = e.json_path().map(str::to_string);
                refuse(
                    &mut report,
                    &mut record,
                    CONFIG_FILE,
                    e.to_string(),
                    key_path,
                )?
            }
            Ok(_) => {
                let target = plan.config_dir.join(CONFIG_FILE);
                let written = files::install(&target, text.as_bytes(), 0o600, owner, true)?;
                files::remove_secret(&boot_config)?;
                record.remove(CONFIG_FILE);
                report.did(
                    true,
                    match written {
                        Written::Unchanged => format!("{CONFIG_FILE}: same as {}; removed from the boot partition", target.display()),
                        _ => format!("{CONFIG_FILE}: validated, installed as {} (0600); removed from the boot partition", target.display()),
                    },
                );
            }
        },
    }

    // Wi-Fi.
    let boot_wifi = plan.boot_dir.join(WIFI_FILE);
    match files::read_capped(&boot_wifi, MAX_SMALL_FILE_BYTES)? {
        None => report.did(false, format!("{WIFI_FILE}: none on the boot partition")),
        Some(Err(e)) => refuse(&mut report, &mut record, WIFI_FILE, e, None)?,
        Some(Ok(text)) => match wifi::parse(&text) {
            Err(e) => {
                let key_path = e
                    .strip_prefix("wifi.json5: ")
                    .and_then(|rest| rest.split(':').next())
                    .filter(|k| KEY_NAMES.contains(k))
                    .map(str::to_string);
                refuse(&mut report, &mut record, WIFI_FILE, e, key_path)?
            }
            Ok(settings) => {
                let conf = settings.wpa_supplicant_conf();
                if let Some(parent) = plan.wpa_conf.parent() {
                    files::ensure_dir(parent, 0o700, None)?;
                }
                files::install(&plan.wpa_conf, conf.as_bytes(), 0o600, None, false)?;
                files::remove_secret(&boot_wifi)?;
                record.remove(WIFI_FILE);
                report.did(
                    true,
                    format!(
                        "{WIFI_FILE}: network {:?} ({}) written to {}; removed from the boot partition",
                        settings.ssid,
                        settings.country,
                        plan.wpa_conf.display()
                    ),
                );
            }
        },
    }

    hostname_step(plan, &mut report, &mut record, &refuse)?;

    // The gateway token, and the environment file that hands it to the unit.
    let had_token = crate::gateway::secret::read_generated(&plan.data_dir).is_some();
    let (token, token_path) = crate::gateway::secret::generate(&plan.data_dir)?;
    files::chown(&token_path, owner)?;
    let env = format!("{}={token}\n", GATEWAY_TOKEN_ENV);
    let env_path = plan.data_dir.join(GATEWAY_ENV_FILE);
    let env_written = files::install(&env_path, env.as_bytes(), 0o600, owner, false)?;
    report.did(
        !had_token || env_written != Written::Unchanged,
        if had_token {
            format!("gateway token: kept ({})", token_path.display())
        } else {
            format!(
                "gateway token: generated in {} (0600)",
                token_path.display()
            )
        },
    );

    // SSH: on exactly while `ssh` is on the boot partition.
    let wanted = plan.boot_dir.join(SSH_FILE).exists();
    let present = plan.ssh_marker.exists();
    if wanted && !present {
        if let Some(parent) = plan.ssh_marker.parent() {
            files::ensure_dir(parent, 0o700, None)?;
        }
        files::install(&plan.ssh_marker, b"", 0o600, None, false)?;
        report.did(
            true,
            format!("ssh: enabled ({})", plan.ssh_marker.display()),
        );
    } else if !wanted && present {
        std::fs::remove_file(&plan.ssh_marker)
            .map_err(|e| format!("cannot remove {}: {e}", plan.ssh_marker.display()))?;
        report.did(true, "ssh: disabled (no `ssh` file on the boot partition)");
    } else {
        report.did(
            false,
            format!("ssh: {}", if wanted { "enabled" } else { "off" }),
        );
    }

    ssh_keys_step(plan, &mut report, &mut record, &refuse)?;

    firstboot_error::store(&plan.data_dir, &record).map_err(|e| {
        format!(
            "cannot write {}: {e}",
            plan.data_dir
                .join(firstboot_error::FIRSTBOOT_ERROR_FILE)
                .display()
        )
    })?;
    Ok(report)
}

/// Field names a Wi-Fi error may point at.
const KEY_NAMES: [&str; 4] = ["ssid", "password", "country", "hidden"];

type Refuse<'a> = dyn Fn(
        &mut FirstbootReport,
        &mut firstboot_error::Record,
        &str,
        String,
        Option<String>,
    ) -> Result<(), String>
    + 'a;

fn hostname_step(
    plan: &FirstbootPlan,
    report: &mut FirstbootReport,
    record: &mut firstboot_error::Record,
    refuse: &Refuse,
) -> Result<(), String> {
    let boot_hostname = plan.boot_dir.join(HOSTNAME_FILE);
    let current = std::fs::read_to_string(&plan.hostname_file)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let wanted = match files::read_capped(&boot_hostname, MAX_SMALL_FILE_BYTES)? {
        Some(Err(e)) => {
            refuse(report, record, HOSTNAME_FILE, e, None)?;
            None
        }
        Some(Ok(text)) => match check_hostname(text.trim()) {
            Ok(name) => {
                record.remove(HOSTNAME_FILE);
                Some(name)
            }
            Err(e) => {
                refuse(report, record, HOSTNAME_FILE, e, None)?;
                None
            }
        },
        None => None,
    };
    let name = wanted
        .or(current.clone())
        .unwrap_or_else(|| DEFAULT_HOSTNAME.to_string());
    if current.as_deref() != Some(name.as_str()) {
        if let Some(parent) = plan.hostname_file.parent() {
            files::ensure_dir(parent, 0o755, None)?;
        }
        files::install(
            &plan.hostname_file,
            format!("{name}\n").as_bytes(),
            0o644,
            None,
            false,
        )?;
        report.did(
            true,
            format!(
                "hostname: {name} (written to {})",
                plan.hostname_file.display()
            ),
        );
    } else {
        report.did(false, format!("hostname: {name}"));
    }
    if plan.apply_hostname && crate::system::host_name() != name {
        // SAFETY: sethostname reads len bytes from a valid buffer.
        let rc = unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) };
        if rc != 0 {
            return Err(format!(
                "cannot set the hostname to {name}: {}",
                std::io::Error::last_os_error()
            ));
        }
        report.did(true, format!("hostname: the running system is now {name}"));
    }
    Ok(())
}

/// Installs `authorized_keys` from the boot partition (root's, 0600, in a 0700 dir) when
/// it is there and valid; a malformed file is refused like a malformed config.
fn ssh_keys_step(
    plan: &FirstbootPlan,
    report: &mut FirstbootReport,
    record: &mut firstboot_error::Record,
    refuse: &Refuse,
) -> Result<(), String> {
    use ssh_keys::{AUTHORIZED_KEYS_FILE, MAX_AUTHORIZED_KEYS_BYTES};
    let source = plan.boot_dir.join(AUTHORIZED_KEYS_FILE);
    let keys = match files::read_capped(&source, MAX_AUTHORIZED_KEYS_BYTES)? {
        None => {
            report.did(
                false,
                format!("{AUTHORIZED_KEYS_FILE}: none on the boot partition"),
            );
            return Ok(());
        }
        Some(Err(e)) => return refuse(report, record, AUTHORIZED_KEYS_FILE, e, None),
        Some(Ok(text)) => match ssh_keys::parse(&text) {
            Err(e) => return refuse(report, record, AUTHORIZED_KEYS_FILE, e, None),
            Ok(keys) => keys,
        },
    };
    record.remove(AUTHORIZED_KEYS_FILE);
    if let Some(parent) = plan.ssh_authorized_keys.parent() {
        files::ensure_dir(parent, 0o700, None)?;
    }
    let written = files::install(
        &plan.ssh_authorized_keys,
        keys.as_bytes(),
        0o600,
        None,
        false,
    )?;
    let count = keys.lines().count();
    report.did(
        written != Written::Unchanged,
        format!(
            "{AUTHORIZED_KEYS_FILE}: {count} key(s) for root in {}",
            plan.ssh_authorized_keys.display()
        ),
    );
    Ok(())
}

/// One DNS label (RFC 1123), lower-cased: the box becomes `<name>.local`.
pub fn check_hostname(raw: &str) -> Result<String, String> {
    let name = raw.to_ascii_lowercase();
    let valid = (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if valid {
        Ok(name)
    } else {
        Err(format!(
            "hostname: expected 1 to 63 letters, digits or '-' (not first or last), got {raw:?}"
        ))
    }
}

/// Prints the report, one line per step.
pub fn print(report: &FirstbootReport) {
    for step in &report.steps {
        let mark = if step.changed { "changed" } else { "ok" };
        println!("firstboot: [{mark}] {}", step.what);
    }
    println!(
        "firstboot: {} change(s){}",
        report.changes(),
        if report.refused.is_empty() {
            String::new()
        } else {
            format!("; refused: {}", report.refused.join(", "))
        }
    );
}

#[cfg(test)]
mod tests;
