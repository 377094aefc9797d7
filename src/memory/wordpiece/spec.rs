//! Reading `tokenizer.json` for the compact WordPiece tokenizer: only the fields it needs, deserialized
//! field by field (no JSON tree; the vocabulary goes straight into its arena), then checked to describe
//! exactly a BERT WordPiece tokenizer. Anything else is `Unsupported`, naming the part, so the caller keeps
//! the `tokenizers` crate. This file must not tokenize.

use serde::Deserialize;

use super::vocabulary::{VocabField, Vocabulary};
use super::WordPieceError;

fn unsupported(part: &'static str, found: impl Into<String>) -> WordPieceError {
    WordPieceError::Unsupported {
        part,
        found: found.into(),
    }
}

/// The `BertNormalizer` switches, `strip_accents` resolved (unset follows `lowercase`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BertNormalization {
    pub(super) clean_text: bool,
    pub(super) handle_chinese_chars: bool,
    pub(super) strip_accents: bool,
    pub(super) lowercase: bool,
}

/// A token matched literally in the raw input and emitted whole.
#[derive(Clone, Debug)]
pub(super) struct AddedToken {
    pub(super) content: String,
    pub(super) id: u32,
}

/// The parts of `tokenizer.json` this reader looks at; every other field is skipped unparsed.
#[derive(Deserialize)]
struct TokenizerFile {
    #[serde(default)]
    added_tokens: Vec<AddedTokenSpec>,
    normalizer: Option<NormalizerSpec>,
    pre_tokenizer: Option<TypeSpec>,
    post_processor: Option<PostProcessorSpec>,
    model: ModelSpec,
}

#[derive(Deserialize)]
struct AddedTokenSpec {
    id: u32,
    content: String,
    #[serde(default)]
    single_word: bool,
    #[serde(default)]
    lstrip: bool,
    #[serde(default)]
    rstrip: bool,
    #[serde(default)]
    normalized: bool,
}

#[derive(Deserialize)]
struct TypeSpec {
    #[serde(rename = "type")]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct NormalizerSpec {
    #[serde(rename = "type")]
    kind: Option<String>,
    clean_text: Option<bool>,
    handle_chinese_chars: Option<bool>,
    strip_accents: Option<bool>,
    lowercase: Option<bool>,
}

#[derive(Deserialize)]
enum TemplatePiece {
    SpecialToken { id: String, type_id: u32 },
    Sequence { id: String, type_id: u32 },
}

#[derive(Deserialize)]
struct SpecialTokenSpec {
    ids: Vec<u32>,
}

#[derive(Deserialize)]
struct PostProcessorSpec {
    #[serde(rename = "type")]
    kind: Option<String>,
    single: Option<Vec<TemplatePiece>>,
    special_tokens: Option<std::collections::HashMap<String, SpecialTokenSpec>>,
    cls: Option<(String, u32)>,
    sep: Option<(String, u32)>,
}

#[derive(Deserialize)]
struct ModelSpec {
    #[serde(rename = "type")]
    kind: Option<String>,
    unk_token: Option<String>,
    continuing_subword_prefix: Option<String>,
    max_input_chars_per_word: Option<usize>,
    #[serde(default)]
    vocab: VocabField,
}

/// The post-processor's tokens around a single sequence, if it is one this reader implements.
fn special_affixes(
    spec: Option<PostProcessorSpec>,
) -> Result<(Vec<u32>, Vec<u32>), WordPieceError> {
    let Some(spec) = spec else {
        return Ok((Vec::new(), Vec::new()));
    };
    match spec.kind.as_deref() {
        Some("BertProcessing") => match (spec.cls, spec.sep) {
            (Some((_, cls)), Some((_, sep))) => Ok((vec![cls], vec![sep])),
            _ => Err(unsupported(
                "post_processor",
                "BertProcessing without cls/sep",
            )),
        },
        Some("TemplateProcessing") => {
            let single = spec.single.unwrap_or_default();
            let specials = spec.special_tokens.unwrap_or_default();
            let (mut prefix, mut suffix, mut seen_sequence) = (Vec::new(), Vec::new(), false);
            for piece in single {
                match piece {
                    TemplatePiece::Sequence { id, type_id }
                        if id == "A" && type_id == 0 && !seen_sequence =>
                    {
                        seen_sequence = true;
                    }
                    TemplatePiece::SpecialToken { id, type_id: 0 } => {
                        let ids = &specials
                            .get(&id)
                            .ok_or_else(|| {
                                unsupported(
                                    "post_processor",
                                    format!("template token {id} undefined"),
                                )
                            })?
                            .ids;
                        if seen_sequence {
                            &mut suffix
                        } else {
                            &mut prefix
                        }
                        .extend_from_slice(ids);
                    }
                    _ => {
                        return Err(unsupported(
                            "post_processor",
                            "a template other than specials around A (type 0)",
                        ))
                    }
                }
            }
            if !seen_sequence {
                return Err(unsupported(
                    "post_processor",
                    "a template without sequence A",
                ));
            }
            Ok((prefix, suffix))
        }
        other => Err(unsupported("post_processor", format!("{other:?}"))),
    }
}

