//! Matrix end to end: the real `pincer gateway` process signs in to a fake
//! homeserver (client-server API, `tests/support/fake_matrix.rs`) with an
//! access token, long-polls `/sync` and answers through the fake OpenAI
//! provider. Proves: a DM answered in its room (read marker set); an unknown
//! DM sender paired through the CLI, as on the other channels; a room
//! message answered only when it mentions the bot; the `next_batch` token
//! kept in the store across a restart, so a message that arrived while the
//! gateway was down is answered and none is answered twice; a malformed or
//! oversized `/sync` body reported in `channels.status` and the log with
//! what was wrong, the gateway still serving and the account recovering;
//! an end-to-end encrypted room refused with one notice and no model call.

#[path = "support/fake_matrix.rs"]
mod fake_matrix;
#[allow(dead_code)]
#[path = "support/fake_openai.rs"]
mod fake_openai;
#[allow(dead_code)]
#[path = "support/gateway.rs"]
mod gateway;
#[allow(dead_code)]
#[path = "support/ws_client.rs"]
mod ws_client;

use std::process::Command;
use std::time::Duration;

use fake_matrix::{FakeMatrix, ACCESS_TOKEN, BOT_PASSWORD, BOT_USER_ID};
use fake_openai::{FakeOpenAi, FakeReply};
use gateway::GatewayProcess;
use pincer::channels::inbox;
use pincer::store::{Store, StoreOptions};
use serde_json::{json, Value};
use ws_client::TestClient;

/// The gateway's operator token in these tests.
const GATEWAY_TOKEN: &str = "e2e-matrix-operator-token";
/// Hang guard for waits (never a timing claim).
const WAIT_GUARD: Duration = Duration::from_secs(40);
const ANN: &str = "@ann:localhost";
const BOB: &str = "@bob:localhost";
const DM_ROOM: &str = "!dm-ann:localhost";
const OPS_ROOM: &str = "!ops:localhost";
/// pincer's cap on one `/sync` answer (`MAX_SYNC_BYTES` in src/channels/matrix/api.rs).
const MAX_SYNC_BYTES: usize = 16 * 1024 * 1024;

struct Rig {
    matrix: FakeMatrix,
    provider: FakeOpenAi,
}

impl Rig {
    async fn new() -> Rig {
        let matrix = FakeMatrix::start().await;
        matrix.add_direct_room(DM_ROOM, ANN);
        matrix.add_room(OPS_ROOM, Some("Ops"), &[ANN, BOB]);
        Rig {
            matrix,
            provider: FakeOpenAi::start().await,
        }
    }

