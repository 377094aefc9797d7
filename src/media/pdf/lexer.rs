//! PDF's token and object syntax over a byte slice: numbers, literal and hex
//! strings, names, arrays, dictionaries, indirect references (`12 0 R`) and
//! bare keywords (content-stream operators, `obj`, `stream`). Nesting is
//! limited ([`MAX_DEPTH`]) so a hostile file cannot exhaust the stack.

/// Deepest nesting of arrays and dictionaries parsed.
pub const MAX_DEPTH: usize = 32;
/// Most entries of one array or dictionary kept.
const MAX_ENTRIES: usize = 100_000;

/// A PDF object.
#[derive(Debug, Clone, PartialEq)]
pub enum Obj {
    Null,
    Bool(bool),
    Num(f64),
    Str(Vec<u8>),
    Name(String),
    Array(Vec<Obj>),
    Dict(Dict),
    Ref(u32),
}

/// A dictionary's entries, in file order.
pub type Dict = Vec<(String, Obj)>;

impl Obj {
    pub fn as_dict(&self) -> Option<&Dict> {
        match self {
            Obj::Dict(d) => Some(d),
            _ => None,
        }
    }

    pub fn as_name(&self) -> Option<&str> {
        match self {
            Obj::Name(n) => Some(n),
            _ => None,
        }
    }

    pub fn as_num(&self) -> Option<f64> {
        match self {
            Obj::Num(n) => Some(*n),
            _ => None,
        }
    }
}

/// The value of `key` in `dict`.
pub fn get<'a>(dict: &'a Dict, key: &str) -> Option<&'a Obj> {
    dict.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// One token.
#[derive(Debug, Clone, PartialEq)]
pub enum Token<'a> {
    Num(f64),
    Str(Vec<u8>),
    Name(String),
    ArrayStart,
    ArrayEnd,
    DictStart,
    DictEnd,
    Keyword(&'a [u8]),
}

pub fn is_white(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'\x0c' | b'\0')
}

pub fn is_delimiter(b: u8) -> bool {
    matches!(
        b,
        b'(' | b')' | b'<' | b'>' | b'[' | b']' | b'{' | b'}' | b'/' | b'%'
    )
}

/// A cursor over PDF bytes.
pub struct Lexer<'a> {
    pub data: &'a [u8],
    pub pos: usize,
}

impl<'a> Lexer<'a> {
    pub fn new(data: &'a [u8]) -> Lexer<'a> {
        Lexer { data, pos: 0 }
    }

    pub fn at_end(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn peek(&self) -> Option<u8> {
        self.data.get(self.pos).copied()
    }

    /// Skips white space and comments.
    pub fn skip_white(&mut self) {
        while let Some(b) = self.peek() {
            if is_white(b) {
                self.pos += 1;
            } else if b == b'%' {
                while let Some(c) = self.peek() {
                    if c == b'\n' || c == b'\r' {
                        break;
                    }
                    self.pos += 1;
                }
            } else {
                break;
            }
        }
    }

    /// The next token, `None` at the end.
    pub fn token(&mut self) -> Option<Token<'a>> {
        self.skip_white();
        let b = self.peek()?;
        match b {
            b'[' => {
                self.pos += 1;
                Some(Token::ArrayStart)
            }
            b']' => {
                self.pos += 1;
                Some(Token::ArrayEnd)
            }
            b'<' if self.data.get(self.pos + 1) == Some(&b'<') => {
                self.pos += 2;
                Some(Token::DictStart)
            }
            b'>' if self.data.get(self.pos + 1) == Some(&b'>') => {
                self.pos += 2;
                Some(Token::DictEnd)
            }
            b'<' => Some(Token::Str(self.hex_string())),
            b'(' => Some(Token::Str(self.literal_string())),
            b'/' => Some(Token::Name(self.name())),
            b'+' | b'-' | b'.' | b'0'..=b'9' => {
                let start = self.pos;
                self.pos += 1;
                while self.peek().is_some_and(|c| c.is_ascii_digit() || c == b'.') {
                    self.pos += 1;
                }
                let text = std::str::from_utf8(&self.data[start..self.pos]).unwrap_or("0");
                Some(Token::Num(text.parse().unwrap_or(0.0)))
            }
            _ => {
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| !is_white(c) && !is_delimiter(c))
                {
                    self.pos += 1;
                }
                if self.pos == start {
                    // A stray delimiter (`)`, `>`, `{`, `}`): skip it.
                    self.pos += 1;
                }
                Some(Token::Keyword(&self.data[start..self.pos]))
            }
        }
    }

