//! The channel adapter design: what every chat platform adapter provides
//! (account lifecycle, status, sending text) and the optional capabilities
//! only some platforms have (typing, editing for streaming previews,
//! deleting, reactions, read receipts). The message path asks an adapter for a capability
//! and never matches on platform names.
//!
//! Adapters translate platform events into `pipeline::context::InboundMessage`
//! plus a `RouteInput` and hand them to an `InboundSink`; everything after
//! that (dedupe, access policy, routing, queueing, the run, reply shaping)
//! is channel-agnostic and must not live in an adapter.
//!
//! The message path itself: `registry` (adapters by id), `hub` (the
//! production `InboundSink`: pipeline → command queue), `turns` (the queue's
//! turn runner: a gateway run per turn), `stream` (a run's replies through
//! the reply layer, previews by editing), `outbound` (limits and retries),
//! `commands` (chat commands), `settings` (per-account config), `typing`,
//! `qr_login` (the capability of accounts linked by scanning a QR code).
//! Shared by the adapters that hold a connection open (Discord, Slack):
//! `account` (account state, task set, reconnect backoff) and `ws` (the
//! outbound WebSocket client).

pub mod account;
pub mod commands;
pub mod deliver;
pub mod discord;
pub mod group_scope;
pub mod http_routes;
pub mod hub;
pub mod inbox;
#[cfg(feature = "matrix")]
pub mod matrix;
pub mod media;
pub mod media_out;
pub mod outbound;
pub mod qr_login;
pub mod registry;
pub mod settings;
#[cfg(feature = "signal")]
pub mod signal;
pub mod slack;
pub mod speech;
pub mod stream;
pub mod telegram;
pub mod turns;
pub mod typing;
#[cfg(feature = "whatsapp")]
pub mod whatsapp;
pub mod ws;

use std::sync::Arc;

pub use crate::config::schema::common::ChunkMode;
use crate::pipeline::context::InboundMessage;
use crate::routing::RouteInput;
pub use qr_login::{
    QrLoggedOut, QrLogin, QrLoginError, QrLoginStart, QrLoginStarted, QrLoginWait, QrLoginWaited,
};

/// A boxed future that can cross threads (adapters are `dyn`).
pub use futures_util::future::BoxFuture;

/// Where an outbound message goes, in the platform's own identifiers.
/// Replies to an inbound message go to its `conversation_id` (adapters set
/// it to the chat / channel id replies must be sent to), else to the routing
/// peer's id, in the message's `thread_id` (see `InboundEvent::reply_target`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboundTarget {
    pub account_id: String,
    /// Chat / channel / conversation id on the platform.
    pub to: String,
    /// Forum topic, Slack `thread_ts`, Discord thread channel.
    pub thread_id: Option<String>,
    /// Message this one answers, when the platform threads replies.
    pub reply_to_message_id: Option<String>,
}

/// How the text of an outbound message is meant to be read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TextFormat {
    /// Markdown from the model: the adapter converts it to the platform's
    /// markup and falls back to plain text when the platform rejects it.
    #[default]
    Markdown,
    Plain,
}

/// A message the platform accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentMessage {
    pub message_id: String,
}

/// Why a send failed, classified for the retry policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The platform asked us to wait (`retry_after`, HTTP 429).
    #[error("rate limited; retry after {retry_after_ms} ms")]
    RateLimited { retry_after_ms: u64 },
    /// Network failure or server error: worth retrying.
    #[error("temporary failure: {0}")]
    Transient(String),
    /// The platform refused the request for good (bad chat id, no rights).
    #[error("refused: {0}")]
    Permanent(String),
    /// The adapter has no such account or the account is not running.
    #[error("no running account {0}")]
    NoAccount(String),
}

/// Per-platform outbound limits the reply layer must respect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextLimits {
    /// Longest text per message, in characters.
    pub max_chars: usize,
    /// Most lines per message (Discord's 17), when the platform has such a limit.
    pub max_lines: Option<usize>,
    /// Where the text is split (an account's `chunkMode`; adapters say `Length`).
    pub chunk_mode: ChunkMode,
}

