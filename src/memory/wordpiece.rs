//! A compact BERT WordPiece tokenizer, read from a Hugging Face `tokenizer.json` that describes exactly what
//! it implements: the `BertNormalizer` (clean text, Chinese characters spaced out, accents stripped via NFD,
//! lower-casing), the `BertPreTokenizer` (split on whitespace, punctuation isolated), the `WordPiece` model
//! (greedy longest match, continuation prefix, over-long or unmatched words become the unknown token), a
//! `TemplateProcessing`/`BertProcessing` post-processor of the `[CLS] A [SEP]` kind, and added tokens matched
//! literally in the raw input (leftmost-longest) and kept whole. Its token ids equal the `tokenizers` crate's
//! for such a file (no padding, no truncation: the embedder truncates itself).
//!
//! Owns only tokenization and its memory: the vocabulary lives in one string arena with a hash table of
//! `u32` entry indexes (no per-token heap strings), and the file is parsed with a borrowed, field-by-field
//! deserialize (no JSON tree). Any other `tokenizer.json` is refused with [`WordPieceError::Unsupported`] so
//! that the caller keeps using the `tokenizers` crate; this file must not guess at formats it does not know.
//! The Unicode tables are the ones `tokenizers` itself uses (`unicode-normalization-alignments`,
//! `unicode_categories`), so normalization and character classes agree with it character for character.

mod spec;
mod vocabulary;

use std::path::{Path, PathBuf};

use unicode_categories::UnicodeCategories;
use unicode_normalization_alignments::UnicodeNormalization;

use spec::{AddedToken, BertNormalization};
use vocabulary::Vocabulary;

/// Why a `tokenizer.json` was not loaded as a WordPiece tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum WordPieceError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tokenizer.json is not valid for the WordPiece reader: {0}")]
    Json(#[from] serde_json::Error),
    /// The file describes something this tokenizer does not implement (the caller falls back).
    #[error(
        "tokenizer.json {part} is {found}, not what the compact WordPiece tokenizer implements"
    )]
    Unsupported { part: &'static str, found: String },
}

/// BERT's whitespace (normalizer view): tab, newline, carriage return and Unicode whitespace.
fn is_bert_whitespace(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || c.is_whitespace()
}

/// BERT's control characters: Unicode "other" categories except tab, newline and carriage return.
fn is_bert_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r') && c.is_other()
}

