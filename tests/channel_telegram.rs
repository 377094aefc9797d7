//! The Telegram adapter driven directly against the fake Bot API
//! (`support/fake_telegram.rs`) with a recording inbound sink: inbound
//! translation, offset persistence across restarts, HTML sending with the
//! plain-text fallback, error classification, media and its size cap, token
//! redaction, status, and stopping.

mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pincer::channels::telegram::{TelegramChannel, TelegramOptions};
use pincer::channels::{
    BoxFuture, Channel, InboundEvent, InboundSink, OutboundTarget, SendError, TextFormat,
};
use pincer::config::schema::bindings::PeerKind;
use pincer::config::schema::telegram::TelegramConfig;
use pincer::pipeline::commands::parse_command;
use pincer::pipeline::context::ChatType;
use pincer::routing::RoutePeer;
use pincer::store::{Store, StoreOptions};
use serde_json::{json, Value};
use support::fake_telegram::{Failure, FakeTelegram};
use tokio::sync::Notify;

const TOKEN: &str = "123456789:AAE-secret_TOKEN_value";
const BOT_ID: i64 = 4242;
const BOT_USERNAME: &str = "PincerBot";
/// Hang guard for waits on the sink or status (never a timing claim).
const WAIT_GUARD: Duration = Duration::from_secs(30);

/// An inbound sink that records events and can refuse the first N.
#[derive(Default)]
struct RecordingSink {
    events: Mutex<Vec<InboundEvent>>,
    refusals_left: AtomicUsize,
    refused: AtomicUsize,
    changed: Notify,
}

impl RecordingSink {
    fn refusing(count: usize) -> Arc<RecordingSink> {
        let sink = RecordingSink::default();
        sink.refusals_left.store(count, Ordering::SeqCst);
        Arc::new(sink)
    }

    fn events(&self) -> Vec<InboundEvent> {
        self.events.lock().expect("sink lock").clone()
    }

    fn bodies(&self) -> Vec<String> {
        self.events().into_iter().map(|e| e.message.body).collect()
    }

    async fn wait_until(&self, what: &str, check: impl Fn(&RecordingSink) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT_GUARD;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if check(self) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!("sink: gave up waiting for {what}");
            }
        }
    }

    async fn wait_for_events(&self, count: usize) -> Vec<InboundEvent> {
        self.wait_until(&format!("{count} events"), |s| s.events().len() >= count)
            .await;
        self.events()
    }
}

impl InboundSink for RecordingSink {
    fn deliver(&self, event: InboundEvent) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let refuse = self
                .refusals_left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if refuse {
                self.refused.fetch_add(1, Ordering::SeqCst);
                self.changed.notify_waiters();
                return Err("queue is full".to_string());
            }
            self.events.lock().expect("sink lock").push(event);
            self.changed.notify_waiters();
            Ok(())
        })
    }
}

struct Harness {
    fake: FakeTelegram,
    _dir: tempfile::TempDir,
    data_dir: PathBuf,
    media_dir: PathBuf,
}

impl Harness {
    async fn new() -> Harness {
        let fake = FakeTelegram::start(TOKEN, BOT_ID, BOT_USERNAME).await;
        let dir = tempfile::tempdir().expect("temp dir");
        Harness {
            fake,
            data_dir: dir.path().join("data"),
            media_dir: dir.path().join("media"),
            _dir: dir,
        }
    }

    fn store(&self) -> Store {
        Store::open(&self.data_dir, StoreOptions::default()).expect("open store")
    }

    fn config(&self, extra: Value) -> TelegramConfig {
        let mut config = json!({ "botToken": TOKEN, "apiRoot": self.fake.api_root() });
        if let (Some(base), Value::Object(extra)) = (config.as_object_mut(), extra) {
            base.extend(extra);
        }
        serde_json::from_value(config).expect("telegram config")
    }

    fn channel(&self, store: &Store, extra: Value) -> TelegramChannel {
        TelegramChannel::new(&self.config(extra), store.clone(), options(&self.media_dir))
    }
}

