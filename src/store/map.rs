//! Sizing of the LMDB memory map: how far each kind of write may grow it, growing it on `MDB_MAP_FULL`,
//! shrinking it back after a deletion used the reserve, and adopting a size another process committed.
//!
//! Writes that add data grow the map (doubling) up to the write ceiling, which is `max_disk_bytes` less a
//! deletion reserve; past it they fail with `StoreError::Full`. Writes that remove data may grow into the
//! reserve: under copy-on-write LMDB needs fresh pages even to delete, and a map filled to its end may have
//! none free. Afterwards the map shrinks back as far as LMDB allows (never below the highest page in use).
//! LMDB reuses the pages a transaction frees only two commits later, so right after a large deletion at the
//! ceiling one more small commit is needed before the freed room is usable (maintenance makes it).
//!
//! Every resize holds the environment's resize gate exclusively, so no transaction of this process is open
//! (LMDB's precondition). This file must not begin transactions; `env.rs` does.

use super::env::{lmdb_error, LmdbEnv};
use super::StoreError;

/// How far a write may grow the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Room {
    /// Writes that add data: up to the write ceiling (the hard cap less the deletion reserve).
    Ordinary,
    /// Writes that remove data: up to the hard cap, because under copy-on-write LMDB needs fresh pages even to
    /// delete, and a map filled by ordinary writes may have none left. The map shrinks back afterwards.
    Reserve,
}

/// The deletion reserve: 1/64 of the hard cap, at least this much.
const MIN_DELETION_RESERVE_BYTES: usize = 128 * 1024;

/// Map size limits, in bytes, all whole pages.
#[derive(Clone, Copy, Debug)]
pub(super) struct MapLimits {
    /// Ceiling for `Room::Ordinary` writes.
    pub write_ceiling: usize,
    /// Ceiling for `Room::Reserve` writes: `max_disk_bytes` rounded down to pages.
    pub hard_cap: usize,
    /// `max_disk_bytes` as configured, for `StoreError::Full`.
    pub limit_bytes: u64,
}

impl MapLimits {
    pub(super) fn new(max_disk_bytes: u64, page: usize) -> MapLimits {
        let hard_cap = round_down(to_usize(max_disk_bytes), page);
        let reserve = round_up((hard_cap / 64).max(MIN_DELETION_RESERVE_BYTES), page)
            .min(round_down(hard_cap / 2, page));
        MapLimits {
            write_ceiling: hard_cap - reserve,
            hard_cap,
            limit_bytes: max_disk_bytes,
        }
    }

    pub(super) fn ceiling(&self, room: Room) -> usize {
        match room {
            Room::Ordinary => self.write_ceiling,
            Room::Reserve => self.hard_cap,
        }
    }
}

impl LmdbEnv {
    /// Doubles the map (up to `room`'s ceiling) unless another thread already grew it past `observed_map`.
    pub(super) fn grow(&self, observed_map: usize, room: Room) -> Result<(), StoreError> {
        let _gate = self.resize_gate.write();
        let current = self.env.info().map_size;
        if current > observed_map {
            return Ok(());
        }
        let ceiling = self.limits.ceiling(room);
        if current >= ceiling {
            return Err(StoreError::Full {
                limit_bytes: self.limits.limit_bytes,
            });
        }
        let target = current.saturating_mul(2).min(ceiling);
        // SAFETY: the exclusive gate guarantees no transaction of this process is open.
        unsafe { self.env.resize(target) }.map_err(|e| lmdb_error("grow map", e))?;
        log::info!(
            "store: map grown from {current} to {target} bytes ({room:?} writes, limit {})",
            self.limits.limit_bytes
        );
        Ok(())
    }

    /// After a `Room::Reserve` write, shrinks the map back towards the write ceiling so that ordinary writes
    /// cannot use the reserve. LMDB never shrinks below the pages in use, so this is best effort.
    pub(super) fn leave_reserve(&self) {
        if self.env.info().map_size <= self.limits.write_ceiling {
            return;
        }
        let _gate = self.resize_gate.write();
        // SAFETY: the exclusive gate guarantees no transaction of this process is open. LMDB raises a size
        // below the highest page in use to that page.
        if let Err(error) = unsafe { self.env.resize(self.limits.write_ceiling) } {
            log::warn!(
                "store: could not shrink the map back to {} bytes: {error}",
                self.limits.write_ceiling
            );
        }
    }

    /// Adopts the larger map another process committed (`MDB_MAP_RESIZED`).
    pub(super) fn adopt_foreign_resize(&self, operation: &'static str) -> Result<(), StoreError> {
        let _gate = self.resize_gate.write();
        // SAFETY: the exclusive gate guarantees no transaction of this process is open; size 0 means "take
        // the size recorded in the environment".
        unsafe { self.env.resize(0) }.map_err(|e| lmdb_error(operation, e))
    }
}

pub(super) fn os_page_size() -> usize {
    // SAFETY: sysconf has no preconditions; it returns -1 only for unknown names.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|size| *size > 0)
        .unwrap_or(4096)
}

