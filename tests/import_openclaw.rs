//! `pincer import-openclaw`: a state directory made by the real `openclaw` CLI (`onboard`: config,
//! workspace, its SQLite store) plus sessions, transcripts, cron jobs, paired devices and DM
//! approvals in OpenClaw's JSON layout, imported into a gateway's data dir and checked through the
//! running gateway; a second run imports nothing; bad files are reported by path.
//!
//! Needs Node 24 and the `openclaw` CLI (`PINCER_NODE24`, `PINCER_OPENCLAW_CLI`, set by
//! `scripts/test`; installed by `scripts/setup node cli`).

#[path = "support/gateway.rs"]
#[allow(dead_code)]
mod gateway;
#[path = "support/ws_client.rs"]
#[allow(dead_code)]
mod ws_client;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use gateway::GatewayProcess;
use serde_json::{json, Value};
use ws_client::{Device, TestClient};

const TOKEN: &str = "import-test-token";
const DEVICE_TOKEN: &str = "openclaw-device-token-1";
const MAIN_SESSION: &str = "4b1c9d4e-1111-4a5b-9c1d-000000000001";
const DM_SESSION: &str = "4b1c9d4e-2222-4a5b-9c1d-000000000002";

fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn tool(env_var: &str, default: &str) -> PathBuf {
    let path = std::env::var_os(env_var).map_or_else(|| manifest_path(default), PathBuf::from);
    assert!(
        path.exists(),
        "{} not found (set {env_var} or run `scripts/setup node cli`)",
        path.display()
    );
    path
}

/// `openclaw onboard --non-interactive` into `<dir>/state`: config, workspace and its stores.
fn openclaw_onboard(dir: &Path) -> PathBuf {
    let state = dir.join("state");
    let home = dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let output = Command::new(tool(
        "PINCER_NODE24",
        ".tools/node24/node_modules/.bin/node",
    ))
    .arg(tool(
        "PINCER_OPENCLAW_CLI",
        ".tools/openclaw-cli/node_modules/openclaw/openclaw.mjs",
    ))
    .args([
        "onboard",
        "--non-interactive",
        "--accept-risk",
        "--mode",
        "local",
    ])
    .args([
        "--auth-choice",
        "skip",
        "--no-install-daemon",
        "--skip-health",
    ])
    .args([
        "--skip-channels",
        "--skip-skills",
        "--skip-search",
        "--json",
    ])
    .env("HOME", &home)
    .env("OPENCLAW_STATE_DIR", &state)
    .env("NO_COLOR", "1")
    .env_remove("OPENCLAW_CONFIG_PATH")
    .env_remove("OPENCLAW_GATEWAY_TOKEN")
    .stdin(Stdio::null())
    .output()
    .expect("run openclaw onboard");
    assert!(
        output.status.success(),
        "openclaw onboard failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        state.join("openclaw.json").exists(),
        "onboard wrote no config"
    );
    assert!(
        state.join("workspace/AGENTS.md").exists(),
        "onboard made no workspace"
    );
    state
}

/// An answer long enough (over 1 KiB) that OpenClaw's SQLite store keeps it zstd-compressed.
fn long_reply() -> String {
    "The long answer goes on. ".repeat(80)
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
    std::fs::write(path, text).expect("write fixture");
}

