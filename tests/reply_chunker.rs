//! Property tests for the block chunker over seeded random markdown with code
//! fences, streamed in random-sized deltas:
//! - every block holds at most `max_chars` characters, and the buffer never
//!   holds more;
//! - code fences are balanced in every block (judged by an independent
//!   CommonMark-style fence reader written here);
//! - the blocks concatenated equal the input once fence lines are removed
//!   from both (the chunker only ever adds whole fence lines), up to a
//!   whitespace-only tail that is never sent.
//!
//! The generator keeps code lines shorter than a quarter of `max_chars`: a
//! code line longer than a whole block can only be split by adding a line
//! break, which `a_code_line_longer_than_a_block_is_split_with_balanced_fences`
//! covers on its own. Inline code uses single backticks, as prose does.

use pincer::config::BreakPreference;
use pincer::reply::{chunk_text, BlockChunker, ChunkerLimits};
use rand::{rngs::StdRng, Rng, SeedableRng};

const CASES: u64 = 300;

const WORDS: [&str; 16] = [
    "the",
    "reply",
    "chunker",
    "streams",
    "naïve",
    "café",
    "日本語",
    "🦀",
    "gateway",
    "`code`",
    "a",
    "block",
    "Pi",
    "memory",
    "x",
    "résumé",
];

fn word(rng: &mut StdRng, max_chars: usize) -> String {
    if rng.gen_ratio(1, 60) {
        // A token with no break in it, possibly longer than a block.
        let len = rng.gen_range(10..max_chars * 2);
        return "https://example.invalid/"
            .chars()
            .chain((0..len).map(|i| if i % 7 == 0 { 'é' } else { 'q' }))
            .collect();
    }
    WORDS[rng.gen_range(0..WORDS.len())].to_string()
}

fn paragraph(rng: &mut StdRng, max_chars: usize) -> String {
    let mut text = String::new();
    for _ in 0..rng.gen_range(1..6) {
        let words: Vec<String> = (0..rng.gen_range(1..14))
            .map(|_| word(rng, max_chars))
            .collect();
        text.push_str(&words.join(" "));
        text.push_str([". ", "! ", "? ", ", ", ".\n", " "][rng.gen_range(0..6)]);
    }
    text.push_str(["\n\n", "\n", "\n\n\n", " \n\n"][rng.gen_range(0..4)]);
    text
}

fn code_line(rng: &mut StdRng, max_len: usize, other_marker: &str) -> String {
    if rng.gen_ratio(1, 15) {
        // Looks like a fence but cannot close this one.
        return other_marker.to_string();
    }
    let len = rng.gen_range(0..max_len.max(1));
    let mut line = String::from("l");
    line.extend((1..len).map(|_| ['a', ' ', '`', '{', 'ß', '.', '\t', '!'][rng.gen_range(0..8)]));
    line
}

fn fence(rng: &mut StdRng, max_chars: usize) -> String {
    let (marker, other) = if rng.gen_bool(0.7) {
        ('`', "~~~")
    } else {
        ('~', "```")
    };
    let len = rng.gen_range(3..6);
    let open: String = std::iter::repeat_n(' ', rng.gen_range(0..4))
        .chain(std::iter::repeat_n(marker, len))
        .chain(["", "rust", "json", " py"][rng.gen_range(0..4)].chars())
        .collect();
    let mut text = format!("{open}\n");
    for _ in 0..rng.gen_range(0..25) {
        text.push_str(&code_line(rng, max_chars / 4, other));
        text.push('\n');
    }
    let close: String = std::iter::repeat_n(' ', rng.gen_range(0..4))
        .chain(std::iter::repeat_n(marker, len + rng.gen_range(0..2)))
        .collect();
    text.push_str(&close);
    text.push_str(["\n", "\n\n", ""][rng.gen_range(0..3)]);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

fn markdown(rng: &mut StdRng, max_chars: usize) -> String {
    let mut text = String::new();
    for _ in 0..rng.gen_range(1..20) {
        match rng.gen_range(0..10) {
            0..=4 => text.push_str(&paragraph(rng, max_chars)),
            5..=7 => text.push_str(&fence(rng, max_chars)),
            8 => text.push_str("- item one\n- item two\n\n"),
            _ => text.push_str("# Heading\n\n"),
        }
    }
    text
}

/// Splits `text` into deltas of random character lengths.
fn deltas(rng: &mut StdRng, text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let len = if rng.gen_ratio(1, 20) {
            rng.gen_range(1..600)
        } else {
            rng.gen_range(1..40)
        };
        let end = (at + len).min(chars.len());
        out.push(chars[at..end].iter().collect());
        at = end;
    }
    out
}

