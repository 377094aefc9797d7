//! Outbound to Telegram: chat targets in upstream's spellings, `sendMessage`
//! (markdown sent as HTML, retried once as plain text when Telegram cannot
//! parse the markup), `editMessageText` (an unchanged edit is no error),
//! `deleteMessage`, `sendChatAction typing` and `setMessageReaction`, each
//! failure classified into `SendError`.
//!
//! This file must not retry beyond the plain-text fallback or split text:
//! the outbound layer owns retries and chunking.

use serde_json::{json, Value};

use super::api::ApiError;
use super::format;
use super::inbound::GENERAL_TOPIC_ID;
use super::{TelegramChannel, TELEGRAM_MAX_MESSAGE_CHARS};
use crate::channels::{
    BoxFuture, DeleteMessage, EditMessage, OutboundTarget, React, SendError, SentMessage,
    TextFormat, Typing,
};

/// A chat to send to: its id and forum topic / DM thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ChatTarget {
    pub(super) chat_id: String,
    pub(super) thread: Option<i64>,
}

/// Accepts `123`, `@channel`, `telegram:123`, `telegram:group:-100:topic:7`.
pub(super) fn chat_target(target: &OutboundTarget) -> Result<ChatTarget, SendError> {
    let mut to = target.to.trim();
    to = to.strip_prefix("telegram:").unwrap_or(to);
    to = to.strip_prefix("tg:").unwrap_or(to);
    for kind in ["group:", "channel:", "direct:"] {
        to = to.strip_prefix(kind).unwrap_or(to);
    }
    let (chat, topic) = match to.split_once(":topic:") {
        Some((chat, topic)) => (chat, Some(topic)),
        None => (to, None),
    };
    let valid = chat.parse::<i64>().is_ok() || (chat.starts_with('@') && chat.len() > 1);
    if !valid {
        return Err(SendError::Permanent(format!(
            "not a Telegram chat id: {:?}",
            target.to
        )));
    }
    let thread_text = target.thread_id.as_deref().or(topic).map(str::trim);
    let thread = match thread_text.filter(|t| !t.is_empty()) {
        None => None,
        Some(text) => Some(
            text.parse::<i64>()
                .map_err(|_| SendError::Permanent(format!("not a Telegram thread id: {text:?}")))?,
        ),
    };
    Ok(ChatTarget {
        chat_id: chat.to_string(),
        thread,
    })
}

pub(super) fn message_id(raw: &str) -> Result<i64, SendError> {
    raw.trim()
        .parse::<i64>()
        .map_err(|_| SendError::Permanent(format!("not a Telegram message id: {raw:?}")))
}

/// The `text` + `parse_mode` fields for a format.
fn text_fields(body: &mut Value, text: &str, format: TextFormat) {
    match format {
        TextFormat::Markdown => {
            body["text"] = json!(format::markdown_to_html(text));
            body["parse_mode"] = json!("HTML");
        }
        TextFormat::Plain => body["text"] = json!(text),
    }
}

/// Calls an API method with markup, retrying once as plain text when
/// Telegram cannot parse the markup.
async fn with_plain_fallback<T, F, Fut>(
    body: Value,
    text: &str,
    format: TextFormat,
    call: F,
) -> Result<T, ApiError>
where
    F: Fn(Value) -> Fut,
    Fut: std::future::Future<Output = Result<T, ApiError>>,
{
    let mut formatted = body.clone();
    text_fields(&mut formatted, text, format);
    match call(formatted).await {
        Err(error) if format == TextFormat::Markdown && error.is_parse_entities() => {
            log::debug!("telegram: markup refused ({error}); resending as plain text");
            let mut plain = body;
            text_fields(&mut plain, text, TextFormat::Plain);
            call(plain).await
        }
        other => other,
    }
}

