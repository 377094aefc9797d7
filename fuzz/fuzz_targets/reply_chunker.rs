//! The reply chunker: streamed deltas (cut at arbitrary places) through `BlockChunker`, and whole texts through
//! `chunk_text` (the outbound limit). Properties: no block over `max_chars` characters (a platform refuses longer
//! messages); no character lost (non-whitespace characters, fence lines aside, come out in order); when the
//! input's code fences are balanced and the limit leaves room for a fence's lines, every block's fences are
//! balanced too (a cut closes the fence and the next block reopens it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pincer::config::BreakPreference;
use pincer::reply::chunker::{chunk_text, BlockChunker, ChunkerLimits};
use pincer_fuzz::{linear_budget, within_budget};

/// Lines that open or close a fence: up to three spaces, then three or more backticks or tildes (a CRLF
/// line's `\r` is not part of it, as in the chunker).
fn fence_marker(line: &str) -> Option<(char, usize, &str)> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let ch = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let run = rest.chars().take_while(|c| *c == ch).count();
    (run >= 3).then(|| (ch, run, &rest[run..]))
}

/// Whether every fence opened in `text` is closed in it (CommonMark's rule, simplified the same way as the
/// chunker's: a closing line is the same character, at least as long, nothing after it).
fn fences_balanced(text: &str) -> bool {
    let mut open: Option<(char, usize)> = None;
    for line in text.split('\n') {
        let Some((ch, run, rest)) = fence_marker(line) else {
            continue;
        };
        match open {
            None => open = Some((ch, run)),
            Some((och, orun))
                if och == ch && run >= orun && rest.trim_matches([' ', '\t']).is_empty() =>
            {
                open = None
            }
            Some(_) => {}
        }
    }
    open.is_none()
}

/// Whether backtick and tilde runs of three occur only where they open a line (so a cut mid-line cannot make a
/// fence line of what was text).
fn fence_runs_only_at_line_starts(text: &str) -> bool {
    text.split('\n').all(|line| {
        let body = line.trim_start_matches(' ');
        let first = body.chars().next().filter(|c| *c == '`' || *c == '~');
        let lead = first.map_or(0, |f| body.chars().take_while(|c| *c == f).count());
        let rest: String = body.chars().skip(lead).collect();
        let indent = line.len() - body.len();
        !rest.contains("``") && !rest.contains("~~") && (lead == 0 || indent <= 3)
    })
}

/// Non-whitespace characters outside fence lines, in order.
fn content(text: &str) -> String {
    text.split('\n')
        .filter(|line| fence_marker(line).is_none())
        .flat_map(str::chars)
        .filter(|c| !c.is_whitespace())
        .collect()
}

fn check(what: &str, text: &str, blocks: &[String], max_chars: usize) {
    for block in blocks {
        let chars = block.chars().count();
        assert!(
            chars <= max_chars,
            "{what}: a block of {chars} characters, limit {max_chars}: {block:?}"
        );
    }
    let joined = blocks.concat();
    let solid = |t: &str| t.chars().filter(|c| !c.is_whitespace()).collect::<String>();
    if !text.contains("```") && !text.contains("~~~") {
        // No fences: the blocks are the text, cut up (whitespace-only blocks dropped).
        assert_eq!(
            solid(&joined),
            solid(text),
            "{what}: characters lost or added"
        );
    } else {
        // Fences: the blocks may add closing and reopening lines, but every character outside the text's own
        // fence lines comes out, in order.
        let out = solid(&joined);
        let mut rest = out.chars();
        for c in content(text).chars() {
            assert!(rest.any(|o| o == c), "{what}: {c:?} lost");
        }
    }
    // A fence is closed and reopened around a cut only when its lines fit in a block with room to spare;
    // below that the limit wins (a platform refuses an over-long message) and the cut is hard.
    let longest_fence_line = text
        .split('\n')
        .filter(|line| fence_marker(line).is_some())
        .map(|line| line.chars().count())
        .max()
        .unwrap_or(0);
    if fences_balanced(text)
        && fence_runs_only_at_line_starts(text)
        && max_chars >= 4 * (longest_fence_line + 2)
    {
        for block in blocks {
            assert!(
                fences_balanced(block),
                "{what}: a block leaves a fence open: {block:?}"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (head, rest) = data.split_at(4);
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let min = usize::from(head[0]) % 64 + 1;
    let max = min + usize::from(head[1]) % 96;
    let preference = match head[2] % 3 {
        0 => BreakPreference::Paragraph,
        1 => BreakPreference::Newline,
        _ => BreakPreference::Sentence,
    };
    // With a limit of one character every character is a block: two block lists of a String each (24-byte
    // headers, Vec doubling) and the input's char index (16 bytes a character) come to about 150 bytes a byte.
    let budget = linear_budget(text.len(), 160, 64 * 1024);
    within_budget("reply chunker", budget, || {
        let mut chunker =
            BlockChunker::new(ChunkerLimits::new(min, max).with_preference(preference));
        let mut blocks = Vec::new();
        // Deltas cut every `step` characters.
        let step = usize::from(head[3]) % 17 + 1;
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let mut from = 0;
        for piece in chars.chunks(step) {
            let end = piece.last().map_or(from, |(i, c)| i + c.len_utf8());
            blocks.extend(chunker.push(&text[from..end]));
            from = end;
        }
        blocks.extend(chunker.finish());
        check("block chunker", text, &blocks, max);
        check("chunk_text", text, &chunk_text(text, max), max);
    });
});
