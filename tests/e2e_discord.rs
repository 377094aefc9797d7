//! Discord end to end: the real `pincer gateway` process connects to a fake
//! Discord (gateway WebSocket + REST) and answers through a fake OpenAI
//! provider. Proves issue 5's acceptance list for Discord: an open-policy DM
//! answered; a guild message with a mention answered and one without
//! ignored (no provider call); a long answer chunked within 2,000
//! characters and 17 lines; a 429 on the send retried, not before its
//! `retry_after`.

#[path = "support/fake_discord.rs"]
mod fake_discord;
#[allow(dead_code)]
#[path = "support/fake_openai.rs"]
mod fake_openai;
#[allow(dead_code)]
#[path = "support/gateway.rs"]
mod gateway;

use std::path::{Path, PathBuf};
use std::time::Duration;

use fake_discord::{FakeDiscord, RestReply, RestRequest, BOT_USER_ID, TOKEN};
use fake_openai::{FakeOpenAi, FakeReply};
use gateway::GatewayProcess;
use pincer::channels::inbox;
use pincer::store::{Store, StoreOptions};
use serde_json::{json, Value};

/// Hang guard for waits (never a timing claim).
const WAIT_GUARD: Duration = Duration::from_secs(30);
/// Discord's message limits as the adapter must honour them.
const DISCORD_MAX_CHARS: usize = 2000;
const DISCORD_MAX_LINES: usize = 17;
/// HELLO's heartbeat interval: long, the tests never need a beat.
const HEARTBEAT_MS: u64 = 45_000;

struct Rig {
    discord: FakeDiscord,
    provider: FakeOpenAi,
    gateway: GatewayProcess,
}