fn options(media_dir: &Path) -> TelegramOptions {
    TelegramOptions {
        media_dir: media_dir.to_path_buf(),
        default_media_max_mb: None,
        media_dir_max_bytes: 64 * 1024 * 1024,
        http: None,
    }
}

fn target(to: &str) -> OutboundTarget {
    OutboundTarget {
        account_id: "default".into(),
        to: to.into(),
        ..OutboundTarget::default()
    }
}

fn ann() -> Value {
    FakeTelegram::user(7, "Ann", Some("ann"))
}

fn dm(text: &str) -> Value {
    json!({
        "chat": { "id": 7, "type": "private", "first_name": "Ann" },
        "from": { "id": 7, "is_bot": false, "first_name": "Ann", "last_name": "Lee", "username": "ann" },
        "text": text,
    })
}

fn group_message(text: &str, entities: Value) -> Value {
    json!({
        "chat": { "id": -100500, "type": "supergroup", "title": "Crew" },
        "from": ann(),
        "text": text,
        "entities": entities,
    })
}

async fn wait_for_status(
    channel: &TelegramChannel,
    what: &str,
    check: impl Fn(&pincer::channels::AccountStatus) -> bool,
) -> pincer::channels::AccountStatus {
    let deadline = tokio::time::Instant::now() + WAIT_GUARD;
    loop {
        if let Some(found) = channel.status().into_iter().find(|s| check(s)) {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "status never showed {what}: {:?}",
            channel.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn direct_message_becomes_an_inbound_event_with_sender_and_peer() {
    let h = Harness::new().await;
    let store = h.store();
    let channel = h.channel(&store, json!({}));
    let sink = Arc::new(RecordingSink::default());
    channel.start(sink.clone()).await.expect("start");
    let update_id = h.fake.push_message(dm("hello there"));
    let events = sink.wait_for_events(1).await;
    channel.stop().await;

    let event = &events[0];
    assert_eq!(
        (event.channel.as_str(), event.account_id.as_str()),
        ("telegram", "default")
    );
    assert_eq!(event.bot_username.as_deref(), Some(BOT_USERNAME));
    assert!(!event.bot_mentioned);
    let message = &event.message;
    assert_eq!(message.body, "hello there");
    assert_eq!(message.sender_id, "7");
    assert_eq!(message.sender_name.as_deref(), Some("Ann Lee"));
    assert_eq!(message.chat_type, Some(ChatType::Direct));
    assert_eq!(message.from, "telegram:7");
    assert_eq!(message.originating_to.as_deref(), Some("7"));
    assert_eq!(message.timestamp_ms, 1_767_000_000_000);
    assert!(message.message_id.is_some());
    assert_eq!(
        event.route.peer,
        Some(RoutePeer::new(PeerKind::Direct, "7"))
    );
    assert_eq!(event.route.account_id.as_deref(), Some("default"));
    assert_eq!(
        store.telegram_offset("default").expect("offset"),
        Some(update_id + 1)
    );
    let status = channel.status();
    assert!(
        status[0].configured && status[0].last_inbound_at_ms.is_some(),
        "{status:?}"
    );
}

#[tokio::test]
async fn group_mentions_and_replies_to_the_bot_are_told_apart_from_plain_messages() {
    let h = Harness::new().await;
    let store = h.store();
    let channel = h.channel(&store, json!({}));
    let sink = Arc::new(RecordingSink::default());
    channel.start(sink.clone()).await.expect("start");
    h.fake.push_message(group_message(
        "hey @pincerbot look",
        json!([{ "type": "mention", "offset": 4, "length": 10 }]),
    ));
    let mut reply = group_message("and this?", json!([]));
    reply["reply_to_message"] = json!({
        "message_id": 31, "date": 1, "chat": reply["chat"].clone(),
        "from": h.fake.bot_user(), "text": "earlier answer",
    });
    h.fake.push_message(reply);
    h.fake.push_message(group_message(
        "talking to @someone else",
        json!([{ "type": "mention", "offset": 11, "length": 8 }]),
    ));
    let events = sink.wait_for_events(3).await;
    channel.stop().await;

    let mentioned: Vec<bool> = events.iter().map(|e| e.bot_mentioned).collect();
    assert_eq!(mentioned, [true, true, false]);
    let by_reply = &events[1].message;
    assert!(by_reply.is_reply_to_bot);
    let quoted = by_reply.quoted.as_ref().expect("quoted reply");
    assert_eq!(
        (quoted.id.as_str(), quoted.body.as_str()),
        ("31", "earlier answer")
    );
    for event in &events {
        assert_eq!(
            event.route.peer,
            Some(RoutePeer::new(PeerKind::Group, "-100500"))
        );
        assert_eq!(event.message.group_id.as_deref(), Some("-100500"));
        assert_eq!(event.message.chat_type, Some(ChatType::Supergroup));
        assert_eq!(
            event.message.conversation_label.as_deref(),
            Some("Crew id:-100500")
        );
        assert_eq!(event.message.from, "telegram:group:-100500");
    }
}

#[tokio::test]
async fn forum_topic_messages_route_to_the_topic_and_replies_go_back_into_it() {
    let h = Harness::new().await;
    let store = h.store();
    let channel = h.channel(&store, json!({}));
    let sink = Arc::new(RecordingSink::default());
    channel.start(sink.clone()).await.expect("start");
    let chat = json!({ "id": -100900, "type": "supergroup", "title": "Home", "is_forum": true });
    h.fake.push_message(json!({
        "chat": chat, "from": ann(), "text": "lights?",
        "message_thread_id": 77, "is_topic_message": true,
        "reply_to_message": {
            "message_id": 77, "date": 1, "chat": chat,
            "forum_topic_created": { "name": "Lights", "icon_color": 0 }
        }
    }));
    let events = sink.wait_for_events(1).await;
    channel.stop().await;

    let event = &events[0];
    assert_eq!(
        event.route.peer,
        Some(RoutePeer::new(PeerKind::Group, "-100900:topic:77"))
    );
    assert_eq!(
        event.route.parent_peer,
        Some(RoutePeer::new(PeerKind::Group, "-100900"))
    );
    assert_eq!(event.message.thread_id.as_deref(), Some("77"));
    assert_eq!(event.message.from, "telegram:group:-100900:topic:77");
    assert!(
        event.message.quoted.is_none(),
        "the topic root is not a quote"
    );
    assert_eq!(
        event.message.conversation_label.as_deref(),
        Some("Home id:-100900 topic:77")
    );

    let mut in_topic = target("-100900");
    in_topic.thread_id = Some("77".into());
    channel
        .send_text(&in_topic, "on it", TextFormat::Plain)
        .await
        .expect("send into topic");
    let mut general = target("telegram:group:-100900:topic:1");
    channel
        .send_text(&general, "general", TextFormat::Plain)
        .await
        .expect("send to General");
    general.thread_id = Some("1".into());
    channel
        .typing()
        .expect("typing capability")
        .send_typing(&general)
        .await
        .expect("typing");
    let sent = h.fake.calls_of("sendMessage");
    assert_eq!(sent[0].body["message_thread_id"], json!(77));
    assert!(
        sent[1].body.get("message_thread_id").is_none(),
        "General topic id is omitted"
    );
    let typing = h.fake.calls_of("sendChatAction");
    assert_eq!(typing[0].body["message_thread_id"], json!(1));
    assert_eq!(typing[0].body["action"], json!("typing"));
}

#[tokio::test]
async fn commands_addressed_to_this_bot_count_as_mentions_and_parse_with_its_username() {
    let h = Harness::new().await;
    let store = h.store();
    let channel = h.channel(&store, json!({}));
    let sink = Arc::new(RecordingSink::default());
    channel.start(sink.clone()).await.expect("start");
    h.fake.push_message(group_message(
        "/status@PincerBot",
        json!([{ "type": "bot_command", "offset": 0, "length": 17 }]),
    ));
    h.fake.push_message(group_message(
        "/status@OtherBot",
        json!([{ "type": "bot_command", "offset": 0, "length": 16 }]),
    ));
    let events = sink.wait_for_events(2).await;
    channel.stop().await;

    let ours = &events[0];
    assert!(ours.bot_mentioned);
    let command = parse_command(&ours.message.body, ours.bot_username.as_deref());
    assert_eq!(command.map(|c| c.spec.name), Some("status"));
    let theirs = &events[1];
    assert!(!theirs.bot_mentioned);
    assert!(parse_command(&theirs.message.body, theirs.bot_username.as_deref()).is_none());
}

#[tokio::test]
async fn a_quoted_reply_carries_the_quoted_part_and_its_sender() {
    let h = Harness::new().await;
    let store = h.store();
    let channel = h.channel(&store, json!({}));
    let sink = Arc::new(RecordingSink::default());
    channel.start(sink.clone()).await.expect("start");
    let mut message = dm("why this?");
    message["reply_to_message"] = json!({
        "message_id": 12, "date": 1, "chat": { "id": 7, "type": "private" },
        "from": FakeTelegram::user(8, "Bob", None), "text": "a long message with a key point",
    });
    message["quote"] = json!({ "text": "key point", "position": 22 });
    h.fake.push_message(message);
    let events = sink.wait_for_events(1).await;
    channel.stop().await;

    let quoted = events[0].message.quoted.clone().expect("quoted");
    assert_eq!(
        (
            quoted.id.as_str(),
            quoted.body.as_str(),
            quoted.sender.as_str()
        ),
        ("12", "key point", "Bob")
    );
    assert!(!events[0].message.is_reply_to_bot);
}

#[tokio::test]
async fn offset_is_stored_after_delivery_so_a_restart_neither_loses_nor_repeats_updates() {
    let h = Harness::new().await;
    let last_before_restart = {
        let store = h.store();
        let channel = h.channel(&store, json!({}));
        let sink = Arc::new(RecordingSink::default());
        channel.start(sink.clone()).await.expect("start");
        h.fake.push_message(dm("one"));
        h.fake.push_message(dm("two"));
        let last = h.fake.push_message(dm("three"));
        sink.wait_for_events(3).await;
        channel.stop().await;
        assert_eq!(sink.bodies(), ["one", "two", "three"]);
        last
    };
    // Updates that arrive while pincer is down.
    h.fake.push_message(dm("four"));
    h.fake.push_message(dm("five"));

    let store = h.store();
    assert_eq!(
        store.telegram_offset("default").expect("offset"),
        Some(last_before_restart + 1)
    );
    let channel = h.channel(&store, json!({}));
    let sink = Arc::new(RecordingSink::default());
    channel.start(sink.clone()).await.expect("restart");
    sink.wait_for_events(2).await;
    // Everything pending was handled once the poller parks again.
    h.fake.wait_for_parked_poll().await;
    channel.stop().await;
    assert_eq!(sink.bodies(), ["four", "five"]);
    let first_poll = &h.fake.calls_of("getUpdates")[0];
    let resumed = h
        .fake
        .calls_of("getUpdates")
        .into_iter()
        .find(|c| c.body["offset"] == json!(last_before_restart + 1));
    assert!(
        resumed.is_some(),
        "the restarted poller resumed from the stored offset"
    );
    assert!(
        first_poll.body.get("offset").is_none(),
        "a fresh store starts without an offset"
    );
    assert_eq!(first_poll.body["timeout"], json!(30));
    assert_eq!(h.fake.unconfirmed_updates(), 0);
}

#[tokio::test]
async fn an_update_the_sink_refuses_is_delivered_later_and_survives_a_restart() {
    let h = Harness::new().await;
    {
        let store = h.store();
        let channel = h.channel(&store, json!({}));
        let sink = RecordingSink::refusing(usize::MAX);
        channel.start(sink.clone()).await.expect("start");
        h.fake.push_message(dm("keep me"));
        sink.wait_until("a refusal", |s| s.refused.load(Ordering::SeqCst) >= 1)
            .await;
        let status = wait_for_status(&channel, "the refusal", |s| {
            s.last_error
                .as_deref()
                .is_some_and(|e| e.contains("queue is full"))
        })
        .await;
        assert!(status.last_inbound_at_ms.is_none());
        channel.stop().await;
        assert_eq!(store.telegram_offset("default").expect("offset"), None);
    }
    let store = h.store();
    let channel = h.channel(&store, json!({}));
    let sink = RecordingSink::refusing(1);
    channel.start(sink.clone()).await.expect("restart");
    h.fake.push_message(dm("after"));
    sink.wait_for_events(2).await;
    h.fake.wait_for_parked_poll().await;
    channel.stop().await;
    assert_eq!(sink.refused.load(Ordering::SeqCst), 1);
    assert_eq!(sink.bodies(), ["keep me", "after"]);
}

#[tokio::test]
async fn markdown_is_sent_as_telegram_html_the_api_accepts() {
    let h = Harness::new().await;
    let channel = h.channel(&h.store(), json!({}));
    let sent = channel
        .send_text(
            &target("7"),
            "**Hi** <you> & `a<b`\n- [docs](https://x.dev/?a=1&b=2)",
            TextFormat::Markdown,
        )
        .await
        .expect("send");
    let calls = h.fake.calls_of("sendMessage");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].body["parse_mode"], json!("HTML"));
    assert_eq!(
        calls[0].body["text"],
        json!("<b>Hi</b> &lt;you&gt; &amp; <code>a&lt;b</code>\n• <a href=\"https://x.dev/?a=1&amp;b=2\">docs</a>")
    );
    assert_eq!(calls[0].body["chat_id"], json!("7"));
    assert!(sent.message_id.parse::<i64>().is_ok(), "{sent:?}");
    let status = channel.status();
    assert!(status[0].last_outbound_at_ms.is_some());
}

#[tokio::test]
async fn rejected_markup_is_resent_once_as_plain_text() {
    let h = Harness::new().await;
    let channel = h.channel(&h.store(), json!({}));
    h.fake.fail_next("sendMessage", Failure::ParseEntities);
    channel
        .send_text(&target("7"), "**odd** markup", TextFormat::Markdown)
        .await
        .expect("plain-text fallback succeeds");
    let calls = h.fake.calls_of("sendMessage");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].body["text"], json!("**odd** markup"));
    assert!(calls[1].body.get("parse_mode").is_none());

    h.fake.fail_next("sendMessage", Failure::ParseEntities);
    h.fake.fail_next("sendMessage", Failure::ParseEntities);
    let error = channel
        .send_text(&target("7"), "*again*", TextFormat::Markdown)
        .await
        .expect_err("both attempts refused");
    assert!(
        matches!(error, SendError::Permanent(ref t) if t.contains("can't parse entities")),
        "{error:?}"
    );
    assert_eq!(
        h.fake.calls_of("sendMessage").len(),
        4,
        "the fallback is tried once only"
    );

    h.fake.fail_next("sendMessage", Failure::ParseEntities);
    let error = channel
        .send_text(&target("7"), "plain", TextFormat::Plain)
        .await
        .expect_err("plain text has no fallback");
    assert!(matches!(error, SendError::Permanent(_)));
    assert_eq!(h.fake.calls_of("sendMessage").len(), 5);
}

