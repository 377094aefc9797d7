//! The host: logging to journald (or stderr) with an in-memory tail for
//! `logs.tail`, systemd readiness notification, the clock, the retry
//! backoff and the restart in place.

pub mod appliance;
pub mod backoff;
pub mod blocking;
pub mod board;
pub mod clock;
pub mod dbus;
pub mod firstboot_error;
pub mod lifecycle;
pub mod logging;
pub mod mapped_files;
pub mod memory;
pub mod notify;
pub mod rauc;
pub mod restart;
pub mod status;
pub mod watchdog;

/// This host's name (for presence, TLS names and discovery).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into our buffer.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "pincer".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}
