//! Behaviour of the sandbox runner a caller relies on: output and exit codes, the workspace as
//! home and working directory, the scrubbed environment, dropped privileges, the isolated
//! network, policy modes and refusals, concurrency, and the host's capability report.

mod sandbox_support;

use std::path::PathBuf;
use std::time::Duration;

use pincer::sandbox::exec::{run_command, ExecRequest};
use pincer::sandbox::{Layer, SandboxError, SandboxMode, SessionScope};
use sandbox_support::{
    assert_suite_passes_as_nobody, capabilities, confined_modes, path_text, processes_with_marker,
    rand_u64, report, skip, unconfined, Fixture, Mode,
};

#[test]
fn capability_report_names_every_layer() {
    let summary = capabilities().summary();
    report(&summary);
    for layer in [
        "namespaces:",
        "landlock",
        "seccomp",
        "cgroup v2:",
        "process limit:",
    ] {
        assert!(summary.contains(layer), "{layer} missing from:\n{summary}");
    }
}

#[tokio::test]
async fn output_exit_code_and_stderr_are_reported() {
    let fixture = Fixture::new();
    for mode in confined_modes("output_exit_code_and_stderr_are_reported") {
        let outcome = fixture
            .run("echo out; echo err >&2; exit 3", mode.policy())
            .await;
        assert_eq!(
            outcome.exit_code,
            Some(3),
            "[{mode:?}] {}",
            outcome.render()
        );
        assert_eq!(
            (outcome.stdout.as_str(), outcome.stderr.as_str()),
            ("out\n", "err\n"),
            "[{mode:?}]"
        );
        assert!(
            outcome.confinement.confined && outcome.confinement.landlock.is_some(),
            "[{mode:?}]"
        );
    }
}

#[tokio::test]
async fn commands_run_in_the_workspace_which_is_also_home() {
    let fixture = Fixture::new();
    std::fs::write(fixture.workspace.join("notes.txt"), "hello").expect("workspace file");
    for mode in confined_modes("commands_run_in_the_workspace_which_is_also_home") {
        let outcome = fixture
            .run(
                "pwd; echo $HOME; cat notes.txt; echo made > made.txt",
                mode.policy(),
            )
            .await;
        let inside = match mode {
            Mode::Full => "/workspace".to_owned(),
            Mode::LandlockOnly => path_text(&fixture.workspace).to_owned(),
        };
        assert_eq!(
            outcome.stdout,
            format!("{inside}\n{inside}\nhello"),
            "[{mode:?}] {}",
            outcome.render()
        );
        let made =
            std::fs::read_to_string(fixture.workspace.join("made.txt")).expect("written through");
        assert_eq!(made, "made\n", "[{mode:?}]");
    }
}

#[tokio::test]
async fn a_read_only_workspace_is_readable_and_unchanged_beside_the_writable_one() {
    // `workspaceAccess: "ro"`: the agent's workspace read-only next to a private writable one.
    let fixture = Fixture::new();
    let agent = fixture.base().join("agent-workspace");
    std::fs::create_dir_all(&agent).expect("agent workspace");
    std::fs::write(agent.join("notes.txt"), "agent-notes\n").expect("notes");
    for mode in
        confined_modes("a_read_only_workspace_is_readable_and_unchanged_beside_the_writable_one")
    {
        let seen = match mode {
            Mode::Full => "/agent".to_owned(),
            Mode::LandlockOnly => path_text(&agent).to_owned(),
        };
        let mut request = fixture.request(
            &format!(
                "cat {seen}/notes.txt; echo x >> {seen}/notes.txt; touch {seen}/planted; \
                 rm -f {seen}/notes.txt; echo private > private.txt"
            ),
            mode.policy(),
        );
        request.read_only_workspace = Some(agent.clone());
        let outcome = run_command(request).await.expect("ran");
        assert!(
            outcome.stdout.contains("agent-notes"),
            "[{mode:?}] {}",
            outcome.render()
        );
        assert_eq!(
            std::fs::read_to_string(agent.join("notes.txt")).expect("notes kept"),
            "agent-notes\n",
            "[{mode:?}] {}",
            outcome.render()
        );
        assert!(!agent.join("planted").exists(), "[{mode:?}]");
        assert_eq!(
            std::fs::read_to_string(fixture.workspace.join("private.txt")).expect("private"),
            "private\n",
            "[{mode:?}]"
        );
    }
    // Neither workspace may contain the other: the read-only one would be writable.
    let mut nested = fixture.request("true", unconfined());
    nested.read_only_workspace = Some(fixture.workspace.clone());
    let refused = run_command(nested).await.expect_err("nested workspaces");
    assert!(
        refused.to_string().contains("readOnlyWorkspace"),
        "{refused}"
    );
}