#[tokio::test]
async fn api_failures_are_classified_for_the_retry_policy() {
    let h = Harness::new().await;
    let channel = h.channel(&h.store(), json!({}));
    let to = target("7");
    let send = || channel.send_text(&to, "hi", TextFormat::Plain);
    h.fake.fail_next(
        "sendMessage",
        Failure::RateLimited {
            retry_after_secs: 7,
        },
    );
    assert_eq!(
        send().await,
        Err(SendError::RateLimited {
            retry_after_ms: 7_000
        })
    );
    h.fake.fail_next("sendMessage", Failure::Server(502));
    assert!(matches!(send().await, Err(SendError::Transient(_))));
    h.fake
        .fail_next("sendMessage", Failure::BadRequest("chat not found".into()));
    assert!(matches!(send().await, Err(SendError::Permanent(t)) if t.contains("chat not found")));
    assert_eq!(
        h.fake.calls_of("sendMessage").len(),
        3,
        "the adapter never retries by itself"
    );
    assert!(send().await.is_ok());
}

#[tokio::test]
async fn edits_deletes_and_reactions_reach_the_api() {
    let h = Harness::new().await;
    let channel = h.channel(&h.store(), json!({}));
    let to = target("7");
    let sent = channel
        .send_text(&to, "draft", TextFormat::Markdown)
        .await
        .expect("send");
    let edit = channel.edit().expect("edit capability");
    edit.edit_text(
        &to,
        &sent.message_id,
        "draft **more**",
        TextFormat::Markdown,
    )
    .await
    .expect("edit");
    edit.edit_text(
        &to,
        &sent.message_id,
        "draft **more**",
        TextFormat::Markdown,
    )
    .await
    .expect("an unchanged edit is not an error");
    let edits = h.fake.calls_of("editMessageText");
    assert_eq!(edits.len(), 2);
    assert_eq!(edits[0].body["text"], json!("draft <b>more</b>"));
    assert_eq!(edits[0].body["message_id"].to_string(), sent.message_id);
    let missing = edit.edit_text(&to, "999999", "x", TextFormat::Plain).await;
    assert!(
        matches!(missing, Err(SendError::Permanent(_))),
        "{missing:?}"
    );

    channel
        .reactions()
        .expect("reactions")
        .react(&to, &sent.message_id, "👀")
        .await
        .expect("react");
    let reaction = &h.fake.calls_of("setMessageReaction")[0].body;
    assert_eq!(
        reaction["reaction"],
        json!([{ "type": "emoji", "emoji": "👀" }])
    );
    channel
        .delete()
        .expect("delete")
        .delete(&to, &sent.message_id)
        .await
        .expect("delete");
    assert_eq!(
        h.fake.calls_of("deleteMessage")[0].body["message_id"].to_string(),
        sent.message_id
    );
}

