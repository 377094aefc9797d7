//! The appliance image under QEMU, for tests/image_boot.rs and examples/image_bench.rs:
//! a copy of the built image as a fresh SD card (files put on and taken off its FAT
//! partition with mtools, as a user's computer would), a QEMU process killed on drop
//! with its serial consoles in files, SSH into the guest with the card's key, and a
//! bare HTTP probe. Nothing here knows what the tests assert.
#![allow(dead_code)]

use std::io::Read as _;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A fresh card: larger than the image, so first boot has a data partition to grow.
pub const CARD_BYTES: u64 = 4 << 30;

pub fn image() -> PathBuf {
    let path = std::env::var_os("PINCER_IMAGE")
        .map(PathBuf::from)
        .expect("PINCER_IMAGE names the raw image scripts/image built (scripts/test sets it)");
    assert!(path.exists(), "no image at {}", path.display());
    path
}

pub fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// A copy of the image as a fresh SD card of `CARD_BYTES`, with files of the test's.
pub struct Card {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    /// Byte offset of the FAT boot partition (partition 1).
    pub boot_offset: u64,
}

impl Card {
    pub fn new() -> Card {
        let dir = tempfile::tempdir().expect("card dir");
        let path = dir.path().join("card.img");
        run(Command::new("cp")
            .arg("--sparse=always")
            .arg(image())
            .arg(&path));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("card");
        file.set_len(CARD_BYTES).expect("grow the card");
        let table: Value =
            serde_json::from_slice(&run(Command::new("sfdisk").arg("-J").arg(&path)).stdout)
                .expect("sfdisk -J");
        let parts = table["partitiontable"]["partitions"]
            .as_array()
            .expect("partitions");
        assert_eq!(parts.len(), 4, "boot, root A, root B, data: {table}");
        let boot_offset = parts[0]["start"].as_u64().expect("start") * 512;
        Card {
            dir,
            path,
            boot_offset,
        }
    }

    pub fn fat(&self) -> String {
        format!("{}@@{}", self.path.display(), self.boot_offset)
    }

    /// Writes `contents` as `name` on the FAT partition, as a user's computer would.
    pub fn put(&self, name: &str, contents: &[u8]) {
        let local = self.dir.path().join(format!("put-{name}"));
        std::fs::write(&local, contents).expect("local copy");
        run(Command::new("mcopy")
            .args(["-o", "-i"])
            .arg(self.fat())
            .arg(&local)
            .arg(format!("::/{name}")));
    }

    /// Copies `name` off the FAT partition into the card's directory.
    pub fn take(&self, name: &str) -> PathBuf {
        let local = self.dir.path().join(name);
        run(Command::new("mcopy")
            .args(["-o", "-i"])
            .arg(self.fat())
            .arg(format!("::/{name}"))
            .arg(&local));
        local
    }
}

/// A running QEMU, killed on drop, its serial console(s) in files.
pub struct Qemu {
    pub child: Child,
    pub consoles: Vec<PathBuf>,
}

impl Qemu {
    pub fn start(mut command: Command, consoles: Vec<PathBuf>) -> Qemu {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        Qemu { child, consoles }
    }

    /// Everything the consoles printed so far, colour escapes removed (systemd colours
    /// unit names: `Started \x1b[0;1;39mpincer.service\x1b[0m`).
    pub fn console(&self) -> String {
        self.consoles
            .iter()
            .map(|p| {
                plain(&String::from_utf8_lossy(
                    &std::fs::read(p).unwrap_or_default(),
                ))
            })
            .collect::<Vec<_>>()
            .join("\n----- next console -----\n")
    }

