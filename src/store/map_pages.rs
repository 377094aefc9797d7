//! Hands back the resident pages of the LMDB memory map after bulk writes.
//!
//! A write transaction reads the B-tree through the map, and the kernel maps each page a write touches into
//! this process together with its cached neighbours (fault-around). Writes spread over the whole file, such as
//! the memory index's keyword postings, so leave the whole file resident: at 10k memory chunks about 25 MiB of
//! the process's RSS was the map. The pages are clean (LMDB writes with `pwrite`, never through the map), so
//! dropping them from the process loses nothing: the kernel keeps them as reclaimable page cache and the next
//! read maps them again with a minor fault.
//!
//! The advice is given under the resize gate (`system::mapped_files` finds the map by the inode of `data.mdb`),
//! so LMDB cannot move the map meanwhile. This file must not begin transactions.

use std::path::Path;

use super::env::LmdbEnv;
use crate::system::mapped_files::{self, Advice};

/// Puts a write transaction may make between two releases. With fault-around each put that reads a new page
/// can map up to 64 KiB, so this bounds what one transaction leaves resident to a few MiB.
const RELEASE_EVERY_PUTS: usize = 64;

impl LmdbEnv {
    /// Drops this process's resident pages of the map; returns the bytes of mapping advised.
    pub(super) fn release_mapped_pages(&self) -> std::io::Result<usize> {
        // No resize may move the map between reading its address and advising it.
        let _gate = self.resize_gate.read();
        advise_unmap(self.path())
    }
}

/// LMDB maps data.mdb shared and never writes through it (no WRITEMAP), so unmapping its pages loses nothing,
/// even inside a write transaction: the pages the transaction changed are in its own buffers until commit.
/// The caller holds the resize gate.
fn advise_unmap(dir: &Path) -> std::io::Result<usize> {
    mapped_files::advise(&dir.join("data.mdb"), Advice::Unmap)
}

/// Releases the map's pages every `RELEASE_EVERY_PUTS` puts of a write transaction that spreads over the
/// file. Made inside the transaction body, where `try_write` holds the resize gate.
pub(super) struct PageRelease<'a> {
    dir: &'a Path,
    puts: usize,
}

impl<'a> PageRelease<'a> {
    pub(super) fn new(dir: &'a Path) -> Self {
        PageRelease { dir, puts: 0 }
    }

    /// Counts `puts` more puts (or deletes) and releases the pages when the budget is spent.
    pub(super) fn count(&mut self, puts: usize) {
        self.puts += puts;
        if self.puts >= RELEASE_EVERY_PUTS {
            self.puts = 0;
            if let Err(e) = advise_unmap(self.dir) {
                log::debug!("store: could not release the map's pages: {e}");
            }
        }
    }
}

/// Resident KiB of this process's mappings of `dir/data.mdb`, for tests.
#[cfg(test)]
pub(crate) fn resident_map_kib(dir: &Path) -> u64 {
    mapped_files::resident_kib(&dir.join("data.mdb")).expect("smaps")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    #[test]
    fn releasing_drops_the_maps_resident_pages_and_keeps_the_data() {
        let (dir, store) = temp_store();
        let value = vec![7_u8; 1024];
        let keys: Vec<String> = (0..4096).map(|i| format!("release-{i:05}")).collect();
        for batch in keys.chunks(512) {
            store
                .env
                .write("test fill", |txn, dbs| {
                    for key in batch {
                        dbs.meta.put(txn, key.as_bytes(), &value)?;
                    }
                    Ok(())
                })
                .expect("fill");
        }
        let read_all = || {
            store
                .env
                .read("test read", |txn, dbs| {
                    let mut sum = 0_u64;
                    for key in &keys {
                        let bytes = dbs.meta.get(txn, key.as_bytes())?.expect("stored");
                        sum += bytes.iter().map(|&b| u64::from(b)).sum::<u64>();
                    }
                    Ok(sum)
                })
                .expect("read")
        };
        assert_eq!(read_all(), 7 * 1024 * 4096);
        let before = resident_map_kib(dir.path());
        assert!(before >= 2048, "a full read maps the file: {before} KiB");
        let advised = store.release_mapped_pages().expect("release");
        assert!(advised > 0);
        let after = resident_map_kib(dir.path());
        assert!(after < before / 4, "resident {before} KiB -> {after} KiB");
        assert_eq!(read_all(), 7 * 1024 * 4096, "the data reads back unchanged");
    }

    #[test]
    fn a_write_transaction_releases_pages_as_it_goes_and_commits_intact() {
        let (dir, store) = temp_store();
        let value = vec![3_u8; 1024];
        store
            .env
            .write("test fill", |txn, dbs| {
                for i in 0..4096 {
                    dbs.meta.put(txn, format!("k{i:05}").as_bytes(), &value)?;
                }
                Ok(())
            })
            .expect("fill");
        let mut inside = (0, 0);
        store
            .env
            .write("test spread", |txn, dbs| {
                // Read across the file (maps it), then update a few keys through the budget.
                for i in 0..4096 {
                    dbs.meta.get(txn, format!("k{i:05}").as_bytes())?;
                }
                let before = resident_map_kib(dir.path());
                let mut pages = PageRelease::new(dir.path());
                for i in (0..4096).step_by(64) {
                    dbs.meta
                        .put(txn, format!("k{i:05}").as_bytes(), b"changed")?;
                    pages.count(1);
                }
                inside = (before, resident_map_kib(dir.path()));
                Ok(())
            })
            .expect("spread write");
        assert!(inside.0 >= 2048, "reads mapped the file: {} KiB", inside.0);
        assert!(
            inside.1 < inside.0 / 2,
            "resident {} -> {} KiB",
            inside.0,
            inside.1
        );
        let (changed, kept) = store
            .env
            .read("test check", |txn, dbs| {
                Ok((
                    dbs.meta.get(txn, b"k00064")?.map(<[u8]>::to_vec),
                    dbs.meta.get(txn, b"k00065")?.map(<[u8]>::len),
                ))
            })
            .expect("read");
        assert_eq!(changed.as_deref(), Some(&b"changed"[..]));
        assert_eq!(kept, Some(1024));
    }
}
