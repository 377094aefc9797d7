//! Socket Mode `events_api` payloads → [`InboundEvent`]: `message` and
//! `app_mention` events in channels, private channels, DMs (`im`) and
//! group DMs (`mpim`), the team id for routing, threads (`thread_ts`, the
//! channel as parent peer), mentions of the bot (`<@BOTID>`), replies in a
//! thread the bot started; files are listed (`files_of`) for download. The bot's own
//! messages, edits/deletes/joins (subtypes) and other bots (unless
//! `allowBots`) are dropped.
//!
//! Pure translation: no I/O.

use serde::Deserialize;
use serde_json::Value;

use super::web::SlackIdentity;
use crate::channels::media::RemoteFile;
use crate::channels::InboundEvent;
use crate::config::schema::bindings::PeerKind;
use crate::pipeline::context::{ChatType, InboundMessage};
use crate::routing::{RouteInput, RoutePeer};

/// The channel id sessions and config use.
pub const CHANNEL_ID: &str = "slack";

/// Message subtypes that still carry a person's message.
const USER_SUBTYPES: [&str; 2] = ["file_share", "thread_broadcast"];

/// Per-account facts translation needs.
#[derive(Debug, Clone)]
pub struct TranslateContext {
    pub account_id: String,
    pub bot: SlackIdentity,
    pub allow_bots: bool,
}

#[derive(Debug, Deserialize)]
struct File {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    mimetype: Option<String>,
    #[serde(default)]
    url_private: Option<String>,
    #[serde(default)]
    url_private_download: Option<String>,
    #[serde(default)]
    size: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    subtype: Option<String>,
    #[serde(default)]
    channel: Option<String>,
    #[serde(default)]
    channel_type: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    bot_id: Option<String>,
    #[serde(default)]
    text: String,
    ts: String,
    #[serde(default)]
    thread_ts: Option<String>,
    #[serde(default)]
    parent_user_id: Option<String>,
    #[serde(default)]
    team: Option<String>,
    #[serde(default)]
    files: Vec<File>,
}

