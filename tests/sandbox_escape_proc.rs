//! Escape suite, process half: network, forbidden syscalls, signals, resource bombs, timeouts,
//! output floods, detached children and secrets in the environment. Attacks that need raw
//! syscalls run this test binary inside the sandbox as the escape kit (`escape_kit`); each
//! attack has a control (unconfined, or host network) proving it would otherwise work.

mod sandbox_support;

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use pincer::sandbox::{NetworkPolicy, ProcessLimit};
use sandbox_support::{
    assert_marker_scan_works, assert_suite_passes_as_nobody, capabilities, confined_modes,
    kit_main, mode_not_run, own_rss_bytes, processes_with_marker, rand_u64, run_kit, skip,
    unconfined, Fixture, Mode,
};

/// Inside the sandbox: performs the attack named by `PINCER_ESCAPE_KIT` and prints a verdict.
#[test]
#[ignore = "escape kit: run inside the sandbox by the escape suite"]
fn escape_kit() {
    kit_main();
}

#[tokio::test]
async fn tcp_connect_to_a_host_listener_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("host listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let action = format!("connect:{}", listener.local_addr().expect("address").port());
    let fixture = Fixture::new();
    const TEST: &str = "tcp_connect_to_a_host_listener_is_refused";
    let modes = confined_modes(TEST);
    let mut checked = 0;
    for &mode in &modes {
        if mode == Mode::LandlockOnly && capabilities().landlock_abi.is_none_or(|abi| abi < 4) {
            mode_not_run(TEST, mode, "Landlock ABI < 4 has no TCP rules");
            continue;
        }
        checked += 1;
        let verdict = run_kit(&fixture, &action, mode.policy()).await;
        assert_ne!(verdict, "ok", "[{mode:?}] reached the host listener");
        assert!(
            listener.accept().is_err(),
            "[{mode:?}] the host listener accepted a connection"
        );
    }
    if checked == 0 {
        skip(TEST, "no confined mode here has TCP rules");
        return;
    }
    let mut host_network = Mode::Full.policy();
    host_network.network = NetworkPolicy::Host;
    if modes.contains(&Mode::Full) {
        assert_eq!(
            run_kit(&fixture, &action, host_network).await,
            "ok",
            "control: host network reaches it"
        );
        assert!(
            listener.accept().is_ok(),
            "control: the listener saw the connection"
        );
    }
}

#[tokio::test]
async fn ptrace_unshare_clone_and_mount_inside_are_denied() {
    let fixture = Fixture::new();
    for mode in confined_modes("ptrace_unshare_clone_and_mount_inside_are_denied") {
        for action in ["ptrace", "unshare-user", "clone-user", "mount"] {
            let verdict = run_kit(&fixture, action, mode.policy()).await;
            assert_eq!(
                verdict,
                format!("errno={}", libc::EPERM),
                "[{mode:?}] {action} was not denied"
            );
        }
        let tools =
            "unshare -U true && echo UNSHARED; mount -t tmpfs none /tmp && echo MOUNTED; true";
        let outcome = fixture.run(tools, mode.policy()).await;
        assert!(
            !outcome.stdout.contains("UNSHARED"),
            "[{mode:?}] unshare(1) worked"
        );
        assert!(
            !outcome.stdout.contains("MOUNTED"),
            "[{mode:?}] mount(8) worked"
        );
    }
    // Control: without the sandbox the same kit creates user namespaces and traces its child.
    assert_eq!(
        run_kit(&fixture, "unshare-user", unconfined()).await,
        "ok",
        "control: unshare works"
    );
    assert_eq!(
        run_kit(&fixture, "clone-user", unconfined()).await,
        "ok",
        "control: clone works"
    );
    assert_eq!(
        run_kit(&fixture, "ptrace", unconfined()).await,
        "ok",
        "control: ptrace works"
    );
}

#[tokio::test]
async fn signalling_the_gateway_is_denied() {
    let fixture = Fixture::new();
    let action = format!("signal:{}", std::process::id());
    assert_eq!(
        run_kit(&fixture, &action, unconfined()).await,
        "ok",
        "control: the gateway is signallable"
    );
    for mode in confined_modes("signalling_the_gateway_is_denied") {
        let verdict = run_kit(&fixture, &action, mode.policy()).await;
        assert_ne!(
            verdict, "ok",
            "[{mode:?}] the sandbox can signal the gateway"
        );
    }
}

