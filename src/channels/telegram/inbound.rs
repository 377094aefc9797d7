//! Telegram messages → `InboundEvent`s, as upstream's Telegram adapter
//! shapes them: DMs keyed by the sender, groups and supergroups by chat id,
//! forum topics as `<chatId>:topic:<threadId>` peers under their group
//! (General topic = 1), mentions from `@botname` / text-mention /
//! `/cmd@botname` entities or a reply to the bot, quoted replies, sender
//! names and timestamps. Attachments are resolved by `media.rs` and added
//! with `channels::media::add_to_event`.
//!
//! Pure translation: this file must not call the API or decide access.

use crate::channels::InboundEvent;
use crate::config::schema::bindings::PeerKind;
use crate::pipeline::context::{ChatType, InboundMessage, QuotedMessage};
use crate::routing::{RouteInput, RoutePeer};

use super::wire::{Message, MessageEntity, Update, User};

/// The channel id in config, session keys and events.
pub const CHANNEL_ID: &str = "telegram";
/// Forum topic id of a forum's "General" topic.
pub const GENERAL_TOPIC_ID: i64 = 1;

/// Who the bot is (from `getMe`).
#[derive(Debug, Clone, Default)]
pub struct BotIdentity {
    pub id: i64,
    pub username: Option<String>,
}

/// The message an update carries that pincer answers (new messages and
/// channel posts; edits, callbacks and reactions are acknowledged only).
pub fn message_of(update: &Update) -> Option<&Message> {
    update.message.as_ref().or(update.channel_post.as_ref())
}

fn chat_type(kind: &str) -> ChatType {
    match kind {
        "private" => ChatType::Direct,
        "supergroup" => ChatType::Supergroup,
        "channel" => ChatType::Channel,
        _ => ChatType::Group,
    }
}

/// The forum topic of a group message (`None` outside forums).
pub fn forum_topic(message: &Message) -> Option<i64> {
    let is_group = message.chat.kind != "private";
    (is_group && message.chat.is_forum)
        .then(|| message.message_thread_id.unwrap_or(GENERAL_TOPIC_ID))
}

/// The text of an entity (offsets count UTF-16 code units).
fn entity_text(text: &str, entity: &MessageEntity) -> String {
    let units: Vec<u16> = text.encode_utf16().collect();
    let end = (entity.offset + entity.length).min(units.len());
    let start = entity.offset.min(end);
    String::from_utf16_lossy(&units[start..end])
}

/// Whether `entities` over `text` address the bot.
pub fn mentions_bot(text: &str, entities: &[MessageEntity], bot: &BotIdentity) -> bool {
    let username = bot
        .username
        .as_deref()
        .map(|u| u.trim_start_matches('@').to_lowercase());
    let names_bot = |word: &str| {
        username
            .as_deref()
            .is_some_and(|u| word.eq_ignore_ascii_case(&format!("@{u}")))
    };
    let by_entity = entities.iter().any(|entity| match entity.kind.as_str() {
        "mention" => names_bot(&entity_text(text, entity)),
        "text_mention" => entity.user.as_ref().is_some_and(|u| u.id == bot.id),
        "bot_command" => entity_text(text, entity)
            .split_once('@')
            .is_some_and(|(_, name)| names_bot(&format!("@{name}"))),
        _ => false,
    });
    by_entity
        || username.is_some_and(|u| {
            text.to_lowercase()
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '@'))
                .any(|word| word == format!("@{u}"))
        })
}

/// The sender: the user, else the chat the message was sent on behalf of.
fn sender(message: &Message) -> (String, Option<String>) {
    if let Some(user) = &message.from {
        return (user.id.to_string(), Some(user.display_name()));
    }
    match &message.sender_chat {
        Some(chat) => (chat.id.to_string(), chat.title.clone()),
        None => (message.chat.id.to_string(), message.chat.title.clone()),
    }
}

fn body_of(message: &Message) -> (&str, &[MessageEntity]) {
    match (&message.text, &message.caption) {
        (Some(text), _) => (text, &message.entities),
        (None, Some(caption)) => (caption, &message.caption_entities),
        _ => ("", &[]),
    }
}

/// The quoted message of a reply; a forum topic's own root is no quote.
fn quoted(message: &Message, topic: Option<i64>) -> Option<&Message> {
    let reply = message.reply_to_message.as_deref()?;
    let topic_root =
        topic.is_some_and(|t| t == reply.message_id) || reply.forum_topic_created.is_some();
    (!topic_root).then_some(reply)
}

fn quote_of(message: &Message, reply: &Message) -> QuotedMessage {
    let body = match &message.quote {
        Some(quote) if !quote.text.is_empty() => quote.text.clone(),
        _ => {
            let (text, _) = body_of(reply);
            if text.is_empty() && (reply.document.is_some() || !reply.photo.is_empty()) {
                "<media:attachment>".to_string()
            } else {
                text.to_string()
            }
        }
    };
    QuotedMessage {
        id: reply.message_id.to_string(),
        body,
        sender: reply
            .from
            .as_ref()
            .map(User::display_name)
            .or_else(|| reply.sender_chat.as_ref().and_then(|c| c.title.clone()))
            .unwrap_or_else(|| "unknown".to_string()),
    }
}

