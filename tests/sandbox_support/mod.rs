//! Shared helpers of the sandbox test suites: host fixtures outside the workspace, the
//! confinement modes this host can run (reporting skipped ones with their reason), the escape
//! kit (this test binary re-run inside the sandbox to make raw syscalls), process-marker scans
//! and the re-run of a suite as an unprivileged user. Helpers only: no assertions about the
//! product live here, and nothing here fakes a sandbox layer.
//!
//! Wherever the checkout lies, the binaries the sandbox or `nobody` run are copies staged in
//! directories these helpers create: the sandbox refuses read-only paths under its private
//! `/tmp` (a checkout under `/tmp`), and `nobody` cannot reach a checkout under a private home
//! (`/root` is mode 700).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use pincer::sandbox::exec::{run_command, ExecOutcome, ExecRequest};
use pincer::sandbox::{probe, Capabilities, Layer, SandboxMode, SandboxPolicy};

#[path = "../support/skip.rs"]
mod skip_support;
pub use skip_support::{in_ci, say, skip};

/// Environment variable that makes the escape kit act (set only inside the sandbox).
pub const KIT_ACTION_VAR: &str = "PINCER_ESCAPE_KIT";
/// Set in a suite re-run as an unprivileged user.
pub const NESTED_RUN_VAR: &str = "PINCER_SANDBOX_SUITE_NESTED";
/// File name of the escape kit's copy in a fixture's workspace.
const KIT_FILE: &str = "escape-kit";
/// User and group id of `nobody`, the unprivileged user a suite is re-run as.
const NOBODY_ID: u32 = 65534;
/// Prefix of each line of a nested run's output in this run's output: keeps the nested
/// `test result:` lines from reading as this run's (scripts/test adds those lines up).
const NESTED_OUTPUT_PREFIX: &str = "    [as nobody] ";

/// Capabilities of this host, probed once per test binary.
pub fn capabilities() -> &'static Capabilities {
    static CAPS: OnceLock<Capabilities> = OnceLock::new();
    CAPS.get_or_init(probe)
}

/// Prints past libtest's output capture, so notes are visible in a normal `cargo test`.
pub fn report(line: &str) {
    say(line);
}

/// A confined configuration of the sandbox the suites exercise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Everything this host offers (namespaces, Landlock, seccomp, ...).
    Full,
    /// Landlock and seccomp without namespaces (a host without user namespaces).
    LandlockOnly,
}

impl Mode {
    /// The policy for this mode, with `require` set so the mode cannot silently degrade.
    pub fn policy(self) -> SandboxPolicy {
        let mut policy = SandboxPolicy::default();
        match self {
            Mode::Full => policy.require = vec![Layer::Namespaces],
            Mode::LandlockOnly => {
                policy.skip_layers = vec![Layer::Namespaces];
                policy.require = vec![Layer::Landlock];
            }
        }
        policy
    }

    fn needs(self) -> Layer {
        match self {
            Mode::Full => Layer::Namespaces,
            Mode::LandlockOnly => Layer::Landlock,
        }
    }
}

/// The confined modes this host supports. Each unsupported one is reported as not run; when
/// none is supported the test is reported skipped ([`skip`]), since it then checks nothing
/// about confinement. Under CI a layer the host provides (probed here independently of
/// pincer's own probe, see [`host_provides`]) but the sandbox reports unavailable fails the
/// test instead.
pub fn confined_modes(test: &str) -> Vec<Mode> {
    require_what_the_host_provides(test);
    let modes: Vec<Mode> = [Mode::Full, Mode::LandlockOnly]
        .into_iter()
        .filter(|mode| {
            let status = capabilities().status(mode.needs());
            if !status.is_available() {
                mode_not_run(test, *mode, &format!("{}: {status}", mode.needs()));
            }
            status.is_available()
        })
        .collect();
    if modes.is_empty() {
        skip(
            test,
            "no confined mode runs on this host (neither namespaces nor Landlock)",
        );
    }
    modes
}

/// Reports that `test` did not run in `mode` (the test still checks its other modes; when it
/// checks none it must call [`skip`]).
pub fn mode_not_run(test: &str, mode: Mode, reason: &str) {
    say(&format!("NOT RUN {test} [{mode:?}]: {reason}"));
}

