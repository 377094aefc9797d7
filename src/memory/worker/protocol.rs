//! The embedding worker's pipe protocol: length-prefixed frames (a little-endian `u32` byte count, then
//! the payload) on the child's stdin and stdout, every size bounded before anything is allocated.
//!
//! Parent to child: `Hello` (once, first: the protocol version and the settings as JSON), then `Embed`
//! requests (token ids, at most `MAX_INPUTS` inputs of at most `MAX_INPUT_TOKENS` ids). Child to parent:
//! `Ready` (the model's dimension) or `Failed` after `Hello`; `Vectors` or `Failed` after each `Embed`.
//! A frame longer than its limit, a count past its bound or a payload that does not add up is a
//! [`ProtocolError`]: the reader stops there (the worker exits; the gateway ends the worker).
//!
//! This file only encodes and decodes; `mod.rs` (parent) and `serve.rs` (child) use it.

use std::io::{self, Read, Write};

use crate::memory::embedder::EmbedderSettings;

/// Changed whenever a frame's layout changes: a worker of another build refuses the parent.
pub const PROTOCOL_VERSION: u32 = 1;
/// Inputs in one `Embed` request.
pub const MAX_INPUTS: usize = 64;
/// Token ids of one input (BERT-style models stop at 512 positions).
pub const MAX_INPUT_TOKENS: usize = 512;
/// Largest vector dimension a model may report.
pub const MAX_DIMENSIONS: usize = 4096;
/// Largest frame either side reads: a full `Vectors` answer, plus headroom.
pub const MAX_FRAME_BYTES: usize = 16 + MAX_INPUTS * MAX_DIMENSIONS * 4;
/// Largest error text carried.
const MAX_ERROR_BYTES: usize = 4096;

const HELLO: u8 = b'H';
const EMBED: u8 = b'E';
const READY: u8 = b'R';
const VECTORS: u8 = b'V';
const FAILED: u8 = b'X';

/// Why a frame was refused.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("pipe: {0}")]
    Io(#[from] io::Error),
    #[error("a frame of {len} bytes (at most {max})")]
    TooLong { len: usize, max: usize },
    #[error("malformed {what}")]
    Malformed { what: &'static str },
}

/// What the parent sends.
#[derive(Debug, PartialEq)]
pub enum Request {
    Hello {
        version: u32,
        settings: EmbedderSettings,
    },
    Embed(Vec<Vec<u32>>),
}

/// What the worker answers.
#[derive(Debug, PartialEq)]
pub enum Response {
    Ready { dimensions: usize },
    Vectors(Vec<Vec<f32>>),
    Failed(String),
}

/// Writes one frame and flushes it.
pub fn write_frame(out: &mut impl Write, payload: &[u8]) -> Result<(), ProtocolError> {
    if payload.len() > MAX_FRAME_BYTES {
        return Err(ProtocolError::TooLong {
            len: payload.len(),
            max: MAX_FRAME_BYTES,
        });
    }
    out.write_all(&(payload.len() as u32).to_le_bytes())?;
    out.write_all(payload)?;
    out.flush()?;
    Ok(())
}

/// Reads one frame of at most `MAX_FRAME_BYTES`; `None` when the pipe ends before a frame starts.
pub fn read_frame(input: &mut impl Read) -> Result<Option<Vec<u8>>, ProtocolError> {
    let mut len = [0u8; 4];
    let mut filled = 0;
    while filled < 4 {
        match input.read(&mut len[filled..])? {
            0 if filled == 0 => return Ok(None),
            0 => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            n => filled += n,
        }
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(ProtocolError::TooLong {
            len,
            max: MAX_FRAME_BYTES,
        });
    }
    let mut payload = vec![0u8; len];
    input.read_exact(&mut payload)?;
    Ok(Some(payload))
}

/// Reads the little-endian `u32`s of a payload, in order.
struct Cursor<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl Cursor<'_> {
    fn u32(&mut self) -> Result<u32, ProtocolError> {
        let (head, rest) = self
            .bytes
            .split_first_chunk::<4>()
            .ok_or(ProtocolError::Malformed { what: self.what })?;
        self.bytes = rest;
        Ok(u32::from_le_bytes(*head))
    }

    /// A count that must be at most `max`.
    fn count(&mut self, max: usize) -> Result<usize, ProtocolError> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(ProtocolError::Malformed { what: self.what });
        }
        Ok(n)
    }

    fn end(&self) -> Result<(), ProtocolError> {
        match self.bytes.is_empty() {
            true => Ok(()),
            false => Err(ProtocolError::Malformed { what: self.what }),
        }
    }
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Request::Hello { version, settings } => {
                let mut out = vec![HELLO];
                out.extend_from_slice(&version.to_le_bytes());
                let json = serde_json::json!({
                    "runtimeLibrary": settings.runtime_library,
                    "modelDir": settings.model_dir,
                    "intraThreads": settings.intra_threads,
                    "batchSize": settings.batch_size,
                    "maxSequenceTokens": settings.max_sequence_tokens,
                });
                out.extend_from_slice(json.to_string().as_bytes());
                out
            }
            Request::Embed(inputs) => {
                let mut out = vec![EMBED];
                out.extend_from_slice(&(inputs.len() as u32).to_le_bytes());
                for ids in inputs {
                    out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
                    ids.iter()
                        .for_each(|id| out.extend_from_slice(&id.to_le_bytes()));
                }
                out
            }
        }
    }

    pub fn decode(payload: &[u8]) -> Result<Request, ProtocolError> {
        match payload.split_first() {
            Some((&HELLO, rest)) => decode_hello(rest),
            Some((&EMBED, rest)) => {
                let mut cursor = Cursor {
                    bytes: rest,
                    what: "embed request",
                };
                let count = cursor.count(MAX_INPUTS)?;
                let mut inputs = Vec::with_capacity(count);
                for _ in 0..count {
                    let len = cursor.count(MAX_INPUT_TOKENS)?;
                    inputs.push((0..len).map(|_| cursor.u32()).collect::<Result<_, _>>()?);
                }
                cursor.end()?;
                Ok(Request::Embed(inputs))
            }
            _ => Err(ProtocolError::Malformed { what: "request" }),
        }
    }
}

