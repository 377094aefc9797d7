//! The gateway's side of pincer's own Control UI, against the real binary:
//! the embedded files (gzip, ETag, 304, 406, `basePath`, `enabled`), the
//! browser origin check and `allowInsecureAuth` on the WebSocket, first-run
//! setup (who may use it, what it writes, that it closes), and the methods
//! the UI's pages call that pincer added for it (`config.set` with issues at
//! their key path, `system.info`, `models.probe`, `channels.pairing.*`).
//! The pages themselves run in Chromium in `tests/pincer_ui.rs`.

#[path = "support/fake_discord.rs"]
mod fake_discord;
#[path = "support/fake_slack.rs"]
mod fake_slack;
mod support;

use std::time::Duration;

use fake_discord::FakeDiscord;
use fake_slack::FakeSlack;
use serde_json::{json, Value};
use support::fake_openai::{FakeOpenAi, FakeReply};
use support::fake_telegram::FakeTelegram;
use support::gateway::{config_with_provider, GatewayProcess};
use support::telegram_harness::{dm, BOT_ID, BOT_USERNAME, TOKEN as BOT_TOKEN};
use support::ws_client::{Device, TestClient};

const TOKEN: &str = "control-ui-test-token-0123456789";
const UI: (&str, &str) = ("openclaw-control-ui", "webchat");
const ADMIN: &[&str] = &[
    "operator.admin",
    "operator.read",
    "operator.write",
    "operator.approvals",
    "operator.pairing",
];

fn start(config: &str, args: &[&str]) -> GatewayProcess {
    tokio::task::block_in_place(|| GatewayProcess::start(config, args))
}

async fn get(url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("HTTP request")
}

/// A connect attempt as the Control UI with `headers` on the upgrade; the whole `res`.
async fn ui_connect(
    gateway: &GatewayProcess,
    headers: &[(&str, &str)],
    auth: Value,
    signed: &str,
    device: Option<&Device>,
) -> (TestClient, Value) {
    let mut client = TestClient::open_with_headers(&gateway.url(), headers).await;
    let params = client.connect_params_as(UI, auth, signed, ADMIN, device);
    let res = client.call("connect", params).await;
    (client, res)
}