#[tokio::test]
async fn workdir_selects_a_directory_inside_the_workspace_and_nothing_outside() {
    let fixture = Fixture::new();
    std::fs::create_dir(fixture.workspace.join("sub")).expect("subdir");
    for mode in
        confined_modes("workdir_selects_a_directory_inside_the_workspace_and_nothing_outside")
    {
        let mut request = fixture.request("pwd", mode.policy());
        request.workdir = Some(PathBuf::from("sub"));
        let outcome = run_command(request).await.expect("ran");
        assert!(
            outcome.stdout.trim_end().ends_with("/sub"),
            "[{mode:?}] {}",
            outcome.render()
        );
        let mut escaping = fixture.request("pwd", mode.policy());
        escaping.workdir = Some(PathBuf::from("../outside"));
        match run_command(escaping).await {
            Err(SandboxError::InvalidRequest { field, .. }) => assert_eq!(field, "workdir"),
            other => panic!("[{mode:?}] escaping workdir accepted: {other:?}"),
        }
    }
}

#[tokio::test]
async fn every_capability_is_dropped_and_no_new_privs_is_set() {
    if !confined_modes("every_capability_is_dropped_and_no_new_privs_is_set").contains(&Mode::Full)
        || !capabilities().proc_mount.is_available()
    {
        skip(
            "every_capability_is_dropped_and_no_new_privs_is_set",
            "needs namespaces and /proc",
        );
        return;
    }
    let fixture = Fixture::new();
    let outcome = fixture
        .run(
            "grep -E '^(Cap|NoNewPrivs|Seccomp:)' /proc/self/status; id -u",
            Mode::Full.policy(),
        )
        .await;
    for line in [
        "CapInh:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
    ] {
        assert!(
            outcome.stdout.contains(line),
            "{line} missing:\n{}",
            outcome.render()
        );
    }
    for line in [
        "CapBnd:\t0000000000000000",
        "CapAmb:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
    ] {
        assert!(
            outcome.stdout.contains(line),
            "{line} missing:\n{}",
            outcome.render()
        );
    }
    assert!(
        outcome.stdout.ends_with("0\n"),
        "the service user is root inside"
    );
}

#[tokio::test]
async fn environment_is_only_the_sandbox_variables_and_configured_extras() {
    let fixture = Fixture::new();
    for mode in confined_modes("environment_is_only_the_sandbox_variables_and_configured_extras") {
        let mut policy = mode.policy();
        policy.env.insert("EDITOR".into(), "vi".into());
        let mut request = fixture.request("env | cut -d= -f1 | sort | tr '\\n' ' '", policy);
        request.env.push(("PER_CALL".into(), "1".into()));
        let outcome = run_command(request).await.expect("ran");
        let expected = match mode {
            Mode::Full => "EDITOR HOME LANG PATH PER_CALL PWD TERM ",
            Mode::LandlockOnly => "EDITOR HOME LANG PATH PER_CALL PWD TERM TMPDIR ",
        };
        assert_eq!(outcome.stdout, expected, "[{mode:?}] {}", outcome.render());
    }
}

#[tokio::test]
async fn isolated_network_namespace_has_only_loopback_and_its_own_hostname() {
    let modes = confined_modes("isolated_network_namespace_has_only_loopback_and_its_own_hostname");
    if !modes.contains(&Mode::Full) || !capabilities().proc_mount.is_available() {
        skip(
            "isolated_network_namespace_has_only_loopback_and_its_own_hostname",
            "needs namespaces and /proc",
        );
        return;
    }
    let fixture = Fixture::new();
    let command = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; hostname";
    let outcome = fixture.run(command, Mode::Full.policy()).await;
    assert_eq!(
        outcome.stdout,
        "lo\npincer-sandbox\n",
        "{}",
        outcome.render()
    );
    assert!(outcome.confinement.network_isolated);
    let control = fixture.run(command, unconfined()).await;
    assert_ne!(
        control.stdout, outcome.stdout,
        "control: the host has other interfaces or another name"
    );
}

#[tokio::test]
async fn a_required_layer_that_is_skipped_is_refused_by_name() {
    let fixture = Fixture::new();
    let mut policy = Mode::Full.policy();
    policy.require = vec![Layer::Landlock];
    policy.skip_layers = vec![Layer::Landlock];
    match run_command(fixture.request("true", policy)).await {
        Err(SandboxError::Refused { missing, detail }) => {
            assert_eq!(missing, vec![Layer::Landlock]);
            assert!(detail.contains("skipLayers"), "{detail}");
        }
        other => panic!("ran despite a missing required layer: {other:?}"),
    }
    let mut neither = Mode::Full.policy();
    neither.require.clear();
    neither.skip_layers = vec![Layer::Namespaces, Layer::Landlock];
    let error = run_command(fixture.request("true", neither))
        .await
        .expect_err("never unconfined silently");
    assert!(
        error.to_string().contains("namespaces, landlock"),
        "{error}"
    );
}

