//! The bounded streaming chunker: reads a markdown file line by line and yields chunks measured in the
//! embedding model's tokens, each with its 1-based start and end line for citations.
//!
//! Memory is bounded whatever the file size: the chunker holds the lines of one chunk (at most `max_tokens`),
//! the overlap carried into the next, and one pending line; a line longer than `MAX_LINE_PIECE_BYTES` is read
//! in pieces (same line number), and a piece with more tokens than a chunk is split again by characters. Cuts
//! prefer markdown boundaries: before a heading, then after a blank line, then at any line end.
//!
//! This file must not embed, hash or store anything; it only turns a reader into chunks.

use std::collections::VecDeque;
use std::io::{self, BufRead};

/// Longest piece of a line read at once, in bytes; longer lines are read in several pieces.
pub const MAX_LINE_PIECE_BYTES: usize = 4096;

/// Counts tokens the way the embedding model will.
pub trait TokenCounter {
    fn count_tokens(&self, text: &str) -> usize;
}

/// One chunk of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TextChunk {
    /// 1-based, inclusive.
    pub start_line: u32,
    pub end_line: u32,
    pub text: String,
    pub tokens: usize,
}

#[derive(Clone, Debug)]
struct Line {
    number: u32,
    text: String,
    tokens: usize,
}

impl Line {
    fn is_blank(&self) -> bool {
        self.text.trim().is_empty()
    }

    fn is_heading(&self) -> bool {
        self.text.trim_start().starts_with('#')
    }
}

/// Reads lines of at most `MAX_LINE_PIECE_BYTES`, never more, with their 1-based line numbers.
struct PieceReader<R> {
    reader: R,
    line_number: u32,
    mid_line: bool,
}

impl<R: BufRead> PieceReader<R> {
    fn next_piece(&mut self) -> io::Result<Option<(u32, String)>> {
        let mut bytes = Vec::new();
        let mut ended = false;
        loop {
            let available = self.reader.fill_buf()?;
            if available.is_empty() {
                break;
            }
            let room = MAX_LINE_PIECE_BYTES - bytes.len();
            let window = &available[..available.len().min(room)];
            let (take, newline) = match window.iter().position(|&b| b == b'\n') {
                Some(at) => (at + 1, true),
                None => (window.len(), false),
            };
            bytes.extend_from_slice(&window[..take.min(window.len())]);
            self.reader.consume(take);
            if newline || bytes.len() >= MAX_LINE_PIECE_BYTES {
                ended = newline;
                break;
            }
        }
        if bytes.is_empty() {
            return Ok(None);
        }
        if !self.mid_line {
            self.line_number += 1;
        }
        self.mid_line = !ended;
        if ended {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        // A piece may end inside a multi-byte character: keep the valid prefix, replace the rest.
        Ok(Some((
            self.line_number,
            String::from_utf8_lossy(&bytes).into_owned(),
        )))
    }
}

/// Yields chunks from a reader; see the module docs for the bounds.
pub struct StreamingChunker<'c, R, C: ?Sized> {
    pieces: PieceReader<R>,
    counter: &'c C,
    max_tokens: usize,
    overlap_tokens: usize,
    window: VecDeque<Line>,
    window_tokens: usize,
    /// Lines waiting to enter the window (a split piece may produce several).
    pending: VecDeque<Line>,
    /// Leading lines of the window that are overlap (already emitted in the previous chunk).
    carried: usize,
    peak_buffered_bytes: usize,
}

impl<'c, R: BufRead, C: TokenCounter + ?Sized> StreamingChunker<'c, R, C> {
    /// `max_tokens` ≥ 1; `overlap_tokens` is clamped below half of it.
    pub fn new(reader: R, counter: &'c C, max_tokens: usize, overlap_tokens: usize) -> Self {
        let max_tokens = max_tokens.max(1);
        StreamingChunker {
            pieces: PieceReader {
                reader,
                line_number: 0,
                mid_line: false,
            },
            counter,
            max_tokens,
            overlap_tokens: overlap_tokens.min(max_tokens / 2),
            window: VecDeque::new(),
            window_tokens: 0,
            pending: VecDeque::new(),
            carried: 0,
            peak_buffered_bytes: 0,
        }
    }

    /// Most text bytes held at once (window + pending), for the bounded-memory tests.
    pub fn peak_buffered_bytes(&self) -> usize {
        self.peak_buffered_bytes
    }

