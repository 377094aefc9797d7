//! The Slack adapter against a fake Slack speaking the real Socket Mode and
//! Web API formats: identity and socket URL with the right tokens, envelope
//! acks, message translation (channel, DM, group DM, thread, team id,
//! mentions), reconnect on `disconnect` with a fresh URL, token errors
//! stopping the account, the Web API calls behind the channel traits and
//! their error classification.

#[path = "support/fake_slack.rs"]
mod fake_slack;

use std::sync::Arc;
use std::time::Duration;

use fake_slack::{FakeSlack, WebReply, APP_TOKEN, BOT_ID, BOT_TOKEN, BOT_USER_ID, TEAM_ID};
use pincer::channels::slack::SlackChannel;
use pincer::channels::{
    BoxFuture, Channel, InboundError, InboundEvent, InboundSink, OutboundTarget, SendError,
    TextFormat,
};
use pincer::config::schema::bindings::PeerKind;
use pincer::config::schema::slack::SlackConfig;
use pincer::pipeline::context::ChatType;
use pincer::routing::RoutePeer;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// Upper bound for waiting on an outcome; never a timing claim.
const WAIT_LIMIT: Duration = Duration::from_secs(15);

struct ChannelSink(mpsc::UnboundedSender<InboundEvent>);

impl InboundSink for ChannelSink {
    fn deliver(&self, event: InboundEvent) -> BoxFuture<'_, Result<(), InboundError>> {
        let _ = self.0.send(event);
        Box::pin(async { Ok(()) })
    }
}

fn channel_for(fake: &FakeSlack, app_token: &str) -> SlackChannel {
    let config: SlackConfig = serde_json::from_value(
        json!({"botToken": BOT_TOKEN, "appToken": app_token, "apiUrl": fake.api_url()}),
    )
    .expect("slack config");
    SlackChannel::from_config(&config, &reqwest::Client::new()).expect("slack channel")
}

async fn eventually(what: &str, condition: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn started(fake: &FakeSlack) -> (SlackChannel, mpsc::UnboundedReceiver<InboundEvent>) {
    let channel = channel_for(fake, APP_TOKEN);
    let (sender, receiver) = mpsc::unbounded_channel();
    channel
        .start(Arc::new(ChannelSink(sender)))
        .await
        .expect("start");
    eventually("connected", || channel.status()[0].connected).await;
    (channel, receiver)
}

async fn next_event(events: &mut mpsc::UnboundedReceiver<InboundEvent>) -> InboundEvent {
    tokio::time::timeout(WAIT_LIMIT, events.recv())
        .await
        .expect("an inbound event in time")
        .expect("sink open")
}

fn message(channel: &str, channel_type: &str, text: &str, ts: &str) -> Value {
    json!({"type": "message", "channel": channel, "channel_type": channel_type, "user": "U42",
        "text": text, "ts": ts, "team": TEAM_ID, "event_ts": ts})
}

#[tokio::test]
async fn socket_mode_uses_both_tokens_and_acks_every_envelope() {
    let fake = FakeSlack::start().await;
    let (channel, mut events) = started(&fake).await;
    let calls: Vec<(String, String)> = fake
        .web_requests()
        .iter()
        .map(|r| (r.method.clone(), r.authorization.clone()))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("auth.test".to_string(), format!("Bearer {BOT_TOKEN}")),
            (
                "apps.connections.open".to_string(),
                format!("Bearer {APP_TOKEN}")
            ),
        ]
    );
    assert_eq!(fake.connections()[0].ticket, "1");
    let id = fake.send_event(message("C1", "channel", "hello", "1700000001.000100"));
    next_event(&mut events).await;
    eventually("the envelope is acked", || fake.acks() == vec![id.clone()]).await;
    let ignored =
        fake.send_event(json!({"type": "reaction_added", "user": "U42", "reaction": "eyes"}));
    eventually("the ignored envelope is acked too", || {
        fake.acks().contains(&ignored)
    })
    .await;
    channel.stop().await;
}

