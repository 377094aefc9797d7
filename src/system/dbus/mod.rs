//! A minimal D-Bus client: what pincer needs to drive RAUC on the system bus, and no more.
//! Unix-socket transport, SASL `EXTERNAL`, method calls with the types of the specification
//! but unix fds, errors with their name and text, properties, match rules and signals.
//!
//! Bounded: a message over [`MAX_MESSAGE_BYTES`] is refused from its header, before it is
//! read; at most [`MAX_QUEUED_SIGNALS`] signals wait unread. Malformed input is a
//! [`DbusError::Malformed`] naming the fault, never a panic. No objects are exported: a call
//! addressed to pincer is answered `UnknownMethod`.
//!
//! Files: `signature.rs` (type signatures), `value.rs` (values, marshalling), `message.rs`
//! (headers, framing), `connection.rs` (the socket, authentication, calls and signals).

mod connection;
mod message;
mod signature;
mod value;

pub use connection::{
    socket_paths, system_bus_address, Connection, CALL_TIMEOUT, DEFAULT_SYSTEM_BUS,
    MAX_QUEUED_SIGNALS,
};
pub use message::{frame_length, Kind, Message, MAX_MESSAGE_BYTES};
pub use signature::{parse as parse_signature, Type};
pub use value::{decode_body, encode_body, Value};

use std::path::PathBuf;

/// Bytes that are not valid D-Bus wire data, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct WireError(String);

impl WireError {
    pub fn new(why: impl Into<String>) -> WireError {
        WireError(why.into())
    }
}

/// What went wrong talking to a bus.
#[derive(Debug, thiserror::Error)]
pub enum DbusError {
    #[error("bad D-Bus address: {0}")]
    Address(String),
    #[error("cannot connect to the D-Bus socket {}: {source}", path.display())]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("D-Bus authentication failed: {0}")]
    Auth(String),
    #[error("D-Bus I/O error: {0}")]
    Io(std::io::Error),
    #[error("malformed D-Bus message: {0}")]
    Malformed(WireError),
    #[error("cannot encode D-Bus message: {0}")]
    Encode(WireError),
    /// An error reply: its name and text.
    #[error("{name}: {message}")]
    Remote { name: String, message: String },
    #[error("no reply to {method} within {secs} s")]
    Timeout { method: String, secs: u64 },
    #[error("D-Bus connection closed: {0}")]
    Closed(String),
    #[error("unexpected D-Bus reply: {0}")]
    UnexpectedReply(String),
}

impl DbusError {
    /// The error name of a remote error reply.
    pub fn remote_name(&self) -> Option<&str> {
        match self {
            DbusError::Remote { name, .. } => Some(name),
            _ => None,
        }
    }
}
