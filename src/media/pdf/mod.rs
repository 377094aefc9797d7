//! Text from PDF files, bounded: the file is indexed in one windowed pass
//! (`scan`), pages are taken in document order from the page tree (the
//! first `maxPages`), each page's content streams are inflated one at a time
//! within the document's inflate budget (a compression bomb ends at the
//! budget, not in RAM), and text stops at `maxChars`. Fonts are decoded
//! through their `ToUnicode` CMaps (`text`). Encrypted files are refused;
//! filters other than Flate, ASCIIHex and ASCII85 are skipped.

pub mod lexer;
pub mod scan;
pub mod text;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::Path;

use lexer::{get, Dict, Obj};
use scan::{read_at, Index, StreamRef};
use text::{FontMap, Resources, TextSink};

/// Compressed bytes of one stream read at most (larger streams are skipped).
const MAX_STREAM_BYTES: u64 = 16 * 1024 * 1024;
/// Inflated bytes of one stream at most.
const MAX_INFLATED_STREAM_BYTES: usize = 16 * 1024 * 1024;
/// Codes one font's CMap may map.
const MAX_CMAP_CODES: usize = 70_000;
/// Fonts whose maps are kept while a page is read.
const MAX_FONTS: usize = 64;
/// Levels of form XObjects followed.
const MAX_FORM_DEPTH: usize = 3;
/// Pages of the page tree visited (a hostile tree cannot loop).
const MAX_TREE_NODES: usize = 100_000;

/// Why no text came out; the text is meant for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PdfError {
    #[error("the file is not a PDF")]
    NotPdf,
    #[error("the PDF is encrypted, so its text cannot be read")]
    Encrypted,
    #[error("the PDF could not be read: {0}")]
    Io(String),
}

/// What was extracted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdfText {
    pub text: String,
    pub pages_read: usize,
    pub pages_total: usize,
    /// Text or pages were left out (the caps were reached).
    pub truncated: bool,
}

/// Limits of one extraction.
#[derive(Debug, Clone, Copy)]
pub struct PdfLimits {
    pub max_pages: usize,
    pub max_chars: usize,
    /// Inflated bytes for the whole document.
    pub inflate_bytes: usize,
}

/// Extracts the text of the PDF at `path` (blocking).
pub fn extract(path: &Path, limits: PdfLimits) -> Result<PdfText, PdfError> {
    let file = File::open(path).map_err(|e| PdfError::Io(e.to_string()))?;
    if !read_at(&file, 0, 1024)?.windows(5).any(|w| w == b"%PDF-") {
        return Err(PdfError::NotPdf);
    }
    let mut index = scan::index(&file)?;
    if index.encrypted {
        return Err(PdfError::Encrypted);
    }
    let mut doc = Document {
        file,
        budget: limits.inflate_bytes,
        fonts: HashMap::new(),
        resources: Vec::new(),
        depth_left: MAX_FORM_DEPTH,
    };
    doc.expand_object_streams(&mut index);
    let pages = page_list(&index);
    let mut sink = TextSink::new(limits.max_chars.saturating_add(1));
    let mut pages_read = 0;
    for (page, resources) in pages.iter().take(limits.max_pages) {
        if sink.full() {
            break;
        }
        doc.resources = vec![resources.clone()];
        doc.fonts.clear();
        for content in contents_of(&index, page) {
            if let Some(data) = doc.stream_data(&index, content) {
                text::interpret(
                    &data,
                    &mut DocResources {
                        doc: &mut doc,
                        index: &index,
                    },
                    &mut sink,
                    MAX_FORM_DEPTH,
                );
            }
        }
        pages_read += 1;
        if !sink.text.ends_with("\n\n") && !sink.text.is_empty() {
            sink.text.push('\n');
        }
    }
    let mut text = tidy(&sink.text);
    let mut truncated = pages.len() > pages_read;
    if text.chars().count() > limits.max_chars {
        text = text.chars().take(limits.max_chars).collect();
        truncated = true;
    }
    Ok(PdfText {
        text,
        pages_read,
        pages_total: pages.len(),
        truncated,
    })
}

/// Trims trailing spaces of lines and collapses runs of blank lines.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines() {
        let line = line.trim_end();
        if line.is_empty() {
            blank += 1;
            if blank > 1 {
                continue;
            }
        } else {
            blank = 0;
        }
        out.push_str(line);
        out.push('\n');
    }
    out.trim().to_string()
}

