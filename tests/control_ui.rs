//! OpenClaw's own Control UI (the `openclaw` npm package's `dist/control-ui`,
//! 2026.9.6) in real headless Chromium against the pincer gateway.
//!
//! The test starts the fake OpenAI provider and the real `pincer gateway`
//! binary, then runs `tests/clients/control_ui.mjs` (puppeteer-core driving
//! Debian's `/usr/bin/chromium`), which serves the UI's files from a tiny
//! static server, opens them with `#gatewayUrl=…&token=…`, waits for
//! "Connected", sends a message from the composer, waits for the streamed
//! answer and opens the sessions view. Screenshots land in
//! `target/ocui-screens/`. Every assertion is here; the driver only reports.
//! Prerequisites come from `scripts/setup` (chromium, node, cli); without
//! them the test is skipped, and fails under `CI=true`.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use support::fake_openai::FakeOpenAi;
use support::gateway::{config_with_provider, GatewayProcess};
use support::skip::{in_ci, skip};

const TOKEN: &str = "test-token-0123456789abcdef";
/// Upper bound for the whole driver run (each of its steps times out sooner).
const DRIVER_TIMEOUT: Duration = Duration::from_secs(180);

fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// The prerequisites, or why they are missing.
fn prerequisites() -> Result<(PathBuf, PathBuf, PathBuf), String> {
    let chromium = std::env::var_os("PINCER_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    if !chromium.exists() {
        return Err(format!(
            "{} not found (run `scripts/setup chromium`)",
            chromium.display()
        ));
    }
    let clients = std::env::var_os("PINCER_CLIENTS_DIR")
        .map_or_else(|| manifest_path("tests/clients"), PathBuf::from);
    if !clients.join("node_modules/puppeteer-core").exists() {
        return Err(format!(
            "puppeteer-core not installed in {} (run `scripts/setup node`)",
            clients.display()
        ));
    }
    let ui = std::env::var_os("PINCER_CONTROL_UI").map_or_else(
        || manifest_path(".tools/openclaw-cli/node_modules/openclaw/dist/control-ui"),
        PathBuf::from,
    );
    if !ui.join("index.html").exists() {
        return Err(format!(
            "OpenClaw Control UI not found at {} (run `scripts/setup cli`)",
            ui.display()
        ));
    }
    // puppeteer-core 25 needs Node 22.12 or newer: the Node 24 scripts/setup installs.
    let node = std::env::var_os("PINCER_NODE24").map_or_else(
        || manifest_path(".tools/node24/node_modules/.bin/node"),
        PathBuf::from,
    );
    if !node.exists() {
        return Err(format!(
            "Node 24 not found at {} (set PINCER_NODE24 or run `scripts/setup node`)",
            node.display()
        ));
    }
    Ok((node, clients, ui))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_ui_connects_chats_and_lists_the_session() {
    let (node, clients, ui) = match prerequisites() {
        Ok(found) => found,
        Err(reason) if !in_ci() => {
            skip("control_ui_connects_chats_and_lists_the_session", &reason);
            return;
        }
        Err(reason) => panic!("Control UI test prerequisites missing under CI: {reason}"),
    };
    let fake = FakeOpenAi::start().await;
    let gateway = GatewayProcess::start(
        &config_with_provider(&fake.base_url()),
        &["--port", "0", "--token", TOKEN],
    );
    let screens = manifest_path("target/ocui-screens");
    let _ = std::fs::remove_dir_all(&screens);
    std::fs::create_dir_all(&screens).expect("screens dir");

    let message = "hello from the control ui";
    // The fake provider echoes the last user message in small streamed pieces.
    let expected = format!("echo: {message}");
    let child = tokio::process::Command::new(&node)
        .arg(clients.join("control_ui.mjs"))
        .arg(&ui)
        .arg(gateway.url())
        .arg(TOKEN)
        .arg(message)
        .arg(&expected)
        .arg(&screens)
        .current_dir(&clients)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the Control UI driver");
    let output = tokio::time::timeout(DRIVER_TIMEOUT, child.wait_with_output())
        .await
        .expect("the Control UI driver finished in time")
        .expect("driver output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let report = || {
        format!(
            "driver stdout:\n{stdout}\ndriver stderr:\n{stderr}\ngateway stderr:\n{}",
            gateway.stderr()
        )
    };
    let done = lines
        .iter()
        .find(|line| line.get("done").is_some())
        .unwrap_or_else(|| panic!("the driver ended without a result\n{}", report()));
    assert_eq!(
        done["done"],
        true,
        "the Control UI run failed: {}\n{}",
        done["reason"],
        report()
    );

    // Every method the UI called is one pincer knows.
    let called: Vec<&str> = done["called"]
        .as_array()
        .expect("called")
        .iter()
        .filter_map(|entry| entry["method"].as_str())
        .collect();
    assert!(
        called.contains(&"chat.send"),
        "the composer sent chat.send: {called:?}"
    );
    let unknown: Vec<&Value> = done["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter(|error| {
            error["message"]
                .as_str()
                .is_some_and(|message| message.contains("unknown method"))
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "the UI called methods pincer does not know: {unknown:?}\n{}",
        report()
    );
    // Every other error is a feature pincer lacks, said as upstream says it.
    let absent = [
        "talk.catalog",
        "sessions.companion.state",
        "chat.metadata",
        "sessions.observer.visibility",
        "approval.history",
    ];
    let other: Vec<&Value> = done["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter(|error| {
            !(error["code"] == "UNAVAILABLE"
                && absent.contains(&error["method"].as_str().unwrap_or_default()))
        })
        .collect();
    assert!(
        other.is_empty(),
        "the UI got errors: {other:?}\n{}",
        report()
    );

    // The open conversation was told of its new messages.
    assert!(
        done["events"]["session.message"].as_u64().unwrap_or(0) >= 2,
        "no session.message events for the user message and the reply: {}",
        done["events"]
    );
    // The fake provider was asked for the message the composer sent.
    let asked = fake
        .requests()
        .iter()
        .any(|request| request.body.to_string().contains(message));
    assert!(asked, "the provider never saw the composer's message");

    // The sessions view lists the session the chat used.
    let sessions_text = lines
        .iter()
        .find_map(|line| line["sessionsText"].as_str())
        .expect("sessions view text");
    assert!(
        sessions_text.contains("agent:main:main"),
        "the sessions view does not list the main session: {sessions_text}"
    );
    let shots = std::fs::read_dir(&screens).expect("screens").count();
    assert!(shots >= 4, "expected screenshots in {}", screens.display());
}