#[tokio::test]
async fn channel_dm_group_and_thread_messages_become_inbound_events() {
    let fake = FakeSlack::start().await;
    let (channel, mut events) = started(&fake).await;

    fake.send_event(message(
        "C1",
        "channel",
        &format!("<@{BOT_USER_ID}> status?"),
        "1700000001.000100",
    ));
    let room = next_event(&mut events).await;
    assert_eq!(
        room.route.peer,
        Some(RoutePeer::new(PeerKind::Channel, "C1"))
    );
    assert_eq!(room.route.team_id.as_deref(), Some(TEAM_ID));
    assert!(room.bot_mentioned);
    assert_eq!(room.message.body, "@pincer status?");
    assert_eq!(
        room.message.message_id.as_deref(),
        Some("1700000001.000100")
    );
    assert_eq!(room.bot_username.as_deref(), Some("pincer"));

    fake.send_event(message("D9", "im", "just us", "1700000002.000100"));
    let dm = next_event(&mut events).await;
    assert_eq!(dm.route.peer, Some(RoutePeer::new(PeerKind::Direct, "U42")));
    assert_eq!(dm.message.chat_type, Some(ChatType::Direct));
    assert!(!dm.bot_mentioned);

    fake.send_event(message("G5", "mpim", "all of us", "1700000003.000100"));
    let group = next_event(&mut events).await;
    assert_eq!(
        group.route.peer,
        Some(RoutePeer::new(PeerKind::Group, "G5"))
    );
    assert_eq!(group.message.chat_type, Some(ChatType::Group));

    let mut reply = message("C1", "channel", "more please", "1700000004.000200");
    reply["thread_ts"] = json!("1700000001.000100");
    reply["parent_user_id"] = json!(BOT_USER_ID);
    fake.send_event(reply);
    let thread = next_event(&mut events).await;
    assert_eq!(
        thread.message.thread_id.as_deref(),
        Some("1700000001.000100")
    );
    assert_eq!(
        thread.route.parent_peer,
        Some(RoutePeer::new(PeerKind::Channel, "C1"))
    );
    assert!(thread.message.is_reply_to_bot && thread.bot_mentioned);

    let mut own = message("C1", "channel", "my echo", "1700000005.000100");
    own["user"] = json!(BOT_USER_ID);
    own["bot_id"] = json!(BOT_ID);
    fake.send_event(own);
    let mut edited = message("C1", "channel", "edited", "1700000006.000100");
    edited["subtype"] = json!("message_changed");
    fake.send_event(edited);
    fake.send_event(message("C1", "channel", "last", "1700000007.000100"));
    assert_eq!(next_event(&mut events).await.message.body, "last");
    channel.stop().await;
}

#[tokio::test]
async fn disconnect_envelope_reconnects_with_a_fresh_url() {
    let fake = FakeSlack::start().await;
    let (channel, mut events) = started(&fake).await;
    fake.send_disconnect("refresh_requested");
    eventually("a second connection", || fake.connections().len() == 2).await;
    assert_eq!(
        fake.connections()[1].ticket,
        "2",
        "a new apps.connections.open URL"
    );
    let opens = fake
        .web_requests()
        .iter()
        .filter(|r| r.method == "apps.connections.open")
        .count();
    assert_eq!(opens, 2);
    let auth_tests = fake
        .web_requests()
        .iter()
        .filter(|r| r.method == "auth.test")
        .count();
    assert_eq!(auth_tests, 1, "the identity is kept");
    eventually("connected again", || channel.status()[0].connected).await;
    fake.send_event(message(
        "C1",
        "channel",
        "after the refresh",
        "1700000009.000100",
    ));
    assert_eq!(
        next_event(&mut events).await.message.body,
        "after the refresh"
    );
    channel.stop().await;
    eventually("the fake saw the close", || {
        fake.connections()[1].client_close.is_some()
    })
    .await;
    assert_eq!(fake.connections()[1].client_close, Some(1000));
}

#[tokio::test]
async fn invalid_app_token_stops_the_account_with_an_error() {
    let fake = FakeSlack::start().await;
    let channel = channel_for(&fake, "xapp-wrong-secret");
    let (sender, _events) = mpsc::unbounded_channel();
    channel
        .start(Arc::new(ChannelSink(sender)))
        .await
        .expect("start");
    eventually("the account gave up", || !channel.is_running("default")).await;
    let error = channel.status()[0].last_error.clone().expect("an error");
    assert!(error.contains("invalid_auth"), "{error}");
    assert!(!error.contains("xapp-wrong-secret"), "{error}");
    assert!(fake.connections().is_empty());
}

