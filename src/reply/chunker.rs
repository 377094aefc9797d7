//! The block chunker: turns a stream of assistant text deltas into sendable
//! blocks between a low and a high water mark (OpenClaw's
//! `EmbeddedBlockChunker`).
//!
//! `BlockChunker::new(ChunkerLimits)`, `.push(&str) -> Vec<String>` as deltas
//! arrive, `.finish() -> Vec<String>` at the end of the text. A block is
//! emitted once the buffer holds `min_chars`, at the latest break of the
//! preferred kind (paragraph > newline > sentence); when the buffer reaches
//! `max_chars` without one, at whitespace, then at a soft break below the low
//! mark, then by a hard cut. Breaks never fall inside a code fence; a forced
//! cut through a fence closes it at the end of the block and reopens it (same
//! opening line) at the start of the next. Blocks keep their separators, so
//! the blocks concatenated give back the input plus the added fence lines.
//! The buffer never holds more than `max_chars` characters (Unicode scalar
//! values). Whitespace-only blocks are dropped. Counts are characters, not
//! bytes. This file must not know about channels, sending or timing.

use super::fences::{parse_fence_spans, span_at, FenceSpan};
use crate::config::{BlockStreamingChunk, BreakPreference};

/// OpenClaw's default low water mark for block streaming.
pub const DEFAULT_BLOCK_MIN_CHARS: usize = 800;
/// OpenClaw's default high water mark for block streaming.
pub const DEFAULT_BLOCK_MAX_CHARS: usize = 1200;
/// Outbound text limit when a channel declares none (OpenClaw `chunk.ts`).
pub const DEFAULT_TEXT_CHUNK_LIMIT_CHARS: usize = 4000;

/// Low/high water marks and the preferred kind of break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkerLimits {
    pub min_chars: usize,
    pub max_chars: usize,
    pub break_preference: BreakPreference,
}

impl Default for ChunkerLimits {
    fn default() -> Self {
        Self::new(DEFAULT_BLOCK_MIN_CHARS, DEFAULT_BLOCK_MAX_CHARS)
    }
}

impl ChunkerLimits {
    /// Limits with paragraph preference; `max_chars ≥ 1`, `1 ≤ min_chars ≤ max_chars`.
    pub fn new(min_chars: usize, max_chars: usize) -> Self {
        let max_chars = max_chars.max(1);
        Self {
            min_chars: min_chars.clamp(1, max_chars),
            max_chars,
            break_preference: BreakPreference::Paragraph,
        }
    }

    /// The same limits with another break preference.
    pub fn with_preference(mut self, preference: BreakPreference) -> Self {
        self.break_preference = preference;
        self
    }

    /// Limits from `blockStreamingChunk` (agent default or channel override),
    /// with `max_chars` capped by the channel's text limit, as OpenClaw does.
    pub fn resolve(config: Option<&BlockStreamingChunk>, text_limit_chars: Option<usize>) -> Self {
        let text_limit = text_limit_chars.unwrap_or(DEFAULT_TEXT_CHUNK_LIMIT_CHARS);
        let requested_max = config
            .and_then(|c| c.max_chars)
            .map_or(DEFAULT_BLOCK_MAX_CHARS, |v| v as usize);
        let requested_min = config
            .and_then(|c| c.min_chars)
            .map_or(DEFAULT_BLOCK_MIN_CHARS, |v| v as usize);
        let preference = config
            .and_then(|c| c.break_preference)
            .unwrap_or(BreakPreference::Paragraph);
        Self::new(requested_min, requested_max.max(1).min(text_limit)).with_preference(preference)
    }
}

/// Default smallest and largest piece of a block-mode preview (`streaming.preview.chunk`;
/// upstream's draft chunking).
pub const DEFAULT_PREVIEW_MIN_CHARS: usize = 200;
pub const DEFAULT_PREVIEW_MAX_CHARS: usize = 800;

