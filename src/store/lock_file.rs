//! Where LMDB's lock file lives. LMDB keeps its reader table in `lock.mdb`, a file it maps
//! and writes on every read transaction (each reader slot records the transaction it reads).
//! Those writes reach the disk as the kernel flushes the dirty page: on an idle appliance
//! whose watchdog check reads the store every 15 s, that was a page and a journal commit
//! every flush interval, ~2 MB an hour of SD card wear for nothing (`scripts/bench --image`).
//!
//! The lock file's contents never need to survive a reboot (LMDB rebuilds the table when the
//! first process opens the environment), so with `PINCER_STORE_LOCK_DIR` set (the image's
//! unit sets `/run/pincer`, RAM) `lock.mdb` in the store directory becomes a symbolic link
//! into that directory. Every process opening the store (the gateway, `pincer` commands,
//! the embedding worker) follows the link and shares the one table. The link is made only
//! when no process has the environment open: a lock file in use is never swapped.

use std::fs::{DirBuilder, OpenOptions};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// The variable naming the directory for the lock file (a RAM file system on the appliance).
pub const LOCK_DIR_ENV: &str = "PINCER_STORE_LOCK_DIR";
/// LMDB's name for its lock file inside the environment's directory.
pub const LOCK_FILE_NAME: &str = "lock.mdb";

