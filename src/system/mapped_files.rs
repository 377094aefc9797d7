//! Giving back the resident pages of a file this process has mapped: the store's LMDB map after bulk writes,
//! ONNX Runtime's code after the model is loaded.
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
    fn an_unmapped_file_is_advised_nothing() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("plain");
        std::fs::write(&path, b"not mapped").expect("write");
        assert_eq!(advise(&path, Advice::Reclaim).expect("advise"), 0);
        assert_eq!(resident_kib(&path).expect("smaps"), 0);
        assert!(advise(&dir.path().join("missing"), Advice::Unmap).is_err());
    }
}
