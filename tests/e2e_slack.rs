//! Slack end to end: the real `pincer gateway` process connects to a fake
//! Slack (Socket Mode WebSocket + Web API) and answers through a fake
//! OpenAI provider. Proves issue 5's acceptance list for Slack: an
//! open-policy DM answered; a channel message with a mention answered and
//! one without ignored (no provider call); a long answer chunked within
//! 8,000 characters; a `ratelimited` 429 on `chat.postMessage` retried, not
//! before its `Retry-After`. In HTTP events mode (`mode: "http"`, the
//! request URL on the gateway's port): a signed DM answered, a bad
//! signature or a stale timestamp refused with 401 and no run, the
//! `url_verification` challenge echoed, a retried event answered once.

#[allow(dead_code)]
#[path = "support/fake_openai.rs"]
mod fake_openai;
#[path = "support/fake_slack.rs"]
mod fake_slack;
#[allow(dead_code)]
#[path = "support/gateway.rs"]
mod gateway;

use std::path::{Path, PathBuf};
use std::time::Duration;

use fake_openai::{FakeOpenAi, FakeReply};
use fake_slack::{
    unix_now, FakeSlack, SignedRequest, WebReply, WebRequest, APP_TOKEN, BOT_TOKEN, BOT_USER_ID,
    SIGNING_SECRET, TEAM_ID,
};
use gateway::GatewayProcess;
use serde_json::{json, Value};

/// Hang guard for waits (never a timing claim).
const WAIT_GUARD: Duration = Duration::from_secs(30);
/// Slack's outbound text chunk limit (`textChunkLimit` default).
const SLACK_MAX_CHARS: usize = 8000;

struct Rig {
    slack: FakeSlack,
    provider: FakeOpenAi,
    gateway: GatewayProcess,
}

impl Rig {
    async fn start(slack_extra: Value) -> Rig {
        let slack = FakeSlack::start().await;
        let provider = FakeOpenAi::start().await;
        let mut channel = json!({
            "botToken": BOT_TOKEN, "appToken": APP_TOKEN, "apiUrl": slack.api_url(),
            "streaming": "off", "dmPolicy": "open", "allowFrom": ["*"],
            "groupPolicy": "allowlist", "channels": { "C1": { "requireMention": true } },
        });
        let http_mode = slack_extra["mode"] == "http";
        if let (Some(base), Value::Object(extra)) = (channel.as_object_mut(), slack_extra) {
            base.extend(extra.into_iter().filter(|(_, v)| !v.is_null()));
            base.retain(|key, _| key != "appToken" || !http_mode);
        }
        let config = json!({
            "models": { "providers": { "fake": {
                "baseUrl": provider.base_url(), "apiKey": "sk-test",
                "api": "openai-completions",
                "models": [{ "id": "gpt-test", "contextWindow": 128000 }] } } },
            "agents": { "defaults": { "model": { "primary": "fake/gpt-test" } } },
            "session": { "dmScope": "per-channel-peer" },
            "channels": { "slack": channel },
        })
        .to_string();
        let gateway = tokio::task::block_in_place(|| {
            GatewayProcess::start_with_private_tmp(&config, &["--port", "0"])
        });
        let rig = Rig {
            slack,
            provider,
            gateway,
        };
        if http_mode {
            eventually("the bot identified", || {
                rig.slack
                    .web_requests()
                    .iter()
                    .any(|r| r.method == "auth.test")
            })
            .await;
        } else {
            eventually("the socket connected", || {
                !rig.slack.connections().is_empty()
            })
            .await;
        }
        rig
    }

    /// HTTP events mode on the default path: no app token, a signing secret.
    async fn start_http() -> Rig {
        Rig::start(json!({"mode": "http", "appToken": null, "signingSecret": SIGNING_SECRET})).await
    }

    /// The request URL on the gateway's port.
    fn events_url(&self) -> String {
        format!("http://127.0.0.1:{}/slack/events", self.gateway.port)
    }

    fn posts_to(&self, channel: &str) -> Vec<WebRequest> {
        self.posts()
            .into_iter()
            .filter(|r| r.body["channel"] == channel)
            .collect()
    }

