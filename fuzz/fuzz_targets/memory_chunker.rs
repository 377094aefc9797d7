//! The memory chunker over a file's bytes (any size, any line lengths). Properties: memory bounded by the
//! chunk size whatever the input's size (held bytes and heap peak); no chunk over `max_tokens`; line numbers
//! in order; with no overlap, the chunks carry every non-whitespace character of the file, in order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pincer::memory::chunker::{StreamingChunker, WordCounter, MAX_LINE_PIECE_BYTES};
use pincer_fuzz::within_budget;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (head, rest) = data.split_at(2);
    let max_tokens = usize::from(head[0]) % 48 + 1;
    let overlap = if head[1] % 2 == 0 {
        0
    } else {
        usize::from(head[1]) % 24
    };
    // Window, pending pieces and one chunk's text, each at most a piece per token, and their copies.
    let held_limit = (max_tokens + 2) * MAX_LINE_PIECE_BYTES;
    let budget = 8 * held_limit + 64 * 1024;
    let text = std::str::from_utf8(rest).ok();
    let mut expected = text.map(|t| t.chars().filter(|c| !c.is_whitespace()));
    within_budget("memory chunker", budget, || {
        let mut chunker = StreamingChunker::new(rest, &WordCounter, max_tokens, overlap);
        let mut last_start = 0;
        for chunk in chunker.by_ref() {
            let chunk = chunk.expect("reading from memory cannot fail");
            assert!(
                chunk.tokens <= max_tokens,
                "{} tokens over {max_tokens}",
                chunk.tokens
            );
            assert!(
                chunk.start_line <= chunk.end_line,
                "lines {}..{}",
                chunk.start_line,
                chunk.end_line
            );
            assert!(chunk.start_line >= last_start, "chunks out of order");
            last_start = chunk.start_line;
            if overlap == 0 {
                if let Some(expected) = expected.as_mut() {
                    for c in chunk.text.chars().filter(|c| !c.is_whitespace()) {
                        assert_eq!(Some(c), expected.next(), "a character lost or added");
                    }
                }
            }
        }
        assert!(
            chunker.peak_buffered_bytes() <= held_limit,
            "held {} bytes",
            chunker.peak_buffered_bytes()
        );
    });
    if overlap == 0 {
        if let Some(mut expected) = expected {
            assert_eq!(expected.next(), None, "characters missing at the end");
        }
    }
});
