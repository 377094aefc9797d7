//! signal-cli `receive` payloads (`{"envelope": {…}, "account": "+…"}`) →
//! `InboundEvent`s: a `dataMessage` with text (mention placeholders U+FFFC
//! written out as `@name`) and attachments (listed for `getAttachment`
//! by id, unless `ignoreAttachments`; one without an id is noted), in a DM
//! keyed by the sender (`+number`, else
//! `uuid:<id>`) or in a group keyed by its `groupInfo.groupId`; mentions
//! of the bot from `dataMessage.mentions` (its number or `accountUuid`) and
//! a quote of one of its messages.
//!
//! Receipts, typing, sync messages (the account's other devices), edits,
//! reactions, the bot's own messages and empty group updates are skipped;
//! a payload without an envelope or a sender is malformed. Pure
//! translation: no I/O, no access decisions.

use serde_json::Value;

use crate::channels::InboundEvent;
use crate::config::schema::bindings::PeerKind;
use crate::pipeline::context::{ChatType, InboundMessage};
use crate::routing::{RouteInput, RoutePeer};

/// The channel id in config, session keys and events.
pub const CHANNEL_ID: &str = "signal";
/// signal-cli's stand-in for a mention in `message`.
const MENTION_PLACEHOLDER: char = '\u{FFFC}';

/// Who the bot is on Signal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BotIdentity {
    pub number: String,
    pub uuid: Option<String>,
}

/// What the translation needs besides the payload.
pub struct Context<'a> {
    pub account_id: &'a str,
    pub bot: &'a BotIdentity,
    pub ignore_attachments: bool,
}

/// An attachment signal-cli announced, fetched by id with `getAttachment`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attachment {
    pub id: String,
    pub content_type: Option<String>,
    pub filename: Option<String>,
    pub size: Option<u64>,
}

/// What became of one payload.
#[derive(Debug)]
pub enum Translated {
    Message {
        event: Box<InboundEvent>,
        /// Attachments to fetch (`getAttachment` with the sender as
        /// `recipient`, or the group's `groupId`).
        attachments: Vec<Attachment>,
    },
    /// Not a message pincer answers.
    Skipped,
    Malformed(String),
}

/// The sender as the message path spells it: `+number`, else `uuid:<id>`.
pub fn sender_id(envelope: &Value) -> Option<String> {
    let number = envelope["sourceNumber"]
        .as_str()
        .or_else(|| envelope["source"].as_str().filter(|s| s.starts_with('+')))
        .filter(|s| !s.is_empty());
    if let Some(number) = number {
        return Some(number.to_string());
    }
    envelope["sourceUuid"]
        .as_str()
        .or_else(|| envelope["source"].as_str())
        .filter(|s| !s.is_empty())
        .map(|uuid| format!("uuid:{}", uuid.to_lowercase()))
}

fn is_bot(bot: &BotIdentity, number: Option<&str>, uuid: Option<&str>) -> bool {
    number.is_some_and(|n| n == bot.number)
        || uuid.is_some_and(|u| {
            bot.uuid
                .as_deref()
                .is_some_and(|b| b.eq_ignore_ascii_case(u))
        })
}

