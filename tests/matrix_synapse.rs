//! The Matrix channel against a real homeserver: Synapse (PyPI
//! `matrix-synapse`, `scripts/setup synapse`) on a loopback port with its
//! own SQLite database, users registered through the shared secret. The real
//! `pincer gateway` signs in with a password, joins a DM invite
//! (`autoJoin: "always"`), answers the DM through the fake OpenAI provider,
//! answers a group room only when mentioned, and after a restart resumes
//! from its stored `next_batch`: a message sent while it was down is
//! answered, none twice, and no second login is made. A reply's file is
//! uploaded to Synapse's media repository and sent as an `m.image` whose
//! `mxc://` URI downloads the same bytes.

#[path = "support/fake_openai.rs"]
#[allow(dead_code)]
mod fake_openai;
#[allow(dead_code)]
#[path = "support/gateway.rs"]
mod gateway;
#[allow(dead_code)]
#[path = "support/media_files.rs"]
mod media_files;
#[path = "support/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fake_openai::{FakeOpenAi, FakeReply};
use gateway::GatewayProcess;
use serde_json::{json, Value};

/// Hang guard for waits (never a timing claim).
const WAIT_GUARD: Duration = Duration::from_secs(60);
const BOT_PASSWORD: &str = "pincer-bot-password";
const ANN_PASSWORD: &str = "ann-password";

/// The venv's python with Synapse, if installed.
fn synapse_python() -> Option<PathBuf> {
    let path = std::env::var_os("PINCER_SYNAPSE_PYTHON").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/synapse/bin/python"),
        PathBuf::from,
    );
    let works = Command::new(&path)
        .args(["-c", "import synapse"])
        .status()
        .is_ok_and(|s| s.success());
    works.then_some(path)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A running Synapse; killed when dropped.
struct Synapse {
    child: Child,
    dir: tempfile::TempDir,
    python: PathBuf,
    url: String,
}