#[tokio::test]
async fn fork_bomb_is_stopped_by_the_process_limit() {
    assert_marker_scan_works();
    const TEST: &str = "fork_bomb_is_stopped_by_the_process_limit";
    let limit = capabilities().process_limit;
    let mut checked = 0;
    for mode in confined_modes(TEST) {
        let bounded = match limit {
            ProcessLimit::CgroupPids | ProcessLimit::Rlimit => true,
            ProcessLimit::PidNamespace => mode == Mode::Full,
            ProcessLimit::Unbounded => false,
        };
        if !bounded {
            mode_not_run(
                TEST,
                mode,
                &format!(
                    "no process limit applies as root here ({limit:?}): \
                     RLIMIT_NPROC never binds uid 0 and there is no delegated cgroup{}",
                    if mode == Mode::LandlockOnly {
                        " nor PID namespace"
                    } else {
                        ""
                    }
                ),
            );
            continue;
        }
        checked += 1;
        let marker = format!("forkbomb-{:x}", rand_u64());
        let mut policy = mode.policy();
        policy.limits.max_processes = 32;
        let fixture = Fixture::new();
        let mut request = fixture.request(
            &format!("bomb() {{ bomb | bomb & }}; bomb; sleep 10 # {marker}"),
            policy,
        );
        request.timeout = Some(Duration::from_secs(3));
        let outcome = pincer::sandbox::exec::run_command(request)
            .await
            .expect("ran");
        assert!(
            outcome.stderr.contains("fork")
                || outcome.stderr.contains("Resource temporarily unavailable"),
            "[{mode:?}] the process limit was never hit:\n{}",
            outcome.render()
        );
        assert_eq!(
            processes_with_marker(&marker),
            Vec::new(),
            "[{mode:?}] bomb processes survived"
        );
        assert!(Command::new("true")
            .status()
            .expect("host can still fork")
            .success());
    }
    if checked == 0 {
        skip(TEST, "no process limit applies in any confined mode here");
    }
}

/// Environment variable naming the mode the inner half of the memory bomb test runs in.
const MEMORY_BOMB_MODE_VAR: &str = "PINCER_MEMORY_BOMB_MODE";

/// Host-side half: per confined mode, runs the bomb from a dedicated process (this binary
/// re-run for `memory_bomb_inner` alone), so "the host is untouched" is that process's own
/// resident memory, not this one's, which the tests running in parallel move.
#[test]
fn memory_bomb_is_killed_and_the_host_is_untouched() {
    for mode in confined_modes("memory_bomb_is_killed_and_the_host_is_untouched") {
        let output = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--ignored",
                "--exact",
                "memory_bomb_inner",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(MEMORY_BOMB_MODE_VAR, format!("{mode:?}"))
            .output()
            .expect("inner run");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "[{mode:?}] the inner memory bomb run failed or did not run:\n{stdout}\n{stderr}"
        );
    }
}

#[tokio::test]
#[ignore = "inner half of memory_bomb_is_killed_and_the_host_is_untouched"]
async fn memory_bomb_inner() {
    let mode = match std::env::var(MEMORY_BOMB_MODE_VAR).as_deref() {
        Ok("Full") => Mode::Full,
        Ok("LandlockOnly") => Mode::LandlockOnly,
        other => panic!("run by memory_bomb_is_killed_and_the_host_is_untouched, not {other:?}"),
    };
    let fixture = Fixture::new();
    let mut policy = mode.policy();
    policy.limits.memory_bytes = 128 * 1024 * 1024;
    let rss_before = own_rss_bytes();
    let outcome = fixture
        .run("x=0123456789abcdef; while :; do x=\"$x$x\"; done", policy)
        .await;
    let rss_after = own_rss_bytes();
    assert!(
        !outcome.timed_out,
        "[{mode:?}] the bomb ran to the timeout instead of hitting the limit"
    );
    assert_ne!(
        outcome.exit_code,
        Some(0),
        "[{mode:?}] the bomb succeeded:\n{}",
        outcome.render()
    );
    let growth = rss_after.saturating_sub(rss_before);
    assert!(
        growth < 32 * 1024 * 1024,
        "[{mode:?}] the process that ran the bomb grew by {growth} bytes"
    );
}

#[tokio::test]
async fn infinite_loop_is_killed_at_the_timeout_with_its_whole_tree() {
    assert_marker_scan_works();
    for mode in confined_modes("infinite_loop_is_killed_at_the_timeout_with_its_whole_tree") {
        let marker = format!("loop-{:x}", rand_u64());
        let fixture = Fixture::new();
        let script = format!("(while :; do sleep 1; done) & while :; do :; done # {marker}");
        let mut request = fixture.request(&script, mode.policy());
        request.timeout = Some(Duration::from_secs(1));
        let outcome = pincer::sandbox::exec::run_command(request)
            .await
            .expect("ran");
        assert!(
            outcome.timed_out,
            "[{mode:?}] not reported as timed out:\n{}",
            outcome.render()
        );
        assert_eq!(
            processes_with_marker(&marker),
            Vec::new(),
            "[{mode:?}] loop processes survived"
        );
    }
}