impl ChunkerLimits {
    /// Limits of a block-mode preview from `streaming.preview.chunk`: 200..800 characters with
    /// paragraph breaks unless set, `max_chars` capped by the channel's text limit.
    pub fn for_preview(config: Option<&BlockStreamingChunk>, text_limit_chars: usize) -> Self {
        let max = config
            .and_then(|c| c.max_chars)
            .map_or(DEFAULT_PREVIEW_MAX_CHARS, |v| v as usize)
            .clamp(1, text_limit_chars.max(1));
        let min = config
            .and_then(|c| c.min_chars)
            .map_or(DEFAULT_PREVIEW_MIN_CHARS, |v| v as usize);
        let preference = config
            .and_then(|c| c.break_preference)
            .unwrap_or(BreakPreference::Paragraph);
        Self::new(min, max).with_preference(preference)
    }
}

/// Where a block may end: after the separator that precedes position `p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BreakKind {
    Paragraph,
    Newline,
    Sentence,
    Whitespace,
}

impl BreakKind {
    /// True when a block may end at byte `p`: just after this kind of
    /// separator, and only at the end of a whitespace run, so the next block
    /// starts with text. A break at the very end of the buffer is allowed only
    /// when `at_end_ok` (a full buffer): while streaming, the run may go on.
    fn matches(self, bytes: &[u8], p: usize, at_end_ok: bool) -> bool {
        let next = bytes.get(p).copied();
        if next.is_none() && !at_end_ok {
            return false;
        }
        let before = bytes[p - 1];
        let next_is_space = next.is_some_and(|b| b.is_ascii_whitespace());
        match self {
            BreakKind::Newline => before == b'\n' && next != Some(b'\n'),
            BreakKind::Whitespace => before.is_ascii_whitespace() && !next_is_space,
            BreakKind::Sentence => {
                let text_end = bytes[..p].iter().rposition(|b| !b.is_ascii_whitespace());
                !next_is_space
                    && text_end.is_some_and(|i| i + 1 < p && matches!(bytes[i], b'.' | b'!' | b'?'))
            }
            BreakKind::Paragraph => {
                if before != b'\n' || next == Some(b'\n') {
                    return false;
                }
                let mut i = p - 1;
                while i > 0 && matches!(bytes[i - 1], b' ' | b'\t') {
                    i -= 1;
                }
                i > 0 && bytes[i - 1] == b'\n'
            }
        }
    }
}

fn soft_kinds(preference: BreakPreference) -> &'static [BreakKind] {
    match preference {
        BreakPreference::Paragraph => &[
            BreakKind::Paragraph,
            BreakKind::Newline,
            BreakKind::Sentence,
        ],
        BreakPreference::Newline => &[BreakKind::Newline],
        BreakPreference::Sentence => &[BreakKind::Sentence],
    }
}

/// Byte offset of the `n`th character (or the end of `text`).
fn byte_at_char(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(i, _)| i)
}

/// Streams text into blocks; see the module documentation.
#[derive(Debug, Clone)]
pub struct BlockChunker {
    limits: ChunkerLimits,
    buffer: String,
    buffered_chars: usize,
}

impl BlockChunker {
    pub fn new(limits: ChunkerLimits) -> Self {
        let limits = ChunkerLimits::new(limits.min_chars, limits.max_chars)
            .with_preference(limits.break_preference);
        Self {
            limits,
            buffer: String::new(),
            buffered_chars: 0,
        }
    }

    pub fn limits(&self) -> ChunkerLimits {
        self.limits
    }

    /// Characters held back, waiting for a break (never above `max_chars`).
    pub fn buffered_chars(&self) -> usize {
        self.buffered_chars
    }

    /// Appends a delta and returns the blocks that became ready.
    pub fn push(&mut self, delta: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = delta;
        while !rest.is_empty() {
            let room = self.limits.max_chars - self.buffered_chars;
            let take = byte_at_char(rest, room);
            self.buffer.push_str(&rest[..take]);
            self.buffered_chars += rest[..take].chars().count();
            rest = &rest[take..];
            self.drain(&mut out);
        }
        out
    }

