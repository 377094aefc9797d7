//! pincer's own Control UI in real headless Chromium (Debian's `chromium`,
//! driven by puppeteer-core: `tests/clients/pincer_ui.mjs`) against the real
//! `pincer gateway` binary, started unconfigured, with the fake OpenAI
//! provider and the fake Telegram Bot API of `tests/support`:
//! first-run setup (provider tested, Telegram token checked with getMe,
//! password set; the gateway writes its config and restarts) → a chat turn
//! streamed from the provider → a Telegram sender's DM pairing code approved
//! on the Channels page (the sender is then answered) → a cron job added and
//! run, with its run log → a memory search with hits and scores and a
//! re-index with progress → a config edit with an invalid value refused at
//! its key path (the file unchanged) → the other pages; then every control's
//! accessible name, a keyboard pass, and a phone-width (390 px) layout.
//! Screenshots of each page land in `target/ui-screenshots/`. Every
//! assertion is here; the driver only reports.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::fake_telegram::{FakeTelegram, RecordedCall};
use support::gateway::GatewayProcess;
use support::skip::{in_ci, skip};
use support::telegram_harness::{dm, BOT_ID, BOT_USERNAME, TOKEN as BOT_TOKEN};

/// Upper bound for the whole driver run (each of its steps times out sooner).
const DRIVER_TIMEOUT: Duration = Duration::from_secs(300);
const PASSWORD: &str = "correct horse battery";

fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Node 24 and the clients directory with puppeteer-core, or why they are missing.
pub fn prerequisites() -> Result<(PathBuf, PathBuf), String> {
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
    let node = std::env::var_os("PINCER_NODE24").map_or_else(
        || manifest_path(".tools/node24/node_modules/.bin/node"),
        PathBuf::from,
    );
    if !node.exists() {
        return Err(format!(
            "Node 24 not found at {} (run `scripts/setup node`)",
            node.display()
        ));
    }
    Ok((node, clients))
}

