//! D-Bus values and their marshalled form: [`Encoder`] writes little-endian, [`Decoder`] reads
//! either byte order. Alignment is counted from the start of the buffer, which is the start of
//! a message (header) or of its body (which begins 8-aligned, so the two agree).
//!
//! The decoder trusts nothing: every length is checked against what is left, padding must be
//! zero, booleans 0 or 1, strings valid UTF-8 without NUL, containers nested at most
//! [`MAX_DEPTH`] deep (variants included). A bad byte is a [`WireError`] naming it, never a panic.

use super::signature::{self, Type};
use super::WireError;

/// Deepest nesting of containers (arrays, structs, dict entries, variants) in one value, as the
/// specification's total limit.
pub const MAX_DEPTH: usize = 64;
/// Longest array the specification allows, in bytes.
pub const MAX_ARRAY_BYTES: usize = 64 * 1024 * 1024;

/// One D-Bus value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Byte(u8),
    Bool(bool),
    Int16(i16),
    UInt16(u16),
    Int32(i32),
    UInt32(u32),
    Int64(i64),
    UInt64(u64),
    Double(f64),
    Str(String),
    ObjectPath(String),
    Signature(String),
    Variant(Box<Value>),
    /// An array of any element type but dict entries; `item` types an empty array.
    Array {
        item: Type,
        items: Vec<Value>,
    },
    /// `a{kv}`.
    Dict {
        key: Type,
        value: Type,
        entries: Vec<(Value, Value)>,
    },
    Struct(Vec<Value>),
}

impl Value {
    /// A string value.
    pub fn str(text: impl Into<String>) -> Value {
        Value::Str(text.into())
    }

    /// An `a{sv}` dictionary.
    pub fn string_dict(entries: Vec<(String, Value)>) -> Value {
        Value::Dict {
            key: Type::Str,
            value: Type::Variant,
            entries: entries
                .into_iter()
                .map(|(k, v)| (Value::Str(k), Value::Variant(Box::new(v))))
                .collect(),
        }
    }

    /// The value's type.
    pub fn type_of(&self) -> Type {
        match self {
            Value::Byte(_) => Type::Byte,
            Value::Bool(_) => Type::Bool,
            Value::Int16(_) => Type::Int16,
            Value::UInt16(_) => Type::UInt16,
            Value::Int32(_) => Type::Int32,
            Value::UInt32(_) => Type::UInt32,
            Value::Int64(_) => Type::Int64,
            Value::UInt64(_) => Type::UInt64,
            Value::Double(_) => Type::Double,
            Value::Str(_) => Type::Str,
            Value::ObjectPath(_) => Type::ObjectPath,
            Value::Signature(_) => Type::Signature,
            Value::Variant(_) => Type::Variant,
            Value::Array { item, .. } => Type::Array(Box::new(item.clone())),
            Value::Dict { key, value, .. } => {
                Type::Dict(Box::new(key.clone()), Box::new(value.clone()))
            }
            Value::Struct(fields) => Type::Struct(fields.iter().map(Value::type_of).collect()),
        }
    }

    /// The value inside a variant (or the value itself).
    pub fn unwrap_variant(&self) -> &Value {
        match self {
            Value::Variant(inner) => inner.unwrap_variant(),
            other => other,
        }
    }

    /// The text of a string, object path or signature (through variants).
    pub fn as_str(&self) -> Option<&str> {
        match self.unwrap_variant() {
            Value::Str(s) | Value::ObjectPath(s) | Value::Signature(s) => Some(s),
            _ => None,
        }
    }

