//! The agent tools `memory_search` and `memory_get` as JSON-in/JSON-out functions, so the tool layer wraps
//! each in one line. Argument names follow upstream (`query`, `maxResults`, `minScore`; `path`, `from`,
//! `lines`). `memory_get` reads only memory files (what discovery lists), never any other path, and at most
//! `MAX_GET_LINES` lines.
//!
//! This file must not rank, index or embed: it validates arguments, calls `MemoryService`, shapes results.

use std::io::{BufRead, BufReader};

use serde_json::{json, Value};

use super::discovery::MemoryFile;
use super::{MemoryError, MemoryService};

/// Most lines `memory_get` returns in one call.
pub const MAX_GET_LINES: usize = 400;
/// Longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 4096;

/// A tool call that could not be served.
#[derive(Debug, thiserror::Error)]
pub enum MemoryToolError {
    #[error("invalid argument `{field}`: {reason}")]
    InvalidArgument { field: &'static str, reason: String },
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

fn invalid(field: &'static str, reason: impl Into<String>) -> MemoryToolError {
    MemoryToolError::InvalidArgument {
        field,
        reason: reason.into(),
    }
}

fn optional_positive(args: &Value, field: &'static str) -> Result<Option<usize>, MemoryToolError> {
    match args.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(n) if n >= 1 => Ok(Some(n as usize)),
            _ => Err(invalid(field, "must be a whole number ≥ 1")),
        },
    }
}

/// `memory_search { query, maxResults?, minScore? }` → `{ results: [{path, startLine, endLine, snippet,
/// score, …}], mode, fallbackReason? }`.
pub fn search(service: &MemoryService, args: &Value) -> Result<Value, MemoryToolError> {
    let query = args
        .get("query")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|q| !q.is_empty())
        .ok_or_else(|| invalid("query", "a non-empty string is required"))?;
    if query.len() > MAX_QUERY_BYTES {
        return Err(invalid(
            "query",
            format!("longer than {MAX_QUERY_BYTES} bytes"),
        ));
    }
    let max_results = optional_positive(args, "maxResults")?;
    let min_score = match args.get("minScore") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_f64() {
            Some(score) if (0.0..=1.0).contains(&score) => Some(score as f32),
            _ => return Err(invalid("minScore", "must be a number from 0 to 1")),
        },
    };
    let options = service.search_options(max_results, min_score);
    let outcome = service.search_with(query, &options)?;
    Ok(serde_json::to_value(outcome).unwrap_or_else(|_| json!({ "results": [] })))
}

/// `memory_get { path, from?, lines? }` → `{ path, from, to, text }`.
pub fn get(service: &MemoryService, args: &Value) -> Result<Value, MemoryToolError> {
    let path = args
        .get("path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| invalid("path", "a memory file path is required"))?;
    let from = optional_positive(args, "from")?.unwrap_or(1);
    let lines = optional_positive(args, "lines")?;
    let (text, from, to) = service.read_lines(path, from, lines)?;
    Ok(json!({ "path": path, "from": from, "to": to, "text": text }))
}

/// Reads lines of the memory file cited as `path` (or with that absolute path). Returns text, first and last
/// line numbers (last < first when the range is past the end).
pub fn read_memory_lines(
    files: &[MemoryFile],
    path: &str,
    from: usize,
    lines: Option<usize>,
) -> Result<(String, usize, usize), MemoryError> {
    let file = files
        .iter()
        .find(|f| f.cited_path == path || f.absolute.as_os_str() == path)
        .ok_or_else(|| {
            MemoryError::Invalid(format!(
                "`{path}` is not a memory file (MEMORY.md, memory/**/*.md or memorySearch.extraPaths)"
            ))
        })?;
    let count = lines.unwrap_or(MAX_GET_LINES).min(MAX_GET_LINES);
    let io_error = |source| MemoryError::Io {
        path: file.absolute.clone(),
        source,
    };
    let reader = BufReader::new(std::fs::File::open(&file.absolute).map_err(io_error)?);
    let mut text = String::new();
    let mut last = from.saturating_sub(1);
    for (index, line) in reader.lines().enumerate().skip(from - 1).take(count) {
        let line = line.map_err(io_error)?;
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&line);
        last = index + 1;
    }
    Ok((text, from, last))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_line_range_of_a_memory_file_only() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("MEMORY.md");
        std::fs::write(&path, "one\ntwo\nthree\nfour\n").expect("write");
        std::fs::write(dir.path().join("secret.txt"), "no").expect("write");
        let files = vec![MemoryFile {
            absolute: path,
            cited_path: "MEMORY.md".into(),
        }];
        let (text, from, to) = read_memory_lines(&files, "MEMORY.md", 2, Some(2)).expect("read");
        assert_eq!((text.as_str(), from, to), ("two\nthree", 2, 3));
        assert!(read_memory_lines(&files, "secret.txt", 1, None).is_err());
        assert!(read_memory_lines(&files, "../MEMORY.md", 1, None).is_err());
    }
}
