//! The `message` tool (upstream's messaging tool, minimal subset): action
//! `send` with `channel`, `target`, `message`, and optional `accountId`,
//! `threadId`, attachments (`media`, as upstream also read from `mediaUrl`,
//! `path`, `filePath`, `fileUrl`; and `mediaUrls`) and `asVoice`, delivered through the gateway's chat channel adapters. The
//! gateway provides the delivery as a [`Messenger`] in `ToolServices`; without
//! one (no gateway, e.g. a bare turn) the tool says messaging is unavailable.
//!
//! This file validates arguments and reports; it must not know a platform.

use futures_util::future::BoxFuture;

use serde_json::{json, Value};

use super::{arg_str, Tool, ToolContext, ToolError, ToolFuture, ToolOutput};

/// Actions this tool implements (upstream has many more).
pub const MESSAGE_ACTIONS: &[&str] = &["send"];

/// One message the agent asked to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRequest {
    /// `None`: the only running channel.
    pub channel: Option<String>,
    pub account_id: Option<String>,
    pub target: String,
    pub thread_id: Option<String>,
    /// May be empty when there are attachments.
    pub text: String,
    /// Files to send: paths in the workspace or `https` URLs.
    pub media_urls: Vec<String>,
    /// Audio goes as a voice note.
    pub as_voice: bool,
}

/// What the platform accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageReceipt {
    pub channel: String,
    pub message_id: String,
    pub to: String,
}

/// Why a message was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("the gateway is stopping")]
    ShuttingDown,
    /// The request cannot be sent as it is (internal channel, no text, no target).
    #[error("{0}")]
    Invalid(String),
    /// The channel it names is not running (or none is, or several are).
    #[error("{0}")]
    ChannelUnavailable(String),
    /// The platform did not take it; the channel's last error.
    #[error("{0}")]
    NotDelivered(String),
}

/// A boxed delivery future.
pub type MessengerFuture<'a> = BoxFuture<'a, Result<MessageReceipt, MessageError>>;

/// Outbound delivery for agent-originated messages.
pub trait Messenger: Send + Sync {
    /// Sends `request` on behalf of the run in `session_key`.
    fn send<'a>(&'a self, request: MessageRequest, session_key: &'a str) -> MessengerFuture<'a>;
}

fn opt_arg(args: &Value, name: &str) -> Result<Option<String>, ToolError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(_) => Err(ToolError::InvalidArguments(format!(
            "{name} must be a string"
        ))),
    }
}

/// Reads the arguments of action `send`.
pub fn parse_send(args: &Value) -> Result<MessageRequest, ToolError> {
    let action = arg_str(args, "action")?;
    if !MESSAGE_ACTIONS.contains(&action) {
        return Err(ToolError::InvalidArguments(format!(
            "action {action:?} is not supported; supported: {}",
            MESSAGE_ACTIONS.join(", ")
        )));
    }
    let target = opt_arg(args, "target")?
        .or(opt_arg(args, "to")?)
        .ok_or_else(|| ToolError::InvalidArguments("target (string) is required".into()))?;
    let mut media_urls = Vec::new();
    for key in ["media", "mediaUrl", "path", "filePath", "fileUrl"] {
        if let Some(source) = opt_arg(args, key)? {
            media_urls.push(source);
            break;
        }
    }
    match args.get("mediaUrls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                let source = item.as_str().ok_or_else(|| {
                    ToolError::InvalidArguments("mediaUrls must be an array of strings".into())
                })?;
                if !source.trim().is_empty() && !media_urls.iter().any(|m| m == source.trim()) {
                    media_urls.push(source.trim().to_string());
                }
            }
        }
        Some(_) => {
            return Err(ToolError::InvalidArguments(
                "mediaUrls must be an array of strings".into(),
            ))
        }
    }
    let text = opt_arg(args, "message")?.unwrap_or_default();
    if text.is_empty() && media_urls.is_empty() {
        return Err(ToolError::InvalidArguments(
            "message (string) is required unless media is given".into(),
        ));
    }
    let as_voice = match args.get("asVoice") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(value)) => *value,
        Some(_) => {
            return Err(ToolError::InvalidArguments(
                "asVoice must be a boolean".into(),
            ))
        }
    };
    Ok(MessageRequest {
        channel: opt_arg(args, "channel")?,
        account_id: opt_arg(args, "accountId")?,
        target,
        thread_id: opt_arg(args, "threadId")?,
        text,
        media_urls,
        as_voice,
    })
}

pub struct MessageTool;

impl Tool for MessageTool {
    fn name(&self) -> &'static str {
        "message"
    }

    fn description(&self) -> &'static str {
        "Send a message to a chat channel (action \"send\": channel, target chat/user id, message; media: a file path in the workspace or an https URL to attach; asVoice: send audio as a voice note)."
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "action": {"type": "string", "enum": MESSAGE_ACTIONS},
            "channel": {"type": "string", "description": "Channel id (telegram, discord, slack); omit for the only one."},
            "target": {"type": "string", "description": "Target chat/channel/user id."},
            "accountId": {"type": "string"},
            "threadId": {"type": "string"},
            "message": {"type": "string"},
            "media": {"type": "string", "description": "A file to attach: a path in the workspace or an https URL."},
            "mediaUrls": {"type": "array", "items": {"type": "string"}, "description": "More files to attach."},
            "asVoice": {"type": "boolean", "description": "Send audio as a voice note."},
        }, "required": ["action", "target"]})
    }

    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let request = parse_send(&args)?;
            let Some(messenger) = &ctx.services.messenger else {
                return Err(ToolError::Failed(
                    "messaging is not available in this run (no gateway channels)".into(),
                ));
            };
            let receipt = tokio::select! {
                sent = messenger.send(request, &ctx.session_key) => {
                    sent.map_err(|e| ToolError::Failed(e.to_string()))?
                }
                _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            };
            let details = json!({"ok": true, "channel": receipt.channel,
                                 "messageId": receipt.message_id, "to": receipt.to});
            Ok(ToolOutput {
                text: details.to_string(),
                details: Some(details),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_arguments_are_checked() {
        let ok = parse_send(
            &json!({"action": "send", "channel": "telegram", "target": 42, "message": "hi"}),
        )
        .expect("valid");
        assert_eq!(ok.target, "42");
        assert_eq!(ok.channel.as_deref(), Some("telegram"));
        let err = parse_send(&json!({"action": "react", "target": "1", "message": "x"}))
            .expect_err("unsupported action");
        assert!(err.to_string().contains("not supported"), "{err}");
        let err = parse_send(&json!({"action": "send", "message": "x"})).expect_err("no target");
        assert!(err.to_string().contains("target"), "{err}");
    }

    #[test]
    fn media_arguments_follow_upstreams_names() {
        let request = parse_send(&json!({"action": "send", "target": "7",
            "filePath": "./chart.png", "mediaUrls": ["https://example.com/a.jpg", "./chart.png"],
            "asVoice": true}))
        .expect("media without text");
        assert_eq!(request.text, "");
        assert_eq!(
            request.media_urls,
            vec!["./chart.png", "https://example.com/a.jpg"]
        );
        assert!(request.as_voice);
        let err = parse_send(&json!({"action": "send", "target": "7"})).expect_err("nothing");
        assert!(err.to_string().contains("unless media"), "{err}");
        let err = parse_send(&json!({"action": "send", "target": "7", "mediaUrls": "x"}))
            .expect_err("not an array");
        assert!(err.to_string().contains("mediaUrls"), "{err}");
    }
}
