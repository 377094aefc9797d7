//! Matrix room events → `InboundEvent`s: `m.room.message` text, emotes and
//! files (`m.image`, `m.file`, `m.audio`, `m.video`, fetched by the sync
//! loop), in direct rooms keyed by the sender (or the room, with
//! `dm.sessionScope: "per-room"`) and in other rooms by room id; mentions
//! of the bot (`m.mentions`, its user id in the text or a `matrix.to` link,
//! a reply to one of its messages); the legacy reply fallback removed; the
//! thread a reply goes to chosen by `threadReplies`.
//!
//! Notices (`m.notice`, what bots send), edits (`m.replace`), the bot's own
//! events and anything not a message are skipped; an event without a
//! usable body is reported as malformed. Pure translation: this file must
//! not call the API or decide access.

use serde_json::Value;

use crate::channels::media::RemoteFile;
use crate::channels::InboundEvent;
use crate::config::schema::bindings::PeerKind;
use crate::config::schema::matrix::{MatrixDmSessionScope, MatrixThreadReplies};
use crate::pipeline::context::{ChatType, InboundMessage};
use crate::routing::{RouteInput, RoutePeer};

use super::rooms::RoomInfo;

/// The channel id in config, session keys and events.
pub const CHANNEL_ID: &str = "matrix";

/// Who the bot is on its homeserver.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BotIdentity {
    pub user_id: String,
    pub display_name: Option<String>,
}

/// What the translation needs besides the event.
pub struct Context<'a> {
    pub account_id: &'a str,
    pub bot: &'a BotIdentity,
    pub room_id: &'a str,
    pub room: &'a RoomInfo,
    pub direct: bool,
    pub session_scope: MatrixDmSessionScope,
    pub thread_replies: MatrixThreadReplies,
    /// Whether `event_id` is a message the bot sent.
    pub sent_by_bot: &'a (dyn Fn(&str) -> bool + Sync),
}

/// What became of one timeline event.
#[derive(Debug)]
pub enum Translated {
    Message {
        event: Box<InboundEvent>,
        file: Option<RemoteFile>,
    },
    /// End-to-end encrypted: pincer cannot read it.
    Encrypted,
    /// Not a message pincer answers (state, notices, edits, its own).
    Skipped,
    /// A message event without the fields a message must have.
    Malformed(String),
}

/// Message types pincer reads.
fn is_file(msgtype: &str) -> bool {
    matches!(msgtype, "m.image" | "m.file" | "m.audio" | "m.video")
}

/// Translates one timeline event of `ctx.room_id`.
pub fn translate(ctx: &Context<'_>, event: &Value) -> Translated {
    let kind = event["type"].as_str().unwrap_or("");
    if kind == "m.room.encrypted" {
        return Translated::Encrypted;
    }
    if kind != "m.room.message" || event.get("state_key").is_some() {
        return Translated::Skipped;
    }
    let sender = event["sender"].as_str().unwrap_or("");
    if sender == ctx.bot.user_id {
        return Translated::Skipped;
    }
    let Some(event_id) = event["event_id"].as_str().filter(|id| !id.is_empty()) else {
        return Translated::Malformed("a message without event_id".into());
    };
    if sender.is_empty() {
        return Translated::Malformed(format!("{event_id}: no sender"));
    }
    let content = &event["content"];
    let relates = &content["m.relates_to"];
    if relates["rel_type"] == "m.replace" {
        return Translated::Skipped;
    }
    let msgtype = content["msgtype"].as_str().unwrap_or("");
    let Some(body) = content["body"].as_str() else {
        return Translated::Malformed(format!("{event_id}: no body"));
    };
    let (text, file) = match msgtype {
        "m.text" => (body.to_string(), None),
        "m.emote" => (format!("* {sender} {body}"), None),
        kind if is_file(kind) => {
            let Some(url) = content["url"].as_str() else {
                return Translated::Malformed(format!("{event_id}: {kind} without url"));
            };
            let file_name = content["filename"].as_str().unwrap_or(body).to_string();
            let caption = content["filename"]
                .as_str()
                .filter(|name| *name != body)
                .map(|_| body.to_string())
                .unwrap_or_default();
            let file = RemoteFile {
                url: url.to_string(),
                file_name: Some(file_name),
                mime_type: content["info"]["mimetype"].as_str().map(str::to_string),
                size: content["info"]["size"].as_u64(),
            };
            (caption, Some(file))
        }
        "" => return Translated::Malformed(format!("{event_id}: no msgtype")),
        _ => return Translated::Skipped,
    };
    let reply_to = relates["m.in_reply_to"]["event_id"].as_str();
    let text = if reply_to.is_some() {
        without_reply_fallback(&text)
    } else {
        text
    };
    let is_reply_to_bot = reply_to.is_some_and(|id| (ctx.sent_by_bot)(id));
    let mentioned = !ctx.direct && (mentions_bot(content, ctx.bot) || is_reply_to_bot);
    let thread_root = (relates["rel_type"] == "m.thread")
        .then(|| relates["event_id"].as_str())
        .flatten();
    let thread_id = match ctx.thread_replies {
        MatrixThreadReplies::Off => None,
        MatrixThreadReplies::Inbound => thread_root.map(str::to_string),
        MatrixThreadReplies::Always => Some(thread_root.unwrap_or(event_id).to_string()),
    };
    let timestamp_ms = event["origin_server_ts"].as_u64().unwrap_or(0);
    let mut inbound = message(
        ctx,
        sender,
        &text,
        event_id,
        thread_id,
        mentioned,
        timestamp_ms,
    );
    inbound.is_reply_to_bot = is_reply_to_bot;
    Translated::Message {
        event: Box::new(inbound_event(ctx, sender, inbound, mentioned)),
        file,
    }
}