fn target(to: &str) -> OutboundTarget {
    OutboundTarget {
        to: to.into(),
        ..OutboundTarget::default()
    }
}

#[tokio::test]
async fn post_update_delete_and_reaction_use_the_web_api() {
    let fake = FakeSlack::start().await;
    let channel = channel_for(&fake, APP_TOKEN);
    let in_thread = OutboundTarget {
        thread_id: Some("1700000001.000100".into()),
        ..target("channel:C1")
    };
    let sent = channel
        .send_text(
            &in_thread,
            "**done** see [docs](https://x.io)",
            TextFormat::Markdown,
        )
        .await
        .expect("post");
    let edit = channel.edit().expect("can edit");
    edit.edit_text(&in_thread, &sent.message_id, "1 < 2", TextFormat::Plain)
        .await
        .expect("update");
    channel
        .reactions()
        .expect("can react")
        .react(&in_thread, &sent.message_id, "👀")
        .await
        .expect("react");
    channel
        .delete()
        .expect("can delete")
        .delete(&in_thread, &sent.message_id)
        .await
        .expect("delete");
    let dm = channel
        .send_text(&target("user:U42"), "hi", TextFormat::Plain)
        .await
        .expect("dm post");
    edit.edit_text(
        &target("user:U42"),
        &dm.message_id,
        "hi!",
        TextFormat::Plain,
    )
    .await
    .expect("dm update");

    let requests = fake.web_requests();
    let methods: Vec<&str> = requests.iter().map(|r| r.method.as_str()).collect();
    assert_eq!(
        methods,
        [
            "chat.postMessage",
            "chat.update",
            "reactions.add",
            "chat.delete",
            "chat.postMessage",
            "chat.update"
        ]
    );
    assert_eq!(requests[0].body["channel"], "C1");
    assert_eq!(requests[0].body["thread_ts"], "1700000001.000100");
    assert_eq!(requests[0].body["text"], "*done* see <https://x.io|docs>");
    assert_eq!(requests[1].body["ts"], sent.message_id.as_str());
    assert_eq!(requests[1].body["text"], "1 &lt; 2");
    assert_eq!(
        requests[2].body,
        json!({"channel": "C1", "timestamp": sent.message_id, "name": "eyes"})
    );
    assert_eq!(requests[4].body["channel"], "U42");
    assert_eq!(
        requests[5].body["channel"], "D42",
        "edits go to the DM channel the post resolved to"
    );
    assert!(requests
        .iter()
        .all(|r| r.authorization == format!("Bearer {BOT_TOKEN}")));
}

#[tokio::test]
async fn web_api_failures_are_classified() {
    let fake = FakeSlack::start().await;
    let channel = channel_for(&fake, APP_TOKEN);
    let retry_after = vec![("retry-after".to_string(), "7".to_string())];
    fake.script_web(WebReply {
        status: 429,
        headers: retry_after.clone(),
        body: json!({"ok": false}),
    });
    fake.script_web(WebReply {
        status: 200,
        headers: retry_after,
        body: json!({"ok": false, "error": "ratelimited"}),
    });
    fake.script_web(WebReply {
        status: 503,
        headers: vec![],
        body: json!({"ok": false}),
    });
    fake.script_web(WebReply {
        status: 200,
        headers: vec![],
        body: json!({"ok": false, "error": "channel_not_found"}),
    });
    let to = target("channel:C404");
    let post = || channel.send_text(&to, "hi", TextFormat::Plain);
    assert_eq!(
        post().await,
        Err(SendError::RateLimited {
            retry_after_ms: 7_000
        })
    );
    assert_eq!(
        post().await,
        Err(SendError::RateLimited {
            retry_after_ms: 7_000
        })
    );
    assert!(matches!(post().await, Err(SendError::Transient(_))));
    assert_eq!(
        post().await,
        Err(SendError::Permanent("channel_not_found".into()))
    );
}