#[tokio::test]
async fn hundred_megabytes_of_output_are_capped_keeping_head_and_tail() {
    const FLOOD_BYTES: u64 = 100_000_000;
    for mode in confined_modes("hundred_megabytes_of_output_are_capped_keeping_head_and_tail") {
        let fixture = Fixture::new();
        let command = format!("echo START; head -c {FLOOD_BYTES} /dev/zero; echo END");
        let outcome = fixture.run(&command, mode.policy()).await;
        assert_eq!(
            outcome.exit_code,
            Some(0),
            "[{mode:?}] {}",
            outcome.status_line()
        );
        assert_eq!(
            outcome.stdout_bytes,
            FLOOD_BYTES + 10,
            "[{mode:?}] every byte counted"
        );
        assert!(outcome.truncated, "[{mode:?}] not marked truncated");
        assert!(
            outcome.stdout.starts_with("START\n"),
            "[{mode:?}] head lost"
        );
        assert!(outcome.stdout.ends_with("END\n"), "[{mode:?}] tail lost");
        assert!(
            outcome.stdout.contains("bytes elided"),
            "[{mode:?}] no elision marker"
        );
        assert!(
            outcome.stdout.len() < 128 * 1024,
            "[{mode:?}] captured {} bytes",
            outcome.stdout.len()
        );
    }
}

#[tokio::test]
async fn double_forked_detached_child_is_killed_with_the_tree() {
    assert_marker_scan_works();
    for mode in confined_modes("double_forked_detached_child_is_killed_with_the_tree") {
        let marker = format!("detached-{:x}", rand_u64());
        let fixture = Fixture::new();
        let script = format!(
            "(setsid sh -c 'while :; do sleep 1; done # {marker}' >/dev/null 2>&1 &); \
             (sh -c 'trap \"\" HUP; while :; do sleep 1; done # {marker}' >/dev/null 2>&1 &); echo detached"
        );
        let outcome = fixture.run(&script, mode.policy()).await;
        assert_eq!(
            outcome.stdout,
            "detached\n",
            "[{mode:?}] {}",
            outcome.render()
        );
        assert!(
            !outcome.timed_out,
            "[{mode:?}] the run waited for the detached child"
        );
        assert_eq!(
            processes_with_marker(&marker),
            Vec::new(),
            "[{mode:?}] the detached child survived"
        );
    }
}

/// Host-side half of the secret test: re-runs this binary with secrets in its initial
/// environment and argv (where a gateway's API keys live), then checks the inner run passed.
#[test]
fn environment_contains_no_secret() {
    let secret = format!("sk-fake-{:016x}", rand_u64());
    let output = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--ignored",
            "--exact",
            "secret_probe_inner",
            "--nocapture",
            "--test-threads=1",
            &secret,
        ])
        .env("PINCER_SECRET_PROBE", &secret)
        .env("OPENAI_API_KEY", &secret)
        .env("PINCER_GATEWAY_TOKEN", &secret)
        .output()
        .expect("inner run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "inner secret probe failed:\n{stdout}\n{stderr}"
    );
    let skipped = "SKIPPED: environment_contains_no_secret: ";
    if let Some(reason) = stderr.lines().find_map(|line| line.strip_prefix(skipped)) {
        skip("environment_contains_no_secret", reason);
    }
    assert!(
        stdout.contains("1 passed"),
        "the inner probe did not run:\n{stdout}"
    );
}

#[tokio::test]
#[ignore = "inner half of environment_contains_no_secret"]
async fn secret_probe_inner() {
    let secret =
        std::env::var("PINCER_SECRET_PROBE").expect("run by environment_contains_no_secret");
    let own_environ = std::fs::read("/proc/self/environ").expect("own environ");
    assert!(
        String::from_utf8_lossy(&own_environ).contains(&secret),
        "control: the secret is in the initial env"
    );
    let fixture = Fixture::new();
    let script = format!(
        "env; cat /proc/1/environ /proc/1/cmdline; cat /proc/{pid}/environ /proc/{pid}/cmdline; \
         for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat \"$f\"; done; true",
        pid = std::process::id()
    );
    let control = fixture
        .run(
            &format!("cat /proc/{}/cmdline", std::process::id()),
            unconfined(),
        )
        .await;
    assert!(
        control.stdout.contains(&secret),
        "control: unconfined commands can read the gateway's argv"
    );
    for mode in confined_modes("environment_contains_no_secret") {
        let outcome = fixture.run(&script, mode.policy()).await;
        let leaked = outcome.stdout.contains(&secret) || outcome.stderr.contains(&secret);
        assert!(
            !leaked,
            "[{mode:?}] the secret leaked:\n{}",
            outcome.render()
        );
        assert!(
            outcome.stdout.contains("HOME="),
            "[{mode:?}] env did not run:\n{}",
            outcome.render()
        );
    }
    let outcome = fixture.run("env", unconfined()).await;
    assert!(
        !outcome.stdout.contains(&secret),
        "even unconfined commands get a scrubbed environment"
    );
}

#[test]
fn suite_passes_as_an_unprivileged_user() {
    assert_suite_passes_as_nobody(
        "process escape suite",
        "suite_passes_as_an_unprivileged_user",
    );
}
