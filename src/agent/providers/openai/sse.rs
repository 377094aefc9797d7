//! Incremental, bounded parser for server-sent events (the `text/event-stream`
//! format chat-completion APIs stream in).
//!
//! It owns only the framing: bytes in, the `data` payload of each complete
//! event out. Lines may end in LF, CRLF or CR and may be split across reads at
//! any byte, including inside a multi-byte UTF-8 character. Comments (`:`) and
//! fields other than `data` are skipped. It never buffers more than
//! `max_event_bytes` for one line or one event, and it knows nothing about the
//! JSON inside the events.

/// The most bytes one SSE line or one event's joined data may hold.
pub const MAX_SSE_EVENT_BYTES: usize = 1024 * 1024;

/// Why a byte stream is not acceptable SSE.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("SSE line longer than {limit_bytes} bytes")]
    LineTooLong { limit_bytes: usize },
    #[error("SSE event data longer than {limit_bytes} bytes")]
    EventTooLong { limit_bytes: usize },
    #[error("SSE line is not valid UTF-8")]
    InvalidUtf8,
}

/// Turns a stream of byte chunks into event payloads, one `feed` at a time.
#[derive(Debug)]
pub struct SseParser {
    /// Bytes of the line being read, not yet terminated.
    line: Vec<u8>,
    /// `data` values of the current event, joined with LF.
    data: String,
    /// Whether the current event has seen a `data` field (it may be empty).
    has_data: bool,
    /// The previous chunk ended in CR, so a leading LF belongs to that line end.
    after_cr: bool,
    max_event_bytes: usize,
}

impl SseParser {
    /// A parser that rejects lines or events longer than `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        SseParser {
            line: Vec::new(),
            data: String::new(),
            has_data: false,
            after_cr: false,
            max_event_bytes,
        }
    }

    /// Consumes `bytes` and returns the data of every event they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<String>, SseError> {
        let mut events = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            match rest.iter().position(|b| *b == b'\n' || *b == b'\r') {
                Some(end) => {
                    self.append_to_line(&rest[..end])?;
                    self.after_cr = rest[end] == b'\r';
                    rest = &rest[end + 1..];
                    if let Some(event) = self.end_line()? {
                        events.push(event);
                    }
                }
                None => {
                    self.append_to_line(rest)?;
                    rest = &[];
                }
            }
        }
        Ok(events)
    }

    /// Called at the end of the byte stream: returns an event whose lines all
    /// arrived but whose closing blank line did not. An unterminated last line
    /// is incomplete and is discarded, as the SSE specification says.
    pub fn finish(&mut self) -> Option<String> {
        self.line.clear();
        self.take_event()
    }

    fn append_to_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > self.max_event_bytes {
            return Err(SseError::LineTooLong {
                limit_bytes: self.max_event_bytes,
            });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// Interprets the completed line; a blank line dispatches the event.
    fn end_line(&mut self) -> Result<Option<String>, SseError> {
        let line = std::mem::take(&mut self.line);
        let line = String::from_utf8(line).map_err(|_| SseError::InvalidUtf8)?;
        if line.is_empty() {
            return Ok(self.take_event());
        }
        if line.starts_with(':') {
            return Ok(None);
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_str(), ""),
        };
        if field == "data" {
            self.append_data(value)?;
        }
        Ok(None)
    }

    fn append_data(&mut self, value: &str) -> Result<(), SseError> {
        let separator_bytes = usize::from(self.has_data);
        if self.data.len() + separator_bytes + value.len() > self.max_event_bytes {
            return Err(SseError::EventTooLong {
                limit_bytes: self.max_event_bytes,
            });
        }
        if self.has_data {
            self.data.push('\n');
        }
        self.data.push_str(value);
        self.has_data = true;
        Ok(())
    }

    fn take_event(&mut self) -> Option<String> {
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(std::mem::take(&mut self.data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces cut at `cuts` and collects every event.
    fn parse_in_pieces(input: &[u8], cuts: &[usize]) -> Vec<String> {
        let mut parser = SseParser::new(MAX_SSE_EVENT_BYTES);
        let mut events = Vec::new();
        let mut start = 0;
        for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
            events.extend(parser.feed(&input[start..cut]).expect("valid SSE"));
            start = cut;
        }
        events.extend(parser.finish());
        events
    }

    #[test]
    fn events_split_on_blank_lines() {
        let events = parse_in_pieces(b"data: one\n\ndata: two\n\n", &[]);
        assert_eq!(events, vec!["one", "two"]);
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        let input = "data: {\"c\":\"h\u{e9}llo \u{1f980}\"}\r\n\r\n: keep-alive\n\ndata: a\ndata: b\r\rdata: [DONE]\n\n";
        let bytes = input.as_bytes();
        let whole = parse_in_pieces(bytes, &[]);
        assert_eq!(
            whole,
            vec!["{\"c\":\"h\u{e9}llo \u{1f980}\"}", "a\nb", "[DONE]"]
        );
        for cut in 1..bytes.len() {
            assert_eq!(parse_in_pieces(bytes, &[cut]), whole, "cut at byte {cut}");
        }
    }

    #[test]
    fn split_inside_a_multibyte_character_is_reassembled() {
        let input = "data: \u{1f980}\n\n".as_bytes();
        // The crab is four bytes starting at offset 6: cut after each of them.
        let events = parse_in_pieces(input, &[7, 8, 9]);
        assert_eq!(events, vec!["\u{1f980}"]);
    }

    #[test]
    fn byte_at_a_time_matches_whole_input() {
        let input = b"data:x\r\ndata:  y\r\n\r\n";
        let cuts: Vec<usize> = (1..input.len()).collect();
        assert_eq!(parse_in_pieces(input, &cuts), vec!["x\n y"]);
    }

    #[test]
    fn comments_and_other_fields_are_ignored() {
        let input = b": ping\nevent: message\nid: 7\nretry: 100\ndata: body\n\nevent: only\n\n";
        assert_eq!(parse_in_pieces(input, &[]), vec!["body"]);
    }

    #[test]
    fn data_field_without_colon_is_an_empty_value() {
        assert_eq!(parse_in_pieces(b"data\ndata: x\n\n", &[]), vec!["\nx"]);
    }

    #[test]
    fn terminated_lines_without_closing_blank_line_are_flushed_at_end() {
        assert_eq!(parse_in_pieces(b"data: [DONE]\n", &[]), vec!["[DONE]"]);
    }

    #[test]
    fn unterminated_last_line_is_discarded_at_end() {
        assert!(parse_in_pieces(b"data: {\"trunc", &[]).is_empty());
    }

    #[test]
    fn overlong_line_is_rejected_before_it_is_buffered() {
        let mut parser = SseParser::new(16);
        parser
            .feed(b"data: 0123456789")
            .expect("exactly at the limit");
        assert_eq!(
            parser.feed(b"X"),
            Err(SseError::LineTooLong { limit_bytes: 16 })
        );
    }

    #[test]
    fn overlong_event_across_lines_is_rejected() {
        let mut parser = SseParser::new(16);
        parser.feed(b"data: 0123456789\n").expect("first line fits");
        assert_eq!(
            parser.feed(b"data: 0123456789\n"),
            Err(SseError::EventTooLong { limit_bytes: 16 })
        );
    }

    #[test]
    fn invalid_utf8_is_rejected() {
        let mut parser = SseParser::new(MAX_SSE_EVENT_BYTES);
        assert_eq!(parser.feed(b"data: \xff\n"), Err(SseError::InvalidUtf8));
    }
}
