//! The object index of a PDF file, built by one pass over the file with a
//! fixed window (never the whole file in memory): every `n g obj` is parsed
//! up to its `stream` or `endobj`; a stream's data is located (by its direct
//! `/Length`, else by searching `endstream`) and skipped, not read. Small
//! objects are kept (bounded in count and bytes); object streams
//! (`/Type /ObjStm`) are inflated later and add their objects. The trailer's
//! (or cross-reference stream's) `/Root` and `/Encrypt` are noted.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

use super::lexer::{find, get, is_white, Dict, Lexer, Obj};
use super::PdfError;

/// Bytes read per step of the scan.
const WINDOW_BYTES: usize = 256 * 1024;
/// The most bytes of one object (before its stream) parsed.
const MAX_OBJECT_BYTES: usize = 64 * 1024;
/// Objects kept in the index.
const MAX_OBJECTS: usize = 200_000;
/// Bytes of kept objects (a rough count of their parsed size).
const MAX_KEPT_BYTES: usize = 16 * 1024 * 1024;

/// Where a stream's data is.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamRef {
    pub dict: Dict,
    pub start: u64,
    pub end: u64,
}

/// The objects of one file.
#[derive(Debug, Default)]
pub struct Index {
    pub objects: HashMap<u32, Obj>,
    pub streams: HashMap<u32, StreamRef>,
    pub root: Option<u32>,
    pub encrypted: bool,
    kept_bytes: usize,
}

impl Index {
    /// Keeps `obj` as object `num` unless the index is full.
    pub fn keep(&mut self, num: u32, obj: Obj, approx_bytes: usize) {
        if self.objects.len() + self.streams.len() >= MAX_OBJECTS
            || self.kept_bytes + approx_bytes > MAX_KEPT_BYTES
        {
            return;
        }
        self.kept_bytes += approx_bytes;
        self.objects.insert(num, obj);
    }

    /// Follows a reference (once; a chain of references is not followed).
    pub fn resolve<'a>(&'a self, obj: &'a Obj) -> &'a Obj {
        match obj {
            Obj::Ref(n) => self
                .objects
                .get(n)
                .or_else(|| self.streams.get(n).map(|_| &Obj::Null))
                .unwrap_or(&Obj::Null),
            other => other,
        }
    }

    /// The dictionary `obj` is or refers to (a stream's dictionary too).
    pub fn dict<'a>(&'a self, obj: &'a Obj) -> Option<&'a Dict> {
        match obj {
            Obj::Ref(n) => self
                .objects
                .get(n)
                .and_then(Obj::as_dict)
                .or_else(|| self.streams.get(n).map(|s| &s.dict)),
            Obj::Dict(d) => Some(d),
            _ => None,
        }
    }

    fn note_trailer(&mut self, dict: &Dict) {
        if let Some(Obj::Ref(root)) = get(dict, "Root") {
            self.root = Some(*root);
        }
        if get(dict, "Encrypt").is_some_and(|e| *e != Obj::Null) {
            self.encrypted = true;
        }
    }
}

/// Reads `len` bytes at `offset` (fewer at the end of the file).
pub fn read_at(file: &File, offset: u64, len: usize) -> Result<Vec<u8>, PdfError> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(PdfError::Io(e.to_string())),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// The first position of `needle` at or after `from` in the file, searched a
/// window at a time.
fn find_in_file(file: &File, len: u64, needle: &[u8], from: u64) -> Result<Option<u64>, PdfError> {
    let mut offset = from;
    while offset < len {
        let window = read_at(file, offset, WINDOW_BYTES)?;
        if let Some(p) = find(&window, needle, 0) {
            return Ok(Some(offset + p as u64));
        }
        if window.len() < WINDOW_BYTES {
            return Ok(None);
        }
        offset += (WINDOW_BYTES - needle.len()) as u64;
    }
    Ok(None)
}

/// Whether `window[at..]` begins `n g obj` at a token boundary; returns the
/// object number and where its body starts.
fn object_header(window: &[u8], at: usize) -> Option<(u32, usize)> {
    if at > 0 && !is_white(window[at - 1]) {
        return None;
    }
    let mut lexer = Lexer::new(&window[at..]);
    let num = match lexer.token()? {
        super::lexer::Token::Num(n) if n >= 0.0 && n.fract() == 0.0 => n as u32,
        _ => return None,
    };
    match lexer.token()? {
        super::lexer::Token::Num(g) if g >= 0.0 && g.fract() == 0.0 => {}
        _ => return None,
    }
    match lexer.token()? {
        super::lexer::Token::Keyword(b"obj") => Some((num, at + lexer.pos)),
        _ => None,
    }
}