/// One account's state as `channels.status` and `health` report it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccountStatus {
    pub account_id: String,
    /// The account's `enabled` setting (default true).
    pub enabled: bool,
    pub configured: bool,
    /// The account's connection task is alive (it may be reconnecting).
    pub running: bool,
    pub connected: bool,
    pub last_error: Option<String>,
    pub last_inbound_at_ms: Option<u64>,
    pub last_outbound_at_ms: Option<u64>,
    /// The account's `name` (a label), when configured.
    pub name: Option<String>,
    /// Who the account is signed in as (a Matrix user id, a phone number).
    pub identity: Option<String>,
    /// The server the account talks to (a homeserver, a daemon's URL).
    pub base_url: Option<String>,
    /// Why the account is in its state, beyond `last_error` (an encrypted
    /// room refused, a link waiting for its QR code).
    pub state_reason: Option<String>,
    /// Failed connection attempts since the last success.
    pub reconnect_attempts: Option<u32>,
    /// A device linked to a phone (WhatsApp); `None` where linking does not apply.
    pub linked: Option<bool>,
    /// When the account last became connected (ms since the epoch).
    pub last_connected_at_ms: Option<u64>,
}

/// One inbound platform event, translated.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct InboundEvent {
    pub channel: String,
    pub account_id: String,
    pub message: InboundMessage,
    pub route: RouteInput,
    /// The bot was @-mentioned or the message replies to the bot.
    pub bot_mentioned: bool,
    /// The bot's username on this account, for `/cmd@BotName` stripping.
    pub bot_username: Option<String>,
}

impl InboundEvent {
    /// Where a reply to this event goes: the conversation id the adapter set
    /// (`conversation_id`), else the routing peer, else `to`; the same
    /// thread. Quoting the message answered is `replyToMode`'s decision
    /// (the hub's), so the target quotes nothing.
    pub fn reply_target(&self) -> OutboundTarget {
        let message = &self.message;
        let to = message
            .conversation_id
            .clone()
            .or_else(|| self.route.peer.as_ref().map(|p| p.id.clone()))
            .unwrap_or_else(|| message.to.clone());
        OutboundTarget {
            account_id: self.account_id.clone(),
            to,
            thread_id: message.thread_id.clone(),
            reply_to_message_id: None,
        }
    }
}

/// Why the message path did not accept an inbound event: the adapter must
/// not advance its cursor, the platform delivers the event again.
#[derive(Debug, thiserror::Error)]
pub enum InboundError {
    /// The durable inbox could not keep it.
    #[error(transparent)]
    Inbox(#[from] inbox::InboxError),
    #[error("no adapter registered for {0}")]
    NoAdapter(String),
    #[error("inbound pipeline task failed: {0}")]
    PipelineTask(tokio::task::JoinError),
    #[error(transparent)]
    Pipeline(#[from] crate::pipeline::PipelineError),
}

/// Where adapters deliver inbound events. Returning means the event is
/// durably accepted (or deliberately ignored): an adapter may then advance
/// its platform cursor (Telegram's update offset, Discord's sequence).
pub trait InboundSink: Send + Sync {
    fn deliver(&self, event: InboundEvent) -> BoxFuture<'_, Result<(), InboundError>>;
}

/// Typing indicator ("bot is typing…").
pub trait Typing: Send + Sync {
    fn send_typing<'a>(
        &'a self,
        target: &'a OutboundTarget,
    ) -> BoxFuture<'a, Result<(), SendError>>;
}

/// Editing a sent message: streaming previews.
pub trait EditMessage: Send + Sync {
    fn edit_text<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
        text: &'a str,
        format: TextFormat,
    ) -> BoxFuture<'a, Result<(), SendError>>;
}

/// Deleting a sent message.
pub trait DeleteMessage: Send + Sync {
    fn delete<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>>;
}

/// Reactions on a message (the ack reaction).
pub trait React: Send + Sync {
    fn react<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
        emoji: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>>;
}

/// How a file is sent: the platform call that shows it best.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadKind {
    /// Shown inline, compressed by the platform (Telegram `sendPhoto`).
    Photo,
    Video,
    /// A music/audio file with a player (Telegram `sendAudio`).
    Audio,
    /// A push-to-talk voice note: Ogg/Opus (Telegram `sendVoice`).
    Voice,
    /// Any file, sent as it is.
    Document,
}