    /// Any integer that fits an `i64` (through variants).
    pub fn as_i64(&self) -> Option<i64> {
        match *self.unwrap_variant() {
            Value::Byte(v) => Some(v.into()),
            Value::Int16(v) => Some(v.into()),
            Value::UInt16(v) => Some(v.into()),
            Value::Int32(v) => Some(v.into()),
            Value::UInt32(v) => Some(v.into()),
            Value::Int64(v) => Some(v),
            Value::UInt64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A boolean (through variants).
    pub fn as_bool(&self) -> Option<bool> {
        match *self.unwrap_variant() {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The fields of a struct (through variants).
    pub fn as_struct(&self) -> Option<&[Value]> {
        match self.unwrap_variant() {
            Value::Struct(fields) => Some(fields),
            _ => None,
        }
    }

    /// The items of an array (through variants).
    pub fn as_array(&self) -> Option<&[Value]> {
        match self.unwrap_variant() {
            Value::Array { items, .. } => Some(items),
            _ => None,
        }
    }

    /// The entries of a dict with string keys, as `(key, value)` (through variants).
    pub fn as_string_dict(&self) -> Option<Vec<(&str, &Value)>> {
        match self.unwrap_variant() {
            Value::Dict { entries, .. } => entries
                .iter()
                .map(|(k, v)| k.as_str().map(|k| (k, v)))
                .collect(),
            _ => None,
        }
    }
}

/// Writes values in little-endian byte order.
#[derive(Debug, Default)]
pub struct Encoder {
    pub buf: Vec<u8>,
}

impl Encoder {
    pub fn new() -> Encoder {
        Encoder::default()
    }

    /// Pads with zero bytes to a multiple of `alignment`.
    pub fn align(&mut self, alignment: usize) {
        while self.buf.len() % alignment != 0 {
            self.buf.push(0);
        }
    }

    fn u32(&mut self, v: u32) {
        self.align(4);
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn text(&mut self, text: &str, what: &str) -> Result<(), WireError> {
        if text.contains('\0') {
            return Err(WireError::new(format!("{what} contains a NUL byte")));
        }
        let len =
            u32::try_from(text.len()).map_err(|_| WireError::new(format!("{what} is too long")))?;
        self.u32(len);
        self.buf.extend_from_slice(text.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    fn signature(&mut self, sig: &str) -> Result<(), WireError> {
        signature::parse(sig)?;
        self.buf.push(sig.len() as u8);
        self.buf.extend_from_slice(sig.as_bytes());
        self.buf.push(0);
        Ok(())
    }

    /// Writes one value, aligned for its type.
    pub fn value(&mut self, value: &Value) -> Result<(), WireError> {
        self.value_at(value, 0)
    }

    fn value_at(&mut self, value: &Value, depth: usize) -> Result<(), WireError> {
        if depth > MAX_DEPTH {
            return Err(WireError::new("value nested more than 64 containers deep"));
        }
        self.align(value.type_of().alignment());
        match value {
            Value::Byte(v) => self.buf.push(*v),
            Value::Bool(v) => self.u32(u32::from(*v)),
            Value::Int16(v) => self.buf.extend_from_slice(&v.to_le_bytes()),
            Value::UInt16(v) => self.buf.extend_from_slice(&v.to_le_bytes()),
            Value::Int32(v) => self.buf.extend_from_slice(&v.to_le_bytes()),
            Value::UInt32(v) => self.buf.extend_from_slice(&v.to_le_bytes()),
            Value::Int64(v) => self.buf.extend_from_slice(&v.to_le_bytes()),
            Value::UInt64(v) => self.buf.extend_from_slice(&v.to_le_bytes()),
            Value::Double(v) => self.buf.extend_from_slice(&v.to_le_bytes()),
            Value::Str(s) => self.text(s, "string")?,
            Value::ObjectPath(p) => {
                check_object_path(p)?;
                self.text(p, "object path")?;
            }
            Value::Signature(s) => self.signature(s)?,
            Value::Variant(inner) => {
                self.signature(&inner.type_of().signature())?;
                self.value_at(inner, depth + 1)?;
            }
            Value::Array { item, items } => {
                for v in items {
                    if &v.type_of() != item {
                        return Err(WireError::new(format!(
                            "array of {item} holds a {}",
                            v.type_of()
                        )));
                    }
                }
                self.container(item.alignment(), |enc| {
                    items.iter().try_for_each(|v| enc.value_at(v, depth + 1))
                })?;
            }
            Value::Dict {
                key,
                value: value_type,
                entries,
            } => {
                if !key.is_basic() {
                    return Err(WireError::new("a dict key must be a basic type"));
                }
                self.container(8, |enc| {
                    for (k, v) in entries {
                        if &k.type_of() != key || &v.type_of() != value_type {
                            return Err(WireError::new(format!(
                                "dict a{{{key}{value_type}}} holds an entry {{{}{}}}",
                                k.type_of(),
                                v.type_of()
                            )));
                        }
                        enc.align(8);
                        enc.value_at(k, depth + 2)?;
                        enc.value_at(v, depth + 2)?;
                    }
                    Ok(())
                })?;
            }
            Value::Struct(fields) => {
                if fields.is_empty() {
                    return Err(WireError::new("empty struct"));
                }
                for field in fields {
                    self.value_at(field, depth + 1)?;
                }
            }
        }
        Ok(())
    }

    /// An array: its byte length (which excludes the padding before the first element), the
    /// padding, then the elements.
    fn container(
        &mut self,
        item_alignment: usize,
        body: impl FnOnce(&mut Encoder) -> Result<(), WireError>,
    ) -> Result<(), WireError> {
        self.align(4);
        let len_at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        self.align(item_alignment);
        let start = self.buf.len();
        body(self)?;
        let len = self.buf.len() - start;
        if len > MAX_ARRAY_BYTES {
            return Err(WireError::new(format!(
                "array of {len} bytes is over the 64 MiB limit"
            )));
        }
        self.buf[len_at..len_at + 4].copy_from_slice(&(len as u32).to_le_bytes());
        Ok(())
    }
}

/// An object path: `/`, or `/`-separated non-empty elements of `[A-Za-z0-9_]`.
pub fn check_object_path(path: &str) -> Result<(), WireError> {
    let ok = path == "/"
        || (path.starts_with('/')
            && !path.ends_with('/')
            && path[1..].split('/').all(|element| {
                !element.is_empty()
                    && element
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            }));
    if ok {
        Ok(())
    } else {
        Err(WireError::new(format!("invalid object path {path:?}")))
    }
}

/// Reads values of either byte order from a buffer that starts at an 8-aligned offset.
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    big_endian: bool,
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8], big_endian: bool) -> Decoder<'a> {
        Decoder {
            buf,
            pos: 0,
            big_endian,
        }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Skips padding to `alignment`; the padding must be zero.
    pub fn align(&mut self, alignment: usize) -> Result<(), WireError> {
        let target = self.pos.next_multiple_of(alignment);
        let padding = self.take(target - self.pos, "padding")?;
        if padding.iter().any(|&b| b != 0) {
            return Err(WireError::new(format!(
                "non-zero padding at byte {}",
                target - padding.len()
            )));
        }
        Ok(())
    }

    fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8], WireError> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| {
                WireError::new(format!(
                    "{what} at byte {} runs past the end ({} bytes)",
                    self.pos,
                    self.buf.len()
                ))
            })?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn fixed<const N: usize>(&mut self, what: &str) -> Result<[u8; N], WireError> {
        self.align(N)?;
        let bytes = self.take(N, what)?;
        let mut raw: [u8; N] = bytes.try_into().map_err(|_| WireError::new(what))?;
        if self.big_endian {
            raw.reverse();
        }
        Ok(raw)
    }

    pub fn u32(&mut self, what: &str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.fixed::<4>(what)?))
    }