fn text_of(call: &RecordedCall) -> String {
    call.body["text"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_chat_pairing_cron_memory_and_config_in_a_real_browser() {
    let (node, clients) = match prerequisites() {
        Ok(found) => found,
        Err(reason) if !in_ci() => {
            skip(
                "setup_chat_pairing_cron_memory_and_config_in_a_real_browser",
                &reason,
            );
            return;
        }
        Err(reason) => panic!("browser test prerequisites missing under CI: {reason}"),
    };
    let provider = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(BOT_TOKEN, BOT_ID, BOT_USERNAME).await;
    let dir = tempfile::tempdir().expect("workspace dir");
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(workspace.join("memory")).expect("workspace");
    // The chat turn's first model call asks for a tool (matched by this marker in the system prompt).
    std::fs::write(
        workspace.join("AGENTS.md"),
        "You are the UI test agent (marker: ui-tool-turn).\n",
    )
    .expect("agents file");
    provider.push_reply_for_system(
        "ui-tool-turn",
        FakeReply::ToolCalls {
            calls: vec![(
                "call_ui_1".into(),
                "memory_search".into(),
                r#"{"query":"peanuts"}"#.into(),
            )],
        },
    );
    std::fs::write(
        workspace.join("MEMORY.md"),
        "# People\n\nMy sister Lena is allergic to peanuts.\n\n# Garden\n\nThe tomatoes need water every evening in July.\n",
    )
    .expect("memory note");
    // Unconfigured: no provider, the generated token; Telegram points at the fake (no token yet).
    let config = json!({
        "agents": {"defaults": {"workspace": workspace}},
        "channels": {"telegram": {"apiRoot": telegram.api_root(), "streaming": "off"}},
    });
    let mut gateway = tokio::task::block_in_place(|| {
        GatewayProcess::start(&config.to_string(), &["--port", "0"])
    });
    // A stranger writes to the bot; the gateway polls it once setup gave it the token.
    telegram.push_message(dm("hello? who is this?"));
    // First boot refused the boot partition's config (as `pincer firstboot` records it).
    std::fs::write(
        gateway.data_dir().join("firstboot-error.json"),
        r#"{"pincer.json5":{"keptAs":"/boot/firmware/pincer.json5.invalid-20261127T090000Z","error":"unknown key gateway.prot (did you mean gateway.port?)","keyPath":"gateway.prot","atMs":1}}"#,
    )
    .expect("first boot's record");

    let screens = manifest_path("target/ui-screenshots");
    let _ = std::fs::remove_dir_all(&screens);
    let message = "hello from the pincer ui";
    let settings = json!({
        "providerUrl": provider.base_url(), "apiKey": "sk-test", "model": "gpt-test",
        "botToken": BOT_TOKEN, "botUsername": BOT_USERNAME, "password": PASSWORD,
        "message": message, "expected": format!("echo: {message}"),
        "cronMessage": "cron says good morning", "memoryQuery": "is my sister allergic to peanuts",
        "badConfigFrom": "\"mode\": \"password\"", "badConfigTo": "\"mode\": \"sometimes\"",
    });
    let child = tokio::process::Command::new(&node)
        .arg(clients.join("pincer_ui.mjs"))
        .arg(gateway.http("/"))
        .arg(&screens)
        .arg(settings.to_string())
        .current_dir(&clients)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the UI driver");
    let output = tokio::time::timeout(DRIVER_TIMEOUT, child.wait_with_output())
        .await
        .expect("the UI driver finished in time")
        .expect("driver output");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let report = || {
        format!(
            "driver stdout:\n{stdout}\ndriver stderr:\n{stderr}\ngateway stderr:\n{}",
            gateway.stderr()
        )
    };
    let find = |key: &str| {
        lines
            .iter()
            .find(|l| l.get(key).is_some())
            .map(|l| l[key].clone())
    };
    let done =
        find("done").unwrap_or_else(|| panic!("the driver ended without a result\n{}", report()));
    assert_eq!(
        done,
        true,
        "the browser run failed: {}\n{}",
        find("reason").unwrap_or_default(),
        report()
    );
    let problems = lines
        .iter()
        .find(|l| l.get("done").is_some())
        .map(|l| l["problems"].clone())
        .unwrap_or_default();
    assert_eq!(
        problems,
        json!([]),
        "console errors or page errors\n{}",
        report()
    );

    // Setup wrote the config and the gateway restarted in place with it.
    assert_eq!(gateway.ready_lines(), 2, "one restart, after setup");
    let written = gateway.read_config();
    for needle in [
        "\"primary\": \"openai/gpt-test\"",
        "\"mode\": \"password\"",
        BOT_TOKEN,
    ] {
        assert!(
            written.contains(needle),
            "{needle} in the written config:\n{written}"
        );
    }
    assert_eq!(
        find("deviceToken"),
        Some(json!(true)),
        "the browser keeps its device token"
    );
    assert_eq!(
        find("setupUnnamed"),
        Some(json!([])),
        "setup page controls without a name"
    );
    let refused = find("firstbootNotice")
        .expect("first boot's notice")
        .to_string();
    assert!(
        refused.contains("pincer.json5 from the boot partition was refused")
            && refused.contains("gateway.prot"),
        "{refused}"
    );

    // The chat answer was streamed: the bubble showed a part of it before the whole.
    let expected = format!("echo: {message}");
    let texts = find("answerTexts").expect("answer texts");
    let texts: Vec<&str> = texts
        .as_array()
        .expect("texts")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(texts.last().copied(), Some(expected.as_str()), "{texts:?}");
    assert!(
        texts
            .iter()
            .any(|t| t.len() < expected.len() && t.len() > 1 && expected.starts_with(t)),
        "no partial answer before the final one: {texts:?}"
    );
    // The model's tool call was shown, started and done.
    let tools = find("toolCalls").expect("tool calls").to_string();
    assert!(
        tools.contains("memory_search") && tools.contains("done"),
        "{tools}"
    );
    assert!(
        provider
            .requests()
            .iter()
            .any(|r| r.body.to_string().contains(message)),
        "the provider saw the message"
    );

    // The DM pairing code the bot sent is the one approved in the UI; the sender is answered now.
    let code = find("pairingCode")
        .and_then(|v| v.as_str().map(str::to_string))
        .expect("pairing code");
    let sent = telegram.calls_of("sendMessage");
    assert!(
        sent.iter().any(|c| text_of(c).contains(&code)),
        "the bot sent code {code}: {:?}",
        sent.iter().map(text_of).collect::<Vec<_>>()
    );
    let before = sent.len();
    telegram.push_message(dm("thanks, am I in?"));
    let sent = telegram.wait_for_calls("sendMessage", before + 1).await;
    assert_eq!(
        text_of(&sent[before]),
        "echo: thanks, am I in?",
        "the approved sender reaches the model"
    );

    // The cron job ran an agent turn: the provider was asked its message; the run log lists it.
    assert!(provider
        .requests()
        .iter()
        .any(|r| r.body.to_string().contains("cron says good morning")));
    let log = find("cronRunLog").expect("run log").to_string();
    assert!(log.contains("ok"), "{log}");

    // Memory: hits with a place and a score, the best one the sister's note; the re-index ran to the end.
    let hits = find("memoryHits").expect("hits");
    let first = hits[0].as_str().expect("hit text");
    assert!(
        first.contains("MEMORY.md:") && first.contains("score 0.") && first.contains("Lena"),
        "{hits}"
    );
    let reindex = find("reindex").expect("reindex");
    assert!(
        reindex["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Indexed 1 file")),
        "{reindex}"
    );
    assert_eq!(
        reindex["value"], reindex["max"],
        "the bar is full: {reindex}"
    );

    // Config: refused at gateway.auth.mode, the line selected, nothing written.
    let issue = find("configIssue").expect("config issue");
    assert_eq!(issue["path"], "gateway.auth.mode", "{issue}");
    assert_eq!(issue["invalid"], "true");
    assert!(
        issue["selected"]
            .as_str()
            .is_some_and(|s| s.contains("\"sometimes\"")),
        "{issue}"
    );
    assert_eq!(
        gateway.read_config(),
        written,
        "the refused edit changed nothing"
    );

    // Signing out forgets the device token; a wrong password is refused; the right one signs in.
    assert_eq!(find("tokenAfterSignOut"), Some(Value::Null));
    assert_eq!(
        find("revokedTokenRefused"),
        Some(json!(true)),
        "signing out revoked the token at the gateway"
    );
    let refused = find("wrongPassword").expect("wrong password").to_string();
    assert!(refused.contains("password mismatch"), "{refused}");

    // Every control of every page has an accessible name; the keyboard goes skip link → nav.
    let unnamed = find("unnamed").expect("unnamed");
    for (page, missing) in unnamed.as_object().expect("pages") {
        assert_eq!(
            missing,
            &json!([]),
            "{page}: controls without an accessible name"
        );
    }
    let stops = find("tabStops").expect("tab stops");
    // The document itself (`body`) is where focus passes when it wraps round.
    let stops: Vec<&Value> = stops
        .as_array()
        .expect("stops")
        .iter()
        .filter(|s| s["tag"] != "body")
        .collect();
    let names: Vec<&str> = stops.iter().filter_map(|s| s["name"].as_str()).collect();
    assert!(
        names.iter().all(|n| !n.trim().is_empty()),
        "a tab stop without a name: {stops:?}"
    );
    let skip = names
        .iter()
        .position(|n| *n == "Skip to content")
        .expect("the skip link is a tab stop");
    assert_eq!(
        names.get(skip + 1),
        Some(&"Chat"),
        "the navigation follows the skip link: {names:?}"
    );
    assert_eq!(names.last(), Some(&"Sign out"), "{names:?}");
    assert!(
        names.contains(&"Message") && names.contains(&"Send"),
        "the composer is reachable: {names:?}"
    );
    for link in [
        "Chat",
        "Channels",
        "Agents & models",
        "Cron",
        "Memory",
        "Logs",
        "Config",
        "System",
    ] {
        assert!(
            names.contains(&link),
            "the keyboard never reached {link}: {names:?}"
        );
    }
    let opened = find("keyboardOpened").expect("keyboard");
    assert_eq!(opened["hash"], "#/cron", "{opened}");
    assert_eq!(
        opened["focusedTag"], "H1",
        "focus moves to the page's heading: {opened}"
    );
    assert_eq!(opened["focused"], "Cron", "{opened}");

    // Phone width: nothing wider than the screen.
    for line in lines.iter().filter(|l| l.get("phone").is_some()) {
        assert!(
            line["scrollWidth"].as_u64() <= Some(390),
            "horizontal overflow at 390 px: {line}"
        );
    }
    let metrics = find("setupMetrics").expect("metrics");
    assert!(
        metrics["encodedBytes"]
            .as_u64()
            .is_some_and(|b| b < 150 * 1024),
        "{metrics}"
    );
    let shots = std::fs::read_dir(&screens).expect("screens").count();
    assert!(shots >= 12, "screenshots in {}", screens.display());
    let _ = gateway.terminate();
}