/// A fence line per CommonMark: up to 3 spaces, then 3+ backticks or tildes.
fn fence_marker(line: &str) -> Option<(char, usize, &str)> {
    let trimmed = line.trim_start_matches(' ');
    if line.len() - trimmed.len() > 3 {
        return None;
    }
    let first = trimmed.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let run = trimmed.chars().take_while(|c| *c == first).count();
    (run >= 3).then(|| (first, run, &trimmed[run..]))
}

fn fences_balanced(block: &str) -> bool {
    let mut open: Option<(char, usize)> = None;
    for line in block.lines() {
        let Some((c, run, rest)) = fence_marker(line) else {
            continue;
        };
        match open {
            None => open = Some((c, run)),
            Some((oc, orun)) if oc == c && run >= orun && rest.trim().is_empty() => open = None,
            Some(_) => {}
        }
    }
    open.is_none()
}

fn without_fence_lines(text: &str) -> String {
    text.split_inclusive('\n')
        .filter(|line| fence_marker(line.trim_end_matches(['\n', '\r'])).is_none())
        .collect()
}

fn check_blocks(blocks: &[String], input: &str, max_chars: usize, context: &str) {
    for block in blocks {
        let chars = block.chars().count();
        assert!(
            chars <= max_chars,
            "{context}: block of {chars} chars: {block:?}"
        );
        assert!(!block.trim().is_empty(), "{context}: blank block");
        assert!(
            fences_balanced(block),
            "{context}: unbalanced fence in {block:?}"
        );
    }
    let expected = without_fence_lines(input);
    let got = without_fence_lines(&blocks.concat());
    assert!(
        expected.starts_with(&got),
        "{context}: text changed\nwant {expected:?}\ngot  {got:?}"
    );
    assert!(
        expected[got.len()..].trim().is_empty(),
        "{context}: text lost: {:?}",
        &expected[got.len()..]
    );
}

#[test]
fn random_markdown_streams_into_bounded_balanced_lossless_blocks() {
    for seed in 0..CASES {
        let mut rng = StdRng::seed_from_u64(seed);
        let max_chars = rng.gen_range(40..300);
        let min_chars = rng.gen_range(1..=max_chars);
        let preference = [
            BreakPreference::Paragraph,
            BreakPreference::Newline,
            BreakPreference::Sentence,
        ][rng.gen_range(0..3)];
        let limits = ChunkerLimits::new(min_chars, max_chars).with_preference(preference);
        let context = format!("seed {seed}, limits {limits:?}");
        let input = markdown(&mut rng, max_chars);
        let mut chunker = BlockChunker::new(limits);
        let mut blocks = Vec::new();
        for delta in deltas(&mut rng, &input) {
            blocks.extend(chunker.push(&delta));
            assert!(
                chunker.buffered_chars() <= max_chars,
                "{context}: buffer grew past max"
            );
        }
        blocks.extend(chunker.finish());
        check_blocks(&blocks, &input, max_chars, &context);
    }
}

#[test]
fn whole_texts_split_for_a_channel_limit_keep_the_same_guarantees() {
    for seed in 0..CASES / 3 {
        let mut rng = StdRng::seed_from_u64(10_000 + seed);
        let limit = rng.gen_range(40..400);
        let input = markdown(&mut rng, limit);
        let blocks = chunk_text(&input, limit);
        check_blocks(
            &blocks,
            &input,
            limit,
            &format!("seed {seed}, limit {limit}"),
        );
    }
}

#[test]
fn a_code_line_longer_than_a_block_is_split_with_balanced_fences() {
    let input = format!("```sh\n{}\n```\n", "x".repeat(250));
    let mut chunker = BlockChunker::new(ChunkerLimits::new(20, 60));
    let mut blocks = chunker.push(&input);
    blocks.extend(chunker.finish());
    assert!(blocks.len() >= 5);
    for block in &blocks {
        assert!(block.chars().count() <= 60, "{block:?}");
        assert!(
            block.starts_with("```sh\n") && fences_balanced(block),
            "{block:?}"
        );
    }
    let code: String = blocks
        .iter()
        .map(|b| without_fence_lines(b).replace('\n', ""))
        .collect();
    assert_eq!(code, "x".repeat(250));
}

#[test]
fn streamed_blocks_end_on_the_preferred_boundary() {
    let paragraphs: Vec<String> = (0..6)
        .map(|i| format!("Paragraph {i} says a few words. And some more."))
        .collect();
    let input = paragraphs.join("\n\n");
    let mut chunker = BlockChunker::new(ChunkerLimits::new(40, 120));
    let mut blocks = Vec::new();
    for ch in input.chars() {
        blocks.extend(chunker.push(&ch.to_string()));
    }
    blocks.extend(chunker.finish());
    let (last, rest) = blocks.split_last().expect("blocks");
    assert!(rest.iter().all(|b| b.ends_with("\n\n")), "{blocks:?}");
    assert!(last.ends_with("more."));
    assert_eq!(blocks.concat(), input);
}
