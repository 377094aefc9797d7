//! The Bot API's JSON shapes that pincer reads: the response envelope
//! (`{"ok":…,"result":…}` or `error_code` + `description` + `parameters`),
//! updates, messages, chats, users, entities, media and files.
//!
//! Only fields pincer uses are declared; unknown ones are ignored, so new
//! Bot API versions never break parsing. This file must not hold behaviour.

use serde::Deserialize;

/// Every Bot API answer.
#[derive(Debug, Deserialize)]
pub struct Envelope<T> {
    pub ok: bool,
    pub result: Option<T>,
    pub error_code: Option<i64>,
    pub description: Option<String>,
    pub parameters: Option<ResponseParameters>,
}

/// Why a request failed, in machine-readable form.
#[derive(Debug, Default, Deserialize)]
pub struct ResponseParameters {
    /// Seconds to wait before repeating (flood control).
    pub retry_after: Option<u64>,
    /// The group became a supergroup with this id.
    pub migrate_to_chat_id: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Update {
    pub update_id: i64,
    pub message: Option<Message>,
    pub edited_message: Option<Message>,
    pub channel_post: Option<Message>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct User {
    pub id: i64,
    #[serde(default)]
    pub is_bot: bool,
    #[serde(default)]
    pub first_name: String,
    pub last_name: Option<String>,
    pub username: Option<String>,
}

impl User {
    /// "First Last", else "@username", else the id.
    pub fn display_name(&self) -> String {
        let full = match &self.last_name {
            Some(last) if !last.trim().is_empty() => format!("{} {}", self.first_name, last),
            _ => self.first_name.clone(),
        };
        let full = full.trim();
        if !full.is_empty() {
            return full.to_string();
        }
        match &self.username {
            Some(username) => format!("@{username}"),
            None => self.id.to_string(),
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Chat {
    pub id: i64,
    /// private | group | supergroup | channel
    #[serde(rename = "type")]
    pub kind: String,
    pub title: Option<String>,
    pub username: Option<String>,
    #[serde(default)]
    pub is_forum: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct MessageEntity {
    #[serde(rename = "type")]
    pub kind: String,
    /// In UTF-16 code units.
    pub offset: usize,
    /// In UTF-16 code units.
    pub length: usize,
    pub user: Option<User>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct PhotoSize {
    pub file_id: String,
    #[serde(default)]
    pub width: u32,
    #[serde(default)]
    pub height: u32,
    pub file_size: Option<u64>,
}

/// Documents, voice notes, audio, video and animations share these fields.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct FileRef {
    pub file_id: String,
    pub file_name: Option<String>,
    pub mime_type: Option<String>,
    pub file_size: Option<u64>,
}

/// The part of a message a reply quotes.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TextQuote {
    pub text: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct Message {
    pub message_id: i64,
    pub message_thread_id: Option<i64>,
    pub from: Option<User>,
    pub sender_chat: Option<Chat>,
    /// Unix seconds.
    #[serde(default)]
    pub date: i64,
    pub chat: Chat,
    #[serde(default)]
    pub is_topic_message: bool,
    pub reply_to_message: Option<Box<Message>>,
    pub quote: Option<TextQuote>,
    pub text: Option<String>,
    #[serde(default)]
    pub entities: Vec<MessageEntity>,
    pub caption: Option<String>,
    #[serde(default)]
    pub caption_entities: Vec<MessageEntity>,
    #[serde(default)]
    pub photo: Vec<PhotoSize>,
    pub document: Option<FileRef>,
    pub voice: Option<FileRef>,
    pub audio: Option<FileRef>,
    pub video: Option<FileRef>,
    pub video_note: Option<FileRef>,
    pub animation: Option<FileRef>,
    pub sticker: Option<FileRef>,
    /// Present on the service message that opened a forum topic.
    pub forum_topic_created: Option<serde_json::Value>,
}

/// `getFile`'s answer.
#[derive(Debug, Clone, Deserialize)]
pub struct File {
    pub file_id: String,
    pub file_size: Option<u64>,
    pub file_path: Option<String>,
}
