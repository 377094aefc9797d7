use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;

struct Box_ {
    _root: tempfile::TempDir,
    plan: FirstbootPlan,
}

fn appliance() -> Box_ {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    std::fs::create_dir_all(r.join("boot")).expect("boot dir");
    let plan = FirstbootPlan {
        boot_dir: r.join("boot"),
        config_dir: r.join("data/etc"),
        data_dir: r.join("data"),
        hostname_file: r.join("data/system/hostname"),
        wpa_conf: r.join("data/system/wpa_supplicant-wlan0.conf"),
        ssh_marker: r.join("data/system/ssh-enabled"),
        ssh_authorized_keys: r.join("data/system/ssh/authorized_keys"),
        owner: None,
        apply_hostname: false,
    };
    Box_ { _root: root, plan }
}

fn now() -> jiff::Timestamp {
    "2026-11-25T04:45:00Z".parse().expect("timestamp")
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

/// Every file under `dir` with its contents, for "nothing changed" checks.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((
                    path.display().to_string(),
                    std::fs::read(&path).expect("read"),
                    mode(&path),
                ));
            }
        }
    }
    out.sort();
    out
}

/// Every byte on the boot partition, for "no secret left" checks.
fn boot_bytes(plan: &FirstbootPlan) -> String {
    snapshot(&plan.boot_dir)
        .into_iter()
        .map(|(_, bytes, _)| String::from_utf8_lossy(&bytes).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

const CONFIG: &str = r#"{
  gateway: { auth: { token: "owner-token-secret" } },
  models: { providers: { fake: { baseUrl: "http://127.0.0.1:9/v1", apiKey: "sk-very-secret",
    api: "openai-completions", models: [{ id: "m" }] } } },
}"#;

#[test]
fn a_full_boot_partition_is_applied_and_its_secrets_leave_it() {
    let b = appliance();
    let p = &b.plan;
    std::fs::write(p.boot_dir.join(CONFIG_FILE), CONFIG).expect("config");
    std::fs::write(
        p.boot_dir.join(WIFI_FILE),
        r#"{ ssid: "Home", password: "wifi-passphrase-secret", country: "gb" }"#,
    )
    .expect("wifi");
    std::fs::write(p.boot_dir.join(HOSTNAME_FILE), "Kitchen-Pi\n").expect("hostname");
    std::fs::write(p.boot_dir.join(SSH_FILE), "").expect("ssh");

    let report = run(p, now()).expect("first boot");
    assert!(report.refused.is_empty(), "{report:?}");

    let installed = p.config_dir.join(CONFIG_FILE);
    assert_eq!(std::fs::read_to_string(&installed).expect("config"), CONFIG);
    assert_eq!(mode(&installed), 0o600);
    assert_eq!(mode(&p.config_dir), 0o700);
    let wpa = std::fs::read_to_string(&p.wpa_conf).expect("wpa conf");
    assert!(wpa.contains("country=GB"), "{wpa}");
    assert!(wpa.contains("psk=\"wifi-passphrase-secret\""), "{wpa}");
    assert_eq!(mode(&p.wpa_conf), 0o600);
    assert_eq!(
        std::fs::read_to_string(&p.hostname_file).expect("hostname"),
        "kitchen-pi\n"
    );
    assert!(p.ssh_marker.exists());
    let token = crate::gateway::secret::read_generated(&p.data_dir).expect("token");
    assert_eq!(token.len(), 48);
    let token_path = p
        .data_dir
        .join(crate::gateway::secret::GENERATED_TOKEN_FILE);
    assert_eq!(mode(&token_path), 0o600);
    let env_path = p.data_dir.join(GATEWAY_ENV_FILE);
    assert_eq!(
        std::fs::read_to_string(&env_path).expect("env"),
        format!("OPENCLAW_GATEWAY_TOKEN={token}\n")
    );
    assert_eq!(mode(&env_path), 0o600);

    // Nothing secret stays on the boot partition; the non-secret switches do.
    assert!(!p.boot_dir.join(CONFIG_FILE).exists());
    assert!(!p.boot_dir.join(WIFI_FILE).exists());
    let left = boot_bytes(p);
    for secret in [
        "owner-token-secret",
        "sk-very-secret",
        "wifi-passphrase-secret",
    ] {
        assert!(
            !left.contains(secret),
            "{secret} left on the boot partition"
        );
    }
    assert!(p.boot_dir.join(SSH_FILE).exists());
    assert!(!p
        .data_dir
        .join(firstboot_error::FIRSTBOOT_ERROR_FILE)
        .exists());
}

#[test]
fn a_second_run_changes_nothing() {
    let b = appliance();
    let p = &b.plan;
    std::fs::write(p.boot_dir.join(CONFIG_FILE), CONFIG).expect("config");
    std::fs::write(
        p.boot_dir.join(WIFI_FILE),
        r#"{ ssid: "Home", password: "12345678", country: "DE" }"#,
    )
    .expect("wifi");
    std::fs::write(p.boot_dir.join(SSH_FILE), "").expect("ssh");
    let first = run(p, now()).expect("first run");
    assert!(first.changes() > 0);
    let root = p.data_dir.parent().expect("root");
    let before = snapshot(root);
    let second = run(p, now()).expect("second run");
    assert_eq!(second.changes(), 0, "{:?}", second.steps);
    assert_eq!(snapshot(root), before);
}

#[test]
fn the_default_hostname_is_pincer_and_a_later_one_replaces_it() {
    let b = appliance();
    let p = &b.plan;
    run(p, now()).expect("run");
    assert_eq!(
        std::fs::read_to_string(&p.hostname_file).expect("hostname"),
        "pincer\n"
    );
    std::fs::write(p.boot_dir.join(HOSTNAME_FILE), "garage").expect("hostname");
    run(p, now()).expect("run");
    assert_eq!(
        std::fs::read_to_string(&p.hostname_file).expect("hostname"),
        "garage\n"
    );
    // The file stays (not secret); without it the name set last is kept.
    std::fs::remove_file(p.boot_dir.join(HOSTNAME_FILE)).expect("remove");
    run(p, now()).expect("run");
    assert_eq!(
        std::fs::read_to_string(&p.hostname_file).expect("hostname"),
        "garage\n"
    );
}

#[test]
fn a_malformed_config_is_renamed_reported_and_the_old_one_kept() {
    let b = appliance();
    let p = &b.plan;
    std::fs::create_dir_all(&p.config_dir).expect("config dir");
    std::fs::write(p.config_dir.join(CONFIG_FILE), "{}").expect("old config");
    std::fs::write(
        p.boot_dir.join(CONFIG_FILE),
        r#"{ gateway: { prot: 1 }, models: { providers: {} } }"#,
    )
    .expect("bad config");

    let report = run(p, now()).expect("first boot never fails on user input");
    assert_eq!(report.refused, vec![CONFIG_FILE.to_string()]);
    let kept = p.boot_dir.join("pincer.json5.invalid-20261125T044500Z");
    assert!(kept.exists(), "the file is kept for the user to fix");
    assert!(!p.boot_dir.join(CONFIG_FILE).exists());
    let note =
        std::fs::read_to_string(p.boot_dir.join("pincer.json5.invalid-20261125T044500Z.txt"))
            .expect("note beside it");
    assert!(note.contains("key: gateway.prot"), "{note}");
    assert_eq!(
        std::fs::read_to_string(p.config_dir.join(CONFIG_FILE)).expect("old config"),
        "{}"
    );
    let record = firstboot_error::load(&p.data_dir).expect("record");
    let refused = &record[CONFIG_FILE];
    assert_eq!(refused.key_path.as_deref(), Some("gateway.prot"));
    assert_eq!(refused.kept_as, kept);
    // The gateway still gets its token: it starts, unconfigured or on the old config.
    assert!(crate::gateway::secret::read_generated(&p.data_dir).is_some());

    // Fixed and dropped again: applied, and the record cleared.
    std::fs::write(p.boot_dir.join(CONFIG_FILE), CONFIG).expect("good config");
    let report = run(p, now()).expect("second boot");
    assert!(report.refused.is_empty());
    assert_eq!(
        std::fs::read_to_string(p.config_dir.join(CONFIG_FILE)).expect("config"),
        CONFIG
    );
    assert_eq!(
        std::fs::read_to_string(p.config_dir.join("pincer.json5.previous")).expect("previous"),
        "{}"
    );
    assert!(!p
        .data_dir
        .join(firstboot_error::FIRSTBOOT_ERROR_FILE)
        .exists());
}

#[test]
fn a_config_with_a_syntax_error_or_too_big_is_refused() {
    let b = appliance();
    let p = &b.plan;
    std::fs::write(p.boot_dir.join(CONFIG_FILE), "{ gateway: ").expect("bad");
    let report = run(p, now()).expect("run");
    assert_eq!(report.refused, vec![CONFIG_FILE.to_string()]);
    let record = firstboot_error::load(&p.data_dir).expect("record");
    assert!(
        record[CONFIG_FILE].error.contains("syntax error"),
        "{record:?}"
    );

    let later: jiff::Timestamp = "2026-11-25T05:00:00Z".parse().expect("ts");
    let big = format!("{{ x: \"{}\" }}", "a".repeat(MAX_CONFIG_BYTES as usize));
    std::fs::write(p.boot_dir.join(CONFIG_FILE), big).expect("big");
    run(p, later).expect("run");
    let record = firstboot_error::load(&p.data_dir).expect("record");
    assert!(
        record[CONFIG_FILE].error.contains("larger than"),
        "{record:?}"
    );
    assert!(p
        .boot_dir
        .join("pincer.json5.invalid-20261125T050000Z")
        .exists());
}

#[test]
fn malformed_wifi_settings_are_refused_with_the_field_named() {
    let b = appliance();
    let p = &b.plan;
    std::fs::write(
        p.boot_dir.join(WIFI_FILE),
        r#"{ ssid: "Home", password: "short" , country: "GB" }"#,
    )
    .expect("wifi");
    let report = run(p, now()).expect("run");
    assert_eq!(report.refused, vec![WIFI_FILE.to_string()]);
    assert!(!p.wpa_conf.exists());
    let record = firstboot_error::load(&p.data_dir).expect("record");
    assert_eq!(record[WIFI_FILE].key_path.as_deref(), Some("password"));
    assert!(p
        .boot_dir
        .join("wifi.json5.invalid-20261125T044500Z")
        .exists());
}

#[test]
fn ssh_follows_the_file_on_the_boot_partition() {
    let b = appliance();
    let p = &b.plan;
    run(p, now()).expect("run");
    assert!(!p.ssh_marker.exists());
    std::fs::write(p.boot_dir.join(SSH_FILE), "").expect("ssh");
    run(p, now()).expect("run");
    assert!(p.ssh_marker.exists());
    std::fs::remove_file(p.boot_dir.join(SSH_FILE)).expect("rm");
    run(p, now()).expect("run");
    assert!(!p.ssh_marker.exists());
}

#[test]
fn authorized_keys_on_the_boot_partition_become_roots_and_a_bad_file_is_kept_aside() {
    let b = appliance();
    let p = &b.plan;
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJE7lxUeADwgZ3i0789caWPAJoNUkckqREYFuZFSnTdk me@laptop";
    run(p, now()).expect("run");
    assert!(!p.ssh_authorized_keys.exists());
    std::fs::write(p.boot_dir.join("authorized_keys"), format!("{key}\n")).expect("keys");
    run(p, now()).expect("run");
    assert_eq!(
        std::fs::read_to_string(&p.ssh_authorized_keys).expect("installed"),
        format!("{key}\n")
    );
    assert_eq!(mode(&p.ssh_authorized_keys), 0o600);
    assert_eq!(mode(p.ssh_authorized_keys.parent().expect("dir")), 0o700);
    // not secret: it stays on the boot partition, and a second run changes nothing
    assert!(p.boot_dir.join("authorized_keys").exists());
    assert_eq!(run(p, now()).expect("run").changes(), 0);
    // a malformed file is renamed with its error, and the installed keys stay
    std::fs::write(p.boot_dir.join("authorized_keys"), "not a key\n").expect("bad");
    let report = run(p, now()).expect("run");
    assert_eq!(report.refused, vec!["authorized_keys".to_string()]);
    assert!(p
        .boot_dir
        .join("authorized_keys.invalid-20261125T044500Z")
        .exists());
    assert_eq!(
        std::fs::read_to_string(&p.ssh_authorized_keys).expect("kept"),
        format!("{key}\n")
    );
}

#[test]
fn an_existing_generated_token_is_kept() {
    let b = appliance();
    let p = &b.plan;
    std::fs::create_dir_all(&p.data_dir).expect("data");
    std::fs::write(
        p.data_dir
            .join(crate::gateway::secret::GENERATED_TOKEN_FILE),
        "abc123",
    )
    .expect("token");
    run(p, now()).expect("run");
    assert_eq!(
        std::fs::read_to_string(p.data_dir.join(GATEWAY_ENV_FILE)).expect("env"),
        "OPENCLAW_GATEWAY_TOKEN=abc123\n"
    );
}

#[test]
fn hostnames_are_dns_labels() {
    assert_eq!(check_hostname("Pincer-2").as_deref(), Ok("pincer-2"));
    for bad in ["", "-a", "a-", "a.b", "a b", &"x".repeat(64)] {
        assert!(check_hostname(bad).is_err(), "{bad:?}");
    }
}
