//! The WhatsApp channel (cargo feature `whatsapp`): the multi-device Web
//! protocol through the `whatsapp-rust` crate, as upstream's Baileys-based
//! channel. pincer supplies the crate's ports — the socket
//! (`transport.rs`, pincer's WebSocket client), the storage (`backend.rs`,
//! sealed LMDB records) and HTTP (`http.rs`, pincer's reqwest client) — and
//! runs one linked device per account (`session.rs`): linking by QR code,
//! reconnecting (the crate's Fibonacci backoff, up to 15 minutes), logged-out
//! detection, and the status the rest of pincer reports.
//!
//! `channel.rs` is the `Channel` adapter over the sessions: direct messages,
//! "message yourself" (`selfChatMode`) and group messages through the one
//! message path — groups gated there by `groupPolicy`/`groupAllowFrom`, the
//! `groups` allowlist and mentions (`mentionedJid` naming the linked number
//! or LID, a reply to the bot, the number in the text, `mentionPatterns`),
//! replies to the group sent with the crate's sender keys — read receipts
//! (`sendReadReceipts`), and link state in the account status. `login.rs` is
//! its `QrLogin` capability: the account's QR code as a PNG data URL for
//! `web.login.start` / `web.login.wait` (the Control UI, `pincer channels
//! login whatsapp`), and relinking (the account's device stopped, deleted
//! from its sealed records and started afresh) on `force` or after a logout.
//! `media.rs` moves attachments both ways through the crate's media code:
//! received ones downloaded and decrypted into the media area within
//! `agents.defaults.mediaMaxMb` (the MAC checked by the crate, the plaintext
//! hash and size by pincer), sent ones encrypted and uploaded as streams and
//! sent as image, video, audio, voice note (`ptt`) or document messages.
//!
//! Test hooks (environment, each logged as a warning when set; upstream has
//! no such keys): `PINCER_WHATSAPP_WS_URL` (the chat socket),
//! `PINCER_WHATSAPP_VERSION` (the Web version announced) and
//! `PINCER_WHATSAPP_MEDIA_URL` (media requests to `https://<media host>/…`
//! go to this base URL instead).

pub mod backend;
pub mod channel;
pub mod http;
pub mod login;
pub mod media;
pub mod session;
pub mod transport;

pub use backend::SealedBackend;
pub use channel::WhatsAppChannel;
pub use media::{InboundMedia, OutboundMedia};
pub use session::{
    InboundText, LinkState, LinkStatus, SessionError, SessionOptions, WhatsAppSession,
};
pub use transport::{WsTransportFactory, WHATSAPP_WS_URL};
