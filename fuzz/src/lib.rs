//! What every fuzz target shares: a counting allocator (each input's peak heap use is held against a stated
//! budget, so a parser that allocates far beyond its input is a finding like a panic), and helpers to split one
//! fuzz input into several parts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting bytes in use and their peak.
pub struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = IN_USE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(by: usize) {
    IN_USE.fetch_sub(by, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and panics (a finding) when its peak heap use above what was in use before exceeds `budget` bytes.
/// `what` names the code under test and its stated limit in the message.
pub fn within_budget<R>(what: &str, budget: usize, f: impl FnOnce() -> R) -> R {
    let base = IN_USE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    assert!(
        peak <= budget,
        "{what}: peak heap {peak} bytes is over its budget of {budget} bytes"
    );
    out
}

/// The budget most parsers are held to: a fixed allowance plus a factor of the input's size (a parsed JSON
/// value takes several times the bytes of its text; anything quadratic blows through this at once).
pub fn linear_budget(input_len: usize, factor: usize, fixed: usize) -> usize {
    fixed + factor * input_len
}

/// Splits `data` into the parts between 0xFF bytes (at most `max` parts; the last takes the rest).
pub fn split_parts(data: &[u8], max: usize) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut rest = data;
    while parts.len() + 1 < max {
        match rest.iter().position(|&b| b == 0xFF) {
            Some(at) => {
                parts.push(&rest[..at]);
                rest = &rest[at + 1..];
            }
            None => break,
        }
    }
    parts.push(rest);
    parts
}

/// Cuts `data` into chunks whose lengths are drawn from `lengths` (cycled; 0 counts as 1): how bytes arrive
/// from a socket in arbitrary pieces.
pub fn chunks<'a>(data: &'a [u8], lengths: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut i = 0;
    while !rest.is_empty() {
        let want = lengths
            .get(i % lengths.len().max(1))
            .map_or(rest.len(), |&n| usize::from(n).max(1));
        let take = want.min(rest.len());
        out.push(&rest[..take]);
        rest = &rest[take..];
        i += 1;
    }
    out
}

/// A single-threaded Tokio runtime for targets whose code under test is async (built once per process).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime")
    })
}