pub(super) fn to_usize(bytes: u64) -> usize {
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

pub(super) fn round_down(bytes: usize, page: usize) -> usize {
    (bytes / page).max(1) * page
}

pub(super) fn round_up(bytes: usize, page: usize) -> usize {
    bytes.div_ceil(page).saturating_mul(page)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Store, StoreError, StoreOptions, TranscriptEntry, MIN_MAP_BYTES};

    const KIB: u64 = 1024;

    fn small_store(initial_map_bytes: u64, max_disk_bytes: u64) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = StoreOptions {
            lock_dir: None,
            max_disk_bytes,
            initial_map_bytes,
        };
        let store = Store::open(dir.path(), options).expect("open");
        (dir, store)
    }

    #[test]
    fn small_map_doubles_when_a_write_passes_it() {
        let (_dir, store) = small_store(MIN_MAP_BYTES, 64 * 1024 * KIB);
        assert_eq!(store.stats().expect("stats").map_size, MIN_MAP_BYTES);
        let value = vec![0xabu8; 32 * KIB as usize];
        for i in 0..40 {
            store
                .put_meta(&format!("blob-{i}"), &value)
                .expect("write grows the map");
        }
        let map_size = store.stats().expect("stats").map_size;
        assert!(map_size >= 40 * 32 * KIB, "map is {map_size} bytes");
        assert!(
            (map_size / MIN_MAP_BYTES).is_power_of_two(),
            "map {map_size} is not initial × 2^n"
        );
        for i in 0..40 {
            assert_eq!(
                store.meta(&format!("blob-{i}")).expect("read"),
                Some(value.clone())
            );
        }
    }

    fn big_message(i: usize) -> TranscriptEntry {
        TranscriptEntry {
            role: "user".into(),
            text: format!("{i:04}").repeat(4 * KIB as usize),
            ..Default::default()
        }
    }

    #[test]
    fn deletion_reserve_is_a_sixty_fourth_of_the_cap_with_a_floor() {
        let gib = MapLimits::new(1 << 30, 4096);
        assert_eq!(
            (gib.hard_cap, gib.write_ceiling),
            (1 << 30, (1 << 30) - (1 << 24))
        );
        let small = MapLimits::new(512 * KIB, 4096);
        assert_eq!(
            (small.hard_cap, small.write_ceiling),
            (512 * 1024, 384 * 1024)
        );
        let tiny = MapLimits::new(256 * KIB + 100, 4096);
        assert_eq!(
            (tiny.hard_cap, tiny.write_ceiling),
            (256 * 1024, 128 * 1024)
        );
        // An odd number of pages still yields whole-page sizes.
        let odd = MapLimits::new(260 * KIB, 4096);
        assert_eq!((odd.hard_cap, odd.write_ceiling), (260 * 1024, 132 * 1024));
        assert_eq!(odd.write_ceiling % 4096, 0);
    }

    #[test]
    fn writes_past_the_ceiling_fail_with_full_and_keep_earlier_data() {
        let dir = tempfile::tempdir().expect("temp dir");
        let limit = 512 * KIB;
        let options = StoreOptions {
            lock_dir: None,
            max_disk_bytes: limit,
            initial_map_bytes: MIN_MAP_BYTES,
        };
        let store = Store::open(dir.path(), options.clone()).expect("open");
        let mut written = 0;
        let error = loop {
            match store.append_transcript("big", &big_message(written)) {
                Ok(_) => written += 1,
                Err(error) => break error,
            }
            assert!(written < 64, "512 KiB cannot hold 64 × 16 KiB");
        };
        assert!(
            matches!(error, StoreError::Full { limit_bytes } if limit_bytes == limit),
            "{error:?}"
        );
        assert!(error.to_string().contains("524288"), "{error}");
        assert!(written >= 8, "only {written} entries fitted");
        let stats = store.stats().expect("stats");
        assert_eq!(stats.map_size, stats.write_ceiling);
        let tail = store
            .transcript_tail("big", 100)
            .expect("read at the ceiling");
        assert_eq!(tail.len(), written);
        assert!(tail
            .iter()
            .enumerate()
            .all(|(i, (seq, entry))| *seq == i as u64 + 1 && *entry == big_message(i)));
        drop(store);

        // Reopened with the same cap: the data is intact, deleting works (inside the reserve) and, after one
        // more commit, the freed room takes new writes.
        let store = Store::open(dir.path(), options).expect("reopen after full");
        assert_eq!(
            store
                .transcript_tail("big", 100)
                .expect("read after reopen"),
            tail
        );
        assert_eq!(
            store
                .delete_transcript("big")
                .expect("delete at the ceiling"),
            written as u64
        );
        store
            .put_meta("tick", b"1")
            .expect("small write after delete");
        // Fragmentation and the free list cost a little, so at least half the room comes back.
        for i in 0..written / 2 {
            store
                .append_transcript("big", &big_message(i))
                .expect("write into freed space");
        }
        let stats = store.stats().expect("stats");
        assert!(
            stats.file_bytes <= limit,
            "data file {} bytes passed the cap",
            stats.file_bytes
        );
    }

    #[test]
    fn concurrent_readers_and_writers_survive_map_growth() {
        let (_dir, store) = small_store(MIN_MAP_BYTES, 64 * 1024 * KIB);
        let value = vec![1u8; 4 * KIB as usize];
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let store = store.clone();
                let value = value.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        let key = format!("t{t}-{i}");
                        store.put_meta(&key, &value).expect("write during growth");
                        assert_eq!(
                            store.meta(&key).expect("read during growth"),
                            Some(value.clone())
                        );
                        store.stats().expect("stats during growth");
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread finished");
        }
        let stats = store.stats().expect("stats");
        assert_eq!(stats.entries.get("meta"), Some(&401));
        assert!(stats.map_size > MIN_MAP_BYTES);
        // Hundreds of read transactions reused a handful of reader slots: none leaked.
        assert!(
            stats.reader_slots_used <= 5,
            "{} reader slots used",
            stats.reader_slots_used
        );
    }

    #[test]
    fn map_sizes_round_to_whole_pages() {
        assert_eq!(round_down(10_000, 4096), 8192);
        assert_eq!(round_down(100, 4096), 4096);
        assert_eq!(round_up(10_000, 4096), 12_288);
        assert_eq!(round_up(8192, 4096), 8192);
        assert_eq!(to_usize(u64::MAX), usize::MAX);
    }
}
