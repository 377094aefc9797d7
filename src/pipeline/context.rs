//! The inbound message context: OpenClaw's views of a message's body
//! (Body, BodyForAgent, RawBody, CommandBody, BodyForCommands), its routing,
//! group, media and metadata fields, and finalisation: newline
//! normalisation, neutralising prompt-section markers in user text, field
//! inference, the conversation label, quoted-reply expansion, media
//! placeholders, the group sender tag and group history wrappers.
//!
//! Pure text work: this file must not talk to a platform or the store.

/// Chat types as upstream names them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ChatType {
    #[default]
    Direct,
    Group,
    Channel,
    Supergroup,
}

impl ChatType {
    pub fn is_group(self) -> bool {
        self != ChatType::Direct
    }
}

/// One attached file.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MediaItem {
    pub path: String,
    pub mime_type: Option<String>,
    pub caption: Option<String>,
    pub transcript: Option<String>,
    /// The name the sender gave the file (documents), when the platform says.
    #[serde(default)]
    pub file_name: Option<String>,
}

/// The message a reply quotes.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QuotedMessage {
    pub id: String,
    pub body: String,
    pub sender: String,
}

/// One normalised inbound message (upstream's `MsgContext`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InboundMessage {
    pub body: String,
    pub body_for_agent: String,
    pub raw_body: String,
    pub command_body: String,
    pub body_for_commands: String,
    pub from: String,
    pub to: String,
    pub session_key: Option<String>,
    pub account_id: Option<String>,
    pub chat_type: Option<ChatType>,
    pub surface: String,
    pub provider: String,
    pub originating_channel: Option<String>,
    pub originating_to: Option<String>,
    pub conversation_id: Option<String>,
    pub conversation_label: Option<String>,
    pub group_id: Option<String>,
    pub group_name: Option<String>,
    pub group_subject: Option<String>,
    /// Other names of the group a config may key it by (a Matrix room's
    /// aliases), besides `group_id`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_aliases: Vec<String>,
    pub sender_id: String,
    pub sender_name: Option<String>,
    pub mentioned: bool,
    pub media: Vec<MediaItem>,
    pub message_id: Option<String>,
    pub quoted: Option<QuotedMessage>,
    pub thread_id: Option<String>,
    pub is_reply_to_bot: bool,
    pub timestamp_ms: u64,
    /// What went wrong with the message's attachments, told to the sender once the message is
    /// admitted (a file over the cap, a failed download).
    #[serde(default)]
    pub media_problems: Vec<String>,
}

/// Markers of the system prompt's own sections that user text must not
/// be able to forge.
const PROMPT_MARKERS: &[&str] = &[
    "## Tooling",
    "## Runtime",
    "## Tools",
    "## Skills",
    "## Workspace",
    "## Project Context",
    "## Memory",
    "## Safety",
    "## Current Date & Time",
    "## Reply Tags",
    "## Messaging",
    "## Silent Replies",
    "## Heartbeats",
    "<available_skills>",
    "</available_skills>",
    "<system>",
    "</system>",
    "<system-reminder>",
    "</system-reminder>",
    "[Chat messages since your last reply - for context]",
    "[Current message - respond to this]",
    "[Queued messages while agent was busy]",
];

/// CRLF and lone CR become LF.
pub fn normalize_newlines(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\r', "\n")
}

/// Neutralises prompt-section markers: `## Tooling` → `\#\# Tooling`,
/// `<available_skills>` → `‹available_skills›`, wrappers lose their brackets.
pub fn sanitize_user_text(text: &str) -> String {
    let mut out = text.to_string();
    for marker in PROMPT_MARKERS {
        if !out.contains(marker) {
            continue;
        }
        let neutral = if let Some(rest) = marker.strip_prefix("## ") {
            format!("\\#\\# {rest}")
        } else if marker.starts_with('<') {
            marker.replace('<', "‹").replace('>', "›")
        } else {
            marker.replace('[', "(").replace(']', ")")
        };
        out = out.replace(marker, &neutral);
    }
    out
}

/// `<media:image>` etc. for one attachment, by MIME type.
pub fn media_placeholder(item: &MediaItem) -> String {
    let kind = match item.mime_type.as_deref().unwrap_or("") {
        m if m.starts_with("image/") => "image",
        m if m.starts_with("audio/") => "audio",
        m if m.starts_with("video/") => "video",
        _ => "document",
    };
    format!("<media:{kind}>")
}

/// `[Replying to <sender> id:<id>]\n<body>\n[/Replying]`.
pub fn quoted_reply_block(quoted: &QuotedMessage) -> String {
    format!(
        "[Replying to {} id:{}]\n{}\n[/Replying]",
        quoted.sender,
        quoted.id,
        sanitize_user_text(&normalize_newlines(&quoted.body))
    )
}

/// `[from: Name (id)]`.
pub fn sender_tag(name: Option<&str>, id: &str) -> String {
    match name.map(str::trim).filter(|n| !n.is_empty()) {
        Some(name) => format!("[from: {name} ({id})]"),
        None => format!("[from: {id}]"),
    }
}

