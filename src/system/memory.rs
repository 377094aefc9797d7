//! Allocator tuning for small boards.
//!
//! glibc gives each thread that allocates its own malloc arena (up to 8 ×
//! cores); every arena keeps freed memory around. Two arenas serve the
//! gateway's few threads without that spread, so freed memory returns to the
//! shared pool and idle RSS stays low.
//!
//! Fast bins are off (`M_MXFAST` 0). Small frees beyond the per-thread
//! cache then coalesce at once instead of waiting in a fast bin, and glibc
//! no longer consolidates the fast bins before every allocation of 1 KiB or
//! more, which a turn makes hundreds of (frames, prompts, task futures): that
//! consolidation was about 4 % of the gateway's CPU per turn.
//!
//! [`release_code_pages`] hands pincer's own resident code pages back once they are done with (after
//! start-up, after memory work): the kernel maps a cached binary's code in 64 KiB runs around each page
//! touched, so a started gateway has most of its code resident though idle it runs little of it.

/// Arenas glibc may create.
pub const MALLOC_ARENAS: i32 = 2;

/// `M_MXFAST` value that turns fast bins off.
pub const NO_FAST_BINS: i32 = 0;

/// Applies the allocator settings (no-op where the C library has no such knob).
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only adjusts allocator parameters; called before other threads start.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
        libc::mallopt(libc::M_MXFAST, NO_FAST_BINS);
    }
}

/// Unmaps the pages of pincer's own code and constants this process has resident (they stay in the page
/// cache): once start-up is over, or memory work is done, most of the code that ran is not needed again,
/// and what is maps back with a minor fault. Returns the bytes of mapping advised.
pub fn release_code_pages() -> usize {
    match super::mapped_files::release_clean_pages(std::path::Path::new("/proc/self/exe")) {
        Ok(bytes) => bytes,
        Err(error) => {
            log::debug!("could not release the binary's resident pages: {error}");
            0
        }
    }
}