    /// Delivers a DM event from `channel` and waits for its answer `reply`.
    async fn answered_dm(&self, channel: &str, text: &str, ts: &str, reply: &str) {
        self.provider.push_reply(text_reply(reply));
        let body = self.slack.event_callback(message(channel, "im", text, ts));
        let answers = self.slack.deliver_to(&self.events_url(), &body).await;
        assert_eq!(answers.last().map(|a| a.status), Some(200), "{answers:?}");
        eventually(&format!("{channel} answered"), || {
            !self.posts_to(channel).is_empty()
        })
        .await;
    }

    fn posts(&self) -> Vec<WebRequest> {
        self.slack
            .web_requests()
            .into_iter()
            .filter(|r| r.method == "chat.postMessage")
            .collect()
    }

    async fn wait_for_posts(&self, count: usize) -> Vec<WebRequest> {
        eventually(&format!("{count} posts"), || self.posts().len() >= count).await;
        self.posts()
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

fn text_of(request: &WebRequest) -> String {
    request.body["text"]
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

fn message(channel: &str, channel_type: &str, text: &str, ts: &str) -> Value {
    json!({"type": "message", "channel": channel, "channel_type": channel_type, "user": "U42",
        "text": text, "ts": ts, "team": TEAM_ID, "event_ts": ts})
}

fn squash(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_policy_dm_is_answered_by_the_model() {
    let rig = Rig::start(json!({})).await;
    rig.provider.push_reply(text_reply("Hello from the model."));
    rig.slack
        .send_event(message("D9", "im", "hi there, bot", "1700000001.000100"));
    let posted = rig.wait_for_posts(1).await;
    assert_eq!(text_of(&posted[0]), "Hello from the model.");
    let asked = rig.provider.requests()[0].body.to_string();
    assert!(asked.contains("hi there, bot"), "{asked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_message_with_mention_is_answered_and_without_mention_ignored() {
    let rig = Rig::start(json!({})).await;
    rig.slack.send_event(message(
        "C1",
        "channel",
        "talking among ourselves",
        "1700000001.000100",
    ));
    rig.provider.push_reply(text_reply("You called?"));
    let mention = format!("<@{BOT_USER_ID}> what is the plan?");
    rig.slack
        .send_event(message("C1", "channel", &mention, "1700000002.000100"));
    let posted = rig.wait_for_posts(1).await;
    assert_eq!(text_of(&posted[0]), "You called?");
    assert_eq!(posted[0].body["channel"], "C1");

    rig.slack.send_event(message(
        "C1",
        "channel",
        "still nobody asked",
        "1700000003.000100",
    ));
    rig.provider.push_reply(text_reply("Second answer."));
    rig.slack
        .send_event(message("C1", "channel", &mention, "1700000004.000100"));
    rig.wait_for_posts(2).await;
    assert_eq!(
        rig.provider.requests().len(),
        2,
        "only mentions reach the model"
    );
    assert_eq!(rig.posts().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_answer_is_chunked_within_8000_chars() {
    let rig = Rig::start(json!({})).await;
    let answer = (0..4000)
        .map(|i| format!("w{:03}", i % 1000))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(answer.chars().count() > 2 * SLACK_MAX_CHARS);
    let pieces: Vec<String> = answer
        .as_bytes()
        .chunks(1000)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    rig.provider.push_reply(FakeReply::Text {
        chunks: pieces,
        delay_ms: 5,
    });
    rig.slack
        .send_event(message("D9", "im", "write a lot", "1700000001.000100"));
    eventually("the whole answer delivered", || {
        let joined: Vec<String> = rig.posts().iter().map(text_of).collect();
        squash(&joined.join(" ")).len() >= squash(&answer).len()
    })
    .await;
    let texts: Vec<String> = rig.posts().iter().map(text_of).collect();
    assert!(texts.len() >= 3, "{} posts", texts.len());
    for text in &texts {
        assert!(
            text.chars().count() <= SLACK_MAX_CHARS,
            "{} chars",
            text.chars().count()
        );
    }
    assert_eq!(squash(&texts.join(" ")), squash(&answer));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limited_post_is_retried_not_before_retry_after() {
    let rig = Rig::start(json!({})).await;
    rig.slack.script_web_on(
        "chat.postMessage",
        WebReply {
            status: 429,
            headers: vec![("retry-after".into(), "1".into())],
            body: json!({"ok": false, "error": "ratelimited"}),
        },
    );
    rig.provider
        .push_reply(text_reply("Delivered despite the limit."));
    rig.slack
        .send_event(message("D9", "im", "are you there?", "1700000001.000100"));
    let posted = rig.wait_for_posts(2).await;
    assert_eq!(text_of(&posted[0]), "Delivered despite the limit.");
    assert_eq!(text_of(&posted[1]), "Delivered despite the limit.");
    let gap = posted[1].at.duration_since(posted[0].at);
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

fn file_share(files: Value) -> Value {
    let mut shared = message("D42", "im", "what is this?", "1700000000.000100");
    shared["subtype"] = json!("file_share");
    shared["files"] = files;
    shared
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_file_is_shown_to_the_model_and_removed_after_the_run() {
    let rig = Rig::start(json!({"mediaMaxMb": 1})).await;
    let file = rig.slack.add_file("cat.png", png(20_000), "image/png");
    rig.provider.push_reply(text_reply("A cat."));
    rig.slack.send_event(file_share(json!([file])));
    let posts = rig.wait_for_posts(1).await;
    assert_eq!(text_of(&posts[0]), "A cat.");
    let asked = rig.provider.requests()[0].body.to_string();
    assert!(asked.contains("<media:image>"), "{asked}");
    let path = attached_path(&asked);
    let media_dir = rig.gateway.tmp_dir().join("pincer-media").join("slack");
    assert!(path.starts_with(&media_dir), "{path:?}");
    assert_eq!(rig.slack.file_fetches("cat.png"), 1);
    eventually("the file removed after the run", || {
        !Path::new(&path).exists()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_file_over_the_cap_reaches_the_model_as_a_note_without_download() {
    let rig = Rig::start(json!({"mediaMaxMb": 0.01})).await;
    let file = rig
        .slack
        .add_file("big.pdf", vec![b'%'; 50_000], "application/pdf");
    rig.provider.push_reply(text_reply("Too big for me."));
    rig.slack.send_event(file_share(json!([file])));
    // The sender is told, and the model still answers the message.
    let said: Vec<String> = rig.wait_for_posts(2).await.iter().map(text_of).collect();
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
    assert_eq!(rig.slack.file_fetches("big.pdf"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_mode_signed_dm_is_answered_by_the_model() {
    let rig = Rig::start_http().await;
    assert!(rig.slack.connections().is_empty(), "no Socket Mode");
    rig.answered_dm(
        "D9",
        "hi over http",
        "1700000001.000100",
        "Hello over HTTP.",
    )
    .await;
    let posted = rig.posts_to("D9");
    assert_eq!(posted.len(), 1);
    assert_eq!(text_of(&posted[0]), "Hello over HTTP.");
    let asked = rig.provider.requests()[0].body.to_string();
    assert!(asked.contains("hi over http"), "{asked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_mode_refuses_a_bad_signature_and_a_stale_timestamp_without_a_run() {
    let rig = Rig::start_http().await;
    let forged = rig
        .slack
        .event_callback(message("D1", "im", "forged", "1700000001.000100"));
    let mut wrong_secret = SignedRequest::now(&forged);
    wrong_secret.secret = "not-the-signing-secret".into();
    assert_eq!(wrong_secret.post(&rig.events_url()).await.status, 401);
    let stale = rig
        .slack
        .event_callback(message("D2", "im", "replayed", "1700000002.000100"));
    let mut old = SignedRequest::now(&stale);
    old.timestamp = unix_now() - 6 * 60;
    assert_eq!(old.post(&rig.events_url()).await.status, 401);
    // The same bodies signed properly would have run: only the marker does.
    rig.answered_dm("D3", "marker", "1700000003.000100", "Marker answered.")
        .await;
    assert_eq!(rig.provider.requests().len(), 1, "one run: the marker's");
    assert!(rig.posts_to("D1").is_empty() && rig.posts_to("D2").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_mode_echoes_the_url_verification_challenge() {
    let rig = Rig::start_http().await;
    let body = json!({"token": "verification", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"});
    let answer = SignedRequest::now(&body.to_string())
        .post(&rig.events_url())
        .await;
    assert_eq!(answer.status, 200);
    let echoed: Value = serde_json::from_str(&answer.body).expect("JSON answer");
    assert_eq!(echoed["challenge"], body["challenge"]);
    let mut unsigned = SignedRequest::now(&body.to_string());
    unsigned.secret = "guess".into();
    assert_eq!(unsigned.post(&rig.events_url()).await.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_mode_answers_a_retried_event_once() {
    let rig = Rig::start_http().await;
    rig.provider.push_reply(text_reply("Answered once."));
    let body = rig.slack.event_callback(message(
        "D7",
        "im",
        "did you get this?",
        "1700000007.000100",
    ));
    // (A 503 while the bot is still being identified is retried, as Slack does.)
    let first = rig.slack.deliver_to(&rig.events_url(), &body).await;
    assert_eq!(first.last().map(|a| a.status), Some(200), "{first:?}");
    eventually("D7 answered", || !rig.posts_to("D7").is_empty()).await;
    // Slack did not see the 200 in time and delivers the same event again
    // (its retries come up to minutes later: after the answer).
    let mut retry = SignedRequest::now(&body);
    retry.retry_num = Some(first.len() as u32);
    assert_eq!(retry.post(&rig.events_url()).await.status, 200);
    // A marker in the same conversation: a duplicate, queued when the retry
    // was taken, would reach the model in this session's lane before the
    // marker or together with it (a collected follow-up).
    rig.answered_dm("D7", "marker", "1700000008.000100", "Marker answered.")
        .await;
    eventually("the marker answered", || rig.posts_to("D7").len() >= 2).await;
    let texts: Vec<String> = rig.posts_to("D7").iter().map(text_of).collect();
    assert_eq!(texts, ["Answered once.", "Marker answered."]);
    let requests = rig.provider.requests();
    assert_eq!(requests.len(), 2, "the event and the marker");
    let last_user = requests[1].body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .map(Value::to_string)
        .unwrap_or_default();
    assert!(
        last_user.contains("marker") && !last_user.contains("did you get this?"),
        "{last_user}"
    );
}

/// Waits until the gateway's durable inbox is empty: every message it
/// accepted has been answered (or needed no answer).
async fn wait_until_nothing_in_flight(gateway: &GatewayProcess) {
    let store = pincer::store::Store::open(
        &gateway.data_dir().join("store"),
        pincer::store::StoreOptions::default(),
    )
    .expect("open the gateway's store");
    eventually("the gateway's inbox empty", || {
        store
            .meta_with_prefix(pincer::channels::inbox::RECORD_PREFIX, 1)
            .expect("read the inbox")
            .is_empty()
    })
    .await;
}

fn message_from(user: &str, channel: &str, text: &str, ts: &str) -> Value {
    let mut event = message(channel, "channel", text, ts);
    event["user"] = json!(user);
    event
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_users_enabled_and_require_mention_are_enforced_per_channel() {
    let rig = Rig::start(json!({ "channels": {
        "C1": { "requireMention": false, "users": ["U1"] },
        "C2": { "enabled": false, "requireMention": false },
        "C3": {},
        "C4": { "allow": false, "requireMention": false },
    } }))
    .await;
    rig.slack.send_event(message_from(
        "U42",
        "C1",
        "not on the channel's list",
        "1700000001.000100",
    ));
    rig.slack.send_event(message_from(
        "U1",
        "C2",
        "channel switched off",
        "1700000002.000100",
    ));
    rig.slack.send_event(message_from(
        "U1",
        "C3",
        "no mention here",
        "1700000003.000100",
    ));
    rig.slack.send_event(message_from(
        "U1",
        "C4",
        "channel not allowed",
        "1700000005.000100",
    ));
    rig.provider.push_reply(text_reply("Answer for U1."));
    rig.slack.send_event(message_from(
        "U1",
        "C1",
        "listed user asks",
        "1700000004.000100",
    ));
    rig.wait_for_posts(1).await;
    wait_until_nothing_in_flight(&rig.gateway).await;
    let channels: Vec<Value> = rig
        .posts()
        .iter()
        .map(|p| p.body["channel"].clone())
        .collect();
    assert_eq!(channels, vec![json!("C1")]);
    assert_eq!(rig.provider.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_to_mode_first_threads_the_first_post_under_the_message() {
    let rig = Rig::start(json!({
        "replyToMode": "first",
        "channels": { "C1": { "requireMention": false } },
    }))
    .await;
    let answer = (0..900)
        .map(|i| format!("w{i:03}"))
        .collect::<Vec<_>>()
        .join(" ")
        + " "
        + &(0..1200)
            .map(|i| format!("x{i:03}"))
            .collect::<Vec<_>>()
            .join(" ");
    assert!(answer.chars().count() > 8000);
    rig.provider.push_reply(text_reply(&answer));
    rig.slack.send_event(message_from(
        "U42",
        "C1",
        "write a lot",
        "1700000010.000100",
    ));
    rig.wait_for_posts(2).await;
    wait_until_nothing_in_flight(&rig.gateway).await;
    let threads: Vec<Value> = rig
        .posts()
        .iter()
        .map(|p| p.body["thread_ts"].clone())
        .collect();
    assert_eq!(threads[0], json!("1700000010.000100"), "{threads:?}");
    assert!(threads[1..].iter().all(Value::is_null), "{threads:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_dms_are_answered_only_where_dm_group_enabled_lists_them() {
    let rig = Rig::start(json!({
        "channels": { "*": { "requireMention": true } },
        "dm": { "groupEnabled": true, "groupChannels": ["G-OK"] },
    }))
    .await;
    let mention = format!("<@{BOT_USER_ID}> anyone?");
    rig.slack
        .send_event(message("G-NO", "mpim", &mention, "1700000020.000100"));
    rig.provider.push_reply(text_reply("Group DM answer."));
    rig.slack.send_event(message(
        "G-OK",
        "mpim",
        "no mention needed here",
        "1700000021.000100",
    ));
    rig.wait_for_posts(1).await;
    wait_until_nothing_in_flight(&rig.gateway).await;
    let channels: Vec<Value> = rig
        .posts()
        .iter()
        .map(|p| p.body["channel"].clone())
        .collect();
    assert_eq!(channels, vec![json!("G-OK")]);
    assert_eq!(rig.provider.requests().len(), 1);
}

/// The default agent's workspace in the rig's data directory (made here).
fn workspace(rig: &Rig) -> PathBuf {
    let dir = rig.gateway.data_dir().join("workspace");
    std::fs::create_dir_all(&dir).expect("workspace");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_media_line_is_shared_through_the_external_upload_flow() {
    let rig = Rig::start(json!({})).await;
    let csv = b"day,temp\nmon,12\ntue,14\n".to_vec();
    std::fs::write(workspace(&rig).join("temps.csv"), &csv).expect("write");
    rig.provider
        .push_reply(text_reply("The **temperatures**:\nMEDIA: ./temps.csv"));
    rig.slack
        .send_event(message("D9", "im", "temps please", "1700000001.000100"));
    eventually("a file shared", || !rig.slack.shared_files().is_empty()).await;
    let shared = &rig.slack.shared_files()[0];
    assert_eq!(shared.bytes, csv, "the bytes as uploaded");
    assert_eq!(shared.filename, "temps.csv");
    assert_eq!(shared.content_type, "text/csv");
    assert_eq!(shared.channel_id, "D9");
    assert_eq!(
        shared.initial_comment.as_deref(),
        Some("The *temperatures*:")
    );
    let methods: Vec<String> = rig
        .slack
        .web_requests()
        .into_iter()
        .map(|r| r.method)
        .filter(|m| m.starts_with("files.") || m == "chat.postMessage")
        .collect();
    assert_eq!(
        methods,
        ["files.getUploadURLExternal", "files.completeUploadExternal"],
        "the text went as the file's comment"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_file_is_named_in_the_chat() {
    let rig = Rig::start(json!({})).await;
    workspace(&rig);
    rig.provider
        .push_reply(text_reply("Here:\nMEDIA: ./nothing-here.png"));
    rig.slack
        .send_event(message("D9", "im", "the picture", "1700000001.000100"));
    let posted = rig.wait_for_posts(2).await;
    assert_eq!(text_of(&posted[0]), "Here:");
    assert_eq!(
        text_of(&posted[1]),
        "⚠️ Not sent: ./nothing-here.png: no such file"
    );
    assert!(rig.slack.shared_files().is_empty());
}