fn bert_normalization(spec: Option<NormalizerSpec>) -> Result<BertNormalization, WordPieceError> {
    let spec = spec.ok_or_else(|| unsupported("normalizer", "null"))?;
    if spec.kind.as_deref() != Some("BertNormalizer") {
        return Err(unsupported("normalizer", format!("{:?}", spec.kind)));
    }
    match (spec.clean_text, spec.handle_chinese_chars, spec.lowercase) {
        (Some(clean_text), Some(handle_chinese_chars), Some(lowercase)) => Ok(BertNormalization {
            clean_text,
            handle_chinese_chars,
            strip_accents: spec.strip_accents.unwrap_or(lowercase),
            lowercase,
        }),
        _ => Err(unsupported(
            "normalizer",
            "BertNormalizer with missing fields",
        )),
    }
}

fn literal_added_tokens(specs: Vec<AddedTokenSpec>) -> Result<Vec<AddedToken>, WordPieceError> {
    specs
        .into_iter()
        .map(|spec| {
            if spec.normalized
                || spec.lstrip
                || spec.rstrip
                || spec.single_word
                || spec.content.is_empty()
            {
                Err(unsupported(
                    "added_tokens",
                    format!(
                        "{:?} with normalized/lstrip/rstrip/single_word or empty",
                        spec.content
                    ),
                ))
            } else {
                Ok(AddedToken {
                    content: spec.content,
                    id: spec.id,
                })
            }
        })
        .collect()
}

/// Everything the tokenizer needs from the file.
pub(super) struct TokenizerSpec {
    pub(super) normalization: BertNormalization,
    pub(super) vocabulary: Vocabulary,
    pub(super) unk_id: u32,
    pub(super) continuing_prefix: String,
    pub(super) max_word_chars: usize,
    pub(super) added: Vec<AddedToken>,
    pub(super) prefix_ids: Vec<u32>,
    pub(super) suffix_ids: Vec<u32>,
}

/// Parses a `tokenizer.json`; `Unsupported` when it describes another tokenizer.
pub(super) fn read(json: &[u8]) -> Result<TokenizerSpec, WordPieceError> {
    let file: TokenizerFile = serde_json::from_slice(json)?;
    let normalization = bert_normalization(file.normalizer)?;
    let pre_tokenizer = file.pre_tokenizer.and_then(|p| p.kind);
    if pre_tokenizer.as_deref() != Some("BertPreTokenizer") {
        return Err(unsupported("pre_tokenizer", format!("{pre_tokenizer:?}")));
    }
    let (prefix_ids, suffix_ids) = special_affixes(file.post_processor)?;
    let added = literal_added_tokens(file.added_tokens)?;
    let model = file.model;
    if model.kind.as_deref() != Some("WordPiece") || !model.vocab.is_map {
        return Err(unsupported("model", format!("{:?}", model.kind)));
    }
    let (Some(unk_token), Some(continuing_prefix), Some(max_word_chars)) = (
        model.unk_token,
        model.continuing_subword_prefix,
        model.max_input_chars_per_word,
    ) else {
        return Err(unsupported("model", "WordPiece with missing fields"));
    };
    let mut vocabulary = model.vocab.vocabulary;
    vocabulary.index();
    let unk_id = vocabulary.lookup("", false, &unk_token).ok_or_else(|| {
        unsupported(
            "model",
            format!("unk_token {unk_token} outside the vocabulary"),
        )
    })?;
    Ok(TokenizerSpec {
        normalization,
        vocabulary,
        unk_id,
        continuing_prefix,
        max_word_chars,
        added,
        prefix_ids,
        suffix_ids,
    })
}
