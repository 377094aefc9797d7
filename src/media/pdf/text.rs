//! Text out of content streams: the text operators (`Tj`, `TJ`, `'`, `"`,
//! `Td`, `TD`, `T*`, `Tm`, `Tf`, `BT`/`ET`), form XObjects (`Do`, a few levels
//! deep) and inline images skipped; strings decoded through the font's
//! `ToUnicode` CMap, else as WinAnsi bytes for simple fonts. Lines break where
//! the text moves down; a wide gap in a `TJ` array becomes a space.

use std::collections::BTreeMap;

use super::lexer::{Lexer, Obj, Token};

/// Operands kept on the stack (a content stream cannot grow it further).
const MAX_OPERANDS: usize = 64;
/// A `TJ` adjustment wider than this (thousandths of an em) is a word gap.
const WORD_GAP: f64 = 180.0;

/// How a font's string bytes become text.
#[derive(Debug, Clone, Default)]
pub struct FontMap {
    /// Code length in bytes (1 or 2).
    pub code_bytes: usize,
    /// Codes with their text, from the CMap's `bfchar` and `bfrange`.
    pub codes: BTreeMap<u32, String>,
    /// No CMap: bytes are WinAnsi characters (simple fonts); `false` for
    /// composite fonts, whose codes mean nothing without a CMap.
    pub latin: bool,
}

impl FontMap {
    /// The fallback of a simple font without a `ToUnicode` CMap.
    pub fn latin() -> FontMap {
        FontMap {
            code_bytes: 1,
            codes: BTreeMap::new(),
            latin: true,
        }
    }

    /// Decodes `bytes` into `out`.
    pub fn decode(&self, bytes: &[u8], out: &mut String) {
        if self.codes.is_empty() {
            if self.latin {
                out.extend(bytes.iter().map(|&b| win_ansi(b)));
            }
            return;
        }
        for code in bytes.chunks(self.code_bytes.max(1)) {
            let value = code.iter().fold(0u32, |v, &b| v << 8 | u32::from(b));
            match self.codes.get(&value) {
                Some(text) => out.push_str(text),
                None if self.latin && self.code_bytes == 1 => out.push(win_ansi(code[0])),
                None => {}
            }
        }
    }
}

/// WinAnsi (CP1252) byte to character; control bytes become spaces.
fn win_ansi(b: u8) -> char {
    const HIGH: [char; 32] = [
        '€', ' ', '‚', 'ƒ', '„', '…', '†', '‡', 'ˆ', '‰', 'Š', '‹', 'Œ', ' ', 'Ž', ' ', ' ', '‘',
        '’', '“', '”', '•', '–', '—', '˜', '™', 'š', '›', 'œ', ' ', 'ž', 'Ÿ',
    ];
    match b {
        0x80..=0x9f => HIGH[usize::from(b - 0x80)],
        0x00..=0x1f => ' ',
        _ => char::from(b),
    }
}

/// UTF-16BE bytes (a CMap destination) as text.
fn utf16be(bytes: &[u8]) -> String {
    let units: Vec<u16> = bytes
        .chunks(2)
        .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
        .collect();
    char::decode_utf16(units)
        .map(|r| r.unwrap_or('\u{fffd}'))
        .collect()
}

fn code_value(bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .take(4)
        .fold(0u32, |v, &b| v << 8 | u32::from(b))
}

/// The CMap section being read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    None,
    CodeSpace,
    Char,
    Range,
}

