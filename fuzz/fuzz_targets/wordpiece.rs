//! The WordPiece tokenizer: a `tokenizer.json` read from bytes (first byte 0), or any text encoded with a small
//! BERT vocabulary (otherwise). Properties: a refused file says why; every id is within the vocabulary; one
//! text gives the special tokens around at most one id per input character (a word over the limit is one
//! [UNK]); heap linear in the input.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pincer::memory::wordpiece::WordPieceTokenizer;
use pincer_fuzz::{linear_budget, within_budget};

const TOKENIZER_JSON: &str = r###"{"version":"1.0","truncation":null,
"added_tokens":[{"id":0,"content":"[UNK]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":1,"content":"[CLS]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":2,"content":"[SEP]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":11,"content":"[MASK]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
"normalizer":{"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,"lowercase":true},
"pre_tokenizer":{"type":"BertPreTokenizer"},
"post_processor":{"type":"BertProcessing","sep":["[SEP]",2],"cls":["[CLS]",1]},
"model":{"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##","max_input_chars_per_word":20,
"vocab":{"[UNK]":0,"[CLS]":1,"[SEP]":2,"un":3,"##aff":4,"##able":5,"cafe":6,"!":7,"a":8,"中":9,"the":10,"[MASK]":11,"##s":12,"##e":13,"e":14}}}"###;

fn tokenizer() -> &'static WordPieceTokenizer {
    static TOKENIZER: OnceLock<WordPieceTokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        WordPieceTokenizer::from_json(TOKENIZER_JSON.as_bytes()).expect("the fuzz vocabulary loads")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode == 0 {
        within_budget(
            "tokenizer.json",
            linear_budget(rest.len(), 64, 64 * 1024),
            || {
                if let Err(error) = WordPieceTokenizer::from_json(rest) {
                    assert!(!error.to_string().is_empty(), "a refused file says why");
                }
            },
        );
        return;
    }
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let tokenizer = tokenizer();
    within_budget(
        "wordpiece encode",
        linear_budget(text.len(), 64, 64 * 1024),
        || {
            let ids = tokenizer.encode(text, true);
            let vocab = tokenizer.vocab_size() as u32;
            assert!(
                ids.iter().all(|&id| id < vocab),
                "an id outside the vocabulary: {ids:?}"
            );
            // NFD can split one character into several; ids per input character stay within that factor.
            let limit = 2 + 4 * text.chars().count();
            assert!(
                ids.len() <= limit,
                "{} ids for {} characters",
                ids.len(),
                text.chars().count()
            );
            assert_eq!(ids.first(), Some(&1), "[CLS] first");
            assert_eq!(ids.last(), Some(&2), "[SEP] last");
        },
    );
});