/// Translates one message for `account_id`.
pub fn translate(account_id: &str, bot: &BotIdentity, message: &Message) -> InboundEvent {
    let chat = &message.chat;
    let chat_id = chat.id.to_string();
    let kind = chat_type(&chat.kind);
    let topic = forum_topic(message);
    let (sender_id, sender_name) = sender(message);
    let (text, entities) = body_of(message);
    let reply = quoted(message, topic);
    let is_reply_to_bot = reply
        .and_then(|r| r.from.as_ref())
        .is_some_and(|u| u.id == bot.id);
    let mentioned = kind.is_group() && (mentions_bot(text, entities, bot) || is_reply_to_bot);
    let group_peer = match topic {
        Some(topic) => format!("{chat_id}:topic:{topic}"),
        None => chat_id.clone(),
    };
    let (peer, parent_peer, from) = match kind {
        ChatType::Direct => (
            RoutePeer::new(PeerKind::Direct, sender_id.clone()),
            None,
            format!("{CHANNEL_ID}:{chat_id}"),
        ),
        ChatType::Channel => (
            RoutePeer::new(PeerKind::Channel, chat_id.clone()),
            None,
            format!("{CHANNEL_ID}:channel:{chat_id}"),
        ),
        _ => (
            RoutePeer::new(PeerKind::Group, group_peer.clone()),
            topic.map(|_| RoutePeer::new(PeerKind::Group, chat_id.clone())),
            format!("{CHANNEL_ID}:group:{group_peer}"),
        ),
    };
    let group_label = kind.is_group().then(|| {
        let topic_suffix = topic.map(|t| format!(" topic:{t}")).unwrap_or_default();
        match &chat.title {
            Some(title) => format!("{title} id:{chat_id}{topic_suffix}"),
            None => format!("group:{chat_id}{topic_suffix}"),
        }
    });
    let inbound = InboundMessage {
        body: text.to_string(),
        raw_body: text.to_string(),
        from,
        to: format!("{CHANNEL_ID}:{chat_id}"),
        account_id: Some(account_id.to_string()),
        chat_type: Some(kind),
        surface: CHANNEL_ID.to_string(),
        provider: CHANNEL_ID.to_string(),
        originating_channel: Some(CHANNEL_ID.to_string()),
        originating_to: Some(chat_id.clone()),
        conversation_id: Some(chat_id.clone()),
        conversation_label: group_label,
        group_id: kind.is_group().then(|| chat_id.clone()),
        group_name: chat.title.clone().filter(|_| kind.is_group()),
        group_subject: chat.title.clone().filter(|_| kind.is_group()),
        sender_id,
        sender_name,
        mentioned,
        message_id: Some(message.message_id.to_string()),
        quoted: reply.map(|r| quote_of(message, r)),
        thread_id: topic.map(|t| t.to_string()),
        is_reply_to_bot,
        timestamp_ms: u64::try_from(message.date)
            .unwrap_or(0)
            .saturating_mul(1000),
        ..InboundMessage::default()
    };
    InboundEvent {
        channel: CHANNEL_ID.to_string(),
        account_id: account_id.to_string(),
        message: inbound,
        route: RouteInput {
            channel: CHANNEL_ID.to_string(),
            account_id: Some(account_id.to_string()),
            peer: Some(peer),
            parent_peer,
            ..RouteInput::default()
        },
        bot_mentioned: mentioned,
        bot_username: bot.username.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(kind: &str, offset: usize, length: usize) -> MessageEntity {
        MessageEntity {
            kind: kind.into(),
            offset,
            length,
            user: None,
        }
    }

    fn bot() -> BotIdentity {
        BotIdentity {
            id: 99,
            username: Some("PincerBot".into()),
        }
    }

    #[test]
    fn entity_offsets_count_utf16_units() {
        // "🦀" is two UTF-16 units, so the mention starts at unit 3.
        let text = "🦀 @pincerbot hi";
        assert_eq!(entity_text(text, &entity("mention", 3, 10)), "@pincerbot");
        assert!(mentions_bot(text, &[entity("mention", 3, 10)], &bot()));
    }

    #[test]
    fn other_mentions_and_commands_do_not_address_the_bot() {
        let text = "@otherbot /help@OtherBot";
        let entities = [entity("mention", 0, 9), entity("bot_command", 10, 14)];
        assert!(!mentions_bot(text, &entities, &bot()));
        let command = "/status@PincerBot";
        assert!(mentions_bot(
            command,
            &[entity("bot_command", 0, 17)],
            &bot()
        ));
        assert!(!mentions_bot("mail me@pincerbotx.com", &[], &bot()));
    }

    #[test]
    fn forum_general_topic_defaults_to_one() {
        let message: Message = serde_json::from_value(serde_json::json!({
            "message_id": 5, "date": 1, "text": "hi",
            "chat": {"id": -1001, "type": "supergroup", "is_forum": true},
            "from": {"id": 7, "first_name": "Ann"}
        }))
        .expect("message");
        assert_eq!(forum_topic(&message), Some(1));
        let event = translate("default", &bot(), &message);
        assert_eq!(
            event.route.peer,
            Some(RoutePeer::new(PeerKind::Group, "-1001:topic:1"))
        );
    }
}
