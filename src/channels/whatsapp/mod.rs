//! The WhatsApp channel (cargo feature `whatsapp`): the multi-device Web
//! protocol through the `whatsapp-rust` crate, as upstream's Baileys-based
//! channel. pincer supplies the crate's ports — the socket
//! (`transport.rs`, pincer's WebSocket client), the storage (`backend.rs`,
//! sealed LMDB records) and HTTP (`http.rs`, pincer's reqwest client) — and
//! runs one linked device per account (`session.rs`): linking by QR code,
//! reconnecting (the crate's Fibonacci backoff, up to 15 minutes), logged-out
//! detection, and the status the rest of pincer reports.
//!
//! Not yet here (issue 17): the `Channel` adapter over a session (inbound
//! through the one message path, DM policy and group mention gating,
//! `channels.whatsapp` config keys, `pincer channels login whatsapp`, the
//! `web.login.*` gateway methods). Until then `channels.whatsapp` stays
//! refused as an unsupported key.

pub mod backend;
pub mod channel;
pub mod http;
pub mod session;
pub mod transport;

pub use backend::SealedBackend;
pub use channel::WhatsAppChannel;
pub use session::{
    InboundText, LinkState, LinkStatus, SessionError, SessionOptions, WhatsAppSession,
};
pub use transport::{WsTransportFactory, WHATSAPP_WS_URL};