/// Parses a `ToUnicode` CMap; at most `max_codes` codes are kept.
pub fn parse_cmap(data: &[u8], max_codes: usize) -> FontMap {
    let mut map = FontMap {
        code_bytes: 0,
        codes: BTreeMap::new(),
        latin: false,
    };
    let mut lexer = Lexer::new(data);
    let mut pending: Vec<Obj> = Vec::new();
    let mut section = Section::None;
    while let Some(item) = lexer.object() {
        let obj = match item {
            Ok(obj) => obj,
            Err(keyword) => {
                section = match keyword {
                    b"begincodespacerange" => Section::CodeSpace,
                    b"beginbfchar" => Section::Char,
                    b"beginbfrange" => Section::Range,
                    _ => Section::None,
                };
                pending.clear();
                continue;
            }
        };
        pending.push(obj);
        match (section, pending.as_slice()) {
            (Section::CodeSpace, [Obj::Str(lo), Obj::Str(_)]) => {
                set_code_bytes(&mut map, lo.len());
                pending.clear();
            }
            (Section::Char, [Obj::Str(src), Obj::Str(dst)]) => {
                set_code_bytes(&mut map, src.len());
                if map.codes.len() < max_codes {
                    map.codes.insert(code_value(src), utf16be(dst));
                }
                pending.clear();
            }
            (Section::Range, [Obj::Str(lo), Obj::Str(hi), dst]) => {
                set_code_bytes(&mut map, lo.len());
                let (lo, hi) = (code_value(lo), code_value(hi));
                for (i, code) in (lo..=hi.min(lo.saturating_add(65_535))).enumerate() {
                    if map.codes.len() >= max_codes {
                        break;
                    }
                    let text = match dst {
                        Obj::Str(base) => {
                            let mut d = base.clone();
                            if let Some(last) = d.last_mut() {
                                *last = last.wrapping_add(i as u8);
                            }
                            utf16be(&d)
                        }
                        Obj::Array(items) => match items.get(i) {
                            Some(Obj::Str(s)) => utf16be(s),
                            _ => continue,
                        },
                        _ => break,
                    };
                    map.codes.insert(code, text);
                }
                pending.clear();
            }
            (_, items) if items.len() >= 3 => pending.clear(),
            _ => {}
        }
    }
    if map.code_bytes == 0 {
        map.code_bytes = 1;
    }
    map
}

fn set_code_bytes(map: &mut FontMap, len: usize) {
    if map.code_bytes == 0 && (1..=4).contains(&len) {
        map.code_bytes = len;
    }
}

/// What the interpreter needs from the document.
pub trait Resources {
    /// The text decoding of the font resource `name`.
    fn font(&mut self, name: &str) -> FontMap;
    /// The content of the form XObject `name`, if it is one (depth-limited by
    /// the caller).
    fn form(&mut self, name: &str) -> Option<Vec<u8>>;
}

/// Collects a page's text.
pub struct TextSink {
    pub text: String,
    /// Stop once `text` holds this many characters.
    pub max_chars: usize,
    last_y: Option<f64>,
    line_started: bool,
}

impl TextSink {
    pub fn new(max_chars: usize) -> TextSink {
        TextSink {
            text: String::new(),
            max_chars,
            last_y: None,
            line_started: false,
        }
    }

    pub fn full(&self) -> bool {
        self.text.len() >= self.max_chars
    }

    fn newline(&mut self) {
        if self.line_started {
            self.text.push('\n');
            self.line_started = false;
        }
    }

    fn move_to(&mut self, y: f64) {
        if let Some(last) = self.last_y {
            if (last - y).abs() > 0.5 {
                self.newline();
            }
        }
        self.last_y = Some(y);
    }

    fn show(&mut self, font: &FontMap, bytes: &[u8]) {
        let before = self.text.len();
        font.decode(bytes, &mut self.text);
        if self.text.len() > before {
            self.line_started = true;
        }
    }

    fn space(&mut self) {
        if self.line_started && !self.text.ends_with(' ') {
            self.text.push(' ');
        }
    }
}

/// Interprets one content stream (and the forms it draws, up to `depth`).
pub fn interpret(content: &[u8], resources: &mut dyn Resources, sink: &mut TextSink, depth: usize) {
    let mut lexer = Lexer::new(content);
    let mut operands: Vec<Obj> = Vec::new();
    let mut font = FontMap::latin();
    let mut y = 0.0f64;
    let mut leading = 0.0f64;
    while !sink.full() {
        let Some(item) = lexer.object() else { break };
        let op = match item {
            Ok(obj) => {
                if operands.len() < MAX_OPERANDS {
                    operands.push(obj);
                }
                continue;
            }
            Err(op) => op,
        };
        let num = |i: usize| operands.get(i).and_then(Obj::as_num).unwrap_or(0.0);
        match op {
            b"BT" => {
                y = 0.0;
                sink.last_y = None;
            }
            b"ET" => sink.newline(),
            b"Tf" => {
                if let Some(Obj::Name(name)) = operands.first() {
                    font = resources.font(name);
                }
            }
            b"TL" => leading = num(0),
            b"Td" => {
                y += num(1);
                sink.move_to(y);
            }
            b"TD" => {
                leading = -num(1);
                y += num(1);
                sink.move_to(y);
            }
            b"Tm" => {
                y = num(5);
                sink.move_to(y);
            }
            b"T*" => {
                y -= leading;
                sink.newline();
                sink.last_y = Some(y);
            }
            b"Tj" => {
                if let Some(Obj::Str(s)) = operands.last() {
                    sink.show(&font, s);
                }
            }
            b"'" | b"\"" => {
                sink.newline();
                if let Some(Obj::Str(s)) = operands.last() {
                    sink.show(&font, s);
                }
            }
            b"TJ" => {
                if let Some(Obj::Array(items)) = operands.last() {
                    for item in items {
                        match item {
                            Obj::Str(s) => sink.show(&font, s),
                            Obj::Num(n) if *n < -WORD_GAP => sink.space(),
                            _ => {}
                        }
                    }
                }
            }
            b"Do" if depth > 0 => {
                if let Some(Obj::Name(name)) = operands.first() {
                    if let Some(form) = resources.form(name) {
                        interpret(&form, resources, sink, depth - 1);
                    }
                }
            }
            b"BI" => skip_inline_image(&mut lexer),
            _ => {}
        }
        operands.clear();
    }
}

