//! Giving back the resident pages of a file this process has mapped: the store's LMDB map after bulk writes,
//! ONNX Runtime's code after the model is loaded, pincer's own code and constants once start-up is over
//! ([`release_clean_pages`]).
//!
//! A file's mappings are found by its device and inode in `/proc/self/maps`, so a path that reaches the file
//! through a symlink or a relative directory still matches. Two kinds of advice:
//! - [`Advice::Unmap`] (`MADV_DONTNEED`) drops the pages from this process only; the kernel keeps them as
//!   page cache and the next access maps them again with a minor fault. For shared mappings nobody writes
//!   through (LMDB's map); a private writable mapping may hold copy-on-write changes it would discard, so
//!   such mappings are skipped.
//! - [`Advice::Reclaim`] (`MADV_PAGEOUT`, Linux 5.4+) asks the kernel to reclaim the pages as it would under
//!   memory pressure: clean file pages are dropped and read back from the file when touched, anything else is
//!   left alone. Safe on any mapping; the caller pays a read from disk for each page it uses again.
//!
//! This file must not know what the files are.

use std::path::Path;

/// What to do with a file's resident pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// `MADV_DONTNEED`: unmap from this process, keep in the page cache (shared mappings only).
    Unmap,
    /// `MADV_PAGEOUT`: let the kernel reclaim them now.
    Reclaim,
}

/// One mapping: start address, length in bytes, and whether it is private and writable (may hold
/// copy-on-write changes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mapping {
    start: usize,
    len: usize,
    private_writable: bool,
}

/// The mappings in `maps` (the text of `/proc/self/maps`) of the file with `inode` on device `dev`
/// (`major:minor` in hex, as the kernel prints it).
fn mappings_of(maps: &str, dev: &str, inode: u64) -> Vec<Mapping> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_ascii_whitespace();
            let range = fields.next()?;
            let (perms, _offset) = (fields.next()?, fields.next()?);
            let (line_dev, line_inode) = (fields.next()?, fields.next()?);
            if line_dev != dev || line_inode.parse::<u64>().ok()? != inode {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            Some(Mapping {
                start,
                len: end.checked_sub(start)?,
                private_writable: perms.contains('w') && perms.contains('p'),
            })
        })
        .collect()
}

/// Applies `advice` to every mapping of `path` in this process; returns the bytes of mapping advised (0 when
/// the file is not mapped). The caller must keep the mappings from being unmapped or moved meanwhile.
#[cfg(target_os = "linux")]
pub fn advise(path: &Path, advice: Advice) -> std::io::Result<usize> {
    use std::os::unix::fs::MetadataExt;

    let metadata = std::fs::metadata(path)?;
    let dev = format!(
        "{:02x}:{:02x}",
        libc::major(metadata.dev()),
        libc::minor(metadata.dev())
    );
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let flag = match advice {
        Advice::Unmap => libc::MADV_DONTNEED,
        Advice::Reclaim => libc::MADV_PAGEOUT,
    };
    let mut advised = 0;
    for mapping in mappings_of(&maps, &dev, metadata.ino()) {
        if advice == Advice::Unmap && mapping.private_writable {
            continue;
        }
        // SAFETY: the range is a live mapping of `path` (the caller keeps it mapped). MADV_PAGEOUT never
        // loses data. MADV_DONTNEED is never given to a private writable mapping (skipped above); on a
        // shared mapping nobody writes through or a read-only one it just unmaps pages whose content stays
        // in the file, so pointers into the mapping stay valid.
        let result =
            unsafe { libc::madvise(mapping.start as *mut libc::c_void, mapping.len, flag) };
        if result != 0 {
            return Err(std::io::Error::last_os_error());
        }
        advised += mapping.len;
    }
    Ok(advised)
}

#[cfg(not(target_os = "linux"))]
pub fn advise(_path: &Path, _advice: Advice) -> std::io::Result<usize> {
    Ok(0)
}

/// Unmaps the resident pages of this process's read-only mappings of `path` that hold nothing but the
/// file's content (`MADV_DONTNEED`): its code and constants, never a mapping that is writable or holds
/// copy-on-write pages (smaps' `Anonymous`), such as the relocated pointers of a binary's RELRO segment.
/// The pages stay in the page cache; what runs again maps them back with a minor fault. Returns the bytes
/// of mapping advised.
#[cfg(target_os = "linux")]
pub fn release_clean_pages(path: &Path) -> std::io::Result<usize> {
    use std::os::unix::fs::MetadataExt;

    let metadata = std::fs::metadata(path)?;
    let (dev, inode) = (
        format!(
            "{:02x}:{:02x}",
            libc::major(metadata.dev()),
            libc::minor(metadata.dev())
        ),
        metadata.ino(),
    );
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut advised = 0;
    for mapping in clean_mappings_of(&smaps, &dev, inode) {
        // SAFETY: a live read-only mapping of `path` holding only file pages (checked in smaps just now;
        // read-only mappings gain no copy-on-write pages): unmapping them loses nothing, and a later access
        // maps the same content back.
        let result = unsafe {
            libc::madvise(
                mapping.start as *mut libc::c_void,
                mapping.len,
                libc::MADV_DONTNEED,
            )
        };
        if result != 0 {
            return Err(std::io::Error::last_os_error());
        }
        advised += mapping.len;
    }
    Ok(advised)
}

