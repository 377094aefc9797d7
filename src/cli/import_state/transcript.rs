//! Reading one OpenClaw JSONL transcript (`<sessionId>.jsonl`: a `{"type":"session"}` header, then
//! `{"type":"message","message":{role, content, …}}` lines and metadata lines) into pincer's
//! transcript entries, streamed: a line is read with a size cap, converted and handed on in batches,
//! so a huge transcript never sits in memory.
//!
//! What pincer's transcript cannot hold (images, thinking blocks, custom messages) is counted, not
//! invented; a line that is not JSON or too long is skipped and named by its line number.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::{json, Value};

use crate::store::TranscriptEntry;

/// Longest transcript line read: 4 MiB (longer ones, usually inline images, are skipped and reported).
pub const MAX_TRANSCRIPT_LINE_BYTES: usize = 4 * 1024 * 1024;
/// Entries written per store transaction.
pub const TRANSCRIPT_BATCH_ENTRIES: usize = 256;
/// Entry ids remembered to place a compaction's first kept entry.
const REMEMBERED_ENTRY_IDS: usize = 4_096;
/// Problem lines named in the report per transcript; the rest are counted.
const NAMED_PROBLEMS: usize = 3;

/// What reading a transcript found besides its entries.
#[derive(Debug, Default)]
pub struct TranscriptSummary {
    pub entries: u64,
    /// Parts and lines pincer has no place for (images, thinking, custom messages).
    pub dropped_parts: u64,
    /// `line N: why` for the first unreadable lines, and how many there were.
    pub problems: Vec<String>,
    pub problem_count: u64,
}

impl TranscriptSummary {
    fn problem(&mut self, line: u64, why: String) {
        self.problem_count += 1;
        if self.problems.len() < NAMED_PROBLEMS {
            self.problems.push(format!("line {line}: {why}"));
        }
    }
}

/// Where converted entries go: the store, a batch at a time.
pub type EntrySink<'a> = dyn FnMut(&[TranscriptEntry]) -> Result<(), String> + 'a;

/// Converts a transcript's lines, in order, and hands the entries to a sink in batches of
/// `TRANSCRIPT_BATCH_ENTRIES`. The lines come from a JSONL file or from OpenClaw's SQLite rows.
pub struct TranscriptImport<'s, 'a> {
    sink: &'s mut EntrySink<'a>,
    summary: TranscriptSummary,
    converter: Converter,
    batch: Vec<TranscriptEntry>,
    number: u64,
}

impl<'s, 'a> TranscriptImport<'s, 'a> {
    pub fn new(sink: &'s mut EntrySink<'a>) -> Self {
        TranscriptImport {
            sink,
            summary: TranscriptSummary::default(),
            converter: Converter::default(),
            batch: Vec::with_capacity(TRANSCRIPT_BATCH_ENTRIES),
            number: 0,
        }
    }

    /// The next line's bytes, or `Err(why)` for a line that could not be read (it is counted).
    pub fn push(&mut self, line: Result<&[u8], String>) -> Result<(), String> {
        self.number += 1;
        let line = match line {
            Ok(line) => line,
            Err(why) => {
                self.summary.problem(self.number, why);
                return Ok(());
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let value: Value = match serde_json::from_slice(line) {
            Ok(value) => value,
            Err(e) => {
                self.summary
                    .problem(self.number, format!("not JSON ({e}), skipped"));
                return Ok(());
            }
        };
        let next_seq = self.summary.entries + self.batch.len() as u64 + 1;
        match self.converter.convert(&value, next_seq) {
            Converted::Entry(entry, dropped) => {
                self.summary.dropped_parts += dropped;
                self.batch.push(entry);
            }
            Converted::Nothing => {}
            Converted::Dropped => self.summary.dropped_parts += 1,
            Converted::Bad(why) => self.summary.problem(self.number, why),
        }
        if self.batch.len() >= TRANSCRIPT_BATCH_ENTRIES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), String> {
        if !self.batch.is_empty() {
            (self.sink)(&self.batch)?;
            self.summary.entries += self.batch.len() as u64;
            self.batch.clear();
        }
        Ok(())
    }

    /// Writes the last batch and returns what was found.
    pub fn finish(mut self) -> Result<TranscriptSummary, String> {
        self.flush()?;
        Ok(self.summary)
    }
}

/// Streams the JSONL file at `path` through `import`. An I/O error stops the read and is returned.
pub fn read_jsonl(path: &Path, import: &mut TranscriptImport<'_, '_>) -> Result<(), String> {
    let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    loop {
        let fits = read_capped_line(&mut reader, &mut line, MAX_TRANSCRIPT_LINE_BYTES)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        match fits {
            None => return Ok(()),
            Some(true) => import.push(Ok(&line))?,
            Some(false) => import.push(Err(format!(
                "longer than {MAX_TRANSCRIPT_LINE_BYTES} bytes, skipped"
            )))?,
        }
    }
}

/// Reads one line (without its `\n`) into `buf`, keeping at most `cap` bytes. `None` at the end of the
/// input, `Some(false)` when the line was longer than `cap` (it is consumed, `buf` is left empty).
pub fn read_capped_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut fits = true;
    let mut read_any = false;
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return Ok(read_any.then_some(fits));
        }
        read_any = true;
        let newline = available.iter().position(|b| *b == b'\n');
        let chunk = &available[..newline.unwrap_or(available.len())];
        if fits && buf.len() + chunk.len() > cap {
            fits = false;
            buf.clear();
        } else if fits {
            buf.extend_from_slice(chunk);
        }
        let used = newline.map_or(available.len(), |at| at + 1);
        reader.consume(used);
        if newline.is_some() {
            return Ok(Some(fits));
        }
    }
}

