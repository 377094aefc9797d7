//! D-Bus type signatures: parsed into a tree of [`Type`]s and written back, with the
//! specification's limits (255 bytes, 32 nested arrays, 32 nested structs, dict entries only
//! as array elements with a basic key). Unix file descriptors (`h`) are refused: nothing
//! pincer talks to passes them, and the connection does not negotiate them.

use std::fmt::Write as _;

use super::WireError;

/// Longest signature the specification allows, in bytes.
pub const MAX_SIGNATURE_BYTES: usize = 255;
/// Deepest nesting of arrays (and, separately, of structs) in one signature.
pub const MAX_NESTING: usize = 32;

/// One complete D-Bus type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    Byte,
    Bool,
    Int16,
    UInt16,
    Int32,
    UInt32,
    Int64,
    UInt64,
    Double,
    Str,
    ObjectPath,
    Signature,
    Variant,
    Array(Box<Type>),
    /// `a{kv}`: an array of dict entries (the only place a dict entry may appear).
    Dict(Box<Type>, Box<Type>),
    Struct(Vec<Type>),
}

impl Type {
    /// The alignment of the type's marshalled form, in bytes.
    pub fn alignment(&self) -> usize {
        match self {
            Type::Byte | Type::Signature | Type::Variant => 1,
            Type::Int16 | Type::UInt16 => 2,
            Type::Bool | Type::Int32 | Type::UInt32 | Type::Str | Type::ObjectPath => 4,
            Type::Array(_) | Type::Dict(..) => 4,
            Type::Int64 | Type::UInt64 | Type::Double | Type::Struct(_) => 8,
        }
    }

    /// Whether the type may be a dict key.
    pub fn is_basic(&self) -> bool {
        !matches!(
            self,
            Type::Variant | Type::Array(_) | Type::Dict(..) | Type::Struct(_)
        )
    }

    /// Appends the type's signature to `out`.
    pub fn write_signature(&self, out: &mut String) {
        let code = match self {
            Type::Byte => 'y',
            Type::Bool => 'b',
            Type::Int16 => 'n',
            Type::UInt16 => 'q',
            Type::Int32 => 'i',
            Type::UInt32 => 'u',
            Type::Int64 => 'x',
            Type::UInt64 => 't',
            Type::Double => 'd',
            Type::Str => 's',
            Type::ObjectPath => 'o',
            Type::Signature => 'g',
            Type::Variant => 'v',
            Type::Array(item) => {
                out.push('a');
                item.write_signature(out);
                return;
            }
            Type::Dict(key, value) => {
                out.push_str("a{");
                key.write_signature(out);
                value.write_signature(out);
                out.push('}');
                return;
            }
            Type::Struct(fields) => {
                out.push('(');
                for field in fields {
                    field.write_signature(out);
                }
                out.push(')');
                return;
            }
        };
        out.push(code);
    }

    /// The type's signature.
    pub fn signature(&self) -> String {
        let mut out = String::new();
        self.write_signature(&mut out);
        out
    }
}

impl std::fmt::Display for Type {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.signature())
    }
}

/// The signature of a sequence of types.
pub fn signature_of(types: &[Type]) -> String {
    let mut out = String::new();
    for ty in types {
        let _ = write!(out, "{ty}");
    }
    out
}

/// Parses a signature: zero or more complete types.
pub fn parse(signature: &str) -> Result<Vec<Type>, WireError> {
    if signature.len() > MAX_SIGNATURE_BYTES {
        return Err(WireError::new(format!(
            "signature of {} bytes is over the {MAX_SIGNATURE_BYTES}-byte limit",
            signature.len()
        )));
    }
    let mut parser = Parser {
        text: signature.as_bytes(),
        pos: 0,
        arrays: 0,
        structs: 0,
    };
    let mut types = Vec::new();
    while parser.pos < parser.text.len() {
        types.push(parser.complete_type(signature)?);
    }
    Ok(types)
}

/// Parses a signature that must hold exactly one complete type (a variant's).
pub fn parse_single(signature: &str) -> Result<Type, WireError> {
    let mut types = parse(signature)?;
    match (types.pop(), types.is_empty()) {
        (Some(ty), true) => Ok(ty),
        _ => Err(WireError::new(format!(
            "variant signature {signature:?} is not exactly one complete type"
        ))),
    }
}

struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
    arrays: usize,
    structs: usize,
}

impl Parser<'_> {
    fn complete_type(&mut self, whole: &str) -> Result<Type, WireError> {
        let bad = |why: &str| WireError::new(format!("bad signature {whole:?}: {why}"));
        let Some(&code) = self.text.get(self.pos) else {
            return Err(bad("ends inside a type"));
        };
        self.pos += 1;
        let ty = match code {
            b'y' => Type::Byte,
            b'b' => Type::Bool,
            b'n' => Type::Int16,
            b'q' => Type::UInt16,
            b'i' => Type::Int32,
            b'u' => Type::UInt32,
            b'x' => Type::Int64,
            b't' => Type::UInt64,
            b'd' => Type::Double,
            b's' => Type::Str,
            b'o' => Type::ObjectPath,
            b'g' => Type::Signature,
            b'v' => Type::Variant,
            b'h' => return Err(bad("unix file descriptors (h) are not supported")),
            b'a' => {
                self.arrays += 1;
                if self.arrays > MAX_NESTING {
                    return Err(bad("more than 32 nested arrays"));
                }
                let ty = if self.text.get(self.pos) == Some(&b'{') {
                    self.pos += 1;
                    let key = self.complete_type(whole)?;
                    if !key.is_basic() {
                        return Err(bad("a dict key must be a basic type"));
                    }
                    let value = self.complete_type(whole)?;
                    if self.text.get(self.pos) != Some(&b'}') {
                        return Err(bad("a dict entry holds exactly a key and a value"));
                    }
                    self.pos += 1;
                    Type::Dict(Box::new(key), Box::new(value))
                } else {
                    Type::Array(Box::new(self.complete_type(whole)?))
                };
                self.arrays -= 1;
                ty
            }
            b'(' => {
                self.structs += 1;
                if self.structs > MAX_NESTING {
                    return Err(bad("more than 32 nested structs"));
                }
                let mut fields = Vec::new();
                loop {
                    match self.text.get(self.pos) {
                        Some(b')') => {
                            self.pos += 1;
                            break;
                        }
                        Some(_) => fields.push(self.complete_type(whole)?),
                        None => return Err(bad("unclosed struct")),
                    }
                }
                if fields.is_empty() {
                    return Err(bad("empty struct"));
                }
                self.structs -= 1;
                Type::Struct(fields)
            }
            b'{' => return Err(bad("a dict entry outside an array")),
            other => return Err(bad(&format!("unknown type code {:?}", char::from(other)))),
        };
        Ok(ty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_writes_back_raucs_signatures() {
        for sig in [
            "s",
            "sa{sv}",
            "a(sa{sv})",
            "(isi)",
            "ss",
            "",
            "yybnqiuxtdsogv",
            "aay",
        ] {
            let types = parse(sig).expect(sig);
            assert_eq!(signature_of(&types), sig);
        }
        assert_eq!(
            parse_single("a{sv}").expect("dict"),
            Type::Dict(Box::new(Type::Str), Box::new(Type::Variant))
        );
    }

    #[test]
    fn refuses_malformed_signatures_with_the_reason() {
        let cases = [
            ("a", "ends inside a type"),
            ("(", "unclosed struct"),
            ("()", "empty struct"),
            ("{sv}", "outside an array"),
            ("a{vs}", "basic type"),
            ("a{sss}", "exactly a key and a value"),
            ("z", "unknown type code"),
            ("h", "file descriptors"),
        ];
        for (sig, why) in cases {
            let error = parse(sig).expect_err(sig).to_string();
            assert!(error.contains(why), "{sig}: {error}");
        }
        let deep_arrays = "a".repeat(33) + "y";
        assert!(parse(&deep_arrays).is_err());
        assert!(parse(&("a".repeat(32) + "y")).is_ok());
        let deep_structs = "(".repeat(33) + "y" + &")".repeat(33);
        assert!(parse(&deep_structs).is_err());
        assert!(parse(&"y".repeat(256)).is_err());
        assert!(parse_single("ss").is_err());
        assert!(parse_single("").is_err());
    }
}
