//! D-Bus messages: the fixed header, the header fields, the body. [`Message::encode`] writes
//! little-endian; [`Message::decode`] reads either byte order and checks what each message type
//! requires. [`frame_length`] reads a message's total length from its first 16 bytes, so a
//! reader knows how much to read — and refuses, before reading it, a message over
//! [`MAX_MESSAGE_BYTES`].

use super::signature::Type;
use super::value::{decode_body, encode_body, Decoder, Encoder, Value};
use super::WireError;

/// Largest message pincer reads or writes (the specification allows 128 MiB; RAUC's largest
/// answer, the slot status, is a few KiB).
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// Bytes of the fixed header plus the header-field array's length.
pub const FIXED_HEADER_BYTES: usize = 16;

/// `NO_REPLY_EXPECTED` header flag.
pub const FLAG_NO_REPLY_EXPECTED: u8 = 0x1;

/// The four message types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    MethodCall = 1,
    MethodReturn = 2,
    Error = 3,
    Signal = 4,
}

/// One message, header fields decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub kind: Kind,
    pub flags: u8,
    pub serial: u32,
    pub path: Option<String>,
    pub interface: Option<String>,
    pub member: Option<String>,
    pub error_name: Option<String>,
    pub reply_serial: Option<u32>,
    pub destination: Option<String>,
    pub sender: Option<String>,
    pub body: Vec<Value>,
}

impl Message {
    fn empty(kind: Kind) -> Message {
        Message {
            kind,
            flags: 0,
            serial: 0,
            path: None,
            interface: None,
            member: None,
            error_name: None,
            reply_serial: None,
            destination: None,
            sender: None,
            body: Vec::new(),
        }
    }

    /// A method call (its serial is set when it is sent).
    pub fn method_call(
        destination: &str,
        path: &str,
        interface: &str,
        member: &str,
        body: Vec<Value>,
    ) -> Message {
        Message {
            path: Some(path.into()),
            interface: Some(interface.into()),
            member: Some(member.into()),
            destination: Some(destination.into()),
            body,
            ..Message::empty(Kind::MethodCall)
        }
    }

    /// A method return answering `call`.
    pub fn method_return(call: &Message, body: Vec<Value>) -> Message {
        Message {
            reply_serial: Some(call.serial),
            destination: call.sender.clone(),
            body,
            ..Message::empty(Kind::MethodReturn)
        }
    }

    /// An error answering `call`.
    pub fn error_reply(call: &Message, name: &str, text: &str) -> Message {
        Message {
            error_name: Some(name.into()),
            reply_serial: Some(call.serial),
            destination: call.sender.clone(),
            body: vec![Value::str(text)],
            ..Message::empty(Kind::Error)
        }
    }

    /// A signal (for tests and completeness; pincer emits none).
    pub fn signal(path: &str, interface: &str, member: &str, body: Vec<Value>) -> Message {
        Message {
            path: Some(path.into()),
            interface: Some(interface.into()),
            member: Some(member.into()),
            body,
            ..Message::empty(Kind::Signal)
        }
    }

    /// The body's signature.
    pub fn signature(&self) -> String {
        let types: Vec<Type> = self.body.iter().map(Value::type_of).collect();
        super::signature::signature_of(&types)
    }

    /// An error's text: its first argument when that is a string.
    pub fn error_text(&self) -> String {
        self.body
            .first()
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }

    /// The marshalled message, little-endian.
    pub fn encode(&self) -> Result<Vec<u8>, WireError> {
        if self.serial == 0 {
            return Err(WireError::new("a message's serial must not be 0"));
        }
        let body = encode_body(&self.body)?;
        let mut fields = Vec::new();
        let mut field = |code: u8, value: Value| {
            fields.push(Value::Struct(vec![
                Value::Byte(code),
                Value::Variant(Box::new(value)),
            ]));
        };
        if let Some(path) = &self.path {
            field(1, Value::ObjectPath(path.clone()));
        }
        if let Some(interface) = &self.interface {
            field(2, Value::str(interface.clone()));
        }
        if let Some(member) = &self.member {
            field(3, Value::str(member.clone()));
        }
        if let Some(name) = &self.error_name {
            field(4, Value::str(name.clone()));
        }
        if let Some(serial) = self.reply_serial {
            field(5, Value::UInt32(serial));
        }
        if let Some(destination) = &self.destination {
            field(6, Value::str(destination.clone()));
        }
        if let Some(sender) = &self.sender {
            field(7, Value::str(sender.clone()));
        }
        if !self.body.is_empty() {
            field(8, Value::Signature(self.signature()));
        }
        let mut header = Encoder::new();
        header
            .buf
            .extend_from_slice(&[b'l', self.kind as u8, self.flags, 1]);
        header.value(&Value::UInt32(body.len() as u32))?;
        header.value(&Value::UInt32(self.serial))?;
        header.value(&Value::Array {
            item: header_field_type(),
            items: fields,
        })?;
        header.align(8);
        let mut bytes = header.buf;
        bytes.extend_from_slice(&body);
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(WireError::new(format!(
                "message of {} bytes is over the {MAX_MESSAGE_BYTES}-byte limit",
                bytes.len()
            )));
        }
        Ok(bytes)
    }

    /// Reads one whole message (exactly [`frame_length`] bytes).
    pub fn decode(bytes: &[u8]) -> Result<Message, WireError> {
        let head: &[u8; FIXED_HEADER_BYTES] = bytes
            .get(..FIXED_HEADER_BYTES)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| WireError::new("message shorter than its 16-byte header"))?;
        let total = frame_length(head)?;
        if total != bytes.len() {
            return Err(WireError::new(format!(
                "message header says {total} bytes, {} were given",
                bytes.len()
            )));
        }
        let big_endian = head[0] == b'B';
        let kind = match head[1] {
            1 => Kind::MethodCall,
            2 => Kind::MethodReturn,
            3 => Kind::Error,
            4 => Kind::Signal,
            other => return Err(WireError::new(format!("unknown message type {other}"))),
        };
        let mut message = Message::empty(kind);
        message.flags = head[2];
        let mut decoder = Decoder::new(bytes, big_endian);
        decoder.value(&Type::UInt32)?; // the fixed bytes, read as one word
        let body_len = decoder.u32("body length")? as usize;
        message.serial = decoder.u32("serial")?;
        if message.serial == 0 {
            return Err(WireError::new("message serial is 0"));
        }
        let fields = decoder.value(&Type::Array(Box::new(header_field_type())))?;
        let mut signature = String::new();
        let mut unix_fds = 0;
        for field in fields.as_array().unwrap_or_default() {
            let parts = field.as_struct().unwrap_or_default();
            let (Some(Value::Byte(code)), Some(value)) = (parts.first(), parts.get(1)) else {
                return Err(WireError::new("malformed header field"));
            };
            let value = value.unwrap_variant();
            let wrong =
                || WireError::new(format!("header field {code} has type {}", value.type_of()));
            match (code, value) {
                (1, Value::ObjectPath(p)) => message.path = Some(p.clone()),
                (2, Value::Str(s)) => message.interface = Some(s.clone()),
                (3, Value::Str(s)) => message.member = Some(s.clone()),
                (4, Value::Str(s)) => message.error_name = Some(s.clone()),
                (5, Value::UInt32(n)) => message.reply_serial = Some(*n),
                (6, Value::Str(s)) => message.destination = Some(s.clone()),
                (7, Value::Str(s)) => message.sender = Some(s.clone()),
                (8, Value::Signature(s)) => signature = s.clone(),
                (9, Value::UInt32(n)) => unix_fds = *n,
                (1..=9, _) => return Err(wrong()),
                // Unknown header fields are ignored, as the specification says.
                _ => {}
            }
        }
        if unix_fds > 0 {
            return Err(WireError::new(
                "message carries unix file descriptors, which were not negotiated",
            ));
        }
        decoder.align(8)?;
        let body = &bytes[decoder.position()..];
        if body.len() != body_len {
            return Err(WireError::new(format!(
                "body is {} bytes, the header says {body_len}",
                body.len()
            )));
        }
        message.body = decode_body(body, &signature, big_endian)?;
        message.check_required_fields()?;
        Ok(message)
    }

    fn check_required_fields(&self) -> Result<(), WireError> {
        let missing = match self.kind {
            Kind::MethodCall if self.path.is_none() => "PATH",
            Kind::MethodCall if self.member.is_none() => "MEMBER",
            Kind::Signal if self.path.is_none() => "PATH",
            Kind::Signal if self.interface.is_none() => "INTERFACE",
            Kind::Signal if self.member.is_none() => "MEMBER",
            Kind::Error if self.error_name.is_none() => "ERROR_NAME",
            Kind::Error | Kind::MethodReturn if self.reply_serial.is_none() => "REPLY_SERIAL",
            _ => return Ok(()),
        };
        Err(WireError::new(format!(
            "{:?} message without its {missing} header field",
            self.kind
        )))
    }
}

