//! MESSAGE_CREATE → [`InboundEvent`]: guild channels, threads (with their
//! parent channel as the parent peer), DMs and group DMs, the author's
//! member roles, mentions of the bot and replies to it, the quoted message;
//! attachments are listed (`attachments_of`) for the gateway task to fetch. The bot's own messages, system
//! messages and (unless `allowBots`) other bots are dropped here.
//!
//! Pure translation: no I/O. Channel facts a message lacks (is it a
//! thread? whose?) come in as [`ChannelInfo`] from the session's cache.

use serde::Deserialize;
use serde_json::Value;

use crate::channels::media::RemoteFile;
use crate::channels::InboundEvent;
use crate::config::schema::bindings::PeerKind;
use crate::config::schema::discord::AllowBots;
use crate::pipeline::context::{ChatType, InboundMessage, QuotedMessage};
use crate::routing::{RouteInput, RoutePeer};

/// The channel id sessions and config use.
pub const CHANNEL_ID: &str = "discord";

/// Channel types (Discord's `type` field).
pub mod channel_type {
    pub const DM: u64 = 1;
    pub const GROUP_DM: u64 = 3;
    pub const ANNOUNCEMENT_THREAD: u64 = 10;
    pub const PUBLIC_THREAD: u64 = 11;
    pub const PRIVATE_THREAD: u64 = 12;
}

/// Message types a person writes (DEFAULT, REPLY); the rest are system notices.
const USER_MESSAGE_TYPES: [u64; 2] = [0, 19];

/// Who the bot is on this account (from READY).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotIdentity {
    pub user_id: String,
    pub username: String,
}

/// What the session knows about a channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelInfo {
    pub kind: u64,
    pub parent_id: Option<String>,
    pub name: Option<String>,
}

impl ChannelInfo {
    /// Reads a channel object (`id`, `type`, `parent_id`, `name`).
    pub fn from_json(channel: &Value) -> Option<(String, ChannelInfo)> {
        let id = channel.get("id")?.as_str()?.to_string();
        let info = ChannelInfo {
            kind: channel.get("type")?.as_u64()?,
            parent_id: channel
                .get("parent_id")
                .and_then(Value::as_str)
                .map(str::to_string),
            name: channel
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_string),
        };
        Some((id, info))
    }

    pub fn is_thread(&self) -> bool {
        matches!(
            self.kind,
            channel_type::ANNOUNCEMENT_THREAD
                | channel_type::PUBLIC_THREAD
                | channel_type::PRIVATE_THREAD
        )
    }
}

/// Per-account facts translation needs.
#[derive(Debug, Clone)]
pub struct TranslateContext {
    pub account_id: String,
    pub bot: BotIdentity,
    pub allow_bots: AllowBots,
}

#[derive(Debug, Deserialize)]
struct User {
    id: String,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    global_name: Option<String>,
    #[serde(default)]
    bot: Option<bool>,
}

impl User {
    fn display_name(&self) -> Option<String> {
        self.global_name.clone().or_else(|| self.username.clone())
    }
}