/// Translates one `receive` payload.
pub fn translate(ctx: &Context<'_>, payload: &Value) -> Translated {
    let Some(envelope) = payload.get("envelope").filter(|e| e.is_object()) else {
        if payload.get("exception").is_some() {
            return Translated::Skipped;
        }
        return Translated::Malformed("a receive payload without an envelope".into());
    };
    let Some(data) = envelope.get("dataMessage").filter(|d| d.is_object()) else {
        return Translated::Skipped;
    };
    let Some(sender) = sender_id(envelope) else {
        return Translated::Malformed(
            "an envelope without source, sourceNumber or sourceUuid".into(),
        );
    };
    if is_bot(
        ctx.bot,
        envelope["sourceNumber"].as_str(),
        envelope["sourceUuid"].as_str(),
    ) {
        return Translated::Skipped;
    }
    if data.get("reaction").is_some_and(|r| !r.is_null()) {
        return Translated::Skipped;
    }
    let Some(timestamp) = data["timestamp"]
        .as_u64()
        .or_else(|| envelope["timestamp"].as_u64())
    else {
        return Translated::Malformed(format!("a message from {sender} without a timestamp"));
    };
    if !data["message"].is_null() && !data["message"].is_string() {
        return Translated::Malformed(format!("{timestamp}: message is not a string"));
    }
    let mentions = data["mentions"].as_array().cloned().unwrap_or_default();
    let mut text = with_mentions(data["message"].as_str().unwrap_or(""), &mentions);
    let mut attachments = Vec::new();
    if !ctx.ignore_attachments {
        for attachment in data["attachments"].as_array().into_iter().flatten() {
            match attachment["id"].as_str().filter(|id| !id.is_empty()) {
                Some(id) => attachments.push(Attachment {
                    id: id.to_string(),
                    content_type: attachment["contentType"].as_str().map(str::to_string),
                    filename: attachment["filename"].as_str().map(str::to_string),
                    size: attachment["size"].as_u64(),
                }),
                None => {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&attachment_note(attachment));
                }
            }
        }
    }
    if text.trim().is_empty() && attachments.is_empty() {
        return Translated::Skipped;
    }
    let group = data["groupInfo"]["groupId"]
        .as_str()
        .filter(|g| !g.is_empty());
    let mentioned = group.is_some()
        && mentions
            .iter()
            .any(|m| is_bot(ctx.bot, m["number"].as_str(), m["uuid"].as_str()));
    let quote = &data["quote"];
    let is_reply_to_bot = is_bot(
        ctx.bot,
        quote["authorNumber"]
            .as_str()
            .or_else(|| quote["author"].as_str()),
        quote["authorUuid"].as_str(),
    );
    let message_id = timestamp.to_string();
    let event = match group {
        Some(group) => {
            let name = data["groupInfo"]["groupName"].as_str().map(str::to_string);
            let target = format!("group:{group}");
            let message = InboundMessage {
                from: format!("{CHANNEL_ID}:group:{group}"),
                to: format!("{CHANNEL_ID}:group:{group}"),
                chat_type: Some(ChatType::Group),
                originating_to: Some(target.clone()),
                conversation_id: Some(target),
                conversation_label: Some(match &name {
                    Some(name) => format!("{name} id:{group}"),
                    None => format!("group:{group}"),
                }),
                group_id: Some(group.to_string()),
                group_name: name,
                ..base(ctx, &sender, envelope, &text, &message_id, timestamp)
            };
            inbound_event(
                ctx,
                message,
                RoutePeer::new(PeerKind::Group, group),
                mentioned,
            )
        }
        None => {
            let message = InboundMessage {
                from: format!("{CHANNEL_ID}:{sender}"),
                to: format!("{CHANNEL_ID}:{}", ctx.bot.number),
                chat_type: Some(ChatType::Direct),
                originating_to: Some(sender.clone()),
                conversation_id: Some(sender.clone()),
                ..base(ctx, &sender, envelope, &text, &message_id, timestamp)
            };
            inbound_event(
                ctx,
                message,
                RoutePeer::new(PeerKind::Direct, &sender),
                false,
            )
        }
    };
    let mut event = event;
    event.message.is_reply_to_bot = is_reply_to_bot;
    event.message.mentioned = mentioned || (group.is_some() && is_reply_to_bot);
    Translated::Message {
        event: Box::new(event),
        attachments,
    }
}

fn base(
    ctx: &Context<'_>,
    sender: &str,
    envelope: &Value,
    text: &str,
    message_id: &str,
    timestamp: u64,
) -> InboundMessage {
    InboundMessage {
        body: text.to_string(),
        raw_body: text.to_string(),
        account_id: Some(ctx.account_id.to_string()),
        surface: CHANNEL_ID.to_string(),
        provider: CHANNEL_ID.to_string(),
        originating_channel: Some(CHANNEL_ID.to_string()),
        sender_id: sender.to_string(),
        sender_name: envelope["sourceName"]
            .as_str()
            .filter(|n| !n.trim().is_empty())
            .map(str::to_string),
        message_id: Some(message_id.to_string()),
        timestamp_ms: timestamp,
        ..InboundMessage::default()
    }
}

