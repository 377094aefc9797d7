//! systemd's service watchdog: whether systemd asked this process for pings
//! (`WATCHDOG_USEC`, `WATCHDOG_PID`, read as `sd_watchdog_enabled` documents), and the
//! pinger that sends `WATCHDOG=1` only while a liveness check passes. The pinger runs
//! as a task on the runtime it guards: when that runtime is wedged (every worker
//! blocked) or the check fails or hangs, the pings stop and systemd restarts the
//! service. What the check looks at is the caller's (the gateway's store and lanes);
//! this file knows only the protocol and the schedule.

use std::time::Duration;

use futures_util::future::BoxFuture;

use super::notify::NotifySocket;

/// The environment variable with the watchdog timeout in microseconds.
pub const WATCHDOG_USEC_ENV: &str = "WATCHDOG_USEC";
/// The environment variable naming the process the watchdog is meant for.
pub const WATCHDOG_PID_ENV: &str = "WATCHDOG_PID";

/// What systemd asked of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchdogRequest {
    /// No `WATCHDOG_USEC`: the unit has no `WatchdogSec=` (or this is not a service).
    NotRequested,
    /// `WATCHDOG_PID` names another process (an inherited environment): not ours to ping.
    OtherProcess { pid: u32 },
    /// Ping at least once per `timeout`.
    Enabled { timeout: Duration },
}

impl WatchdogRequest {
    /// How often to ping: half the timeout, as systemd recommends.
    pub fn ping_interval(&self) -> Option<Duration> {
        match self {
            WatchdogRequest::Enabled { timeout } => Some(*timeout / 2),
            _ => None,
        }
    }

    /// One line for `pincer doctor` and the log.
    pub fn describe(&self) -> String {
        match self {
            WatchdogRequest::NotRequested => format!("off ({WATCHDOG_USEC_ENV} is not set)"),
            WatchdogRequest::OtherProcess { pid } => format!(
                "off ({WATCHDOG_PID_ENV}={pid} is another process, this is {})",
                std::process::id()
            ),
            WatchdogRequest::Enabled { timeout } => format!(
                "timeout {} ms, pinging every {} ms while healthy",
                timeout.as_millis(),
                (*timeout / 2).as_millis()
            ),
        }
    }
}

/// Reads the request from this process's environment.
pub fn request_from_env() -> Result<WatchdogRequest, String> {
    let usec = std::env::var(WATCHDOG_USEC_ENV).ok();
    let pid = std::env::var(WATCHDOG_PID_ENV).ok();
    request_from(usec.as_deref(), pid.as_deref(), std::process::id())
}

/// Reads the request from the two variables' values, for the process `own_pid`.
pub fn request_from(
    usec: Option<&str>,
    pid: Option<&str>,
    own_pid: u32,
) -> Result<WatchdogRequest, String> {
    let Some(usec) = usec else {
        return Ok(WatchdogRequest::NotRequested);
    };
    let micros: u64 = usec
        .trim()
        .parse()
        .ok()
        .filter(|&us| us > 0 && us < u64::MAX)
        .ok_or_else(|| {
            format!("{WATCHDOG_USEC_ENV}={usec:?} is not a positive number of microseconds")
        })?;
    if let Some(pid) = pid {
        let target: u32 = pid
            .trim()
            .parse()
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| format!("{WATCHDOG_PID_ENV}={pid:?} is not a process id"))?;
        if target != own_pid {
            return Ok(WatchdogRequest::OtherProcess { pid: target });
        }
    }
    Ok(WatchdogRequest::Enabled {
        timeout: Duration::from_micros(micros),
    })
}

/// Says whether the process is healthy enough to be kept alive; `Err` says why not.
pub type LivenessCheck = Box<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// Proves the runtime still runs tasks other than the caller: spawns one and waits for it.
pub async fn runtime_answers() -> Result<(), String> {
    tokio::spawn(async {})
        .await
        .map_err(|e| format!("the runtime did not run a probe task: {e}"))
}