fn decode_hello(rest: &[u8]) -> Result<Request, ProtocolError> {
    let malformed = ProtocolError::Malformed { what: "hello" };
    let (version, json) = rest.split_first_chunk::<4>().ok_or(malformed)?;
    let value: serde_json::Value =
        serde_json::from_slice(json).map_err(|_| ProtocolError::Malformed { what: "hello" })?;
    let text = |name: &str| value[name].as_str().map(std::path::PathBuf::from);
    let number = |name: &str| value[name].as_u64().map(|n| n as usize);
    let settings = (|| {
        Some(EmbedderSettings {
            runtime_library: text("runtimeLibrary")?,
            model_dir: text("modelDir")?,
            intra_threads: number("intraThreads")?,
            batch_size: number("batchSize")?,
            max_sequence_tokens: number("maxSequenceTokens")?.min(MAX_INPUT_TOKENS),
            idle_unload: std::time::Duration::ZERO,
        })
    })()
    .ok_or(ProtocolError::Malformed { what: "hello" })?;
    Ok(Request::Hello {
        version: u32::from_le_bytes(*version),
        settings,
    })
}

impl Response {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Response::Ready { dimensions } => {
                let mut out = vec![READY];
                out.extend_from_slice(&(*dimensions as u32).to_le_bytes());
                out
            }
            Response::Vectors(vectors) => {
                let dims = vectors.first().map_or(0, Vec::len);
                let mut out = Vec::with_capacity(9 + vectors.len() * dims * 4);
                out.push(VECTORS);
                out.extend_from_slice(&(vectors.len() as u32).to_le_bytes());
                out.extend_from_slice(&(dims as u32).to_le_bytes());
                for value in vectors.iter().flatten() {
                    out.extend_from_slice(&value.to_le_bytes());
                }
                out
            }
            Response::Failed(message) => {
                let mut cut = message.len().min(MAX_ERROR_BYTES);
                while !message.is_char_boundary(cut) {
                    cut -= 1;
                }
                let mut out = vec![FAILED];
                out.extend_from_slice(&message.as_bytes()[..cut]);
                out
            }
        }
    }

    pub fn decode(payload: &[u8]) -> Result<Response, ProtocolError> {
        match payload.split_first() {
            Some((&READY, rest)) => {
                let mut cursor = Cursor {
                    bytes: rest,
                    what: "ready answer",
                };
                let dimensions = cursor.count(MAX_DIMENSIONS)?;
                cursor.end()?;
                Ok(Response::Ready { dimensions })
            }
            Some((&VECTORS, rest)) => {
                let mut cursor = Cursor {
                    bytes: rest,
                    what: "vectors answer",
                };
                let (count, dims) = (cursor.count(MAX_INPUTS)?, cursor.count(MAX_DIMENSIONS)?);
                let vectors = (0..count)
                    .map(|_| {
                        (0..dims)
                            .map(|_| cursor.u32().map(f32::from_bits))
                            .collect::<Result<Vec<f32>, _>>()
                    })
                    .collect::<Result<_, _>>()?;
                cursor.end()?;
                Ok(Response::Vectors(vectors))
            }
            Some((&FAILED, rest)) => Ok(Response::Failed(String::from_utf8_lossy(rest).into())),
            _ => Err(ProtocolError::Malformed { what: "answer" }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(payload: &[u8]) -> Vec<u8> {
        let mut pipe = Vec::new();
        write_frame(&mut pipe, payload).expect("write");
        read_frame(&mut pipe.as_slice())
            .expect("read")
            .expect("a frame")
    }

    #[test]
    fn requests_and_answers_survive_the_pipe() {
        let embed = Request::Embed(vec![vec![101, 7592, 102], vec![]]);
        assert_eq!(
            Request::decode(&round_trip(&embed.encode())).expect("embed"),
            embed
        );
        let hello = Request::Hello {
            version: PROTOCOL_VERSION,
            settings: EmbedderSettings {
                runtime_library: "/lib/ort.so".into(),
                model_dir: "/models/m".into(),
                intra_threads: 2,
                batch_size: 8,
                max_sequence_tokens: 256,
                idle_unload: std::time::Duration::ZERO,
            },
        };
        assert_eq!(
            Request::decode(&round_trip(&hello.encode())).expect("hello"),
            hello
        );
        let vectors = Response::Vectors(vec![vec![0.5, -1.0], vec![0.25, 2.0]]);
        assert_eq!(
            Response::decode(&round_trip(&vectors.encode())).expect("vectors"),
            vectors
        );
        let failed = Response::Failed("model load failed".into());
        assert_eq!(Response::decode(&failed.encode()).expect("failed"), failed);
        let ready = Response::Ready { dimensions: 384 };
        assert_eq!(Response::decode(&ready.encode()).expect("ready"), ready);
    }

    #[test]
    fn a_frame_over_the_limit_is_refused_before_it_is_read() {
        let mut pipe = ((MAX_FRAME_BYTES + 1) as u32).to_le_bytes().to_vec();
        pipe.extend_from_slice(&[0; 16]);
        let error = read_frame(&mut pipe.as_slice()).expect_err("too long");
        assert!(matches!(error, ProtocolError::TooLong { .. }), "{error}");
        let error =
            write_frame(&mut Vec::new(), &vec![0; MAX_FRAME_BYTES + 1]).expect_err("too long");
        assert!(matches!(error, ProtocolError::TooLong { .. }), "{error}");
    }

    #[test]
    fn counts_past_their_bounds_or_short_payloads_are_malformed() {
        let too_many = Request::Embed(vec![vec![1]; MAX_INPUTS + 1]).encode();
        assert!(Request::decode(&too_many).is_err());
        let too_long = Request::Embed(vec![vec![1; MAX_INPUT_TOKENS + 1]]).encode();
        assert!(Request::decode(&too_long).is_err());
        let mut short = Response::Vectors(vec![vec![1.0; 4]]).encode();
        short.pop();
        assert!(Response::decode(&short).is_err());
        let mut trailing = Request::Embed(vec![vec![1]]).encode();
        trailing.push(0);
        assert!(Request::decode(&trailing).is_err());
        assert!(
            read_frame(&mut [4u8, 0, 0, 0, 1].as_slice()).is_err(),
            "cut short"
        );
        assert!(read_frame(&mut [].as_slice()).expect("clean end").is_none());
    }
}
