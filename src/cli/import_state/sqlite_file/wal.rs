//! The write-ahead log beside a database in WAL mode (`<db>-wal`): which committed frame holds the newest
//! copy of each page. A frame counts when its salts match the log header and the running checksum over
//! the frames so far is right; frames after the last commit frame belong to a transaction that never
//! committed and are ignored, as SQLite itself does when it opens the log (sqlite.org/fileformat2.html,
//! "The Write-Ahead Log").
//!
//! This file only indexes the log; `mod.rs` reads the pages it names.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;

const WAL_HEADER_BYTES: usize = 32;
const FRAME_HEADER_BYTES: usize = 24;
/// Log magic numbers: checksums over little-endian or big-endian 32-bit words.
const MAGIC_LITTLE: u32 = 0x377f_0682;
const MAGIC_BIG: u32 = 0x377f_0683;

/// The committed frames of a log.
#[derive(Debug, Default)]
pub struct WalIndex {
    /// Page number → offset of the newest committed copy's bytes in the log.
    pub pages: HashMap<u32, u64>,
    /// Pages in the database after the last committed transaction.
    pub page_count: Option<u32>,
}

fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// SQLite's WAL checksum over `data` (a multiple of 8 bytes), continued from `sums`.
fn checksum(data: &[u8], big_endian: bool, sums: (u32, u32)) -> (u32, u32) {
    let (mut s0, mut s1) = sums;
    for pair in data.chunks_exact(8) {
        let word = |at: usize| {
            let raw = [pair[at], pair[at + 1], pair[at + 2], pair[at + 3]];
            if big_endian {
                u32::from_be_bytes(raw)
            } else {
                u32::from_le_bytes(raw)
            }
        };
        s0 = s0.wrapping_add(word(0)).wrapping_add(s1);
        s1 = s1.wrapping_add(word(4)).wrapping_add(s0);
    }
    (s0, s1)
}

/// Indexes the log at `path` for a database of `page_size` bytes per page. A missing or empty log, or
/// one whose header does not check out, has no frames.
pub fn read(path: &Path, page_size: usize) -> std::io::Result<WalIndex> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(WalIndex::default()),
        Err(e) => return Err(e),
    };
    let mut header = [0u8; WAL_HEADER_BYTES];
    if file.read_exact(&mut header).is_err() {
        return Ok(WalIndex::default());
    }
    let big_endian = match be32(&header, 0) {
        MAGIC_LITTLE => false,
        MAGIC_BIG => true,
        _ => return Ok(WalIndex::default()),
    };
    let sums = checksum(&header[..24], big_endian, (0, 0));
    if be32(&header, 8) as usize != page_size || sums != (be32(&header, 24), be32(&header, 28)) {
        return Ok(WalIndex::default());
    }
    let salts = (be32(&header, 16), be32(&header, 20));
    scan_frames(&mut file, page_size, big_endian, salts, sums)
}

/// Reads frames until one does not check out; keeps those up to the last commit frame.
fn scan_frames(
    file: &mut File,
    page_size: usize,
    big_endian: bool,
    salts: (u32, u32),
    mut sums: (u32, u32),
) -> std::io::Result<WalIndex> {
    let mut index = WalIndex::default();
    let mut uncommitted: Vec<(u32, u64)> = Vec::new();
    let mut frame = vec![0u8; FRAME_HEADER_BYTES + page_size];
    let mut offset = WAL_HEADER_BYTES as u64;
    loop {
        if read_full(file, &mut frame)? < frame.len() {
            break;
        }
        if (be32(&frame, 8), be32(&frame, 12)) != salts {
            break;
        }
        sums = checksum(&frame[..8], big_endian, sums);
        sums = checksum(&frame[FRAME_HEADER_BYTES..], big_endian, sums);
        if sums != (be32(&frame, 16), be32(&frame, 20)) {
            break;
        }
        uncommitted.push((be32(&frame, 0), offset + FRAME_HEADER_BYTES as u64));
        let commit_size = be32(&frame, 4);
        if commit_size > 0 {
            index.pages.extend(uncommitted.drain(..));
            index.page_count = Some(commit_size);
        }
        offset += frame.len() as u64;
    }
    Ok(index)
}

/// Reads until `buffer` is full or the file ends; returns the bytes read.
fn read_full(file: &mut File, buffer: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_runs_over_word_pairs() {
        let data = [1u8, 0, 0, 0, 2, 0, 0, 0];
        assert_eq!(checksum(&data, false, (0, 0)), (1, 3));
        assert_eq!(
            checksum(&data, true, (0, 0)),
            (1 << 24, (2 << 24) + (1 << 24))
        );
    }

    #[test]
    fn a_missing_or_foreign_log_has_no_frames() {
        let dir = tempfile::tempdir().expect("dir");
        let missing = read(&dir.path().join("none-wal"), 4096).expect("read");
        assert!(missing.pages.is_empty() && missing.page_count.is_none());
        let path = dir.path().join("junk-wal");
        std::fs::write(&path, [0u8; 64]).expect("write");
        assert!(read(&path, 4096).expect("read").pages.is_empty());
    }
}