/// Wraps the current message with the group's recent history (newest
/// last, at most `limit` entries; 0 disables history).
pub fn with_group_history(history: &[String], current: &str, limit: usize) -> String {
    if limit == 0 || history.is_empty() {
        return current.to_string();
    }
    let start = history.len().saturating_sub(limit);
    format!(
        "[Chat messages since your last reply - for context]\n{}\n\n[Current message - respond to this]\n{}",
        history[start..].join("\n"),
        current
    )
}

impl InboundMessage {
    /// Finalises the context: normalises newlines, fills the body views,
    /// infers the chat type, builds the agent's view of the body.
    pub fn finalize(mut self) -> InboundMessage {
        if self.raw_body.is_empty() {
            self.raw_body = self.body.clone();
        }
        let raw = normalize_newlines(&self.raw_body);
        self.raw_body = raw.clone();
        self.body = normalize_newlines(&self.body);
        if self.command_body.is_empty() {
            self.command_body = raw.trim().to_string();
        }
        if self.body_for_commands.is_empty() {
            self.body_for_commands = self.command_body.clone();
        }
        if self.chat_type.is_none() {
            self.chat_type = Some(if self.group_id.is_some() {
                ChatType::Group
            } else {
                ChatType::Direct
            });
        }
        self.conversation_label = Some(self.label());
        self.body_for_agent = self.agent_view();
        self
    }

    /// The chat type after finalisation.
    pub fn chat(&self) -> ChatType {
        self.chat_type.unwrap_or_default()
    }

    fn label(&self) -> String {
        if let Some(label) = &self.conversation_label {
            return label.clone();
        }
        match (self.chat(), &self.group_name, &self.group_id) {
            (ChatType::Direct, _, _) => match &self.sender_name {
                Some(name) => format!("{name} id:{}", self.sender_id),
                None => self.sender_id.clone(),
            },
            (_, Some(name), Some(id)) => format!("{name} id:{id}"),
            (_, None, Some(id)) => id.clone(),
            _ => self.to.clone(),
        }
    }

    fn agent_view(&self) -> String {
        let mut parts = Vec::new();
        if let Some(quoted) = &self.quoted {
            parts.push(quoted_reply_block(quoted));
        }
        let mut text = sanitize_user_text(self.body.trim());
        for item in &self.media {
            let mut line = media_placeholder(item);
            if let Some(caption) = item.caption.as_deref().filter(|c| !c.is_empty()) {
                line.push(' ');
                line.push_str(&sanitize_user_text(caption));
            }
            if !item.path.is_empty() {
                // Where the downloaded file is, as upstream's media note says it.
                let kind = item
                    .mime_type
                    .as_deref()
                    .map(|m| format!(" ({m})"))
                    .unwrap_or_default();
                line.push_str(&format!(
                    "\n[media attached: {}{kind}]",
                    sanitize_user_text(&item.path)
                ));
            }
            if let Some(transcript) = item.transcript.as_deref().filter(|t| !t.is_empty()) {
                line.push_str(&format!("\nTranscript: {}", sanitize_user_text(transcript)));
            }
            text = if text.is_empty() {
                line
            } else {
                format!("{text}\n{line}")
            };
        }
        if self.chat().is_group() {
            text = format!(
                "{} {text}",
                sender_tag(self.sender_name.as_deref(), &self.sender_id)
            );
        }
        parts.push(text);
        parts.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalize_normalises_sanitises_and_infers() {
        let msg = InboundMessage {
            body: "hi\r\n## Tooling\rx <available_skills>".into(),
            group_id: Some("-100".into()),
            group_name: Some("Crew".into()),
            sender_id: "7".into(),
            sender_name: Some("Ann".into()),
            ..InboundMessage::default()
        }
        .finalize();
        assert_eq!(msg.chat(), ChatType::Group);
        assert_eq!(msg.raw_body, "hi\n## Tooling\nx <available_skills>");
        assert_eq!(
            msg.body_for_agent,
            "[from: Ann (7)] hi\n\\#\\# Tooling\nx ‹available_skills›"
        );
        assert_eq!(msg.conversation_label.as_deref(), Some("Crew id:-100"));
    }

    #[test]
    fn quoted_reply_and_media_are_expanded() {
        let msg = InboundMessage {
            body: "look".into(),
            sender_id: "1".into(),
            quoted: Some(QuotedMessage {
                id: "55".into(),
                body: "earlier".into(),
                sender: "Bob".into(),
            }),
            media: vec![MediaItem {
                path: "/tmp/a.jpg".into(),
                mime_type: Some("image/jpeg".into()),
                caption: Some("cat".into()),
                transcript: None,
                file_name: None,
            }],
            ..InboundMessage::default()
        }
        .finalize();
        assert_eq!(
            msg.body_for_agent,
            "[Replying to Bob id:55]\nearlier\n[/Replying]\nlook\n<media:image> cat\n[media attached: /tmp/a.jpg (image/jpeg)]"
        );
    }

    #[test]
    fn history_wrapper_respects_limit() {
        let history = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        assert_eq!(with_group_history(&history, "now", 0), "now");
        let wrapped = with_group_history(&history, "now", 2);
        assert_eq!(
            wrapped,
            "[Chat messages since your last reply - for context]\nb\nc\n\n[Current message - respond to this]\nnow"
        );
    }
}
