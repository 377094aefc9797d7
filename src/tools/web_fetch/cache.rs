//! The answers `web_fetch` reuses (`tools.web.fetch.cacheTtlMinutes`): one entry per URL, character
//! limit and User-Agent, kept for the TTL in force when it is read (an entry older than that is
//! dropped), bounded by entries (upstream's 100) and by bytes, the oldest going first. A TTL of zero
//! neither reads nor writes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::tools::ToolOutput;

/// Answers kept at most (upstream's cache size).
pub const MAX_CACHED_ENTRIES: usize = 100;
/// Bytes of answer text kept at most, whatever the entry count.
pub const MAX_CACHED_BYTES: usize = 4 * 1024 * 1024;

struct Entry {
    key: String,
    stored_at: Instant,
    output: ToolOutput,
    bytes: usize,
}

/// The cache; oldest entry first.
#[derive(Default)]
pub struct FetchCache {
    entries: Mutex<VecDeque<Entry>>,
}

/// The cache key of a fetch.
pub fn key(url: &str, max_chars: usize, user_agent: &str) -> String {
    format!("{url}\n{max_chars}\n{user_agent}")
}

impl FetchCache {
    /// The answer stored under `key` less than `ttl` ago.
    pub fn get(&self, key: &str, ttl: Duration) -> Option<ToolOutput> {
        if ttl.is_zero() {
            return None;
        }
        let mut entries = self.entries.lock();
        let at = entries.iter().position(|e| e.key == key)?;
        if entries[at].stored_at.elapsed() >= ttl {
            entries.remove(at);
            return None;
        }
        Some(entries[at].output.clone())
    }

    /// Keeps `output` under `key` (replacing an older answer), then drops the oldest entries past
    /// the bounds. An answer larger than the byte bound is not kept.
    pub fn put(&self, key: String, ttl: Duration, output: &ToolOutput) {
        if ttl.is_zero() {
            return;
        }
        let bytes = key.len() + output.text.len();
        if bytes > MAX_CACHED_BYTES {
            return;
        }
        let mut entries = self.entries.lock();
        entries.retain(|e| e.key != key);
        entries.push_back(Entry {
            key,
            stored_at: Instant::now(),
            output: output.clone(),
            bytes,
        });
        let mut total: usize = entries.iter().map(|e| e.bytes).sum();
        while entries.len() > MAX_CACHED_ENTRIES || total > MAX_CACHED_BYTES {
            match entries.pop_front() {
                Some(oldest) => total -= oldest.bytes,
                None => break,
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(text: &str) -> ToolOutput {
        ToolOutput {
            text: text.to_owned(),
            details: None,
        }
    }

    #[test]
    fn entries_and_bytes_are_bounded_and_the_oldest_go_first() {
        let cache = FetchCache::default();
        let ttl = Duration::from_secs(60);
        for i in 0..MAX_CACHED_ENTRIES + 5 {
            cache.put(key(&format!("https://x/{i}"), 100, "ua"), ttl, &page("p"));
        }
        assert_eq!(cache.len(), MAX_CACHED_ENTRIES);
        assert!(cache.get(&key("https://x/0", 100, "ua"), ttl).is_none());
        assert!(cache.get(&key("https://x/104", 100, "ua"), ttl).is_some());
        let big = "b".repeat(MAX_CACHED_BYTES / 3);
        for i in 0..4 {
            cache.put(
                key(&format!("https://big/{i}"), 100, "ua"),
                ttl,
                &page(&big),
            );
        }
        let kept: usize = cache.entries.lock().iter().map(|e| e.bytes).sum();
        assert!(kept <= MAX_CACHED_BYTES, "{kept}");
        assert!(cache.get(&key("https://big/3", 100, "ua"), ttl).is_some());
        cache.put(
            key("https://huge", 100, "ua"),
            ttl,
            &page(&"h".repeat(MAX_CACHED_BYTES + 1)),
        );
        assert!(cache.get(&key("https://huge", 100, "ua"), ttl).is_none());
    }

    #[test]
    fn a_zero_ttl_keeps_nothing_and_an_expired_entry_is_dropped() {
        let cache = FetchCache::default();
        cache.put(key("https://x", 100, "ua"), Duration::ZERO, &page("p"));
        assert!(cache.is_empty());
        cache.put(
            key("https://x", 100, "ua"),
            Duration::from_secs(60),
            &page("p"),
        );
        assert!(cache
            .get(&key("https://x", 100, "ua"), Duration::ZERO)
            .is_none());
        assert!(cache
            .get(&key("https://x", 100, "ua"), Duration::from_nanos(1))
            .is_none());
        assert!(cache.is_empty(), "read after its TTL, the entry goes");
    }
}