#[tokio::test]
async fn text_limits_are_telegrams_and_oversized_text_is_refused_locally() {
    let h = Harness::new().await;
    let channel = h.channel(&h.store(), json!({}));
    assert_eq!(channel.text_limits().max_chars, 4_000);
    assert_eq!(channel.text_limits().max_lines, None);
    let long = "x".repeat(4_097);
    let refused = channel
        .send_text(&target("7"), &long, TextFormat::Plain)
        .await;
    assert!(matches!(refused, Err(SendError::Permanent(_))));
    assert!(h.fake.calls_of("sendMessage").is_empty());
    let at_cap = "y".repeat(4_096);
    channel
        .send_text(&target("7"), &at_cap, TextFormat::Plain)
        .await
        .expect("4,096 characters are accepted");
}

fn jpeg_bytes(len: usize) -> Vec<u8> {
    let mut bytes = vec![0xff, 0xd8, 0xff, 0xe0];
    bytes.resize(len, 0x42);
    bytes
}

#[tokio::test]
async fn photos_are_downloaded_with_a_sniffed_mime_type_and_the_caption_as_body() {
    let h = Harness::new().await;
    let store = h.store();
    let channel = h.channel(&store, json!({}));
    let sink = Arc::new(RecordingSink::default());
    let photo = jpeg_bytes(2_000);
    h.fake
        .add_file("ph-big", "photos/file_3.jpg", photo.clone(), true);
    channel.start(sink.clone()).await.expect("start");
    let mut message = dm("");
    message.as_object_mut().expect("object").remove("text");
    message["caption"] = json!("my cat");
    message["photo"] = json!([
        { "file_id": "ph-small", "width": 90, "height": 90, "file_size": 100 },
        { "file_id": "ph-big", "width": 800, "height": 800, "file_size": 2_000 }
    ]);
    h.fake.push_message(message);
    let events = sink.wait_for_events(1).await;
    channel.stop().await;

    let message = &events[0].message;
    assert_eq!(message.body, "my cat");
    assert_eq!(message.media.len(), 1);
    let item = &message.media[0];
    assert_eq!(item.mime_type.as_deref(), Some("image/jpeg"));
    assert!(
        Path::new(&item.path).starts_with(&h.media_dir),
        "{}",
        item.path
    );
    assert_eq!(std::fs::read(&item.path).expect("downloaded file"), photo);
    assert_eq!(h.fake.downloads(), ["photos/file_3.jpg"]);
}

