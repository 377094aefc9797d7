//! Escape suite, file-system half: reading host secrets, writing outside the workspace, and
//! seeing the host's tree. Every attack runs in each confined mode this host supports and is
//! also run unconfined (mode off) as a control proving the attack would otherwise succeed.

mod sandbox_support;

use std::os::unix::fs::symlink;

use pincer::sandbox::exec::ExecOutcome;
use sandbox_support::{
    assert_suite_passes_as_nobody, confined_modes, is_root, path_text, say, unconfined, Fixture,
    Mode,
};

fn leaked(outcome: &ExecOutcome, secret: &str) -> bool {
    outcome.stdout.contains(secret) || outcome.stderr.contains(secret)
}

#[tokio::test]
async fn reading_etc_shadow_is_contained() {
    let fixture = Fixture::new();
    let command = "cat /etc/shadow; grep -c : /etc/shadow";
    if is_root() {
        let control = fixture.run(command, unconfined()).await;
        assert!(
            control.stdout.contains("root:"),
            "control: root reads /etc/shadow unconfined"
        );
    } else {
        say("NOTE reading_etc_shadow_is_contained: not root, the host itself denies /etc/shadow");
    }
    for mode in confined_modes("reading_etc_shadow_is_contained") {
        let outcome = fixture.run(command, mode.policy()).await;
        assert!(
            !outcome.stdout.contains("root:"),
            "[{mode:?}] /etc/shadow leaked:\n{}",
            outcome.render()
        );
        assert_ne!(
            outcome.exit_code,
            Some(0),
            "[{mode:?}] reading /etc/shadow succeeded"
        );
    }
}

#[tokio::test]
async fn reading_gateway_config_and_data_outside_the_workspace_is_contained() {
    let fixture = Fixture::new();
    let command = format!(
        "cat {config}; cat {data}/sessions.mdb; ls -la {data}; grep -r pincer-secret {outside}",
        config = path_text(&fixture.gateway_config),
        data = path_text(&fixture.gateway_data),
        outside = path_text(&fixture.outside),
    );
    let control = fixture.run(&command, unconfined()).await;
    assert!(
        leaked(&control, &fixture.secret),
        "control: the secret is readable unconfined"
    );
    for mode in confined_modes("reading_gateway_config_and_data_outside_the_workspace_is_contained")
    {
        let outcome = fixture.run(&command, mode.policy()).await;
        assert!(
            !leaked(&outcome, &fixture.secret),
            "[{mode:?}] gateway secret leaked:\n{}",
            outcome.render()
        );
        assert!(
            !outcome.stdout.contains("sessions.mdb"),
            "[{mode:?}] data dir listed"
        );
    }
}

#[tokio::test]
async fn reading_ssh_keys_is_contained() {
    let fixture = Fixture::new();
    let real_home = std::env::var("HOME").unwrap_or_else(|_| "/root".to_owned());
    let fake_key = format!("cat {}/.ssh/id_ed25519", path_text(&fixture.fake_home));
    // The control reads only the fake key: the real one never needs to leave its file.
    let control = fixture.run(&fake_key, unconfined()).await;
    assert!(
        leaked(&control, &fixture.secret),
        "control: the key is readable unconfined"
    );
    let command = format!(
        "cat ~/.ssh/id_ed25519; {fake_key}; ls -la {real_home}/.ssh; cat {real_home}/.ssh/*"
    );
    for mode in confined_modes("reading_ssh_keys_is_contained") {
        let outcome = fixture.run(&command, mode.policy()).await;
        assert!(
            !leaked(&outcome, &fixture.secret),
            "[{mode:?}] ssh key leaked:\n{}",
            outcome.render()
        );
        assert!(
            !outcome.stdout.contains("PRIVATE KEY"),
            "[{mode:?}] a real key leaked"
        );
    }
}

