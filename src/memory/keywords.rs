//! The keyword tokenizer behind BM25: lower-cases, splits text into words on Unicode word characters, and
//! indexes CJK text (Han, Kana, Hangul) as overlapping character bigrams, so a Chinese query finds a note
//! without a word segmenter. Upstream's unicode61 keeps a whole CJK run as one token; a run here yields one
//! token per adjacent pair (a lone CJK character is its own token).
//!
//! This file must not know about storage or scoring; it only turns text into terms.

use std::collections::BTreeMap;

use crate::store::MAX_TERM_BYTES;

/// Whether `c` belongs to a script written without spaces between words.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0x20000..=0x2FA1F) // Extensions B–F, compatibility supplement
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn push_word(word: &mut String, terms: &mut Vec<String>) {
    if word.is_empty() {
        return;
    }
    let mut term: String = word.drain(..).flat_map(char::to_lowercase).collect();
    if term.len() > MAX_TERM_BYTES {
        let mut cut = MAX_TERM_BYTES;
        while !term.is_char_boundary(cut) {
            cut -= 1;
        }
        term.truncate(cut);
    }
    terms.push(term);
}

fn push_cjk_run(run: &mut Vec<char>, terms: &mut Vec<String>) {
    match run.len() {
        0 => {}
        1 => terms.push(run[0].to_string()),
        _ => terms.extend(run.windows(2).map(|pair| pair.iter().collect::<String>())),
    }
    run.clear();
}

/// The terms of `text`, in order, duplicates kept.
pub fn terms(text: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut word = String::new();
    let mut cjk_run: Vec<char> = Vec::new();
    for c in text.chars() {
        if is_cjk(c) {
            push_word(&mut word, &mut terms);
            cjk_run.push(c);
        } else if is_word_char(c) {
            push_cjk_run(&mut cjk_run, &mut terms);
            word.push(c);
        } else {
            push_word(&mut word, &mut terms);
            push_cjk_run(&mut cjk_run, &mut terms);
        }
    }
    push_word(&mut word, &mut terms);
    push_cjk_run(&mut cjk_run, &mut terms);
    terms
}

/// Distinct terms of `text` with their counts, and the total number of terms.
pub fn term_counts(text: &str) -> (Vec<(String, u32)>, u32) {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    let mut total = 0u32;
    for term in terms(text) {
        *counts.entry(term).or_insert(0) += 1;
        total = total.saturating_add(1);
    }
    (counts.into_iter().collect(), total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latin_words_are_lower_cased_and_split_on_punctuation() {
        assert_eq!(
            terms("Hello, World! It's café_time 42"),
            ["hello", "world", "it", "s", "café_time", "42"]
        );
    }

    #[test]
    fn cjk_runs_become_overlapping_bigrams() {
        assert_eq!(terms("我喜欢猫"), ["我喜", "喜欢", "欢猫"]);
        assert_eq!(terms("猫 cat"), ["猫", "cat"]);
        assert_eq!(
            terms("周末去爬山hiking"),
            ["周末", "末去", "去爬", "爬山", "hiking"]
        );
    }

    #[test]
    fn counts_group_duplicates() {
        let (counts, total) = term_counts("the cat and the dog");
        assert_eq!(total, 5);
        assert!(counts.contains(&("the".to_string(), 2)));
    }

    #[test]
    fn very_long_tokens_are_cut_on_a_char_boundary() {
        let long = "é".repeat(100);
        let term = &terms(&long)[0];
        assert!(term.len() <= MAX_TERM_BYTES);
        assert!(term.chars().all(|c| c == 'é'));
    }
}
