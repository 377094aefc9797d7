//! LAN discovery as OpenClaw's users see it: the real `openclaw gateway discover` finds pincer's
//! `_openclaw-gw._tcp` advertisement with the right port and TXT keys. On Linux that CLI runs
//! `avahi-browse`, which asks a real avahi-daemon over D-Bus; so each test builds a small LAN of
//! its own: two network namespaces joined by a veth pair (private 10.213.0.0/16 addresses, no
//! traffic leaves the machine), pincer's gateway in one, and in the other a private D-Bus system
//! bus, avahi-daemon and the CLI (in a mount namespace where `/run` is a tmpfs and `/etc/passwd`
//! knows the `avahi` user, so nothing of the host is touched).
//!
//! Needs root, `ip`, `unshare`, `dbus-daemon`, avahi (`PINCER_AVAHI_DIR`, default `.tools/avahi`,
//! from `scripts/setup mdns`), Node 24 and the CLI (`PINCER_NODE24`, `PINCER_OPENCLAW_CLI`, from
//! `scripts/setup node cli`). Without them each test reports itself skipped; under `CI=true` a
//! missing prerequisite fails.

#[path = "support/skip.rs"]
mod skip;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long one `gateway discover` browses (its `--timeout`).
const DISCOVER_TIMEOUT_MS: u64 = 3_000;
/// How long a test waits for the advertisement to show up (probing, announcing, avahi's cache).
const FIND_DEADLINE_MS: u64 = 20_000;
const TOKEN: &str = "mdns-test-token-0123456789";

fn manifest_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn env_path(var: &str, default_rel: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| manifest_path(default_rel), PathBuf::from)
}

/// Everything the lab needs from this host.
struct Tools {
    avahi: PathBuf,
    node24: PathBuf,
    cli: PathBuf,
}

impl Tools {
    fn avahi_daemon(&self) -> PathBuf {
        self.avahi.join("usr/sbin/avahi-daemon")
    }
    fn avahi_bin(&self) -> PathBuf {
        self.avahi.join("usr/bin")
    }
    fn avahi_lib(&self) -> PathBuf {
        self.avahi.join("usr/lib/x86_64-linux-gnu")
    }
}

fn command_exists(name: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The tools, or why this host cannot run the lab.
fn tools() -> Result<Tools, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("network namespaces need root".into());
    }
    for tool in ["ip", "unshare", "mount", "dbus-daemon"] {
        if !command_exists(tool) {
            return Err(format!("`{tool}` not found (scripts/setup mdns)"));
        }
    }
    let tools = Tools {
        avahi: env_path("PINCER_AVAHI_DIR", ".tools/avahi"),
        node24: env_path("PINCER_NODE24", ".tools/node24/node_modules/.bin/node"),
        cli: env_path(
            "PINCER_OPENCLAW_CLI",
            ".tools/openclaw-cli/node_modules/openclaw/openclaw.mjs",
        ),
    };
    for (path, what) in [
        (tools.avahi_daemon(), "avahi-daemon (scripts/setup mdns)"),
        (
            tools.avahi_bin().join("avahi-browse"),
            "avahi-browse (scripts/setup mdns)",
        ),
        (tools.node24.clone(), "Node 24 (scripts/setup node)"),
        (tools.cli.clone(), "the openclaw CLI (scripts/setup cli)"),
    ] {
        if !path.exists() {
            return Err(format!("{what} not found at {}", path.display()));
        }
    }
    Ok(tools)
}

/// The tools, or `None` after reporting the test skipped (a failure under CI).
fn tools_or_skip(test: &str) -> Option<Tools> {
    match tools() {
        Ok(tools) => Some(tools),
        Err(reason) if skip::in_ci() => panic!("{test}: missing prerequisite under CI: {reason}"),
        Err(reason) => {
            skip::skip(test, &reason);
            None
        }
    }
}