/// A window of the file kept in memory, refilled as the scan moves on.
struct Window<'f> {
    file: &'f File,
    len: u64,
    start: u64,
    buf: Vec<u8>,
}

impl<'f> Window<'f> {
    /// Up to `want` bytes at `at` (fewer at the end of the file).
    fn slice(&mut self, at: u64, want: usize) -> Result<&[u8], PdfError> {
        let end = at.saturating_add(want as u64).min(self.len);
        let held = self.start + self.buf.len() as u64;
        if at < self.start || end > held {
            self.buf = read_at(self.file, at, want.max(WINDOW_BYTES))?;
            self.start = at;
        }
        let from = (at - self.start) as usize;
        let to = ((end - self.start) as usize).min(self.buf.len()).max(from);
        Ok(&self.buf[from..to])
    }
}

/// Indexes the file (blocking).
pub fn index(file: &File) -> Result<Index, PdfError> {
    let len = file
        .metadata()
        .map_err(|e| PdfError::Io(e.to_string()))?
        .len();
    let mut index = Index::default();
    let mut window = Window {
        file,
        len,
        start: 0,
        buf: Vec::new(),
    };
    let mut offset: u64 = 0;
    while offset < len {
        let view = window.slice(offset, WINDOW_BYTES)?;
        if view.is_empty() {
            break;
        }
        // The next `obj` or `trailer` keyword in this window.
        let next_obj = find(view, b"obj", 0);
        let next_trailer = find(view, b"trailer", 0);
        let Some(hit) = [next_obj, next_trailer].into_iter().flatten().min() else {
            if view.len() < WINDOW_BYTES {
                break;
            }
            offset += (WINDOW_BYTES - 64) as u64;
            continue;
        };
        if Some(hit) == next_trailer {
            let body = window.slice(offset + hit as u64 + 7, MAX_OBJECT_BYTES)?;
            if let Some(Ok(Obj::Dict(dict))) = Lexer::new(body).object() {
                index.note_trailer(&dict);
            }
            offset += hit as u64 + 7;
            continue;
        }
        // Look back for `n g ` before `obj` (at most 24 bytes).
        let back = hit.saturating_sub(24);
        let header = (back..hit).find_map(|start| {
            object_header(&view[..hit + 3], start).filter(|(_, body)| *body == hit + 3)
        });
        let Some((num, body_at)) = header else {
            offset += hit as u64 + 3;
            continue;
        };
        offset += body_at as u64;
        offset = read_object(&mut window, &mut index, num, offset)?;
    }
    Ok(index)
}

/// Parses the object whose body starts at `at`; returns where scanning goes on.
fn read_object(
    window: &mut Window<'_>,
    index: &mut Index,
    num: u32,
    at: u64,
) -> Result<u64, PdfError> {
    let (file, len) = (window.file, window.len);
    let body = window.slice(at, MAX_OBJECT_BYTES)?;
    let mut lexer = Lexer::new(body);
    let Some(Ok(obj)) = lexer.object() else {
        return Ok(at + 1);
    };
    let parsed_end = lexer.pos;
    let keyword = lexer.object();
    if keyword != Some(Err(&b"stream"[..])) {
        if let Obj::Dict(dict) = &obj {
            if get(dict, "Type").and_then(Obj::as_name) == Some("XRef") {
                index.note_trailer(dict);
            }
        }
        let next = at + lexer.pos.max(1) as u64;
        index.keep(num, obj, parsed_end + 16);
        return Ok(next);
    }
    let Obj::Dict(dict) = obj else {
        return Ok(at + lexer.pos as u64);
    };
    // Stream data starts after the end of line following `stream`.
    let mut data = lexer.pos;
    if body.get(data) == Some(&b'\r') {
        data += 1;
    }
    if body.get(data) == Some(&b'\n') {
        data += 1;
    }
    let start = at + data as u64;
    let declared = get(&dict, "Length").and_then(Obj::as_num).map(|n| n as u64);
    let end = match declared {
        Some(n) if start + n <= len && ends_stream(file, start + n)? => start + n,
        _ => match find_in_file(file, len, b"endstream", start)? {
            Some(end) => end,
            None => len,
        },
    };
    if get(&dict, "Type").and_then(Obj::as_name) == Some("XRef") {
        index.note_trailer(&dict);
    }
    if index.streams.len() + index.objects.len() < MAX_OBJECTS {
        index.streams.insert(num, StreamRef { dict, start, end });
    }
    Ok(end.max(at + 1))
}

/// Whether `endstream` follows `at` (after optional white space).
fn ends_stream(file: &File, at: u64) -> Result<bool, PdfError> {
    let tail = read_at(file, at, 32)?;
    let skip = tail.iter().take_while(|b| is_white(**b)).count();
    Ok(tail[skip..].starts_with(b"endstream"))
}