    /// Splits a piece into lines of at most `max_tokens` tokens (by characters, halving).
    fn split_to_fit(&self, number: u32, text: String, out: &mut VecDeque<Line>) {
        let tokens = self.counter.count_tokens(&text);
        if tokens <= self.max_tokens || text.chars().count() <= 1 {
            out.push_back(Line {
                number,
                text,
                tokens,
            });
            return;
        }
        let half = text.chars().count() / 2;
        let cut = text.char_indices().nth(half).map_or(text.len(), |(i, _)| i);
        let (left, right) = text.split_at(cut);
        self.split_to_fit(number, left.to_string(), out);
        self.split_to_fit(number, right.to_string(), out);
    }

    fn next_line(&mut self) -> io::Result<Option<Line>> {
        if let Some(line) = self.pending.pop_front() {
            return Ok(Some(line));
        }
        let Some((number, text)) = self.pieces.next_piece()? else {
            return Ok(None);
        };
        let mut lines = VecDeque::new();
        self.split_to_fit(number, text, &mut lines);
        self.pending = lines;
        self.note_buffer();
        Ok(self.pending.pop_front())
    }

    fn note_buffer(&mut self) {
        let held: usize = self
            .window
            .iter()
            .chain(self.pending.iter())
            .map(|l| l.text.len())
            .sum();
        self.peak_buffered_bytes = self.peak_buffered_bytes.max(held);
    }

    /// Where to cut a full window: after the last boundary in its second half, preferring a cut before a
    /// heading, then after a blank line, else the whole window. Never inside the carried overlap.
    fn cut_point(&self, incoming: &Line) -> usize {
        let len = self.window.len();
        let mut tokens_before = 0usize;
        let (mut heading_cut, mut blank_cut) = (None, None);
        for (i, line) in self.window.iter().enumerate() {
            tokens_before += line.tokens;
            let next_is_heading = self
                .window
                .get(i + 1)
                .map_or(incoming.is_heading(), Line::is_heading);
            let eligible = i + 1 > self.carried && i + 1 < len;
            if eligible && tokens_before * 2 >= self.window_tokens {
                if next_is_heading {
                    heading_cut = Some(i + 1);
                }
                if line.is_blank() {
                    blank_cut = Some(i + 1);
                }
            }
        }
        heading_cut.or(blank_cut).unwrap_or(len)
    }

    /// Emits the first `cut` lines of the window and keeps the overlap plus the rest.
    fn emit(&mut self, cut: usize) -> TextChunk {
        let emitted: Vec<Line> = self.window.drain(..cut).collect();
        let rest_tokens: usize = self.window.iter().map(|l| l.tokens).sum();
        let mut overlap = Vec::new();
        let mut overlap_tokens = 0;
        for line in emitted.iter().rev() {
            if overlap_tokens + line.tokens > self.overlap_tokens
                || overlap_tokens + line.tokens + rest_tokens >= self.max_tokens
            {
                break;
            }
            overlap_tokens += line.tokens;
            overlap.push(line.clone());
        }
        let chunk = TextChunk {
            start_line: emitted.first().map_or(0, |l| l.number),
            end_line: emitted.last().map_or(0, |l| l.number),
            text: join_lines(&emitted),
            tokens: emitted.iter().map(|l| l.tokens).sum(),
        };
        self.carried = overlap.len();
        for line in overlap {
            self.window.push_front(line);
        }
        self.window_tokens = overlap_tokens + rest_tokens;
        chunk
    }

    fn next_chunk(&mut self) -> io::Result<Option<TextChunk>> {
        loop {
            let Some(line) = self.next_line()? else {
                if self.window.len() > self.carried {
                    let chunk = self.emit(self.window.len());
                    self.window.clear();
                    self.window_tokens = 0;
                    self.carried = 0;
                    return Ok(Some(chunk));
                }
                return Ok(None);
            };
            if self.window_tokens + line.tokens <= self.max_tokens {
                self.push(line);
                continue;
            }
            if self.window.len() == self.carried {
                // Only overlap left and the line does not fit beside it: drop overlap, never re-emit it.
                while self.window_tokens + line.tokens > self.max_tokens {
                    let Some(dropped) = self.window.pop_front() else {
                        break;
                    };
                    self.window_tokens -= dropped.tokens;
                    self.carried = self.carried.saturating_sub(1);
                }
                self.push(line);
                continue;
            }
            let cut = self.cut_point(&line);
            let chunk = self.emit(cut);
            self.pending.push_front(line);
            return Ok(Some(chunk));
        }
    }