/// Every way out that the suite tries, as one script; returns the host files it would create.
fn write_attacks(fixture: &Fixture) -> (String, Vec<std::path::PathBuf>) {
    let outside = path_text(&fixture.outside);
    let script = format!(
        "echo pwned > {outside}/absolute.txt; \
         echo pwned > ../dotdot.txt; echo pwned > ../../dotdot2.txt; \
         ln -s {outside} inside-link; echo pwned > inside-link/via-symlink.txt; \
         echo pwned > host-link/via-host-symlink.txt; \
         ln {outside}/target.txt hard-link; echo pwned >> hard-link; \
         echo pwned >> {outside}/target.txt; true"
    );
    let created = vec![
        fixture.outside.join("absolute.txt"),
        fixture.base().join("dotdot.txt"),
        fixture.outside.join("via-symlink.txt"),
        fixture.outside.join("via-host-symlink.txt"),
    ];
    (script, created)
}

#[tokio::test]
async fn writing_outside_the_workspace_is_contained() {
    for mode in confined_modes("writing_outside_the_workspace_is_contained") {
        let fixture = Fixture::new();
        // A symlink planted on the host side (e.g. by an earlier file-tool write).
        symlink(&fixture.outside, fixture.workspace.join("host-link")).expect("host symlink");
        let (script, would_create) = write_attacks(&fixture);
        let outcome = fixture.run(&script, mode.policy()).await;
        for path in &would_create {
            assert!(
                !path.exists(),
                "[{mode:?}] {} was created:\n{}",
                path.display(),
                outcome.render()
            );
        }
        let target = std::fs::read_to_string(fixture.outside.join("target.txt")).expect("target");
        assert_eq!(target, "original\n", "[{mode:?}] hard link target modified");
        assert!(
            fixture
                .workspace
                .join("inside-link")
                .symlink_metadata()
                .is_ok(),
            "[{mode:?}] workspace stays writable"
        );
    }
    let fixture = Fixture::new();
    symlink(&fixture.outside, fixture.workspace.join("host-link")).expect("host symlink");
    let (script, would_create) = write_attacks(&fixture);
    fixture.run(&script, unconfined()).await;
    assert!(
        would_create[0].exists(),
        "control: an absolute write succeeds unconfined"
    );
    assert!(
        would_create[3].exists(),
        "control: a host symlink write succeeds unconfined"
    );
    let target = std::fs::read_to_string(fixture.outside.join("target.txt")).expect("target");
    assert_ne!(
        target, "original\n",
        "control: the target is writable unconfined"
    );
}

#[tokio::test]
async fn find_from_root_sees_only_the_sandbox() {
    let fixture = Fixture::new();
    std::fs::write(fixture.workspace.join("sentinel.txt"), "here").expect("sentinel");
    let top_level = "find / -mindepth 1 -maxdepth 1 | sort";
    let control = fixture.run(top_level, unconfined()).await;
    assert!(
        control
            .stdout
            .lines()
            .any(|l| l == "/root" || l == "/home" || l == "/var"),
        "control sees the host"
    );
    let allowed = [
        "/bin",
        "/dev",
        "/etc",
        "/proc",
        "/tmp",
        "/usr",
        "/workspace",
    ];
    let modes = confined_modes("find_from_root_sees_only_the_sandbox");
    if modes.contains(&Mode::LandlockOnly) {
        let outcome = fixture.run(top_level, Mode::LandlockOnly.policy()).await;
        assert!(
            outcome.stdout.trim().is_empty(),
            "[LandlockOnly] / is listable:\n{}",
            outcome.render()
        );
    }
    if !modes.contains(&Mode::Full) {
        return;
    }
    let outcome = fixture.run(top_level, Mode::Full.policy()).await;
    for entry in outcome.stdout.lines() {
        let known = allowed.contains(&entry) || entry.starts_with("/lib");
        assert!(
            known,
            "[Full] unexpected top-level entry {entry}:\n{}",
            outcome.render()
        );
    }
    let base_name = fixture
        .base()
        .file_name()
        .and_then(|n| n.to_str())
        .expect("name")
        .to_owned();
    let search = format!(
        "find / -path /proc -prune -o \\( -name {base_name} -o -name sentinel.txt \\) -print"
    );
    let outcome = fixture.run(&search, Mode::Full.policy()).await;
    assert_eq!(
        outcome.stdout.trim(),
        "/workspace/sentinel.txt",
        "[Full] host tree visible:\n{}",
        outcome.render()
    );
}

#[test]
fn suite_passes_as_an_unprivileged_user() {
    assert_suite_passes_as_nobody(
        "file-system escape suite",
        "suite_passes_as_an_unprivileged_user",
    );
}
