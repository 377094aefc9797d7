//! The gateway as the appliance's systemd unit runs it: readiness and watchdog
//! pings on a notify socket the test binds (as systemd does), `WATCHDOG_PID`
//! honoured, and a gateway with no config at all starting and saying where to
//! set it up. The wedged-loop case is in `system::watchdog`'s unit tests (it
//! blocks the runtime's workers from inside the process).

mod support;

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::gateway::GatewayProcess;

/// 400 ms: the gateway pings every 200 ms.
const WATCHDOG_USEC: &str = "400000";

fn notify_socket(dir: &Path) -> (UnixDatagram, String) {
    let path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("bind notify socket");
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    (socket, path.to_str().expect("utf-8 path").to_string())
}

fn next_notification(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 1024];
    let n = socket.recv(&mut buf).expect("sd_notify datagram");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Every notification until one contains `until` (that one included).
fn notifications_until(socket: &UnixDatagram, until: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let text = next_notification(socket);
        let done = text.contains(until);
        seen.push(text);
        if done {
            return seen;
        }
    }
}

#[test]
fn watchdog_pings_follow_the_interval_systemd_asks_for() {
    let notify_dir = tempfile::tempdir().expect("tempdir");
    let (socket, path) = notify_socket(notify_dir.path());
    let gateway = GatewayProcess::start_with_env(
        "{}",
        &["--port", "0"],
        &[("NOTIFY_SOCKET", &path), ("WATCHDOG_USEC", WATCHDOG_USEC)],
    );
    notifications_until(&socket, "READY=1");
    let started = Instant::now();
    for _ in 0..5 {
        assert_eq!(next_notification(&socket), "WATCHDOG=1");
    }
    // Five pings at a 200 ms interval: not a burst sent at once.
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "pings came faster than the interval: {:?}",
        started.elapsed()
    );
    let log = gateway.stderr();
    assert!(log.contains("watchdog: timeout 400 ms"), "{log}");
}

#[test]
fn watchdog_meant_for_another_process_is_not_pinged() {
    let notify_dir = tempfile::tempdir().expect("tempdir");
    let (socket, path) = notify_socket(notify_dir.path());
    let gateway = GatewayProcess::start_with_env(
        "{}",
        &["--port", "0"],
        &[
            ("NOTIFY_SOCKET", &path),
            ("WATCHDOG_USEC", WATCHDOG_USEC),
            ("WATCHDOG_PID", "1"),
        ],
    );
    notifications_until(&socket, "READY=1");
    // Ten intervals without a ping.
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("read timeout");
    let mut buf = [0u8; 256];
    if let Ok(n) = socket.recv(&mut buf) {
        panic!(
            "unexpected notification: {}",
            String::from_utf8_lossy(&buf[..n])
        );
    }
    let log = gateway.stderr();
    assert!(log.contains("WATCHDOG_PID=1 is another process"), "{log}");
}

/// Kills the child when the test ends, also on a panic.
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn without_a_config_the_gateway_starts_and_says_where_to_set_it_up() {
    if Path::new("/etc/pincer/pincer.json5").exists() {
        panic!("/etc/pincer/pincer.json5 exists on this host: the gateway would load it, and this test needs no config anywhere");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).expect("data dir");
    // First boot refused a malformed config: the gateway repeats why in its log.
    std::fs::write(
        data.join("firstboot-error.json"),
        r#"{"pincer.json5":{"keptAs":"/boot/firmware/pincer.json5.invalid-20261125T000000Z","error":"unknown key gateway.prot","keyPath":"gateway.prot","atMs":1}}"#,
    )
    .expect("record");
    let (socket, path) = notify_socket(dir.path());
    let stderr = std::fs::File::create(dir.path().join("stderr")).expect("stderr");
    // As the appliance's unit runs it: LAN bind, the token first boot generated in the environment.
    let child = Command::new(env!("CARGO_BIN_EXE_pincer"))
        .args(["gateway", "--bind", "lan", "--port", "0", "--data-dir"])
        .arg(&data)
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_DATA_DIR")
        .env_remove("OPENCLAW_GATEWAY_PASSWORD")
        .env_remove("OPENCLAW_GATEWAY_PORT")
        .env("OPENCLAW_GATEWAY_TOKEN", "0123456789abcdef0123456789abcdef")
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .env("NOTIFY_SOCKET", &path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn pincer");
    let mut child = Spawned(child);
    let stdout = child.0.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("ready line");
    let port: u16 = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    let ready = notifications_until(&socket, "READY=1");
    let ready = ready.last().expect("ready");
    let host = pincer::system::host_name();
    let expected = format!("STATUS=unconfigured: set up at http://{host}.local:{port}/");
    assert!(ready.contains(&expected), "{ready:?} lacks {expected:?}");
    let log = std::fs::read_to_string(dir.path().join("stderr")).expect("log");
    assert!(
        log.contains(&format!("set it up at http://{host}.local:{port}/")),
        "{log}"
    );
    assert!(
        log.contains("pincer.json5 from the boot partition was refused at gateway.prot"),
        "{log}"
    );
    drop(child);
}

#[test]
fn doctor_reports_the_service_around_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(env!("CARGO_BIN_EXE_pincer"))
        .arg("doctor")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env_remove("PINCER_CONFIG")
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .env("INVOCATION_ID", "0123abcd")
        .env("NOTIFY_SOCKET", "/run/systemd/notify")
        .env("WATCHDOG_USEC", "30000000")
        .output()
        .expect("run pincer doctor");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "  systemd service: yes (invocation 0123abcd, notify socket /run/systemd/notify)",
        "  watchdog: timeout 30000 ms, pinging every 15000 ms while healthy",
        "  cgroup delegation: ",
        "  read-only root: ",
        "  data dir on its own file system: ",
        "  journal: ",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
    // What this host shows, not a constant: the root here is mounted as mountinfo says.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let root_ro = mountinfo.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.get(4) == Some(&"/") && f.get(5).is_some_and(|o| o.split(',').any(|x| x == "ro"))
    });
    let expected = if root_ro {
        "  read-only root: yes"
    } else {
        "  read-only root: no"
    };
    assert!(
        text.contains(expected),
        "{expected:?} missing from:\n{text}"
    );
}