impl Drop for Synapse {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Synapse {
    async fn start(python: PathBuf) -> Synapse {
        let dir = tempfile::tempdir().expect("synapse dir");
        let config = dir.path().join("homeserver.yaml");
        // Synapse writes its log and pid files beside it: in the temp dir,
        // never in the source tree.
        let generated = Command::new(&python)
            .current_dir(dir.path())
            .args(["-m", "synapse.app.homeserver", "--server-name", "localhost"])
            .arg("--config-path")
            .arg(&config)
            .arg("--data-directory")
            .arg(dir.path())
            .args(["--generate-config", "--report-stats=no"])
            .output()
            .expect("generate the synapse config");
        assert!(
            generated.status.success(),
            "{}",
            String::from_utf8_lossy(&generated.stderr)
        );
        let port = free_port();
        let text = std::fs::read_to_string(&config).expect("config");
        let text = text
            .replace("port: 8008", &format!("port: {port}"))
            .replace("    - ::1\n", "");
        // No federation, no key servers, and rate limits a test does not hit.
        let extra = "
trusted_key_servers: []
suppress_key_server_warning: true
rc_message: {per_second: 1000, burst_count: 1000}
rc_login:
  address: {per_second: 1000, burst_count: 1000}
  account: {per_second: 1000, burst_count: 1000}
  failed_attempts: {per_second: 1000, burst_count: 1000}
rc_joins:
  local: {per_second: 1000, burst_count: 1000}
rc_invites:
  per_room: {per_second: 1000, burst_count: 1000}
  per_user: {per_second: 1000, burst_count: 1000}
";
        std::fs::write(&config, format!("{text}{extra}")).expect("write config");
        let log = std::fs::File::create(dir.path().join("synapse.stderr")).expect("log");
        let child = Command::new(&python)
            .current_dir(dir.path())
            .args(["-m", "synapse.app.homeserver", "-c"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start synapse");
        let synapse = Synapse {
            child,
            dir,
            python,
            url: format!("http://127.0.0.1:{port}"),
        };
        let versions = format!("{}/_matrix/client/versions", synapse.url);
        let deadline = tokio::time::Instant::now() + WAIT_GUARD;
        loop {
            if let Ok(answer) = reqwest::get(&versions).await {
                if answer.status().is_success() {
                    break;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "synapse did not answer: {}",
                std::fs::read_to_string(synapse.dir.path().join("synapse.stderr"))
                    .unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        synapse
    }

    fn register(&self, user: &str, password: &str, admin: bool) {
        let script = self
            .python
            .parent()
            .expect("venv bin")
            .join("register_new_matrix_user");
        let output = Command::new(&self.python)
            .current_dir(self.dir.path())
            .arg(script)
            .arg("-c")
            .arg(self.dir.path().join("homeserver.yaml"))
            .args(["-u", user, "-p", password])
            .arg(if admin { "--admin" } else { "--no-admin" })
            .arg(&self.url)
            .output()
            .expect("register_new_matrix_user");
        assert!(
            output.status.success(),
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// A Matrix user driven over the client-server API.
struct Person {
    url: String,
    token: String,
    http: reqwest::Client,
}

impl Person {
    async fn login(url: &str, user: &str, password: &str) -> Person {
        let http = reqwest::Client::new();
        let body = json!({"type": "m.login.password",
            "identifier": {"type": "m.id.user", "user": user}, "password": password});
        let answer: Value = http
            .post(format!("{url}/_matrix/client/v3/login"))
            .json(&body)
            .send()
            .await
            .expect("login")
            .json()
            .await
            .expect("login answer");
        Person {
            url: url.to_string(),
            token: answer["access_token"]
                .as_str()
                .unwrap_or_else(|| panic!("no token: {answer}"))
                .to_string(),
            http,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self
            .http
            .request(method, format!("{}/_matrix/client/v3{path}", self.url))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("synapse answers");
        let status = response.status();
        let value: Value = response.json().await.expect("JSON");
        assert!(status.is_success(), "{path}: {status} {value}");
        value
    }

    async fn create_room(&self, body: Value) -> String {
        let answer = self
            .call(reqwest::Method::POST, "/createRoom", Some(body))
            .await;
        answer["room_id"].as_str().expect("room_id").to_string()
    }

    async fn say(&self, room: &str, content: Value) {
        let path = format!(
            "/rooms/{}/send/m.room.message/{}",
            encode(room),
            uuid::Uuid::new_v4().simple()
        );
        self.call(reqwest::Method::PUT, &path, Some(content)).await;
    }

    /// The bodies of the room's messages from `sender`, oldest first.
    async fn messages_from(&self, room: &str, sender: &str) -> Vec<String> {
        let path = format!("/rooms/{}/messages?dir=b&limit=100", encode(room));
        let answer = self.call(reqwest::Method::GET, &path, None).await;
        let mut bodies: Vec<String> = answer["chunk"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["type"] == "m.room.message" && e["sender"] == sender)
            .filter_map(|e| e["content"]["body"].as_str().map(str::to_string))
            .collect();
        bodies.reverse();
        bodies
    }

    async fn wait_for_messages(&self, room: &str, sender: &str, count: usize) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + WAIT_GUARD;
        loop {
            let bodies = self.messages_from(room, sender).await;
            if bodies.len() >= count {
                return bodies;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{count} messages from {sender} in {room} never came: {bodies:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn joined_members(&self, room: &str) -> Vec<String> {
        let path = format!("/rooms/{}/joined_members", encode(room));
        let answer = self.call(reqwest::Method::GET, &path, None).await;
        answer["joined"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }
}

fn encode(segment: &str) -> String {
    segment
        .replace('!', "%21")
        .replace(':', "%3A")
        .replace('#', "%23")
}

fn text_reply(text: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![text.to_string()],
        delay_ms: 0,
    }
}

/// The bot's devices (each password login makes one), through the admin API.
async fn bot_devices(admin: &Person) -> Vec<String> {
    let url = format!(
        "{}/_synapse/admin/v2/users/%40pincer%3Alocalhost/devices",
        admin.url
    );
    let answer: Value = admin
        .http
        .get(url)
        .bearer_auth(&admin.token)
        .send()
        .await
        .expect("admin API")
        .json()
        .await
        .expect("JSON");
    answer["devices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["device_id"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synapse_dm_and_room_are_answered_and_the_sync_token_survives_a_restart() {
    let Some(python) = synapse_python() else {
        assert!(
            !skip::in_ci(),
            "Synapse is not installed (scripts/setup synapse)"
        );
        skip::skip(
            "synapse_dm_and_room_are_answered_and_the_sync_token_survives_a_restart",
            "Synapse is not installed (scripts/setup synapse)",
        );
        return;
    };
    let synapse = Synapse::start(python).await;
    synapse.register("pincer", BOT_PASSWORD, false);
    // Ann is the server's admin: she can list the bot's devices.
    synapse.register("ann", ANN_PASSWORD, true);
    let ann = Person::login(&synapse.url, "ann", ANN_PASSWORD).await;
    let bot = "@pincer:localhost";
    let provider = FakeOpenAi::start().await;
    let config = json!({
        "models": { "providers": { "fake": {
            "baseUrl": provider.base_url(), "apiKey": "sk-test", "api": "openai-completions",
            "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
        "agents": { "defaults": { "model": { "primary": "fake/gpt-test" } } },
        "session": { "dmScope": "per-channel-peer" },
        "channels": { "matrix": {
            "homeserver": synapse.url, "userId": bot, "password": BOT_PASSWORD,
            "network": { "dangerouslyAllowPrivateNetwork": true },
            "autoJoin": "always", "dm": { "policy": "open", "allowFrom": ["*"] },
            "groupPolicy": "open",
        } },
    })
    .to_string();
    let args = ["--port", "0"];
    let mut gateway = tokio::task::block_in_place(|| GatewayProcess::start(&config, &args));

    // A DM: Ann invites the bot to a direct room; it joins and answers there.
    let dm = ann
        .create_room(json!({"preset": "trusted_private_chat", "is_direct": true, "invite": [bot]}))
        .await;
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    while !ann.joined_members(&dm).await.iter().any(|m| m == bot) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bot never joined"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    provider.push_reply(text_reply("Hello Ann, from Synapse."));
    ann.say(&dm, json!({"msgtype": "m.text", "body": "hi bot"}))
        .await;
    let answers = ann.wait_for_messages(&dm, bot, 1).await;
    assert_eq!(answers, vec!["Hello Ann, from Synapse."]);

    // A room: only the mention is answered.
    let room = ann
        .create_room(json!({"preset": "private_chat", "name": "Ops", "invite": [bot]}))
        .await;
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    while !ann.joined_members(&room).await.iter().any(|m| m == bot) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bot never joined the room"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ann.say(
        &room,
        json!({"msgtype": "m.text", "body": "just a note to myself"}),
    )
    .await;
    provider.push_reply(text_reply("You called?"));
    ann.say(
        &room,
        json!({"msgtype": "m.text", "body": "Pincer: are you there?",
               "m.mentions": {"user_ids": [bot]}}),
    )
    .await;
    let answers = ann.wait_for_messages(&room, bot, 1).await;
    assert_eq!(answers, vec!["You called?"]);
    assert_eq!(
        provider.requests().len(),
        2,
        "the unmentioned note ran nothing"
    );

    // Down, a message arrives; after the restart it is answered, none twice.
    let devices = bot_devices(&ann).await;
    // Registration made one, pincer's password login the other.
    assert_eq!(devices.len(), 2, "{devices:?}");
    let status = tokio::task::block_in_place(|| gateway.terminate());
    assert!(status.success(), "{status:?}");
    ann.say(
        &dm,
        json!({"msgtype": "m.text", "body": "while you were away"}),
    )
    .await;
    provider.push_reply(text_reply("Back again."));
    tokio::task::block_in_place(|| gateway.crash_and_restart(&config, &args));
    let answers = ann.wait_for_messages(&dm, bot, 2).await;
    assert_eq!(answers, vec!["Hello Ann, from Synapse.", "Back again."]);
    assert_eq!(provider.requests().len(), 3);
    assert_eq!(
        bot_devices(&ann).await,
        devices,
        "the stored session was reused: no new login, no new device"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synapse_a_replys_file_is_uploaded_and_sent_as_an_image() {
    let Some(python) = synapse_python() else {
        assert!(
            !skip::in_ci(),
            "Synapse is not installed (scripts/setup synapse)"
        );
        skip::skip(
            "synapse_a_replys_file_is_uploaded_and_sent_as_an_image",
            "Synapse is not installed (scripts/setup synapse)",
        );
        return;
    };
    let synapse = Synapse::start(python).await;
    synapse.register("pincer", BOT_PASSWORD, false);
    synapse.register("ann", ANN_PASSWORD, false);
    let ann = Person::login(&synapse.url, "ann", ANN_PASSWORD).await;
    let bot = "@pincer:localhost";
    let provider = FakeOpenAi::start().await;
    let config = json!({
        "models": { "providers": { "fake": {
            "baseUrl": provider.base_url(), "apiKey": "sk-test", "api": "openai-completions",
            "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
        "agents": { "defaults": { "model": { "primary": "fake/gpt-test" } } },
        "channels": { "matrix": {
            "homeserver": synapse.url, "userId": bot, "password": BOT_PASSWORD,
            "network": { "dangerouslyAllowPrivateNetwork": true },
            "autoJoin": "always", "dm": { "policy": "open", "allowFrom": ["*"] },
        } },
    })
    .to_string();
    let gateway = tokio::task::block_in_place(|| GatewayProcess::start(&config, &["--port", "0"]));
    let chart = media_files::jpeg(48, 32);
    let workspace = gateway.data_dir().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("chart.jpg"), &chart).expect("chart");
    let dm = ann
        .create_room(json!({"preset": "trusted_private_chat", "is_direct": true, "invite": [bot]}))
        .await;
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    while !ann.joined_members(&dm).await.iter().any(|m| m == bot) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bot never joined"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    provider.push_reply(text_reply("Here is the **chart**.\nMEDIA: ./chart.jpg"));
    ann.say(&dm, json!({"msgtype": "m.text", "body": "chart please"}))
        .await;
    ann.wait_for_messages(&dm, bot, 1).await;
    let path = format!("/rooms/{}/messages?dir=b&limit=100", encode(&dm));
    let answer = ann.call(reqwest::Method::GET, &path, None).await;
    let sent: Vec<Value> = answer["chunk"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["type"] == "m.room.message" && e["sender"] == bot)
        .map(|e| e["content"].clone())
        .collect();
    assert_eq!(sent.len(), 1, "the text went as the caption: {sent:?}");
    let content = &sent[0];
    assert_eq!(content["msgtype"], "m.image", "{content}");
    assert_eq!(content["body"], "Here is the **chart**.");
    assert_eq!(content["format"], "org.matrix.custom.html");
    assert_eq!(content["formatted_body"], "Here is the <b>chart</b>.");
    assert_eq!(content["filename"], "chart.jpg");
    assert_eq!(content["info"]["mimetype"], "image/jpeg");
    assert_eq!(content["info"]["size"], chart.len());
    let mxc = content["url"].as_str().expect("an mxc URL");
    let (server, media) = mxc
        .strip_prefix("mxc://")
        .and_then(|rest| rest.split_once('/'))
        .expect("mxc://server/media");
    let download = format!(
        "{}/_matrix/client/v1/media/download/{server}/{media}",
        synapse.url
    );
    let bytes = reqwest::Client::new()
        .get(download)
        .bearer_auth(&ann.token)
        .send()
        .await
        .expect("download")
        .bytes()
        .await
        .expect("bytes");
    assert_eq!(
        bytes.as_ref(),
        chart.as_slice(),
        "Synapse holds the file as sent"
    );
}