/// The sandbox layers every confined mode relies on when the host has them.
const PROBED_LAYERS: [Layer; 3] = [Layer::Namespaces, Layer::Landlock, Layer::Seccomp];

/// Under CI (`CI=true`), fails `test` when the host provides a layer (by [`host_provides`])
/// that pincer's probe reports unavailable: a sandbox test must not skip what the host has.
pub fn require_what_the_host_provides(test: &str) {
    if !in_ci() {
        return;
    }
    for layer in PROBED_LAYERS {
        let status = capabilities().status(layer);
        if let (false, Some(evidence)) = (status.is_available(), host_provides(layer)) {
            panic!("{test}: CI requires {layer}, which this host provides ({evidence}), but the sandbox reports: {status}");
        }
    }
}

/// Whether this host provides `layer`, probed independently of pincer's `sandbox::probe`:
/// `Some(evidence)` when it does.
pub fn host_provides(layer: Layer) -> Option<String> {
    static FOUND: OnceLock<[Option<String>; 3]> = OnceLock::new();
    let found = FOUND.get_or_init(|| PROBED_LAYERS.map(probe_host_layer));
    PROBED_LAYERS
        .iter()
        .position(|probed| *probed == layer)
        .and_then(|index| found[index].clone())
}

fn probe_host_layer(layer: Layer) -> Option<String> {
    match layer {
        Layer::Namespaces => {
            let status = Command::new("unshare")
                .args(["--user", "--map-root-user", "--mount", "--pid", "--net"])
                .args(["--ipc", "--uts", "--fork", "true"])
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
            status
                .is_ok_and(|status| status.success())
                .then(|| "unshare -U -m -p -n -i -u succeeded".to_owned())
        }
        Layer::Landlock => {
            const LANDLOCK_CREATE_RULESET_VERSION: libc::c_long = 1;
            // SAFETY: with a null attribute and size 0 the call only reports the ABI version.
            let abi = unsafe {
                libc::syscall(
                    libc::SYS_landlock_create_ruleset,
                    std::ptr::null::<u8>(),
                    0usize,
                    LANDLOCK_CREATE_RULESET_VERSION,
                )
            };
            (abi >= 1).then(|| format!("Landlock ABI {abi}"))
        }
        Layer::Seccomp => std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
            .ok()
            .filter(|actions| actions.split_whitespace().any(|a| a == "errno"))
            .map(|actions| format!("seccomp filter actions: {}", actions.trim())),
        Layer::Cgroup => None,
    }
}

/// The unconfined control policy (mode off): proves an attack would succeed without the sandbox.
pub fn unconfined() -> SandboxPolicy {
    SandboxPolicy {
        mode: SandboxMode::Off,
        ..SandboxPolicy::default()
    }
}

/// True when the test process runs as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A workspace plus host files outside it that the sandbox must not reach.
pub struct Fixture {
    root: tempfile::TempDir,
    pub workspace: PathBuf,
    pub outside: PathBuf,
    /// A fake gateway config file holding [`Fixture::secret`].
    pub gateway_config: PathBuf,
    /// A fake gateway data directory with a session file holding the secret.
    pub gateway_data: PathBuf,
    /// A fake home directory with `.ssh/id_ed25519` holding the secret.
    pub fake_home: PathBuf,
    /// A random token planted in every outside file.
    pub secret: String,
}

impl Fixture {
    pub fn new() -> Self {
        let root = tempfile::tempdir().expect("fixture root");
        let base = root.path().canonicalize().expect("canonical root");
        let secret = format!("pincer-secret-{:016x}", rand_u64());
        let workspace = base.join("workspace");
        let outside = base.join("outside");
        let gateway_data = outside.join("data");
        let fake_home = base.join("home");
        for dir in [&workspace, &gateway_data, &fake_home.join(".ssh")] {
            std::fs::create_dir_all(dir).expect("fixture dir");
        }
        let gateway_config = outside.join("pincer.json5");
        std::fs::write(
            &gateway_config,
            format!("{{ gateway: {{ auth: {{ token: \"{secret}\" }} }} }}\n"),
        )
        .expect("config");
        std::fs::write(
            gateway_data.join("sessions.mdb"),
            format!("session {secret}\n"),
        )
        .expect("data");
        std::fs::write(
            fake_home.join(".ssh/id_ed25519"),
            format!("-----BEGIN KEY-----\n{secret}\n"),
        )
        .expect("key");
        std::fs::write(outside.join("target.txt"), "original\n").expect("target");
        Self {
            root,
            workspace,
            outside,
            gateway_config,
            gateway_data,
            fake_home,
            secret,
        }
    }

