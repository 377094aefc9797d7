//! Linking WhatsApp by QR code end to end: the real `pincer gateway` (built
//! with the `whatsapp` feature, its chat socket on the socket-level fake
//! server `tests/support/fake_whatsapp.rs`, which also plays the phone).
//!
//! Proves: `web.login.start` called through OpenClaw's own CLI (`openclaw
//! gateway call`) answers a PNG whose QR code decodes (as a phone's camera
//! would, with `rqrr`) to the payload the fake phone then scans; `web.login.wait`
//! answers connected and a DM is answered; an account already linked gets no
//! QR code; `force` relinks, and a client sees the link state move
//! (waitingForScan → connected) in `health` events without polling; a wait
//! without a scan times out; a device logged out on the phone links again;
//! a channel that does not link by QR code, an unknown account and bad params
//! are refused by name; and `pincer channels login whatsapp` prints a
//! half-block QR code that decodes to the payload, exits 0 once linked,
//! nonzero on an unknown account or when nobody scans; and OpenClaw's own
//! Control UI (headless Chromium, `tests/clients/control_ui_whatsapp.mjs`)
//! shows the QR image after its "Show QR" button and says linked once the
//! phone scanned it.

#[allow(dead_code)]
#[path = "support/fake_openai.rs"]
mod fake_openai;
#[allow(dead_code)]
#[path = "support/fake_whatsapp.rs"]
mod fake_whatsapp;
#[allow(dead_code)]
#[path = "support/gateway.rs"]
mod gateway;
#[path = "support/skip.rs"]
mod skip;
#[allow(dead_code)]
#[path = "support/ws_client.rs"]
mod ws_client;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use fake_openai::{FakeOpenAi, FakeReply};
use fake_whatsapp::FakeWhatsApp;
use gateway::GatewayProcess;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use ws_client::TestClient;

const TOKEN: &str = "e2e-whatsapp-login-token";
/// Hang guard for waits (never a timing claim).
const WAIT_GUARD: Duration = Duration::from_secs(60);
const ALICE: &str = "15557654321";