/// The pages in order, each with its (inherited) resources dictionary.
fn page_list(index: &Index) -> Vec<(Dict, Dict)> {
    let mut pages = Vec::new();
    let root = index.root.and_then(|r| index.dict(&Obj::Ref(r)).cloned());
    let tree = root.as_ref().and_then(|r| get(r, "Pages")).cloned();
    if let Some(tree) = tree {
        let mut seen = HashSet::new();
        let mut stack: Vec<(Obj, Option<Obj>)> = vec![(tree, None)];
        let mut visited = 0;
        while let Some((node, inherited)) = stack.pop() {
            visited += 1;
            if visited > MAX_TREE_NODES {
                break;
            }
            if let Obj::Ref(n) = node {
                if !seen.insert(n) {
                    continue;
                }
            }
            let Some(dict) = index.dict(&node) else {
                continue;
            };
            let resources = get(dict, "Resources").cloned().or(inherited);
            match get(dict, "Type").and_then(Obj::as_name) {
                Some("Pages") | None if get(dict, "Kids").is_some() => {
                    if let Some(Obj::Array(kids)) = get(dict, "Kids").map(|k| index.resolve(k)) {
                        for kid in kids.iter().rev() {
                            stack.push((kid.clone(), resources.clone()));
                        }
                    }
                }
                _ => {
                    let resources = resources
                        .as_ref()
                        .and_then(|r| index.dict(r))
                        .cloned()
                        .unwrap_or_default();
                    pages.push((dict.clone(), resources));
                }
            }
        }
    }
    if pages.is_empty() {
        // No page tree found: every page object, by object number.
        let mut numbers: Vec<u32> = index
            .objects
            .iter()
            .filter(|(_, o)| {
                o.as_dict()
                    .and_then(|d| get(d, "Type"))
                    .and_then(Obj::as_name)
                    == Some("Page")
            })
            .map(|(n, _)| *n)
            .collect();
        numbers.sort_unstable();
        for n in numbers {
            if let Some(dict) = index.objects.get(&n).and_then(Obj::as_dict) {
                let resources = get(dict, "Resources")
                    .and_then(|r| index.dict(r))
                    .cloned()
                    .unwrap_or_default();
                pages.push((dict.clone(), resources));
            }
        }
    }
    pages
}

/// A page's content streams, in order.
fn contents_of(index: &Index, page: &Dict) -> Vec<u32> {
    match get(page, "Contents") {
        Some(Obj::Ref(n)) if index.streams.contains_key(n) => vec![*n],
        Some(Obj::Ref(n)) => match index.objects.get(n) {
            Some(Obj::Array(items)) => refs(items),
            _ => Vec::new(),
        },
        Some(Obj::Array(items)) => refs(items),
        _ => Vec::new(),
    }
}

fn refs(items: &[Obj]) -> Vec<u32> {
    items
        .iter()
        .filter_map(|o| match o {
            Obj::Ref(n) => Some(*n),
            _ => None,
        })
        .collect()
}

struct Document {
    file: File,
    /// Inflated bytes still allowed.
    budget: usize,
    fonts: HashMap<String, FontMap>,
    /// The resources in effect (a form's on top of its page's).
    resources: Vec<Dict>,
    depth_left: usize,
}

impl Document {
    /// The decoded data of stream `num`, within the budget.
    fn stream_data(&mut self, index: &Index, num: u32) -> Option<Vec<u8>> {
        let stream = index.streams.get(&num)?;
        self.decode(stream)
    }