fn header_field_type() -> Type {
    Type::Struct(vec![Type::Byte, Type::Variant])
}

/// A message's total length from its first 16 bytes; refuses a bad byte order, protocol version
/// or a message over [`MAX_MESSAGE_BYTES`].
pub fn frame_length(head: &[u8; FIXED_HEADER_BYTES]) -> Result<usize, WireError> {
    let big_endian = match head[0] {
        b'l' => false,
        b'B' => true,
        other => {
            return Err(WireError::new(format!(
                "bad byte-order mark {other:#04x} (expected 'l' or 'B')"
            )))
        }
    };
    if head[3] != 1 {
        return Err(WireError::new(format!(
            "unsupported D-Bus protocol version {}",
            head[3]
        )));
    }
    let word = |at: usize| {
        let raw = [head[at], head[at + 1], head[at + 2], head[at + 3]];
        if big_endian {
            u32::from_be_bytes(raw)
        } else {
            u32::from_le_bytes(raw)
        }
    };
    let body = u64::from(word(4));
    let fields = u64::from(word(12));
    let total = (FIXED_HEADER_BYTES as u64 + fields).next_multiple_of(8) + body;
    if total > MAX_MESSAGE_BYTES as u64 {
        return Err(WireError::new(format!(
            "message of {total} bytes is over the {MAX_MESSAGE_BYTES}-byte limit"
        )));
    }
    Ok(total as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> Message {
        let mut m = Message::method_call(
            "de.pengutronix.rauc",
            "/",
            "de.pengutronix.rauc.Installer",
            "InstallBundle",
            vec![
                Value::str("/data/update.raucb"),
                Value::string_dict(vec![("ignore-compatible".into(), Value::Bool(false))]),
            ],
        );
        m.serial = 7;
        m
    }

    #[test]
    fn a_method_call_round_trips() {
        let m = call();
        let bytes = m.encode().expect("encode");
        assert_eq!(
            bytes.len() % 8,
            0,
            "body starts 8-aligned and this body ends aligned"
        );
        let head: [u8; 16] = bytes[..16].try_into().expect("head");
        assert_eq!(frame_length(&head).expect("len"), bytes.len());
        assert_eq!(Message::decode(&bytes).expect("decode"), m);
    }

    #[test]
    fn a_big_endian_signal_from_another_implementation_decodes() {
        // Completed(i 0) from "/" interface de.pengutronix.rauc.Installer, big-endian,
        // built by hand as a big-endian peer would send it.
        let mut fields = Vec::new();
        let mut put = |code: u8, sig: &str, payload: &[u8]| {
            while fields.len() % 8 != 0 {
                fields.push(0);
            }
            fields.push(code);
            fields.push(sig.len() as u8);
            fields.extend_from_slice(sig.as_bytes());
            fields.push(0);
            while sig != "g" && (16 + fields.len()) % 4 != 0 {
                fields.push(0);
            }
            fields.extend_from_slice(payload);
        };
        let text = |s: &str| {
            let mut v = (s.len() as u32).to_be_bytes().to_vec();
            v.extend_from_slice(s.as_bytes());
            v.push(0);
            v
        };
        put(1, "o", &text("/"));
        put(2, "s", &text("de.pengutronix.rauc.Installer"));
        put(3, "s", &text("Completed"));
        put(8, "g", &[1, b'i', 0]);
        let mut bytes = vec![b'B', 4, 0, 1];
        bytes.extend_from_slice(&4u32.to_be_bytes());
        bytes.extend_from_slice(&9u32.to_be_bytes());
        bytes.extend_from_slice(&(fields.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&fields);
        while bytes.len() % 8 != 0 {
            bytes.push(0);
        }
        bytes.extend_from_slice(&1i32.to_be_bytes());
        let m = Message::decode(&bytes).expect("big-endian signal");
        assert_eq!(m.kind, Kind::Signal);
        assert_eq!(m.member.as_deref(), Some("Completed"));
        assert_eq!(m.body, vec![Value::Int32(1)]);
    }

    #[test]
    fn oversized_messages_are_refused_from_their_header() {
        let mut head = [0u8; 16];
        head[..4].copy_from_slice(&[b'l', 2, 0, 1]);
        head[4..8].copy_from_slice(&(2 * 1024 * 1024u32).to_le_bytes());
        let error = frame_length(&head).expect_err("too big").to_string();
        assert!(error.contains("over the 1048576-byte limit"), "{error}");
        head[0] = b'x';
        assert!(frame_length(&head)
            .expect_err("bom")
            .to_string()
            .contains("byte-order"));
        head[0] = b'l';
        head[3] = 2;
        assert!(frame_length(&head)
            .expect_err("ver")
            .to_string()
            .contains("version"));
    }

    #[test]
    fn malformed_messages_are_errors() {
        let good = call().encode().expect("encode");
        // Truncated.
        assert!(Message::decode(&good[..good.len() - 1]).is_err());
        // Serial 0.
        let mut zero = good.clone();
        zero[8..12].copy_from_slice(&[0; 4]);
        assert!(Message::decode(&zero)
            .expect_err("serial")
            .to_string()
            .contains("serial"));
        // Unknown type.
        let mut kind = good.clone();
        kind[1] = 9;
        assert!(Message::decode(&kind)
            .expect_err("type")
            .to_string()
            .contains("type 9"));
        // A method return without REPLY_SERIAL.
        let mut reply = call();
        reply.kind = Kind::MethodReturn;
        let bytes = reply.encode().expect("encode");
        let error = Message::decode(&bytes)
            .expect_err("no reply serial")
            .to_string();
        assert!(error.contains("REPLY_SERIAL"), "{error}");
        // A body signature that does not match the body.
        let mut wrong = call();
        wrong.body = vec![Value::UInt32(1)];
        let mut bytes = wrong.encode().expect("encode");
        let at = bytes
            .windows(3)
            .position(|w| w == [1, b'u', 0])
            .expect("sig");
        bytes[at + 1] = b's';
        assert!(Message::decode(&bytes).is_err());
    }

    #[test]
    fn errors_carry_their_name_and_text() {
        let mut e = Message::error_reply(&call(), "org.freedesktop.DBus.Error.Failed", "no");
        e.serial = 3;
        let decoded = Message::decode(&e.encode().expect("encode")).expect("decode");
        assert_eq!(
            decoded.error_name.as_deref(),
            Some("org.freedesktop.DBus.Error.Failed")
        );
        assert_eq!(decoded.error_text(), "no");
        assert_eq!(decoded.reply_serial, Some(7));
    }
}
