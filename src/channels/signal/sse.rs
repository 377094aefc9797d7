//! A bounded Server-Sent Events reader for signal-cli's `/api/v1/events`
//! (`event:receive`, one `data:` line of JSON, a blank line; `:` keep-alives
//! every 15 s). Bytes are fed as they arrive; a line is never buffered past
//! [`MAX_SSE_LINE_BYTES`] and an event's data never past
//! [`MAX_SSE_EVENT_BYTES`]: an event over either is dropped whole (reported
//! as [`SseItem::Oversized`]) and the reader resumes at the next event.
//!
//! Pure parsing: no I/O, no JSON.

/// Longest line kept (a line past it is skipped to its end).
pub const MAX_SSE_LINE_BYTES: usize = 256 * 1024;
/// Most data bytes of one event.
pub const MAX_SSE_EVENT_BYTES: usize = 256 * 1024;

/// What the reader made of the bytes so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseItem {
    /// A complete event: its `event:` name (if any) and its data lines
    /// joined with `\n`.
    Event { name: Option<String>, data: String },
    /// An event dropped for its size (bytes seen before giving up).
    Oversized { bytes: usize },
}

/// The reader's state between chunks.
#[derive(Debug, Default)]
pub struct SseReader {
    line: Vec<u8>,
    /// The current line went past the cap: skip to its end.
    skipping_line: bool,
    name: Option<String>,
    data: String,
    has_data: bool,
    /// The current event went past a cap: drop it at its end.
    oversized: Option<usize>,
}

impl SseReader {
    /// Feeds `chunk`; complete events are pushed to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseItem>) {
        for &byte in chunk {
            if byte == b'\n' {
                if self.skipping_line {
                    self.skipping_line = false;
                    self.line.clear();
                    continue;
                }
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.end_line(&line, out);
                continue;
            }
            if self.skipping_line {
                continue;
            }
            if self.line.len() >= MAX_SSE_LINE_BYTES {
                let seen = self.data.len() + self.line.len();
                self.oversized = Some(self.oversized.unwrap_or(0).max(seen));
                self.skipping_line = true;
                self.line = Vec::new();
                continue;
            }
            self.line.push(byte);
        }
    }

    fn end_line(&mut self, line: &[u8], out: &mut Vec<SseItem>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(b":") {
            return;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (text.as_ref(), ""),
        };
        match field {
            "event" => self.name = Some(value.to_string()),
            "data" => {
                if self.oversized.is_some() {
                    return;
                }
                let extra = value.len() + usize::from(self.has_data);
                if self.data.len() + extra > MAX_SSE_EVENT_BYTES {
                    self.oversized = Some(self.data.len() + extra);
                    self.data = String::new();
                    return;
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseItem>) {
        let name = self.name.take();
        let data = std::mem::take(&mut self.data);
        let had_data = std::mem::take(&mut self.has_data);
        if let Some(bytes) = self.oversized.take() {
            out.push(SseItem::Oversized { bytes });
            return;
        }
        if had_data || name.is_some() {
            out.push(SseItem::Event { name, data });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(chunks: &[&[u8]]) -> Vec<SseItem> {
        let mut reader = SseReader::default();
        let mut out = Vec::new();
        for chunk in chunks {
            reader.feed(chunk, &mut out);
        }
        out
    }

    #[test]
    fn events_split_across_chunks_and_keep_alives_are_read() {
        let items = read(&[
            b":\nevent:rec",
            b"eive\ndata:{\"a\":1}\r\n\n:\n",
            b"data: one\ndata:two\n\n",
        ]);
        assert_eq!(
            items,
            vec![
                SseItem::Event {
                    name: Some("receive".into()),
                    data: "{\"a\":1}".into()
                },
                SseItem::Event {
                    name: None,
                    data: "one\ntwo".into()
                },
            ]
        );
    }

    #[test]
    fn an_oversized_line_or_event_is_dropped_and_reading_resumes() {
        let mut reader = SseReader::default();
        let mut out = Vec::new();
        let long = vec![b'x'; MAX_SSE_LINE_BYTES + 10];
        reader.feed(b"event:receive\ndata:", &mut out);
        reader.feed(&long, &mut out);
        assert!(
            reader.line.len() <= MAX_SSE_LINE_BYTES,
            "the line stays capped"
        );
        reader.feed(b"\n\nevent:receive\ndata:ok\n\n", &mut out);
        assert!(matches!(out[0], SseItem::Oversized { bytes } if bytes >= MAX_SSE_LINE_BYTES));
        assert_eq!(
            out[1],
            SseItem::Event {
                name: Some("receive".into()),
                data: "ok".into()
            }
        );
        // Many data lines, each within the line cap, past the event cap.
        let mut out = Vec::new();
        let line = format!("data:{}\n", "y".repeat(MAX_SSE_LINE_BYTES / 2));
        for _ in 0..3 {
            reader.feed(line.as_bytes(), &mut out);
        }
        assert!(reader.data.len() <= MAX_SSE_EVENT_BYTES);
        reader.feed(b"\n", &mut out);
        assert!(matches!(out[..], [SseItem::Oversized { .. }]));
    }
}