enum Converted {
    /// An entry, and how many of its parts had no place.
    Entry(TranscriptEntry, u64),
    /// A line pincer keeps nothing of by design (the header, model or label changes).
    Nothing,
    /// A message pincer's transcript cannot hold.
    Dropped,
    Bad(String),
}

/// Converts lines in order; remembers recent entry ids so a compaction can point at its first kept one.
#[derive(Default)]
struct Converter {
    seq_of_id: HashMap<String, u64>,
    id_order: VecDeque<String>,
}

impl Converter {
    fn convert(&mut self, line: &Value, next_seq: u64) -> Converted {
        let converted = match line["type"].as_str() {
            Some("message") => message(line),
            Some("compaction") => self.compaction(line, next_seq),
            Some(_) => Converted::Nothing,
            None => Converted::Bad("no \"type\" field, skipped".into()),
        };
        if let (Converted::Entry(..), Some(id)) = (&converted, line["id"].as_str()) {
            self.remember(id, next_seq);
        }
        converted
    }

    fn remember(&mut self, id: &str, seq: u64) {
        if self.id_order.len() >= REMEMBERED_ENTRY_IDS {
            if let Some(old) = self.id_order.pop_front() {
                self.seq_of_id.remove(&old);
            }
        }
        self.id_order.push_back(id.to_string());
        self.seq_of_id.insert(id.to_string(), seq);
    }

    /// A compaction becomes pincer's summary entry; its first kept entry is found by id when it is
    /// recent enough, else only the entries after the summary are kept.
    fn compaction(&self, line: &Value, next_seq: u64) -> Converted {
        let Some(summary) = line["summary"].as_str() else {
            return Converted::Bad("compaction without a summary, skipped".into());
        };
        let first_kept = line["firstKeptEntryId"]
            .as_str()
            .and_then(|id| self.seq_of_id.get(id).copied())
            .unwrap_or(next_seq + 1);
        let entry = TranscriptEntry {
            role: "system".into(),
            text: summary.to_string(),
            timestamp_ms: line_time(line, &Value::Null),
            extra_json: Some(
                json!({
                    "type": "compaction",
                    "firstKeptSeq": first_kept,
                    "tokensBefore": line["tokensBefore"].as_u64().unwrap_or(0),
                    "reason": "imported",
                })
                .to_string(),
            ),
            ..TranscriptEntry::default()
        };
        Converted::Entry(entry, 0)
    }
}

fn message(line: &Value) -> Converted {
    let message = &line["message"];
    let role = message["role"].as_str().unwrap_or_default();
    let timestamp_ms = line_time(line, message);
    match role {
        "user" => {
            let (text, _, dropped) = parts(&message["content"]);
            Converted::Entry(
                TranscriptEntry {
                    role: "user".into(),
                    text,
                    timestamp_ms,
                    ..TranscriptEntry::default()
                },
                dropped,
            )
        }
        "assistant" => {
            let (text, calls, dropped) = parts(&message["content"]);
            let usage = &message["usage"];
            let extra = (!calls.is_empty()).then(|| json!({ "toolCalls": calls }).to_string());
            Converted::Entry(
                TranscriptEntry {
                    role: "assistant".into(),
                    text,
                    timestamp_ms,
                    stop_reason: message["stopReason"].as_str().map(str::to_string),
                    input_tokens: usage["input"].as_u64(),
                    output_tokens: usage["output"].as_u64(),
                    extra_json: extra,
                    ..TranscriptEntry::default()
                },
                dropped,
            )
        }
        "toolResult" => {
            let Some(call_id) = message["toolCallId"].as_str() else {
                return Converted::Bad("toolResult without toolCallId, skipped".into());
            };
            let (text, _, dropped) = parts(&message["content"]);
            let extra = json!({
                "toolCallId": call_id,
                "toolName": message["toolName"],
                "isError": message["isError"].as_bool().unwrap_or(false),
            });
            Converted::Entry(
                TranscriptEntry {
                    role: "tool".into(),
                    text,
                    timestamp_ms,
                    extra_json: Some(extra.to_string()),
                    ..TranscriptEntry::default()
                },
                dropped,
            )
        }
        "" => Converted::Bad("message without a role, skipped".into()),
        _ => Converted::Dropped,
    }
}

