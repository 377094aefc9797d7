//! Safe updates against a real RAUC (Debian's 1.8) on a private bus (`support::rauc`):
//! `pincer update status | apply | confirm`, `pincer store schema`, the gateway's
//! `update.status` / `update.apply` through a WebSocket client, and pincer's D-Bus client facing
//! malformed and oversized input. Bundles are plain-format (this kernel has loop devices and
//! squashfs but no device mapper, so verity bundles cannot be installed here).

mod support;

use std::process::{Command, Output};

use pincer::system::rauc::{Mark, Rauc, RaucError};
use serde_json::{json, Value};
use support::gateway::GatewayProcess;
use support::rauc::{sha256_file, sha256_prefix, BundleSpec, RaucSystem, Signer, COMPATIBLE};
use support::ws_client::TestClient;

const TOKEN: &str = "update-test-token";

fn pincer(args: &[&str], env: &[(String, String)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pincer"))
        .args(args)
        .env_remove("PINCER_DATA_DIR")
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_UPDATE_STATE_DIR")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .expect("run pincer")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn status_json(rauc: &RaucSystem) -> Value {
    let out = pincer(&["update", "status", "--json"], &rauc.env());
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

/// Sets this process's bus to `rauc`'s, for the library-level calls.
fn use_bus(rauc: &RaucSystem) {
    std::env::set_var("DBUS_SYSTEM_BUS_ADDRESS", &rauc.bus_address);
}

#[test]
fn update_status_reads_raucs_slots_and_properties() {
    let Some(rauc) = RaucSystem::start("update_status_reads_raucs_slots_and_properties") else {
        return;
    };
    let status = status_json(&rauc);
    assert_eq!(status["available"], true, "{status}");
    assert_eq!(status["compatible"], COMPATIBLE);
    assert_eq!(status["bootSlot"], "A");
    assert_eq!(status["booted"], "rootfs.0");
    assert_eq!(status["primary"], "rootfs.0");
    assert_eq!(status["operation"], "idle");
    assert_eq!(
        status["lastUpdate"],
        Value::Null,
        "a flashed system has no update"
    );
    let slots = status["slots"].as_array().expect("slots");
    assert_eq!(slots.len(), 2, "{status}");
    let a = slots
        .iter()
        .find(|s| s["name"] == "rootfs.0")
        .expect("rootfs.0");
    assert_eq!(a["state"], "booted");
    assert_eq!(a["bootStatus"], "good");
    assert_eq!(a["bootname"], "A");
    let out = pincer(&["update", "status"], &rauc.env());
    let shown = text(&out.stdout);
    assert!(
        shown.contains("booted rootfs.0 (A), primary rootfs.0, idle"),
        "{shown}"
    );
    assert!(shown.contains("last error: none"), "{shown}");
}

#[test]
fn a_good_bundle_installs_with_progress_into_the_other_slot() {
    let Some(mut rauc) =
        RaucSystem::start("a_good_bundle_installs_with_progress_into_the_other_slot")
    else {
        return;
    };
    let bundle = rauc.bundle(&BundleSpec::good());
    let booted_before = sha256_file(&rauc.slot_file(0));
    let data = rauc.root().join("data");
    let out = pincer(
        &[
            "update",
            "apply",
            &bundle.path.display().to_string(),
            "--data-dir",
            &data.display().to_string(),
        ],
        &rauc.env(),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}\n{}", rauc.rauc_log());
    assert!(
        stdout.contains("installed pincer-test 2026.12.1"),
        "{stdout}"
    );
    // Plain progress lines (stderr is not a terminal), RAUC's own steps, up to 100 %.
    assert!(
        stderr.contains("install:  40% Verifying signature done."),
        "{stderr}"
    );
    assert!(stderr.contains("Copying image to rootfs.1"), "{stderr}");
    assert!(
        stderr.contains("install: 100% Installing done."),
        "{stderr}"
    );
    assert_eq!(
        sha256_prefix(&rauc.slot_file(1), bundle.image_bytes),
        bundle.image_sha256
    );
    assert_eq!(
        sha256_file(&rauc.slot_file(0)),
        booted_before,
        "the booted slot is untouched"
    );
    assert_eq!(rauc.primary(), "B");
    let status = status_json(&rauc);
    assert_eq!(status["primary"], "rootfs.1");
    assert_eq!(status["lastUpdate"]["slot"], "rootfs.1");
    assert_eq!(status["lastUpdate"]["outcome"], "reboot-pending");
    assert_eq!(status["lastUpdate"]["version"], "2026.12.1");
    let b = status["slots"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "rootfs.1").cloned());
    let b = b.expect("rootfs.1");
    assert_eq!(b["bundle"]["build"], "20261201 store-schema=1-1");
    assert_eq!(b["installedCount"], 1);
}

#[test]
fn bundles_rauc_refuses_leave_both_slots_untouched() {
    let Some(mut rauc) = RaucSystem::start("bundles_rauc_refuses_leave_both_slots_untouched")
    else {
        return;
    };
    let rogue = rauc.bundle(&BundleSpec {
        signer: Signer::Rogue,
        ..BundleSpec::good()
    });
    let foreign = rauc.bundle(&BundleSpec {
        compatible: "someone-elses-board",
        ..BundleSpec::good()
    });
    let good = rauc.bundle(&BundleSpec::good());
    let truncated = rauc.root().join("truncated.raucb");
    let bytes = std::fs::read(&good.path).expect("bundle");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("truncate");
    let before = [
        sha256_file(&rauc.slot_file(0)),
        sha256_file(&rauc.slot_file(1)),
    ];
    let data = rauc.root().join("data").display().to_string();
    let cases = [
        (rogue.path.clone(), "signature"),
        (foreign.path.clone(), "someone-elses-board"),
        (truncated, "refused"),
    ];
    for (bundle, why) in cases {
        let out = pincer(
            &[
                "update",
                "apply",
                &bundle.display().to_string(),
                "--data-dir",
                &data,
            ],
            &rauc.env(),
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {stderr}", bundle.display());
        assert!(
            stderr.contains("refused") && stderr.contains(why),
            "{}: {stderr}",
            bundle.display()
        );
        let after = [
            sha256_file(&rauc.slot_file(0)),
            sha256_file(&rauc.slot_file(1)),
        ];
        assert_eq!(after, before, "{}: a slot was written", bundle.display());
    }
    assert_eq!(rauc.primary(), "A", "nothing was activated");
    // RAUC's own verdict on a bad signature, over D-Bus (no `rauc info` in front of it).
    use_bus(&rauc);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let refused = runtime.block_on(async {
        let mut client = Rauc::connect().await.expect("connect");
        client
            .install(&rogue.path.display().to_string(), &mut |_| {})
            .await
    });
    match refused {
        Err(RaucError::InstallFailed(why)) => assert!(why.contains("signature"), "{why}"),
        other => panic!("expected RAUC to refuse the rogue bundle: {other:?}"),
    }
    // RAUC's Info reads a bundle it trusts and refuses the rogue one (1.8 says only
    // "rauc info error", which is why pincer's messages come from the installation).
    let (info, rogue_info) = runtime.block_on(async {
        let mut client = Rauc::connect().await.expect("connect");
        (
            client.info(&good.path.display().to_string()).await,
            client.info(&rogue.path.display().to_string()).await,
        )
    });
    assert_eq!(
        info.map_err(|e| e.to_string()),
        Ok((COMPATIBLE.to_string(), "2026.12.1".to_string()))
    );
    match rogue_info {
        Err(RaucError::Refused(why)) => assert!(why.contains("rauc info error"), "{why}"),
        other => panic!("expected Info to refuse the rogue bundle: {other:?}"),
    }
    let status = status_json(&rauc);
    assert!(
        status["lastError"]
            .as_str()
            .unwrap_or_default()
            .contains("signature"),
        "{status}"
    );
    assert_eq!(
        [
            sha256_file(&rauc.slot_file(0)),
            sha256_file(&rauc.slot_file(1))
        ],
        before
    );
}

#[test]
fn a_bundle_whose_pincer_cannot_open_the_store_is_refused() {
    let Some(mut rauc) =
        RaucSystem::start("a_bundle_whose_pincer_cannot_open_the_store_is_refused")
    else {
        return;
    };
    let data = rauc.root().join("data");
    // A real store at this build's schema.
    drop(
        pincer::store::Store::open(&data.join("store"), pincer::store::StoreOptions::default())
            .expect("store"),
    );
    let data_arg = data.display().to_string();
    let out = pincer(&["store", "schema", "--json", "--data-dir", &data_arg], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let schema: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(schema["schemaVersion"], pincer::store::SCHEMA_VERSION);
    assert_eq!(schema["canOpen"], true);
    let out = pincer(
        &[
            "store",
            "schema",
            "--bundle-build",
            "x store-schema=2-3",
            "--data-dir",
            &data_arg,
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cannot open today's store"),
        "{}",
        text(&out.stderr)
    );
    let out = pincer(
        &[
            "store",
            "schema",
            "--bundle-build",
            "x store-schema=1-3",
            "--data-dir",
            &data_arg,
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));

    let newer = rauc.bundle(&BundleSpec {
        build: "20270101 store-schema=2-3",
        ..BundleSpec::good()
    });
    let unclaimed = rauc.bundle(&BundleSpec {
        build: "20270101",
        ..BundleSpec::good()
    });
    let before = sha256_file(&rauc.slot_file(1));
    for (bundle, why) in [
        (&newer, "store schemas 2-3"),
        (&unclaimed, "does not say which store schemas"),
    ] {
        let out = pincer(
            &[
                "update",
                "apply",
                &bundle.path.display().to_string(),
                "--data-dir",
                &data_arg,
            ],
            &rauc.env(),
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
        assert!(!stderr.contains("install:"), "RAUC was not asked: {stderr}");
    }
    assert_eq!(sha256_file(&rauc.slot_file(1)), before);
}

#[test]
fn mark_good_bad_and_active_reach_the_boot_loader() {
    let Some(rauc) = RaucSystem::start("mark_good_bad_and_active_reach_the_boot_loader") else {
        return;
    };
    use_bus(&rauc);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    runtime.block_on(async {
        let mut client = Rauc::connect().await.expect("connect");
        let (slot, message) = client.mark(Mark::Active, "other").await.expect("active");
        assert_eq!(slot, "rootfs.1");
        assert!(message.contains("rootfs.1"), "{message}");
        assert_eq!(rauc.primary(), "B");
        assert_eq!(rauc.boot_state("B"), "good");
        let (slot, _) = client.mark(Mark::Bad, "rootfs.1").await.expect("bad");
        assert_eq!(slot, "rootfs.1");
        assert_eq!(rauc.boot_state("B"), "bad");
        std::fs::write(rauc.root().join("boot/state.A"), "bad\n").expect("state");
        let (slot, _) = client.mark(Mark::Good, "booted").await.expect("good");
        assert_eq!(slot, "rootfs.0");
        assert_eq!(rauc.boot_state("A"), "good");
        let error = client
            .mark(Mark::Good, "rootfs.9")
            .await
            .expect_err("no such slot");
        assert!(
            matches!(&error, RaucError::Refused(why) if why.contains("rootfs.9")),
            "{error}"
        );
    });
}

/// Runs `pincer update confirm` with a fake reboot that leaves a marker file.
fn confirm(rauc: &RaucSystem, readyz: &str, timeout: u64) -> (Output, bool) {
    confirm_with(rauc, &["--readyz", readyz], timeout)
}

/// `pincer update confirm` with `args` (how it finds the gateway).
fn confirm_with(rauc: &RaucSystem, args: &[&str], timeout: u64) -> (Output, bool) {
    let marker = rauc.root().join("rebooted");
    let _ = std::fs::remove_file(&marker);
    let state_dir = rauc.root().join("update-state").display().to_string();
    let reboot = format!("touch {}", marker.display());
    let timeout = timeout.to_string();
    let mut all = vec!["update", "confirm", "--timeout", &timeout];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--state-dir", &state_dir, "--reboot-command", &reboot]);
    let out = pincer(&all, &rauc.env());
    (out, marker.exists())
}

/// A URL nothing answers on.
fn dead_readyz() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("http://127.0.0.1:{port}/readyz")
}

#[test]
fn confirm_marks_a_normal_boot_good_whatever_the_gateway() {
    let Some(rauc) = RaucSystem::start("confirm_marks_a_normal_boot_good_whatever_the_gateway")
    else {
        return;
    };
    std::fs::write(rauc.root().join("boot/state.A"), "bad\n").expect("state");
    let (out, rebooted) = confirm(&rauc, &dead_readyz(), 30);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("normal boot of rootfs.0") && stderr.contains("flashed"),
        "{stderr}"
    );
    assert!(stderr.contains("RAUC marked rootfs.0 good"), "{stderr}");
    assert_eq!(rauc.boot_state("A"), "good");
    assert!(!rebooted);
}

#[test]
fn confirm_marks_a_healthy_trial_boot_good() {
    let Some(mut rauc) = RaucSystem::start("confirm_marks_a_healthy_trial_boot_good") else {
        return;
    };
    let bundle = rauc.bundle(&BundleSpec::good());
    let data = rauc.root().join("data").display().to_string();
    let out = pincer(
        &[
            "update",
            "apply",
            &bundle.path.display().to_string(),
            "--data-dir",
            &data,
        ],
        &rauc.env(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    rauc.reboot_into("B");
    // No --readyz: confirm finds the gateway's port in its config.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let config = format!("{{ gateway: {{ port: {port} }} }}");
    let gateway = GatewayProcess::start(&config, &["--token", TOKEN]);
    assert_eq!(gateway.port, port);
    let config_path = gateway.config_path().display().to_string();
    let (out, rebooted) = confirm_with(&rauc, &["--config", &config_path], 30);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("for http://127.0.0.1:{port}/readyz to answer 200")),
        "{stderr}"
    );
    assert!(
        stderr.contains("trial boot: rootfs.1 runs the installation of"),
        "{stderr}"
    );
    assert!(stderr.contains("trial of rootfs.1 passed"), "{stderr}");
    assert!(stderr.contains("RAUC marked rootfs.1 good"), "{stderr}");
    assert!(!rebooted);
    assert_eq!(rauc.boot_state("B"), "good");
    let ledger: Value = serde_json::from_str(
        &std::fs::read_to_string(rauc.root().join("update-state/confirmed.json")).expect("ledger"),
    )
    .expect("ledger JSON");
    assert_eq!(ledger["slots"]["rootfs.1"]["decision"], "good", "{ledger}");
    assert_eq!(status_json(&rauc)["lastUpdate"]["outcome"], "booted");
    // The next boot of the same installation is a normal one.
    let (out, _) = confirm(&rauc, &dead_readyz(), 30);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("was confirmed good before"), "{stderr}");
}

#[test]
fn confirm_rolls_back_an_unhealthy_trial_boot() {
    let Some(mut rauc) = RaucSystem::start("confirm_rolls_back_an_unhealthy_trial_boot") else {
        return;
    };
    let bundle = rauc.bundle(&BundleSpec::good());
    let data = rauc.root().join("data").display().to_string();
    let out = pincer(
        &[
            "update",
            "apply",
            &bundle.path.display().to_string(),
            "--data-dir",
            &data,
        ],
        &rauc.env(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    rauc.reboot_into("B");
    let (out, rebooted) = confirm(&rauc, &dead_readyz(), 2);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("trial of rootfs.1 failed"), "{stderr}");
    assert!(stderr.contains("did not answer 200"), "{stderr}");
    assert!(stderr.contains("RAUC marked rootfs.1 bad"), "{stderr}");
    assert!(stderr.contains("reboot requested"), "{stderr}");
    assert!(rebooted, "the reboot command ran");
    assert_eq!(rauc.boot_state("B"), "bad");
    // The boot loader falls back to A; RAUC there reports the rollback.
    rauc.reboot_into("A");
    let status = status_json(&rauc);
    assert_eq!(status["booted"], "rootfs.0");
    assert_eq!(status["lastUpdate"]["outcome"], "rolled-back", "{status}");
    let (out, rebooted) = confirm(&rauc, &dead_readyz(), 2);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("normal boot of rootfs.0"), "{stderr}");
    assert!(!rebooted);
}

async fn admin(gateway: &GatewayProcess) -> TestClient {
    TestClient::connect(&gateway.url(), Some(TOKEN), &["operator.admin"], None)
        .await
        .0
}

fn gateway_env(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateways_update_methods_drive_rauc() {
    let Some(mut rauc) = RaucSystem::start("the_gateways_update_methods_drive_rauc") else {
        return;
    };
    let good = rauc.bundle(&BundleSpec::good());
    let rogue = rauc.bundle(&BundleSpec {
        signer: Signer::Rogue,
        ..BundleSpec::good()
    });
    let env = rauc.env();
    let gateway = GatewayProcess::start_with_env(
        "{}",
        &["--port", "0", "--token", TOKEN],
        &gateway_env(&env),
    );
    let mut client = admin(&gateway).await;

    let res = client.call("update.status", json!({})).await;
    assert_eq!(res["ok"], true, "{res}");
    let payload = &res["payload"];
    assert_eq!(payload["sentinel"], Value::Null, "{res}");
    assert_eq!(payload["updateAvailable"], Value::Null);
    assert_eq!(payload["rauc"]["available"], true, "{res}");
    assert_eq!(payload["rauc"]["booted"], "rootfs.0");
    assert_eq!(
        payload["store"]["schemaVersion"],
        pincer::store::SCHEMA_VERSION
    );

    let res = client
        .call("update.apply", json!({"bundle": rogue.path}))
        .await;
    assert_eq!(res["ok"], false, "{res}");
    assert_eq!(res["error"]["code"], "INVALID_REQUEST", "{res}");
    assert_eq!(res["error"]["details"]["code"], "UPDATE_REFUSED", "{res}");
    assert!(
        res["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("signature"),
        "{res}"
    );

    let id = client
        .request("update.apply", json!({"bundle": good.path}))
        .await;
    let mut percents = Vec::new();
    let mut rogue_events = 0;
    let res = loop {
        let frame = match client.read().await {
            support::ws_client::Read::Frame(frame) => frame,
            support::ws_client::Read::Closed { code, reason } => panic!("closed {code} {reason}"),
        };
        if frame["type"] == "event" && frame["event"] == "pincer.update.progress" {
            // The refused bundle's progress came before its answer (kept by the client).
            if frame["payload"]["bundle"] == json!(rogue.path) {
                rogue_events += 1;
                continue;
            }
            assert_eq!(frame["payload"]["bundle"], json!(good.path), "{frame}");
            percents.push(frame["payload"]["percent"].as_i64().expect("percent"));
        } else if frame["type"] == "res" && frame["id"] == id {
            break frame;
        }
    };
    assert_eq!(res["ok"], true, "{res}\n{}", gateway.stderr());
    assert_eq!(res["payload"]["rebootRequired"], true);
    assert_eq!(res["payload"]["bundle"]["version"], "2026.12.1");
    assert!(
        percents.len() >= 5 && percents.last() == Some(&100),
        "{percents:?}"
    );
    assert!(percents.windows(2).all(|w| w[0] <= w[1]), "{percents:?}");
    assert!(
        rogue_events > 0,
        "RAUC checked the refused bundle's signature while reporting"
    );
    assert_eq!(
        sha256_prefix(&rauc.slot_file(1), good.image_bytes),
        good.image_sha256
    );

    let res = client.call("update.status", json!({})).await;
    assert_eq!(
        res["payload"]["rauc"]["lastUpdate"]["outcome"], "reboot-pending",
        "{res}"
    );
    assert_eq!(res["payload"]["rauc"]["primary"], "rootfs.1", "{res}");

    let res = client
        .call("update.apply", json!({"bundle": "relative.raucb"}))
        .await;
    assert_eq!(res["error"]["code"], "INVALID_REQUEST", "{res}");
    assert!(
        res["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("absolute path"),
        "{res}"
    );

    // The store's schema, read beside the running gateway, which keeps working.
    let out = pincer(
        &[
            "store",
            "schema",
            "--json",
            "--data-dir",
            &gateway.data_dir().display().to_string(),
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let schema: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(schema["schemaVersion"], pincer::store::SCHEMA_VERSION);
    let res = client.call("sessions.list", json!({})).await;
    assert_eq!(res["ok"], true, "{res}");

    // Read-only operators may not.
    let (mut reader, _) =
        TestClient::connect(&gateway.url(), Some(TOKEN), &["operator.read"], None).await;
    let res = reader.call("update.status", json!({})).await;
    assert_eq!(res["ok"], false, "{res}");
    assert!(
        res["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("operator.admin"),
        "{res}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_rauc_update_status_says_so_and_apply_is_unavailable() {
    let dir = tempfile::tempdir().expect("dir");
    let nowhere = format!("unix:path={}", dir.path().join("no-bus.sock").display());
    let env = vec![("DBUS_SYSTEM_BUS_ADDRESS".to_string(), nowhere)];
    let gateway = GatewayProcess::start_with_env(
        "{}",
        &["--port", "0", "--token", TOKEN],
        &gateway_env(&env),
    );
    let mut client = admin(&gateway).await;
    let res = client.call("update.status", json!({})).await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(res["payload"]["sentinel"], Value::Null);
    assert_eq!(res["payload"]["updateAvailable"], Value::Null);
    assert_eq!(res["payload"]["rauc"]["available"], false, "{res}");
    let reason = res["payload"]["rauc"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.contains("not a pincer appliance") && reason.contains("no-bus.sock"),
        "{res}"
    );
    let res = client
        .call(
            "update.apply",
            json!({"bundle": "/var/lib/pincer/state/x.raucb"}),
        )
        .await;
    assert_eq!(res["error"]["code"], "UNAVAILABLE", "{res}");
    let out = pincer(&["update", "status"], &env);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("RAUC is not available"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn malformed_and_oversized_bus_input_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("dir");
    // A reply whose byte-order mark is neither 'l' nor 'B'.
    let mut garbage = vec![b'X', 2, 0, 1];
    garbage.extend_from_slice(&[0; 12]);
    let bus = support::rauc::hostile_bus(dir.path(), garbage);
    let env = vec![("DBUS_SYSTEM_BUS_ADDRESS".to_string(), bus)];
    let out = pincer(&["update", "status"], &env);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("malformed D-Bus message: bad byte-order mark"),
        "{stderr}"
    );

    let dir = tempfile::tempdir().expect("dir");
    // A header announcing a 64 MiB body: refused from the header, before any of it is read.
    let mut huge = vec![b'l', 2, 0, 1];
    huge.extend_from_slice(&(64u32 << 20).to_le_bytes());
    huge.extend_from_slice(&2u32.to_le_bytes());
    huge.extend_from_slice(&0u32.to_le_bytes());
    let bus = support::rauc::hostile_bus(dir.path(), huge);
    let env = vec![("DBUS_SYSTEM_BUS_ADDRESS".to_string(), bus)];
    let out = pincer(&["update", "status"], &env);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("over the 1048576-byte limit"), "{stderr}");
}