fn origin_of(gateway: &GatewayProcess) -> String {
    format!("http://127.0.0.1:{}", gateway.port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_files_are_served_compressed_with_etags() {
    let gateway = start(
        &config_with_provider("http://127.0.0.1:9"),
        &["--port", "0", "--token", TOKEN],
    );
    let index = pincer::gateway::control_ui::assets::find("index.html").expect("embedded index");

    let page = get(&gateway.http("/"), &[("accept-encoding", "gzip, br")]).await;
    assert_eq!(page.status(), 200);
    let h = page.headers().clone();
    assert_eq!(h["content-encoding"], "gzip");
    assert_eq!(h["etag"], index.etag);
    assert_eq!(h["cache-control"], "no-cache");
    assert_eq!(h["x-frame-options"], "DENY");
    assert!(h["content-security-policy"]
        .to_str()
        .expect("csp")
        .contains("default-src 'self'"));
    assert_eq!(
        page.bytes().await.expect("body").as_ref(),
        index.gzip,
        "the embedded bytes as built"
    );

    // Pages route by URL hash: other paths are not the UI's.
    let other = get(&gateway.http("/chat"), &[]).await;
    assert_eq!(other.status(), 404);
    assert_eq!(
        other.headers()["content-type"],
        "application/json; charset=utf-8"
    );
    assert_eq!(
        get(&gateway.http("/assets/missing.png"), &[])
            .await
            .status(),
        404
    );
    // The gateway's own paths keep their answers.
    assert_eq!(get(&gateway.http("/health"), &[]).await.status(), 200);
    assert_eq!(get(&gateway.http("/v1/models"), &[]).await.status(), 404);

    let again = get(&gateway.http("/"), &[("if-none-match", index.etag)]).await;
    assert_eq!(again.status(), 304);
    assert!(again.bytes().await.expect("body").is_empty());
    let identity = get(&gateway.http("/"), &[("accept-encoding", "identity")]).await;
    assert_eq!(
        identity.status(),
        406,
        "gzip is the only coding the binary holds"
    );

    for asset in pincer::gateway::control_ui::ASSETS
        .iter()
        .filter(|a| a.path.starts_with("assets/"))
    {
        let response = get(&gateway.http(&format!("/{}", asset.path)), &[]).await;
        assert_eq!(response.status(), 200, "{}", asset.path);
        assert_eq!(response.headers()["content-type"], asset.content_type);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base_path_and_enabled_move_or_remove_the_ui() {
    let based = config_with_provider("http://127.0.0.1:9").replacen(
        "models:",
        "gateway: { controlUi: { basePath: \"/pincer/\" } },\n  models:",
        1,
    );
    let gateway = start(&based, &["--port", "0", "--token", TOKEN]);
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let redirect = client
        .get(gateway.http("/pincer?x=1"))
        .send()
        .await
        .expect("get");
    assert_eq!(redirect.status(), 302);
    assert_eq!(redirect.headers()["location"], "/pincer/?x=1");
    assert_eq!(get(&gateway.http("/pincer/"), &[]).await.status(), 200);
    assert_eq!(
        get(&gateway.http("/pincer/assets/app.js"), &[])
            .await
            .status(),
        200
    );
    assert_eq!(
        get(&gateway.http("/"), &[]).await.status(),
        404,
        "nothing at the root"
    );
    let boot: Value = get(&gateway.http("/pincer/__pincer/bootstrap.json"), &[])
        .await
        .json()
        .await
        .expect("bootstrap");
    assert_eq!(boot["basePath"], "/pincer");
    drop(gateway);

    let off = config_with_provider("http://127.0.0.1:9").replacen(
        "models:",
        "gateway: { controlUi: { enabled: false } },\n  models:",
        1,
    );
    let gateway = start(&off, &["--port", "0", "--token", TOKEN]);
    let page = get(&gateway.http("/"), &[]).await;
    assert_eq!(page.status(), 404);
    assert_eq!(
        page.headers()["content-type"],
        "application/json; charset=utf-8"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_page_must_come_from_an_allowed_origin() {
    let config = config_with_provider("http://127.0.0.1:9").replacen(
        "models:",
        "gateway: { controlUi: { allowedOrigins: [\"https://ops.example.com\"] } },\n  models:",
        1,
    );
    let gateway = start(&config, &["--port", "0", "--token", TOKEN]);
    let auth = json!({"token": TOKEN});
    let device = Device::new(3);
    let host = format!("127.0.0.1:{}", gateway.port);

    let (mut refused, res) = ui_connect(
        &gateway,
        &[("origin", "http://evil.test")],
        auth.clone(),
        TOKEN,
        Some(&device),
    )
    .await;
    assert_eq!(res["ok"], false, "{res}");
    assert_eq!(
        res["error"]["details"]["code"], "CONTROL_UI_ORIGIN_NOT_ALLOWED",
        "{res}"
    );
    assert!(res["error"]["message"]
        .as_str()
        .expect("message")
        .starts_with("origin not allowed"));
    assert_eq!(refused.closed().await.0, 1008);

    // Listed, the gateway's own page, and a loopback page for a local caller are fine.
    for origin in [
        "https://ops.example.com",
        &origin_of(&gateway),
        "http://localhost:5173",
    ] {
        let headers = [("origin", origin), ("host", host.as_str())];
        let (_client, res) =
            ui_connect(&gateway, &headers, auth.clone(), TOKEN, Some(&device)).await;
        assert_eq!(res["ok"], true, "{origin}: {res}");
    }
    // Through a proxy the caller is not local: a loopback page from elsewhere is refused.
    let proxied = [
        ("origin", "http://localhost:5173"),
        ("x-forwarded-for", "203.0.113.9"),
    ];
    let (_client, res) = ui_connect(&gateway, &proxied, auth, TOKEN, Some(&device)).await;
    assert_eq!(
        res["error"]["details"]["code"], "CONTROL_UI_ORIGIN_NOT_ALLOWED",
        "{res}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_ui_needs_a_device_unless_allow_insecure_auth_on_this_machine() {
    let gateway = start(
        &config_with_provider("http://127.0.0.1:9"),
        &["--port", "0", "--token", TOKEN],
    );
    let origin = origin_of(&gateway);
    let headers = [("origin", origin.as_str())];
    let (_c, res) = ui_connect(&gateway, &headers, json!({"token": TOKEN}), TOKEN, None).await;
    assert_eq!(res["ok"], false, "{res}");
    assert_eq!(
        res["error"]["details"]["code"], "CONTROL_UI_DEVICE_IDENTITY_REQUIRED",
        "{res}"
    );
    assert_eq!(
        res["error"]["message"],
        "control ui requires device identity (use HTTPS or localhost secure context)"
    );
    drop(gateway);

    let insecure = config_with_provider("http://127.0.0.1:9").replacen(
        "models:",
        "gateway: { controlUi: { allowInsecureAuth: true } },\n  models:",
        1,
    );
    let gateway = start(&insecure, &["--port", "0", "--token", TOKEN]);
    let origin = origin_of(&gateway);
    let (mut client, res) = ui_connect(
        &gateway,
        &[("origin", origin.as_str())],
        json!({"token": TOKEN}),
        TOKEN,
        None,
    )
    .await;
    assert_eq!(res["ok"], true, "{res}");
    assert_eq!(
        res["payload"]["auth"]["scopes"].as_array().map(Vec::len),
        Some(ADMIN.len()),
        "{res}"
    );
    assert_eq!(client.call("config.get", json!({})).await["ok"], true);
    // Not on this machine (proxied, from the gateway's LAN page): the switch does not apply.
    let proxied = [
        ("origin", "http://192.168.1.5:18789"),
        ("host", "192.168.1.5:18789"),
        ("x-forwarded-for", "192.168.1.20"),
    ];
    let (_c, res) = ui_connect(&gateway, &proxied, json!({"token": TOKEN}), TOKEN, None).await;
    assert_eq!(
        res["error"]["details"]["code"], "CONTROL_UI_DEVICE_IDENTITY_REQUIRED",
        "{res}"
    );
}

/// A gateway with no provider and the generated token: first-run setup is open.
fn unconfigured(extra: &str) -> GatewayProcess {
    start(&format!("{{ {extra} }}"), &["--port", "0"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_run_setup_tests_writes_pairs_the_page_and_closes() {
    let provider = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(BOT_TOKEN, BOT_ID, BOT_USERNAME).await;
    let discord = FakeDiscord::start(45_000).await;
    let slack = FakeSlack::start().await;
    let mut gateway = unconfigured(&format!(
        "channels: {{ telegram: {{ apiRoot: \"{}\", enabled: false }}, discord: {{ apiBaseUrl: \"{}\", enabled: false }}, slack: {{ apiUrl: \"{}\", enabled: false }} }}",
        telegram.api_root(),
        discord.api_base_url(),
        slack.api_url(),
    ));
    let origin = origin_of(&gateway);
    let boot: Value = get(&gateway.http("/__pincer/bootstrap.json"), &[])
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(
        boot["setup"],
        json!({"needed": true, "allowed": true}),
        "{boot}"
    );
    let proxied: Value = get(
        &gateway.http("/__pincer/bootstrap.json"),
        &[("x-forwarded-for", "100.64.0.7")],
    )
    .await
    .json()
    .await
    .expect("json");
    assert_eq!(
        proxied["setup"]["allowed"], false,
        "never through a proxy: {proxied}"
    );

    // Through a proxy (Tailscale serve/funnel) there is no setup session, even
    // for a page the origin check lets through.
    let owner = Device::new(21);
    let headers = [
        ("origin", "http://192.168.1.5:18789"),
        ("host", "192.168.1.5:18789"),
        ("x-forwarded-for", "100.64.0.7"),
    ];
    let (_c, res) = ui_connect(&gateway, &headers, json!({}), "", Some(&owner)).await;
    assert_eq!(
        res["error"]["details"]["code"], "AUTH_TOKEN_MISSING",
        "{res}"
    );
    // Nor for a client that is not the Control UI, or one without a device.
    let mut cli =
        TestClient::open_with_headers(&gateway.url(), &[("origin", origin.as_str())]).await;
    let params = cli.connect_params_as(("cli", "cli"), json!({}), "", ADMIN, Some(&owner));
    let res = cli.call("connect", params).await;
    assert_eq!(
        res["error"]["details"]["code"], "AUTH_TOKEN_MISSING",
        "{res}"
    );
    let (_c, res) = ui_connect(
        &gateway,
        &[("origin", origin.as_str())],
        json!({}),
        "",
        None,
    )
    .await;
    assert_eq!(res["ok"], false, "{res}");

    let (mut page, res) = ui_connect(
        &gateway,
        &[("origin", origin.as_str())],
        json!({}),
        "",
        Some(&owner),
    )
    .await;
    assert_eq!(res["ok"], true, "a setup session: {res}");
    assert_eq!(res["payload"]["auth"]["scopes"], json!([]));
    let denied = page.call("sessions.list", json!({})).await;
    assert_eq!(
        denied["ok"], false,
        "a setup session reads nothing: {denied}"
    );
    std::fs::write(
        gateway.data_dir().join("firstboot-error.json"),
        r#"{"pincer.json5":{"keptAs":"/boot/firmware/x","error":"unknown key gateway.prot","keyPath":"gateway.prot","atMs":1}}"#,
    )
    .expect("first boot's record");
    let status = page.call("pincer.setup.status", json!({})).await;
    assert_eq!(status["payload"]["open"], true, "{status}");
    assert_eq!(
        status["payload"]["firstboot"][0]["keyPath"], "gateway.prot",
        "{status}"
    );
    assert_eq!(
        status["payload"]["firstboot"][0]["file"], "pincer.json5",
        "{status}"
    );

    let choice = json!({"kind": "openai", "baseUrl": provider.base_url(), "apiKey": "sk-test", "model": "gpt-test"});
    provider.push_reply(FakeReply::Error {
        status: 401,
        message: "bad key".into(),
        retry_after_secs: None,
    });
    let failed = page
        .call("pincer.setup.test", json!({"provider": choice}))
        .await;
    assert_eq!(failed["payload"]["ok"], false, "{failed}");
    assert_eq!(failed["payload"]["status"], "auth", "{failed}");
    let passed = page
        .call("pincer.setup.test", json!({"provider": choice}))
        .await;
    assert_eq!(passed["payload"]["ok"], true, "{passed}");
    assert!(
        passed["payload"]["reply"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{passed}"
    );

    let bot = page
        .call(
            "pincer.setup.channel",
            json!({"channel": "telegram", "token": BOT_TOKEN}),
        )
        .await;
    assert_eq!(bot["payload"]["ok"], true, "{bot}");
    assert_eq!(bot["payload"]["username"], BOT_USERNAME);
    let wrong = page
        .call(
            "pincer.setup.channel",
            json!({"channel": "telegram", "token": "1:wrong"}),
        )
        .await;
    assert_eq!(wrong["payload"]["ok"], false, "{wrong}");
    for (params, ok) in [
        (
            json!({"channel": "discord", "token": fake_discord::TOKEN}),
            true,
        ),
        (
            json!({"channel": "discord", "token": "not-the-token"}),
            false,
        ),
        (
            json!({"channel": "slack", "token": fake_slack::BOT_TOKEN, "appToken": fake_slack::APP_TOKEN}),
            true,
        ),
        (
            json!({"channel": "slack", "token": "xoxb-wrong", "appToken": fake_slack::APP_TOKEN}),
            false,
        ),
    ] {
        let checked = page.call("pincer.setup.channel", params.clone()).await;
        assert_eq!(checked["payload"]["ok"], ok, "{params}: {checked}");
    }

    let short = page
        .call(
            "pincer.setup.apply",
            json!({"provider": choice, "password": "short"}),
        )
        .await;
    assert_eq!(short["ok"], false, "{short}");
    assert!(
        !gateway.read_config().contains("sk-test"),
        "nothing written for a refused apply"
    );
    let applied = page
        .call(
            "pincer.setup.apply",
            json!({"provider": choice, "password": "correct horse", "channels": {"telegram": {"botToken": BOT_TOKEN}}}),
        )
        .await;
    assert_eq!(applied["ok"], true, "{applied}\n{}", gateway.stderr());
    let written = gateway.read_config();
    for needle in [
        "\"primary\": \"openai/gpt-test\"",
        "\"mode\": \"password\"",
        BOT_TOKEN,
        "apiRoot",
    ] {
        assert!(written.contains(needle), "{needle} in {written}");
    }
    gateway.wait_for_ready_line(2).await;

    // The new process runs with the password: setup is closed.
    let boot: Value = get(&gateway.http("/__pincer/bootstrap.json"), &[])
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(boot["setup"]["needed"], false, "{boot}");
    assert_eq!(boot["authMode"], "password");
    let origin = origin_of(&gateway);
    let (_c, res) = ui_connect(
        &gateway,
        &[("origin", origin.as_str())],
        json!({}),
        "",
        Some(&owner),
    )
    .await;
    assert_eq!(
        res["ok"], false,
        "no unauthenticated session after setup: {res}"
    );

    // The page's device was paired by setup: from another machine (not
    // auto-approved) it signs in with the password; a new device waits.
    let lan = [("x-forwarded-for", "192.168.1.30")];
    let password = json!({"password": "correct horse"});
    let mut from_lan = TestClient::open_with_headers(&gateway.url(), &lan).await;
    let params = from_lan.connect_params_as(UI, password.clone(), "", ADMIN, Some(&owner));
    let hello = from_lan.call("connect", params).await;
    assert_eq!(hello["ok"], true, "{hello}");
    assert!(
        hello["payload"]["auth"]["deviceToken"].is_string(),
        "{hello}"
    );
    let stranger = Device::new(22);
    let mut other = TestClient::open_with_headers(&gateway.url(), &lan).await;
    let params = other.connect_params_as(UI, password, "", ADMIN, Some(&stranger));
    let res = other.call("connect", params).await;
    assert_eq!(res["error"]["code"], "NOT_PAIRED", "{res}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_is_closed_when_the_owner_chose_the_secret() {
    let gateway = start("{}", &["--port", "0", "--token", TOKEN]);
    let boot: Value = get(&gateway.http("/__pincer/bootstrap.json"), &[])
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(boot["setup"]["needed"], false, "{boot}");
    let origin = origin_of(&gateway);
    let (_c, res) = ui_connect(
        &gateway,
        &[("origin", origin.as_str())],
        json!({}),
        "",
        Some(&Device::new(5)),
    )
    .await;
    assert_eq!(
        res["error"]["details"]["code"], "AUTH_TOKEN_MISSING",
        "{res}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_set_refuses_an_invalid_value_at_its_key_path_and_keeps_secrets() {
    let mut config = config_with_provider("http://127.0.0.1:9");
    config = config.replacen("models:", "gateway: { port: 18789 },\n  models:", 1);
    let gateway = start(&config, &["--port", "0", "--token", TOKEN]);
    let (mut client, _) = TestClient::connect(&gateway.url(), Some(TOKEN), ADMIN, None).await;
    let got = client.call("config.get", json!({})).await;
    let parsed = got["payload"]["parsed"].clone();
    assert_eq!(
        parsed["models"]["providers"]["fake"]["apiKey"], "__OPENCLAW_REDACTED__",
        "{got}"
    );
    let hash = got["payload"]["hash"].as_str().expect("hash").to_string();
    let before = gateway.read_config();

    let mut bad = parsed.clone();
    bad["gateway"]["port"] = json!("eighty");
    let res = client
        .call(
            "config.set",
            json!({"raw": bad.to_string(), "baseHash": hash}),
        )
        .await;
    assert_eq!(res["ok"], false, "{res}");
    assert_eq!(
        res["error"]["details"]["issues"][0]["path"], "gateway.port",
        "{res}"
    );
    assert!(
        res["error"]["message"]
            .as_str()
            .expect("message")
            .starts_with("invalid config: gateway.port: "),
        "{res}"
    );
    let syntax = client
        .call(
            "config.set",
            json!({"raw": "{ gateway: ", "baseHash": hash}),
        )
        .await;
    assert!(
        syntax["error"]["details"]["issues"][0]["message"]
            .as_str()
            .expect("m")
            .contains("line 1"),
        "{syntax}"
    );
    assert_eq!(gateway.read_config(), before, "nothing was written");

    let mut good = parsed;
    good["agents"]["defaults"]["timeoutSeconds"] = json!(120);
    let res = client
        .call(
            "config.set",
            json!({"raw": good.to_string(), "baseHash": hash}),
        )
        .await;
    assert_eq!(res["ok"], true, "{res}");
    let after = gateway.read_config();
    assert!(
        after.contains("\"sk-test\""),
        "the redacted key kept its stored value: {after}"
    );
    assert!(after.contains("\"timeoutSeconds\": 120"), "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_info_probe_and_dm_pairing_answer_in_upstream_shapes() {
    let provider = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start(BOT_TOKEN, BOT_ID, BOT_USERNAME).await;
    let config = config_with_provider(&provider.base_url()).replacen(
        "models:",
        &format!("channels: {{ telegram: {{ botToken: \"{BOT_TOKEN}\", apiRoot: \"{}\" }} }},\n  models:", telegram.api_root()),
        1,
    );
    let gateway = start(&config, &["--port", "0", "--token", TOKEN]);
    let (mut client, _) = TestClient::connect(&gateway.url(), Some(TOKEN), ADMIN, None).await;

    let info = client.call("system.info", json!({})).await;
    let info = &info["payload"];
    assert!(
        info["memoryTotalBytes"].as_u64().is_some_and(|b| b > 0),
        "{info}"
    );
    assert!(
        info["processMemory"]["rssBytes"]
            .as_u64()
            .is_some_and(|b| b > 1_000_000),
        "{info}"
    );
    assert!(
        info["diskTotalBytes"].as_u64().is_some_and(|b| b > 0),
        "{info}"
    );
    assert_eq!(info["pid"], json!(gateway.child.id()));
    let status = client.call("status", json!({})).await;
    assert!(status["payload"]["board"]["name"].is_string(), "{status}");

    let probe = client
        .call("models.probe", json!({"provider": "fake"}))
        .await;
    assert_eq!(probe["payload"]["status"], "ok", "{probe}");
    assert_eq!(probe["payload"]["results"][0]["profileId"], "fake:default");
    let asked = provider
        .requests()
        .last()
        .expect("a real call")
        .body
        .clone();
    assert_eq!(asked["max_tokens"], 8, "{asked}");
    let unknown = client
        .call("models.probe", json!({"provider": "nope"}))
        .await;
    assert_eq!(unknown["error"]["code"], "INVALID_REQUEST", "{unknown}");

    // Two senders ask for DM access; one is approved, one dismissed.
    telegram.push_message(dm("hello?"));
    let mut other = dm("me too");
    other["from"]["id"] = json!(8);
    other["chat"]["id"] = json!(8);
    telegram.push_message(other);
    telegram.wait_for_calls("sendMessage", 2).await;
    let list = client.call("channels.pairing.list", json!({})).await;
    let requests = list["payload"]["requests"]
        .as_array()
        .expect("requests")
        .clone();
    assert_eq!(requests.len(), 2, "{list}");
    assert_eq!(
        list["payload"]["accounts"][0]["channel"], "telegram",
        "{list}"
    );
    let code = |sender: &str| {
        requests
            .iter()
            .find(|r| r["senderId"] == sender)
            .and_then(|r| r["requestId"].as_str())
            .expect("request")
            .to_string()
    };
    let approved = client
        .call(
            "channels.pairing.approve",
            json!({"channel": "telegram", "accountId": "default", "requestId": code("7")}),
        )
        .await;
    assert_eq!(approved["payload"]["senderId"], "7", "{approved}");
    let dismissed = client
        .call(
            "channels.pairing.dismiss",
            json!({"channel": "telegram", "accountId": "default", "requestId": code("8")}),
        )
        .await;
    assert_eq!(dismissed["payload"]["senderId"], "8", "{dismissed}");
    let list = client.call("channels.pairing.list", json!({})).await;
    assert_eq!(list["payload"]["requests"], json!([]), "{list}");
    let again = client
        .call(
            "channels.pairing.dismiss",
            json!({"channel": "telegram", "accountId": "default", "requestId": code("8")}),
        )
        .await;
    assert_eq!(
        again["error"]["message"],
        "pending DM access request no longer exists"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
}
