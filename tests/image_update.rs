//! Signed A/B updates on the appliance image (`scripts/image`), under QEMU `-M virt` booting
//! through U-Boot and the image's boot script, with RAUC 1.8 and pincer as flashed:
//! - refused before anything is written: a bundle signed by a CA the image does not trust,
//!   one for another box (compatible), a truncated one, and one whose pincer cannot open the
//!   box's store (the store-schema claim, checked by the bundle's install hook);
//! - QEMU killed while RAUC writes the other slot: the old slot boots again;
//! - the real bundle `scripts/image` made, installed by the gateway's user (the image's D-Bus
//!   policy lets it install, not mark): the other slot boots on trial and
//!   `pincer-update-confirm` marks it good once the gateway is ready;
//! - a release whose gateway does not start (the same root file system, its `pincer gateway`
//!   failing): its trial times out, the slot is marked bad and the box reboots into the
//!   slot it came from, by itself.
//!
//! The bundles reach the guest on a second, read-only virtio disk. `#[ignore]`d in a plain
//! `cargo test`; `scripts/test` runs it after `scripts/image` with `PINCER_IMAGE`,
//! `PINCER_BUNDLE`, `PINCER_TEST_CA` (the CA the image trusts, with the signing key) and
//! `PINCER_TEST_OTHER_CA` (one it does not) set.

mod image_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use image_support::{free_port, http_status, qemu_virt_with_disk, run, tail, Card, Qemu, Ssh};
use serde_json::Value;

/// Boot to `/readyz` under TCG emulation on a loaded 2-core machine.
const BOOT_TIMEOUT: Duration = Duration::from_secs(600);
/// One installation of the real bundle under TCG.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(1200);
/// The trial limit the broken release gets (`confirm.env` on the data partition).
const TRIAL_SECS: u64 = 60;
const SLOT_A: &str = "rootfs.0";
const SLOT_B: &str = "rootfs.1";
/// The slots' partitions (image/genimage.cfg's disk signature).
const PART_B: &str = "/dev/disk/by-partuuid/70696e63-03";

fn env_path(name: &str) -> PathBuf {
    let path = std::env::var_os(name)
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("{name} is not set (scripts/test sets it)"));
    assert!(path.exists(), "{name}: no {}", path.display());
    path
}

/// A bundle of `content` (a directory holding `manifest.raucm` and its files) signed with
/// the signing key and certificate in `ca`.
fn sign(content: &Path, ca: &Path, out: &Path, squashfs: &str) {
    let _ = std::fs::remove_file(out);
    run(Command::new("rauc")
        .arg(format!("--cert={}", ca.join("signing.cert.pem").display()))
        .arg(format!("--key={}", ca.join("signing.key.pem").display()))
        .arg(format!("--keyring={}", ca.join("ca.cert.pem").display()))
        .arg("bundle")
        .arg(format!("--mksquashfs-args={squashfs}"))
        .arg(content)
        .arg(out));
}

/// A small bundle (a 4 MiB ext4 as its root file system, the image's own hook) with
/// `compatible` and `build` in its manifest: never meant to be installed.
fn small_bundle(work: &Path, name: &str, compatible: &str, build: &str, ca: &Path) -> PathBuf {
    let content = work.join(format!("content-{name}"));
    std::fs::create_dir_all(&content).expect("content dir");
    run(Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4"])
        .arg(content.join("rootfs.ext4"))
        .arg("4M"));
    // RAUC wants a squashfs over 4 KiB: the empty file system compresses below that.
    let noise: Vec<u8> = (0..65_536u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(content.join("padding.bin"), noise).expect("padding");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("image/rauc/hook"),
        content.join("hook"),
    )
    .expect("hook");
    std::fs::write(
        content.join("manifest.raucm"),
        format!(
            "[update]\ncompatible={compatible}\nversion=0.0.1\nbuild={build}\n\n\
             [bundle]\nformat=verity\n\n[hooks]\nfilename=hook\nhooks=install-check\n\n\
             [image.rootfs]\nfilename=rootfs.ext4\n"
        ),
    )
    .expect("manifest");
    let out = work.join(format!("{name}.raucb"));
    sign(&content, ca, &out, "-comp gzip");
    out
}