/// Sends `WATCHDOG=1` to `socket` every `interval` while `check` passes within the
/// interval; logs once when it stops pinging and once when it resumes. Runs until the
/// runtime shuts down.
pub async fn keep_alive(socket: NotifySocket, interval: Duration, check: LivenessCheck) {
    let mut ticker = tokio::time::interval(interval);
    // After a stall, one ping, not a burst that would hide it.
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        ticker.tick().await;
        let verdict = match tokio::time::timeout(interval, check()).await {
            Ok(verdict) => verdict,
            Err(_) => Err(format!(
                "the liveness check did not finish within {} ms",
                interval.as_millis()
            )),
        };
        match verdict {
            Ok(()) => {
                socket.send("WATCHDOG=1");
                if failing {
                    log::warn!("watchdog: healthy again, pinging systemd");
                    failing = false;
                }
            }
            Err(reason) => {
                if !failing {
                    log::error!("watchdog: not pinging systemd: {reason}");
                    failing = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    const PING_MS: u64 = 20;

    fn socket() -> (tempfile::TempDir, UnixDatagram, NotifySocket) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).expect("bind");
        (dir, listener, NotifySocket::at(path))
    }

    /// Waits for `count` pings, each within a generous bound.
    fn expect_pings(listener: &UnixDatagram, count: usize) {
        listener
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut buf = [0u8; 64];
        for _ in 0..count {
            let n = listener.recv(&mut buf).expect("a watchdog ping");
            assert_eq!(&buf[..n], b"WATCHDOG=1");
        }
    }

    /// Drops what arrived so far, then asserts nothing more arrives for many intervals.
    fn expect_silence(listener: &UnixDatagram) {
        listener.set_nonblocking(true).expect("nonblocking");
        let mut buf = [0u8; 64];
        while listener.recv(&mut buf).is_ok() {}
        listener.set_nonblocking(false).expect("blocking");
        listener
            .set_read_timeout(Some(Duration::from_millis(PING_MS * 15)))
            .expect("timeout");
        match listener.recv(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            other => panic!("expected no ping, got {other:?}"),
        }
    }

    fn check_from(healthy: Arc<AtomicBool>) -> LivenessCheck {
        Box::new(move || {
            let healthy = healthy.clone();
            Box::pin(async move {
                runtime_answers().await?;
                if healthy.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err("the test says unhealthy".into())
                }
            })
        })
    }

    #[test]
    fn request_follows_sd_watchdog_enabled() {
        assert_eq!(
            request_from(None, None, 7),
            Ok(WatchdogRequest::NotRequested)
        );
        let enabled = request_from(Some("30000000"), None, 7).expect("valid");
        assert_eq!(
            enabled,
            WatchdogRequest::Enabled {
                timeout: Duration::from_secs(30)
            }
        );
        assert_eq!(enabled.ping_interval(), Some(Duration::from_secs(15)));
        assert_eq!(request_from(Some("30000000"), Some("7"), 7), Ok(enabled));
        assert_eq!(
            request_from(Some("30000000"), Some("8"), 7),
            Ok(WatchdogRequest::OtherProcess { pid: 8 })
        );
        assert_eq!(
            WatchdogRequest::OtherProcess { pid: 8 }.ping_interval(),
            None
        );
        let zero = request_from(Some("0"), None, 7).expect_err("zero is refused");
        assert!(zero.contains("WATCHDOG_USEC"), "{zero}");
        let junk = request_from(Some("30s"), None, 7).expect_err("junk is refused");
        assert!(junk.contains("\"30s\""), "{junk}");
        let bad_pid = request_from(Some("1000"), Some("me"), 7).expect_err("bad pid");
        assert!(bad_pid.contains("WATCHDOG_PID"), "{bad_pid}");
    }

    #[test]
    fn pings_stop_while_the_check_fails_and_resume_after() {
        let (_dir, listener, target) = socket();
        let healthy = Arc::new(AtomicBool::new(true));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.spawn(keep_alive(
            target,
            Duration::from_millis(PING_MS),
            check_from(healthy.clone()),
        ));
        expect_pings(&listener, 3);
        healthy.store(false, Ordering::SeqCst);
        // A check already past its flag may still ping once; silence follows.
        std::thread::sleep(Duration::from_millis(PING_MS * 2));
        expect_silence(&listener);
        healthy.store(true, Ordering::SeqCst);
        expect_pings(&listener, 3);
    }

    #[test]
    fn pings_stop_while_every_worker_of_the_runtime_is_blocked() {
        let (_dir, listener, target) = socket();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.spawn(keep_alive(
            target,
            Duration::from_millis(PING_MS),
            check_from(Arc::new(AtomicBool::new(true))),
        ));
        expect_pings(&listener, 3);
        // Wedge the event loop the way a bug does: blocking calls on every worker.
        let wedged = Arc::new(AtomicBool::new(true));
        let blocked = Arc::new(AtomicUsize::new(0));
        for _ in 0..2 {
            let wedged = wedged.clone();
            let blocked = blocked.clone();
            runtime.spawn(async move {
                blocked.fetch_add(1, Ordering::SeqCst);
                while wedged.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
        }
        while blocked.load(Ordering::SeqCst) < 2 {
            std::thread::sleep(Duration::from_millis(5));
        }
        expect_silence(&listener);
        wedged.store(false, Ordering::SeqCst);
        expect_pings(&listener, 3);
    }

    #[test]
    fn a_check_that_hangs_stops_the_pings() {
        let (_dir, listener, target) = socket();
        let hang = Arc::new(AtomicBool::new(false));
        let flag = hang.clone();
        let check: LivenessCheck = Box::new(move || {
            let hang = flag.load(Ordering::SeqCst);
            Box::pin(async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                Ok(())
            })
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.spawn(keep_alive(target, Duration::from_millis(PING_MS), check));
        expect_pings(&listener, 2);
        hang.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(PING_MS * 2));
        expect_silence(&listener);
        hang.store(false, Ordering::SeqCst);
        expect_pings(&listener, 2);
    }
}