    fn decode(&mut self, stream: &StreamRef) -> Option<Vec<u8>> {
        let len = stream.end.saturating_sub(stream.start);
        if len > MAX_STREAM_BYTES || self.budget == 0 {
            return None;
        }
        let mut data = read_at(&self.file, stream.start, len as usize).ok()?;
        let filters: Vec<String> = match get(&stream.dict, "Filter") {
            Some(Obj::Name(n)) => vec![n.clone()],
            Some(Obj::Array(items)) => items
                .iter()
                .filter_map(|i| i.as_name().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        for filter in filters {
            data = match filter.as_str() {
                "FlateDecode" | "Fl" => {
                    let cap = self.budget.min(MAX_INFLATED_STREAM_BYTES);
                    let out =
                        match miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(&data, cap) {
                            Ok(out) => out,
                            // A cut or over-long stream still gives what was inflated.
                            Err(error) => error.output,
                        };
                    self.budget = self.budget.saturating_sub(out.len());
                    out
                }
                "ASCIIHexDecode" | "AHx" => ascii_hex(&data),
                "ASCII85Decode" | "A85" => ascii85(&data),
                _ => return None,
            };
        }
        Some(data)
    }

    /// Inflates every object stream and adds its objects to the index.
    fn expand_object_streams(&mut self, index: &mut Index) {
        let object_streams: Vec<StreamRef> = index
            .streams
            .values()
            .filter(|s| get(&s.dict, "Type").and_then(Obj::as_name) == Some("ObjStm"))
            .cloned()
            .collect();
        for stream in object_streams {
            let Some(data) = self.decode(&stream) else {
                continue;
            };
            let count = get(&stream.dict, "N").and_then(Obj::as_num).unwrap_or(0.0) as usize;
            let first = get(&stream.dict, "First")
                .and_then(Obj::as_num)
                .unwrap_or(0.0) as usize;
            let mut header = lexer::Lexer::new(&data[..first.min(data.len())]);
            let mut entries = Vec::new();
            for _ in 0..count.min(100_000) {
                let (Some(Ok(Obj::Num(num))), Some(Ok(Obj::Num(offset)))) =
                    (header.object(), header.object())
                else {
                    break;
                };
                entries.push((num as u32, first + offset as usize));
            }
            for (i, (num, start)) in entries.iter().enumerate() {
                let end = entries.get(i + 1).map_or(data.len(), |(_, s)| *s);
                if *start >= end || end > data.len() || index.objects.contains_key(num) {
                    continue;
                }
                if let Some(Ok(obj)) = lexer::Lexer::new(&data[*start..end]).object() {
                    index.keep(*num, obj, end - start);
                }
            }
        }
    }

    fn font_map(&mut self, index: &Index, name: &str) -> FontMap {
        if let Some(map) = self.fonts.get(name) {
            return map.clone();
        }
        let font = self
            .resources
            .iter()
            .rev()
            .filter_map(|r| get(r, "Font").and_then(|f| index.dict(f)))
            .find_map(|fonts| get(fonts, name))
            .and_then(|f| index.dict(f))
            .cloned();
        let map = match font {
            None => FontMap::latin(),
            Some(font) => {
                let cmap = get(&font, "ToUnicode")
                    .and_then(|t| match t {
                        Obj::Ref(n) => index.streams.get(n).cloned(),
                        _ => None,
                    })
                    .and_then(|s| self.decode(&s))
                    .map(|data| text::parse_cmap(&data, MAX_CMAP_CODES));
                let composite = get(&font, "Subtype").and_then(Obj::as_name) == Some("Type0");
                match cmap {
                    Some(mut map) => {
                        map.latin = !composite;
                        map
                    }
                    None if composite => FontMap::default(),
                    None => FontMap::latin(),
                }
            }
        };
        if self.fonts.len() < MAX_FONTS {
            self.fonts.insert(name.to_string(), map.clone());
        }
        map
    }
}

/// The interpreter's view of the document.
struct DocResources<'a> {
    doc: &'a mut Document,
    index: &'a Index,
}

impl Resources for DocResources<'_> {
    fn font(&mut self, name: &str) -> FontMap {
        self.doc.font_map(self.index, name)
    }

    fn form(&mut self, name: &str) -> Option<Vec<u8>> {
        if self.doc.depth_left == 0 {
            return None;
        }
        let index = self.index;
        let num = self
            .doc
            .resources
            .iter()
            .rev()
            .filter_map(|r| get(r, "XObject").and_then(|x| index.dict(x)))
            .find_map(|xobjects| match get(xobjects, name) {
                Some(Obj::Ref(n)) => Some(*n),
                _ => None,
            })?;
        let stream = index.streams.get(&num)?;
        if get(&stream.dict, "Subtype").and_then(Obj::as_name) != Some("Form") {
            return None;
        }
        if let Some(resources) = get(&stream.dict, "Resources").and_then(|r| index.dict(r)) {
            // A form's own resources take over for its fonts (kept for the
            // rest of the page: forms rarely rename fonts).
            self.doc.resources.push(resources.clone());
            self.doc.fonts.clear();
        }
        self.doc.depth_left -= 1;
        let data = self.doc.decode(stream);
        self.doc.depth_left += 1;
        data
    }
}

fn ascii_hex(data: &[u8]) -> Vec<u8> {
    let digits: Vec<u8> = data
        .iter()
        .take_while(|&&b| b != b'>')
        .filter_map(|&b| (b as char).to_digit(16).map(|d| d as u8))
        .collect();
    digits
        .chunks(2)
        .map(|p| p[0] << 4 | p.get(1).copied().unwrap_or(0))
        .collect()
}

fn ascii85(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut group = [0u32; 5];
    let mut n = 0;
    for &b in data {
        match b {
            b'~' => break,
            b'z' if n == 0 => out.extend_from_slice(&[0, 0, 0, 0]),
            b'!'..=b'u' => {
                group[n] = u32::from(b - b'!');
                n += 1;
                if n == 5 {
                    let v = group
                        .iter()
                        .fold(0u32, |v, &d| v.wrapping_mul(85).wrapping_add(d));
                    out.extend_from_slice(&v.to_be_bytes());
                    n = 0;
                }
            }
            _ => {}
        }
    }
    if n > 1 {
        for slot in group.iter_mut().skip(n) {
            *slot = 84;
        }
        let v = group
            .iter()
            .fold(0u32, |v, &d| v.wrapping_mul(85).wrapping_add(d));
        out.extend_from_slice(&v.to_be_bytes()[..n - 1]);
    }
    out
}

#[cfg(test)]
mod tests;