    /// A config with the fake provider and `channels.matrix` = the fake
    /// homeserver plus `extra`.
    fn config(&self, extra: Value) -> String {
        let mut matrix = json!({
            "homeserver": self.matrix.homeserver(), "accessToken": ACCESS_TOKEN,
            // The fake is on loopback, which upstream (and pincer) refuse unless allowed.
            "network": { "dangerouslyAllowPrivateNetwork": true },
        });
        if let (Some(base), Value::Object(extra)) = (matrix.as_object_mut(), extra) {
            base.extend(extra);
            // A null in `extra` removes the key.
            base.retain(|_, value| !value.is_null());
        }
        json!({
            "models": { "providers": { "fake": {
                "baseUrl": self.provider.base_url(), "apiKey": "sk-test",
                "api": "openai-completions",
                "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
            "agents": { "defaults": { "model": { "primary": "fake/gpt-test" } } },
            "session": { "dmScope": "per-channel-peer" },
            "channels": { "matrix": matrix },
        })
        .to_string()
    }

    fn open_config(&self) -> String {
        self.config(json!({
            "dm": { "policy": "open", "allowFrom": ["*"] },
            "groupPolicy": "allowlist",
            "groups": { OPS_ROOM: { "requireMention": true } },
        }))
    }

    fn start(&self, config: &str) -> GatewayProcess {
        tokio::task::block_in_place(|| {
            GatewayProcess::start(config, &["--port", "0", "--token", GATEWAY_TOKEN])
        })
    }

    /// Waits until the account has finished its first sync and long-polls.
    async fn wait_for_long_poll(&self) {
        eventually("a long-polling /sync with a since token", || {
            self.matrix.sync_sinces().iter().any(Option::is_some)
        })
        .await;
    }

    async fn wait_for_sent(&self, room: &str, count: usize) -> Vec<String> {
        eventually(&format!("{count} messages in {room}"), || {
            self.matrix.sent_to(room).len() >= count
        })
        .await;
        self.matrix
            .sent_to(room)
            .iter()
            .map(|s| s.content["body"].as_str().unwrap_or_default().to_string())
            .collect()
    }
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

fn text_reply(text: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![text.to_string()],
        delay_ms: 0,
    }
}

/// The text of every request the model got.
fn asked(provider: &FakeOpenAi) -> Vec<String> {
    provider
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect()
}

/// The Matrix row of `channels.status`.
async fn matrix_status(gateway: &GatewayProcess) -> Value {
    let (mut client, _) = TestClient::connect(
        &gateway.url(),
        Some(GATEWAY_TOKEN),
        &["operator.read"],
        None,
    )
    .await;
    let listed = client.call("channels.status", json!({})).await;
    listed["payload"]["channelAccounts"]["matrix"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_dm_is_answered_by_the_model_in_its_room() {
    let rig = Rig::new().await;
    let _gateway = rig.start(&rig.open_config());
    rig.wait_for_long_poll().await;

    rig.provider
        .push_reply(text_reply("Hello Ann, from the model."));
    let event_id = rig.matrix.post_text(DM_ROOM, ANN, "hi there, bot");
    let sent = rig.wait_for_sent(DM_ROOM, 1).await;
    assert_eq!(sent, vec!["Hello Ann, from the model."]);
    let asked = asked(&rig.provider);
    assert_eq!(asked.len(), 1);
    assert!(asked[0].contains("hi there, bot"), "{}", asked[0]);
    let message = &rig.matrix.sent_to(DM_ROOM)[0];
    assert_eq!(message.content["msgtype"], "m.text");
    eventually("the DM marked read", || {
        rig.matrix
            .read_markers()
            .iter()
            .any(|(room, body)| room == DM_ROOM && body["m.read"] == event_id.as_str())
    })
    .await;
    // Every call carried the token in the header, never in the URL.
    for request in rig.matrix.requests() {
        assert!(!request.query.contains_key("access_token"), "{request:?}");
    }
}

/// Runs `pincer pairing approve matrix <code>` against the gateway.
fn approve_with_cli(gateway: &GatewayProcess, code: &str) -> String {
    let output = tokio::task::block_in_place(|| {
        Command::new(env!("CARGO_BIN_EXE_pincer"))
            .args(["pairing", "approve", "matrix", code, "--url"])
            .arg(gateway.url())
            .args(["--token", GATEWAY_TOKEN, "--data-dir"])
            .arg(gateway.data_dir())
            .output()
            .expect("run pincer pairing approve")
    });
    assert!(
        output.status.success(),
        "pairing approve failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_dm_gets_a_pairing_code_and_after_cli_approval_is_answered() {
    let rig = Rig::new().await;
    // dm.policy defaults to pairing, as upstream.
    let gateway = rig.start(&rig.config(json!({})));
    rig.wait_for_long_poll().await;

    rig.matrix.post_text(DM_ROOM, ANN, "hello, who are you?");
    let sent = rig.wait_for_sent(DM_ROOM, 1).await;
    let code = sent[0]
        .split("pincer pairing approve matrix")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(|code| code.trim_matches(|c: char| !c.is_ascii_alphanumeric()))
        .unwrap_or_else(|| panic!("no approve command in {:?}", sent[0]))
        .to_string();
    assert!(
        rig.provider.requests().is_empty(),
        "an unpaired sender must not reach the model"
    );
    let printed = approve_with_cli(&gateway, &code);
    assert!(printed.contains(ANN), "{printed}");

    rig.provider.push_reply(text_reply("Paired and answering."));
    rig.matrix.post_text(DM_ROOM, ANN, "now can we talk?");
    let sent = rig.wait_for_sent(DM_ROOM, 2).await;
    assert_eq!(sent[1], "Paired and answering.");
    assert_eq!(rig.provider.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn room_message_is_answered_only_when_it_mentions_the_bot() {
    let rig = Rig::new().await;
    let gateway = rig.start(&rig.open_config());
    rig.wait_for_long_poll().await;

    // Unmentioned: taken in (marked read), handled to the end, never run.
    let chatter = rig
        .matrix
        .post_text(OPS_ROOM, BOB, "talking among ourselves");
    eventually("the room message taken in", || {
        rig.matrix
            .read_markers()
            .iter()
            .any(|(_, body)| body["m.read"] == chatter.as_str())
    })
    .await;
    wait_until_nothing_in_flight(&gateway).await;
    assert!(rig.provider.requests().is_empty(), "no mention, no run");
    assert!(rig.matrix.sent_to(OPS_ROOM).is_empty());

    rig.provider.push_reply(text_reply("You called?"));
    rig.matrix.post_content(
        OPS_ROOM,
        ANN,
        json!({"msgtype": "m.text", "body": "Pincer: what is the plan?",
               "m.mentions": {"user_ids": [BOT_USER_ID]}}),
    );
    let sent = rig.wait_for_sent(OPS_ROOM, 1).await;
    assert_eq!(sent, vec!["You called?"]);
    assert_eq!(rig.provider.requests().len(), 1);

    // The user id in the text is a mention too.
    rig.provider.push_reply(text_reply("Second answer."));
    rig.matrix
        .post_text(OPS_ROOM, ANN, &format!("{BOT_USER_ID} and now?"));
    rig.wait_for_sent(OPS_ROOM, 2).await;
    assert_eq!(
        rig.provider.requests().len(),
        2,
        "only mentions reach the model"
    );
}

/// Waits until the gateway's durable inbox is empty: every message it
/// accepted has been answered (or needed no answer).
async fn wait_until_nothing_in_flight(gateway: &GatewayProcess) {
    // LMDB lets this process read beside the gateway.
    let store = Store::open(&gateway.data_dir().join("store"), StoreOptions::default())
        .expect("open the gateway's store");
    let in_flight = || {
        store
            .meta_with_prefix(inbox::RECORD_PREFIX, 1)
            .expect("read the inbox")
            .len()
    };
    eventually("the gateway's inbox empty", || in_flight() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_token_survives_a_restart_and_no_message_is_answered_twice() {
    let rig = Rig::new().await;
    let config = rig.open_config();
    let mut gateway = rig.start(&config);
    rig.wait_for_long_poll().await;

    rig.provider.push_reply(text_reply("First answer."));
    rig.matrix.post_text(DM_ROOM, ANN, "first question");
    rig.wait_for_sent(DM_ROOM, 1).await;
    // The batch with the bot's own answer is synced (and its token stored).
    let answered_at = rig.matrix.batches().len();
    eventually("the batch after the answer", || {
        rig.matrix.batches().len() > answered_at
    })
    .await;

    let status = tokio::task::block_in_place(|| gateway.terminate());
    assert!(status.success(), "{status:?}");
    let handed_out = rig.matrix.batches();
    let syncs_before = rig.matrix.sync_sinces().len();
    // Arrives while the gateway is down: only a kept token finds it again
    // (a fresh start reads the rooms' recent events as history, unanswered).
    rig.matrix
        .post_text(DM_ROOM, ANN, "second question, while you slept");
    rig.provider.push_reply(text_reply("Second answer."));
    tokio::task::block_in_place(|| {
        gateway.crash_and_restart(&config, &["--port", "0", "--token", GATEWAY_TOKEN])
    });

    let sent = rig.wait_for_sent(DM_ROOM, 2).await;
    assert_eq!(sent, vec!["First answer.", "Second answer."]);
    let first_after = rig.matrix.sync_sinces()[syncs_before].clone();
    let since = first_after.expect("the restarted account resumes from a since token");
    assert!(handed_out.contains(&since), "{since} was never handed out");

    // Another round trip, then nothing was asked or answered twice.
    rig.provider.push_reply(text_reply("Third answer."));
    rig.matrix.post_text(DM_ROOM, ANN, "third question");
    let sent = rig.wait_for_sent(DM_ROOM, 3).await;
    assert_eq!(sent.len(), 3, "{sent:?}");
    let asked = asked(&rig.provider);
    assert_eq!(asked.len(), 3, "each question reaches the model once");
    assert_eq!(
        asked
            .iter()
            .filter(|a| a.contains("first question"))
            .count(),
        // The later turns of the same session carry it as history.
        3
    );
    let last = asked.last().expect("three requests");
    assert_eq!(last.matches("first question").count(), 1, "{last}");
    assert_eq!(last.matches("second question").count(), 1, "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_or_oversized_sync_body_is_reported_and_the_account_recovers() {
    let rig = Rig::new().await;
    // The first sync answers are broken: cut-off JSON, then a body past the cap.
    rig.matrix
        .script_sync(200, r#"{"next_batch": "s1", "rooms": {"join": {"#);
    rig.matrix.script_sync(200, vec![b' '; MAX_SYNC_BYTES + 1]);
    let gateway = rig.start(&rig.open_config());

    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    while seen.len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "errors seen: {seen:?}"
        );
        let row = matrix_status(&gateway).await;
        if let Some(error) = row["lastError"].as_str() {
            if !seen.iter().any(|s: &String| s == error) {
                assert_eq!(row["connected"], false, "{row}");
                seen.push(error.to_string());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen[0].contains("matrix sync: unreadable answer") && seen[0].contains("EOF"),
        "{seen:?}"
    );
    assert!(
        seen[1].contains(&format!("answer larger than {MAX_SYNC_BYTES} bytes")),
        "{seen:?}"
    );
    assert!(gateway.stderr().contains("matrix sync: unreadable answer"));

    // The gateway kept serving and the account came back.
    rig.wait_for_long_poll().await;
    assert_eq!(rig.matrix.scripted_left(), 0);
    rig.provider.push_reply(text_reply("Still here."));
    rig.matrix.post_text(DM_ROOM, ANN, "are you alive?");
    assert_eq!(rig.wait_for_sent(DM_ROOM, 1).await, vec!["Still here."]);
    let row = matrix_status(&gateway).await;
    assert_eq!(row["connected"], true, "{row}");
    assert_eq!(row["identity"], BOT_USER_ID, "{row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_room_is_refused_with_one_notice_and_no_model_call() {
    let rig = Rig::new().await;
    let _gateway = rig.start(&rig.open_config());
    rig.wait_for_long_poll().await;

    for n in 0..2 {
        rig.matrix.post_event(
            DM_ROOM,
            json!({"type": "m.room.encrypted", "sender": ANN, "content": {
                "algorithm": "m.megolm.v1.aes-sha2", "ciphertext": format!("AwgAEn{n}"),
                "device_id": "ANNDEV", "sender_key": "k", "session_id": "s"}}),
        );
    }
    let sent = rig.wait_for_sent(DM_ROOM, 1).await;
    assert!(sent[0].contains("end-to-end encrypted"), "{sent:?}");
    assert_eq!(
        rig.matrix.sent_to(DM_ROOM)[0].content["msgtype"],
        "m.notice"
    );
    // A plain message after them is answered: the refusal did not stop the account.
    rig.provider.push_reply(text_reply("Plain text works."));
    rig.matrix
        .post_text(OPS_ROOM, ANN, &format!("{BOT_USER_ID} ping"));
    rig.wait_for_sent(OPS_ROOM, 1).await;
    assert_eq!(rig.matrix.sent_to(DM_ROOM).len(), 1, "one notice only");
    assert_eq!(rig.provider.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_login_is_made_once_and_its_session_kept_across_restarts() {
    let rig = Rig::new().await;
    let config = rig.config(json!({
        "accessToken": null, "userId": BOT_USER_ID, "password": BOT_PASSWORD,
        "deviceName": "pincer test",
        "dm": { "policy": "open", "allowFrom": ["*"] },
    }));
    let mut gateway = rig.start(&config);
    rig.wait_for_long_poll().await;
    assert_eq!(rig.matrix.logins(), 1);
    let login = rig
        .matrix
        .requests()
        .into_iter()
        .find(|r| r.path == "/login")
        .expect("a login request");
    assert_eq!(login.body["identifier"]["user"], BOT_USER_ID);
    assert_eq!(login.body["initial_device_display_name"], "pincer test");

    rig.provider
        .push_reply(text_reply("Signed in by password."));
    rig.matrix.post_text(DM_ROOM, ANN, "hello");
    rig.wait_for_sent(DM_ROOM, 1).await;

    let syncs = rig.matrix.sync_sinces().len();
    tokio::task::block_in_place(|| {
        gateway.crash_and_restart(&config, &["--port", "0", "--token", GATEWAY_TOKEN])
    });
    eventually("the restarted account long-polls", || {
        rig.matrix.sync_sinces()[syncs..]
            .iter()
            .any(Option::is_some)
    })
    .await;
    assert_eq!(rig.matrix.logins(), 1, "the stored session was reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invites_are_joined_only_as_auto_join_allows() {
    let rig = Rig::new().await;
    let config = rig.config(json!({
        "autoJoin": "allowlist", "autoJoinAllowlist": ["!welcome:localhost"],
        "groupPolicy": "open",
    }));
    let _gateway = rig.start(&config);
    rig.wait_for_long_poll().await;

    rig.matrix.invite_bot("!stranger:localhost", BOB, false);
    rig.matrix.invite_bot("!welcome:localhost", ANN, false);
    eventually("the allowed invite joined", || {
        rig.matrix.joins() == vec!["!welcome:localhost".to_string()]
    })
    .await;
    rig.provider.push_reply(text_reply("Glad to be here."));
    rig.matrix.post_text(
        "!welcome:localhost",
        ANN,
        &format!("{BOT_USER_ID} welcome!"),
    );
    assert_eq!(
        rig.wait_for_sent("!welcome:localhost", 1).await,
        vec!["Glad to be here."]
    );
    assert_eq!(
        rig.matrix.joins(),
        vec!["!welcome:localhost".to_string()],
        "the other invite is left pending"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joined_dm_invite_stays_a_dm_after_a_restart() {
    let rig = Rig::new().await;
    let config = rig.config(json!({
        "autoJoin": "always", "groupPolicy": "open",
        "dm": { "policy": "open", "allowFrom": ["*"] },
    }));
    let mut gateway = rig.start(&config);
    rig.wait_for_long_poll().await;
    rig.matrix.invite_bot("!newdm:localhost", BOB, true);
    eventually("the DM invite joined and put in m.direct", || {
        rig.matrix
            .direct()
            .is_some_and(|d| d[BOB] == json!(["!newdm:localhost"]))
    })
    .await;
    assert_eq!(
        rig.matrix.direct().expect("m.direct")[ANN],
        json!([DM_ROOM])
    );

    let args = ["--port", "0", "--token", GATEWAY_TOKEN];
    tokio::task::block_in_place(|| gateway.crash_and_restart(&config, &args));
    rig.wait_for_long_poll().await;
    // No mention: answered only because the room is still a DM.
    rig.provider.push_reply(text_reply("Still your DM."));
    rig.matrix
        .post_text("!newdm:localhost", BOB, "remember me?");
    assert_eq!(
        rig.wait_for_sent("!newdm:localhost", 1).await,
        vec!["Still your DM."]
    );
}
