//! The Telegram adapter's inbound side driven against the fake Bot API
//! (`support/fake_telegram.rs`) with a recording inbound sink: translation
//! of DMs, groups, forum topics, mentions, commands and quotes; the update
//! offset across restarts; media and its size cap; status (409, refused
//! token); stopping.

mod support;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pincer::channels::{BoxFuture, Channel, InboundError, InboundEvent, InboundSink, TextFormat};
use pincer::config::schema::bindings::PeerKind;
use pincer::pipeline::commands::parse_command;
use pincer::pipeline::context::ChatType;
use pincer::routing::RoutePeer;
use serde_json::{json, Value};
use support::fake_telegram::{Failure, FakeTelegram};
use support::telegram_harness::*;

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
    let polls_before_restart = h.fake.calls_of("getUpdates").len();
    let channel = h.channel(&store, json!({}));
    let sink = Arc::new(RecordingSink::default());
    channel.start(sink.clone()).await.expect("restart");
    sink.wait_for_events(2).await;
    // Everything pending was handled once the poller parks again.
    h.fake.wait_for_parked_poll().await;
    channel.stop().await;
    assert_eq!(sink.bodies(), ["four", "five"]);
    let polls = h.fake.calls_of("getUpdates");
    assert_eq!(
        polls[polls_before_restart].body["offset"],
        json!(last_before_restart + 1),
        "the restarted poller resumed from the stored offset"
    );
    let first_poll = &polls[0];
    assert!(
        first_poll.body.get("offset").is_none(),
        "a fresh store starts without an offset"
    );
    assert_eq!(first_poll.body["timeout"], json!(30));
    assert_eq!(h.fake.unconfirmed_updates(), 0);
}

/// Accepts every event except the one with `blocked_body`, whose delivery
/// never finishes: a process that dies while handing that update over.
struct StuckSink {
    inner: Arc<RecordingSink>,
    blocked_body: &'static str,
    stuck: tokio::sync::Notify,
}

impl InboundSink for StuckSink {
    fn deliver(&self, event: InboundEvent) -> BoxFuture<'_, Result<(), InboundError>> {
        Box::pin(async move {
            if event.message.body == self.blocked_body {
                self.stuck.notify_one();
                std::future::pending::<()>().await;
            }
            self.inner.deliver(event).await
        })
    }
}

#[tokio::test]
async fn a_crash_before_telegram_saw_the_next_offset_neither_repeats_nor_loses() {
    let h = Harness::new().await;
    let store = h.store();
    h.fake.push_message(dm("one"));
    let second = h.fake.push_message(dm("two"));
    h.fake.push_message(dm("three"));
    let first_run = Arc::new(StuckSink {
        inner: Arc::new(RecordingSink::default()),
        blocked_body: "three",
        stuck: tokio::sync::Notify::new(),
    });
    let crashed = h.channel(&store, json!({}));
    crashed.start(first_run.clone()).await.expect("start");
    first_run.stuck.notified().await;
    // "one" and "two" were accepted, "three" was not; Telegram has not been
    // told about any of them, since no later getUpdates was sent.
    drop(crashed);
    assert_eq!(first_run.inner.bodies(), ["one", "two"]);
    assert_eq!(h.fake.unconfirmed_updates(), 3);
    assert_eq!(
        store.telegram_offset("default").expect("offset"),
        Some(second + 1)
    );

    let channel = h.channel(&store, json!({}));
    let sink = Arc::new(RecordingSink::default());
    channel.start(sink.clone()).await.expect("restart");
    sink.wait_for_events(1).await;
    h.fake.wait_for_parked_poll().await;
    channel.stop().await;
    assert_eq!(sink.bodies(), ["three"]);
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
                .is_some_and(|e| e.contains("store is full"))
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

    let bodies: Vec<&str> = events.iter().map(|e| e.message.body.as_str()).collect();
    assert_eq!(
        bodies,
        [
            "<media:document> (big.pdf, 4.9 KB: over the 1.0 KB limit, not downloaded)",
            "<media:audio> (4.9 KB: over the 1.0 KB limit, not downloaded)",
            "<media:document> (silent.bin: over the 1.0 KB limit, not downloaded)",
        ]
    );
    assert!(events.iter().all(|e| e.message.media.is_empty()));
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
async fn dropping_the_adapter_without_stop_ends_its_poller() {
    let h = Harness::new().await;
    let store = h.store();
    let channel = h.channel(&store, json!({}));
    channel
        .start(Arc::new(RecordingSink::default()))
        .await
        .expect("start");
    h.fake.wait_for_parked_poll().await;
    drop(channel);
    h.fake.wait_for_abandoned_polls(1).await;
}