#[cfg(not(target_os = "linux"))]
pub fn release_clean_pages(_path: &Path) -> std::io::Result<usize> {
    Ok(0)
}

/// The read-only mappings in `smaps` (the text of `/proc/self/smaps`) of the file with `inode` on `dev`
/// that hold no anonymous (copy-on-write) page.
fn clean_mappings_of(smaps: &str, dev: &str, inode: u64) -> Vec<Mapping> {
    let mut found = Vec::new();
    let mut current: Option<(Mapping, bool)> = None;
    let mut finish = |current: Option<(Mapping, bool)>| {
        if let Some((mapping, true)) = current {
            found.push(mapping);
        }
    };
    for line in smaps.lines() {
        let first = line.split_ascii_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            finish(current.take());
            current = mappings_of(line, dev, inode)
                .into_iter()
                .next()
                .filter(|_| {
                    !line
                        .split_ascii_whitespace()
                        .nth(1)
                        .unwrap_or("w")
                        .contains('w')
                })
                .map(|mapping| (mapping, true));
        } else if first == "Anonymous:" {
            let anonymous = line.split_ascii_whitespace().nth(1).unwrap_or("1") != "0";
            if let Some((_, clean)) = current.as_mut() {
                *clean &= !anonymous;
            }
        }
    }
    finish(current);
    found
}

/// Resident KiB of this process's mappings of `path` (from `/proc/self/smaps`; 0 when not mapped).
pub fn resident_kib(path: &Path) -> std::io::Result<u64> {
    let Ok(path) = path.canonicalize() else {
        return Ok(0);
    };
    let path = path.to_string_lossy();
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut in_file = false;
    let mut total = 0;
    for line in smaps.lines() {
        let first = line.split_ascii_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            in_file = line.ends_with(path.as_ref());
        } else if in_file && first == "Rss:" {
            total += line
                .split_ascii_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_files_mappings_are_found() {
        let maps = "\
55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1311 /usr/bin/pincer
7f0000000000-7f0002000000 r--s 00000000 08:01 4242 /data/store/data.mdb
7f0002000000-7f0002001000 rw-s 00000000 08:01 4243 /data/store/lock.mdb
7f0003000000-7f0003400000 r--s 00000000 08:02 4242 /other/disk/same-inode
7f0004000000-7f0004100000 rw-p 00000000 00:00 0 
";
        assert_eq!(
            mappings_of(maps, "08:01", 4242),
            vec![Mapping {
                start: 0x7f00_0000_0000,
                len: 0x200_0000,
                private_writable: false,
            }]
        );
        assert!(mappings_of(maps, "08:01", 9).is_empty());
        let data = "7f0005000000-7f0005001000 rw-p 00001000 08:01 77 /usr/lib/libx.so\n";
        assert!(mappings_of(data, "08:01", 77)[0].private_writable);
    }

    #[test]
    fn only_read_only_mappings_without_copy_on_write_pages_are_clean() {
        let smaps = "\
55d0c0a00000-55d0c0a21000 r--p 00000000 08:01 1311 /usr/bin/pincer
Rss:                 132 kB
Anonymous:             0 kB
55d0c0a21000-55d0c0b00000 r-xp 00021000 08:01 1311 /usr/bin/pincer
Rss:                 800 kB
Anonymous:             0 kB
55d0c0b00000-55d0c0b10000 r--p 00100000 08:01 1311 /usr/bin/pincer
Rss:                  64 kB
Anonymous:            64 kB
55d0c0b10000-55d0c0b11000 rw-p 00110000 08:01 1311 /usr/bin/pincer
Rss:                   4 kB
Anonymous:             0 kB
7f0000000000-7f0000100000 r-xp 00000000 08:01 77 /usr/lib/libc.so.6
Anonymous:             0 kB
";
        let starts: Vec<usize> = clean_mappings_of(smaps, "08:01", 1311)
            .into_iter()
            .map(|m| m.start)
            .collect();
        assert_eq!(
            starts,
            vec![0x55d0_c0a0_0000, 0x55d0_c0a2_1000],
            "not the relocated RELRO pages, not the writable data, not another file"
        );
    }

    #[test]
    fn this_binarys_code_pages_are_released_and_run_again() {
        let exe = std::env::current_exe().expect("exe");
        let before = resident_kib(&exe).expect("smaps");
        assert!(release_clean_pages(&exe).expect("advise") > 0);
        let after = resident_kib(&exe).expect("smaps");
        assert!(after < before, "resident {before} KiB -> {after} KiB");
        // Code and constants come back as they run.
        assert_eq!(format!("{:?}", Advice::Unmap), "Unmap");
    }

    #[test]
    fn an_unmapped_file_is_advised_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("plain");
        std::fs::write(&path, b"not mapped").expect("write");
        assert_eq!(advise(&path, Advice::Reclaim).expect("advise"), 0);
        assert_eq!(resident_kib(&path).expect("smaps"), 0);
        assert!(advise(&dir.path().join("missing"), Advice::Unmap).is_err());
    }
}