fn jsonl(lines: &[Value]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Sessions, transcripts, cron jobs, a paired device and DM approvals as OpenClaw 2026.4 wrote them.
/// With `defects`, also files and records that cannot be imported.
fn write_openclaw_json_state(state: &Path, device: &Device, defects: bool) {
    // Recent: pincer's session maintenance prunes sessions idle past its retention.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let sessions = state.join("agents/main/sessions");
    write(
        &sessions.join("sessions.json"),
        &json!({
            "agent:main:main": {"sessionId": MAIN_SESSION, "updatedAt": now - 60_000,
                                "thinkingLevel": "low", "inputTokens": 120, "outputTokens": 40},
            "agent:main:telegram:direct:4242": {"sessionId": DM_SESSION, "updatedAt": now - 30_000,
                "chatType": "direct", "channel": "telegram", "lastChannel": "telegram", "lastTo": "4242",
                "origin": {"provider": "telegram", "chatType": "direct", "from": "telegram:4242"}}
        })
        .to_string(),
    );
    if defects {
        let index = sessions.join("sessions.json");
        let mut all: Value =
            serde_json::from_str(&std::fs::read_to_string(&index).expect("index")).expect("JSON");
        all["agent:main:broken"] = json!({"updatedAt": 1});
        write(&index, &all.to_string());
    }
    write(
        &sessions.join(format!("{MAIN_SESSION}.jsonl")),
        &jsonl(&[
            json!({"type": "session", "version": 3, "id": MAIN_SESSION, "timestamp": "2026-01-01T10:00:00.000Z", "cwd": "/tmp"}),
            json!({"type": "message", "id": "m1", "parentId": null, "timestamp": "2026-01-01T10:00:01.000Z",
                   "message": {"role": "user", "content": [{"type": "text", "text": "what is on my calendar?"}], "timestamp": 1_767_261_601_000u64}}),
            json!({"type": "message", "id": "m2", "parentId": "m1", "timestamp": "2026-01-01T10:00:02.000Z",
                   "message": {"role": "assistant", "content": [{"type": "text", "text": "Dentist at three."}],
                               "usage": {"input": 120, "output": 40}, "stopReason": "stop", "timestamp": 1_767_261_602_000u64}}),
            json!({"type": "message", "id": "m3", "parentId": "m2", "timestamp": "2026-01-01T10:00:03.000Z",
                   "message": {"role": "assistant", "content": [{"type": "text", "text": long_reply()}], "timestamp": 1_767_261_603_000u64}}),
        ]),
    );
    let mut dm = jsonl(&[
        json!({"type": "session", "version": 3, "id": DM_SESSION, "timestamp": "2026-01-01T11:00:00.000Z"}),
        json!({"type": "message", "id": "d1", "parentId": null, "message": {"role": "user", "content": "hello from telegram", "timestamp": 1_767_265_200_000u64}}),
    ]);
    if defects {
        dm.push_str("{this line is not json\n");
    }
    dm.push_str(
        &json!({"type": "message", "id": "d2", "parentId": "d1", "message": {"role": "assistant",
                "content": [{"type": "text", "text": "hi there"}], "timestamp": 1_767_265_201_000u64}})
        .to_string(),
    );
    dm.push('\n');
    write(&sessions.join(format!("{DM_SESSION}.jsonl")), &dm);

    write(
        &state.join("cron/jobs.json"),
        &json!({"version": 1, "jobs": [
            {"id": "job-morning", "name": "Morning brief", "enabled": true, "createdAtMs": 1_767_000_000_000u64,
             "updatedAtMs": 1_767_000_000_000u64, "schedule": {"kind": "cron", "expr": "0 7 * * *", "tz": "Europe/Berlin"},
             "sessionTarget": "isolated", "wakeMode": "now",
             "payload": {"kind": "agentTurn", "message": "Summarise my day"},
             "delivery": {"mode": "announce", "channel": "telegram", "to": "4242"}, "state": {}},
        ]})
        .to_string(),
    );
    if defects {
        let jobs = state.join("cron/jobs.json");
        let mut all: Value =
            serde_json::from_str(&std::fs::read_to_string(&jobs).expect("jobs")).expect("JSON");
        all["jobs"].as_array_mut().expect("jobs").push(json!(
            {"id": "job-broken", "name": "Broken", "enabled": true, "schedule": {"kind": "cron", "expr": "not a cron"},
             "sessionTarget": "isolated", "payload": {"kind": "agentTurn", "message": "x"}}));
        write(&jobs, &all.to_string());
    }

    let raw = device.key.verifying_key().to_bytes();
    write(
        &state.join("devices/paired.json"),
        &json!({ device.id(): {
            "deviceId": device.id(), "publicKey": URL_SAFE_NO_PAD.encode(raw), "displayName": "laptop",
            "platform": "linux", "clientId": "test", "clientMode": "test", "role": "operator",
            "roles": ["operator"], "scopes": ["operator.read", "operator.write"],
            "approvedScopes": ["operator.read", "operator.write"],
            "tokens": {"operator": {"token": DEVICE_TOKEN, "role": "operator",
                                    "scopes": ["operator.read", "operator.write"], "createdAtMs": 1_767_000_000_000u64}},
            "createdAtMs": 1_767_000_000_000u64, "approvedAtMs": 1_767_000_000_000u64
        }})
        .to_string(),
    );
    write(
        &state.join("credentials/telegram-allowFrom.json"),
        &json!({"version": 1, "allowFrom": ["tg:4242", "777"]}).to_string(),
    );
    if defects {
        // An account OpenClaw's config does not name: its doctor refuses to migrate it.
        write(
            &state.join("credentials/telegram-work-allowFrom.json"),
            &json!({"version": 1, "allowFrom": ["555"]}).to_string(),
        );
        write(
            &state.join("credentials/whatsapp-allowFrom.json"),
            &json!({"version": 1, "allowFrom": ["whatsapp:+15550001"]}).to_string(),
        );
        write(
            &state.join("credentials/irc-allowFrom.json"),
            &json!({"version": 1, "allowFrom": ["alice"]}).to_string(),
        );
        write(
            &state.join("credentials/discord-allowFrom.json"),
            "{ this is not json",
        );
    }
    write(&state.join("workspace/notes/todo.md"), "- buy milk\n");
}

fn import(state: &Path, config: &Path, data: &Path) -> (Output, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_pincer"))
        .arg("import-openclaw")
        .arg("--state-dir")
        .arg(state)
        .arg("--config")
        .arg(config)
        .arg("--data-dir")
        .arg(data)
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_DATA_DIR")
        .env_remove("OPENCLAW_STATE_DIR")
        .output()
        .expect("run pincer import-openclaw");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "import failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    (output, stdout)
}

fn has_line(report: &str, start: &str, contains: &[&str]) -> bool {
    report
        .lines()
        .any(|l| l.starts_with(start) && contains.iter().all(|c| l.contains(c)))
}

fn message_texts(history: &Value) -> Vec<(String, String)> {
    history["payload"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                m["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openclaw_state_is_imported_once_and_works_in_the_gateway() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = openclaw_onboard(dir.path());
    let device = Device::new(7);
    write_openclaw_json_state(&state, &device, true);

    let mut gateway = GatewayProcess::start("{}", &["--port", "0", "--token", TOKEN]);
    gateway.terminate();
    let config = dir.path().join("pincer/pincer.json5");
    let data = gateway.data_dir();

    let (_, report) = import(&state, &config, &data);
    for (start, parts) in [
        ("imported: ", vec!["config", "pincer.json5"]),
        (
            "imported: ",
            vec!["session agent:main:main", "3 transcript entries"],
        ),
        (
            "imported: ",
            vec![
                "session agent:main:telegram:direct:4242",
                "line 3",
                "not JSON",
            ],
        ),
        (
            "not imported: ",
            vec!["session agent:main:broken", "sessions.json", "no sessionId"],
        ),
        ("imported: ", vec!["cron job \"job-morning\""]),
        (
            "not imported: ",
            vec!["cron job \"job-broken\"", "jobs.json"],
        ),
        ("imported: ", vec!["paired device", &device.id()]),
        (
            "imported: ",
            vec!["telegram DM approval of 4242 (account default)"],
        ),
        (
            "imported: ",
            vec!["telegram DM approval of 555 (account work)"],
        ),
        (
            "imported: ",
            vec!["whatsapp DM approval of +15550001 (account default)"],
        ),
        (
            "not imported: ",
            vec!["irc-allowFrom.json", "not a channel pincer runs"],
        ),
        (
            "not imported: ",
            vec!["discord-allowFrom.json", "not valid JSON"],
        ),
        ("imported: ", vec!["workspace", "files copied"]),
    ] {
        assert!(
            has_line(&report, start, &parts),
            "no {start}{parts:?} line in:\n{report}"
        );
    }
    let written = std::fs::read_to_string(&config).expect("imported config");
    assert!(written.contains("gateway"), "config:\n{written}");

    let (_, again) = import(&state, &config, &data);
    assert!(
        again.contains("summary: 0 imported"),
        "second run:\n{again}"
    );
    assert!(
        again.contains("nothing new was imported"),
        "second run:\n{again}"
    );
    for parts in [
        vec!["session agent:main:main"],
        vec!["cron job \"job-morning\""],
        vec!["paired device"],
        vec!["telegram DM approval of 4242"],
        vec!["config"],
        vec!["workspace"],
    ] {
        assert!(
            has_line(&again, "already present: ", &parts),
            "no already-present {parts:?} in:\n{again}"
        );
    }

    let workspace = data.join("workspace");
    assert_eq!(
        std::fs::read(workspace.join("AGENTS.md")).expect("copied AGENTS.md"),
        std::fs::read(state.join("workspace/AGENTS.md")).expect("original AGENTS.md")
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes/todo.md")).expect("copied note"),
        "- buy milk\n"
    );

    check_in_gateway(&mut gateway, &device, &data).await;
    let store = pincer::store::Store::open(&data.join("store"), Default::default()).expect("store");
    assert!(store
        .dm_pairing_is_approved("telegram", "work", "555")
        .expect("read"));
    assert!(store
        .dm_pairing_is_approved("whatsapp", "default", "+15550001")
        .expect("read"));
}

/// What the imported state must look like to a client of the restarted gateway, and to the DM check.
async fn check_in_gateway(gateway: &mut GatewayProcess, device: &Device, data: &Path) {
    gateway.crash_and_restart("{}", &["--port", "0", "--token", TOKEN]);
    let scopes = ["operator.read", "operator.write"];
    let (mut client, _) = TestClient::connect(&gateway.url(), Some(TOKEN), &scopes, None).await;
    let list = client.call("sessions.list", json!({})).await;
    let keys: Vec<&str> = list["payload"]["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter_map(|s| s["key"].as_str())
        .collect();
    assert!(
        keys.contains(&"agent:main:main") && keys.contains(&"agent:main:telegram:direct:4242"),
        "{list}"
    );
    assert!(!keys.contains(&"agent:main:broken"), "{list}");

    let history = client
        .call("chat.history", json!({"sessionKey": "agent:main:main"}))
        .await;
    assert_eq!(
        message_texts(&history),
        [
            ("user".to_string(), "what is on my calendar?".to_string()),
            ("assistant".to_string(), "Dentist at three.".to_string()),
            ("assistant".to_string(), long_reply())
        ],
        "{history}"
    );
    let dm = client
        .call(
            "chat.history",
            json!({"sessionKey": "agent:main:telegram:direct:4242"}),
        )
        .await;
    assert_eq!(message_texts(&dm).len(), 2, "{dm}");

    let jobs = client
        .call("cron.list", json!({"includeDisabled": true}))
        .await;
    let ids: Vec<&str> = jobs["payload"]["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["id"].as_str())
        .collect();
    assert_eq!(ids, ["job-morning"], "{jobs}");

    let mut paired = TestClient::open(&gateway.url()).await;
    let params = paired.connect_params_with_device_token(DEVICE_TOKEN, &["operator.read"], device);
    let hello = paired.call("connect", params).await;
    assert_eq!(
        hello["ok"], true,
        "the imported device token is accepted: {hello}"
    );
    gateway.terminate();

    let store = pincer::store::Store::open(&data.join("store"), Default::default()).expect("store");
    for (account, sender, approved) in [
        ("default", "4242", true),
        ("default", "777", true),
        ("default", "555", false),
    ] {
        assert_eq!(
            store
                .dm_pairing_is_approved("telegram", account, sender)
                .expect("read"),
            approved,
            "telegram {account} {sender}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openclaw_sqlite_state_is_imported_after_openclaw_doctor_migrated_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = openclaw_onboard(dir.path());
    let device = Device::new(7);
    write_openclaw_json_state(&state, &device, false);
    openclaw_doctor_fix(dir.path(), &state);
    assert!(
        !state.join("agents/main/sessions/sessions.json").exists(),
        "doctor moved the sessions into SQLite"
    );
    assert!(
        !state.join("cron/jobs.json").exists(),
        "doctor moved the jobs into SQLite"
    );
    let agent_db = rusqlite::Connection::open_with_flags(
        state.join("agents/main/agent/openclaw-agent.sqlite"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("agent database");
    let packed: i64 = agent_db
        .query_row(
            "SELECT count(*) FROM transcript_events WHERE event_zstd IS NOT NULL",
            [],
            |row| row.get(0),
        )
        .expect("count compressed events");
    assert!(packed > 0, "the long reply is stored compressed");
    drop(agent_db);

    let mut gateway = GatewayProcess::start("{}", &["--port", "0", "--token", TOKEN]);
    gateway.terminate();
    let config = dir.path().join("pincer/pincer.json5");
    let data = gateway.data_dir();
    let (_, report) = import(&state, &config, &data);
    for parts in [
        vec![
            "session agent:main:main",
            "3 transcript entries",
            "transcript_events",
        ],
        vec![
            "session agent:main:telegram:direct:4242",
            "2 transcript entries",
        ],
        vec!["cron job \"job-morning\""],
        vec!["paired device", &device.id()],
        vec!["telegram DM approval of 4242 (account default)"],
        vec!["telegram DM approval of 777 (account default)"],
    ] {
        assert!(
            has_line(&report, "imported: ", &parts),
            "no imported {parts:?} in:\n{report}"
        );
    }
    assert!(!report.contains("openclaw.sqlite: newer"), "{report}");
    let (_, again) = import(&state, &config, &data);
    assert!(
        again.contains("summary: 0 imported"),
        "second run:\n{again}"
    );
    check_in_gateway(&mut gateway, &device, &data).await;
}

/// `openclaw doctor --fix`: moves the JSON stores into its SQLite databases.
fn openclaw_doctor_fix(dir: &Path, state: &Path) {
    let output = Command::new(tool(
        "PINCER_NODE24",
        ".tools/node24/node_modules/.bin/node",
    ))
    .arg(tool(
        "PINCER_OPENCLAW_CLI",
        ".tools/openclaw-cli/node_modules/openclaw/openclaw.mjs",
    ))
    .args(["doctor", "--fix", "--non-interactive"])
    .env("HOME", dir.join("home"))
    .env("OPENCLAW_STATE_DIR", state)
    .env("NO_COLOR", "1")
    .env_remove("OPENCLAW_CONFIG_PATH")
    .env_remove("OPENCLAW_GATEWAY_TOKEN")
    .stdin(Stdio::null())
    .output()
    .expect("run openclaw doctor");
    assert!(
        output.status.success(),
        "openclaw doctor --fix failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn reference_workspace_points_the_config_at_openclaws_workspace_and_copies_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let workspace = dir.path().join("my-workspace");
    write(&workspace.join("AGENTS.md"), "# rules\n");
    write(
        &state.join("openclaw.json"),
        &format!(
            "{{ // JSON5, as OpenClaw writes it\n agents: {{ defaults: {{ workspace: {:?} }} }}, gateway: {{ port: 18790 }} }}",
            workspace.display().to_string()
        ),
    );
    let config = dir.path().join("pincer.json5");
    let data = dir.path().join("data");
    let output = Command::new(env!("CARGO_BIN_EXE_pincer"))
        .arg("import-openclaw")
        .arg("--reference-workspace")
        .arg("--state-dir")
        .arg(&state)
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(&data)
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_DATA_DIR")
        .output()
        .expect("run pincer import-openclaw");
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{report}");
    assert!(
        has_line(
            &report,
            "imported: ",
            &["workspace", "referenced by agents.defaults.workspace"]
        ),
        "{report}"
    );
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&config).expect("config")).expect("JSON");
    assert_eq!(
        written["agents"]["defaults"]["workspace"],
        workspace.display().to_string()
    );
    assert_eq!(written["gateway"]["port"], 18790);
    assert!(!data.join("workspace").exists(), "nothing copied");
}