    /// Panics with the console's tail when QEMU has exited.
    pub fn check_alive(&mut self, what: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            let mut stderr = String::new();
            if let Some(mut e) = self.child.stderr.take() {
                let _ = e.read_to_string(&mut stderr);
            }
            panic!(
                "QEMU exited ({status}) while {what}; stderr: {stderr}\nconsole:\n{}",
                tail(&self.console(), 80)
            );
        }
    }

    pub fn wait_for(&mut self, what: &str, timeout: Duration, mut done: impl FnMut(&Qemu) -> bool) {
        let started = Instant::now();
        while started.elapsed() < timeout {
            self.check_alive(what);
            if done(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!(
            "{what}: not within {timeout:?}; console:\n{}",
            tail(&self.console(), 80)
        );
    }
}

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `text` without ANSI escape sequences (CSI: ESC `[` … final byte in `@`..=`~`).
pub fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One HTTP/1.1 GET on loopback; the status code, or None when nothing answers yet.
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    use std::io::Write as _;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: pincer.local\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

/// SSH into the guest as root with the key the card carried.
pub struct Ssh {
    pub port: u16,
    pub key: PathBuf,
}

impl Ssh {
    pub fn command(&self, remote: &str) -> Command {
        let mut command = Command::new("ssh");
        command
            .args([
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
            ])
            .args([
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=20",
                "-o",
                "LogLevel=ERROR",
            ])
            .arg("-i")
            .arg(&self.key)
            .args(["-p", &self.port.to_string(), "root@127.0.0.1", remote])
            .stdin(Stdio::null());
        command
    }

    /// Runs `remote` once; an SSH failure of its own (exit 255: no connection, the guest
    /// too busy under emulation to answer within the connect timeout) is retried a few
    /// times, the remote command's own failure is not.
    pub fn try_run(&self, remote: &str) -> Output {
        let mut attempts = 0;
        loop {
            let output = self.command(remote).output().expect("ssh runs");
            attempts += 1;
            if output.status.code() != Some(255) || attempts >= 5 {
                return output;
            }
            std::thread::sleep(Duration::from_secs(3));
        }
    }

    /// Runs `remote` on the guest; its stdout, trimmed. Panics when it fails.
    pub fn run(&self, remote: &str) -> String {
        let output = self.try_run(remote);
        assert!(
            output.status.success(),
            "on the guest `{remote}` failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    pub fn unit_property(&self, unit: &str, property: &str) -> String {
        self.run(&format!("systemctl show {unit} -p {property} --value"))
    }
}

/// QEMU's U-Boot for `-M virt` (Debian's u-boot-qemu, `scripts/setup image`).
pub const QEMU_UBOOT: &str = "/usr/lib/u-boot/qemu_arm64/u-boot.bin";

/// The card booted on QEMU's `-M virt` (Cortex-A53, 2 cores, `memory_mib` of RAM) the way
/// the image boots everywhere: U-Boot finds boot.scr on the FAT partition, which picks the
/// slot and boots its kernel. The disk is on virtio, the gateway (18789) and SSH (22)
/// ports are forwarded to `gateway` and `ssh` on the host's loopback; the console goes to
/// the card's dir. `reboot` lets the guest reboot (A/B tests) instead of ending QEMU.
pub fn qemu_virt(card: &Card, gateway: u16, ssh: u16, memory_mib: u32, reboot: bool) -> Qemu {
    qemu_virt_with_disk(card, gateway, ssh, memory_mib, reboot, None, "console.log")
}

/// [`qemu_virt`] with a second virtio disk (`/dev/vdb` in the guest: the update tests' bundles)
/// and the console in `console_name` in the card's dir (one file per QEMU start).
pub fn qemu_virt_with_disk(
    card: &Card,
    gateway: u16,
    ssh: u16,
    memory_mib: u32,
    reboot: bool,
    second_disk: Option<&std::path::Path>,
    console_name: &str,
) -> Qemu {
    let console = card.dir.path().join(console_name);
    let mut command = Command::new("qemu-system-aarch64");
    command
        .args(["-M", "virt", "-cpu", "cortex-a53", "-smp", "2"])
        .args(["-m", &memory_mib.to_string()])
        .args(["-accel", "tcg,thread=multi", "-nographic"])
        .args(["-bios", QEMU_UBOOT])
        .arg("-drive")
        .arg(format!(
            "if=none,id=card,format=raw,file={}",
            card.path.display()
        ))
        .args(["-device", "virtio-blk-pci,drive=card"])
        .arg("-netdev")
        .arg(format!(
            "user,id=lan,hostfwd=tcp:127.0.0.1:{gateway}-:18789,hostfwd=tcp:127.0.0.1:{ssh}-:22"
        ))
        .args(["-device", "virtio-net-pci,netdev=lan,romfile="])
        .args(["-monitor", "none", "-serial"])
        .arg(format!("file:{}", console.display()));
    if let Some(disk) = second_disk {
        command
            .arg("-drive")
            .arg(format!(
                "if=none,id=extra,format=raw,readonly=on,file={}",
                disk.display()
            ))
            .args(["-device", "virtio-blk-pci,drive=extra"]);
    }
    if !reboot {
        command.arg("-no-reboot");
    }
    Qemu::start(command, vec![console])
}
