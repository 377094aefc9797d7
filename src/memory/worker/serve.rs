//! The embedding worker itself: `pincer embed-worker`, started by the gateway (`mod.rs`) with pipes for
//! stdin and stdout. It reads `Hello`, checks the model's files and answers `Ready`, then runs the model
//! ([`OnnxModel`], loaded on the first request) for each `Embed` until its stdin ends: the gateway closes
//! it after the idle period, and a gateway that dies closes it too. Nothing but frames goes to stdout;
//! logs go where the gateway's go (stderr, the journal).
//!
//! This file must not tokenize: requests carry token ids.

use std::io::{Read, Write};

use super::protocol::{
    read_frame, write_frame, ProtocolError, Request, Response, PROTOCOL_VERSION,
};
use crate::memory::onnx::{Encoded, ModelInfo, OnnxModel};

/// Serves the gateway on this process's stdin and stdout until stdin ends.
pub fn serve_stdio() -> Result<(), String> {
    let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
    serve(&mut stdin.lock(), &mut stdout.lock()).map_err(|e| format!("embed-worker: {e}"))
}

/// The worker's loop over any pipe pair.
pub fn serve(input: &mut impl Read, output: &mut impl Write) -> Result<(), ProtocolError> {
    let Some(hello) = read_frame(input)? else {
        return Ok(());
    };
    let settings = match Request::decode(&hello)? {
        Request::Hello { version, .. } if version != PROTOCOL_VERSION => {
            let why = format!(
                "protocol version {version} is not this worker's ({PROTOCOL_VERSION}): the gateway and the \
                 worker come from different builds"
            );
            write_frame(output, &Response::Failed(why).encode())?;
            return Ok(());
        }
        Request::Hello { settings, .. } => settings,
        Request::Embed(_) => {
            return Err(ProtocolError::Malformed {
                what: "first request",
            })
        }
    };
    let info = match ModelInfo::check(&settings) {
        Ok(info) => info,
        Err(error) => {
            write_frame(output, &Response::Failed(error.to_string()).encode())?;
            return Ok(());
        }
    };
    let ready = Response::Ready {
        dimensions: info.dimensions,
    };
    write_frame(output, &ready.encode())?;
    let mut model = OnnxModel::new(settings, info.key);
    while let Some(frame) = read_frame(input)? {
        let Request::Embed(inputs) = Request::decode(&frame)? else {
            return Err(ProtocolError::Malformed { what: "request" });
        };
        let encoded: Vec<Encoded> = inputs
            .into_iter()
            .map(|ids| Encoded {
                type_ids: vec![0; ids.len()],
                ids: ids.into_iter().map(i64::from).collect(),
            })
            .collect();
        let answer = match model.embed(&encoded) {
            Ok(vectors) => Response::Vectors(vectors),
            Err(error) => Response::Failed(error.to_string()),
        };
        write_frame(output, &answer.encode())?;
    }
    Ok(())
}