    fn text(&mut self, len: usize, what: &str) -> Result<String, WireError> {
        let at = self.pos;
        let bytes = self.take(len, what)?;
        if self.take(1, what)? != [0] {
            return Err(WireError::new(format!(
                "{what} at byte {at} is not NUL-terminated"
            )));
        }
        if bytes.contains(&0) {
            return Err(WireError::new(format!(
                "{what} at byte {at} contains a NUL byte"
            )));
        }
        String::from_utf8(bytes.to_vec())
            .map_err(|_| WireError::new(format!("{what} at byte {at} is not valid UTF-8")))
    }

    /// Reads a signature (a length byte, the text, a NUL) and checks it parses.
    pub fn signature(&mut self) -> Result<String, WireError> {
        let len = self.take(1, "signature length")?[0] as usize;
        let sig = self.text(len, "signature")?;
        signature::parse(&sig)?;
        Ok(sig)
    }

    /// Reads one value of type `ty`.
    pub fn value(&mut self, ty: &Type) -> Result<Value, WireError> {
        self.value_at(ty, 0)
    }

    fn value_at(&mut self, ty: &Type, depth: usize) -> Result<Value, WireError> {
        if depth > MAX_DEPTH {
            return Err(WireError::new("value nested more than 64 containers deep"));
        }
        let value = match ty {
            Type::Byte => Value::Byte(self.take(1, "byte")?[0]),
            Type::Bool => match self.u32("boolean")? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                other => {
                    return Err(WireError::new(format!(
                        "boolean holds {other} (only 0 and 1 are booleans)"
                    )))
                }
            },
            Type::Int16 => Value::Int16(i16::from_le_bytes(self.fixed("int16")?)),
            Type::UInt16 => Value::UInt16(u16::from_le_bytes(self.fixed("uint16")?)),
            Type::Int32 => Value::Int32(i32::from_le_bytes(self.fixed("int32")?)),
            Type::UInt32 => Value::UInt32(self.u32("uint32")?),
            Type::Int64 => Value::Int64(i64::from_le_bytes(self.fixed("int64")?)),
            Type::UInt64 => Value::UInt64(u64::from_le_bytes(self.fixed("uint64")?)),
            Type::Double => Value::Double(f64::from_le_bytes(self.fixed("double")?)),
            Type::Str => {
                let len = self.u32("string length")? as usize;
                Value::Str(self.text(len, "string")?)
            }
            Type::ObjectPath => {
                let len = self.u32("object path length")? as usize;
                let path = self.text(len, "object path")?;
                check_object_path(&path)?;
                Value::ObjectPath(path)
            }
            Type::Signature => Value::Signature(self.signature()?),
            Type::Variant => {
                let sig = self.signature()?;
                let inner = signature::parse_single(&sig)?;
                Value::Variant(Box::new(self.value_at(&inner, depth + 1)?))
            }
            Type::Array(item) => {
                let mut items = Vec::new();
                self.array(item.alignment(), |dec| {
                    items.push(dec.value_at(item, depth + 1)?);
                    Ok(())
                })?;
                Value::Array {
                    item: (**item).clone(),
                    items,
                }
            }
            Type::Dict(key, value) => {
                let mut entries = Vec::new();
                self.array(8, |dec| {
                    dec.align(8)?;
                    let k = dec.value_at(key, depth + 2)?;
                    let v = dec.value_at(value, depth + 2)?;
                    entries.push((k, v));
                    Ok(())
                })?;
                Value::Dict {
                    key: (**key).clone(),
                    value: (**value).clone(),
                    entries,
                }
            }
            Type::Struct(fields) => {
                self.align(8)?;
                let values = fields
                    .iter()
                    .map(|field| self.value_at(field, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                Value::Struct(values)
            }
        };
        Ok(value)
    }

    /// Reads an array's length, its padding, then elements until exactly that many bytes.
    fn array(
        &mut self,
        item_alignment: usize,
        mut item: impl FnMut(&mut Decoder<'a>) -> Result<(), WireError>,
    ) -> Result<(), WireError> {
        let len = self.u32("array length")? as usize;
        if len > MAX_ARRAY_BYTES {
            return Err(WireError::new(format!(
                "array of {len} bytes is over the 64 MiB limit"
            )));
        }
        self.align(item_alignment)?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| {
                WireError::new(format!(
                    "array of {len} bytes at byte {} runs past the end ({} bytes)",
                    self.pos,
                    self.buf.len()
                ))
            })?;
        while self.pos < end {
            item(self)?;
        }
        if self.pos != end {
            return Err(WireError::new(format!(
                "array element runs {} bytes past the array's end",
                self.pos - end
            )));
        }
        Ok(())
    }
}

/// Marshals `values` as a message body (little-endian).
pub fn encode_body(values: &[Value]) -> Result<Vec<u8>, WireError> {
    let mut encoder = Encoder::new();
    for value in values {
        encoder.value(value)?;
    }
    Ok(encoder.buf)
}

/// Reads a message body of `signature`; every byte must belong to a value.
pub fn decode_body(
    body: &[u8],
    signature: &str,
    big_endian: bool,
) -> Result<Vec<Value>, WireError> {
    let types = signature::parse(signature)?;
    let mut decoder = Decoder::new(body, big_endian);
    let values = types
        .iter()
        .map(|ty| decoder.value(ty))
        .collect::<Result<Vec<_>, _>>()?;
    if decoder.position() != body.len() {
        return Err(WireError::new(format!(
            "body has {} bytes after its values of signature {signature:?}",
            body.len() - decoder.position()
        )));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(values: &[Value]) -> Vec<Value> {
        let sig = signature::signature_of(&values.iter().map(Value::type_of).collect::<Vec<_>>());
        let body = encode_body(values).expect("encode");
        decode_body(&body, &sig, false).expect("decode")
    }

    fn slot_status() -> Value {
        let dict = Value::string_dict(vec![
            ("state".into(), Value::str("booted")),
            ("installed.count".into(), Value::UInt32(3)),
            ("size".into(), Value::UInt64(4_194_304)),
        ]);
        Value::Array {
            item: Type::Struct(vec![
                Type::Str,
                Type::Dict(Box::new(Type::Str), Box::new(Type::Variant)),
            ]),
            items: vec![Value::Struct(vec![Value::str("rootfs.0"), dict])],
        }
    }

    #[test]
    fn every_type_round_trips() {
        let values = vec![
            Value::Byte(7),
            Value::Bool(true),
            Value::Int16(-3),
            Value::UInt16(65535),
            Value::Int32(-100),
            Value::UInt32(4_000_000_000),
            Value::Int64(i64::MIN),
            Value::UInt64(u64::MAX),
            Value::Double(2.5),
            Value::str("héllo"),
            Value::ObjectPath("/de/pengutronix".into()),
            Value::Signature("a(sa{sv})".into()),
            Value::Variant(Box::new(Value::Struct(vec![
                Value::Int32(40),
                Value::str("Verifying signature"),
                Value::Int32(1),
            ]))),
            slot_status(),
            Value::Array {
                item: Type::UInt64,
                items: vec![],
            },
            Value::Variant(Box::new(Value::Variant(Box::new(Value::Bool(false))))),
        ];
        assert_eq!(round_trip(&values), values);
    }

    #[test]
    fn alignment_and_padding_follow_the_specification() {
        // A byte, then a uint32 padded to 4, then a uint64 padded to 8.
        let body = encode_body(&[Value::Byte(1), Value::UInt32(2), Value::UInt64(3)]).expect("enc");
        assert_eq!(body, [1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
        // An empty array of structs: its length (0), then padding to 8 all the same.
        let body = encode_body(&[
            Value::Byte(9),
            Value::Array {
                item: Type::Struct(vec![Type::Str]),
                items: vec![],
            },
        ])
        .expect("enc");
        assert_eq!(body, [9, 0, 0, 0, 0, 0, 0, 0]);
        // The array length excludes the padding before the first element.
        let body = encode_body(&[Value::Array {
            item: Type::UInt64,
            items: vec![Value::UInt64(1)],
        }])
        .expect("enc");
        assert_eq!(&body[..4], &8u32.to_le_bytes());
        assert_eq!(body.len(), 16);
    }

    #[test]
    fn big_endian_input_reads_the_same() {
        // (isi) = (40, "ok", 1) big-endian.
        let mut body = vec![0, 0, 0, 40, 0, 0, 0, 2, b'o', b'k', 0, 0, 0, 0, 0, 1];
        let values = decode_body(&body, "(isi)", true).expect("big-endian");
        assert_eq!(
            values,
            vec![Value::Struct(vec![
                Value::Int32(40),
                Value::str("ok"),
                Value::Int32(1)
            ])]
        );
        body[3] = 41;
        assert_eq!(
            decode_body(&body, "(isi)", true).expect("again")[0]
                .as_struct()
                .expect("s")[0],
            Value::Int32(41)
        );
    }

    #[test]
    fn nested_containers_round_trip_through_variants() {
        let inner = Value::string_dict(vec![("a".into(), slot_status())]);
        let values = vec![Value::Variant(Box::new(Value::Struct(vec![
            inner,
            Value::Array {
                item: Type::Array(Box::new(Type::Byte)),
                items: vec![Value::Array {
                    item: Type::Byte,
                    items: vec![Value::Byte(1), Value::Byte(2)],
                }],
            },
        ])))];
        assert_eq!(round_trip(&values), values);
    }

    #[test]
    fn malformed_bodies_are_errors_naming_the_fault() {
        let cases: Vec<(Vec<u8>, &str, &str)> = vec![
            (vec![5, 0, 0, 0, b'a'], "s", "runs past the end"),
            (vec![1, 0, 0, 0, b'a', 1], "s", "not NUL-terminated"),
            (vec![2, 0, 0, 0, b'a', 0, 0], "s", "contains a NUL"),
            (vec![1, 0, 0, 0, 0xff, 0], "s", "UTF-8"),
            (vec![2, 0, 0, 0], "b", "only 0 and 1"),
            (vec![1, 7, 0, 0, 1, 0, 0, 0], "yu", "non-zero padding"),
            (vec![0xff, 0xff, 0xff, 0x7f], "ay", "64 MiB"),
            (vec![100, 0, 0, 0, 1], "ay", "runs past the end"),
            (vec![1, b'i', 0, 0, 1, 0, 0, 0, 9], "v", "after its values"),
            (
                vec![2, b'i', b'i', 0, 0, 0, 0, 0],
                "v",
                "exactly one complete type",
            ),
            (vec![1, b'z', 0], "g", "unknown type code"),
            (
                vec![3, 0, 0, 0, b'a', b'/', b'b', 0],
                "o",
                "invalid object path",
            ),
            // An array claiming 2 bytes whose uint32 element needs 4.
            (vec![2, 0, 0, 0, 1, 0, 0, 0], "au", "past the array's end"),
        ];
        for (body, sig, why) in cases {
            let error = decode_body(&body, sig, false)
                .expect_err(&format!("{sig} {body:?}"))
                .to_string();
            assert!(error.contains(why), "{sig} {body:?}: {error}");
        }
    }

    #[test]
    fn variants_nested_past_the_depth_limit_are_refused() {
        // 70 variants deep, each `v` then the next: sig len 1, 'v', NUL.
        let mut body = Vec::new();
        for _ in 0..70 {
            body.extend_from_slice(&[1, b'v', 0]);
        }
        body.extend_from_slice(&[1, b'y', 0, 5]);
        let error = decode_body(&body, "v", false)
            .expect_err("too deep")
            .to_string();
        assert!(error.contains("64 containers"), "{error}");
    }

    #[test]
    fn encoder_refuses_values_the_wire_cannot_carry() {
        assert!(encode_body(&[Value::str("a\0b")]).is_err());
        assert!(encode_body(&[Value::ObjectPath("no/slash".into())]).is_err());
        assert!(encode_body(&[Value::Signature("a".into())]).is_err());
        assert!(encode_body(&[Value::Struct(vec![])]).is_err());
        let mixed = Value::Array {
            item: Type::Str,
            items: vec![Value::Int32(1)],
        };
        assert!(encode_body(&[mixed]).is_err());
    }

    #[test]
    fn accessors_see_through_variants() {
        let v = Value::Variant(Box::new(Value::UInt32(5)));
        assert_eq!(v.as_i64(), Some(5));
        let d = Value::string_dict(vec![("k".into(), Value::str("v"))]);
        let entries = d.as_string_dict().expect("dict");
        assert_eq!(entries[0].0, "k");
        assert_eq!(entries[0].1.as_str(), Some("v"));
    }
}
