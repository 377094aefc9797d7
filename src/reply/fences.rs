//! Markdown code-fence spans inside a reply buffer (``` and ~~~ fences, up to
//! three spaces of indent, closers at least as long as their opener).
//!
//! Owns only the parsing of fence spans and the "is this position inside a
//! fence" question the block chunker asks; it must not decide where to break.

/// One fenced code block, by byte offsets into the buffer it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FenceSpan {
    /// Offset of the first byte of the opening fence line.
    pub start: usize,
    /// Offset just after the opening line's newline (where the code begins).
    pub content_start: usize,
    /// Offset of the end of the closing fence line (before its newline), or
    /// `None` while the fence is still open at the end of the buffer.
    pub end: Option<usize>,
    /// The opening line as written, e.g. "```rust".
    pub open_line: String,
    /// The line that closes this fence: indent plus the opening marker.
    pub close_line: String,
}

impl FenceSpan {
    /// True when a break at byte offset `at` would fall inside this fence.
    pub fn contains(&self, at: usize) -> bool {
        at > self.start && self.end.is_none_or(|end| at < end)
    }
}

struct OpenFence {
    start: usize,
    content_start: usize,
    marker_char: u8,
    marker_len: usize,
    open_line: String,
    close_line: String,
}

/// A fence line split into indent, marker char, marker length and the rest.
fn parse_fence_line(line: &str) -> Option<(usize, u8, usize, &str)> {
    let indent = line.bytes().take_while(|b| *b == b' ').count();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let marker_char = *rest.as_bytes().first()?;
    if marker_char != b'`' && marker_char != b'~' {
        return None;
    }
    let marker_len = rest.bytes().take_while(|b| *b == marker_char).count();
    if marker_len < 3 {
        return None;
    }
    Some((indent, marker_char, marker_len, &rest[marker_len..]))
}

/// Every fence span in `buffer`, in order; an unclosed fence runs to the end.
pub(crate) fn parse_fence_spans(buffer: &str) -> Vec<FenceSpan> {
    let mut spans = Vec::new();
    let mut open: Option<OpenFence> = None;
    let mut offset = 0;
    for raw_line in buffer.split_inclusive('\n') {
        let line_start = offset;
        offset += raw_line.len();
        let line = raw_line.strip_suffix('\n').unwrap_or(raw_line);
        let line = line.strip_suffix('\r').unwrap_or(line);
        let Some((indent, marker_char, marker_len, info)) = parse_fence_line(line) else {
            continue;
        };
        match &open {
            None => {
                let marker = &line[indent..indent + marker_len];
                open = Some(OpenFence {
                    start: line_start,
                    content_start: offset,
                    marker_char,
                    marker_len,
                    open_line: line.to_string(),
                    close_line: format!("{}{}", &line[..indent], marker),
                });
            }
            Some(fence)
                if fence.marker_char == marker_char
                    && marker_len >= fence.marker_len
                    && info.trim_matches([' ', '\t']).is_empty() =>
            {
                let end = line_start + line.len();
                if let Some(fence) = open.take() {
                    spans.push(close_span(fence, Some(end)));
                }
            }
            Some(_) => {}
        }
    }
    if let Some(fence) = open {
        spans.push(close_span(fence, None));
    }
    spans
}

fn close_span(fence: OpenFence, end: Option<usize>) -> FenceSpan {
    FenceSpan {
        start: fence.start,
        content_start: fence.content_start,
        end,
        open_line: fence.open_line,
        close_line: fence.close_line,
    }
}

/// The span that a break at `at` would cut through, if any.
pub(crate) fn span_at(spans: &[FenceSpan], at: usize) -> Option<&FenceSpan> {
    spans.iter().find(|span| span.contains(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_fence_spans_open_to_close_line() {
        let text = "intro\n```rust\nlet a = 1;\n```\nafter";
        let spans = parse_fence_spans(text);
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].start, 6);
        assert_eq!(spans[0].content_start, 14);
        assert_eq!(spans[0].end, Some(28));
        assert_eq!(spans[0].open_line, "```rust");
        assert_eq!(spans[0].close_line, "```");
        assert!(!spans[0].contains(6));
        assert!(spans[0].contains(7));
        assert!(!spans[0].contains(28));
    }

    #[test]
    fn closer_must_match_marker_and_length() {
        let text = "~~~~\n```\n~~~\nstill code\n~~~~~\nout";
        let spans = parse_fence_spans(text);
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].close_line, "~~~~");
        assert_eq!(&text[spans[0].end.expect("closed") - 5..][..5], "~~~~~");
    }

    #[test]
    fn unclosed_fence_runs_to_the_end() {
        let spans = parse_fence_spans("a\n  ```py\ncode");
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].end, None);
        assert_eq!(spans[0].close_line, "  ```");
        assert!(spans[0].contains(14));
    }

    #[test]
    fn four_space_indent_is_not_a_fence() {
        assert!(parse_fence_spans("    ```\ncode\n").is_empty());
    }
}
