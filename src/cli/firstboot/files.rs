//! The file moves of first boot: bounded reads from the boot partition, writes that
//! are synced and renamed into place (so a power cut leaves the old file or the new
//! one), ownership for the service user, and the rename of a refused file.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A user and group to hand files to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

impl Owner {
    /// Looks a user up by name (its primary group comes with it).
    pub fn lookup(name: &str) -> Result<Owner, String> {
        let c_name =
            CString::new(name).map_err(|_| format!("user name {name:?} has a NUL byte"))?;
        // SAFETY: getpwnam reads a NUL-terminated name and returns a pointer into static
        // storage (or null); it is read at once, before any other passwd call.
        let entry = unsafe { libc::getpwnam(c_name.as_ptr()) };
        if entry.is_null() {
            return Err(format!(
                "--owner {name}: no such user (the image's sysusers.d creates `pincer`)"
            ));
        }
        // SAFETY: non-null, points at a passwd record.
        let entry = unsafe { &*entry };
        Ok(Owner {
            uid: entry.pw_uid,
            gid: entry.pw_gid,
        })
    }
}

/// What [`install`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Unchanged,
    Created,
    Replaced,
}

/// Gives `path` to `owner` (no-op without one).
pub fn chown(path: &Path, owner: Option<&Owner>) -> Result<(), String> {
    let Some(owner) = owner else { return Ok(()) };
    std::os::unix::fs::chown(path, Some(owner.uid), Some(owner.gid))
        .map_err(|e| format!("cannot give {} to uid {}: {e}", path.display(), owner.uid))
}

/// Creates `dir` (and parents) with `mode` if missing; gives it to `owner`.
pub fn ensure_dir(dir: &Path, mode: u32, owner: Option<&Owner>) -> Result<(), String> {
    if !dir.is_dir() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("cannot set the mode of {}: {e}", dir.display()))?;
    }
    chown(dir, owner)
}

/// Reads a user's file of at most `cap` bytes: `None` when absent; the inner `Err` (a
/// file too big or not UTF-8) is the user's to fix, the outer one the box's.
#[allow(clippy::type_complexity)]
pub fn read_capped(path: &Path, cap: u64) -> Result<Option<Result<String, String>>, String> {
    let file = match std::fs::File::open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        Ok(file) => file,
    };
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > cap {
        return Ok(Some(Err(format!("larger than {cap} bytes"))));
    }
    Ok(Some(
        String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string()),
    ))
}

/// Writes `bytes` to `target` with `mode` and `owner`, synced, through a rename; with
/// `keep_previous` a different file already there stays as `<name>.previous`.
pub fn install(
    target: &Path,
    bytes: &[u8],
    mode: u32,
    owner: Option<&Owner>,
    keep_previous: bool,
) -> Result<Written, String> {
    let existing = std::fs::read(target).ok();
    if existing.as_deref() == Some(bytes) {
        return Ok(Written::Unchanged);
    }
    let temp = sibling(target, ".firstboot-tmp");
    let _ = std::fs::remove_file(&temp);
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(mode)
            .open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()
    };
    write().map_err(|e| format!("cannot write {}: {e}", temp.display()))?;
    chown(&temp, owner)?;
    if keep_previous && existing.is_some() {
        let previous = sibling(target, ".previous");
        std::fs::rename(target, &previous).map_err(|e| {
            format!(
                "cannot keep {} as {}: {e}",
                target.display(),
                previous.display()
            )
        })?;
    }
    std::fs::rename(&temp, target)
        .map_err(|e| format!("cannot move {} into place: {e}", target.display()))?;
    sync_parent(target);
    Ok(if existing.is_some() {
        Written::Replaced
    } else {
        Written::Created
    })
}

/// Removes a secret from the boot partition and syncs its directory.
pub fn remove_secret(path: &Path) -> Result<(), String> {
    std::fs::remove_file(path).map_err(|e| {
        format!(
            "cannot remove {} from the boot partition: {e}",
            path.display()
        )
    })?;
    sync_parent(path);
    Ok(())
}

/// Renames a refused file to `<name>.invalid-<stamp>` and writes the error to
/// `<name>.invalid-<stamp>.txt` beside it; returns the new name.
pub fn keep_refused(
    source: &Path,
    stamp: &str,
    error: &str,
    key_path: Option<&str>,
) -> Result<PathBuf, String> {
    let kept = sibling(source, &format!(".invalid-{stamp}"));
    std::fs::rename(source, &kept)
        .map_err(|e| format!("cannot rename {}: {e}", source.display()))?;
    let mut note = format!(
        "pincer could not use this file, so it was renamed and nothing in it was applied.\n\
         error: {error}\n"
    );
    if let Some(path) = key_path {
        note.push_str(&format!("key: {path}\n"));
    }
    note.push_str(&format!(
        "Fix it, rename it back to {}, and boot again.\n",
        source
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    let note_path = sibling(&kept, ".txt");
    std::fs::write(&note_path, note)
        .map_err(|e| format!("cannot write {}: {e}", note_path.display()))?;
    sync_parent(source);
    Ok(kept)
}

/// `path` with `suffix` appended to its file name.
fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// Best effort: some file systems refuse fsync on a directory.
fn sync_parent(path: &Path) {
    if let Some(parent) = path.parent() {
        if let Ok(dir) = std::fs::File::open(parent) {
            let _ = dir.sync_all();
        }
    }
}