/// The CJK Unified Ideograph blocks BERT spaces out (not Hangul, Hiragana or Katakana).
fn is_chinese_char(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

/// BERT's punctuation: ASCII punctuation (which includes symbols like `$` and `+`) or Unicode `P*`.
fn is_bert_punctuation(c: char) -> bool {
    c.is_ascii_punctuation() || c.is_punctuation()
}

/// A BERT WordPiece tokenizer (see the file comment).
pub struct WordPieceTokenizer {
    normalization: BertNormalization,
    vocabulary: Vocabulary,
    unk_id: u32,
    continuing_prefix: String,
    max_word_chars: usize,
    added: Vec<AddedToken>,
    prefix_ids: Vec<u32>,
    suffix_ids: Vec<u32>,
}

impl WordPieceTokenizer {
    /// Reads `path` (a `tokenizer.json`); `Unsupported` when it describes another tokenizer.
    pub fn from_file(path: &Path) -> Result<WordPieceTokenizer, WordPieceError> {
        let bytes = std::fs::read(path).map_err(|source| WordPieceError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        WordPieceTokenizer::from_json(&bytes)
    }

    /// Parses a `tokenizer.json`; `Unsupported` when it describes another tokenizer.
    pub fn from_json(json: &[u8]) -> Result<WordPieceTokenizer, WordPieceError> {
        let spec = spec::read(json)?;
        Ok(WordPieceTokenizer {
            normalization: spec.normalization,
            vocabulary: spec.vocabulary,
            unk_id: spec.unk_id,
            continuing_prefix: spec.continuing_prefix,
            max_word_chars: spec.max_word_chars,
            added: spec.added,
            prefix_ids: spec.prefix_ids,
            suffix_ids: spec.suffix_ids,
        })
    }

    /// Token ids of `text`, with the post-processor's special tokens when `add_special_tokens`.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 4);
        if add_special_tokens {
            ids.extend_from_slice(&self.prefix_ids);
        }
        let mut scratch = Scratch::default();
        let mut next_match = vec![None; self.added.len()];
        let mut from = 0;
        while let Some((start, end, id)) = self.next_added_token(text, from, &mut next_match) {
            self.encode_segment(&text[from..start], &mut scratch, &mut ids);
            ids.push(id);
            from = end;
        }
        self.encode_segment(&text[from..], &mut scratch, &mut ids);
        if add_special_tokens {
            ids.extend_from_slice(&self.suffix_ids);
        }
        ids
    }

    /// Tokens in the vocabulary (entries as listed in the file).
    pub fn vocab_size(&self) -> usize {
        self.vocabulary.len()
    }

    /// Bytes this tokenizer holds on the heap (arena, index, added tokens).
    pub fn heap_bytes(&self) -> usize {
        self.vocabulary.heap_bytes()
            + self
                .added
                .iter()
                .map(|t| t.content.capacity() + 32)
                .sum::<usize>()
            + self.continuing_prefix.capacity()
    }

    /// The leftmost added token at or after `from` (the longest one when several start there), using and
    /// refreshing each token's cached next occurrence so the whole text is scanned once per token.
    fn next_added_token(
        &self,
        text: &str,
        from: usize,
        next_match: &mut [Option<Option<usize>>],
    ) -> Option<(usize, usize, u32)> {
        let mut best: Option<(usize, usize, u32)> = None;
        for (token, cached) in self.added.iter().zip(next_match.iter_mut()) {
            let position = match *cached {
                Some(Some(at)) if at >= from => Some(at),
                Some(None) => None,
                _ => text[from..]
                    .find(token.content.as_str())
                    .map(|at| from + at),
            };
            *cached = Some(position);
            if let Some(start) = position {
                let end = start + token.content.len();
                let better = best.is_none_or(|(s, e, _)| start < s || (start == s && end > e));
                if better {
                    best = Some((start, end, token.id));
                }
            }
        }
        best
    }

    /// Normalizes, pre-tokenizes and WordPiece-tokenizes text that holds no added token.
    fn encode_segment(&self, segment: &str, scratch: &mut Scratch, ids: &mut Vec<u32>) {
        if segment.is_empty() {
            return;
        }
        self.normalize(segment, scratch);
        scratch.word.clear();
        for c in scratch.normalized.chars() {
            if c.is_whitespace() {
                self.encode_word(&scratch.word, ids);
                scratch.word.clear();
            } else if is_bert_punctuation(c) {
                self.encode_word(&scratch.word, ids);
                scratch.word.clear();
                let mut single = [0u8; 4];
                self.encode_word(c.encode_utf8(&mut single), ids);
            } else {
                scratch.word.push(c);
            }
        }
        self.encode_word(&scratch.word, ids);
    }

    /// BertNormalizer: clean text and space out Chinese characters, then NFD without non-spacing marks, then
    /// per-character lower-casing (as `tokenizers` does it: no final-sigma context).
    fn normalize(&self, segment: &str, scratch: &mut Scratch) {
        let rules = self.normalization;
        scratch.spaced.clear();
        for c in segment.chars() {
            if rules.clean_text {
                if c == '\0' || c == '\u{fffd}' || is_bert_control(c) {
                    continue;
                }
                if is_bert_whitespace(c) {
                    scratch.spaced.push(' ');
                    continue;
                }
            }
            if rules.handle_chinese_chars && is_chinese_char(c) {
                scratch.spaced.extend([' ', c, ' ']);
            } else {
                scratch.spaced.push(c);
            }
        }
        scratch.normalized.clear();
        let push = |c: char, out: &mut String| {
            if rules.lowercase {
                out.extend(c.to_lowercase());
            } else {
                out.push(c);
            }
        };
        if rules.strip_accents {
            for (c, _) in scratch.spaced.as_str().nfd() {
                if !c.is_mark_nonspacing() {
                    push(c, &mut scratch.normalized);
                }
            }
        } else {
            for c in scratch.spaced.chars() {
                push(c, &mut scratch.normalized);
            }
        }
    }

    /// Greedy longest-match-first WordPiece; a word too long or with an unmatched rest is one unknown token.
    fn encode_word(&self, word: &str, ids: &mut Vec<u32>) {
        if word.is_empty() {
            return;
        }
        if word.chars().count() > self.max_word_chars {
            ids.push(self.unk_id);
            return;
        }
        let first = ids.len();
        let mut start = 0;
        while start < word.len() {
            let mut end = word.len();
            let mut found = None;
            while start < end {
                let piece = &word[start..end];
                if let Some(id) = self
                    .vocabulary
                    .lookup(&self.continuing_prefix, start > 0, piece)
                {
                    found = Some(id);
                    break;
                }
                end -= piece.chars().next_back().map_or(1, char::len_utf8);
            }
            match found {
                Some(id) => ids.push(id),
                None => {
                    ids.truncate(first);
                    ids.push(self.unk_id);
                    return;
                }
            }
            start = end;
        }
    }
}

/// Buffers reused across the segments of one `encode`.
#[derive(Default)]
struct Scratch {
    spaced: String,
    normalized: String,
    word: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small BERT-style tokenizer.json; `patch` replaces one top-level field's JSON.
    fn tokenizer_json(patch: Option<(&str, &str)>) -> String {
        let mut fields = [
            (
                "added_tokens",
                r#"[{"id":0,"content":"[UNK]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":1,"content":"[CLS]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":2,"content":"[SEP]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}]"#,
            ),
            (
                "normalizer",
                r#"{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true}"#,
            ),
            ("pre_tokenizer", r#"{"type":"BertPreTokenizer"}"#),
            (
                "post_processor",
                r#"{"type":"BertProcessing","sep":["[SEP]",2],"cls":["[CLS]",1]}"#,
            ),
            (
                "model",
                r###"{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":10,"vocab":{"[UNK]":0,"[CLS]":1,"[SEP]":2,"un":3,"##aff":4,"##able":5,"cafe":6,"!":7,"\"q\u00e9\"":8,"中":9,"un":10}}"###,
            ),
        ];
        if let Some((name, json)) = patch {
            fields
                .iter_mut()
                .filter(|(n, _)| *n == name)
                .for_each(|f| f.1 = json);
        }
        let body: Vec<String> = fields.iter().map(|(n, j)| format!("\"{n}\":{j}")).collect();
        format!(
            "{{\"version\":\"1.0\",\"truncation\":null,{}}}",
            body.join(",")
        )
    }

    fn load(patch: Option<(&str, &str)>) -> Result<WordPieceTokenizer, WordPieceError> {
        WordPieceTokenizer::from_json(tokenizer_json(patch).as_bytes())
    }

    #[test]
    fn words_split_greedily_into_the_longest_known_pieces() {
        let tokenizer = load(None).expect("BERT WordPiece file");
        // "un" is listed twice: the last id wins, as in a map read from JSON.
        assert_eq!(
            tokenizer.encode("Unaffable!", true),
            vec![1, 10, 4, 5, 7, 2]
        );
        assert_eq!(tokenizer.encode("CAFÉ 中", false), vec![6, 9]);
        assert_eq!(tokenizer.vocab_size(), 11);
    }

    #[test]
    fn unmatched_or_over_long_words_are_one_unknown_token() {
        let tokenizer = load(None).expect("BERT WordPiece file");
        assert_eq!(tokenizer.encode("unaffx", false), vec![0]);
        assert_eq!(tokenizer.encode("unaffableaff", false), vec![0]);
        assert_eq!(tokenizer.encode("unaffaff", false), vec![10, 4, 4]);
    }

    #[test]
    fn special_tokens_in_the_text_are_kept_whole_and_escaped_vocabulary_keys_are_read() {
        let tokenizer = load(None).expect("BERT WordPiece file");
        assert_eq!(
            // "[SEP" is no special token: "[" and "sep" are unknown words.
            tokenizer.encode("un[SEP]cafe[SEP", false),
            vec![10, 2, 6, 0, 0]
        );
        let escaped = tokenizer.vocabulary.lookup("", false, "\"qé\"");
        assert_eq!(escaped, Some(8));
    }

    #[test]
    fn other_tokenizer_descriptions_are_refused_as_unsupported() {
        let refusals = [
            ("normalizer", r#"{"type":"Sequence","normalizers":[]}"#),
            ("pre_tokenizer", r#"{"type":"Metaspace","replacement":"_"}"#),
            (
                "post_processor",
                r#"{"type":"RobertaProcessing","sep":["</s>",2],"cls":["<s>",0]}"#,
            ),
            (
                "model",
                r#"{"type":"Unigram","unk_id":0,"vocab":[["<unk>",0.0],["a",-1.5]]}"#,
            ),
            ("model", r#"{"type":"BPE","vocab":{"a":0},"merges":[]}"#),
            (
                "added_tokens",
                r#"[{"id":0,"content":"[UNK]","normalized":true}]"#,
            ),
            (
                "added_tokens",
                r#"[{"id":0,"content":"[UNK]","lstrip":true}]"#,
            ),
        ];
        for patch in refusals {
            let refused = load(Some(patch)).err();
            assert!(
                matches!(refused, Some(WordPieceError::Unsupported { .. })),
                "{patch:?}: {refused:?}"
            );
        }
        assert!(matches!(
            WordPieceTokenizer::from_json(b"{"),
            Err(WordPieceError::Json(_))
        ));
    }

    #[test]
    fn a_template_post_processor_puts_its_special_tokens_around_the_text() {
        let template = r#"{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"[SEP]","type_id":0}}],"pair":[],"special_tokens":{"[CLS]":{"id":"[CLS]","ids":[1],"tokens":["[CLS]"]},"[SEP]":{"id":"[SEP]","ids":[2],"tokens":["[SEP]"]}}}"#;
        let tokenizer = load(Some(("post_processor", template))).expect("template");
        assert_eq!(tokenizer.encode("", true), vec![1, 2]);
        assert_eq!(tokenizer.encode("  ", false), Vec::<u32>::new());
    }
}