    /// The directory holding workspace and outside (the workspace's parent).
    pub fn base(&self) -> PathBuf {
        self.workspace
            .parent()
            .expect("workspace has a parent")
            .to_path_buf()
    }

    pub fn request(&self, command: &str, policy: SandboxPolicy) -> ExecRequest {
        let mut request = ExecRequest::new(command, &self.workspace);
        request.policy = policy;
        request
    }

    pub async fn run(&self, command: &str, policy: SandboxPolicy) -> ExecOutcome {
        run_command(self.request(command, policy))
            .await
            .expect("command ran")
    }
}

impl Default for Fixture {
    fn default() -> Self {
        Self::new()
    }
}

pub fn rand_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes into the buffer.
    let got = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    assert_eq!(got, 8, "getrandom");
    u64::from_ne_bytes(bytes)
}

/// Host processes whose command line or environment contains `marker` (other than this one).
pub fn processes_with_marker(marker: &str) -> Vec<(u32, String)> {
    let own = std::process::id();
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.filter_map(Result::ok) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        for file in ["cmdline", "environ"] {
            let Ok(bytes) = std::fs::read(entry.path().join(file)) else {
                continue;
            };
            let text = String::from_utf8_lossy(&bytes).replace('\0', " ");
            if text.contains(marker) {
                found.push((pid, text));
                break;
            }
        }
    }
    found
}

/// Checks that [`processes_with_marker`] sees a marked host process, so "nothing found" means
/// something.
pub fn assert_marker_scan_works() {
    let marker = format!("marker-selfcheck-{:x}", rand_u64());
    let mut child = Command::new("sleep")
        .arg("30")
        .env("PINCER_TEST_MARKER", &marker)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn marked host process");
    let mut seen = processes_with_marker(&marker);
    for _ in 0..100 {
        if !seen.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        seen = processes_with_marker(&marker);
    }
    child.kill().ok();
    child.wait().ok();
    assert!(
        !seen.is_empty(),
        "the marker scan cannot see a marked host process"
    );
}

/// Resident memory of this process, in bytes.
pub fn own_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("own status");
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .expect("VmRSS");
    kib * 1024
}