/// The text of a content (a string, or parts), the tool calls among the parts (pincer's
/// `{id, name, arguments: <JSON text>}`), and how many parts had no place (images, thinking).
fn parts(content: &Value) -> (String, Vec<Value>, u64) {
    let Some(items) = content.as_array() else {
        return (content.as_str().unwrap_or_default().to_string(), vec![], 0);
    };
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    let mut dropped = 0;
    for part in items {
        match part["type"].as_str() {
            Some("text") => texts.push(part["text"].as_str().unwrap_or_default()),
            Some("toolCall") | Some("tool_use") => {
                let arguments = match part.get("arguments").or_else(|| part.get("input")) {
                    Some(Value::String(text)) => text.clone(),
                    Some(other) => other.to_string(),
                    None => "{}".into(),
                };
                calls.push(json!({"id": part["id"], "name": part["name"], "arguments": arguments}));
            }
            _ => dropped += 1,
        }
    }
    (texts.join("\n"), calls, dropped)
}

/// The message's own time in ms, else the line's ISO-8601 time, else 0.
fn line_time(line: &Value, message: &Value) -> u64 {
    if let Some(ms) = message["timestamp"].as_u64() {
        return ms;
    }
    line["timestamp"]
        .as_str()
        .and_then(|iso| iso.parse::<jiff::Timestamp>().ok())
        .and_then(|t| u64::try_from(t.as_millisecond()).ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_line_is_consumed_whole_and_reported() {
        let mut input: &[u8] = b"short\nthis one is too long\nok";
        let mut buf = Vec::new();
        assert_eq!(
            read_capped_line(&mut input, &mut buf, 8).unwrap(),
            Some(true)
        );
        assert_eq!(buf, b"short");
        assert_eq!(
            read_capped_line(&mut input, &mut buf, 8).unwrap(),
            Some(false)
        );
        assert!(buf.is_empty());
        assert_eq!(
            read_capped_line(&mut input, &mut buf, 8).unwrap(),
            Some(true)
        );
        assert_eq!(buf, b"ok");
        assert_eq!(read_capped_line(&mut input, &mut buf, 8).unwrap(), None);
    }

    #[test]
    fn tool_rounds_keep_their_ids_and_images_are_counted() {
        let mut converter = Converter::default();
        let call = json!({"type": "message", "id": "a1", "message": {"role": "assistant",
            "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "reading"},
                        {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "x"}}],
            "usage": {"input": 5, "output": 7}, "stopReason": "toolUse", "timestamp": 42}});
        let Converted::Entry(entry, dropped) = converter.convert(&call, 1) else {
            panic!("assistant message not converted")
        };
        assert_eq!(
            (entry.role.as_str(), entry.text.as_str(), dropped),
            ("assistant", "reading", 1)
        );
        assert_eq!(
            (entry.input_tokens, entry.output_tokens, entry.timestamp_ms),
            (Some(5), Some(7), 42)
        );
        let extra: Value = serde_json::from_str(entry.extra_json.as_deref().unwrap()).unwrap();
        assert_eq!(extra["toolCalls"][0]["arguments"], "{\"path\":\"x\"}");
        let result = json!({"type": "message", "timestamp": "2026-01-02T03:04:05Z", "message": {"role": "toolResult",
            "toolCallId": "c1", "toolName": "read", "isError": false, "content": [{"type": "text", "text": "data"}]}});
        let Converted::Entry(tool, _) = converter.convert(&result, 2) else {
            panic!("tool result not converted")
        };
        assert_eq!((tool.role.as_str(), tool.text.as_str()), ("tool", "data"));
        assert_eq!(tool.timestamp_ms, 1_767_323_045_000);
        let compaction = json!({"type": "compaction", "summary": "so far", "firstKeptEntryId": "a1", "tokensBefore": 900});
        let Converted::Entry(summary, _) = converter.convert(&compaction, 3) else {
            panic!("compaction not converted")
        };
        let extra: Value = serde_json::from_str(summary.extra_json.as_deref().unwrap()).unwrap();
        assert_eq!(
            (extra["type"].as_str(), extra["firstKeptSeq"].as_u64()),
            (Some("compaction"), Some(1))
        );
    }
}