/// The real bundle's root file system with its `pincer gateway` failing (every other
/// `pincer` command, `update confirm` among them, still the real binary), re-signed as
/// version `0.0.0-broken`.
fn broken_bundle(work: &Path, good: &Path, ca: &Path) -> PathBuf {
    let content = work.join("content-broken");
    let _ = std::fs::remove_dir_all(&content);
    run(Command::new("unsquashfs")
        .args(["-q", "-n", "-d"])
        .arg(&content)
        .arg(good));
    let rootfs = content.join("rootfs.ext4");
    // The bundle's file system is shrunk to its contents: room for the wrapper first.
    run(Command::new("e2fsck").arg("-fy").arg(&rootfs));
    let blocks = std::fs::metadata(&rootfs).expect("rootfs").len() / 4096 + 2048;
    run(Command::new("resize2fs")
        .arg(&rootfs)
        .arg(blocks.to_string()));
    let wrapper = work.join("pincer-wrapper");
    std::fs::write(
        &wrapper,
        "#!/bin/sh\n# a release whose gateway does not start (tests/image_update.rs)\n\
         if [ \"${1:-}\" = gateway ]; then echo 'broken release: the gateway exits' >&2; exit 1; fi\n\
         exec /usr/bin/pincer.real \"$@\"\n",
    )
    .expect("wrapper");
    let commands = work.join("debugfs.cmds");
    std::fs::write(
        &commands,
        format!(
            "cd /usr/bin\nln pincer pincer.real\nunlink pincer\nwrite {} pincer\n\
             sif pincer mode 0100755\nsif pincer uid 0\nsif pincer gid 0\n",
            wrapper.display()
        ),
    )
    .expect("debugfs commands");
    run(Command::new("debugfs")
        .arg("-w")
        .arg("-f")
        .arg(&commands)
        .arg(&rootfs));
    let listing = run(Command::new("debugfs")
        .arg("-R")
        .arg("stat /usr/bin/pincer.real")
        .arg(&rootfs));
    assert!(
        String::from_utf8_lossy(&listing.stdout).contains("Type: regular"),
        "the real binary must stay as pincer.real: {}",
        String::from_utf8_lossy(&listing.stdout)
    );
    let manifest = std::fs::read_to_string(content.join("manifest.raucm")).expect("manifest");
    let manifest: String = manifest
        .lines()
        .map(|line| {
            if line.starts_with("version=") {
                "version=0.0.0-broken".to_string()
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(content.join("manifest.raucm"), manifest + "\n").expect("manifest");
    // RAUC makes the verity data itself: the unpacked bundle must not carry the old one.
    let out = work.join("broken.raucb");
    sign(&content, ca, &out, "-comp lz4");
    out
}

/// An ext4 file system holding `files`, for the guest's second disk.
fn bundle_disk(work: &Path, files: &[&Path]) -> PathBuf {
    let dir = work.join("disk");
    std::fs::create_dir_all(&dir).expect("disk dir");
    let mut bytes = 64u64 << 20;
    for file in files {
        let name = file.file_name().expect("name");
        std::fs::copy(file, dir.join(name)).expect("copy bundle");
        bytes += std::fs::metadata(file).expect("bundle").len() * 11 / 10;
    }
    let disk = work.join("bundles.ext4");
    run(Command::new("mke2fs")
        .args(["-q", "-F", "-t", "ext4", "-L", "bundles", "-d"])
        .arg(&dir)
        .arg(&disk)
        .arg(format!("{}k", bytes / 1024)));
    std::fs::remove_dir_all(&dir).expect("disk dir");
    disk
}

struct Guest {
    card: Card,
    disk: PathBuf,
    gateway: u16,
    ssh: Ssh,
    qemu: Option<Qemu>,
    starts: u32,
}

impl Guest {
    fn start(&mut self) {
        self.starts += 1;
        self.qemu = Some(qemu_virt_with_disk(
            &self.card,
            self.gateway,
            self.ssh.port,
            512,
            true,
            Some(&self.disk),
            &format!("console-{}.log", self.starts),
        ));
    }

    fn qemu(&mut self) -> &mut Qemu {
        self.qemu.as_mut().expect("QEMU runs")
    }

    fn boot_id(&self) -> String {
        self.ssh.run("cat /proc/sys/kernel/random/boot_id")
    }

    /// Waits for a boot other than `previous` (when given) to have the gateway ready and
    /// `pincer-update-confirm` done. Returns the boot id.
    fn wait_ready(&mut self, what: &str, previous: Option<&str>) -> String {
        let started = Instant::now();
        let gateway = self.gateway;
        let ssh = Ssh {
            port: self.ssh.port,
            key: self.ssh.key.clone(),
        };
        let previous = previous.map(str::to_string);
        self.qemu().wait_for(what, BOOT_TIMEOUT, |_| {
            if http_status(gateway, "/readyz") != Some(200) {
                return false;
            }
            let id = ssh.try_run("cat /proc/sys/kernel/random/boot_id");
            let id = String::from_utf8_lossy(&id.stdout).trim().to_string();
            !id.is_empty() && previous.as_deref() != Some(id.as_str())
        });
        eprintln!("image_update: {what} after {:?}", started.elapsed());
        self.wait_confirmed();
        self.boot_id()
    }

    /// Waits for the oneshot's decision on this boot.
    fn wait_confirmed(&mut self) {
        let ssh = Ssh {
            port: self.ssh.port,
            key: self.ssh.key.clone(),
        };
        self.qemu()
            .wait_for("pincer-update-confirm to decide", BOOT_TIMEOUT, |_| {
                let state =
                    ssh.try_run("systemctl show pincer-update-confirm -p ActiveState --value");
                String::from_utf8_lossy(&state.stdout).trim() == "active"
            });
    }

    /// RAUC's view as `pincer update status --json` prints it: the booted slot, each slot's
    /// boot status and bundle, the last installation's outcome.
    fn rauc(&self) -> Value {
        serde_json::from_str(&self.ssh.run("pincer update status --json"))
            .expect("pincer update status --json")
    }

    fn mount_bundles(&self) {
        self.ssh
            .run("mkdir -p /run/bundles && (mountpoint -q /run/bundles || mount -o ro /dev/vdb /run/bundles)");
    }

    /// A digest of slot B's first 32 MiB: what "nothing written" is checked against.
    fn slot_b_digest(&self) -> String {
        self.ssh
            .run(&format!("head -c 32M {PART_B} | sha256sum | cut -d' ' -f1"))
    }
}

fn slot<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["slots"]
        .as_array()
        .and_then(|slots| slots.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no slot {name} in {status}"))
}

fn booted(status: &Value) -> String {
    status["booted"]
        .as_str()
        .unwrap_or_else(|| panic!("no booted slot in {status}"))
        .to_string()
}

#[test]
#[ignore = "needs the image and its bundle: scripts/test runs it after scripts/image"]
fn signed_updates_install_boot_on_trial_and_roll_back_by_themselves() {
    let good = env_path("PINCER_BUNDLE");
    let ca = env_path("PINCER_TEST_CA");
    let other_ca = env_path("PINCER_TEST_OTHER_CA");
    let card = Card::new();
    let work = card.dir.path().join("bundles");
    std::fs::create_dir_all(&work).expect("work");

    let build = "test store-schema=1-1";
    let made = Instant::now();
    let foreign = small_bundle(
        &work,
        "foreign-signer",
        "pincer-rpi-arm64",
        build,
        &other_ca,
    );
    let other_box = small_bundle(&work, "other-box", "other-box-arm64", build, &ca);
    let future_store = small_bundle(
        &work,
        "future-store",
        "pincer-rpi-arm64",
        "test store-schema=900-901",
        &ca,
    );
    let whole = small_bundle(&work, "truncated", "pincer-rpi-arm64", build, &ca);
    let bytes = std::fs::read(&whole).expect("bundle");
    std::fs::write(&whole, &bytes[..bytes.len() / 2]).expect("truncate");
    let broken = broken_bundle(&work, &good, &ca);
    let disk = bundle_disk(
        &work,
        &[&good, &broken, &foreign, &other_box, &future_store, &whole],
    );
    eprintln!("image_update: test bundles made in {:?}", made.elapsed());

    let key = card.dir.path().join("id_ed25519");
    run(Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "image-update", "-f"])
        .arg(&key));
    let public = std::fs::read(key.with_extension("pub")).expect("public key");
    card.put("ssh", b"");
    card.put("authorized_keys", &public);
    card.put(
        "pincer.json5",
        br#"{ gateway: { auth: { token: "image-update-token-0123456789abcdef" } } }"#,
    );
    let mut guest = Guest {
        card,
        disk,
        gateway: free_port(),
        ssh: Ssh {
            port: free_port(),
            key,
        },
        qemu: None,
        starts: 0,
    };

    // --- 1. first boot, from slot A; the refusals --------------------------------------------
    guest.start();
    let boot = guest.wait_ready("first boot (slot A)", None);
    let status = guest.rauc();
    assert_eq!(booted(&status), SLOT_A, "{status}");
    assert_eq!(slot(&status, SLOT_A)["bootStatus"], "good", "{status}");
    guest.mount_bundles();
    let before = guest.slot_b_digest();
    for (bundle, expected) in [
        ("foreign-signer.raucb", "signature"),
        ("other-box.raucb", "this bundle is for 'other-box-arm64'"),
        ("truncated.raucb", "refused"),
        ("future-store.raucb", "store"),
    ] {
        let out = guest
            .ssh
            .try_run(&format!("pincer update apply /run/bundles/{bundle}"));
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("image_update: {bundle}: {}", tail(&said, 3));
        assert_eq!(
            out.status.code(),
            Some(1),
            "{bundle} must be refused:\n{said}"
        );
        assert!(
            said.to_lowercase().contains(&expected.to_lowercase()),
            "{bundle}: the refusal should say {expected:?}:\n{said}"
        );
    }
    assert_eq!(
        guest.slot_b_digest(),
        before,
        "a refused bundle wrote to slot B"
    );
    let status = guest.rauc();
    assert!(
        slot(&status, SLOT_B)["bundle"]["version"].is_null(),
        "nothing was installed: {status}"
    );
    // The gateway's user may install but never mark a slot (root's, after the trial).
    let mark = guest.ssh.try_run(
        "runuser -u pincer -- busctl call de.pengutronix.rauc / de.pengutronix.rauc.Installer Mark ss good other",
    );
    let said = String::from_utf8_lossy(&mark.stderr).to_string();
    assert!(
        !mark.status.success()
            && (said.contains("AccessDenied") || said.to_lowercase().contains("access denied")),
        "the gateway's user must not mark slots: {said}"
    );

    // --- 2. QEMU killed while RAUC writes slot B --------------------------------------------
    guest.ssh.run(
        "systemd-run --unit=apply-killed --setenv=PINCER_DATA_DIR=/var/lib/pincer/state \
         /usr/bin/pincer update apply /run/bundles/pincer-0.1.0-arm64.raucb",
    );
    let ssh = Ssh {
        port: guest.ssh.port,
        key: guest.ssh.key.clone(),
    };
    guest
        .qemu()
        .wait_for("RAUC writing slot B", INSTALL_TIMEOUT, |_| {
            let progress = ssh.try_run(
                "busctl get-property de.pengutronix.rauc / de.pengutronix.rauc.Installer Progress",
            );
            // (isi) 90 "Copying image to rootfs.1" 3
            String::from_utf8_lossy(&progress.stdout).contains("Copying image to rootfs.1")
        });
    // Some of it written, most not.
    std::thread::sleep(Duration::from_secs(10));
    drop(guest.qemu.take());
    eprintln!("image_update: QEMU killed mid-install");
    guest.start();
    let boot = guest.wait_ready("the boot after the killed install", Some(&boot));
    let status = guest.rauc();
    assert_eq!(booted(&status), SLOT_A, "the old slot must boot: {status}");
    assert_ne!(
        slot(&status, SLOT_B)["bootStatus"],
        "good",
        "a half-written slot must not be bootable: {status}"
    );

    // --- 3. the real bundle, installed by the gateway's user; the trial boot ----------------
    guest.mount_bundles();
    let started = Instant::now();
    let out = guest.ssh.run(
        "runuser -u pincer -- env PINCER_DATA_DIR=/var/lib/pincer/state \
         pincer update apply /run/bundles/pincer-0.1.0-arm64.raucb 2>&1",
    );
    let install = started.elapsed();
    eprintln!(
        "image_update: the real bundle ({} bytes) installed in {install:?}: {}",
        std::fs::metadata(&good).expect("bundle").len(),
        tail(&out, 2)
    );
    let status = guest.rauc();
    assert_eq!(status["primary"], SLOT_B, "{status}");
    let _ = guest.ssh.try_run("systemctl reboot");
    let boot = guest.wait_ready("the trial boot of slot B", Some(&boot));
    let status = guest.rauc();
    assert_eq!(booted(&status), SLOT_B, "the new slot must boot: {status}");
    assert_eq!(slot(&status, SLOT_B)["bootStatus"], "good", "{status}");
    assert_eq!(status["lastUpdate"]["outcome"], "booted", "{status}");
    let ledger = guest
        .ssh
        .run("cat /var/lib/pincer/system/update/confirmed.json");
    assert!(
        ledger.contains(SLOT_B) && ledger.contains("good"),
        "the decision is recorded: {ledger}"
    );
    let journal = guest
        .ssh
        .run("journalctl -u pincer-update-confirm --no-pager -o cat");
    assert!(
        journal.contains(&format!("marked {SLOT_B} good")),
        "{}",
        tail(&journal, 20)
    );

    // --- 4. a release whose gateway fails: its trial ends in a rollback ----------------------
    guest.ssh.run(&format!(
        "mkdir -p /var/lib/pincer/system/update && \
         echo PINCER_UPDATE_CONFIRM_TIMEOUT={TRIAL_SECS} > /var/lib/pincer/system/update/confirm.env"
    ));
    guest.mount_bundles();
    let out = guest
        .ssh
        .run("pincer update apply /run/bundles/broken.raucb 2>&1");
    eprintln!(
        "image_update: the broken release installed: {}",
        tail(&out, 2)
    );
    let _ = guest.ssh.try_run("systemctl reboot");
    // Its boot never gets ready: the next ready boot is slot B again.
    let _ = guest.wait_ready("the rollback to slot B", Some(&boot));
    let status = guest.rauc();
    assert_eq!(
        booted(&status),
        SLOT_B,
        "back on the slot that worked: {status}"
    );
    assert_eq!(slot(&status, SLOT_A)["bootStatus"], "bad", "{status}");
    assert_eq!(
        slot(&status, SLOT_A)["bundle"]["version"],
        "0.0.0-broken",
        "{status}"
    );
    assert_eq!(status["lastUpdate"]["outcome"], "rolled-back", "{status}");
    let ledger = guest
        .ssh
        .run("cat /var/lib/pincer/system/update/confirmed.json");
    assert!(
        ledger.contains(SLOT_A) && ledger.contains("bad"),
        "the failed trial is recorded: {ledger}"
    );
    assert!(
        ledger.contains("readyz") || ledger.contains("ready"),
        "the reason names the health check: {ledger}"
    );
}
