//! A real RAUC for tests: Debian's `rauc service` (1.8) on a private `dbus-daemon`, with a
//! throwaway CA made by openssl, two slots that are plain files, and a boot loader backend that
//! keeps U-Boot's facts (primary slot, good/bad per slot) in files. Nothing here is a fake of
//! RAUC: bundles are made by `rauc bundle` and installed by RAUC itself.
//!
//! The boot loader backend is RAUC's `custom` one, a shell script doing what RAUC's U-Boot
//! backend does with BOOT_ORDER / BOOT_x_LEFT: `set-primary X` makes X first and bootable
//! (good), `set-state X bad` takes it out. A "reboot" is [`RaucSystem::reboot_into`]: RAUC is
//! restarted with `--override-boot-slot`.
//!
//! Needs root (RAUC mounts bundles on loop devices), `rauc`, `dbus-daemon`, `openssl`,
//! `mksquashfs` (`scripts/setup update` installs them); [`RaucSystem::start`] returns `None`
//! (after `skip`) where they are missing outside CI, and panics in CI.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tempfile::TempDir;

use super::skip::{in_ci, skip};

/// The compatible string of the test system.
pub const COMPATIBLE: &str = "pincer-test";
/// Size of each slot file.
pub const SLOT_BYTES: usize = 8 * 1024 * 1024;

/// Who signs a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    /// Signed by a key the system's keyring trusts.
    Trusted,
    /// Signed by a CA the system does not know.
    Rogue,
}

/// What goes into a bundle's manifest.
pub struct BundleSpec<'a> {
    pub compatible: &'a str,
    pub version: &'a str,
    pub build: &'a str,
    pub signer: Signer,
    /// Bytes of the rootfs image.
    pub image_bytes: usize,
}

impl BundleSpec<'_> {
    /// A bundle this system accepts whose pincer opens store schemas 1-1.
    pub fn good() -> BundleSpec<'static> {
        BundleSpec {
            compatible: COMPATIBLE,
            version: "2026.12.1",
            build: "20261201 store-schema=1-1",
            signer: Signer::Trusted,
            image_bytes: 4 * 1024 * 1024,
        }
    }
}

/// A bundle made by `rauc bundle`.
pub struct Bundle {
    pub path: PathBuf,
    /// SHA-256 of its rootfs image.
    pub image_sha256: String,
    pub image_bytes: usize,
}

/// A RAUC service on its own bus, with its slots and keys, torn down on drop.
pub struct RaucSystem {
    pub dir: TempDir,
    bus: Child,
    rauc: Option<Child>,
    pub bus_address: String,
    bundles: u32,
}

fn tools_missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("RAUC installs bundles on loop devices: needs root".into());
    }
    for tool in ["rauc", "dbus-daemon", "openssl", "mksquashfs"] {
        let found = std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(tool).is_file()));
        if !found {
            return Some(format!("{tool} is not installed (scripts/setup update)"));
        }
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no /dev/loop-control: RAUC cannot mount bundles".into());
    }
    None
}