impl Rig {
    async fn start(discord_extra: Value) -> Rig {
        let discord = FakeDiscord::start(HEARTBEAT_MS).await;
        let provider = FakeOpenAi::start().await;
        let mut channel = json!({
            "token": TOKEN, "apiBaseUrl": discord.api_base_url(),
            "streaming": "off", "dmPolicy": "open", "allowFrom": ["*"],
            "guilds": { "77": { "requireMention": true } },
        });
        if let (Some(base), Value::Object(extra)) = (channel.as_object_mut(), discord_extra) {
            base.extend(extra);
        }
        let config = json!({
            "models": { "providers": { "fake": {
                "baseUrl": provider.base_url(), "apiKey": "sk-test",
                "api": "openai-completions",
                "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
            "agents": { "defaults": { "model": { "primary": "fake/gpt-test" } } },
            "session": { "dmScope": "per-channel-peer" },
            "channels": { "discord": channel },
        })
        .to_string();
        let gateway = tokio::task::block_in_place(|| {
            GatewayProcess::start_with_private_tmp(&config, &["--port", "0"])
        });
        let rig = Rig {
            discord,
            provider,
            gateway,
        };
        eventually("the gateway identified", || {
            !rig.discord.client_frames(2).is_empty()
        })
        .await;
        rig
    }

    fn sends(&self) -> Vec<RestRequest> {
        self.discord
            .rest_requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/messages"))
            .collect()
    }

    async fn wait_for_sends(&self, count: usize) -> Vec<RestRequest> {
        eventually(&format!("{count} message sends"), || {
            self.sends().len() >= count
        })
        .await;
        self.sends()
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

fn content(request: &RestRequest) -> String {
    request.body["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn text_reply(text: &str) -> FakeReply {
    FakeReply::Text {
        chunks: vec![text.to_string()],
        delay_ms: 0,
    }
}

fn dm(id: &str, content: &str) -> Value {
    json!({
        "id": id, "channel_id": "dm-chan", "type": 0, "content": content,
        "timestamp": "2026-11-22T08:00:00.000000+00:00", "tts": false,
        "author": {"id": "42", "username": "ann", "global_name": "Ann"},
        "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "pinned": false
    })
}

fn guild_message(id: &str, content: &str, mentions_bot: bool) -> Value {
    let mut message = dm(id, content);
    message["channel_id"] = json!("500");
    message["guild_id"] = json!("77");
    message["member"] = json!({"roles": [], "joined_at": "2026-01-01T00:00:00+00:00"});
    if mentions_bot {
        message["mentions"] = json!([{"id": BOT_USER_ID, "username": "pincer"}]);
    }
    message
}

fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_policy_dm_is_answered_by_the_model() {
    let rig = Rig::start(json!({})).await;
    rig.provider
        .push_reply(text_reply("Hello Ann, from the model."));
    rig.discord
        .dispatch("MESSAGE_CREATE", dm("1", "hi there, bot"));
    let sent = rig.wait_for_sends(1).await;
    assert_eq!(content(&sent[0]), "Hello Ann, from the model.");
    let asked = rig.provider.requests()[0].body.to_string();
    assert!(asked.contains("hi there, bot"), "{asked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guild_message_with_mention_is_answered_and_without_mention_ignored() {
    let rig = Rig::start(json!({})).await;
    rig.discord.dispatch(
        "MESSAGE_CREATE",
        guild_message("1", "talking among ourselves", false),
    );
    rig.provider.push_reply(text_reply("You called?"));
    let mention = format!("<@{BOT_USER_ID}> what is the plan?");
    rig.discord
        .dispatch("MESSAGE_CREATE", guild_message("2", &mention, true));
    let sent = rig.wait_for_sends(1).await;
    assert_eq!(content(&sent[0]), "You called?");
    assert!(
        sent[0].path.ends_with("/channels/500/messages"),
        "{}",
        sent[0].path
    );

    // A second round: the unmentioned message before it had its chance.
    rig.discord.dispatch(
        "MESSAGE_CREATE",
        guild_message("3", "still nobody asked", false),
    );
    rig.provider.push_reply(text_reply("Second answer."));
    rig.discord
        .dispatch("MESSAGE_CREATE", guild_message("4", &mention, true));
    rig.wait_for_sends(2).await;
    assert_eq!(
        rig.provider.requests().len(),
        2,
        "only mentions reach the model"
    );
    assert_eq!(rig.sends().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_answer_is_chunked_within_2000_chars_and_17_lines() {
    let rig = Rig::start(json!({})).await;
    let answer: String = (0..80)
        .map(|i| format!("Line {i:02}: a sentence of reasonable length for a chat message.\n"))
        .collect();
    assert!(answer.chars().count() > 2 * DISCORD_MAX_CHARS);
    let pieces: Vec<String> = answer
        .as_bytes()
        .chunks(300)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    rig.provider.push_reply(FakeReply::Text {
        chunks: pieces,
        delay_ms: 5,
    });
    rig.discord
        .dispatch("MESSAGE_CREATE", dm("1", "write a lot"));
    eventually("the whole answer delivered", || {
        let joined: Vec<String> = rig.sends().iter().map(content).collect();
        squash(&joined.join("\n")).len() >= squash(&answer).len()
    })
    .await;
    let texts: Vec<String> = rig.sends().iter().map(content).collect();
    assert!(texts.len() >= 5, "80 lines need at least 5 messages of 17");
    for text in &texts {
        assert!(
            text.chars().count() <= DISCORD_MAX_CHARS,
            "{} chars",
            text.chars().count()
        );
        assert!(
            text.lines().count() <= DISCORD_MAX_LINES,
            "{} lines",
            text.lines().count()
        );
    }
    assert_eq!(squash(&texts.join("\n")), squash(&answer));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_send_is_retried_not_before_retry_after() {
    let rig = Rig::start(json!({})).await;
    rig.discord.script_rest_on(
        "POST",
        "/messages",
        RestReply {
            status: 429,
            headers: vec![
                ("retry-after".into(), "1".into()),
                ("x-ratelimit-scope".into(), "user".into()),
            ],
            body: json!({"message": "You are being rate limited.", "retry_after": 1.0, "global": false}),
        },
    );
    rig.provider
        .push_reply(text_reply("Delivered despite the limit."));
    rig.discord
        .dispatch("MESSAGE_CREATE", dm("1", "are you there?"));
    let sent = rig.wait_for_sends(2).await;
    assert_eq!(content(&sent[0]), "Delivered despite the limit.");
    assert_eq!(content(&sent[1]), "Delivered despite the limit.");
    let gap = sent[1].at.duration_since(sent[0].at);
    assert!(gap >= Duration::from_secs(1), "retried after {gap:?}");
}

/// The path of the file the model was told about (upstream's media note).
fn attached_path(asked: &str) -> PathBuf {
    let start = asked.find("[media attached: ").expect("a media note") + "[media attached: ".len();
    let rest = &asked[start..];
    PathBuf::from(&rest[..rest.find(" (").expect("the note names the type")])
}

/// A PNG of `len` bytes.
fn png(len: usize) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n".to_vec();
    bytes.resize(len, 7);
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachment_is_shown_to_the_model_and_removed_after_the_run() {
    let rig = Rig::start(json!({"mediaMaxMb": 1})).await;
    let attachment = rig
        .discord
        .add_attachment("cat.png", png(20_000), "image/png");
    let mut message = dm("1", "what is this?");
    message["attachments"] = json!([attachment]);
    rig.provider.push_reply(text_reply("A cat."));
    rig.discord.dispatch("MESSAGE_CREATE", message);
    let sent = rig.wait_for_sends(1).await;
    assert_eq!(content(&sent[0]), "A cat.");
    let asked = rig.provider.requests()[0].body.to_string();
    assert!(asked.contains("<media:image>"), "{asked}");
    let path = attached_path(&asked);
    let media_dir = rig.gateway.tmp_dir().join("pincer-media").join("discord");
    assert!(path.starts_with(&media_dir), "{path:?}");
    assert_eq!(rig.discord.file_fetches("cat.png"), 1);
    eventually("the file removed after the run", || {
        !Path::new(&path).exists()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachment_over_the_cap_reaches_the_model_as_a_note_without_download() {
    let rig = Rig::start(json!({"mediaMaxMb": 0.01})).await;
    let attachment = rig
        .discord
        .add_attachment("big.pdf", vec![b'%'; 50_000], "application/pdf");
    let mut message = dm("1", "read this");
    message["attachments"] = json!([attachment]);
    rig.provider.push_reply(text_reply("Too big for me."));
    rig.discord.dispatch("MESSAGE_CREATE", message);
    // The sender is told, and the model still answers the message.
    let said: Vec<String> = rig
        .wait_for_sends(2)
        .await
        .iter()
        .map(|r| r.body["content"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        said.iter().any(|t| t
            == "The document you sent was not used (big.pdf, 48.8 KB: over the 10.2 KB limit, not downloaded)."),
        "{said:?}"
    );
    assert!(said.iter().any(|t| t == "Too big for me."), "{said:?}");
    let asked = rig.provider.requests()[0].body.to_string();
    assert!(
        asked.contains(
            "<media:document> (big.pdf, 48.8 KB: over the 10.2 KB limit, not downloaded)"
        ),
        "{asked}"
    );
    assert!(!asked.contains("[media attached"), "{asked}");
    assert_eq!(rig.discord.file_fetches("big.pdf"), 0);
}

/// Waits until the gateway's durable inbox is empty: every message it
/// accepted has been answered (or needed no answer).
async fn wait_until_nothing_in_flight(gateway: &GatewayProcess) {
    let store = Store::open(&gateway.data_dir().join("store"), StoreOptions::default())
        .expect("open the gateway's store");
    eventually("the gateway's inbox empty", || {
        store
            .meta_with_prefix(inbox::RECORD_PREFIX, 1)
            .expect("read the inbox")
            .is_empty()
    })
    .await;
}

/// A guild message in `channel` of guild 77 by `author` with `roles`.
fn member_message(id: &str, channel: &str, author: &str, roles: &[&str], content: &str) -> Value {
    let mut message = guild_message(id, content, false);
    message["channel_id"] = json!(channel);
    message["author"]["id"] = json!(author);
    message["member"]["roles"] = json!(roles);
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guild_channel_users_roles_enabled_and_require_mention_are_enforced() {
    let rig = Rig::start(json!({ "guilds": { "77": {
        "requireMention": false,
        "roles": ["r-crew"],
        "channels": {
            "500": {},
            "501": { "users": ["43"], "roles": ["r-admin"] },
            "502": { "enabled": false },
            "503": { "requireMention": true },
            "505": { "allow": false },
            "general": {},
        },
    } } }))
    .await;
    let send = |m: Value| rig.discord.dispatch("MESSAGE_CREATE", m);
    send(member_message("1", "500", "42", &[], "no crew role"));
    send(member_message(
        "2",
        "501",
        "42",
        &["r-crew"],
        "not this channel's user or role",
    ));
    send(member_message(
        "3",
        "502",
        "42",
        &["r-crew"],
        "channel switched off",
    ));
    send(member_message(
        "4",
        "503",
        "42",
        &["r-crew"],
        "no mention here",
    ));
    send(member_message(
        "5",
        "504",
        "42",
        &["r-crew"],
        "channel not listed",
    ));
    send(member_message(
        "7",
        "505",
        "42",
        &["r-crew"],
        "channel listed as not allowed",
    ));
    rig.provider.push_reply(text_reply("Crew answer."));
    send(member_message(
        "6",
        "500",
        "42",
        &["r-crew"],
        "crew member asks",
    ));
    rig.wait_for_sends(1).await;
    wait_until_nothing_in_flight(&rig.gateway).await;
    let paths: Vec<String> = rig.sends().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths.len(), 1, "{paths:?}");
    assert!(paths[0].ends_with("/channels/500/messages"), "{paths:?}");
    assert_eq!(content(&rig.sends()[0]), "Crew answer.");
    assert_eq!(rig.provider.requests().len(), 1);

    // Channels may be keyed by name, as upstream's examples do.
    rig.discord
        .add_channel(json!({"id": "506", "type": 0, "guild_id": "77", "name": "General"}));
    rig.provider.push_reply(text_reply("Answer in #general."));
    send(member_message(
        "8",
        "506",
        "42",
        &["r-crew"],
        "asking in general",
    ));
    let sent = rig.wait_for_sends(2).await;
    assert!(
        sent[1].path.ends_with("/channels/506/messages"),
        "{}",
        sent[1].path
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_streaming_is_off_by_default_one_message_no_edits() {
    let rig = Rig::start(json!({ "streaming": null })).await;
    let pieces: Vec<String> = (0..8)
        .map(|i| format!("Sentence {i} of a slowly written answer. "))
        .collect();
    let answer = pieces.concat();
    rig.provider.push_reply(FakeReply::Text {
        chunks: pieces,
        delay_ms: 150,
    });
    rig.discord
        .dispatch("MESSAGE_CREATE", dm("1", "take your time"));
    let sent = rig.wait_for_sends(1).await;
    wait_until_nothing_in_flight(&rig.gateway).await;
    assert_eq!(squash(&content(&sent[0])), squash(&answer));
    assert_eq!(rig.sends().len(), 1);
    let edits = rig
        .discord
        .rest_requests()
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .count();
    assert_eq!(edits, 0, "no preview edits unless streaming is enabled");
}

fn reference(request: &RestRequest) -> Option<String> {
    request.body["message_reference"]["message_id"]
        .as_str()
        .map(str::to_string)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guild_answers_reference_nothing_by_default_and_the_first_message_under_first() {
    let rig = Rig::start(json!({})).await;
    rig.provider.push_reply(text_reply("Plain answer."));
    let mention = format!("<@{BOT_USER_ID}> a question");
    rig.discord
        .dispatch("MESSAGE_CREATE", guild_message("31", &mention, true));
    let sent = rig.wait_for_sends(1).await;
    assert_eq!(reference(&sent[0]), None, "{}", sent[0].body);

    let rig = Rig::start(json!({ "replyToMode": "first" })).await;
    let answer: String = (0..40)
        .map(|i| format!("Line {i:02} of the answer.\n"))
        .collect();
    rig.provider.push_reply(text_reply(&answer));
    rig.discord
        .dispatch("MESSAGE_CREATE", guild_message("32", &mention, true));
    rig.wait_for_sends(3).await;
    wait_until_nothing_in_flight(&rig.gateway).await;
    let refs: Vec<Option<String>> = rig.sends().iter().map(reference).collect();
    assert_eq!(refs[0].as_deref(), Some("32"), "{refs:?}");
    assert!(refs[1..].iter().all(Option::is_none), "{refs:?}");
}

/// The default agent's workspace in the rig's data directory (made here).
fn workspace(rig: &Rig) -> PathBuf {
    let dir = rig.gateway.data_dir().join("workspace");
    std::fs::create_dir_all(&dir).expect("workspace");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_media_line_arrives_as_a_multipart_attachment() {
    let rig = Rig::start(json!({})).await;
    let pdf = b"%PDF-1.4\n% a small test file\n%%EOF\n".to_vec();
    std::fs::write(workspace(&rig).join("report.pdf"), &pdf).expect("write");
    rig.provider
        .push_reply(text_reply("The report:\nMEDIA: ./report.pdf"));
    rig.discord
        .dispatch("MESSAGE_CREATE", dm("1", "send the report"));
    let sent = rig.wait_for_sends(1).await;
    assert_eq!(content(&sent[0]), "The report:", "the text rides along");
    assert_eq!(sent[0].files.len(), 1, "{:?}", sent[0].body);
    let (field, name, content_type, bytes) = &sent[0].files[0];
    assert_eq!(
        (field.as_str(), name.as_str(), content_type.as_str()),
        ("files[0]", "report.pdf", "application/pdf")
    );
    assert_eq!(bytes, &pdf);
    assert_eq!(
        sent[0].body["attachments"],
        json!([{"id": 0, "filename": "report.pdf"}])
    );
    assert!(sent[0].headers["content-type"].starts_with("multipart/form-data; boundary="));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_over_discords_cap_is_refused_in_the_chat() {
    let rig = Rig::start(json!({})).await;
    let big = std::fs::File::create(workspace(&rig).join("video.bin")).expect("create");
    big.set_len(11 * 1024 * 1024).expect("sparse 11 MB");
    rig.provider
        .push_reply(text_reply("MEDIA: ./video.bin\nMEDIA: ../../etc/hosts"));
    rig.discord.dispatch("MESSAGE_CREATE", dm("1", "the video"));
    let sent = rig.wait_for_sends(1).await;
    let notice = content(&sent[0]);
    assert!(notice.starts_with("⚠️ Not sent:\n"), "{notice}");
    assert!(
        notice.contains("- ../../etc/hosts: paths that leave a folder with `..` are not sent"),
        "{notice}"
    );
    assert!(
        notice.contains("- video.bin is 11.0 MB; Discord takes files up to 10.0 MB"),
        "{notice}"
    );
    assert!(sent[0].files.is_empty());
    rig.provider.push_reply(text_reply("still answering"));
    rig.discord.dispatch("MESSAGE_CREATE", dm("2", "ping"));
    let sent = rig.wait_for_sends(2).await;
    assert_eq!(content(&sent[1]), "still answering");
}