#[tokio::test]
async fn files_over_the_size_cap_get_a_note_and_are_never_kept() {
    let h = Harness::new().await;
    let store = h.store();
    // 0.001 MB = 1,048 bytes.
    let channel = h.channel(&store, json!({ "mediaMaxMb": 0.001 }));
    let sink = Arc::new(RecordingSink::default());
    h.fake
        .add_file("doc-declared", "documents/big.pdf", vec![b'%'; 5_000], true);
    h.fake.add_file(
        "voice-reported",
        "voice/file_1.oga",
        vec![b'O'; 5_000],
        true,
    );
    h.fake.add_file(
        "doc-silent",
        "documents/silent.bin",
        vec![b'z'; 5_000],
        false,
    );
    channel.start(sink.clone()).await.expect("start");
    let mut declared = dm("");
    declared["document"] = json!({ "file_id": "doc-declared", "file_name": "big.pdf",
        "mime_type": "application/pdf", "file_size": 5_000 });
    h.fake.push_message(declared);
    let mut reported = dm("");
    reported["voice"] =
        json!({ "file_id": "voice-reported", "mime_type": "audio/ogg", "duration": 3 });
    h.fake.push_message(reported);
    let mut silent = dm("");
    silent["document"] = json!({ "file_id": "doc-silent", "file_name": "silent.bin" });
    h.fake.push_message(silent);
    let events = sink.wait_for_events(3).await;
    channel.stop().await;

    for event in &events {
        assert!(event.message.media.is_empty());
        assert!(
            event
                .message
                .body
                .contains("over the 0.0 MB limit, not downloaded")
                || event.message.body.contains("limit, not downloaded"),
            "{}",
            event.message.body
        );
    }
    assert!(events[0]
        .message
        .body
        .starts_with("<media:document> (big.pdf, "));
    assert!(events[1].message.body.starts_with("<media:audio>"));
    let get_file: Vec<Value> = h
        .fake
        .calls_of("getFile")
        .into_iter()
        .map(|c| c.body["file_id"].clone())
        .collect();
    assert_eq!(
        get_file,
        [json!("voice-reported"), json!("doc-silent")],
        "a declared size over the cap skips getFile"
    );
    assert_eq!(
        h.fake.downloads(),
        ["documents/silent.bin"],
        "only the file of unknown size was started"
    );
    let left: Vec<_> = std::fs::read_dir(&h.media_dir)
        .map(|d| d.collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "a download cut at the cap leaves nothing behind: {left:?}"
    );
}