fn run(args: &[&str]) -> Output {
    let output = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {args:?}: {e}"));
    assert!(
        output.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn kill_group(child: &mut Child, signal: i32) {
    // SAFETY: the child leads its own process group (process_group(0)).
    unsafe { libc::kill(-(child.id() as i32), signal) };
}

static LAB_SEQ: AtomicU32 = AtomicU32::new(0);

/// Two namespaces on one veth link; the browser side runs D-Bus and avahi-daemon.
struct Lab {
    dir: tempfile::TempDir,
    gateway_ns: String,
    browser_ns: String,
    seq: u32,
    browser: Option<Child>,
}

impl Lab {
    fn new(tools: &Tools) -> Lab {
        let seq = LAB_SEQ.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}{seq}", std::process::id() % 100_000);
        let lab = Lab {
            dir: tempfile::tempdir().expect("temp dir"),
            gateway_ns: format!("pincer-mdns-{tag}-gw"),
            browser_ns: format!("pincer-mdns-{tag}-br"),
            seq,
            browser: None,
        };
        let (gw_if, br_if) = lab.link_names(0);
        run(&["ip", "netns", "add", &lab.gateway_ns]);
        run(&["ip", "netns", "add", &lab.browser_ns]);
        lab.link(0, &gw_if, &br_if);
        for ns in [&lab.gateway_ns, &lab.browser_ns] {
            run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        lab.start_browser(tools)
    }

    /// Interface names of link `n` (at most 15 bytes each).
    fn link_names(&self, n: u32) -> (String, String) {
        let tag = format!("{}{}{n}", std::process::id() % 100_000, self.seq);
        (format!("vg{tag}"), format!("vb{tag}"))
    }

    /// A veth pair between the namespaces, 10.213.<subnet>.1 on the gateway side, .2 on the other.
    fn link(&self, subnet: u32, gw_if: &str, br_if: &str) {
        run(&[
            "ip",
            "link",
            "add",
            gw_if,
            "netns",
            &self.gateway_ns,
            "type",
            "veth",
            "peer",
            "name",
            br_if,
            "netns",
            &self.browser_ns,
        ]);
        let subnet = 10 + self.seq * 10 + subnet;
        run(&[
            "ip",
            "-n",
            &self.gateway_ns,
            "addr",
            "add",
            &format!("10.213.{subnet}.1/24"),
            "dev",
            gw_if,
        ]);
        run(&[
            "ip",
            "-n",
            &self.browser_ns,
            "addr",
            "add",
            &format!("10.213.{subnet}.2/24"),
            "dev",
            br_if,
        ]);
        run(&["ip", "-n", &self.gateway_ns, "link", "set", gw_if, "up"]);
        run(&["ip", "-n", &self.browser_ns, "link", "set", br_if, "up"]);
    }

    fn bus(&self) -> PathBuf {
        self.dir.path().join("bus")
    }

    /// D-Bus and avahi-daemon in the browser namespace, in a mount namespace of their own.
    fn start_browser(mut self, tools: &Tools) -> Lab {
        let dir = self.dir.path();
        let bus_conf = dir.join("bus.conf");
        std::fs::write(
            &bus_conf,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/><allow own="*"/><allow send_destination="*"/><allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                self.bus().display()
            ),
        )
        .expect("bus config");
        let (_, br_if) = self.link_names(0);
        let (_, br_if2) = self.link_names(1);
        let avahi_conf = dir.join("avahi-daemon.conf");
        std::fs::write(
            &avahi_conf,
            format!(
                "[server]\nhost-name=browser\nuse-ipv4=yes\nuse-ipv6=yes\nallow-interfaces={br_if},{br_if2}\n\
                 enable-dbus=yes\n[wide-area]\nenable-wide-area=no\n[publish]\ndisable-publishing=yes\n"
            ),
        )
        .expect("avahi config");
        let passwd = std::fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
        let group = std::fs::read_to_string("/etc/group").expect("read /etc/group");
        std::fs::write(
            dir.join("passwd"),
            format!("{passwd}avahi:x:0:0:avahi:/nonexistent:/usr/sbin/nologin\n"),
        )
        .expect("passwd");
        std::fs::write(dir.join("group"), format!("{group}avahi:x:0:\n")).expect("group");
        let script = format!(
            "set -e; mount -t tmpfs tmpfs /run; mount --bind {d}/passwd /etc/passwd; \
             mount --bind {d}/group /etc/group; \
             dbus-daemon --config-file={bus_conf} --nofork & \
             for i in $(seq 100); do [ -S {bus} ] && break; sleep 0.05; done; \
             DBUS_SYSTEM_BUS_ADDRESS=unix:path={bus} {daemon} -f {avahi_conf} --no-drop-root --no-chroot --no-rlimits & \
             wait",
            d = dir.display(),
            bus_conf = bus_conf.display(),
            bus = self.bus().display(),
            daemon = tools.avahi_daemon().display(),
            avahi_conf = avahi_conf.display(),
        );
        use std::os::unix::process::CommandExt;
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.browser_ns,
                "unshare",
                "-m",
                "--propagation",
                "private",
            ])
            .args(["sh", "-c", &script])
            .env("LD_LIBRARY_PATH", tools.avahi_lib())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("start dbus-daemon and avahi-daemon");
        let stderr = child.stderr.take().expect("avahi stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let ready = line.contains("Server startup complete");
                let _ = tx.send(line);
                if ready {
                    break;
                }
            }
        });
        self.browser = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.contains("Server startup complete") => break,
                Ok(line) => seen.push(line),
                Err(_) => panic!("avahi-daemon did not start:\n{}", seen.join("\n")),
            }
        }
        self
    }

    /// `openclaw gateway discover --json` run in the browser namespace: its beacons.
    fn discover(&self, tools: &Tools) -> Vec<Value> {
        let path = format!(
            "{}:{}",
            tools.avahi_bin().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let home = self.dir.path().join("home");
        std::fs::create_dir_all(&home).expect("home");
        let output = Command::new("ip")
            .args(["netns", "exec", &self.browser_ns])
            .arg(&tools.node24)
            .arg(&tools.cli)
            .args(["gateway", "discover", "--json", "--timeout"])
            .arg(DISCOVER_TIMEOUT_MS.to_string())
            .env(
                "DBUS_SYSTEM_BUS_ADDRESS",
                format!("unix:path={}", self.bus().display()),
            )
            .env("LD_LIBRARY_PATH", tools.avahi_lib())
            .env("PATH", path)
            .env("HOME", &home)
            .env("OPENCLAW_STATE_DIR", home.join(".openclaw"))
            .env("NO_COLOR", "1")
            .output()
            .expect("run openclaw gateway discover");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let json: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "discover printed no JSON ({e}); status {}\nstdout:\n{stdout}\nstderr:\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
        });
        json["beacons"].as_array().cloned().unwrap_or_default()
    }

    /// `avahi-browse -rtp` lines for the service type (`=;iface;proto;name;type;domain;host;addr;port;txt`).
    fn avahi_resolved(&self, tools: &Tools) -> Vec<String> {
        let output = Command::new("ip")
            .args(["netns", "exec", &self.browser_ns])
            .arg(tools.avahi_bin().join("avahi-browse"))
            .args(["-rtp", "_openclaw-gw._tcp"])
            .env(
                "DBUS_SYSTEM_BUS_ADDRESS",
                format!("unix:path={}", self.bus().display()),
            )
            .env("LD_LIBRARY_PATH", tools.avahi_lib())
            .output()
            .expect("run avahi-browse");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|line| line.starts_with("="))
            .map(str::to_string)
            .collect()
    }

    /// Runs `discover` until `done` holds for its beacons or the deadline passes; the last beacons.
    fn discover_until(&self, tools: &Tools, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_millis(FIND_DEADLINE_MS);
        loop {
            let beacons = self.discover(tools);
            if done(&beacons) || Instant::now() >= deadline {
                return beacons;
            }
        }
    }

    /// pincer's gateway in the gateway namespace, on all addresses, with `config_extra` in its config.
    fn start_gateway(&self, config_extra: &str, env: &[(&str, &str)]) -> Gateway {
        let config = self.dir.path().join("pincer.json5");
        std::fs::write(
            &config,
            format!(
                "{{ gateway: {{ mode: 'local', bind: 'lan', auth: {{ token: '{TOKEN}' }} }}, {config_extra} }}"
            ),
        )
        .expect("config");
        let data = self.dir.path().join("data");
        use std::os::unix::process::CommandExt;
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.gateway_ns])
            .arg(env!("CARGO_BIN_EXE_pincer"))
            .args(["gateway", "--port", "0", "--config"])
            .arg(&config)
            .arg("--data-dir")
            .arg(&data)
            .env("HOME", self.dir.path())
            .env_remove("OPENCLAW_DISABLE_BONJOUR")
            .env_remove("OPENCLAW_MDNS_HOSTNAME")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("start pincer gateway");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the listening line");
        let port: u16 = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no listening line from pincer: {line:?}"));
        let stderr = child.stderr.take().expect("stderr");
        let log = std::sync::Arc::new(parking_lot::Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut log = sink.lock();
                log.push_str(&line);
                log.push('\n');
            }
        });
        Gateway { child, port, log }
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(child) = self.browser.as_mut() {
            kill_group(child, libc::SIGTERM);
            let _ = child.wait();
        }
        for ns in [&self.gateway_ns, &self.browser_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

struct Gateway {
    child: Child,
    port: u16,
    log: std::sync::Arc<parking_lot::Mutex<String>>,
}

impl Gateway {
    /// SIGTERM, and the exit: the gateway drains and withdraws its advertisement.
    fn stop(&mut self) {
        // SAFETY: plain signal to our child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().expect("wait for pincer");
        assert!(
            status.success(),
            "pincer exited with {status}:\n{}",
            self.log.lock()
        );
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            kill_group(&mut self.child, libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

fn pincer_beacon(beacons: &[Value], port: u16) -> Option<&Value> {
    beacons.iter().find(|b| b["port"] == port)
}

#[test]
fn openclaw_discover_finds_pincer_and_loses_it_after_shutdown() {
    let Some(tools) = tools_or_skip("openclaw_discover_finds_pincer_and_loses_it_after_shutdown")
    else {
        return;
    };
    let lab = Lab::new(&tools);
    let mut gateway = lab.start_gateway("", &[("OPENCLAW_MDNS_HOSTNAME", "pincer-lab")]);
    let port = gateway.port;
    let beacons = lab.discover_until(&tools, |b| pincer_beacon(b, port).is_some());
    let beacon = pincer_beacon(&beacons, port).unwrap_or_else(|| {
        panic!(
            "openclaw gateway discover did not find port {port}; beacons {beacons:?}\npincer log:\n{}",
            gateway.log.lock()
        )
    });
    assert_eq!(beacon["gatewayPort"], port, "{beacon}");
    assert_eq!(beacon["host"], "pincer-lab.local", "{beacon}");
    assert_eq!(beacon["lanHost"], "pincer-lab.local", "{beacon}");
    assert_eq!(beacon["role"], "gateway", "{beacon}");
    assert_eq!(beacon["transport"], "gateway", "{beacon}");
    assert_eq!(
        beacon["wsUrl"],
        format!("ws://pincer-lab.local:{port}"),
        "{beacon}"
    );
    assert_eq!(beacon["txt"]["gatewayDirectReachable"], "1", "{beacon}");
    // minimal mode (the default) leaves these out
    assert!(beacon["sshPort"].is_null(), "{beacon}");
    assert!(beacon["cliPath"].is_null(), "{beacon}");
    let instance = beacon["instanceName"].as_str().unwrap_or_default();
    assert!(instance.ends_with("(OpenClaw)"), "{beacon}");
    // avahi resolved the SRV target to the gateway side's address
    let resolved = lab.avahi_resolved(&tools);
    assert!(
        resolved
            .iter()
            .any(|l| l.contains(";10.213.") && l.contains(&format!(";{port};"))),
        "avahi-browse did not resolve pincer-lab.local: {resolved:?}"
    );

    // An address that appears later (a new link) is announced too.
    let (gw_if, br_if) = lab.link_names(1);
    lab.link(5, &gw_if, &br_if);
    let new_addr = format!(";10.213.{}.1;", 10 + lab.seq * 10 + 5);
    let deadline = Instant::now() + Duration::from_millis(FIND_DEADLINE_MS);
    let mut resolved = Vec::new();
    while Instant::now() < deadline {
        resolved = lab.avahi_resolved(&tools);
        if resolved
            .iter()
            .any(|l| l.contains(&br_if) && l.contains(&new_addr))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        resolved
            .iter()
            .any(|l| l.contains(&br_if) && l.contains(&new_addr)),
        "the new link's address {new_addr} was not announced on {br_if}: {resolved:?}"
    );

    gateway.stop();
    assert!(
        gateway.log.lock().contains("mDNS: withdrew"),
        "{}",
        gateway.log.lock()
    );
    // The goodbye packets took it out of avahi's cache: a SIGKILLed gateway would stay listed
    // for the records' TTL (75 minutes).
    let beacons = lab.discover_until(&tools, |b| pincer_beacon(b, port).is_none());
    assert!(
        pincer_beacon(&beacons, port).is_none(),
        "still discovered after shutdown: {beacons:?}"
    );
}

#[test]
fn full_mode_adds_ssh_port_and_cli_path() {
    let Some(tools) = tools_or_skip("full_mode_adds_ssh_port_and_cli_path") else {
        return;
    };
    let lab = Lab::new(&tools);
    let gateway = lab.start_gateway(
        "discovery: { mdns: { mode: 'full' } }",
        &[
            ("OPENCLAW_SSH_PORT", "2222"),
            ("OPENCLAW_CLI_PATH", "/usr/bin/pincer"),
        ],
    );
    let port = gateway.port;
    let beacons = lab.discover_until(&tools, |b| pincer_beacon(b, port).is_some());
    let beacon = pincer_beacon(&beacons, port).unwrap_or_else(|| {
        panic!(
            "not found in full mode: {beacons:?}\n{}",
            gateway.log.lock()
        )
    });
    assert_eq!(beacon["sshPort"], 2222, "{beacon}");
    assert_eq!(beacon["cliPath"], "/usr/bin/pincer", "{beacon}");
}

#[test]
fn mode_off_is_not_discovered() {
    let Some(tools) = tools_or_skip("mode_off_is_not_discovered") else {
        return;
    };
    let lab = Lab::new(&tools);
    let gateway = lab.start_gateway("discovery: { mdns: { mode: 'off' } }", &[]);
    // Long enough for a probe and an announcement had there been one (they take about 1 s).
    std::thread::sleep(Duration::from_secs(2));
    let beacons = lab.discover(&tools);
    assert!(
        pincer_beacon(&beacons, gateway.port).is_none(),
        "mode off was discovered: {beacons:?}"
    );
    assert!(
        gateway.log.lock().contains("mDNS: not advertising"),
        "{}",
        gateway.log.lock()
    );
}