fn run(command: &mut Command) -> String {
    let output = command.output().expect("run a tool");
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// SHA-256 of the first `len` bytes of a file.
pub fn sha256_prefix(path: &Path, len: usize) -> String {
    let bytes = std::fs::read(path).expect("read file");
    hex::encode(Sha256::digest(&bytes[..len.min(bytes.len())]))
}

/// SHA-256 of a whole file.
pub fn sha256_file(path: &Path) -> String {
    hex::encode(Sha256::digest(std::fs::read(path).expect("read file")))
}

impl RaucSystem {
    /// Starts the bus and RAUC, booted from slot A. `None` (after `skip`) where RAUC cannot
    /// run here.
    pub fn start(test: &str) -> Option<RaucSystem> {
        if let Some(why) = tools_missing() {
            assert!(!in_ci(), "{test}: {why}");
            skip(test, &why);
            return None;
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().to_path_buf();
        make_keys(&root);
        for slot in ["slot0.img", "slot1.img"] {
            // A recognisable pattern, so "untouched" is a checksum comparison.
            let pattern: Vec<u8> = (0..SLOT_BYTES).map(|i| (i % 251) as u8).collect();
            std::fs::write(root.join(slot), pattern).expect("slot file");
        }
        std::fs::create_dir_all(root.join("boot")).expect("boot dir");
        std::fs::write(root.join("boot/primary"), "A\n").expect("primary");
        std::fs::write(root.join("boot/state.A"), "good\n").expect("state A");
        std::fs::write(root.join("boot/state.B"), "bad\n").expect("state B");
        let backend = root.join("boot.sh");
        std::fs::write(
            &backend,
            format!(
                "#!/bin/sh\nd={boot}\necho \"$@\" >> \"$d/calls\"\ncase \"$1\" in\n\
                 get-primary) cat \"$d/primary\" ;;\n\
                 set-primary) echo \"$2\" > \"$d/primary\"; echo good > \"$d/state.$2\" ;;\n\
                 get-state) cat \"$d/state.$2\" ;;\n\
                 set-state) echo \"$3\" > \"$d/state.$2\" ;;\n\
                 *) exit 1 ;;\nesac\n",
                boot = root.join("boot").display()
            ),
        )
        .expect("backend");
        std::fs::set_permissions(
            &backend,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        std::fs::write(
            root.join("system.conf"),
            format!(
                "[system]\ncompatible={COMPATIBLE}\nbootloader=custom\nstatusfile={root}/status.raucs\n\
                 data-directory={root}/rauc-data\n\n[handlers]\nbootloader-custom-backend={root}/boot.sh\n\n\
                 [keyring]\npath={root}/ca.cert.pem\n\n\
                 [slot.rootfs.0]\ndevice={root}/slot0.img\ntype=raw\nbootname=A\n\n\
                 [slot.rootfs.1]\ndevice={root}/slot1.img\ntype=raw\nbootname=B\n",
                root = root.display()
            ),
        )
        .expect("system.conf");
        let socket = root.join("bus.sock");
        std::fs::write(root.join("bus.conf"), bus_config(&socket)).expect("bus.conf");
        let bus = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", root.join("bus.conf").display()))
            .arg("--nofork")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start dbus-daemon");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "dbus-daemon made no socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut system = RaucSystem {
            bus_address: format!("unix:path={}", socket.display()),
            dir,
            bus,
            rauc: None,
            bundles: 0,
        };
        system.start_rauc("A");
        Some(system)
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// RAUC's system.conf.
    pub fn conf(&self) -> PathBuf {
        self.root().join("system.conf")
    }

    /// The environment a pincer process needs to reach this RAUC.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![("DBUS_SYSTEM_BUS_ADDRESS".into(), self.bus_address.clone())]
    }

    pub fn slot_file(&self, index: u8) -> PathBuf {
        self.root().join(format!("slot{index}.img"))
    }

    /// What the boot loader holds: the primary bootname and a slot's state.
    pub fn primary(&self) -> String {
        read_trimmed(&self.root().join("boot/primary"))
    }

    pub fn boot_state(&self, bootname: &str) -> String {
        read_trimmed(&self.root().join(format!("boot/state.{bootname}")))
    }

    fn start_rauc(&mut self, booted: &str) {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.root().join("rauc.log"))
            .expect("rauc log");
        let child = Command::new("rauc")
            .arg(format!("--conf={}", self.conf().display()))
            .arg(format!("--mount={}", self.root().join("mnt").display()))
            .arg("service")
            .arg(format!("--override-boot-slot={booted}"))
            .env("DBUS_SYSTEM_BUS_ADDRESS", &self.bus_address)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start rauc service");
        self.rauc = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let owned = Command::new("dbus-send")
                .arg(format!("--bus={}", self.bus_address))
                .args([
                    "--print-reply",
                    "--dest=org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                ])
                .args([
                    "org.freedesktop.DBus.NameHasOwner",
                    "string:de.pengutronix.rauc",
                ])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("boolean true"))
                .unwrap_or(false);
            if owned {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "rauc service did not come onto the bus:\n{}",
                self.rauc_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop_rauc(&mut self) {
        if let Some(mut child) = self.rauc.take() {
            // SAFETY: kill with a pid we spawned and have not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A reboot as far as RAUC can tell: restarted, booted from `bootname`.
    pub fn reboot_into(&mut self, bootname: &str) {
        self.stop_rauc();
        self.start_rauc(bootname);
    }

    pub fn rauc_log(&self) -> String {
        std::fs::read_to_string(self.root().join("rauc.log")).unwrap_or_default()
    }

    /// Makes a bundle with `rauc bundle`.
    pub fn bundle(&mut self, spec: &BundleSpec<'_>) -> Bundle {
        self.bundles += 1;
        let content = self.root().join(format!("bundle{}", self.bundles));
        std::fs::create_dir_all(&content).expect("bundle dir");
        // Pseudo-random (xorshift64), so squashfs cannot shrink it.
        let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(self.bundles);
        let image: Vec<u8> = (0..spec.image_bytes)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect();
        let image_sha256 = hex::encode(Sha256::digest(&image));
        std::fs::write(content.join("rootfs.img"), &image).expect("image");
        std::fs::write(
            content.join("manifest.raucm"),
            format!(
                "[update]\ncompatible={}\nversion={}\nbuild={}\n\n[bundle]\nformat=plain\n\n\
                 [image.rootfs]\nfilename=rootfs.img\n",
                spec.compatible, spec.version, spec.build
            ),
        )
        .expect("manifest");
        let (cert, key) = match spec.signer {
            Signer::Trusted => ("dev.cert.pem", "dev.key.pem"),
            Signer::Rogue => ("rogue.cert.pem", "rogue.key.pem"),
        };
        let path = self.root().join(format!("bundle{}.raucb", self.bundles));
        run(Command::new("rauc")
            .arg(format!("--cert={}", self.root().join(cert).display()))
            .arg(format!("--key={}", self.root().join(key).display()))
            .arg("bundle")
            .arg(&content)
            .arg(&path));
        Bundle {
            path,
            image_sha256,
            image_bytes: spec.image_bytes,
        }
    }
}

impl Drop for RaucSystem {
    fn drop(&mut self) {
        self.stop_rauc();
        let _ = self.bus.kill();
        let _ = self.bus.wait();
    }
}

fn read_trimmed(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// A CA the system trusts with a signing key under it, and a rogue CA with its own.
fn make_keys(root: &Path) {
    for (ca, signer) in [("ca", "dev"), ("rogue-ca", "rogue")] {
        let at = |name: &str| root.join(name).display().to_string();
        run(Command::new("openssl").args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN=pincer test {ca}"),
            "-keyout",
            &at(&format!("{ca}.key.pem")),
            "-out",
            &at(&format!("{ca}.cert.pem")),
        ]));
        run(Command::new("openssl").args([
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN=pincer test {signer}"),
            "-keyout",
            &at(&format!("{signer}.key.pem")),
            "-out",
            &at(&format!("{signer}.csr")),
        ]));
        std::fs::write(
            root.join("ext.cnf"),
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n",
        )
        .expect("ext");
        run(Command::new("openssl").args([
            "x509",
            "-req",
            "-days",
            "2",
            "-CAcreateserial",
            "-in",
            &at(&format!("{signer}.csr")),
            "-CA",
            &at(&format!("{ca}.cert.pem")),
            "-CAkey",
            &at(&format!("{ca}.key.pem")),
            "-extfile",
            &at("ext.cnf"),
            "-out",
            &at(&format!("{signer}.cert.pem")),
        ]));
    }
}

/// A system bus for the test: root may own RAUC's name (RAUC's own policy file, included),
/// everyone may talk to it.
fn bus_config(socket: &Path) -> String {
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <allow send_destination="org.freedesktop.DBus"/>
    <allow send_type="method_call"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="signal"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="method_call"/>
    <allow send_type="signal"/>
  </policy>
  <include ignore_missing="no">/usr/share/dbus-1/system.d/de.pengutronix.rauc.conf</include>
</busconfig>
"#,
        socket = socket.display()
    )
}

/// A bus that authenticates a client, answers its `Hello`, then sends `payload` raw: for
/// malformed and oversized input. Serves one client; returns the socket's address.
pub fn hostile_bus(dir: &Path, payload: Vec<u8>) -> String {
    use std::io::{Read, Write};
    let socket = dir.join("hostile.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        // NUL, then AUTH EXTERNAL … \r\n
        while stream.read_exact(&mut byte).is_ok() {
            line.push(byte[0]);
            if line.ends_with(b"\r\n") {
                break;
            }
        }
        let _ = stream.write_all(b"OK 0123456789abcdef0123456789abcdef\r\n");
        line.clear();
        while stream.read_exact(&mut byte).is_ok() {
            line.push(byte[0]);
            if line.ends_with(b"BEGIN\r\n") {
                break;
            }
        }
        // Hello: read its 16-byte header and the rest it announces.
        let mut head = [0u8; 16];
        if stream.read_exact(&mut head).is_err() {
            return;
        }
        let fields = u32::from_le_bytes([head[12], head[13], head[14], head[15]]) as usize;
        let body = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        let rest = (16 + fields).next_multiple_of(8) - 16 + body;
        let mut sink = vec![0u8; rest];
        let _ = stream.read_exact(&mut sink);
        // The Hello reply, marshalled by hand: a method return (serial 1) with the header fields
        // REPLY_SERIAL 1 (bytes 16..24) and SIGNATURE "s" (24..31), one byte of padding to 32,
        // then the 9-byte body: the string ":1.1".
        let reply: Vec<u8> = [
            &[b'l', 2, 0, 1][..],
            &9u32.to_le_bytes(),
            &1u32.to_le_bytes(),
            &15u32.to_le_bytes(),
            &[5, 1, b'u', 0],
            &1u32.to_le_bytes(),
            &[8, 1, b'g', 0, 1, b's', 0],
            &[0],
            &4u32.to_le_bytes(),
            b":1.1\0",
        ]
        .concat();
        let _ = stream.write_all(&reply);
        let _ = stream.write_all(&payload);
        let _ = stream.flush();
        std::thread::sleep(Duration::from_secs(5));
    });
    format!("unix:path={}", socket.display())
}