#[derive(Debug, Default, Deserialize)]
struct Member {
    #[serde(default)]
    roles: Vec<String>,
    #[serde(default)]
    nick: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Referenced {
    id: String,
    #[serde(default)]
    content: String,
    author: User,
}

#[derive(Debug, Deserialize)]
struct Attachment {
    url: String,
    #[serde(default)]
    filename: Option<String>,
    #[serde(default)]
    content_type: Option<String>,
    #[serde(default)]
    size: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct Message {
    id: String,
    channel_id: String,
    #[serde(default)]
    guild_id: Option<String>,
    author: User,
    #[serde(default)]
    member: Option<Member>,
    #[serde(default)]
    content: String,
    #[serde(default)]
    mentions: Vec<User>,
    #[serde(default)]
    referenced_message: Option<Box<Referenced>>,
    #[serde(default)]
    attachments: Vec<Attachment>,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(rename = "type", default)]
    kind: u64,
}

/// Whether a guild message needs its channel looked up first.
pub fn needs_channel_info(d: &Value) -> Option<&str> {
    d.get("guild_id")?;
    d.get("channel_id")?.as_str()
}

/// Translates a MESSAGE_CREATE payload; `None` for messages to ignore.
pub fn translate_message(
    d: &Value,
    ctx: &TranslateContext,
    channel: Option<&ChannelInfo>,
) -> Option<InboundEvent> {
    let msg: Message = match serde_json::from_value(d.clone()) {
        Ok(msg) => msg,
        Err(e) => {
            log::debug!("discord: unreadable MESSAGE_CREATE: {e}");
            return None;
        }
    };
    if !USER_MESSAGE_TYPES.contains(&msg.kind) || msg.author.id == ctx.bot.user_id {
        return None;
    }
    let mentioned = mentions_bot(&msg, &ctx.bot.user_id);
    let reply_to_bot = msg
        .referenced_message
        .as_ref()
        .is_some_and(|r| r.author.id == ctx.bot.user_id);
    if msg.author.bot == Some(true) && !bot_allowed(ctx.allow_bots, mentioned) {
        return None;
    }
    if msg.content.trim().is_empty() && msg.attachments.is_empty() {
        return None;
    }
    let shape = Shape::of(&msg, channel);
    let message = inbound_message(&msg, ctx, &shape, mentioned || reply_to_bot, reply_to_bot);
    let route = RouteInput {
        channel: CHANNEL_ID.into(),
        account_id: Some(ctx.account_id.clone()),
        peer: Some(shape.peer.clone()),
        parent_peer: shape
            .parent_id
            .as_ref()
            .map(|id| RoutePeer::new(PeerKind::Channel, id)),
        guild_id: msg.guild_id.clone(),
        team_id: None,
        member_roles: msg
            .member
            .as_ref()
            .map(|m| m.roles.clone())
            .unwrap_or_default(),
        agent_override: None,
    };
    Some(InboundEvent {
        channel: CHANNEL_ID.into(),
        account_id: ctx.account_id.clone(),
        message,
        route,
        bot_mentioned: mentioned || reply_to_bot,
        bot_username: Some(ctx.bot.username.clone()),
    })
}

fn bot_allowed(allow: AllowBots, mentioned: bool) -> bool {
    match allow {
        AllowBots::Always => true,
        AllowBots::Mentions => mentioned,
        AllowBots::Never => false,
    }
}

fn mentions_bot(msg: &Message, bot_id: &str) -> bool {
    msg.mentions.iter().any(|u| u.id == bot_id)
        || msg.content.contains(&format!("<@{bot_id}>"))
        || msg.content.contains(&format!("<@!{bot_id}>"))
}

/// The conversation shape of a message: DM, group DM, guild channel, thread.
struct Shape {
    chat: ChatType,
    peer: RoutePeer,
    parent_id: Option<String>,
    thread_id: Option<String>,
    from: String,
    to: String,
    name: Option<String>,
}

impl Shape {
    fn of(msg: &Message, channel: Option<&ChannelInfo>) -> Shape {
        let channel_id = msg.channel_id.clone();
        let kind = channel.map(|c| c.kind);
        if msg.guild_id.is_none() && kind != Some(channel_type::GROUP_DM) {
            return Shape {
                chat: ChatType::Direct,
                peer: RoutePeer::new(PeerKind::Direct, &msg.author.id),
                parent_id: None,
                thread_id: None,
                from: format!("discord:{}", msg.author.id),
                to: format!("user:{}", msg.author.id),
                name: None,
            };
        }
        let (chat, peer_kind, from) = if msg.guild_id.is_none() {
            (
                ChatType::Group,
                PeerKind::Group,
                format!("discord:group:{channel_id}"),
            )
        } else {
            (
                ChatType::Channel,
                PeerKind::Channel,
                format!("discord:channel:{channel_id}"),
            )
        };
        let thread = channel.filter(|c| c.is_thread());
        Shape {
            chat,
            peer: RoutePeer::new(peer_kind, &channel_id),
            parent_id: thread.and_then(|c| c.parent_id.clone()),
            thread_id: thread.map(|_| channel_id.clone()),
            from,
            to: format!("channel:{channel_id}"),
            name: channel
                .and_then(|c| c.name.clone())
                .map(|n| format!("#{n}")),
        }
    }
}

fn inbound_message(
    msg: &Message,
    ctx: &TranslateContext,
    shape: &Shape,
    mentioned: bool,
    reply_to_bot: bool,
) -> InboundMessage {
    let body = readable_mentions(&msg.content, &ctx.bot);
    let sender_name = msg
        .member
        .as_ref()
        .and_then(|m| m.nick.clone())
        .or_else(|| msg.author.display_name());
    let group = shape.chat.is_group();
    InboundMessage {
        body: body.clone(),
        raw_body: body,
        from: shape.from.clone(),
        to: shape.to.clone(),
        account_id: Some(ctx.account_id.clone()),
        chat_type: Some(shape.chat),
        surface: CHANNEL_ID.into(),
        provider: CHANNEL_ID.into(),
        originating_channel: Some(CHANNEL_ID.into()),
        originating_to: Some(shape.to.clone()),
        conversation_id: Some(msg.channel_id.clone()),
        group_id: group.then(|| msg.channel_id.clone()),
        group_name: shape.name.clone(),
        sender_id: msg.author.id.clone(),
        sender_name,
        mentioned,
        message_id: Some(msg.id.clone()),
        quoted: msg.referenced_message.as_ref().map(|r| QuotedMessage {
            id: r.id.clone(),
            body: r.content.clone(),
            sender: r
                .author
                .display_name()
                .unwrap_or_else(|| r.author.id.clone()),
        }),
        thread_id: shape.thread_id.clone(),
        is_reply_to_bot: reply_to_bot,
        timestamp_ms: msg.timestamp.as_deref().and_then(timestamp_ms).unwrap_or(0),
        ..InboundMessage::default()
    }
}

/// `<@BOTID>` / `<@!BOTID>` become `@botname` so commands and the agent
/// read the mention the way the user saw it.
fn readable_mentions(content: &str, bot: &BotIdentity) -> String {
    let readable = format!("@{}", bot.username);
    content
        .replace(&format!("<@!{}>", bot.user_id), &readable)
        .replace(&format!("<@{}>", bot.user_id), &readable)
}

/// The attachments of a MESSAGE_CREATE payload, to download.
pub fn attachments_of(d: &Value) -> Vec<RemoteFile> {
    let attachments: Vec<Attachment> = d
        .get("attachments")
        .cloned()
        .and_then(|a| serde_json::from_value(a).ok())
        .unwrap_or_default();
    attachments
        .into_iter()
        .map(|a| RemoteFile {
            url: a.url,
            file_name: a.filename,
            mime_type: a.content_type,
            size: a.size,
        })
        .collect()
}

fn timestamp_ms(iso: &str) -> Option<u64> {
    let ts: jiff::Timestamp = iso.parse().ok()?;
    u64::try_from(ts.as_millisecond()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> TranslateContext {
        TranslateContext {
            account_id: "default".into(),
            bot: BotIdentity {
                user_id: "900".into(),
                username: "pincer".into(),
            },
            allow_bots: AllowBots::Never,
        }
    }

    fn guild_message(content: &str) -> Value {
        json!({
            "id": "11", "channel_id": "500", "guild_id": "77", "type": 0,
            "content": content, "timestamp": "2026-11-22T08:00:00.000000+00:00",
            "author": {"id": "42", "username": "ann"},
            "member": {"roles": ["r1", "r2"], "nick": "Annie"},
            "mentions": [], "attachments": []
        })
    }

    #[test]
    fn guild_message_names_channel_peer_guild_and_roles() {
        let event = translate_message(&guild_message("hello"), &ctx(), None).expect("event");
        assert_eq!(
            event.route.peer,
            Some(RoutePeer::new(PeerKind::Channel, "500"))
        );
        assert_eq!(event.route.guild_id.as_deref(), Some("77"));
        assert_eq!(event.route.member_roles, vec!["r1", "r2"]);
        assert_eq!(event.message.chat_type, Some(ChatType::Channel));
        assert_eq!(event.message.sender_name.as_deref(), Some("Annie"));
        assert_eq!(event.message.timestamp_ms, 1_795_334_400_000);
        assert!(!event.bot_mentioned);
    }

    #[test]
    fn mention_of_the_bot_is_detected_and_made_readable() {
        let event =
            translate_message(&guild_message("<@!900> status?"), &ctx(), None).expect("event");
        assert!(event.bot_mentioned && event.message.mentioned);
        assert_eq!(event.message.body, "@pincer status?");
    }

    #[test]
    fn own_messages_system_messages_and_other_bots_are_ignored() {
        let mut own = guild_message("hi");
        own["author"]["id"] = json!("900");
        assert!(translate_message(&own, &ctx(), None).is_none());
        let mut join = guild_message("");
        join["type"] = json!(7);
        assert!(translate_message(&join, &ctx(), None).is_none());
        let mut bot = guild_message("beep <@900>");
        bot["author"]["bot"] = json!(true);
        assert!(translate_message(&bot, &ctx(), None).is_none());
        let mentions_ok = TranslateContext {
            allow_bots: AllowBots::Mentions,
            ..ctx()
        };
        assert!(translate_message(&bot, &mentions_ok, None).is_some());
    }

    #[test]
    fn reply_to_the_bot_quotes_it_and_counts_as_mention() {
        let mut reply = guild_message("and then?");
        reply["type"] = json!(19);
        reply["referenced_message"] = json!({"id": "10", "content": "step one", "author": {"id": "900", "username": "pincer"}});
        let event = translate_message(&reply, &ctx(), None).expect("event");
        assert!(event.bot_mentioned && event.message.is_reply_to_bot);
        let quoted = event.message.quoted.expect("quoted");
        assert_eq!(
            (quoted.id.as_str(), quoted.body.as_str()),
            ("10", "step one")
        );
    }

    #[test]
    fn attachment_only_messages_are_kept_and_their_files_listed() {
        let mut msg = guild_message("");
        msg["attachments"] = json!([{"id": "1", "filename": "cat.png", "size": 10,
            "url": "https://cdn.example/cat.png", "content_type": "image/png"}]);
        let event = translate_message(&msg, &ctx(), None).expect("event");
        assert!(event.message.media.is_empty());
        assert_eq!(
            attachments_of(&msg),
            vec![RemoteFile {
                url: "https://cdn.example/cat.png".into(),
                file_name: Some("cat.png".into()),
                mime_type: Some("image/png".into()),
                size: Some(10),
            }]
        );
    }
}
