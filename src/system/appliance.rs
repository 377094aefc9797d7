//! What `pincer doctor` reports about the appliance around the process: systemd,
//! the watchdog, a read-only root, the data dir on its own file system, and a
//! volatile journal. Each check reads what the host shows (environment,
//! `/proc/self/mountinfo`, journald's config files) and says what it found; the
//! inputs are parameters so tests give their own.

use std::path::{Path, PathBuf};

use super::watchdog;

/// One mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    device: String,
    point: PathBuf,
    options: Vec<String>,
    fs_type: String,
    source: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            if let Ok(code) = u8::from_str_radix(field.get(i + 1..i + 4).unwrap_or(""), 8) {
                out.push(code);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split_whitespace().collect();
            let mut right = right.split_whitespace();
            Some(Mount {
                device: fields.get(2)?.to_string(),
                point: PathBuf::from(unescape(fields.get(4)?)),
                options: fields.get(5)?.split(',').map(str::to_string).collect(),
                fs_type: right.next()?.to_string(),
                source: right.next().unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// The mount `path` lies on: the longest mount point above it, the later one when stacked.
fn mount_of<'a>(all: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    all.iter()
        .enumerate()
        .filter(|(_, m)| path.starts_with(&m.point))
        .max_by_key(|(i, m)| (m.point.components().count(), *i))
        .map(|(_, m)| m)
}

/// Whether the process runs as a systemd service, from what systemd sets.
pub fn systemd(env: &dyn Fn(&str) -> Option<String>) -> String {
    match (env("INVOCATION_ID"), env("NOTIFY_SOCKET")) {
        (Some(id), Some(socket)) => {
            format!("yes (invocation {id}, notify socket {socket})")
        }
        (Some(id), None) => {
            format!("yes (invocation {id}), but no NOTIFY_SOCKET: the unit is not Type=notify")
        }
        (None, Some(socket)) => format!("a notify socket ({socket}) but no INVOCATION_ID"),
        (None, None) => "no (neither INVOCATION_ID nor NOTIFY_SOCKET is set)".to_string(),
    }
}

/// The watchdog systemd asked of this process.
pub fn watchdog(env: &dyn Fn(&str) -> Option<String>) -> String {
    match watchdog::request_from(
        env(watchdog::WATCHDOG_USEC_ENV).as_deref(),
        env(watchdog::WATCHDOG_PID_ENV).as_deref(),
        std::process::id(),
    ) {
        Ok(request) => request.describe(),
        Err(e) => format!("misconfigured: {e}"),
    }
}

/// Whether `/` is mounted read-only.
pub fn read_only_root(mountinfo: &str) -> String {
    let all = mounts(mountinfo);
    match mount_of(&all, Path::new("/")) {
        Some(root) if root.options.iter().any(|o| o == "ro") => {
            format!("yes ({} {}, ro)", root.fs_type, root.source)
        }
        Some(root) => format!("no ({} {} is mounted rw)", root.fs_type, root.source),
        None => "unknown (no / in mountinfo)".to_string(),
    }
}

/// Whether the data dir has a file system of its own (not the root's device).
pub fn data_dir_filesystem(data_dir: &Path, mountinfo: &str) -> String {
    let all = mounts(mountinfo);
    let Some(root) = mount_of(&all, Path::new("/")) else {
        return "unknown (no / in mountinfo)".to_string();
    };
    let Some(data) = mount_of(&all, data_dir) else {
        return format!("unknown (no mount above {})", data_dir.display());
    };
    if data.device != root.device {
        format!(
            "yes ({} on {}, {} {})",
            data_dir.display(),
            data.point.display(),
            data.fs_type,
            data.source
        )
    } else {
        format!(
            "no ({} is on the root file system's device {}, mounted at {})",
            data_dir.display(),
            root.source,
            data.point.display()
        )
    }
}

/// journald's storage and runtime cap, read as journald reads its config (main file,
/// then drop-ins by file name; /etc over /run over /usr/lib for the same name), from
/// the file tree at `root`.
pub fn journald(root: &Path) -> String {
    let mut files = vec![root.join("etc/systemd/journald.conf")];
    let mut drop_ins: std::collections::BTreeMap<String, PathBuf> = Default::default();
    for dir in [
        "usr/lib/systemd/journald.conf.d",
        "run/systemd/journald.conf.d",
        "etc/systemd/journald.conf.d",
    ] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".conf") {
                drop_ins.insert(name, entry.path());
            }
        }
    }
    files.extend(drop_ins.into_values());
    let (mut storage, mut storage_from, mut cap) = (None, None, None);
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().map(str::trim) {
            if let Some(value) = line.strip_prefix("Storage=") {
                storage = Some(value.trim().to_string());
                storage_from = Some(file.clone());
            } else if let Some(value) = line.strip_prefix("RuntimeMaxUse=") {
                cap = Some(value.trim().to_string());
            }
        }
    }
    let cap = cap
        .map(|c| format!("RuntimeMaxUse={c}"))
        .unwrap_or_else(|| "no RuntimeMaxUse= (journald's default: 10% of /run)".into());
    let strip = |p: &Path| {
        Path::new("/")
            .join(p.strip_prefix(root).unwrap_or(p))
            .display()
            .to_string()
    };
    match (storage.as_deref(), &storage_from) {
        (Some("volatile"), Some(from)) => {
            format!("volatile (Storage=volatile in {}), {cap}", strip(from))
        }
        (Some("none"), _) => "none (Storage=none: logs are dropped)".to_string(),
        (Some(other), Some(from)) if other != "auto" => {
            format!(
                "not volatile (Storage={other} in {}): logs are written to disk",
                strip(from)
            )
        }
        _ if root.join("var/log/journal").is_dir() => {
            "not volatile (Storage=auto and /var/log/journal exists): logs are written to disk"
                .to_string()
        }
        _ => format!("volatile (Storage=auto, no /var/log/journal), {cap}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const APPLIANCE: &str = "\
22 1 179:2 / / ro,relatime shared:1 - ext4 /dev/mmcblk0p2 ro
23 22 179:1 / /boot/firmware rw,relatime shared:2 - vfat /dev/mmcblk0p1 rw
24 22 179:3 / /var/lib/pincer rw,noatime shared:3 - ext4 /dev/mmcblk0p3 rw
25 22 179:3 /etc /etc/pincer rw,noatime shared:3 - ext4 /dev/mmcblk0p3 rw
";
    const LAPTOP: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 8:1 /var/lib/pincer /var/lib/pincer rw,relatime shared:1 - ext4 /dev/sda1 rw
31 22 0:40 / /mnt/my\\040disk rw - ext4 /dev/sdb1 rw
";

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn systemd_and_watchdog_come_from_the_environment() {
        let under = env(&[
            ("INVOCATION_ID", "abc"),
            ("NOTIFY_SOCKET", "/run/systemd/notify"),
            ("WATCHDOG_USEC", "30000000"),
        ]);
        assert_eq!(
            systemd(&under),
            "yes (invocation abc, notify socket /run/systemd/notify)"
        );
        assert!(watchdog(&under).contains("timeout 30000 ms, pinging every 15000 ms"));
        let outside = env(&[]);
        assert!(systemd(&outside).starts_with("no "));
        assert!(watchdog(&outside).starts_with("off"));
        assert!(watchdog(&env(&[("WATCHDOG_USEC", "x")])).starts_with("misconfigured"));
    }

    #[test]
    fn read_only_root_and_the_data_partition_are_found_in_mountinfo() {
        assert_eq!(read_only_root(APPLIANCE), "yes (ext4 /dev/mmcblk0p2, ro)");
        assert!(read_only_root(LAPTOP).starts_with("no (ext4 /dev/sda1 is mounted rw)"));
        let own = data_dir_filesystem(Path::new("/var/lib/pincer"), APPLIANCE);
        assert!(
            own.starts_with("yes (/var/lib/pincer on /var/lib/pincer, ext4 /dev/mmcblk0p3"),
            "{own}"
        );
        // A bind mount of the root's own device (StateDirectory= under ProtectSystem=) is not a partition.
        let shared = data_dir_filesystem(Path::new("/var/lib/pincer/store"), LAPTOP);
        assert!(shared.starts_with("no ("), "{shared}");
        let escaped = data_dir_filesystem(Path::new("/mnt/my disk/pincer"), LAPTOP);
        assert!(
            escaped.starts_with("yes (/mnt/my disk/pincer on /mnt/my disk"),
            "{escaped}"
        );
    }

    #[test]
    fn journald_storage_follows_the_drop_ins() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        // Nothing configured, /var/log/journal present: persistent.
        std::fs::create_dir_all(r.join("var/log/journal")).expect("journal dir");
        assert!(
            journald(r).starts_with("not volatile (Storage=auto"),
            "{}",
            journald(r)
        );
        std::fs::create_dir_all(r.join("etc/systemd/journald.conf.d")).expect("drop-in dir");
        std::fs::write(
            r.join("etc/systemd/journald.conf.d/pincer.conf"),
            "[Journal]\nStorage=volatile\nRuntimeMaxUse=16M\n",
        )
        .expect("drop-in");
        assert_eq!(
            journald(r),
            "volatile (Storage=volatile in /etc/systemd/journald.conf.d/pincer.conf), RuntimeMaxUse=16M"
        );
        // A later drop-in wins.
        std::fs::write(
            r.join("etc/systemd/journald.conf.d/zz-persist.conf"),
            "[Journal]\nStorage=persistent\n",
        )
        .expect("drop-in");
        assert!(journald(r).starts_with(
            "not volatile (Storage=persistent in /etc/systemd/journald.conf.d/zz-persist.conf)"
        ));
    }
}
