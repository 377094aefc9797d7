//! Restart in place: the process replaces its own image with a fresh start
//! of the same binary (`/proc/self/exe`), with the same arguments and
//! environment and the same PID, so a service manager that tracks the PID
//! (systemd's `Type=notify`) sees a reload and not an exit.
//!
//! This file only execs; draining first is the gateway's job. Before the
//! exec every descriptor above stderr is marked close-on-exec, so the store's
//! files and the listening sockets of the old image never leak into the new
//! one (std and tokio already open theirs that way; C libraries may not).

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Set by the gateway on itself before it re-execs when it listened on a
/// port the kernel picked (`--port 0`): the new image listens on that same
/// port. Read and removed at start ([`take_restart_port`]), so no child
/// process ever sees it.
pub const RESTART_PORT_ENV: &str = "PINCER_RESTART_PORT";

/// The port the previous image listened on, when it re-exec'd us after
/// listening on a kernel-picked port. Call before any thread starts.
pub fn take_restart_port() -> Option<u16> {
    let value = std::env::var(RESTART_PORT_ENV).ok()?;
    std::env::remove_var(RESTART_PORT_ENV);
    value.parse().ok().filter(|port| *port != 0)
}

/// Replaces this process with a fresh start of its own binary, same
/// arguments and environment (plus [`RESTART_PORT_ENV`] when `keep_port`
/// is set). Returns only when the exec failed.
pub fn reexec(keep_port: Option<u16>) -> std::io::Error {
    if let Err(e) = mark_descriptors_cloexec() {
        return e;
    }
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("pincer"));
    let mut command = Command::new("/proc/self/exe");
    command.arg0(arg0).args(args).env_remove(RESTART_PORT_ENV);
    if let Some(port) = keep_port {
        command.env(RESTART_PORT_ENV, port.to_string());
    }
    command.exec()
}

/// Marks every open descriptor above stderr close-on-exec; returns how many
/// were not already.
pub fn mark_descriptors_cloexec() -> std::io::Result<usize> {
    let mut fds = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let name = entry?.file_name();
        if let Some(fd) = name.to_str().and_then(|n| n.parse::<i32>().ok()) {
            if fd > 2 {
                fds.push(fd);
            }
        }
    }
    let mut marked = 0;
    for fd in fds {
        // SAFETY: F_GETFD/F_SETFD only read and set the descriptor's flags; a
        // descriptor closed meanwhile (the directory's own) answers EBADF.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags < 0 || flags & libc::FD_CLOEXEC != 0 {
            continue;
        }
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } == 0 {
            marked += 1;
        }
    }
    Ok(marked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cloexec(fd: i32) -> bool {
        // SAFETY: reads the flags of a descriptor this test owns.
        unsafe { libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC != 0 }
    }

    #[test]
    fn an_inheritable_descriptor_is_marked_close_on_exec() {
        let file = tempfile::tempfile().expect("temp file");
        use std::os::fd::AsRawFd;
        // SAFETY: dup(2) of an open descriptor; the copy is closed below.
        let copy = unsafe { libc::dup(file.as_raw_fd()) };
        assert!(copy > 2);
        assert!(!cloexec(copy), "dup(2) gives an inheritable descriptor");
        assert!(mark_descriptors_cloexec().expect("scan /proc/self/fd") >= 1);
        assert!(cloexec(copy));
        // SAFETY: closes the copy made above.
        unsafe { libc::close(copy) };
    }

    #[test]
    fn restart_port_is_read_once_and_removed() {
        std::env::set_var(RESTART_PORT_ENV, "40123");
        assert_eq!(take_restart_port(), Some(40123));
        assert!(std::env::var_os(RESTART_PORT_ENV).is_none());
        assert_eq!(take_restart_port(), None);
    }
}