    /// Flushes everything left, closing a fence the text left open.
    pub fn finish(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let spans = parse_fence_spans(&self.buffer);
            let Some(open) = spans.into_iter().last().filter(|s| s.end.is_none()) else {
                let rest = std::mem::take(&mut self.buffer);
                self.buffered_chars = 0;
                if !rest.trim().is_empty() {
                    out.push(rest);
                }
                return out;
            };
            let newline = usize::from(!self.buffer.ends_with('\n'));
            let closed_chars = self.buffered_chars + newline + open.close_line.chars().count();
            if closed_chars <= self.limits.max_chars {
                let mut rest = std::mem::take(&mut self.buffer);
                self.buffered_chars = 0;
                if newline == 1 {
                    rest.push('\n');
                }
                rest.push_str(&open.close_line);
                out.push(rest);
                return out;
            }
            if self.split_fence(&open, true, &mut out) {
                continue;
            }
            // Closing would overrun the limit and no split makes room: end the block before the fence, or, when
            // the fence is all there is, let the limit win and send it unclosed (a platform refuses an
            // over-long message; the fuzz target `reply_chunker` found the closing line pushed past it).
            let cut = if open.start > 0 && !self.buffer[..open.start].trim().is_empty() {
                open.start
            } else {
                self.buffer.len()
            };
            self.emit(cut, &mut out);
        }
    }

    /// Drops whatever is buffered (an aborted run).
    pub fn reset(&mut self) {
        self.buffer.clear();
        self.buffered_chars = 0;
    }

    fn drain(&mut self, out: &mut Vec<String>) {
        while self.buffered_chars >= self.limits.min_chars {
            let spans = parse_fence_spans(&self.buffer);
            let (min, max) = (self.limits.min_chars, self.limits.max_chars);
            let soft = soft_kinds(self.limits.break_preference);
            let full = self.buffered_chars >= max;
            if let Some(p) = self.find_break(&spans, min, soft, full) {
                self.emit(p, out);
                return;
            }
            if self.buffered_chars < max {
                return;
            }
            self.force_break(&spans, out);
        }
    }

    /// The buffer is full: break at whitespace, then at a soft break below the
    /// low mark, then cut hard — splitting a fence if the cut falls in one, or
    /// ending the block before a fence whose opening line fills the buffer.
    fn force_break(&mut self, spans: &[FenceSpan], out: &mut Vec<String>) {
        let min = self.limits.min_chars;
        let soft = soft_kinds(self.limits.break_preference);
        let found = self
            .find_break(spans, min, &[BreakKind::Whitespace], true)
            .or_else(|| self.find_break(spans, 1, soft, true))
            .or_else(|| self.find_break(spans, 1, &[BreakKind::Whitespace], true));
        if let Some(p) = found {
            self.emit(p, out);
            return;
        }
        let cut = byte_at_char(&self.buffer, self.limits.max_chars);
        if let Some(span) = span_at(spans, cut) {
            if self.split_fence(span, false, out) {
                return;
            }
            // No whole code line fits: end the block before the fence instead (a whitespace-only block is
            // dropped, which still moves the fence to the front; the fuzz target `reply_chunker` found a fence
            // behind whitespace cut hard and left open).
            if span.start > 0 {
                self.emit(span.start, out);
                return;
            }
            if self.split_fence(span, true, out) {
                return;
            }
        }
        self.emit(cut, out);
    }

    /// The latest fence-safe break of one of `kinds` (tried in order) that
    /// leaves between `lo_chars` and `max_chars` characters in the block.
    fn find_break(
        &self,
        spans: &[FenceSpan],
        lo_chars: usize,
        kinds: &[BreakKind],
        at_end_ok: bool,
    ) -> Option<usize> {
        if lo_chars > self.buffered_chars {
            return None;
        }
        let lo = byte_at_char(&self.buffer, lo_chars).max(1);
        let hi = byte_at_char(&self.buffer, self.limits.max_chars);
        let bytes = self.buffer.as_bytes();
        kinds.iter().find_map(|kind| {
            (lo..=hi)
                .rev()
                .find(|&p| kind.matches(bytes, p, at_end_ok) && span_at(spans, p).is_none())
                .filter(|&p| !self.buffer[..p].trim().is_empty())
        })
    }

    fn emit(&mut self, p: usize, out: &mut Vec<String>) {
        let block: String = self.buffer.drain(..p).collect();
        self.buffered_chars -= block.chars().count();
        if !block.trim().is_empty() {
            out.push(block);
        }
    }

    /// Cuts inside `span`: the block gets the fence's closing line, the buffer
    /// starts again with its opening line. Cuts at a line start, or mid-line
    /// (adding a line break) only when `mid_line_ok`. Returns false (and
    /// changes nothing) when no such cut makes progress.
    fn split_fence(&mut self, span: &FenceSpan, mid_line_ok: bool, out: &mut Vec<String>) -> bool {
        let max = self.limits.max_chars;
        let close_chars = span.close_line.chars().count();
        let open_chars = span.open_line.chars().count();
        // Each repaired cut must move a quarter of the limit on: with an opening line near the limit, a cut that
        // moved a character at a time sent a block per character (the fuzz target `reply_chunker` found 237
        // characters becoming 159 blocks); such a fence is cut hard instead.
        let least_progress = (max / 4).max(1);
        let reopened = |cut: usize| open_chars + 1 + self.buffer[cut..].chars().count();
        let moves_on = |cut: usize| reopened(cut) + least_progress <= self.buffered_chars;
        let budget = byte_at_char(&self.buffer, max.saturating_sub(close_chars));
        let bytes = self.buffer.as_bytes();
        // The latest line start that fits; when even it moves too little, a mid-line cut (where allowed) can.
        let line_cut = (span.content_start + 1..=budget)
            .rev()
            .find(|&q| bytes[q - 1] == b'\n')
            .filter(|&q| moves_on(q));
        let (cut, newline) = match line_cut {
            Some(q) => (q, ""),
            None if !mid_line_ok => return false,
            None => {
                let mid = byte_at_char(&self.buffer, max.saturating_sub(close_chars + 1));
                if mid <= span.content_start || !moves_on(mid) {
                    return false;
                }
                (mid, "\n")
            }
        };
        let reopened_chars = reopened(cut);
        let mut block: String = self.buffer[..cut].to_string();
        block.push_str(newline);
        block.push_str(&span.close_line);
        let mut next = span.open_line.clone();
        next.push('\n');
        next.push_str(&self.buffer[cut..]);
        self.buffer = next;
        self.buffered_chars = reopened_chars;
        out.push(block);
        true
    }
}