#[tokio::test]
async fn a_required_cgroup_is_refused_on_a_host_without_delegation() {
    let status = &capabilities().cgroup;
    if status.is_available() {
        skip(
            "a_required_cgroup_is_refused_on_a_host_without_delegation",
            "this host delegates a cgroup",
        );
        return;
    }
    let fixture = Fixture::new();
    let mut policy = Mode::Full.policy();
    policy.require = vec![Layer::Cgroup];
    let error = run_command(fixture.request("true", policy))
        .await
        .expect_err("refused");
    let message = error.to_string();
    assert!(
        message.contains("missing cgroup") && message.contains(&status.to_string()),
        "{message}"
    );
}

#[tokio::test]
async fn main_session_under_non_main_mode_runs_unconfined_with_limits() {
    let fixture = Fixture::new();
    let mut request = fixture.request("pwd; ulimit -n; env | wc -l", Mode::Full.policy());
    request.policy.mode = SandboxMode::NonMain;
    request.policy.require.clear();
    request.session = SessionScope::Main;
    let outcome = run_command(request.clone()).await.expect("ran");
    assert!(
        !outcome.confinement.confined,
        "main session confined under non-main"
    );
    let lines: Vec<&str> = outcome.stdout.lines().collect();
    assert_eq!(
        lines[..2],
        [path_text(&fixture.workspace), "256"],
        "{}",
        outcome.render()
    );
    assert!(
        lines[2].trim().parse::<u32>().expect("count") <= 5,
        "environment not scrubbed"
    );
    request.session = SessionScope::NonMain;
    let confined = run_command(request).await.expect("ran");
    assert!(
        confined.confinement.confined,
        "non-main session ran unconfined"
    );
}

#[tokio::test]
async fn a_file_cannot_grow_past_the_file_size_limit() {
    const LIMIT_BYTES: u64 = 1024 * 1024;
    for mode in confined_modes("a_file_cannot_grow_past_the_file_size_limit") {
        let fixture = Fixture::new();
        let mut policy = mode.policy();
        policy.limits.max_file_bytes = LIMIT_BYTES;
        let outcome = fixture
            .run("exec head -c 3000000 /dev/zero > big.bin", policy)
            .await;
        assert_eq!(
            outcome.signal,
            Some(libc::SIGXFSZ),
            "[{mode:?}] {}",
            outcome.render()
        );
        let size = std::fs::metadata(fixture.workspace.join("big.bin"))
            .expect("partial file")
            .len();
        assert_eq!(size, LIMIT_BYTES, "[{mode:?}] file grew to {size} bytes");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_keep_their_outputs_apart() {
    let fixture = Fixture::new();
    let Some(mode) = confined_modes("concurrent_runs_keep_their_outputs_apart")
        .first()
        .copied()
    else {
        return;
    };
    let runs = (0..6).map(|index| {
        let request: ExecRequest = fixture.request(
            &format!("for i in $(seq 500); do echo run-{index}; done"),
            mode.policy(),
        );
        tokio::spawn(run_command(request))
    });
    let outcomes: Vec<_> = futures_util::future::join_all(runs).await;
    for (index, outcome) in outcomes.into_iter().enumerate() {
        let outcome = outcome.expect("task").expect("ran");
        assert_eq!(
            outcome.stdout,
            format!("run-{index}\n").repeat(500),
            "run {index} output mixed up"
        );
    }
}

/// Polls `condition` for up to `POLL_LIMIT` (an upper bound for slow machines, not a timing claim).
async fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    const POLL_LIMIT: Duration = Duration::from_secs(10);
    let started = std::time::Instant::now();
    while started.elapsed() < POLL_LIMIT {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    condition()
}

#[tokio::test]
async fn dropping_a_run_kills_its_whole_process_tree() {
    for mode in confined_modes("dropping_a_run_kills_its_whole_process_tree") {
        let marker = format!("dropped-{:x}", rand_u64());
        let fixture = Fixture::new();
        let script = format!("(while :; do sleep 1; done) & while :; do sleep 1; done # {marker}");
        let run = tokio::spawn(run_command(fixture.request(&script, mode.policy())));
        let started = eventually(|| processes_with_marker(&marker).len() >= 2).await;
        if !started {
            panic!("[{mode:?}] the command never started: {:?}", run.await);
        }
        run.abort();
        assert!(
            run.await.is_err_and(|e| e.is_cancelled()),
            "[{mode:?}] the run was not cancelled"
        );
        let gone = eventually(|| processes_with_marker(&marker).is_empty()).await;
        assert!(
            gone,
            "[{mode:?}] processes survived the dropped run: {:?}",
            processes_with_marker(&marker)
        );
    }
}

#[test]
fn suite_passes_as_an_unprivileged_user() {
    assert_suite_passes_as_nobody("runner suite", "suite_passes_as_an_unprivileged_user");
}