fn config(provider: &FakeOpenAi, extra_channels: Value) -> String {
    let mut channels = json!({ "whatsapp": { "allowFrom": [format!("+{ALICE}")] } });
    if let (Some(all), Some(extra)) = (channels.as_object_mut(), extra_channels.as_object()) {
        all.extend(extra.clone());
    }
    json!({
        "models": { "providers": { "fake": {
            "baseUrl": provider.base_url(), "apiKey": "sk-test",
            "api": "openai-completions",
            "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
        "agents": { "defaults": { "model": { "primary": "fake/gpt-test" } } },
        "session": { "dmScope": "per-channel-peer" },
        "channels": channels,
    })
    .to_string()
}

fn start_gateway(fake: &FakeWhatsApp, config: &str) -> GatewayProcess {
    let url = fake.url();
    let env = [
        ("PINCER_WHATSAPP_WS_URL", url.as_str()),
        ("PINCER_WHATSAPP_VERSION", "2.3000.1023456789"),
    ];
    let args = ["--port", "0", "--token", TOKEN];
    tokio::task::block_in_place(|| GatewayProcess::start_with_env(config, &args, &env))
}

async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The payload of the QR code in greyscale pixels, read as a phone's camera would.
fn decode_pixels(width: usize, height: usize, pixel: impl Fn(usize, usize) -> u8) -> String {
    let mut image = rqrr::PreparedImage::prepare_from_greyscale(width, height, pixel);
    let grids = image.detect_grids();
    assert_eq!(grids.len(), 1, "one QR code in the picture");
    let (_, content) = grids[0].decode().expect("the QR code decodes");
    content
}

/// The payload of the QR code in a `data:image/png;base64,…` URL.
fn decode_png_qr(data_url: &str) -> String {
    let b64 = data_url
        .strip_prefix("data:image/png;base64,")
        .unwrap_or_else(|| panic!("not a PNG data URL: {data_url:.60}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64");
    let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("a PNG");
    let mut frame = vec![0u8; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut frame).expect("frame");
    assert_eq!(
        info.color_type,
        png::ColorType::Grayscale,
        "{:?}",
        info.color_type
    );
    let (w, h) = (info.width as usize, info.height as usize);
    decode_pixels(w, h, |x, y| frame[y * info.line_size + x])
}

/// The QR code drawn in a terminal's text (light modules as blocks, dark ones
/// blank, two rows a line), seen on a dark-background terminal at 8 pixels
/// per module, decoded.
fn decode_terminal_qr(text: &str) -> String {
    let lines: Vec<Vec<char>> = text
        .lines()
        .filter(|line| {
            line.contains('█') && line.chars().all(|c| matches!(c, '█' | '▀' | '▄' | ' '))
        })
        .map(|line| line.chars().collect())
        .collect();
    assert!(lines.len() > 10, "no QR code in the output:\n{text}");
    let width = lines[0].len();
    assert!(
        lines.iter().all(|l| l.len() == width),
        "ragged QR lines:\n{text}"
    );
    let mut light = Vec::new();
    for line in &lines {
        let (top, bottom): (Vec<bool>, Vec<bool>) = line
            .iter()
            .map(|c| match c {
                '█' => (true, true),
                '▀' => (true, false),
                '▄' => (false, true),
                _ => (false, false),
            })
            .unzip();
        light.push(top);
        light.push(bottom);
    }
    const SCALE: usize = 8;
    let rows = light.len();
    decode_pixels(width * SCALE, rows * SCALE, |x, y| {
        if light[y / SCALE][x / SCALE] {
            255
        } else {
            0
        }
    })
}

fn manifest_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn client_path(env_var: &str, default: PathBuf) -> PathBuf {
    let path = std::env::var_os(env_var).map_or(default, PathBuf::from);
    assert!(
        path.exists(),
        "{} not found (set {env_var} or run `scripts/setup node cli`)",
        path.display()
    );
    path
}

/// `openclaw gateway call METHOD --params PARAMS --json` (OpenClaw's CLI on Node 24); its JSON answer.
async fn openclaw_call(gateway: &GatewayProcess, method: &str, params: Value) -> Value {
    let node = client_path(
        "PINCER_NODE24",
        manifest_path(".tools/node24/node_modules/.bin/node"),
    );
    let cli = client_path(
        "PINCER_OPENCLAW_CLI",
        manifest_path(".tools/openclaw-cli/node_modules/openclaw/openclaw.mjs"),
    );
    let home = gateway.dir.path().join("home-cli");
    std::fs::create_dir_all(&home).expect("cli home");
    let output = tokio::process::Command::new(node)
        .arg(cli)
        .args(["gateway", "call", method, "--url", &gateway.url()])
        .args(["--token", TOKEN, "--json", "--timeout", "90000"])
        .arg("--params")
        .arg(params.to_string())
        .env("HOME", &home)
        .env("NO_COLOR", "1")
        .env_remove("OPENCLAW_GATEWAY_URL")
        .env_remove("OPENCLAW_GATEWAY_TOKEN")
        .env_remove("OPENCLAW_GATEWAY_PASSWORD")
        .env_remove("OPENCLAW_STATE_DIR")
        .env_remove("OPENCLAW_CONFIG_PATH")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output)
        .await
        .expect("openclaw gateway call ended")
        .expect("openclaw runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "openclaw gateway call {method} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("openclaw printed no JSON ({e}):\n{stdout}"))
}

async fn admin(gateway: &GatewayProcess) -> TestClient {
    TestClient::connect(&gateway.url(), Some(TOKEN), &["operator.admin"], None)
        .await
        .0
}

/// A call's payload; panics with the error when it failed.
async fn ok(client: &mut TestClient, method: &str, params: Value) -> Value {
    let answer = client.call(method, params).await;
    assert_eq!(answer["ok"], true, "{method}: {answer}");
    answer["payload"].clone()
}

/// A call's error message; panics when it succeeded.
async fn refused(client: &mut TestClient, method: &str, params: Value) -> String {
    let answer = client.call(method, params).await;
    assert_eq!(answer["ok"], false, "{method} should fail: {answer}");
    answer["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Waits for a `health` event whose WhatsApp row is in `state`.
async fn health_state(listener: &mut TestClient, state: &str) -> Value {
    tokio::time::timeout(
        WAIT_GUARD,
        listener.event_where("health", |h| {
            h["channels"]["whatsapp"]["stateReason"] == state
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("no health event with whatsapp {state}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_login_links_by_qr_image_relinks_on_force_and_after_logout() {
    let fake = FakeWhatsApp::start().await;
    let provider = FakeOpenAi::start().await;
    // Telegram on a closed port: a channel that is there but does not link by QR code.
    let telegram =
        json!({ "telegram": { "botToken": "123:abc", "apiRoot": "http://127.0.0.1:9" } });
    let config = config(&provider, telegram);
    let gateway = start_gateway(&fake, &config);
    let mut client = admin(&gateway).await;

    // Refused by name: an unknown account, a channel without QR linking, bad params, a reader.
    let error = refused(&mut client, "web.login.start", json!({"accountId": "nope"})).await;
    assert!(
        error.contains("\"nope\"") && error.contains("default"),
        "{error}"
    );
    let error = refused(
        &mut client,
        "web.login.start",
        json!({"channel": "telegram"}),
    )
    .await;
    assert!(
        error.contains("not supported by provider telegram"),
        "{error}"
    );
    let error = refused(&mut client, "web.login.start", json!({"channel": "slack"})).await;
    assert!(
        error.contains("web login provider is not available"),
        "{error}"
    );
    let error = refused(&mut client, "web.login.start", json!({"qr": true})).await;
    assert!(error.contains("unexpected property \"qr\""), "{error}");
    let error = refused(
        &mut client,
        "web.login.wait",
        json!({"currentQrDataUrl": "https://example.invalid/qr.png"}),
    )
    .await;
    assert!(error.contains("currentQrDataUrl"), "{error}");
    let (mut reader, _) =
        TestClient::connect(&gateway.url(), Some(TOKEN), &["operator.read"], None).await;
    let error = refused(&mut reader, "web.login.start", json!({})).await;
    assert!(error.contains("operator.admin"), "{error}");
    let before = ok(&mut client, "channels.status", json!({})).await;
    assert_eq!(before["channels"]["whatsapp"]["linked"], false, "{before}");

    // Linking through OpenClaw's own CLI: the image decodes to what the phone scans.
    let started = openclaw_call(
        &gateway,
        "web.login.start",
        json!({"channel": "whatsapp", "timeoutMs": 30000}),
    )
    .await;
    let first_url = started["qrDataUrl"]
        .as_str()
        .unwrap_or_else(|| panic!("no qrDataUrl: {started}"))
        .to_string();
    let payload = decode_png_qr(&first_url);
    assert_eq!(started["qr"], payload.as_str(), "{started}");
    assert!(
        started["message"]
            .as_str()
            .is_some_and(|m| m.contains("Linked devices")),
        "{started}"
    );
    fake.scan_qr(&payload).await.expect("the phone scans");
    let waited = openclaw_call(
        &gateway,
        "web.login.wait",
        json!({"channel": "whatsapp", "timeoutMs": 30000, "currentQrDataUrl": first_url}),
    )
    .await;
    assert_eq!(waited["connected"], true, "{waited}");
    let number = format!("+{}", fake.phone);
    assert_eq!(waited["linkedAs"], number.as_str(), "{waited}");

    // Linked in the gateway itself: a DM is answered through the model.
    eventually("pre-keys uploaded", || fake.bundle().is_some()).await;
    provider.push_reply(FakeReply::Text {
        chunks: vec!["Hello Alice, linked by QR.".into()],
        delay_ms: 0,
    });
    fake.send_dm(ALICE, "3EB0LOGIN0001", "hi pincer")
        .await
        .expect("dm");
    let to_alice = format!("{ALICE}@s.whatsapp.net");
    eventually("the answer to Alice", || {
        fake.sent_texts()
            .iter()
            .any(|(to, _, text)| *to == to_alice && text == "Hello Alice, linked by QR.")
    })
    .await;

    // Already linked: no QR code, and nothing to wait for.
    let again = ok(&mut client, "web.login.start", json!({})).await;
    assert!(again.get("qrDataUrl").is_none(), "{again}");
    assert_eq!(again["connected"], true, "{again}");
    assert!(
        again["message"]
            .as_str()
            .is_some_and(|m| m.contains("already linked") && m.contains(&number)),
        "{again}"
    );
    let idle = ok(&mut client, "web.login.wait", json!({"timeoutMs": 1000})).await;
    assert_eq!(idle["connected"], false, "{idle}");
    assert!(
        idle["message"]
            .as_str()
            .is_some_and(|m| m.contains("No WhatsApp login in progress")),
        "{idle}"
    );

    // force: the device is forgotten and a new code shown; a listener sees the state in `health`.
    let (mut listener, _) =
        TestClient::connect(&gateway.url(), Some(TOKEN), &["operator.read"], None).await;
    let forced = ok(
        &mut client,
        "web.login.start",
        json!({"force": true, "timeoutMs": 30000}),
    )
    .await;
    let forced_url = forced["qrDataUrl"]
        .as_str()
        .unwrap_or_else(|| panic!("no qrDataUrl after force: {forced}"))
        .to_string();
    let forced_payload = decode_png_qr(&forced_url);
    assert_ne!(forced_payload, payload, "a new device, a new code");
    let waiting = health_state(&mut listener, "waitingForScan").await;
    assert_eq!(waiting["channels"]["whatsapp"]["connected"], false);

    // A wait nobody answers times out, still waiting.
    let pending = ok(
        &mut client,
        "web.login.wait",
        json!({"timeoutMs": 1000, "currentQrDataUrl": forced_url}),
    )
    .await;
    assert_eq!(pending["connected"], false, "{pending}");
    assert_eq!(pending["waiting"], true, "{pending}");
    assert!(
        pending["message"]
            .as_str()
            .is_some_and(|m| m.contains("Still waiting")),
        "{pending}"
    );

    fake.scan_qr(&forced_payload).await.expect("scan again");
    let relinked = ok(
        &mut client,
        "web.login.wait",
        json!({"timeoutMs": 30000, "currentQrDataUrl": forced_url}),
    )
    .await;
    assert_eq!(relinked["connected"], true, "{relinked}");
    let connected = health_state(&mut listener, "connected").await;
    assert_eq!(connected["channels"]["whatsapp"]["connected"], true);

    // Logged out on the phone: a plain start shows a new code, and the phone links again.
    fake.log_out().await;
    health_state(&mut listener, "loggedOut").await;
    let after_logout = ok(&mut client, "web.login.start", json!({"timeoutMs": 30000})).await;
    let logout_url = after_logout["qrDataUrl"]
        .as_str()
        .unwrap_or_else(|| panic!("no qrDataUrl after a logout: {after_logout}"))
        .to_string();
    fake.scan_qr(&decode_png_qr(&logout_url))
        .await
        .expect("scan after logout");
    let back = ok(
        &mut client,
        "web.login.wait",
        json!({"timeoutMs": 30000, "currentQrDataUrl": logout_url}),
    )
    .await;
    assert_eq!(back["connected"], true, "{back}");
    let status = ok(&mut client, "channels.status", json!({})).await;
    let row = &status["channelAccounts"]["whatsapp"][0];
    assert_eq!(row["stateReason"], "connected", "{row}");
    assert_eq!(row["running"], true, "{row}");
    // Upstream's summary fields the Control UI's card shows.
    let summary = &status["channels"]["whatsapp"];
    assert_eq!(summary["linked"], true, "{summary}");
    assert_eq!(summary["self"]["e164"], number.as_str(), "{summary}");

    // The Control UI's Logout (`channels.logout`, through OpenClaw's CLI): WhatsApp is told to
    // remove the device, the stored one is deleted, and the account waits for a new scan.
    let refused = client
        .call("channels.logout", json!({"channel": "telegram"}))
        .await;
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("channel telegram does not support logout")),
        "{refused}"
    );
    let out = openclaw_call(&gateway, "channels.logout", json!({"channel": "whatsapp"})).await;
    assert_eq!(out["channel"], "whatsapp", "{out}");
    assert_eq!(out["accountId"], "default", "{out}");
    assert_eq!(out["cleared"], true, "{out}");
    assert_eq!(out["loggedOut"], true, "{out}");
    assert!(
        fake.log()
            .stanzas_in
            .iter()
            .any(|s| s.contains("<remove-companion-device>")),
        "WhatsApp was not told to remove the device"
    );
    health_state(&mut listener, "waitingForScan").await;
    let status = ok(&mut client, "channels.status", json!({})).await;
    assert_eq!(status["channels"]["whatsapp"]["linked"], false, "{status}");
    let again = ok(&mut client, "web.login.start", json!({"timeoutMs": 30000})).await;
    assert!(again["qrDataUrl"].as_str().is_some(), "{again}");
}

/// Runs `pincer channels login …` against `gateway`; returns the child with piped output.
fn pincer_login(gateway: &GatewayProcess, extra: &[&str]) -> tokio::process::Child {
    let data = gateway.dir.path().join("cli-data");
    tokio::process::Command::new(env!("CARGO_BIN_EXE_pincer"))
        .args(["channels", "login"])
        .args(extra)
        .args(["--url", &gateway.url(), "--token", TOKEN])
        .arg("--config")
        .arg(gateway.config_path())
        .arg("--data-dir")
        .arg(&data)
        .env_remove("PINCER_CONFIG")
        .env_remove("OPENCLAW_GATEWAY_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn pincer channels login")
}

/// Waits for the child's exit; its status, stdout and stderr.
async fn finish(child: tokio::process::Child) -> (std::process::ExitStatus, String, String) {
    let output = tokio::time::timeout(WAIT_GUARD, child.wait_with_output())
        .await
        .expect("pincer channels login ended")
        .expect("output");
    (
        output.status,
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_login_prints_a_qr_code_a_phone_reads_and_reports_the_link() {
    let fake = FakeWhatsApp::start().await;
    let provider = FakeOpenAi::start().await;
    let gateway = start_gateway(&fake, &config(&provider, json!({})));

    // An unknown account: a clear error, nonzero exit.
    let (status, _, stderr) =
        finish(pincer_login(&gateway, &["whatsapp", "--account", "nope"])).await;
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("\"nope\""), "{stderr}");

    // The code is printed; read off the terminal text, it is what the phone scans.
    let mut child = pincer_login(&gateway, &["whatsapp", "--timeout", "60"]);
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut shown = String::new();
    tokio::time::timeout(WAIT_GUARD, async {
        let mut line = String::new();
        while !shown.contains("Waiting for the scan") {
            line.clear();
            let read = stdout.read_line(&mut line).await.expect("read stdout");
            assert!(read > 0, "stdout ended early:\n{shown}");
            shown.push_str(&line);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no QR code printed:\n{shown}"));
    let payload = decode_terminal_qr(&shown);
    fake.scan_qr(&payload)
        .await
        .expect("the phone scans the terminal");
    let mut rest = String::new();
    let status = tokio::time::timeout(WAIT_GUARD, async {
        stdout.read_to_string(&mut rest).await.expect("stdout");
        child.wait().await.expect("exit")
    })
    .await
    .expect("pincer channels login exits once linked");
    let number = format!("+{}", fake.phone);
    assert!(status.success(), "{status}: {shown}{rest}");
    assert!(rest.contains(&format!("linked as {number}")), "{rest}");

    // Again: already linked, nothing to scan, exit 0.
    let (status, stdout, stderr) = finish(pincer_login(&gateway, &["whatsapp"])).await;
    assert!(status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("already linked"), "{stdout}");

    // --force with nobody scanning: a new code, then a clear failure when time is up.
    let (status, stdout, stderr) = finish(pincer_login(
        &gateway,
        &["--channel", "whatsapp", "--force", "--timeout", "3"],
    ))
    .await;
    assert!(!status.success(), "{stdout}");
    assert_ne!(
        decode_terminal_qr(&stdout),
        payload,
        "a new device, a new code"
    );
    assert!(stderr.contains("nobody scanned"), "{stderr}");
}

/// Chromium, the clients' node_modules, the Control UI and Node 24, or why one is missing.
fn control_ui_prerequisites() -> Result<(PathBuf, PathBuf, PathBuf), String> {
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
    Ok((node, clients, ui))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_ui_shows_the_qr_image_and_reports_the_link() {
    let (node, clients, ui) = match control_ui_prerequisites() {
        Ok(found) => found,
        Err(reason) if !skip::in_ci() => {
            skip::skip(
                "control_ui_shows_the_qr_image_and_reports_the_link",
                &reason,
            );
            return;
        }
        Err(reason) => panic!("Control UI test prerequisites missing under CI: {reason}"),
    };
    let fake = FakeWhatsApp::start().await;
    let provider = FakeOpenAi::start().await;
    let gateway = start_gateway(&fake, &config(&provider, json!({})));
    let screens = manifest_path("target/ocui-screens");
    std::fs::create_dir_all(&screens).expect("screens dir");
    let mut child = tokio::process::Command::new(&node)
        .arg(clients.join("control_ui_whatsapp.mjs"))
        .arg(&ui)
        .arg(gateway.url())
        .arg(TOKEN)
        .arg(&screens)
        .current_dir(&clients)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the Control UI driver");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    let done = tokio::time::timeout(Duration::from_secs(240), async {
        while let Some(line) = stdout.next_line().await.expect("driver stdout") {
            let Ok(found) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            seen.push(found.clone());
            if let Some(src) = found["qrImage"]["src"].as_str() {
                // The phone scans what the page shows.
                fake.scan_qr(&decode_png_qr(src))
                    .await
                    .expect("scan the page's QR");
            }
            if found.get("done").is_some() {
                return found;
            }
        }
        panic!("the driver ended without a result: {seen:?}")
    })
    .await
    .unwrap_or_else(|_| panic!("the Control UI driver hung; so far: {seen:?}"));
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr).await;
    }
    assert_eq!(
        done["done"], true,
        "the Control UI run failed: {done}\nseen: {seen:?}\ndriver stderr:\n{stderr}\ngateway stderr:\n{}",
        gateway.stderr()
    );
    assert!(
        seen.iter().any(|f| f["qrImage"]["alt"] == "WhatsApp QR"),
        "the card showed the QR image: {seen:?}"
    );
    let called: Vec<&str> = done["called"]
        .as_array()
        .expect("called")
        .iter()
        .filter_map(|c| c["method"].as_str())
        .collect();
    assert!(
        called.contains(&"web.login.start") && called.contains(&"web.login.wait"),
        "{called:?}"
    );
    let login_errors: Vec<&Value> = done["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter(|e| {
            e["method"]
                .as_str()
                .is_some_and(|m| m.starts_with("web.login"))
        })
        .collect();
    assert!(login_errors.is_empty(), "{login_errors:?}");
    let mut client = admin(&gateway).await;
    let status = ok(&mut client, "channels.status", json!({})).await;
    assert_eq!(
        status["channelAccounts"]["whatsapp"][0]["connected"], true,
        "{status}"
    );
}
