//! Media files pincer handles for the chat channels and the agent: the media
//! area in the data directory (inbound downloads, prepared copies for a model,
//! outbound files), what a file is (sniffing), images prepared for a vision
//! model within a pixel and byte budget, text pulled out of documents (PDF and
//! plain text, bounded), Ogg voice notes checked without decoding them, speech
//! encoded to Ogg/Opus voice notes (`voice_encode`), QR codes drawn for
//! linking a device (`qr`, with the `whatsapp` feature), and the
//! two OpenAI-compatible audio endpoints (`/audio/transcriptions`,
//! `/audio/speech`) with request bodies streamed from and responses streamed to
//! files.
//!
//! Every step reads and writes files with fixed-size buffers: a file is never
//! held in memory whole, and every decoder's working memory is bounded by
//! [`MediaBudget`] (from the board profile) before it starts. This module knows
//! no chat platform and no provider beyond the OpenAI-compatible audio wire.

pub mod area;
pub mod audio;
pub mod budget;
pub mod document;
pub mod image;
pub mod multipart;
pub mod ogg;
pub mod outbound;
pub mod pdf;
#[cfg(feature = "whatsapp")]
pub mod qr;
pub mod sniff;
pub mod voice_encode;

pub use area::MediaArea;
pub use budget::MediaBudget;
pub use sniff::{mime_from_extension, sniff_mime, FileKind};
