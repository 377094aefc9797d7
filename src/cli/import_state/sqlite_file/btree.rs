//! Reading SQLite's b-trees: the database file's pages (the newest committed copy from the write-ahead
//! log when there is one), cells and their overflow chains, a whole table in rowid order, one row by its
//! rowid, and the entries of an index whose first column equals a text key, in index order.
//!
//! Every read is bounded: a payload larger than `MAX_PAYLOAD_BYTES`, a tree deeper than `MAX_DEPTH` (a
//! loop in a corrupt file) or a page number past the end of the database is an error naming the page.
//! This file must not know tables' columns; `mod.rs` maps them.

use std::cmp::Ordering;
use std::fs::File;
use std::os::unix::fs::FileExt;

use super::record::{self, varint, Value};
use super::wal::WalIndex;

/// Largest row or index entry read (OpenClaw's transcript events are at most 4 MiB).
pub const MAX_PAYLOAD_BYTES: usize = 16 * 1024 * 1024;
/// Deepest b-tree walked; a real one of a few GB is under ten levels.
const MAX_DEPTH: usize = 32;

const INDEX_INTERIOR: u8 = 0x02;
const TABLE_INTERIOR: u8 = 0x05;
const INDEX_LEAF: u8 = 0x0a;
const TABLE_LEAF: u8 = 0x0d;

/// Whether a walk goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Stop,
}

/// The pages of one database: its file and its write-ahead log's committed frames.
pub struct Pages {
    pub file: File,
    pub wal: Option<(File, WalIndex)>,
    pub page_size: usize,
    /// Page size less the bytes reserved at the end of each page.
    pub usable: usize,
    pub page_count: u32,
}

fn be16(bytes: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([bytes[at], bytes[at + 1]]))
}

pub(super) fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

impl Pages {
    /// Page `number` (1-based).
    pub fn read(&self, number: u32) -> Result<Vec<u8>, String> {
        if number == 0 || number > self.page_count {
            return Err(format!(
                "page {number} is outside the database ({} pages)",
                self.page_count
            ));
        }
        let mut page = vec![0u8; self.page_size];
        let logged = self
            .wal
            .as_ref()
            .and_then(|(file, index)| Some((file, *index.pages.get(&number)?)));
        let read = match logged {
            Some((file, offset)) => file.read_exact_at(&mut page, offset),
            None => self
                .file
                .read_exact_at(&mut page, u64::from(number - 1) * self.page_size as u64),
        };
        read.map_err(|e| format!("cannot read page {number}: {e}"))?;
        Ok(page)
    }

    /// Bytes of a payload of `size` kept on the b-tree page itself (the rest is in overflow pages).
    fn local_len(&self, size: usize, index: bool) -> usize {
        let usable = self.usable;
        let max_local = if index {
            (usable - 12) * 64 / 255 - 23
        } else {
            usable - 35
        };
        if size <= max_local {
            return size;
        }
        let min_local = (usable - 12) * 32 / 255 - 23;
        let spilled = min_local + (size - min_local) % (usable - 4);
        if spilled <= max_local {
            spilled
        } else {
            min_local
        }
    }

    /// The payload whose size varint starts at `at` on `page`, with its overflow pages.
    fn payload(&self, page: &[u8], at: usize, index: bool) -> Result<Vec<u8>, String> {
        let (size, used) = varint(page.get(at..).unwrap_or_default()).ok_or("truncated cell")?;
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        if size > MAX_PAYLOAD_BYTES {
            return Err(format!(
                "a row of {size} bytes (more than {MAX_PAYLOAD_BYTES})"
            ));
        }
        self.payload_sized(page, at + used, size, index)
    }

    /// A payload of `size` bytes whose local part starts at `start`, with its overflow pages.
    fn payload_sized(
        &self,
        page: &[u8],
        start: usize,
        size: usize,
        index: bool,
    ) -> Result<Vec<u8>, String> {
        let local = self.local_len(size, index);
        let mut out = Vec::with_capacity(size);
        out.extend_from_slice(page.get(start..start + local).ok_or("cell past its page")?);
        if local == size {
            return Ok(out);
        }
        let mut next = be32(
            page.get(start + local..start + local + 4)
                .ok_or("cell past its page")?,
            0,
        );
        let per_page = self.usable - 4;
        let mut budget = (size - local).div_ceil(per_page);
        while out.len() < size {
            if budget == 0 || next == 0 {
                return Err("an overflow chain shorter than its row".into());
            }
            budget -= 1;
            let overflow = self.read(next)?;
            let take = per_page.min(size - out.len());
            out.extend_from_slice(&overflow[4..4 + take]);
            next = be32(&overflow, 0);
        }
        Ok(out)
    }
}

/// One b-tree page's header.
struct Node<'p> {
    page: &'p [u8],
    kind: u8,
    cells: usize,
    /// Where the cell pointer array starts.
    pointers: usize,
    right: u32,
}

impl<'p> Node<'p> {
    fn parse(page: &'p [u8], number: u32) -> Result<Node<'p>, String> {
        let header = if number == 1 { 100 } else { 0 };
        let kind = page[header];
        let interior = match kind {
            INDEX_INTERIOR | TABLE_INTERIOR => true,
            INDEX_LEAF | TABLE_LEAF => false,
            other => {
                return Err(format!(
                    "page {number} is not a b-tree page (type {other:#04x})"
                ))
            }
        };
        let node = Node {
            page,
            kind,
            cells: be16(page, header + 3),
            pointers: header + if interior { 12 } else { 8 },
            right: if interior { be32(page, header + 8) } else { 0 },
        };
        if node.pointers + 2 * node.cells > page.len() {
            return Err(format!("page {number} claims more cells than it holds"));
        }
        Ok(node)
    }

    fn cell(&self, index: usize) -> usize {
        be16(self.page, self.pointers + 2 * index)
    }
}

fn too_deep(depth: usize) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("a b-tree deeper than {MAX_DEPTH} levels (a loop?)"));
    }
    Ok(())
}