/// Runs the escape kit inside the sandbox and returns its verdict for `action`: `"ok"` or
/// `"errno=N"`.
///
/// The kit is a copy of this test binary in the fixture's workspace, run from there: the
/// workspace is where every mode lets a command execute files, whereas the binary's own path
/// may be one the sandbox cannot expose (under its private `/tmp`).
pub async fn run_kit(fixture: &Fixture, action: &str, mut policy: SandboxPolicy) -> String {
    let kit = fixture.workspace.join(KIT_FILE);
    if !kit.exists() {
        let exe = std::env::current_exe().expect("test binary path");
        std::fs::copy(&exe, &kit).unwrap_or_else(|e| {
            panic!(
                "cannot stage the escape kit {} in the workspace: {e}",
                exe.display()
            )
        });
    }
    policy
        .env
        .insert(KIT_ACTION_VAR.to_owned(), action.to_owned());
    // The working directory is the workspace in every mode, wherever the workspace is mounted.
    let command =
        format!("./{KIT_FILE} --ignored --exact escape_kit --nocapture --test-threads=1 -q");
    // Another test's sandbox child, forked while the copy above had the file open for writing,
    // holds that descriptor until it execs: exec then fails with ETXTBSY for a moment. Retried.
    let mut outcome = fixture.run(&command, policy.clone()).await;
    for _ in 0..50 {
        let busy = outcome.exit_code == Some(126) && outcome.stderr.contains("Text file busy");
        if !busy {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        outcome = fixture.run(&command, policy.clone()).await;
    }
    outcome
        .stdout
        .lines()
        .find_map(|line| line.strip_prefix(&format!("KIT {action} ")))
        .map(str::to_owned)
        .unwrap_or_else(|| {
            panic!(
                "the kit gave no verdict for {action}:\n{}",
                outcome.render()
            )
        })
}

/// The kit's body: performs one attack named by [`KIT_ACTION_VAR`] and prints the verdict.
pub fn kit_main() {
    let action =
        std::env::var(KIT_ACTION_VAR).expect("the escape kit runs only inside the sandbox");
    let verdict = kit::perform(&action);
    println!("KIT {action} {verdict}");
}

/// Re-runs this test binary as `nobody` (when root), skipping `skip`, and asserts the run
/// passed. `suite` names the suite in the output.
///
/// The nested run's output is shown once, every line prefixed with [`NESTED_OUTPUT_PREFIX`]:
/// on success as a report, on failure in the panic message.
pub fn assert_suite_passes_as_nobody(suite: &str, skip: &str) {
    let Some(output) = rerun_as_unprivileged(skip) else {
        return;
    };
    let mut shown = format!("--- {suite} as nobody ---\n");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    for line in stdout.lines().chain(stderr.lines()) {
        if line.is_empty() {
            shown.push_str(NESTED_OUTPUT_PREFIX.trim_end());
        } else {
            shown.push_str(NESTED_OUTPUT_PREFIX);
            shown.push_str(line);
        }
        shown.push('\n');
    }
    assert!(
        output.status.success(),
        "{suite} failed as nobody ({}):\n{shown}",
        output.status
    );
    report(&shown);
}

/// Re-runs this test binary as `nobody` (when root), skipping `skip`; returns its output.
///
/// `nobody` runs a copy staged in a new directory under the temp dir, since the checkout may
/// lie where `nobody` cannot read (under `/root`). Skipped, with the reason printed, only
/// when `nobody` cannot execute even that copy (a temp dir it cannot reach).
fn rerun_as_unprivileged(skip_name: &str) -> Option<std::process::Output> {
    if !is_root() {
        skip(
            skip_name,
            &format!("already unprivileged (uid {})", unsafe { libc::geteuid() }),
        );
        return None;
    }
    if std::env::var_os(NESTED_RUN_VAR).is_some() {
        return None;
    }
    let staged = StagedBinary::new();
    if let Err(why) = staged.check_nobody_can_run() {
        skip(skip_name, &why);
        return None;
    }
    // Another test's sandbox child, forked while the copy's write descriptor was open,
    // holds that descriptor until it execs: exec then fails with ETXTBSY for a moment.
    // Retried, bounded, as the escape kit's run is.
    let mut attempts = 0;
    loop {
        let output = Command::new("setpriv")
            .arg(format!("--reuid={NOBODY_ID}"))
            .arg(format!("--regid={NOBODY_ID}"))
            .args(["--clear-groups", "--"])
            .arg(&staged.path)
            .args(["--skip", skip_name, "--test-threads=2"])
            .current_dir(staged.dir.path())
            .env(NESTED_RUN_VAR, "1")
            .env("HOME", "/nonexistent")
            .output()
            .expect("setpriv runs");
        let busy = output.status.code() == Some(126)
            && String::from_utf8_lossy(&output.stderr).contains("Text file busy");
        attempts += 1;
        if !busy || attempts >= 50 {
            return Some(output);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A copy of this test binary that `nobody` may read and execute, in a new directory under
/// the temp dir; removed with the directory on drop.
struct StagedBinary {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl StagedBinary {
    fn new() -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let exe = std::env::current_exe().expect("test binary path");
        let dir = tempfile::Builder::new()
            .prefix("pincer-nobody-suite-")
            .tempdir()
            .expect("staging directory for the run as nobody");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("staging directory readable by nobody");
        let name = exe.file_name().expect("test binary has a file name");
        let path = dir.path().join(name);
        std::fs::copy(&exe, &path).unwrap_or_else(|e| {
            panic!(
                "cannot stage {} in {}: {e}",
                exe.display(),
                dir.path().display()
            )
        });
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("staged binary executable by nobody");
        Self { dir, path }
    }

    /// Checks as `nobody` that the staged copy is executable (every parent searchable).
    fn check_nobody_can_run(&self) -> Result<(), String> {
        let status = Command::new("setpriv")
            .arg(format!("--reuid={NOBODY_ID}"))
            .arg(format!("--regid={NOBODY_ID}"))
            .args(["--clear-groups", "--", "test", "-x"])
            .arg(&self.path)
            .current_dir("/")
            .status()
            .expect("setpriv runs");
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "nobody cannot execute the staged test binary {} (is the temp dir {} \
                 reachable by other users? set TMPDIR to one that is)",
                self.path.display(),
                std::env::temp_dir().display()
            ))
        }
    }
}

/// Paths the kit and the suites share.
pub fn path_text(path: &Path) -> &str {
    path.to_str().expect("UTF-8 test paths")
}

mod kit {
    use super::*;

    fn errno_verdict(rc: libc::c_long) -> String {
        if rc == 0 {
            "ok".to_owned()
        } else {
            format!(
                "errno={}",
                std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
            )
        }
    }

    /// Runs `attempt` in a forked (single-threaded) child and returns its verdict code.
    fn in_child(attempt: impl FnOnce() -> libc::c_long) -> String {
        // SAFETY: the child only makes syscalls and exits.
        unsafe {
            match libc::fork() {
                0 => {
                    let rc = attempt();
                    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                    libc::_exit(if rc == 0 { 0 } else { errno.clamp(1, 255) });
                }
                -1 => panic!("fork failed"),
                child => {
                    let mut status = 0;
                    libc::waitpid(child, &mut status, 0);
                    match libc::WEXITSTATUS(status) {
                        0 => "ok".to_owned(),
                        errno => format!("errno={errno}"),
                    }
                }
            }
        }
    }

    pub fn perform(action: &str) -> String {
        match action.split_once(':') {
            Some(("connect", port)) => connect(port),
            Some(("signal", pid)) => {
                let pid: libc::pid_t = pid.parse().expect("pid");
                // SAFETY: signal 0 only checks permission.
                errno_verdict(unsafe { libc::kill(pid, 0) }.into())
            }
            _ => match action {
                "ptrace" => ptrace_own_child(),
                // SAFETY (all three): plain syscalls in a forked child.
                "unshare-user" => in_child(|| unsafe { libc::unshare(libc::CLONE_NEWUSER) }.into()),
                "clone-user" => in_child(|| unsafe { clone_new_user() }),
                "mount" => mount_tmpfs(),
                other => panic!("unknown kit action {other}"),
            },
        }
    }

    unsafe fn clone_new_user() -> libc::c_long {
        let flags = (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong;
        match libc::syscall(libc::SYS_clone, flags, 0usize, 0usize, 0usize, 0usize) {
            0 => libc::_exit(0),
            -1 => -1,
            child => {
                let mut status = 0;
                libc::waitpid(child as libc::pid_t, &mut status, 0);
                0
            }
        }
    }

    fn ptrace_own_child() -> String {
        // SAFETY: the child sleeps until killed; the parent attaches, then kills and reaps it.
        unsafe {
            let child = libc::fork();
            if child == 0 {
                loop {
                    libc::pause();
                }
            }
            let rc = libc::ptrace(libc::PTRACE_ATTACH, child, 0usize, 0usize);
            let verdict = errno_verdict(rc);
            libc::kill(child, libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(child, &mut status, 0);
            verdict
        }
    }

    fn mount_tmpfs() -> String {
        std::fs::create_dir_all("kit-mount").expect("mount point in the workspace");
        // SAFETY: NUL-terminated constant strings.
        let rc = unsafe {
            libc::mount(
                c"none".as_ptr(),
                c"kit-mount".as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        let verdict = errno_verdict(rc.into());
        if rc == 0 {
            // SAFETY: undo the mount the sandbox should have prevented.
            unsafe { libc::umount2(c"kit-mount".as_ptr(), libc::MNT_DETACH) };
        }
        verdict
    }

    fn connect(port: &str) -> String {
        let address = format!("127.0.0.1:{port}").parse().expect("address");
        match std::net::TcpStream::connect_timeout(&address, Duration::from_secs(3)) {
            Ok(_) => "ok".to_owned(),
            Err(e) => format!("errno={}", e.raw_os_error().unwrap_or(0)),
        }
    }
}
