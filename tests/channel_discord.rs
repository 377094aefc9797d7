//! The Discord adapter against a fake Discord speaking the real gateway and
//! REST wire formats: identify, inbound translation (guild with roles, DM,
//! thread with parent), heartbeats, zombie detection with resume and
//! replay, fatal and resumable close codes, prompt stop, and the REST
//! endpoints and error classification behind the channel traits.

#[path = "support/fake_discord.rs"]
mod fake_discord;

use std::sync::Arc;
use std::time::Duration;

use fake_discord::{FakeDiscord, RestReply, BOT_USER_ID, TOKEN};
use pincer::channels::discord::DiscordChannel;
use pincer::channels::{
    BoxFuture, Channel, InboundError, InboundEvent, InboundSink, OutboundTarget, SendError,
    TextFormat,
};
use pincer::config::schema::bindings::PeerKind;
use pincer::config::schema::discord::DiscordConfig;
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

fn channel_for(fake: &FakeDiscord, extra: Value) -> DiscordChannel {
    let mut config = json!({"token": TOKEN, "apiBaseUrl": fake.api_base_url()});
    if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
        config.extend(extra.clone());
    }
    let config: DiscordConfig = serde_json::from_value(config).expect("discord config");
    DiscordChannel::from_config(&config, &reqwest::Client::new()).expect("discord channel")
}