/// Every row of the table rooted at `root`, in rowid order: `visit(rowid, record)`.
pub fn scan_table(
    pages: &Pages,
    root: u32,
    visit: &mut dyn FnMut(i64, Vec<u8>) -> Result<Flow, String>,
) -> Result<Flow, String> {
    scan_table_at(pages, root, 0, visit)
}

fn scan_table_at(
    pages: &Pages,
    number: u32,
    depth: usize,
    visit: &mut dyn FnMut(i64, Vec<u8>) -> Result<Flow, String>,
) -> Result<Flow, String> {
    too_deep(depth)?;
    let page = pages.read(number)?;
    let node = Node::parse(&page, number)?;
    for index in 0..node.cells {
        let at = node.cell(index);
        let flow = match node.kind {
            TABLE_LEAF => {
                let (rowid, payload) = table_leaf_cell(pages, &page, at)?;
                visit(rowid, payload)?
            }
            TABLE_INTERIOR => scan_table_at(pages, be32(&page, at), depth + 1, visit)?,
            _ => return Err(format!("page {number} is an index page inside a table")),
        };
        if flow == Flow::Stop {
            return Ok(Flow::Stop);
        }
    }
    if node.kind == TABLE_INTERIOR {
        return scan_table_at(pages, node.right, depth + 1, visit);
    }
    Ok(Flow::Continue)
}

/// A table leaf cell at `at`: its rowid and record.
fn table_leaf_cell(pages: &Pages, page: &[u8], at: usize) -> Result<(i64, Vec<u8>), String> {
    let (size, size_len) = varint(page.get(at..).unwrap_or_default()).ok_or("truncated cell")?;
    let (rowid, rowid_len) =
        varint(page.get(at + size_len..).unwrap_or_default()).ok_or("truncated cell")?;
    let size = usize::try_from(size).unwrap_or(usize::MAX);
    if size > MAX_PAYLOAD_BYTES {
        return Err(format!(
            "a row of {size} bytes (more than {MAX_PAYLOAD_BYTES})"
        ));
    }
    let payload = pages.payload_sized(page, at + size_len + rowid_len, size, false)?;
    Ok((rowid as i64, payload))
}

/// The record of the row with `rowid` in the table rooted at `root`.
pub fn find_row(pages: &Pages, root: u32, rowid: i64) -> Result<Option<Vec<u8>>, String> {
    let mut number = root;
    for _ in 0..=MAX_DEPTH {
        let page = pages.read(number)?;
        let node = Node::parse(&page, number)?;
        if node.kind == TABLE_LEAF {
            for index in 0..node.cells {
                let (found, payload) = table_leaf_cell(pages, &page, node.cell(index))?;
                if found == rowid {
                    return Ok(Some(payload));
                }
            }
            return Ok(None);
        }
        if node.kind != TABLE_INTERIOR {
            return Err(format!("page {number} is an index page inside a table"));
        }
        number = node.right;
        for index in 0..node.cells {
            let at = node.cell(index);
            let (key, _) =
                varint(page.get(at + 4..).unwrap_or_default()).ok_or("truncated cell")?;
            if rowid <= key as i64 {
                number = be32(&page, at);
                break;
            }
        }
    }
    too_deep(MAX_DEPTH + 1).map(|()| None)
}

/// How an index entry's first value sorts against a text key (BINARY collation; SQLite sorts NULL and
/// numbers before text, blobs after).
fn against(first: Option<&Value>, key: &str) -> Ordering {
    match first {
        Some(Value::Text(text)) => text.as_bytes().cmp(key.as_bytes()),
        Some(Value::Blob(_)) => Ordering::Greater,
        _ => Ordering::Less,
    }
}

/// The entries of the index rooted at `root` whose first column is `key`, in index order.
pub fn index_equal(
    pages: &Pages,
    root: u32,
    key: &str,
    visit: &mut dyn FnMut(Vec<Value>) -> Result<Flow, String>,
) -> Result<Flow, String> {
    index_equal_at(pages, root, key, 0, visit)
}

fn index_equal_at(
    pages: &Pages,
    number: u32,
    key: &str,
    depth: usize,
    visit: &mut dyn FnMut(Vec<Value>) -> Result<Flow, String>,
) -> Result<Flow, String> {
    too_deep(depth)?;
    let page = pages.read(number)?;
    let node = Node::parse(&page, number)?;
    let interior = match node.kind {
        INDEX_INTERIOR => true,
        INDEX_LEAF => false,
        _ => return Err(format!("page {number} is a table page inside an index")),
    };
    for index in 0..node.cells {
        let at = node.cell(index);
        let start = if interior { at + 4 } else { at };
        let entry = record::decode(&pages.payload(&page, start, true)?)?;
        let order = against(entry.first(), key);
        if order == Ordering::Less {
            continue;
        }
        if interior && index_equal_at(pages, be32(&page, at), key, depth + 1, visit)? == Flow::Stop
        {
            return Ok(Flow::Stop);
        }
        if order == Ordering::Greater || visit(entry)? == Flow::Stop {
            return Ok(Flow::Stop);
        }
    }
    if interior {
        return index_equal_at(pages, node.right, key, depth + 1, visit);
    }
    Ok(Flow::Continue)
}