/// Splits a whole text into pieces of at most `max_chars` (outbound limit),
/// preferring paragraph, then line, then sentence, then word boundaries.
pub fn chunk_text(text: &str, max_chars: usize) -> Vec<String> {
    let mut chunker = BlockChunker::new(ChunkerLimits::new(max_chars, max_chars));
    let mut blocks = chunker.push(text);
    blocks.extend(chunker.finish());
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(limits: ChunkerLimits, deltas: &[&str]) -> Vec<String> {
        let mut chunker = BlockChunker::new(limits);
        let mut blocks = Vec::new();
        for delta in deltas {
            blocks.extend(chunker.push(delta));
        }
        blocks.extend(chunker.finish());
        blocks
    }

    /// Found by the fuzz target `reply_chunker`: at the end of the text, a fence too long to close within the
    /// limit was closed anyway (a 14-character block under an 11-character limit).
    #[test]
    fn closing_an_open_fence_at_the_end_never_overruns_the_limit() {
        let text = "\u{0}\u{0}\u{2}\u{10}````md```\u{a}\u{a}naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaested\u{a}``\u{d}\u{0}\u{0}\u{0}`\u{a}````\u{a}";
        let deltas: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = deltas.iter().map(String::as_str).collect();
        let limits = ChunkerLimits::new(6, 11).with_preference(BreakPreference::Newline);
        for block in run(limits, &refs) {
            assert!(block.chars().count() <= 11, "{block:?}");
        }
        for block in run(ChunkerLimits::new(4, 8), &["intro\n```\nabc"]) {
            assert!(block.chars().count() <= 8, "{block:?}");
        }
    }

    /// Found by the fuzz target `reply_chunker`: a fence whose opening line nearly fills the limit was repaired
    /// at every cut, a character of progress per block: 237 characters became 159 blocks.
    #[test]
    fn a_fence_cut_moves_the_text_on_by_a_quarter_of_the_limit() {
        let text = "``b``````````````\u{a}``````````````````````````````````````````?`` 4`````````\u{a}``````````````````````I\u{1}\u{0}\u{1}\u{0}\u{0}\u{0}`\u{c}\u{a}\u{0}\u{0}\u{0}\u{c}``````````````````````````````?`` 4`````````\u{a}``````````````````````I\u{1}\u{0}\u{1}\u{0}\u{0}\u{0}`\u{c}\u{a}\u{0}\u{0}\u{0}\u{c}\u{0}\u{0}\u{c}`\u{0}\u{0}~~```\u{c}`\u{0}\u{0}\u{c}`\u{0}\u{0}~~```\u{c}```\u{a}aragrajh````````";
        let blocks = run(
            ChunkerLimits::new(41, 101).with_preference(BreakPreference::Sentence),
            &[text],
        );
        let out: usize = blocks.iter().map(|b| b.chars().count()).sum();
        let input = text.chars().count();
        assert!(
            blocks.len() <= 4 * input.div_ceil(101) + 2,
            "{} blocks",
            blocks.len()
        );
        assert!(out <= 4 * input, "{out} characters out of {input}");
    }

    /// Found by the fuzz target `reply_chunker`: when the only line cut inside a fence moved too little, the
    /// chunker cut hard and left the fence open instead of cutting mid-line and repairing it.
    #[test]
    fn a_fence_too_full_for_a_line_cut_is_cut_mid_line_and_repaired() {
        let text = "'x')\n~~~\n\nAfteer. **ri'x')\n~~~\n\nAfter. **o*nd c`";
        let blocks = fuzz_case_blocks(text);
        assert_fences_closed(&blocks);
        for block in &blocks {
            assert!(block.chars().count() <= 22, "{block:?}");
        }
    }

    /// A fuzz finding's text streamed 4 characters a delta under the target's limits (6 to 22, paragraphs).
    fn fuzz_case_blocks(text: &str) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        let deltas: Vec<String> = chars.chunks(4).map(|c| c.iter().collect()).collect();
        let refs: Vec<&str> = deltas.iter().map(String::as_str).collect();
        run(
            ChunkerLimits::new(6, 22).with_preference(BreakPreference::Paragraph),
            &refs,
        )
    }

    fn assert_fences_closed(blocks: &[String]) {
        for block in blocks {
            let fence_lines = block.lines().filter(|l| l.starts_with("~~~")).count();
            assert_eq!(
                fence_lines % 2,
                0,
                "a fence left open in {block:?} of {blocks:?}"
            );
        }
    }

    /// Found by the fuzz target `reply_chunker`: a fence behind a whitespace-only line was cut hard.
    #[test]
    fn a_fence_behind_whitespace_is_moved_to_the_front_not_cut_open() {
        let text = "'x')2\u{9}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}\u{0}R\u{9}\u{9}\u{9}\u{3}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{b}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{9}\u{a}~~~\u{a}\u{a}Afteer. **ri'x')\u{a}~~~\u{a}\u{a}After. **o*nd c`";
        assert_fences_closed(&fuzz_case_blocks(text));
    }

    #[test]
    fn nothing_is_emitted_below_the_low_mark() {
        let mut chunker = BlockChunker::new(ChunkerLimits::new(20, 50));
        assert!(chunker.push("Short one.\n\nTwo.").is_empty());
        assert_eq!(chunker.finish(), vec!["Short one.\n\nTwo.".to_string()]);
    }

    #[test]
    fn paragraph_break_wins_over_newline_and_sentence() {
        let text = "First paragraph is here.\n\nSecond line. More text\nand a tail";
        let blocks = run(ChunkerLimits::new(10, 60), &[text]);
        assert_eq!(blocks[0], "First paragraph is here.\n\n");
        assert_eq!(blocks.concat(), text);
    }

    #[test]
    fn sentence_break_when_no_newline() {
        let blocks = run(
            ChunkerLimits::new(10, 40),
            &["One sentence here. Another one that runs long"],
        );
        assert_eq!(blocks[0], "One sentence here. ");
    }

    #[test]
    fn whitespace_then_hard_cut_when_full() {
        let blocks = run(ChunkerLimits::new(5, 10), &["abc defghijklmnopqrstu"]);
        assert_eq!(blocks, vec!["abc ", "defghijklm", "nopqrstu"]);
    }

    #[test]
    fn newline_preference_never_breaks_at_sentences() {
        let limits = ChunkerLimits::new(5, 30).with_preference(BreakPreference::Newline);
        let blocks = run(limits, &["Sentence one. Sentence two.\nTail"]);
        assert_eq!(blocks[0], "Sentence one. Sentence two.\n");
    }

    #[test]
    fn forced_cut_through_a_fence_closes_and_reopens_it() {
        let code: String = (0..10).map(|i| format!("line {i}\n")).collect();
        let text = format!("```rust\n{code}```\n");
        let blocks = run(ChunkerLimits::new(10, 40), &[&text]);
        assert!(blocks.len() > 1);
        for block in &blocks {
            assert!(block.chars().count() <= 40, "{block:?}");
            assert!(block.starts_with("```rust\n"), "{block:?}");
            assert!(block.trim_end().ends_with("```"), "{block:?}");
        }
    }

    #[test]
    fn a_break_before_the_fence_is_preferred_to_splitting_it() {
        let text = "Intro text.\n```\nabc\ndef\n```\n";
        let blocks = run(ChunkerLimits::new(20, 24), &[text]);
        assert_eq!(blocks, vec!["Intro text.\n", "```\nabc\ndef\n```\n"]);
    }

    #[test]
    fn an_unclosed_fence_is_closed_at_finish() {
        let blocks = run(ChunkerLimits::new(100, 200), &["```\nlet x = 1;"]);
        assert_eq!(blocks, vec!["```\nlet x = 1;\n```"]);
    }

    #[test]
    fn limits_count_characters_not_bytes() {
        let text = "日本語のテキスト".repeat(3);
        let blocks = run(ChunkerLimits::new(4, 8), &[&text]);
        assert!(blocks.iter().all(|b| b.chars().count() == 8));
        assert_eq!(blocks.concat(), text);
    }

    #[test]
    fn resolve_caps_max_by_the_channel_limit() {
        let cfg = BlockStreamingChunk {
            min_chars: Some(3000),
            max_chars: Some(5000),
            break_preference: Some(BreakPreference::Sentence),
        };
        let limits = ChunkerLimits::resolve(Some(&cfg), Some(2000));
        assert_eq!((limits.min_chars, limits.max_chars), (2000, 2000));
        assert_eq!(limits.break_preference, BreakPreference::Sentence);
        assert_eq!(ChunkerLimits::resolve(None, None), ChunkerLimits::default());
    }

    #[test]
    fn chunk_text_prefers_paragraphs() {
        let text = format!("{}\n\n{}", "a".repeat(30), "b".repeat(30));
        assert_eq!(
            chunk_text(&text, 40),
            vec![format!("{}\n\n", "a".repeat(30)), "b".repeat(30)]
        );
    }
}
