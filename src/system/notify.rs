//! systemd's readiness protocol (`sd_notify`): `READY=1`, `STATUS=…`,
//! `STOPPING=1`, `RELOADING=1` and watchdog pings (`watchdog.rs` decides when), sent to
//! `$NOTIFY_SOCKET` when set. Outside systemd every call is a no-op.

use std::os::unix::net::UnixDatagram;

/// Sends one notification; returns whether a socket took it.
pub fn notify(state: &str) -> bool {
    NotifySocket::from_env().is_some_and(|socket| socket.send(state))
}

/// Where notifications go: `$NOTIFY_SOCKET`, a path or (leading `@`) an abstract name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifySocket(std::ffi::OsString);

impl NotifySocket {
    /// The socket systemd handed this process, if any.
    pub fn from_env() -> Option<NotifySocket> {
        std::env::var_os("NOTIFY_SOCKET")
            .filter(|path| !path.is_empty())
            .map(NotifySocket)
    }

    /// A socket at a given path (tests bind their own).
    pub fn at(path: impl Into<std::ffi::OsString>) -> NotifySocket {
        NotifySocket(path.into())
    }

    /// Sends one datagram; returns whether the socket took it.
    pub fn send(&self, state: &str) -> bool {
        let Ok(socket) = UnixDatagram::unbound() else {
            return false;
        };
        let bytes = self.0.as_encoded_bytes();
        if let Some(abstract_name) = bytes.strip_prefix(b"@") {
            use std::os::linux::net::SocketAddrExt;
            return std::os::unix::net::SocketAddr::from_abstract_name(abstract_name)
                .and_then(|addr| socket.send_to_addr(state.as_bytes(), &addr))
                .is_ok();
        }
        socket.send_to(state.as_bytes(), &self.0).is_ok()
    }
}

/// Tells systemd a restart in place begins (`READY=1` from the new image
/// ends it); `MONOTONIC_USEC` is the time it began, as the protocol asks.
pub fn reloading() -> bool {
    notify(&reloading_message(monotonic_usec()))
}

fn reloading_message(monotonic_usec: u64) -> String {
    format!("RELOADING=1\nSTATUS=restarting in place\nMONOTONIC_USEC={monotonic_usec}")
}

/// CLOCK_MONOTONIC in microseconds.
fn monotonic_usec() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `now`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_reaches_the_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).expect("bind");
        std::env::set_var("NOTIFY_SOCKET", &path);
        assert!(notify("READY=1"));
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1");
    }

    #[test]
    fn reloading_carries_the_monotonic_time() {
        let before = monotonic_usec();
        assert!(before > 0);
        assert_eq!(
            reloading_message(42),
            "RELOADING=1\nSTATUS=restarting in place\nMONOTONIC_USEC=42"
        );
        assert!(monotonic_usec() >= before);
    }
}