    fn name(&mut self) -> String {
        self.pos += 1;
        let mut out = Vec::new();
        while let Some(c) = self.peek() {
            if is_white(c) || is_delimiter(c) {
                break;
            }
            if c == b'#' {
                let hex = self.data.get(self.pos + 1..self.pos + 3);
                if let Some(v) = hex
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    out.push(v);
                    self.pos += 3;
                    continue;
                }
            }
            out.push(c);
            self.pos += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    fn hex_string(&mut self) -> Vec<u8> {
        self.pos += 1;
        let mut out = Vec::new();
        let mut high: Option<u8> = None;
        while let Some(c) = self.peek() {
            self.pos += 1;
            if c == b'>' {
                break;
            }
            let Some(v) = (c as char).to_digit(16) else {
                continue;
            };
            match high.take() {
                Some(h) => out.push(h << 4 | v as u8),
                None => high = Some(v as u8),
            }
        }
        if let Some(h) = high {
            out.push(h << 4);
        }
        out
    }

    fn literal_string(&mut self) -> Vec<u8> {
        self.pos += 1;
        let mut out = Vec::new();
        let mut depth = 1usize;
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                b'(' => {
                    depth += 1;
                    out.push(c);
                }
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                    out.push(c);
                }
                b'\\' => {
                    let Some(e) = self.peek() else { break };
                    self.pos += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'\r' => {
                            if self.peek() == Some(b'\n') {
                                self.pos += 1;
                            }
                        }
                        b'\n' => {}
                        b'0'..=b'7' => {
                            let mut v = u32::from(e - b'0');
                            for _ in 0..2 {
                                match self.peek() {
                                    Some(d @ b'0'..=b'7') => {
                                        v = v * 8 + u32::from(d - b'0');
                                        self.pos += 1;
                                    }
                                    _ => break,
                                }
                            }
                            out.push(v as u8);
                        }
                        other => out.push(other),
                    }
                }
                _ => out.push(c),
            }
        }
        out
    }

    /// The next object (references `n g R` folded into [`Obj::Ref`]); a bare
    /// keyword other than `true`, `false`, `null` is returned as `Err` with the
    /// keyword, so callers see `stream`, `endobj` or an operator.
    pub fn object(&mut self) -> Option<Result<Obj, &'a [u8]>> {
        self.object_at_depth(0)
    }

    fn object_at_depth(&mut self, depth: usize) -> Option<Result<Obj, &'a [u8]>> {
        let token = self.token()?;
        Some(Ok(match token {
            Token::Num(n) => {
                // `n g R`?
                let save = self.pos;
                if n >= 0.0 && n.fract() == 0.0 {
                    if let Some(Token::Num(g)) = self.token() {
                        if g >= 0.0 && g.fract() == 0.0 {
                            if let Some(Token::Keyword(b"R")) = self.token() {
                                return Some(Ok(Obj::Ref(n as u32)));
                            }
                        }
                    }
                }
                self.pos = save;
                Obj::Num(n)
            }
            Token::Str(s) => Obj::Str(s),
            Token::Name(n) => Obj::Name(n),
            Token::ArrayStart if depth < MAX_DEPTH => {
                let mut items = Vec::new();
                loop {
                    self.skip_white();
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        break;
                    }
                    match self.object_at_depth(depth + 1) {
                        None => break,
                        Some(Ok(item)) if items.len() < MAX_ENTRIES => items.push(item),
                        Some(Ok(_)) => {}
                        Some(Err(_)) => {}
                    }
                }
                Obj::Array(items)
            }
            Token::DictStart if depth < MAX_DEPTH => {
                let mut dict = Vec::new();
                loop {
                    match self.token() {
                        None | Some(Token::DictEnd) => break,
                        Some(Token::Name(key)) => {
                            let value = match self.object_at_depth(depth + 1) {
                                Some(Ok(v)) => v,
                                Some(Err(_)) | None => Obj::Null,
                            };
                            if dict.len() < MAX_ENTRIES {
                                dict.push((key, value));
                            }
                        }
                        Some(_) => {}
                    }
                }
                Obj::Dict(dict)
            }
            Token::ArrayStart | Token::DictStart => {
                self.skip_nested();
                Obj::Null
            }
            Token::ArrayEnd | Token::DictEnd => Obj::Null,
            Token::Keyword(b"true") => Obj::Bool(true),
            Token::Keyword(b"false") => Obj::Bool(false),
            Token::Keyword(b"null") => Obj::Null,
            Token::Keyword(k) => return Some(Err(k)),
        }))
    }

    /// Skips a too-deep array or dictionary without building it.
    fn skip_nested(&mut self) {
        let mut depth = 1usize;
        while depth > 0 {
            match self.token() {
                None => return,
                Some(Token::ArrayStart | Token::DictStart) => depth += 1,
                Some(Token::ArrayEnd | Token::DictEnd) => depth -= 1,
                Some(_) => {}
            }
        }
    }
}

/// The first position of `needle` in `haystack` at or after `from`.
pub fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from >= haystack.len() {
        return None;
    }
    haystack[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_strings_and_references_parse() {
        let mut lexer = Lexer::new(b"<< /Type /Page /Contents 5 0 R /Kids [1 0 R 2 0 R] /T (a\\(b\\)\\101) /H <48 69> /N -1.5 >> stream");
        let Some(Ok(Obj::Dict(dict))) = lexer.object() else {
            panic!("a dictionary");
        };
        assert_eq!(get(&dict, "Type"), Some(&Obj::Name("Page".into())));
        assert_eq!(get(&dict, "Contents"), Some(&Obj::Ref(5)));
        assert_eq!(
            get(&dict, "Kids"),
            Some(&Obj::Array(vec![Obj::Ref(1), Obj::Ref(2)]))
        );
        assert_eq!(get(&dict, "T"), Some(&Obj::Str(b"a(b)A".to_vec())));
        assert_eq!(get(&dict, "H"), Some(&Obj::Str(b"Hi".to_vec())));
        assert_eq!(get(&dict, "N"), Some(&Obj::Num(-1.5)));
        assert_eq!(lexer.object(), Some(Err(&b"stream"[..])));
    }

    #[test]
    fn deep_nesting_is_cut_not_recursed() {
        let deep = "[".repeat(10_000);
        let mut lexer = Lexer::new(deep.as_bytes());
        assert!(lexer.object().is_some());
    }
}