fn message(
    ctx: &Context<'_>,
    sender: &str,
    text: &str,
    event_id: &str,
    thread_id: Option<String>,
    mentioned: bool,
    timestamp_ms: u64,
) -> InboundMessage {
    let room = ctx.room_id;
    let (chat, from) = if ctx.direct {
        (ChatType::Direct, format!("{CHANNEL_ID}:{sender}"))
    } else {
        (ChatType::Group, format!("{CHANNEL_ID}:group:{room}"))
    };
    let group = !ctx.direct;
    InboundMessage {
        body: text.to_string(),
        raw_body: text.to_string(),
        body_for_commands: without_leading_mention(text, ctx.bot),
        from,
        to: format!("{CHANNEL_ID}:{room}"),
        account_id: Some(ctx.account_id.to_string()),
        chat_type: Some(chat),
        surface: CHANNEL_ID.to_string(),
        provider: CHANNEL_ID.to_string(),
        originating_channel: Some(CHANNEL_ID.to_string()),
        originating_to: Some(room.to_string()),
        conversation_id: Some(room.to_string()),
        conversation_label: group.then(|| match &ctx.room.name {
            Some(name) => format!("{name} id:{room}"),
            None => format!("room:{room}"),
        }),
        group_id: group.then(|| room.to_string()),
        group_name: ctx.room.name.clone().filter(|_| group),
        group_aliases: if group {
            ctx.room.aliases.clone()
        } else {
            Vec::new()
        },
        sender_id: sender.to_string(),
        mentioned,
        message_id: Some(event_id.to_string()),
        thread_id,
        timestamp_ms,
        ..InboundMessage::default()
    }
}

fn inbound_event(
    ctx: &Context<'_>,
    sender: &str,
    message: InboundMessage,
    mentioned: bool,
) -> InboundEvent {
    let peer = match (ctx.direct, ctx.session_scope) {
        (true, MatrixDmSessionScope::PerUser) => RoutePeer::new(PeerKind::Direct, sender),
        (true, MatrixDmSessionScope::PerRoom) => RoutePeer::new(PeerKind::Direct, ctx.room_id),
        (false, _) => RoutePeer::new(PeerKind::Group, ctx.room_id),
    };
    InboundEvent {
        channel: CHANNEL_ID.to_string(),
        account_id: ctx.account_id.to_string(),
        message,
        route: RouteInput {
            channel: CHANNEL_ID.to_string(),
            account_id: Some(ctx.account_id.to_string()),
            peer: Some(peer),
            ..RouteInput::default()
        },
        bot_mentioned: mentioned,
        bot_username: None,
    }
}

/// Whether the message content addresses the bot: `m.mentions.user_ids`,
/// its user id in the body, or a `matrix.to` link to it.
pub fn mentions_bot(content: &Value, bot: &BotIdentity) -> bool {
    let user = bot.user_id.as_str();
    if user.is_empty() {
        return false;
    }
    let listed = content["m.mentions"]["user_ids"]
        .as_array()
        .is_some_and(|ids| ids.iter().any(|id| id.as_str() == Some(user)));
    let in_body = content["body"]
        .as_str()
        .is_some_and(|body| contains_user_id(body, user));
    let linked = content["formatted_body"].as_str().is_some_and(|html| {
        html.contains(&format!("matrix.to/#/{user}"))
            || html.contains(&format!(
                "matrix.to/#/{}",
                user.replace('@', "%40").replace(':', "%3A")
            ))
    });
    listed || in_body || linked
}

