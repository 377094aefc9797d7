//! Parity of the compact WordPiece tokenizer with the `tokenizers` crate on the real all-MiniLM-L6-v2
//! `tokenizer.json` (installed by `scripts/setup memory`, found through `PINCER_EMBED_MODEL_DIR`):
//! identical token ids for a corpus of input classes and for a few thousand random strings from a
//! mixed alphabet. The tests are reported skipped only when that variable is unset (outside CI).
#![cfg(not(target_arch = "arm"))]

use std::path::{Path, PathBuf};

use pincer::memory::wordpiece::WordPieceTokenizer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[path = "support/skip.rs"]
mod skip;

/// The model's `tokenizer.json` under `PINCER_EMBED_MODEL_DIR` (`scripts/test` sets it). Unset,
/// the test is reported skipped (a failure under CI); set to a directory without the file, the
/// test fails.
fn tokenizer_json(test: &str) -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("PINCER_EMBED_MODEL_DIR") else {
        assert!(
            !skip::in_ci(),
            "{test}: PINCER_EMBED_MODEL_DIR is not set (CI must run this test)"
        );
        skip::skip(
            test,
            "PINCER_EMBED_MODEL_DIR is not set (scripts/setup memory installs the model, scripts/test sets it)",
        );
        return None;
    };
    let path = PathBuf::from(dir).join("tokenizer.json");
    assert!(
        path.is_file(),
        "{} is missing (PINCER_EMBED_MODEL_DIR; run scripts/setup memory)",
        path.display()
    );
    Some(path)
}

/// Both tokenizers from the same file; the reference as the embedder used it (no padding, no truncation).
fn both(path: &Path) -> (WordPieceTokenizer, tokenizers::Tokenizer) {
    let ours =
        WordPieceTokenizer::from_file(path).expect("the MiniLM file is a BERT WordPiece one");
    let mut reference = tokenizers::Tokenizer::from_file(path).expect("reference tokenizer");
    reference.with_padding(None);
    reference.with_truncation(None).expect("truncation off");
    (ours, reference)
}

/// Differences between the two on `text`, with and without the special tokens.
fn mismatch(
    ours: &WordPieceTokenizer,
    reference: &tokenizers::Tokenizer,
    text: &str,
) -> Option<String> {
    for special in [true, false] {
        let expected = reference
            .encode(text, special)
            .expect("reference encodes")
            .get_ids()
            .to_vec();
        let got = ours.encode(text, special);
        if got != expected {
            return Some(format!(
                "{text:?} (special tokens {special}):\n  ours      {got:?}\n  reference {expected:?}"
            ));
        }
    }
    None
}

const CORPUS: &[&str] = &[
    "The quick brown fox jumps over the lazy dog.",
    "I'd've thought you'd know: it's 5 o'clock -- isn't it?",
    "# Heading\n\n- item *one*\n- item **two** with `code` and [a link](https://example.com/a?b=c&d=e#f)\n> quote",
    "fn main() { let x: Vec<u32> = vec![1, 2, 3]; println!(\"{:?}\", x.iter().sum::<u32>()); }",
    "def f(a, b=2, *args, **kw):\n\treturn a->b || c && d != e >= f",
    "https://www.example.org/path/to/page.html?query=1&x=y user@example.com ftp://host:21/",
    "3.14159 1,000,000 -42 +7 1e-9 0x1F 12:30 2024-06-01 50% $19.99 €5 £3 ¥100",
    "!!! ??? ... --- *** ((())) [[[ ]]] {{{}}} ~~~ ^^^ @@@ ### $$$ %%% &&& ___ +++ === ||| \\\\ ''' \"\"\"",
    "café naïve Ångström résumé coöperate façade São Paulo Zürich Ærø œuvre",
    "e\u{301}tude combining: a\u{300}\u{301}\u{302} o\u{308} n\u{303}",
    "ΣΊΣΥΦΟΣ όδός İstanbul ǅ ẞ ﬁ ﬀ Ⅻ ½ ² ℃ ﹏",
    "我喜欢在周末去爬山。我妹妹下个月在杭州结婚，婚礼定在西湖边的酒店。",
    "日本語のテキスト：ひらがな、カタカナ、漢字。東京タワー",
    "한국어 텍스트입니다. 안녕하세요! 서울특별시",
    "emoji 😀🎉👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ ✨ 🤖",
    "control\u{0}chars\u{7}\u{1b}[31mred\u{1b}[0m\u{fffd}\u{200b}zero\u{200d}width\u{feff}bom\u{ad}soft",
    "tabs\tand\nnew\r\nlines\u{85}next\u{a0}nbsp\u{2028}ls\u{3000}ideographic space",
    "[SEP] at start, in the middle [SEP] and [MASK] here [CLS][PAD][UNK] and [sep] [ SEP ] [SEP[SEP]]",
    "a[SEP]b[MASK]c [SEP][SEP] [[MASK]]",
    "",
    " ",
    "   \t\n\r  ",
    "\u{3000}\u{a0}",
    "##ing ## # ##",
    "Arabic: مرحبا بالعالم. Hebrew: שָׁלוֹם. Hindi: नमस्ते दुनिया। Thai: สวัสดีครับ",
    "Cyrillic: Привет, мир! Ёлка. Greek: Καλημέρα κόσμε; Armenian: Բարեւ",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ ！？",
    "𠀀𠀁 𪜀 𫝀 𫠠 𬺰 丽 CJK extension characters",
];