#[tokio::test]
async fn the_token_never_appears_in_errors_status_or_debug_output() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_root = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&dir.path().join("data"), StoreOptions::default()).expect("store");
    let config: TelegramConfig =
        serde_json::from_value(json!({ "botToken": TOKEN, "apiRoot": dead_root })).expect("config");
    let channel = TelegramChannel::new(&config, store, options(&dir.path().join("media")));
    let secret = TOKEN.split_once(':').expect("token shape").1;

    let error = channel
        .send_text(&target("7"), "hi", TextFormat::Plain)
        .await
        .expect_err("nothing listens there");
    assert!(matches!(error, SendError::Transient(_)), "{error:?}");
    assert!(!error.to_string().contains(secret), "{error}");

    let sink = Arc::new(RecordingSink::default());
    channel.start(sink).await.expect("start");
    let status = wait_for_status(&channel, "a connection error", |s| s.last_error.is_some()).await;
    channel.stop().await;
    let shown = status.last_error.expect("error");
    assert!(shown.contains("getMe"), "{shown}");
    assert!(!shown.contains(secret), "{shown}");
    assert!(!status.connected);
    assert!(!format!("{channel:?}").contains(secret));
}

#[tokio::test]
async fn stop_abandons_the_pending_long_poll_instead_of_waiting_it_out() {
    let h = Harness::new().await;
    let store = h.store();
    let channel = h.channel(&store, json!({}));
    channel
        .start(Arc::new(RecordingSink::default()))
        .await
        .expect("start");
    h.fake.wait_for_parked_poll().await;
    wait_for_status(&channel, "connected", |s| s.connected).await;
    channel.stop().await;
    // The 30 s poll was cut off by the client, not answered by the server.
    h.fake.wait_for_abandoned_polls(1).await;
    assert_eq!(h.fake.calls_of("getUpdates").len(), 1);
    assert!(!channel.status()[0].connected);
}