impl UploadKind {
    /// The word used in messages to the user.
    pub fn noun(self) -> &'static str {
        match self {
            UploadKind::Photo => "photo",
            UploadKind::Video => "video",
            UploadKind::Audio => "audio file",
            UploadKind::Voice => "voice note",
            UploadKind::Document => "file",
        }
    }
}

/// One file to upload, streamed from disk by the adapter.
#[derive(Debug, Clone, Copy)]
pub struct Upload<'a> {
    pub path: &'a std::path::Path,
    /// The name the platform shows.
    pub file_name: &'a str,
    pub mime: &'a str,
    pub kind: UploadKind,
    /// Text shown with the file (markdown), within `max_caption_chars`.
    pub caption: Option<&'a str>,
    pub bytes: u64,
}

/// Sending files (photos, documents, voice notes).
pub trait SendMedia: Send + Sync {
    /// The largest file the platform takes as `kind`, in bytes.
    fn max_upload_bytes(&self, kind: UploadKind) -> u64;
    /// The longest caption, in characters.
    fn max_caption_chars(&self) -> usize;
    /// Uploads one file (within `max_upload_bytes`).
    fn send_media<'a>(
        &'a self,
        target: &'a OutboundTarget,
        upload: Upload<'a>,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>>;
}

/// Read receipts: the sender is told a message it sent was read (Signal's
/// and WhatsApp's `sendReadReceipts`), for messages the message path
/// admitted; `sender_id` is who wrote it (the member, in a group).
pub trait MarkRead: Send + Sync {
    fn mark_read<'a>(
        &'a self,
        target: &'a OutboundTarget,
        message_id: &'a str,
        sender_id: &'a str,
    ) -> BoxFuture<'a, Result<(), SendError>>;
}

/// An account an adapter could not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccountStartError {
    /// Its webhook path cannot be served on the gateway's HTTP server.
    #[error("{channel} account {account_id}: webhookPath: {error}")]
    Route {
        channel: &'static str,
        account_id: String,
        error: http_routes::RouteError,
    },
    #[error("{channel} account {account_id}: HTTP events mode needs the gateway's HTTP server")]
    NoHttpServer {
        channel: &'static str,
        account_id: String,
    },
}

/// The accounts an adapter could not start; its other accounts run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", refused.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct StartError {
    pub refused: Vec<AccountStartError>,
}

/// A chat platform adapter: one value serves all accounts of its channel.
pub trait Channel: Send + Sync {
    /// The channel id as config and session keys spell it (`telegram`).
    fn id(&self) -> &'static str;

    /// Outbound limits of the platform.
    fn text_limits(&self) -> TextLimits;

    /// Starts every configured, enabled account; events go to `sink`.
    fn start(&self, sink: Arc<dyn InboundSink>) -> BoxFuture<'_, Result<(), StartError>>;

    /// Stops every account and waits for their tasks to end.
    fn stop(&self) -> BoxFuture<'_, ()>;

    /// Each account's state.
    fn status(&self) -> Vec<AccountStatus>;

    /// Sends one message (already within `text_limits`).
    fn send_text<'a>(
        &'a self,
        target: &'a OutboundTarget,
        text: &'a str,
        format: TextFormat,
    ) -> BoxFuture<'a, Result<SentMessage, SendError>>;

    fn typing(&self) -> Option<&dyn Typing> {
        None
    }
    fn edit(&self) -> Option<&dyn EditMessage> {
        None
    }
    fn delete(&self) -> Option<&dyn DeleteMessage> {
        None
    }
    fn reactions(&self) -> Option<&dyn React> {
        None
    }
    fn media(&self) -> Option<&dyn SendMedia> {
        None
    }
    /// Read receipts for admitted messages, where the account sends them.
    fn read_receipts(&self, _account_id: &str) -> Option<&dyn MarkRead> {
        None
    }
    /// Linking accounts by QR code (`web.login.*`), where the platform links that way.
    fn qr_login(&self) -> Option<&dyn QrLogin> {
        None
    }
}