#[test]
fn token_ids_match_the_reference_for_every_input_class() {
    let Some(path) = tokenizer_json("token_ids_match_the_reference_for_every_input_class") else {
        return;
    };
    let (ours, reference) = both(&path);
    let long_word = "a".repeat(101);
    let long_accented = "é".repeat(100);
    let almost_long = format!("{}b", "x".repeat(99));
    let mut corpus: Vec<&str> = CORPUS.to_vec();
    corpus.extend([
        long_word.as_str(),
        long_accented.as_str(),
        almost_long.as_str(),
    ]);
    let failures: Vec<String> = corpus
        .iter()
        .filter_map(|text| mismatch(&ours, &reference, text))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn words_over_one_hundred_characters_are_one_unknown_token() {
    let Some(path) = tokenizer_json("words_over_one_hundred_characters_are_one_unknown_token")
    else {
        return;
    };
    let (ours, _) = both(&path);
    let unk = 100;
    assert_eq!(ours.encode(&"a".repeat(101), false), vec![unk]);
    assert_ne!(ours.encode(&"a".repeat(100), false), vec![unk]);
    assert_eq!(ours.encode("[SEP]", true), vec![101, 102, 102]);
}

/// Pieces random text is drawn from: letters, digits, punctuation, whitespace and control characters,
/// accents (precomposed and combining), CJK, kana, Hangul, emoji, special-token fragments.
const ALPHABET: &[&str] = &[
    "a", "b", "e", "s", "t", "ing", "the", "un", "X", "Z", "0", "7", "42", ".", ",", "-", "'",
    "\"", "(", ")", "[", "]", "#", "##", "$", "@", "/", ":", "_", "~", "`", "\\", " ", " ", " ",
    "\t", "\n", "\r", "\u{0}", "\u{7}", "\u{1b}", "\u{7f}", "\u{ad}", "\u{200b}", "\u{200d}",
    "\u{feff}", "\u{fffd}", "\u{a0}", "\u{3000}", "\u{85}", "é", "É", "ñ", "Å", "ö", "ß", "ẞ", "İ",
    "Σ", "ς", "ﬁ", "\u{301}", "\u{308}", "\u{327}", "\u{5b4}", "\u{94d}", "中", "国", "人", "𠀀",
    "丽", "あ", "カ", "ー", "한", "국", "ㄱ", "😀", "👍🏽", "\u{fe0f}", "🇫🇷", "€", "½", "²", "Ⅻ",
    "ｆ", "！", "«", "»", "“", "”", "…", "–", "—", "·", "¿", "¡", "§", "¶", "°", "±", "×", "÷",
    "→", "√", "∞", "[SEP]", "[MASK]", "[CLS]", "[SE", "P]", "MASK", "ب", "ש", "न", "ส", "\u{e31}",
    "д", "Ё",
];

fn random_text(rng: &mut StdRng) -> String {
    let pieces = rng.gen_range(0..40);
    let mut text = String::new();
    for _ in 0..pieces {
        let piece = ALPHABET[rng.gen_range(0..ALPHABET.len())];
        let repeat = if rng.gen_ratio(1, 20) {
            rng.gen_range(2..60)
        } else {
            1
        };
        for _ in 0..repeat {
            text.push_str(piece);
        }
    }
    text
}

#[test]
fn random_mixed_alphabet_strings_match_the_reference() {
    let Some(path) = tokenizer_json("random_mixed_alphabet_strings_match_the_reference") else {
        return;
    };
    let (ours, reference) = both(&path);
    let mut rng = StdRng::seed_from_u64(0x5eed_1234);
    let failures: Vec<String> = (0..3000)
        .map(|_| random_text(&mut rng))
        .filter_map(|text| mismatch(&ours, &reference, &text))
        .take(5)
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