fn inbound_event(
    ctx: &Context<'_>,
    message: InboundMessage,
    peer: RoutePeer,
    mentioned: bool,
) -> InboundEvent {
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

/// `text` with each U+FFFC placeholder replaced, in order of the mentions'
/// `start`, by `@` and the mentioned name (else number, else UUID).
fn with_mentions(text: &str, mentions: &[Value]) -> String {
    if !text.contains(MENTION_PLACEHOLDER) || mentions.is_empty() {
        return text.to_string();
    }
    let mut ordered: Vec<&Value> = mentions.iter().collect();
    ordered.sort_by_key(|m| m["start"].as_u64().unwrap_or(u64::MAX));
    let mut names = ordered.into_iter().map(|m| {
        let name = ["name", "number", "uuid"]
            .iter()
            .find_map(|key| m[*key].as_str().filter(|v| !v.is_empty()))
            .unwrap_or("someone");
        format!("@{name}")
    });
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match (c, c == MENTION_PLACEHOLDER) {
            (_, true) => match names.next() {
                Some(name) => out.push_str(&name),
                None => out.push(c),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

/// A line telling the model an attachment came that pincer could not fetch
/// (signal-cli gave it no id).
fn attachment_note(attachment: &Value) -> String {
    let kind = attachment["contentType"]
        .as_str()
        .unwrap_or("application/octet-stream");
    let name = attachment["filename"]
        .as_str()
        .map(|n| format!(" {n:?}"))
        .unwrap_or_default();
    let size = attachment["size"]
        .as_u64()
        .map(|s| format!(", {s} bytes"))
        .unwrap_or_default();
    format!("[attachment {kind}{name}{size}: no attachment id, not downloaded]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bot() -> BotIdentity {
        BotIdentity {
            number: "+1000".into(),
            uuid: Some("b0b0b0b0-0000-4000-8000-000000000000".into()),
        }
    }

    fn run(payload: Value, ignore_attachments: bool) -> Translated {
        let bot = bot();
        translate(
            &Context {
                account_id: "default",
                bot: &bot,
                ignore_attachments,
            },
            &payload,
        )
    }

    fn message(payload: Value) -> InboundEvent {
        match run(payload, false) {
            Translated::Message { event, .. } => *event,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    #[test]
    fn a_dm_is_keyed_by_the_sender_number_or_uuid() {
        let event = message(json!({"account": "+1000", "envelope": {
            "source": "+1555", "sourceNumber": "+1555", "sourceUuid": "AA-1", "sourceName": "Ann",
            "timestamp": 1700, "dataMessage": {"timestamp": 1700, "message": "hi"}}}));
        assert_eq!(event.message.sender_id, "+1555");
        assert_eq!(event.message.conversation_id.as_deref(), Some("+1555"));
        assert_eq!(event.message.sender_name.as_deref(), Some("Ann"));
        assert_eq!(event.message.message_id.as_deref(), Some("1700"));
        assert_eq!(event.message.chat_type, Some(ChatType::Direct));
        let uuid_only = message(json!({"envelope": {"sourceUuid": "AB-CD", "timestamp": 5,
            "dataMessage": {"timestamp": 5, "message": "hey"}}}));
        assert_eq!(uuid_only.message.sender_id, "uuid:ab-cd");
    }

    #[test]
    fn group_mentions_of_the_bot_by_number_or_uuid_count() {
        let event = message(json!({"envelope": {"sourceNumber": "+1555", "timestamp": 9,
            "dataMessage": {"timestamp": 9, "message": "\u{FFFC} what now?",
              "mentions": [{"start": 0, "length": 1, "uuid": "B0B0B0B0-0000-4000-8000-000000000000", "name": "Pincer"}],
              "groupInfo": {"groupId": "R3JvdXA=", "groupName": "Ops", "type": "DELIVER"}}}}));
        assert!(event.bot_mentioned && event.message.mentioned);
        assert_eq!(event.message.body, "@Pincer what now?");
        assert_eq!(event.message.group_id.as_deref(), Some("R3JvdXA="));
        assert_eq!(
            event.message.conversation_id.as_deref(),
            Some("group:R3JvdXA=")
        );
        let other = message(
            json!({"envelope": {"sourceNumber": "+1555", "timestamp": 10,
            "dataMessage": {"timestamp": 10, "message": "\u{FFFC} hi",
              "mentions": [{"start": 0, "length": 1, "number": "+1777"}],
              "groupInfo": {"groupId": "R3JvdXA="}}}}),
        );
        assert!(!other.bot_mentioned);
        assert_eq!(other.message.body, "@+1777 hi");
        let quoted = message(
            json!({"envelope": {"sourceNumber": "+1555", "timestamp": 11,
            "dataMessage": {"timestamp": 11, "message": "and?",
              "quote": {"id": 3, "authorNumber": "+1000", "text": "earlier"},
              "groupInfo": {"groupId": "R3JvdXA="}}}}),
        );
        assert!(quoted.message.is_reply_to_bot && quoted.message.mentioned);
    }

    #[test]
    fn non_messages_and_the_bots_own_are_skipped_and_broken_ones_reported() {
        let skipped = |payload: Value| matches!(run(payload, false), Translated::Skipped);
        assert!(skipped(
            json!({"envelope": {"sourceNumber": "+1555", "timestamp": 1,
            "receiptMessage": {"isRead": true, "timestamps": [1]}}})
        ));
        assert!(skipped(
            json!({"envelope": {"sourceNumber": "+1555", "timestamp": 1,
            "typingMessage": {"action": "STARTED"}}})
        ));
        assert!(skipped(
            json!({"envelope": {"sourceNumber": "+1000", "timestamp": 1,
            "dataMessage": {"timestamp": 1, "message": "my own"}}})
        ));
        assert!(skipped(
            json!({"envelope": {"sourceNumber": "+1555", "timestamp": 1,
            "dataMessage": {"timestamp": 1, "message": null, "groupInfo": {"groupId": "G", "type": "UPDATE"}}}})
        ));
        assert!(skipped(
            json!({"envelope": {"sourceNumber": "+1555", "timestamp": 1,
            "dataMessage": {"timestamp": 1, "reaction": {"emoji": "👍", "targetSentTimestamp": 1}}}})
        ));
        let malformed = |payload: Value| match run(payload, false) {
            Translated::Malformed(reason) => reason,
            other => panic!("expected malformed, got {other:?}"),
        };
        assert!(malformed(json!({"nothing": 1})).contains("without an envelope"));
        assert!(
            malformed(json!({"envelope": {"timestamp": 1, "dataMessage": {"message": "x"}}}))
                .contains("without source")
        );
        assert!(malformed(
            json!({"envelope": {"sourceNumber": "+1", "dataMessage": {"message": "x"}}})
        )
        .contains("timestamp"));
        assert!(
            malformed(json!({"envelope": {"sourceNumber": "+1", "timestamp": 2,
            "dataMessage": {"message": 7}}}))
            .contains("not a string")
        );
    }

    #[test]
    fn attachments_are_listed_for_fetching_unless_ignored() {
        let payload = json!({"envelope": {"sourceNumber": "+1555", "timestamp": 4,
            "dataMessage": {"timestamp": 4, "message": null, "attachments": [
                {"id": "a1", "contentType": "image/jpeg", "filename": "cat.jpg", "size": 1234},
                {"contentType": "audio/aac"}]}}});
        let Translated::Message { event, attachments } = run(payload.clone(), false) else {
            panic!("a message")
        };
        assert_eq!(
            attachments,
            vec![Attachment {
                id: "a1".into(),
                content_type: Some("image/jpeg".into()),
                filename: Some("cat.jpg".into()),
                size: Some(1234),
            }]
        );
        assert_eq!(
            event.message.body,
            "[attachment audio/aac: no attachment id, not downloaded]"
        );
        assert!(matches!(run(payload, true), Translated::Skipped));
    }
}
