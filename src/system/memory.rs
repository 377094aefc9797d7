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