/// Translates an `events_api` envelope payload; `None` for events to ignore.
pub fn translate_event(payload: &Value, ctx: &TranslateContext) -> Option<InboundEvent> {
    let event: Event = serde_json::from_value(payload.get("event")?.clone()).ok()?;
    if !matches!(event.kind.as_str(), "message" | "app_mention") || !wanted(&event, ctx) {
        return None;
    }
    let channel = event.channel.clone()?;
    let sender = event.user.clone().or_else(|| event.bot_id.clone())?;
    if event.text.trim().is_empty() && event.files.is_empty() {
        return None;
    }
    let chat = chat_type(event.channel_type.as_deref(), &channel);
    let mentioned =
        event.kind == "app_mention" || event.text.contains(&format!("<@{}>", ctx.bot.user_id));
    let reply_to_bot = event.parent_user_id.as_deref() == Some(ctx.bot.user_id.as_str());
    let thread_ts = event.thread_ts.clone().filter(|ts| *ts != event.ts);
    let team_id = payload
        .get("team_id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| event.team.clone());
    let peer = match chat {
        ChatType::Direct => RoutePeer::new(PeerKind::Direct, &sender),
        ChatType::Group => RoutePeer::new(PeerKind::Group, &channel),
        _ => RoutePeer::new(PeerKind::Channel, &channel),
    };
    let parent_peer = thread_ts
        .as_ref()
        .filter(|_| chat != ChatType::Direct)
        .map(|_| peer.clone());
    let message = inbound_message(
        &event,
        ctx,
        chat,
        &sender,
        &channel,
        thread_ts,
        mentioned || reply_to_bot,
        reply_to_bot,
    );
    let route = RouteInput {
        channel: CHANNEL_ID.into(),
        account_id: Some(ctx.account_id.clone()),
        peer: Some(peer),
        parent_peer,
        guild_id: None,
        team_id,
        member_roles: Vec::new(),
        agent_override: None,
    };
    Some(InboundEvent {
        channel: CHANNEL_ID.into(),
        account_id: ctx.account_id.clone(),
        message,
        route,
        bot_mentioned: mentioned || reply_to_bot,
        bot_username: Some(ctx.bot.username.clone()).filter(|u| !u.is_empty()),
    })
}

/// Drops our own messages, non-message subtypes and (unless allowed) bots.
fn wanted(event: &Event, ctx: &TranslateContext) -> bool {
    let ours = event.user.as_deref() == Some(ctx.bot.user_id.as_str())
        || (event.bot_id.is_some() && event.bot_id == ctx.bot.bot_id);
    if ours {
        return false;
    }
    let from_bot = event.bot_id.is_some() || event.subtype.as_deref() == Some("bot_message");
    if from_bot && !ctx.allow_bots {
        return false;
    }
    match event.subtype.as_deref() {
        None => true,
        Some("bot_message") => ctx.allow_bots,
        Some(subtype) => USER_SUBTYPES.contains(&subtype),
    }
}

/// `im` → direct, `mpim` → group, `channel`/`group` (private channel) →
/// channel; without `channel_type` (app_mention) the id prefix decides.
fn chat_type(channel_type: Option<&str>, channel: &str) -> ChatType {
    match channel_type {
        Some("im") => ChatType::Direct,
        Some("mpim") => ChatType::Group,
        Some(_) => ChatType::Channel,
        None if channel.starts_with('D') => ChatType::Direct,
        None => ChatType::Channel,
    }
}

#[allow(clippy::too_many_arguments)]
fn inbound_message(
    event: &Event,
    ctx: &TranslateContext,
    chat: ChatType,
    sender: &str,
    channel: &str,
    thread_ts: Option<String>,
    mentioned: bool,
    reply_to_bot: bool,
) -> InboundMessage {
    let body = readable(&event.text, &ctx.bot);
    let direct = chat == ChatType::Direct;
    let from = if direct {
        format!("slack:{sender}")
    } else {
        format!("slack:channel:{channel}")
    };
    let to = format!("channel:{channel}");
    InboundMessage {
        body: body.clone(),
        raw_body: body,
        from,
        to: to.clone(),
        account_id: Some(ctx.account_id.clone()),
        chat_type: Some(chat),
        surface: CHANNEL_ID.into(),
        provider: CHANNEL_ID.into(),
        originating_channel: Some(CHANNEL_ID.into()),
        originating_to: Some(to),
        conversation_id: Some(channel.to_string()),
        group_id: (!direct).then(|| channel.to_string()),
        sender_id: sender.to_string(),
        mentioned,
        message_id: Some(event.ts.clone()),
        thread_id: thread_ts,
        is_reply_to_bot: reply_to_bot,
        timestamp_ms: ts_ms(&event.ts),
        ..InboundMessage::default()
    }
}

/// Slack's escapes decoded, `<@BOTID>` shown as `@botname`.
fn readable(text: &str, bot: &SlackIdentity) -> String {
    let name = if bot.username.is_empty() {
        "bot"
    } else {
        bot.username.as_str()
    };
    text.replace(&format!("<@{}>", bot.user_id), &format!("@{name}"))
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The files of an `events_api` payload's message, to download with the
/// bot token (`url_private_download`, else `url_private`).
pub fn files_of(payload: &Value) -> Vec<RemoteFile> {
    let files: Vec<File> = payload
        .get("event")
        .and_then(|e| e.get("files"))
        .cloned()
        .and_then(|f| serde_json::from_value(f).ok())
        .unwrap_or_default();
    files
        .into_iter()
        .filter_map(|f| {
            let url = f.url_private_download.or(f.url_private)?;
            Some(RemoteFile {
                url,
                file_name: f.name,
                mime_type: f.mimetype,
                size: f.size,
            })
        })
        .collect()
}

/// `"1700000000.000200"` → milliseconds.
fn ts_ms(ts: &str) -> u64 {
    ts.parse::<f64>().map(|s| (s * 1000.0) as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> TranslateContext {
        TranslateContext {
            account_id: "default".into(),
            bot: SlackIdentity {
                user_id: "UBOT".into(),
                bot_id: Some("BBOT".into()),
                team_id: Some("T1".into()),
                username: "pincer".into(),
            },
            allow_bots: false,
        }
    }

    fn payload(event: Value) -> Value {
        json!({"team_id": "T1", "type": "event_callback", "event_id": "Ev1", "event": event})
    }

    #[test]
    fn channel_mention_routes_by_channel_and_team() {
        let event = payload(
            json!({"type": "message", "channel": "C1", "channel_type": "channel",
            "user": "U1", "text": "<@UBOT> hi &amp; bye", "ts": "1700000000.000100"}),
        );
        let inbound = translate_event(&event, &ctx()).expect("event");
        assert_eq!(
            inbound.route.peer,
            Some(RoutePeer::new(PeerKind::Channel, "C1"))
        );
        assert_eq!(inbound.route.team_id.as_deref(), Some("T1"));
        assert!(inbound.bot_mentioned);
        assert_eq!(inbound.message.body, "@pincer hi & bye");
        assert_eq!(inbound.message.timestamp_ms, 1_700_000_000_000);
    }

    #[test]
    fn own_bot_and_edited_messages_are_ignored() {
        let own = payload(
            json!({"type": "message", "channel": "C1", "user": "UBOT", "text": "x", "ts": "1.0"}),
        );
        assert!(translate_event(&own, &ctx()).is_none());
        let bot = payload(
            json!({"type": "message", "channel": "C1", "bot_id": "B9", "text": "x", "ts": "1.0"}),
        );
        assert!(translate_event(&bot, &ctx()).is_none());
        let allowed = TranslateContext {
            allow_bots: true,
            ..ctx()
        };
        assert!(translate_event(&bot, &allowed).is_some());
        let edit = payload(
            json!({"type": "message", "subtype": "message_changed", "channel": "C1",
            "user": "U1", "text": "x", "ts": "1.0"}),
        );
        assert!(translate_event(&edit, &ctx()).is_none());
    }

    #[test]
    fn app_mention_without_channel_type_uses_the_id_prefix() {
        let dm = payload(
            json!({"type": "app_mention", "channel": "D5", "user": "U1", "text": "yo", "ts": "1.0"}),
        );
        let inbound = translate_event(&dm, &ctx()).expect("event");
        assert_eq!(inbound.message.chat_type, Some(ChatType::Direct));
        assert!(inbound.bot_mentioned);
    }

    #[test]
    fn file_share_lists_its_files_for_download() {
        let shared = payload(json!({"type": "message", "subtype": "file_share",
            "channel": "D5", "channel_type": "im", "user": "U1", "text": "", "ts": "1.0",
            "files": [{"id": "F1", "name": "cat.png", "mimetype": "image/png", "size": 42,
                "url_private": "https://files.example/F1/cat.png",
                "url_private_download": "https://files.example/F1/download/cat.png"}]}));
        let inbound = translate_event(&shared, &ctx()).expect("event");
        assert!(inbound.message.media.is_empty());
        assert_eq!(
            files_of(&shared),
            vec![RemoteFile {
                url: "https://files.example/F1/download/cat.png".into(),
                file_name: Some("cat.png".into()),
                mime_type: Some("image/png".into()),
                size: Some(42),
            }]
        );
    }
}
