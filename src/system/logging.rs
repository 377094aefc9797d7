//! Logging through the `log` facade: to journald when running under systemd,
//! to stderr otherwise, and always into a bounded in-memory ring that the
//! `logs.tail` method reads with a byte cursor.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::OnceLock;

use log::{LevelFilter, Log, Metadata, Record};
use parking_lot::Mutex;

/// How many bytes of recent log lines the ring keeps.
pub const LOG_RING_BYTES: usize = 256 * 1024;

/// Recent log lines addressed by a cursor: the byte offset in the stream of
/// everything ever logged since start.
#[derive(Debug, Default)]
pub struct LogRing {
    lines: VecDeque<String>,
    bytes: usize,
    /// Cursor value of the first line kept.
    start: u64,
}

/// One `logs.tail` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub lines: Vec<String>,
    pub cursor: u64,
    pub size: u64,
    pub truncated: bool,
    pub reset: bool,
}

impl LogRing {
    pub fn push(&mut self, line: String) {
        self.bytes += line.len() + 1;
        self.lines.push_back(line);
        while self.bytes > LOG_RING_BYTES {
            match self.lines.pop_front() {
                Some(old) => {
                    self.bytes -= old.len() + 1;
                    self.start += old.len() as u64 + 1;
                }
                None => break,
            }
        }
    }

    /// The end of the stream.
    pub fn size(&self) -> u64 {
        self.start + self.bytes as u64
    }

    /// Lines after `cursor` (or the last `limit` lines when `cursor` is
    /// `None`), at most `limit` lines and `max_bytes` bytes.
    pub fn tail(&self, cursor: Option<u64>, limit: usize, max_bytes: usize) -> Tail {
        let size = self.size();
        let reset = cursor.is_some_and(|c| c < self.start || c > size);
        let mut offsets = Vec::with_capacity(self.lines.len());
        let mut at = self.start;
        for line in &self.lines {
            offsets.push(at);
            at += line.len() as u64 + 1;
        }
        let first = match cursor {
            Some(c) if !reset => offsets
                .iter()
                .position(|&o| o >= c)
                .unwrap_or(offsets.len()),
            _ => self.lines.len().saturating_sub(limit),
        };
        let mut lines = Vec::new();
        let mut bytes = 0;
        let mut next = cursor
            .filter(|_| !reset)
            .unwrap_or(offsets.get(first).copied().unwrap_or(size));
        let mut truncated = false;
        for (i, line) in self.lines.iter().enumerate().skip(first) {
            if lines.len() >= limit || bytes + line.len() > max_bytes {
                truncated = true;
                break;
            }
            bytes += line.len() + 1;
            lines.push(line.clone());
            next = offsets[i] + line.len() as u64 + 1;
        }
        Tail {
            lines,
            cursor: next,
            size,
            truncated,
            reset,
        }
    }
}

static RING: OnceLock<Mutex<LogRing>> = OnceLock::new();

/// The process-wide ring.
pub fn ring() -> &'static Mutex<LogRing> {
    RING.get_or_init(|| Mutex::new(LogRing::default()))
}

/// Filters by `log::max_level()`, so [`set_level`] changes it later.
struct PincerLogger {
    journal: Option<systemd_journal_logger::JournalLog>,
}

impl Log for PincerLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = format!(
            "{} {} {}: {}",
            super::clock::now_ms(),
            record.level(),
            record.target(),
            record.args()
        );
        match &self.journal {
            Some(journal) => journal.log(record),
            None => {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
        }
        ring().lock().push(line);
    }

    fn flush(&self) {
        if let Some(journal) = &self.journal {
            journal.flush();
        }
    }
}

/// Installs the logger once. `level` is a `log` level name ("info", "debug").
pub fn init(level: &str) {
    let level = level.parse::<LevelFilter>().unwrap_or(LevelFilter::Info);
    let under_systemd = std::env::var_os("JOURNAL_STREAM").is_some();
    let journal = under_systemd
        .then(|| systemd_journal_logger::JournalLog::new().ok())
        .flatten();
    let logger = PincerLogger { journal };
    if log::set_boxed_logger(Box::new(logger)).is_ok() {
        log::set_max_level(level);
    }
}

/// Changes the level after start-up (the config's `logging.level`).
pub fn set_level(level: LevelFilter) {
    log::set_max_level(level);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_bounded_and_cursor_follows() {
        let mut ring = LogRing::default();
        for i in 0..10_000 {
            ring.push(format!("line {i:05} {}", "x".repeat(50)));
        }
        assert!(ring.bytes <= LOG_RING_BYTES);
        let last = ring.tail(None, 2, 1 << 20);
        assert_eq!(last.lines.len(), 2);
        assert!(last.lines[1].starts_with("line 09999"));
        assert_eq!(last.cursor, ring.size());
        ring.push("fresh".into());
        let next = ring.tail(Some(last.cursor), 100, 1 << 20);
        assert_eq!(next.lines, vec!["fresh".to_string()]);
        assert!(!next.reset);
        let stale = ring.tail(Some(0), 1, 1 << 20);
        assert!(stale.reset, "cursor before the ring start resets");
    }
}