#[test]
fn a_malformed_config_on_the_boot_partition_leaves_a_gateway_that_starts_and_reports_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = dir.path();
    std::fs::create_dir_all(r.join("boot")).expect("boot");
    std::fs::write(
        r.join("boot/pincer.json5"),
        "{ gateway: { port: \"many\" } }",
    )
    .expect("config");
    let firstboot = Command::new(env!("CARGO_BIN_EXE_pincer"))
        .args(["firstboot", "--boot-dir"])
        .arg(r.join("boot"))
        .arg("--config-dir")
        .arg(r.join("data/etc"))
        .arg("--data-dir")
        .arg(r.join("data"))
        .arg("--hostname-file")
        .arg(r.join("data/system/hostname"))
        .arg("--wpa-conf")
        .arg(r.join("data/system/wpa.conf"))
        .arg("--ssh-marker")
        .arg(r.join("data/system/ssh"))
        .env_remove("PINCER_DATA_DIR")
        .output()
        .expect("run pincer firstboot");
    let printed = String::from_utf8_lossy(&firstboot.stdout);
    assert!(
        firstboot.status.success(),
        "{printed}\n{}",
        String::from_utf8_lossy(&firstboot.stderr)
    );
    assert!(printed.contains("pincer.json5: refused"), "{printed}");
    assert!(printed.contains("gateway token: generated"), "{printed}");
    assert!(!r.join("data/etc/pincer.json5").exists());
    let env = std::fs::read_to_string(r.join("data/gateway.env")).expect("gateway.env");
    let token = env
        .trim()
        .strip_prefix("OPENCLAW_GATEWAY_TOKEN=")
        .expect("token line");

    // The gateway as the unit starts it: no config, the token from gateway.env, LAN bind.
    let (socket, path) = notify_socket(r);
    let stderr = std::fs::File::create(r.join("stderr")).expect("stderr");
    let child = Command::new(env!("CARGO_BIN_EXE_pincer"))
        .args(["gateway", "--bind", "lan", "--port", "0", "--data-dir"])
        .arg(r.join("data"))
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_DATA_DIR")
        .env_remove("OPENCLAW_GATEWAY_PASSWORD")
        .env_remove("OPENCLAW_GATEWAY_PORT")
        .env("OPENCLAW_GATEWAY_TOKEN", token)
        .env("HOME", r)
        .env("XDG_CONFIG_HOME", r.join("config"))
        .env("NOTIFY_SOCKET", &path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn pincer");
    let child = Spawned(child);
    let ready = notifications_until(&socket, "READY=1");
    assert!(
        ready
            .last()
            .expect("ready")
            .contains("STATUS=unconfigured: set up at http://"),
        "{ready:?}"
    );
    let log = std::fs::read_to_string(r.join("stderr")).expect("log");
    assert!(
        log.contains("pincer.json5 from the boot partition was refused at gateway.port"),
        "{log}"
    );
    drop(child);
}