    fn push(&mut self, line: Line) {
        self.window_tokens += line.tokens;
        self.window.push_back(line);
        self.note_buffer();
    }
}

fn join_lines(lines: &[Line]) -> String {
    let mut text = String::new();
    let mut previous: Option<u32> = None;
    for line in lines {
        if previous.is_some() {
            // Pieces of one long line are rejoined without a newline.
            if previous != Some(line.number) {
                text.push('\n');
            }
        }
        text.push_str(&line.text);
        previous = Some(line.number);
    }
    text
}

impl<R: BufRead, C: TokenCounter + ?Sized> Iterator for StreamingChunker<'_, R, C> {
    type Item = io::Result<TextChunk>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_chunk() {
                Ok(Some(chunk)) if chunk.text.trim().is_empty() => continue,
                Ok(Some(chunk)) => return Some(Ok(chunk)),
                Ok(None) => return None,
                Err(error) => return Some(Err(error)),
            }
        }
    }
}

/// Counts whitespace-separated words: a stand-in measure for tests and for keyword-only mode.
pub struct WordCounter;

impl TokenCounter for WordCounter {
    fn count_tokens(&self, text: &str) -> usize {
        text.split_whitespace().count().max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(text: &str, max: usize, overlap: usize) -> Vec<TextChunk> {
        StreamingChunker::new(text.as_bytes(), &WordCounter, max, overlap)
            .collect::<io::Result<Vec<_>>>()
            .expect("chunks")
    }

    #[test]
    fn short_file_is_one_chunk_with_its_lines() {
        let out = chunks("# Title\n\nOne two three.\n", 50, 10);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].start_line, out[0].end_line), (1, 3));
        assert_eq!(out[0].text, "# Title\n\nOne two three.");
    }

    #[test]
    fn chunks_never_exceed_the_token_limit_and_cover_every_line() {
        let text: String = (1..=200)
            .map(|i| format!("line {i} has some words in it\n"))
            .collect();
        let out = chunks(&text, 40, 8);
        assert!(out.len() > 5);
        for chunk in &out {
            assert!(chunk.tokens <= 40, "{chunk:?}");
        }
        assert_eq!(out[0].start_line, 1);
        assert_eq!(out.last().expect("last").end_line, 200);
        for pair in out.windows(2) {
            assert!(pair[1].start_line <= pair[0].end_line + 1, "gap: {pair:?}");
            assert!(
                pair[1].start_line > pair[0].start_line,
                "no progress: {pair:?}"
            );
        }
    }

    #[test]
    fn consecutive_chunks_overlap() {
        let text: String = (1..=50).map(|i| format!("w{i} x y z\n")).collect();
        let out = chunks(&text, 20, 8);
        assert!(out[1].start_line <= out[0].end_line, "{:?}", &out[..2]);
    }

    #[test]
    fn cuts_prefer_the_line_before_a_heading() {
        let mut text = String::new();
        for i in 0..6 {
            text.push_str(&format!("para {i} a b c d e\n"));
        }
        text.push_str("# Next section\n");
        for i in 0..6 {
            text.push_str(&format!("more {i} a b c d e\n"));
        }
        let out = chunks(&text, 60, 0);
        assert!(out.len() >= 2);
        assert_eq!(out[0].end_line, 6, "{out:?}");
        assert!(out[1].text.starts_with("# Next section"));
    }

    #[test]
    fn a_huge_single_line_is_split_and_memory_stays_bounded() {
        let line = "word ".repeat(200_000);
        let mut chunker = StreamingChunker::new(line.as_bytes(), &WordCounter, 100, 20);
        let mut count = 0;
        for chunk in chunker.by_ref() {
            let chunk = chunk.expect("chunk");
            assert!(chunk.tokens <= 100);
            assert_eq!((chunk.start_line, chunk.end_line), (1, 1));
            count += 1;
        }
        assert!(count > 1000);
        assert!(
            chunker.peak_buffered_bytes() <= 2 * MAX_LINE_PIECE_BYTES,
            "{}",
            chunker.peak_buffered_bytes()
        );
    }
}