/// Skips an inline image's dictionary and data, up to and with its `EI`.
fn skip_inline_image(lexer: &mut Lexer<'_>) {
    while let Some(token) = lexer.token() {
        if token == Token::Keyword(b"ID") {
            break;
        }
    }
    let data = lexer.data;
    let mut at = lexer.pos + 1;
    while at + 2 <= data.len() {
        let before_ok = at == 0 || super::lexer::is_white(data[at - 1]);
        let after_ok = data.get(at + 2).is_none_or(|b| super::lexer::is_white(*b));
        if &data[at..at + 2] == b"EI" && before_ok && after_ok {
            lexer.pos = at + 2;
            return;
        }
        at += 1;
    }
    lexer.pos = data.len();
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fonts(BTreeMap<String, FontMap>);

    impl Resources for Fonts {
        fn font(&mut self, name: &str) -> FontMap {
            self.0.get(name).cloned().unwrap_or_else(FontMap::latin)
        }
        fn form(&mut self, _name: &str) -> Option<Vec<u8>> {
            None
        }
    }

    #[test]
    fn text_operators_give_lines_and_word_gaps() {
        let content = b"BT /F1 12 Tf 72 700 Td (Hello) Tj [(wor) -20 (ld) -400 (again)] TJ 0 -14 Td (Second line) Tj ET BI /W 2 /H 2 ID \x00EI\xff EI Q";
        let mut sink = TextSink::new(10_000);
        interpret(content, &mut Fonts(BTreeMap::new()), &mut sink, 2);
        assert_eq!(sink.text, "Helloworld again\nSecond line\n");
    }

    #[test]
    fn a_to_unicode_cmap_decodes_two_byte_codes() {
        let cmap = b"/CIDInit /ProcSet findresource begin 1 begincodespacerange <0000> <FFFF> endcodespacerange
            2 beginbfchar <0003> <0020> <0024> <0041> endbfchar
            1 beginbfrange <0044> <0046> <0061> endbfrange
            1 beginbfrange <0050> <0051> [<00E4> <D83DDE00>] endbfrange endcmap";
        let map = parse_cmap(cmap, 10_000);
        assert_eq!(map.code_bytes, 2);
        let mut out = String::new();
        map.decode(
            &[0, 0x24, 0, 0x03, 0, 0x44, 0, 0x46, 0, 0x50, 0, 0x51],
            &mut out,
        );
        assert_eq!(out, "A ac\u{e4}\u{1f600}");
        let mut fonts = BTreeMap::new();
        fonts.insert("F2".to_string(), map);
        let mut sink = TextSink::new(100);
        interpret(
            b"BT /F2 9 Tf <00240044> Tj ET",
            &mut Fonts(fonts),
            &mut sink,
            0,
        );
        assert_eq!(sink.text, "Aa\n");
    }

    #[test]
    fn extraction_stops_at_the_character_cap() {
        let content = b"BT (aaaaaaaaaa) Tj (bbbbbbbbbb) Tj (cccccccccc) Tj ET";
        let mut sink = TextSink::new(15);
        interpret(content, &mut Fonts(BTreeMap::new()), &mut sink, 0);
        assert_eq!(sink.text, "aaaaaaaaaabbbbbbbbbb");
    }
}
