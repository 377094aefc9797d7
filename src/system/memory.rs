//! Allocator tuning for small boards.
//!
//! glibc gives each thread that allocates its own malloc arena (up to 8 ×
//! cores); every arena keeps freed memory around. Two arenas serve the
//! gateway's few threads without that spread, so freed memory returns to the
//! shared pool and idle RSS stays low.

/// Arenas glibc may create.
pub const MALLOC_ARENAS: i32 = 2;

/// Applies the allocator settings (no-op where the C library has no such knob).
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only adjusts allocator parameters; called before other threads start.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
    }
}
