//! Files to Telegram: `sendPhoto`, `sendVideo`, `sendAudio`, `sendVoice`
//! (Ogg/Opus shown as a push-to-talk voice note) and `sendDocument`, each a
//! `multipart/form-data` upload whose file part streams from disk. The
//! caption is the reply's markdown as HTML (`parse_mode`), resent as plain
//! text when Telegram cannot parse the markup, as `sendMessage` does. The
//! Bot API's upload limits: 10 MB for a photo, 50 MB for any other file;
//! captions up to 1,024 characters.
//!
//! This file must not retry beyond the plain-text fallback: the outbound
//! layer owns retries.

use std::time::Duration;

use super::api::ApiError;
use super::format;
use super::inbound::GENERAL_TOPIC_ID;
use super::send::{chat_target, message_id};
use super::wire::Message;
use super::TelegramChannel;
use crate::channels::{
    BoxFuture, OutboundTarget, SendError, SendMedia, SentMessage, Upload, UploadKind,
};
use crate::media::multipart::Multipart;

/// The Bot API's cap on an uploaded photo.
pub const TELEGRAM_MAX_PHOTO_BYTES: u64 = 10 * 1024 * 1024;
/// The Bot API's cap on any other uploaded file.
pub const TELEGRAM_MAX_FILE_BYTES: u64 = 50 * 1024 * 1024;
/// Longest media caption.
pub const TELEGRAM_MAX_CAPTION_CHARS: usize = 1024;
/// How long one upload may take (a 50 MB file on a slow uplink).
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// The method and its file field for a kind.
fn method_for(kind: UploadKind) -> (&'static str, &'static str) {
    match kind {
        UploadKind::Photo => ("sendPhoto", "photo"),
        UploadKind::Video => ("sendVideo", "video"),
        UploadKind::Audio => ("sendAudio", "audio"),
        UploadKind::Voice => ("sendVoice", "voice"),
        UploadKind::Document => ("sendDocument", "document"),
    }
}

/// The form's text fields, in order.
fn fields(
    chat_id: &str,
    thread: Option<i64>,
    reply_to: Option<i64>,
    caption: Option<(&str, bool)>,
) -> Vec<(&'static str, String)> {
    let mut out = vec![("chat_id", chat_id.to_string())];
    // Telegram refuses message_thread_id 1 (a forum's General topic).
    if let Some(thread) = thread.filter(|t| *t != GENERAL_TOPIC_ID) {
        out.push(("message_thread_id", thread.to_string()));
    }
    if let Some(reply_to) = reply_to {
        out.push((
            "reply_parameters",
            serde_json::json!({"message_id": reply_to, "allow_sending_without_reply": true})
                .to_string(),
        ));
    }
    match caption {
        Some((text, true)) => {
            out.push(("caption", format::markdown_to_html(text)));
            out.push(("parse_mode", "HTML".to_string()));
        }
        Some((text, false)) => out.push(("caption", text.to_string())),
        None => {}
    }
    out
}

impl TelegramChannel {
    async fn send_media_inner(
        &self,
        target: &OutboundTarget,
        upload: Upload<'_>,
    ) -> Result<SentMessage, SendError> {
        let account = self.account_for(target)?;
        let chat = chat_target(target)?;
        let cap = self.max_upload_bytes(upload.kind);
        if upload.bytes > cap {
            return Err(SendError::Permanent(format!(
                "{} is {} bytes; Telegram takes {} bytes at most",
                upload.file_name, upload.bytes, cap
            )));
        }
        let reply_to = target
            .reply_to_message_id
            .as_deref()
            .map(message_id)
            .transpose()?;
        let (method, field) = method_for(upload.kind);
        let caption = upload.caption.filter(|c| !c.trim().is_empty());
        let form = |markup: bool| -> Result<Multipart, SendError> {
            let mut form = Multipart::new();
            for (name, value) in fields(
                &chat.chat_id,
                chat.thread,
                reply_to,
                caption.map(|c| (c, markup)),
            ) {
                form = form.text(name, &value);
            }
            form.file(field, upload.file_name, upload.mime, upload.path)
                .map_err(|e| {
                    SendError::Permanent(format!("{} cannot be read: {e}", upload.file_name))
                })
        };
        let sent: Result<Message, ApiError> = account
            .api
            .call_form(method, form(true)?, UPLOAD_TIMEOUT)
            .await;
        let sent = match sent {
            Err(error) if caption.is_some() && error.is_parse_entities() => {
                log::debug!("telegram: caption markup refused ({error}); resending as plain text");
                account
                    .api
                    .call_form(method, form(false)?, UPLOAD_TIMEOUT)
                    .await
            }
            other => other,
        }
        .map_err(ApiError::into_send_error)?;
        account.mark_outbound();
        Ok(SentMessage {
            message_id: sent.message_id.to_string(),
        })
    }
}

impl SendMedia for TelegramChannel {
    fn max_upload_bytes(&self, kind: UploadKind) -> u64 {
        match kind {
            UploadKind::Photo => TELEGRAM_MAX_PHOTO_BYTES,
            _ => TELEGRAM_MAX_FILE_BYTES,
        }
    }

    fn max_caption_chars(&self) -> usize {
        TELEGRAM_MAX_CAPTION_CHARS
    }

    fn send_media<'a>(
        &'a self,
        target: &'a OutboundTarget,
        upload: Upload<'a>,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>> {
        Box::pin(self.send_media_inner(target, upload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_follow_the_bot_api() {
        let got = fields("42", Some(1), Some(7), Some(("**hi**", true)));
        assert_eq!(got[0], ("chat_id", "42".to_string()));
        assert!(
            !got.iter().any(|(k, _)| *k == "message_thread_id"),
            "General topic omitted"
        );
        assert!(got.contains(&("caption", "<b>hi</b>".to_string())));
        assert!(got.contains(&("parse_mode", "HTML".to_string())));
        let plain = fields("42", Some(9), None, Some(("**hi**", false)));
        assert!(plain.contains(&("message_thread_id", "9".to_string())));
        assert!(plain.contains(&("caption", "**hi**".to_string())));
        assert!(!plain.iter().any(|(k, _)| *k == "parse_mode"));
        assert_eq!(method_for(UploadKind::Voice), ("sendVoice", "voice"));
    }
}