async fn started(fake: &FakeDiscord) -> (DiscordChannel, mpsc::UnboundedReceiver<InboundEvent>) {
    let channel = channel_for(fake, json!({}));
    let (sender, receiver) = mpsc::unbounded_channel();
    channel
        .start(Arc::new(ChannelSink(sender)))
        .await
        .expect("start");
    eventually("connected", || channel.status()[0].connected).await;
    (channel, receiver)
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

async fn next_event(events: &mut mpsc::UnboundedReceiver<InboundEvent>) -> InboundEvent {
    tokio::time::timeout(WAIT_LIMIT, events.recv())
        .await
        .expect("an inbound event in time")
        .expect("sink open")
}

fn message(id: &str, channel_id: &str, content: &str) -> Value {
    json!({
        "id": id, "channel_id": channel_id, "type": 0, "content": content,
        "timestamp": "2026-11-22T08:00:00.000000+00:00", "tts": false,
        "author": {"id": "42", "username": "ann", "global_name": "Ann"},
        "mentions": [], "mention_roles": [], "attachments": [], "embeds": [], "pinned": false
    })
}

fn guild_message(id: &str, channel_id: &str, content: &str) -> Value {
    let mut msg = message(id, channel_id, content);
    msg["guild_id"] = json!("77");
    msg["member"] =
        json!({"roles": ["role-a", "role-b"], "joined_at": "2026-01-01T00:00:00+00:00"});
    msg
}

#[tokio::test]
async fn identify_carries_token_intents_and_properties_after_asking_for_the_gateway_url() {
    let fake = FakeDiscord::start(45_000).await;
    let (channel, _events) = started(&fake).await;
    let identify = &fake.client_frames(2)[0]["d"];
    assert_eq!(identify["token"], TOKEN);
    // guilds | guild messages | direct messages | message content
    assert_eq!(identify["intents"], 1 | 1 << 9 | 1 << 12 | 1 << 15);
    assert_eq!(identify["properties"]["browser"], "pincer");
    assert!(identify["properties"]["os"].is_string());
    assert_eq!(fake.connections()[0].query, "v=10&encoding=json");
    let gateway_bot = &fake.rest_requests()[0];
    assert_eq!(
        (gateway_bot.method.as_str(), gateway_bot.path.as_str()),
        ("GET", "/api/v10/gateway/bot")
    );
    assert_eq!(gateway_bot.headers["authorization"], format!("Bot {TOKEN}"));
    channel.stop().await;
}

#[tokio::test]
async fn guild_dm_and_thread_messages_become_inbound_events() {
    let fake = FakeDiscord::start(45_000).await;
    fake.add_channel(json!({"id": "thread-9", "type": 11, "parent_id": "500", "guild_id": "77", "name": "ideas"}));
    let (channel, mut events) = started(&fake).await;

    let mut mention = guild_message("1", "500", &format!("<@{BOT_USER_ID}> what's up"));
    mention["mentions"] = json!([{"id": BOT_USER_ID, "username": "pincer"}]);
    fake.dispatch("MESSAGE_CREATE", mention);
    let guild = next_event(&mut events).await;
    assert_eq!(
        guild.route.peer,
        Some(RoutePeer::new(PeerKind::Channel, "500"))
    );
    assert_eq!(guild.route.guild_id.as_deref(), Some("77"));
    assert_eq!(guild.route.member_roles, vec!["role-a", "role-b"]);
    assert_eq!(guild.route.account_id.as_deref(), Some("default"));
    assert!(guild.bot_mentioned);
    assert_eq!(guild.message.body, "@pincer what's up");
    assert_eq!(guild.message.chat_type, Some(ChatType::Channel));
    assert_eq!(guild.message.group_id.as_deref(), Some("500"));

    fake.dispatch(
        "MESSAGE_CREATE",
        message("2", "dm-chan", "hello in private"),
    );
    let dm = next_event(&mut events).await;
    assert_eq!(dm.route.peer, Some(RoutePeer::new(PeerKind::Direct, "42")));
    assert_eq!(dm.message.chat_type, Some(ChatType::Direct));
    assert_eq!(
        (
            dm.message.sender_id.as_str(),
            dm.message.sender_name.as_deref()
        ),
        ("42", Some("Ann"))
    );
    assert!(!dm.bot_mentioned);

    fake.dispatch(
        "MESSAGE_CREATE",
        guild_message("3", "thread-9", "in the thread"),
    );
    let thread = next_event(&mut events).await;
    assert_eq!(
        thread.route.peer,
        Some(RoutePeer::new(PeerKind::Channel, "thread-9"))
    );
    assert_eq!(
        thread.route.parent_peer,
        Some(RoutePeer::new(PeerKind::Channel, "500"))
    );
    assert_eq!(thread.message.thread_id.as_deref(), Some("thread-9"));
    assert_eq!(thread.message.group_name.as_deref(), Some("#ideas"));

    let mut own = guild_message("4", "500", "my own words");
    own["author"] = json!({"id": BOT_USER_ID, "username": "pincer", "bot": true});
    fake.dispatch("MESSAGE_CREATE", own);
    fake.dispatch("MESSAGE_CREATE", guild_message("5", "500", "after"));
    assert_eq!(
        next_event(&mut events).await.message.message_id.as_deref(),
        Some("5")
    );
    assert!(channel.status()[0].last_inbound_at_ms.is_some());
    channel.stop().await;
}

#[tokio::test]
async fn heartbeats_carry_the_last_sequence_number() {
    let fake = FakeDiscord::start(150).await;
    let (channel, mut events) = started(&fake).await;
    let seq = fake.dispatch("MESSAGE_CREATE", message("1", "dm-chan", "hi"));
    next_event(&mut events).await;
    eventually("a heartbeat with the new seq", || {
        fake.client_frames(1).iter().any(|f| f["d"] == seq)
    })
    .await;
    assert_eq!(
        fake.connections().len(),
        1,
        "acked heartbeats keep the connection"
    );
    channel.stop().await;
}

#[tokio::test]
async fn missing_heartbeat_ack_reconnects_and_resumes_with_the_last_seq() {
    let fake = FakeDiscord::start(40).await;
    let (channel, mut events) = started(&fake).await;
    let session = fake.session_id();
    let seen = fake.dispatch("MESSAGE_CREATE", message("1", "dm-chan", "before"));
    next_event(&mut events).await;
    fake.go_zombie();
    fake.dispatch("MESSAGE_CREATE", message("2", "dm-chan", "while zombied"));

    let replayed = next_event(&mut events).await;
    assert_eq!(replayed.message.body, "while zombied");
    let resume = &fake.client_frames(6)[0]["d"];
    assert_eq!(resume["session_id"], session.as_str());
    assert_eq!(resume["seq"], seen);
    assert_eq!(resume["token"], TOKEN);
    let connections = fake.connections();
    assert_eq!(connections.len(), 2);
    assert_eq!(
        connections[1].path, "/resume",
        "READY's resume_gateway_url is used"
    );
    assert_eq!(connections[1].query, "v=10&encoding=json");
    assert_eq!(fake.client_frames(2).len(), 1, "resumed, not re-identified");
    eventually("connected again", || channel.status()[0].connected).await;
    channel.stop().await;
}

#[tokio::test]
async fn resumable_close_code_reconnects_and_resumes() {
    let fake = FakeDiscord::start(45_000).await;
    let (channel, _events) = started(&fake).await;
    fake.close_live(4000);
    eventually("a RESUME", || !fake.client_frames(6).is_empty()).await;
    assert_eq!(
        fake.client_frames(6)[0]["d"]["session_id"],
        fake.session_id().as_str()
    );
    channel.stop().await;
}

#[tokio::test]
async fn reconnect_opcode_resumes_and_unresumable_invalid_session_identifies_again() {
    let fake = FakeDiscord::start(45_000).await;
    let (channel, _events) = started(&fake).await;
    fake.send_raw(json!({"op": 7, "d": null}));
    eventually("a RESUME after op 7", || fake.client_frames(6).len() == 1).await;
    eventually("RESUMED", || channel.status()[0].connected).await;
    fake.send_raw(json!({"op": 9, "d": false}));
    eventually("a second IDENTIFY after op 9 false", || {
        fake.client_frames(2).len() == 2
    })
    .await;
    assert_eq!(
        fake.client_frames(6).len(),
        1,
        "no RESUME of the invalid session"
    );
    let last = fake.connections().pop().expect("a connection");
    assert_eq!(last.path, "/", "a new session starts at the gateway URL");
    let asked = fake
        .rest_requests()
        .iter()
        .filter(|r| r.path == "/api/v10/gateway/bot")
        .count();
    assert_eq!(asked, 1, "the gateway URL is asked for once");
    eventually("connected with the new session", || {
        channel.status()[0].connected
    })
    .await;
    assert_eq!(fake.session_id(), "session-2");
    channel.stop().await;
}

#[tokio::test]
async fn authentication_failure_4004_stops_the_account_with_an_error() {
    let fake = FakeDiscord::start(45_000).await;
    fake.close_on_identify(4004);
    let channel = channel_for(&fake, json!({}));
    let (sender, _events) = mpsc::unbounded_channel();
    channel
        .start(Arc::new(ChannelSink(sender)))
        .await
        .expect("start");
    eventually("the account gave up", || !channel.is_running("default")).await;
    let status = &channel.status()[0];
    assert!(!status.connected);
    let error = status.last_error.as_deref().expect("an error");
    assert!(error.contains("4004"), "{error}");
    assert_eq!(fake.connections().len(), 1, "no reconnect after 4004");
}

#[tokio::test]
async fn stop_closes_the_gateway_connection_normally() {
    let fake = FakeDiscord::start(45_000).await;
    let (channel, _events) = started(&fake).await;
    channel.stop().await;
    assert!(!channel.is_running("default"));
    eventually("the fake saw the close", || {
        fake.connections()[0].client_close.is_some()
    })
    .await;
    assert_eq!(fake.connections()[0].client_close, Some(1000));
}

fn target(to: &str) -> OutboundTarget {
    OutboundTarget {
        to: to.into(),
        ..OutboundTarget::default()
    }
}

#[tokio::test]
async fn send_edit_delete_typing_and_reaction_hit_discord_endpoints() {
    let fake = FakeDiscord::start(45_000).await;
    let channel = channel_for(&fake, json!({}));
    // The message replied to and reacted to exists, as it must on Discord.
    fake.add_message("500", "555");
    let reply = OutboundTarget {
        reply_to_message_id: Some("555".into()),
        ..target("channel:500")
    };
    let sent = channel
        .send_text(&reply, "**hi**", TextFormat::Markdown)
        .await
        .expect("send");
    let edit = channel.edit().expect("can edit");
    edit.edit_text(&reply, &sent.message_id, "hi again", TextFormat::Markdown)
        .await
        .expect("edit");
    channel
        .delete()
        .expect("can delete")
        .delete(&reply, &sent.message_id)
        .await
        .expect("delete");
    channel
        .typing()
        .expect("can type")
        .send_typing(&target("500"))
        .await
        .expect("typing");
    channel
        .reactions()
        .expect("can react")
        .react(&reply, "555", "👍")
        .await
        .expect("react");
    let thread = OutboundTarget {
        thread_id: Some("thread-9".into()),
        ..target("channel:500")
    };
    channel
        .send_text(&thread, "in thread", TextFormat::Plain)
        .await
        .expect("thread send");
    channel
        .send_text(&target("user:42"), "psst", TextFormat::Plain)
        .await
        .expect("dm send");

    let calls: Vec<(String, String)> = fake
        .rest_requests()
        .iter()
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect();
    let mid = &sent.message_id;
    let expected = [
        ("POST", "/api/v10/channels/500/messages".to_string()),
        ("PATCH", format!("/api/v10/channels/500/messages/{mid}")),
        ("DELETE", format!("/api/v10/channels/500/messages/{mid}")),
        ("POST", "/api/v10/channels/500/typing".to_string()),
        (
            "PUT",
            "/api/v10/channels/500/messages/555/reactions/%F0%9F%91%8D/@me".to_string(),
        ),
        ("POST", "/api/v10/channels/thread-9/messages".to_string()),
        ("POST", "/api/v10/users/@me/channels".to_string()),
        ("POST", "/api/v10/channels/dm-42/messages".to_string()),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(m, p)| (m.to_string(), p.clone()))
        .collect();
    assert_eq!(calls, expected);
    let requests = fake.rest_requests();
    assert_eq!(requests[0].body["content"], "**hi**");
    assert_eq!(requests[0].body["message_reference"]["message_id"], "555");
    assert_eq!(requests[1].body["content"], "hi again");
    assert_eq!(requests[6].body["recipient_id"], "42");
    assert!(channel.status()[0].last_outbound_at_ms.is_some());
}

#[tokio::test]
async fn rest_failures_are_classified_without_leaking_the_token() {
    let fake = FakeDiscord::start(45_000).await;
    let channel = channel_for(&fake, json!({}));
    fake.script_rest(RestReply {
        status: 429,
        headers: vec![
            ("x-ratelimit-reset-after".into(), "2.250".into()),
            ("retry-after".into(), "3".into()),
        ],
        body: json!({"message": "You are being rate limited.", "retry_after": 2.25, "global": false}),
    });
    fake.script_rest(RestReply {
        status: 502,
        headers: vec![],
        body: Value::Null,
    });
    fake.script_rest(RestReply {
        status: 403,
        headers: vec![],
        body: json!({"message": "Missing Permissions", "code": 50013}),
    });
    let to = target("channel:500");
    let send = || channel.send_text(&to, "hi", TextFormat::Plain);
    assert_eq!(
        send().await,
        Err(SendError::RateLimited {
            retry_after_ms: 2_250
        })
    );
    assert!(matches!(send().await, Err(SendError::Transient(_))));
    let refused = send().await.expect_err("403");
    assert_eq!(
        refused,
        SendError::Permanent("HTTP 403: Missing Permissions (code 50013)".into())
    );

    let wrong: DiscordConfig = serde_json::from_value(
        json!({"token": "wrong-token-xyz", "apiBaseUrl": fake.api_base_url()}),
    )
    .expect("config");
    let wrong = DiscordChannel::from_config(&wrong, &reqwest::Client::new()).expect("channel");
    let err = wrong
        .send_text(&to, "hi", TextFormat::Plain)
        .await
        .expect_err("401");
    assert!(matches!(err, SendError::Permanent(_)), "{err}");
    assert!(!err.to_string().contains("wrong-token-xyz"), "{err}");
}