/// `user` in `text` as a whole word (not a prefix of a longer id).
fn contains_user_id(text: &str, user: &str) -> bool {
    text.match_indices(user).any(|(at, _)| {
        let after = text[at + user.len()..].chars().next();
        !after.is_some_and(|c| c.is_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
    })
}

/// The text without a leading mention of the bot (`@bot:hs /new`,
/// `Bot Name: /new`), so chat commands work after one.
fn without_leading_mention(text: &str, bot: &BotIdentity) -> String {
    let trimmed = text.trim_start();
    let names = [Some(bot.user_id.as_str()), bot.display_name.as_deref()];
    for name in names.into_iter().flatten().filter(|n| !n.is_empty()) {
        if let Some(rest) = trimmed.strip_prefix(name) {
            let rest = rest.trim_start_matches([':', ',']).trim_start();
            if rest.len() < trimmed.len() {
                return rest.to_string();
            }
        }
    }
    String::new()
}

/// The legacy rich-reply fallback (`> <@user:hs> quoted` lines and a blank
/// line) removed from a reply's body.
fn without_reply_fallback(text: &str) -> String {
    if !text.starts_with("> ") {
        return text.to_string();
    }
    let mut lines = text.lines().skip_while(|line| line.starts_with('>'));
    match lines.next() {
        Some(line) if line.trim().is_empty() => lines.collect::<Vec<_>>().join("\n"),
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bot() -> BotIdentity {
        BotIdentity {
            user_id: "@pincer:hs".into(),
            display_name: Some("Pincer".into()),
        }
    }

    fn run(event: Value, direct: bool, threads: MatrixThreadReplies) -> Translated {
        let bot = bot();
        let room = RoomInfo {
            name: Some("Ops".into()),
            aliases: vec!["#ops:hs".into()],
            ..RoomInfo::default()
        };
        let sent = |id: &str| id == "$mine";
        let ctx = Context {
            account_id: "default",
            bot: &bot,
            room_id: "!r:hs",
            room: &room,
            direct,
            session_scope: MatrixDmSessionScope::PerUser,
            thread_replies: threads,
            sent_by_bot: &sent,
        };
        translate(&ctx, &event)
    }

    fn text_event(content: Value) -> Value {
        json!({"type": "m.room.message", "event_id": "$e1", "sender": "@ann:hs",
               "origin_server_ts": 1_700_000_000_000u64, "content": content})
    }

    fn message_of(translated: Translated) -> InboundEvent {
        match translated {
            Translated::Message { event, .. } => *event,
            other => panic!("not a message: {other:?}"),
        }
    }

    #[test]
    fn a_direct_message_is_keyed_by_its_sender_and_answered_in_its_room() {
        let event = message_of(run(
            text_event(json!({"msgtype": "m.text", "body": "hello"})),
            true,
            MatrixThreadReplies::Inbound,
        ));
        assert_eq!(
            event.route.peer,
            Some(RoutePeer::new(PeerKind::Direct, "@ann:hs"))
        );
        assert_eq!(event.message.conversation_id.as_deref(), Some("!r:hs"));
        assert_eq!(event.message.chat_type, Some(ChatType::Direct));
        assert_eq!(event.message.group_id, None);
        assert_eq!(event.message.message_id.as_deref(), Some("$e1"));
        assert_eq!(event.message.timestamp_ms, 1_700_000_000_000);
        assert!(!event.bot_mentioned);
    }

    #[test]
    fn per_room_session_scope_keys_a_direct_room_by_the_room() {
        let bot = bot();
        let room = RoomInfo::default();
        let sent = |_: &str| false;
        let ctx = Context {
            account_id: "default",
            bot: &bot,
            room_id: "!r:hs",
            room: &room,
            direct: true,
            session_scope: MatrixDmSessionScope::PerRoom,
            thread_replies: MatrixThreadReplies::Inbound,
            sent_by_bot: &sent,
        };
        let event = message_of(translate(
            &ctx,
            &text_event(json!({"msgtype": "m.text", "body": "hi"})),
        ));
        assert_eq!(
            event.route.peer,
            Some(RoutePeer::new(PeerKind::Direct, "!r:hs"))
        );
        assert_eq!(event.message.chat_type, Some(ChatType::Direct));
    }

    #[test]
    fn room_mentions_come_from_m_mentions_the_user_id_or_a_link() {
        let mention = |content: Value| {
            message_of(run(
                text_event(content),
                false,
                MatrixThreadReplies::Inbound,
            ))
            .bot_mentioned
        };
        assert!(mention(json!({"msgtype": "m.text", "body": "Pincer: hi",
                               "m.mentions": {"user_ids": ["@pincer:hs"]}})));
        assert!(mention(
            json!({"msgtype": "m.text", "body": "@pincer:hs what time is it?"})
        ));
        assert!(mention(json!({"msgtype": "m.text", "body": "Pincer: hi",
            "formatted_body": "<a href=\"https://matrix.to/#/@pincer:hs\">Pincer</a>: hi"})));
        assert!(!mention(
            json!({"msgtype": "m.text", "body": "@pincer:hsx is someone else"})
        ));
        assert!(!mention(
            json!({"msgtype": "m.text", "body": "no one", "m.mentions": {"room": true}})
        ));
        let event = message_of(run(
            text_event(json!({"msgtype": "m.text", "body": "@pincer:hs /new"})),
            false,
            MatrixThreadReplies::Inbound,
        ));
        assert_eq!(event.message.body_for_commands, "/new");
        assert_eq!(event.message.group_aliases, vec!["#ops:hs"]);
    }

    #[test]
    fn a_reply_to_the_bot_counts_as_a_mention_and_loses_its_fallback() {
        let event = message_of(run(
            text_event(json!({"msgtype": "m.text",
                "body": "> <@pincer:hs> earlier answer\n\nthanks!",
                "m.relates_to": {"m.in_reply_to": {"event_id": "$mine"}}})),
            false,
            MatrixThreadReplies::Inbound,
        ));
        assert!(event.bot_mentioned && event.message.is_reply_to_bot);
        assert_eq!(event.message.body, "thanks!");
    }

    #[test]
    fn thread_replies_choose_the_thread_of_the_answer() {
        let threaded = json!({"msgtype": "m.text", "body": "in thread",
            "m.relates_to": {"rel_type": "m.thread", "event_id": "$root"}});
        let plain = json!({"msgtype": "m.text", "body": "top level"});
        let thread = |content: &Value, mode| {
            message_of(run(text_event(content.clone()), false, mode))
                .message
                .thread_id
        };
        assert_eq!(
            thread(&threaded, MatrixThreadReplies::Inbound).as_deref(),
            Some("$root")
        );
        assert_eq!(thread(&plain, MatrixThreadReplies::Inbound), None);
        assert_eq!(thread(&threaded, MatrixThreadReplies::Off), None);
        assert_eq!(
            thread(&plain, MatrixThreadReplies::Always).as_deref(),
            Some("$e1")
        );
    }

    #[test]
    fn notices_edits_own_and_state_events_are_skipped_and_bad_ones_reported() {
        let skipped = |event: Value| {
            matches!(
                run(event, false, MatrixThreadReplies::Inbound),
                Translated::Skipped
            )
        };
        assert!(skipped(text_event(
            json!({"msgtype": "m.notice", "body": "bot talk"})
        )));
        assert!(skipped(text_event(
            json!({"msgtype": "m.text", "body": "* fixed",
            "m.relates_to": {"rel_type": "m.replace", "event_id": "$e0"}})
        )));
        assert!(skipped(
            json!({"type": "m.room.message", "event_id": "$e", "sender": "@pincer:hs",
            "content": {"msgtype": "m.text", "body": "me"}})
        ));
        assert!(skipped(
            json!({"type": "m.room.member", "state_key": "@ann:hs", "event_id": "$m",
            "sender": "@ann:hs", "content": {"membership": "join"}})
        ));
        let malformed = |event: Value| {
            matches!(
                run(event, false, MatrixThreadReplies::Inbound),
                Translated::Malformed(_)
            )
        };
        assert!(malformed(text_event(json!({"msgtype": "m.text"}))));
        assert!(malformed(text_event(json!({"body": "no type"}))));
        assert!(malformed(
            json!({"type": "m.room.message", "sender": "@ann:hs",
            "content": {"msgtype": "m.text", "body": "no id"}})
        ));
        assert!(malformed(text_event(
            json!({"msgtype": "m.image", "body": "x.png"})
        )));
        assert!(matches!(
            run(
                json!({"type": "m.room.encrypted", "event_id": "$x", "sender": "@ann:hs", "content": {}}),
                false,
                MatrixThreadReplies::Inbound
            ),
            Translated::Encrypted
        ));
    }

    #[test]
    fn files_carry_their_url_name_type_and_caption() {
        let translated = run(
            text_event(
                json!({"msgtype": "m.image", "body": "look at this", "filename": "cat.png",
                "url": "mxc://hs/abc", "info": {"mimetype": "image/png", "size": 1234}}),
            ),
            true,
            MatrixThreadReplies::Inbound,
        );
        let Translated::Message { event, file } = translated else {
            panic!("a message")
        };
        let file = file.expect("a file");
        assert_eq!(file.url, "mxc://hs/abc");
        assert_eq!(file.file_name.as_deref(), Some("cat.png"));
        assert_eq!(file.mime_type.as_deref(), Some("image/png"));
        assert_eq!(file.size, Some(1234));
        assert_eq!(event.message.body, "look at this");
    }
}