#[tokio::test]
async fn a_409_conflict_is_reported_in_status_and_polling_recovers() {
    let h = Harness::new().await;
    let store = h.store();
    let channel = h.channel(&store, json!({}));
    let sink = Arc::new(RecordingSink::default());
    h.fake.fail_next("getUpdates", Failure::Conflict);
    channel.start(sink.clone()).await.expect("start");
    let status = wait_for_status(&channel, "the conflict", |s| s.last_error.is_some()).await;
    let error = status.last_error.expect("error");
    assert!(
        error.contains("409") && error.contains("webhook"),
        "{error}"
    );
    assert!(!status.connected);
    h.fake.push_message(dm("still here"));
    sink.wait_for_events(1).await;
    assert!(channel.status()[0].connected);
    channel.stop().await;
}

#[tokio::test]
async fn a_refused_token_is_reported_and_the_account_stops_polling() {
    let h = Harness::new().await;
    let store = h.store();
    let channel = h.channel(&store, json!({ "botToken": "999:wrong" }));
    channel
        .start(Arc::new(RecordingSink::default()))
        .await
        .expect("start");
    let status = wait_for_status(&channel, "the refusal", |s| s.last_error.is_some()).await;
    let error = status.last_error.expect("error");
    assert!(
        error.contains("401") && error.contains("token was refused"),
        "{error}"
    );
    channel.stop().await;
    assert!(h.fake.calls_of("getUpdates").is_empty());
}

#[tokio::test]
async fn accounts_without_a_token_are_listed_but_cannot_send() {
    let h = Harness::new().await;
    let store = h.store();
    let config: TelegramConfig = serde_json::from_value(json!({
        "apiRoot": h.fake.api_root(),
        "accounts": { "home": { "botToken": TOKEN }, "spare": {} }
    }))
    .expect("config");
    let channel = TelegramChannel::new(&config, store, options(&h.media_dir));
    let status = channel.status();
    let summary: Vec<(String, bool)> = status
        .iter()
        .map(|s| (s.account_id.clone(), s.configured))
        .collect();
    assert_eq!(
        summary,
        [("home".to_string(), true), ("spare".to_string(), false)]
    );
    let mut to_spare = target("7");
    to_spare.account_id = "spare".into();
    assert_eq!(
        channel.send_text(&to_spare, "hi", TextFormat::Plain).await,
        Err(SendError::NoAccount("spare".into()))
    );
    let mut to_default = target("7");
    to_default.account_id = String::new();
    channel
        .send_text(&to_default, "hi", TextFormat::Plain)
        .await
        .expect("an empty account id means the only configured account");
}
