//! The `pincer` command line: every subcommand as a user runs it.

mod support;

use std::process::{Command, Output};

use support::gateway::GatewayProcess;

const TOKEN: &str = "cli-test-token";

fn pincer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pincer"))
        .args(args)
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_DATA_DIR")
        .env_remove("OPENCLAW_GATEWAY_TOKEN")
        .output()
        .expect("run pincer")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The subcommands listed in the "Commands:" section of a `--help` text (without `help`).
fn listed_subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Every command path under `prefix`, found by walking the `--help` texts, each checked to
/// answer `--help` with the shared flags.
fn walk_help(prefix: &[String], found: &mut Vec<Vec<String>>) {
    let mut args: Vec<&str> = prefix.iter().map(String::as_str).collect();
    args.push("--help");
    let out = pincer(&args);
    let help = text(&out.stdout);
    assert!(out.status.success(), "{prefix:?} --help failed");
    assert!(
        help.contains("--config") && help.contains("--data-dir"),
        "{prefix:?} help lists the shared flags:\n{help}"
    );
    for sub in listed_subcommands(&help) {
        let mut path = prefix.to_vec();
        path.push(sub);
        found.push(path.clone());
        walk_help(&path, found);
    }
}

#[test]
fn version_and_help_on_every_subcommand() {
    let out = pincer(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout).trim(),
        format!("pincer {}", env!("CARGO_PKG_VERSION"))
    );
    let mut found = Vec::new();
    walk_help(&[], &mut found);
    let found: Vec<String> = found.iter().map(|path| path.join(" ")).collect();
    // The walk reaches the nested commands too (a check that it parses the help at all).
    for known in [
        "gateway",
        "config check",
        "config import-openclaw",
        "config keys",
        "devices list",
    ] {
        assert!(
            found.iter().any(|path| path == known),
            "{known:?} not among {found:?}"
        );
    }
}

#[test]
fn config_check_accepts_good_files_and_names_bad_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("good.json5");
    std::fs::write(&good, "{ gateway: { port: 19000 }, // comment\n }").expect("write");
    let out = pincer(&["config", "check", good.to_str().expect("utf8")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("config ok"));

    let bad = dir.path().join("bad.json5");
    std::fs::write(&bad, "{ gateway: { prot: 19000 } }").expect("write");
    let out = pincer(&["config", "check", bad.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("gateway.prot") && err.contains("gateway.port"),
        "{err}"
    );

    let proxy = dir.path().join("proxy.json5");
    std::fs::write(&proxy, "{ gateway: { auth: { mode: 'trusted-proxy' } } }").expect("write");
    let out = pincer(&["config", "check", proxy.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("`gateway.auth.mode: trusted-proxy` is not supported by pincer"),
        "{err}"
    );

    let wrong_type = dir.path().join("type.json5");
    std::fs::write(&wrong_type, "{ gateway: { port: \"abc\" } }").expect("write");
    let err = text(&pincer(&["config", "check", wrong_type.to_str().expect("utf8")]).stderr);
    assert!(err.contains("gateway.port") && err.contains("abc"), "{err}");
}

#[test]
fn config_check_names_a_known_openclaw_key_as_unsupported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("openclaw-ish.json5");
    std::fs::write(&file, "{ logging: { consoleStyle: \"json\" } }").expect("write");
    let out = pincer(&["config", "check", file.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("logging.consoleStyle is not supported by pincer"),
        "{err}"
    );
    assert!(!err.contains("unknown key"), "{err}");
}

#[test]
fn config_keys_lists_every_key_with_default_and_meaning() {
    let out = pincer(&["config", "keys"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing = text(&out.stdout);
    let port = listing
        .lines()
        .find(|line| line.starts_with("gateway.port "))
        .unwrap_or_else(|| panic!("gateway.port not listed:\n{listing}"));
    assert!(port.contains("18789") && port.contains("port"), "{port}");
    let keys = pincer::config::accepted_keys().expect("schema traces");
    assert_eq!(listing.lines().count(), keys.len());
    assert!(!listing.contains("(not described)"), "{listing}");
}

#[test]
fn config_show_redacts_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("pincer.json5");
    std::fs::write(
        &file,
        "{ gateway: { auth: { token: \"super-secret-value\" } } }",
    )
    .expect("write");
    let out = pincer(&["--config", file.to_str().expect("utf8"), "config", "show"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        !shown.contains("super-secret-value"),
        "secret leaked:\n{shown}"
    );
    assert!(
        shown.contains("\"port\": 18789"),
        "effective defaults shown"
    );
}

#[test]
fn import_openclaw_converts_and_reports_what_it_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("openclaw.json");
    std::fs::write(
        &file,
        r#"{ "gateway": { "mode": "local", "port": 18789, "auth": { "mode": "token", "token": "t" }, "push": { "apns": {} } },
             "agents": { "defaults": { "workspace": "~/w" } } }"#,
    )
    .expect("write");
    let out_file = dir.path().join("pincer.json5");
    let out = pincer(&[
        "config",
        "import-openclaw",
        file.to_str().expect("utf8"),
        "--output",
        out_file.to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("gateway.push"),
        "dropped key reported: {}",
        text(&out.stderr)
    );
    let check = pincer(&["config", "check", out_file.to_str().expect("utf8")]);
    assert!(
        check.status.success(),
        "imported config validates: {}",
        text(&check.stderr)
    );
}

#[test]
fn doctor_reports_paths_limits_and_a_store_round_trip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = pincer(&["doctor", "--data-dir", dir.path().to_str().expect("utf8")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert!(report.contains("store: write/read ok"), "{report}");
    assert!(
        report.contains("board: ") && report.contains("limits: "),
        "{report}"
    );
    assert!(report.contains(&dir.path().display().to_string()));
    assert!(
        report.contains("sandbox layers on this host") && report.contains("landlock"),
        "{report}"
    );
}

#[test]
fn status_and_devices_talk_to_a_running_gateway() {
    let gateway = GatewayProcess::start("{}", &["--port", "0", "--token", TOKEN]);
    let url = gateway.url();
    let data = gateway.data_dir();
    let data = data.to_str().expect("utf8");
    let out = pincer(&[
        "status",
        "--url",
        &url,
        "--token",
        TOKEN,
        "--data-dir",
        data,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains(&format!("pincer {}", env!("CARGO_PKG_VERSION"))),
        "{shown}"
    );
    let out = pincer(&[
        "devices",
        "list",
        "--url",
        &url,
        "--token",
        TOKEN,
        "--data-dir",
        data,
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        list["paired"][0]["clientId"], "cli",
        "the CLI paired itself on loopback: {list}"
    );
    let out = pincer(&[
        "status",
        "--url",
        &url,
        "--token",
        "wrong",
        "--data-dir",
        data,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("token mismatch"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn status_without_a_gateway_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = pincer(&[
        "status",
        "--url",
        "ws://127.0.0.1:9",
        "--data-dir",
        dir.path().to_str().expect("utf8"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("is `pincer gateway` running?"),
        "{}",
        text(&out.stderr)
    );
}
