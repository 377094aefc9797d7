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

pub mod backend;
pub mod channel;
pub mod http;
pub mod login;
pub mod session;
pub mod transport;

pub use backend::SealedBackend;
pub use channel::WhatsAppChannel;
pub use session::{
    InboundText, LinkState, LinkStatus, SessionError, SessionOptions, WhatsAppSession,
};
pub use transport::{WsTransportFactory, WHATSAPP_WS_URL};