/// The lock directory from the environment, if set and not empty.
pub fn lock_dir_from_env() -> Option<PathBuf> {
    std::env::var_os(LOCK_DIR_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Makes `store_dir/lock.mdb` a link to `lock_dir/lock.mdb`, creating `lock_dir` (0700) when
/// missing. An existing regular lock file is replaced only when no process holds it (LMDB
/// takes a shared lock on it for as long as it has the environment open); otherwise it is
/// left as it is and used, and the link is made by the next open with nobody else in.
pub fn place(store_dir: &Path, lock_dir: &Path) -> std::io::Result<()> {
    if !lock_dir.is_dir() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(lock_dir)?;
    }
    let link = store_dir.join(LOCK_FILE_NAME);
    let target = lock_dir.join(LOCK_FILE_NAME);
    match std::fs::symlink_metadata(&link) {
        Ok(meta) if meta.file_type().is_symlink() => {
            if std::fs::read_link(&link)? == target {
                return Ok(());
            }
            std::fs::remove_file(&link)?;
        }
        Ok(_) => {
            if in_use(&link)? {
                log::info!(
                    "store: {} is in use by another process; it stays on disk until the next start",
                    link.display()
                );
                return Ok(());
            }
            std::fs::remove_file(&link)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::os::unix::fs::symlink(&target, &link)
}

/// Before LMDB opens the store: a link left by an earlier start whose RAM directory is gone
/// (after a reboot, for a process started without the variable) gets its directory back,
/// or LMDB could not create the table through it.
pub fn prepare(store_dir: &Path) -> std::io::Result<()> {
    let link = store_dir.join(LOCK_FILE_NAME);
    let Ok(target) = std::fs::read_link(&link) else {
        return Ok(());
    };
    match target.parent() {
        Some(parent) if !parent.as_os_str().is_empty() && !parent.exists() => {
            DirBuilder::new().recursive(true).mode(0o700).create(parent)
        }
        _ => Ok(()),
    }
}

/// After LMDB opened the store: a table root just created (a `pincer` command over SSH
/// before the gateway started) is handed to the store directory's owner, the gateway's user,
/// who could not open a root-owned 0600 table otherwise.
pub fn hand_over(store_dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let dir = std::fs::metadata(store_dir)?;
    let table = store_dir.join(LOCK_FILE_NAME);
    let meta = std::fs::metadata(&table)?;
    if dir.uid() == 0 || meta.uid() != 0 {
        return Ok(());
    }
    std::os::unix::fs::chown(&table, Some(dir.uid()), Some(dir.gid()))?;
    if let Some(parent) = std::fs::canonicalize(&table)?.parent() {
        if parent != std::fs::canonicalize(store_dir)? && std::fs::metadata(parent)?.uid() == 0 {
            std::os::unix::fs::chown(parent, Some(dir.uid()), Some(dir.gid()))?;
        }
    }
    Ok(())
}

/// Whether anyone holds LMDB's lock on the lock file (a shared record lock on its first byte
/// for as long as the environment is open). Asked as an open-file-description lock, which
/// conflicts with record locks of this process too, not only of others.
fn in_use(lock_file: &Path) -> std::io::Result<bool> {
    let file = OpenOptions::new().read(true).write(true).open(lock_file)?;
    // SAFETY: flock is a plain struct; zeroed is a valid value (l_pid 0, as OFD locks need).
    let mut probe: libc::flock = unsafe { std::mem::zeroed() };
    probe.l_type = libc::F_WRLCK as libc::c_short;
    probe.l_whence = libc::SEEK_SET as libc::c_short;
    probe.l_start = 0;
    probe.l_len = 1;
    // SAFETY: F_OFD_GETLK reads and writes the flock struct it is given, on an open descriptor.
    let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut probe) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(probe.l_type != libc::F_UNLCK as libc::c_short)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Store, StoreOptions};

    #[test]
    fn the_lock_file_lives_in_the_lock_dir_and_survives_the_dir_being_emptied() {
        let data = tempfile::tempdir().expect("data");
        let run = tempfile::tempdir().expect("run");
        let store_dir = data.path().join("store");
        let lock_dir = run.path().join("pincer");
        let options = || StoreOptions {
            lock_dir: Some(lock_dir.clone()),
            ..StoreOptions::default()
        };
        let first = Store::open(&store_dir, options()).expect("open");
        first.put_meta("k", b"v").expect("write");
        let link = store_dir.join(LOCK_FILE_NAME);
        assert!(std::fs::symlink_metadata(&link)
            .expect("link")
            .file_type()
            .is_symlink());
        assert_eq!(
            std::fs::read_link(&link).expect("target"),
            lock_dir.join(LOCK_FILE_NAME)
        );
        assert!(lock_dir.join(LOCK_FILE_NAME).is_file());
        // LMDB holds its lock through the link: another opener (a `pincer` command beside the
        // gateway) finds the table in use
        assert!(in_use(&link).expect("probe"));
        drop(first);
        assert!(!in_use(&link).expect("probe"));
        let second = Store::open(&store_dir, options()).expect("second open");
        assert_eq!(second.meta("k").expect("read"), Some(b"v".to_vec()));
        drop(second);
        // after a reboot the RAM directory is empty: the link is followed, the file made anew
        std::fs::remove_dir_all(&lock_dir).expect("reboot");
        let again = Store::open(&store_dir, options()).expect("reopen");
        assert_eq!(again.meta("k").expect("read"), Some(b"v".to_vec()));
    }

    #[test]
    fn a_lock_file_in_use_is_not_swapped() {
        let data = tempfile::tempdir().expect("data");
        let run = tempfile::tempdir().expect("run");
        let store_dir = data.path().join("store");
        let on_disk = Store::open(&store_dir, StoreOptions::default()).expect("open");
        assert!(store_dir.join(LOCK_FILE_NAME).is_file());
        // the gateway has it open: a `pincer` command with the variable set leaves it alone
        place(&store_dir, &run.path().join("pincer")).expect("place");
        assert!(!std::fs::symlink_metadata(store_dir.join(LOCK_FILE_NAME))
            .expect("lock file")
            .file_type()
            .is_symlink());
        drop(on_disk);
        // nobody in: the next open moves it
        place(&store_dir, &run.path().join("pincer")).expect("place");
        assert!(std::fs::symlink_metadata(store_dir.join(LOCK_FILE_NAME))
            .expect("link")
            .file_type()
            .is_symlink());
    }

    #[test]
    fn a_table_root_creates_goes_to_the_store_owner_and_a_lost_ram_dir_comes_back() {
        use std::os::unix::fs::MetadataExt;
        let data = tempfile::tempdir().expect("data");
        let run = tempfile::tempdir().expect("run");
        let store_dir = data.path().join("store");
        let lock_dir = run.path().join("pincer");
        let options = || StoreOptions {
            lock_dir: Some(lock_dir.clone()),
            ..StoreOptions::default()
        };
        drop(Store::open(&store_dir, options()).expect("open"));
        // a reboot empties /run; a process without the variable still opens the store
        std::fs::remove_dir_all(&lock_dir).expect("reboot");
        let plain = Store::open(
            &store_dir,
            StoreOptions {
                lock_dir: None,
                ..StoreOptions::default()
            },
        )
        .expect("open through the link");
        assert!(lock_dir.join(LOCK_FILE_NAME).is_file());
        drop(plain);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return; // handing over needs root (scripts/test runs as root in CI)
        }
        std::os::unix::fs::chown(&store_dir, Some(65534), Some(65534)).expect("chown");
        std::fs::remove_dir_all(&lock_dir).expect("reboot");
        drop(Store::open(&store_dir, options()).expect("root opens first"));
        let table = std::fs::metadata(lock_dir.join(LOCK_FILE_NAME)).expect("table");
        assert_eq!((table.uid(), table.gid()), (65534, 65534));
        assert_eq!(std::fs::metadata(&lock_dir).expect("dir").uid(), 65534);
    }
}
