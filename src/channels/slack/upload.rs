//! Files to Slack by its external upload flow: `files.getUploadURLExternal`
//! (form-encoded `filename` and `length`: the method takes no JSON) gives an
//! upload URL and a file id; the bytes are POSTed there as a multipart form
//! (`file`, streamed from disk); `files.completeUploadExternal` then shares
//! the file in the conversation (`channel_id`, `thread_ts`) with the text as
//! its `initial_comment`. Slack takes files up to 1 GB.
//!
//! It must not retry: the outbound layer does.

use std::time::Duration;

use serde_json::{json, Value};

use super::web::SlackWeb;
use super::SlackChannel;
use crate::channels::{
    BoxFuture, OutboundTarget, SendError, SendMedia, SentMessage, Upload, UploadKind,
};
use crate::media::multipart::Multipart;

/// Slack's cap on one file.
pub const SLACK_MAX_FILE_BYTES: u64 = 1024 * 1024 * 1024;
/// Longest `initial_comment` pincer sends (Slack's message text guidance).
pub const SLACK_MAX_COMMENT_CHARS: usize = 4_000;
/// How long the byte upload may take.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// A form-encoded value (RFC 3986 unreserved characters kept).
fn form_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

impl SlackWeb {
    /// The three steps; returns the shared file's id.
    pub async fn upload_file(
        &self,
        channel_id: &str,
        thread_ts: Option<&str>,
        upload: &Upload<'_>,
    ) -> Result<String, SendError> {
        let form = format!(
            "filename={}&length={}",
            form_value(upload.file_name),
            upload.bytes
        );
        let request = self
            .http
            .post(self.method_url("files.getUploadURLExternal"))
            .timeout(Duration::from_millis(super::web::WEB_API_TIMEOUT_MS))
            .header(reqwest::header::AUTHORIZATION, &self.bot_auth)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(form);
        let granted = self.answer(request).await?;
        let field = |key: &str| granted.get(key).and_then(Value::as_str).map(str::to_string);
        let (Some(url), Some(file_id)) = (field("upload_url"), field("file_id")) else {
            return Err(SendError::Transient(
                "files.getUploadURLExternal without upload_url or file_id".into(),
            ));
        };
        let body = Multipart::new()
            .file("file", upload.file_name, upload.mime, upload.path)
            .map_err(|e| {
                SendError::Permanent(format!("{} cannot be read: {e}", upload.file_name))
            })?;
        let response = body
            .attach(self.http.post(&url).timeout(UPLOAD_TIMEOUT))
            .send()
            .await
            .map_err(|e| SendError::Transient(format!("upload: {}", e.without_url())))?;
        let status = response.status();
        if !status.is_success() {
            let message = format!("the upload URL answered HTTP {}", status.as_u16());
            return Err(if status.is_server_error() {
                SendError::Transient(message)
            } else {
                SendError::Permanent(message)
            });
        }
        let mut complete = json!({
            "files": [{"id": file_id, "title": upload.file_name}],
            "channel_id": channel_id,
        });
        if let Some(ts) = thread_ts {
            complete["thread_ts"] = json!(ts);
        }
        if let Some(comment) = upload.caption.filter(|c| !c.trim().is_empty()) {
            complete["initial_comment"] = json!(super::mrkdwn::markdown_to_mrkdwn(comment));
        }
        self.call(
            &self.bot_auth,
            "files.completeUploadExternal",
            Some(complete),
        )
        .await?;
        Ok(file_id)
    }
}

impl SendMedia for SlackChannel {
    fn max_upload_bytes(&self, _kind: UploadKind) -> u64 {
        SLACK_MAX_FILE_BYTES
    }

    fn max_caption_chars(&self) -> usize {
        SLACK_MAX_COMMENT_CHARS
    }

    fn send_media<'a>(
        &'a self,
        target: &'a OutboundTarget,
        upload: Upload<'a>,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>> {
        Box::pin(async move {
            let (account, web) = self.account(&target.account_id)?;
            // Sharing needs a conversation id: a user's DM is opened first.
            let channel = self.conversation(target, false).await?;
            let thread = target
                .thread_id
                .as_deref()
                .or(target.reply_to_message_id.as_deref())
                .filter(|t| !t.is_empty());
            let file_id = web.upload_file(&channel, thread, &upload).await?;
            account.shared.outbound_now();
            Ok(SentMessage {
                message_id: file_id,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_percent_encoded() {
        assert_eq!(
            form_value("my report (v2).pdf"),
            "my%20report%20%28v2%29.pdf"
        );
        assert_eq!(form_value("a&b=c"), "a%26b%3Dc");
    }
}