impl TelegramChannel {
    pub(super) async fn send_text_inner(
        &self,
        target: &OutboundTarget,
        text: &str,
        format: TextFormat,
    ) -> Result<SentMessage, SendError> {
        let account = self.account_for(target)?;
        let chat = chat_target(target)?;
        let chars = text.chars().count();
        if chars > TELEGRAM_MAX_MESSAGE_CHARS {
            return Err(SendError::Permanent(format!(
                "text is {chars} characters; Telegram allows {TELEGRAM_MAX_MESSAGE_CHARS}"
            )));
        }
        let mut body = json!({ "chat_id": chat.chat_id });
        // Telegram refuses message_thread_id 1 (a forum's General topic).
        if let Some(thread) = chat.thread.filter(|t| *t != GENERAL_TOPIC_ID) {
            body["message_thread_id"] = json!(thread);
        }
        if let Some(reply_to) = target.reply_to_message_id.as_deref() {
            body["reply_parameters"] = json!({
                "message_id": message_id(reply_to)?,
                "allow_sending_without_reply": true,
            });
        }
        if !account.link_preview {
            body["link_preview_options"] = json!({ "is_disabled": true });
        }
        let sent = with_plain_fallback(body, text, format, |b| {
            let api = account.api.clone();
            async move { api.send_message(&b).await }
        })
        .await
        .map_err(ApiError::into_send_error)?;
        account.mark_outbound();
        Ok(SentMessage {
            message_id: sent.message_id.to_string(),
        })
    }

    async fn edit_text_inner(
        &self,
        target: &OutboundTarget,
        message: &str,
        text: &str,
        format: TextFormat,
    ) -> Result<(), SendError> {
        let account = self.account_for(target)?;
        let chat = chat_target(target)?;
        let body = json!({ "chat_id": chat.chat_id, "message_id": message_id(message)? });
        let edited = with_plain_fallback(body, text, format, |b| {
            let api = account.api.clone();
            async move { api.edit_message_text(&b).await }
        })
        .await;
        match edited {
            Ok(_) => {}
            Err(error) if error.is_not_modified() => {}
            Err(error) => return Err(error.into_send_error()),
        }
        account.mark_outbound();
        Ok(())
    }
}

impl Typing for TelegramChannel {
    fn send_typing<'a>(
        &'a self,
        target: &'a OutboundTarget,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let chat = chat_target(target)?;
            // Typing shows in the General topic only with its id (upstream).
            account
                .api
                .send_typing(&chat.chat_id, chat.thread)
                .await
                .map_err(ApiError::into_send_error)?;
            Ok(())
        })
    }
}

impl EditMessage for TelegramChannel {
    fn edit_text<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
        text: &'a str,
        format: TextFormat,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(self.edit_text_inner(target, message_id, text, format))
    }
}

impl DeleteMessage for TelegramChannel {
    fn delete<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let chat = chat_target(target)?;
            account
                .api
                .delete_message(&chat.chat_id, message_id(message)?)
                .await
                .map_err(ApiError::into_send_error)?;
            Ok(())
        })
    }
}

impl React for TelegramChannel {
    fn react<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message: &'a str,
        emoji: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>> {
        Box::pin(async move {
            let account = self.account_for(target)?;
            let chat = chat_target(target)?;
            account
                .api
                .set_reaction(&chat.chat_id, message_id(message)?, emoji)
                .await
                .map_err(ApiError::into_send_error)?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(to: &str, thread: Option<&str>) -> OutboundTarget {
        OutboundTarget {
            to: to.into(),
            thread_id: thread.map(str::to_string),
            ..OutboundTarget::default()
        }
    }

    #[test]
    fn targets_accept_upstream_spellings() {
        assert_eq!(
            chat_target(&target("telegram:group:-100123:topic:7", None)).expect("topic"),
            ChatTarget {
                chat_id: "-100123".into(),
                thread: Some(7)
            }
        );
        assert_eq!(
            chat_target(&target("42", Some("9"))).expect("plain"),
            ChatTarget {
                chat_id: "42".into(),
                thread: Some(9)
            }
        );
        assert_eq!(
            chat_target(&target("@news", None))
                .expect("username")
                .chat_id,
            "@news"
        );
        assert!(matches!(
            chat_target(&target("telegram:not-a-chat", None)),
            Err(SendError::Permanent(_))
        ));
    }
}
