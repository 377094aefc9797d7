//! The typed config tree, one file per section. Every struct denies unknown
//! keys and defaults to OpenClaw's values; JSON keys are upstream's
//! camelCase names. Shapes and defaults only: loading, cross-field
//! validation and reload live beside this folder.

pub mod agents;
pub mod automation;
pub mod bindings;
pub mod channels;
pub mod common;
pub mod cron;
pub mod discord;
pub mod discovery;
pub mod gateway;
pub mod logging;
pub mod matrix;
pub mod media;
pub mod memory;
pub mod messages;
pub mod models;
pub mod sandbox;
pub mod session;
pub mod signal;
pub mod slack;
pub mod telegram;
pub mod tools;
pub mod tts;
pub mod whatsapp;

pub use agents::*;
pub use automation::*;
pub use bindings::*;
pub use channels::{
    ChannelDefaults, ChannelsConfig, StreamingBlock, StreamingConfig, StreamingKeys, StreamingMode,
    StreamingPreview, DEFAULT_ACCOUNT_ID,
};
pub use common::*;
pub use cron::*;
pub use discord::*;
pub use discovery::*;
pub use gateway::*;
pub use logging::*;
pub use matrix::*;
pub use media::*;
pub use memory::*;
pub use messages::*;
pub use models::*;
pub use sandbox::*;
pub use session::*;
pub use signal::*;
pub use slack::*;
pub use telegram::*;
pub use tools::*;
pub use tts::*;
pub use whatsapp::*;
