//! The model's tokenizer for local embeddings: the compact `wordpiece` tokenizer when `tokenizer.json`
//! describes a BERT WordPiece one (a few hundred KB instead of the `tokenizers` crate's ~10 MiB), else the
//! `tokenizers` crate (e.g. a multilingual SentencePiece model) when pincer is built with the non-default
//! `hf-tokenizers` feature; without it such a file is refused with a clear error. Inputs are cut to the
//! model's sequence length here, so whatever runs the model (in this process or in the embedding worker)
//! gets token ids only.
//!
//! This file must not run the model.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::memory::embedder::EmbedError;
use crate::memory::wordpiece::{WordPieceError, WordPieceTokenizer};

/// One tokenized input, truncated to the model's sequence length.
pub(crate) struct Encoded {
    pub(crate) ids: Vec<i64>,
    pub(crate) type_ids: Vec<i64>,
}

/// The model's tokenizer, never padding or truncating: the compact WordPiece one when `tokenizer.json`
/// describes exactly what it implements, else the `tokenizers` crate's (`hf-tokenizers` feature).
pub(crate) enum ModelTokenizer {
    WordPiece(WordPieceTokenizer),
    #[cfg(feature = "hf-tokenizers")]
    Hugging(Box<tokenizers::Tokenizer>),
}

impl ModelTokenizer {
    /// Reads `path`, choosing the tokenizer (see the type comment).
    pub(crate) fn load(path: &Path) -> Result<ModelTokenizer, String> {
        let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
        let refused = match WordPieceTokenizer::from_json(&bytes) {
            Ok(wordpiece) => return Ok(ModelTokenizer::WordPiece(wordpiece)),
            Err(refused) => refused,
        };
        Self::load_other(path, &bytes, &refused)
    }

    /// A `tokenizer.json` the compact WordPiece tokenizer refused, read by the `tokenizers` crate.
    #[cfg(feature = "hf-tokenizers")]
    fn load_other(
        path: &Path,
        bytes: &[u8],
        refused: &WordPieceError,
    ) -> Result<ModelTokenizer, String> {
        log::info!(
            "memory: {} read by the tokenizers crate ({refused})",
            path.display()
        );
        let mut tokenizer = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| e.to_string())?;
        tokenizer.with_padding(None);
        tokenizer.with_truncation(None).map_err(|e| e.to_string())?;
        Ok(ModelTokenizer::Hugging(Box::new(tokenizer)))
    }

    /// Without the `tokenizers` crate, a `tokenizer.json` the compact WordPiece tokenizer refused is an error
    /// naming the file, why it was refused and the feature that reads it.
    #[cfg(not(feature = "hf-tokenizers"))]
    fn load_other(
        path: &Path,
        _bytes: &[u8],
        refused: &WordPieceError,
    ) -> Result<ModelTokenizer, String> {
        Err(format!(
            "{} is not a BERT WordPiece tokenizer ({refused}); this pincer reads only those: \
             build it with the `hf-tokenizers` feature to read other tokenizer.json files",
            path.display()
        ))
    }

    /// Token ids and type ids of `text`, with the special tokens when `add_special_tokens`.
    pub(crate) fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Encoded, String> {
        match self {
            ModelTokenizer::WordPiece(wordpiece) => {
                let ids: Vec<i64> = wordpiece
                    .encode(text, add_special_tokens)
                    .into_iter()
                    .map(i64::from)
                    .collect();
                let type_ids = vec![0; ids.len()];
                Ok(Encoded { ids, type_ids })
            }
            #[cfg(feature = "hf-tokenizers")]
            ModelTokenizer::Hugging(tokenizer) => {
                let encoding = tokenizer
                    .encode(text, add_special_tokens)
                    .map_err(|e| e.to_string())?;
                let widen = |ids: &[u32]| ids.iter().map(|&id| i64::from(id)).collect();
                Ok(Encoded {
                    ids: widen(encoding.get_ids()),
                    type_ids: widen(encoding.get_type_ids()),
                })
            }
        }
    }

    /// Tokens in `text` without the special tokens (a text refused is counted by its bytes, generously).
    pub(crate) fn count(&self, text: &str) -> usize {
        match self {
            ModelTokenizer::WordPiece(wordpiece) => wordpiece.encode(text, false).len(),
            #[cfg(feature = "hf-tokenizers")]
            ModelTokenizer::Hugging(tokenizer) => tokenizer
                .encode(text, false)
                .map_or(text.len(), |encoding| encoding.len()),
        }
    }

    /// Token ids of `text` with the special tokens, cut to `max` tokens (keeping the last one, `[SEP]`).
    pub(crate) fn encode_for_model(&self, text: &str, max: usize) -> Result<Encoded, EmbedError> {
        let Encoded {
            mut ids,
            mut type_ids,
        } = self
            .encode(text, true)
            .map_err(|e| EmbedError::Inference(format!("tokenizer: {e}")))?;
        if ids.len() > max && max > 0 {
            let last = ids[ids.len() - 1];
            ids.truncate(max);
            type_ids.truncate(max);
            ids[max - 1] = last;
        }
        Ok(Encoded { ids, type_ids })
    }
}

/// A model's tokenizer, read on first use and dropped after an idle period with the model (a few MiB of
/// vocabulary and tables that a gateway without memory work should not keep).
/// A loaded tokenizer or why it could not be read, and when it was last used.
type LoadedTokenizer = (Result<Arc<ModelTokenizer>, String>, Instant);

pub(crate) struct TokenizerSlot {
    path: PathBuf,
    /// The tokenizer, or why `tokenizer.json` could not be read (kept too: not re-read for every line),
    /// and when it was last used.
    slot: Mutex<Option<LoadedTokenizer>>,
}

impl TokenizerSlot {
    /// The slot for `dir/tokenizer.json`, empty until used.
    pub(crate) fn new(dir: &Path) -> TokenizerSlot {
        TokenizerSlot {
            path: dir.join("tokenizer.json"),
            slot: Mutex::new(None),
        }
    }

    /// The tokenizer (read now if it is not loaded), marked used.
    pub(crate) fn get(&self) -> Result<Arc<ModelTokenizer>, EmbedError> {
        let mut slot = self.slot.lock();
        let (loaded, used) = slot.get_or_insert_with(|| {
            (
                ModelTokenizer::load(&self.path).map(Arc::new),
                Instant::now(),
            )
        });
        *used = Instant::now();
        loaded.clone().map_err(|reason| EmbedError::ModelFile {
            path: self.path.clone(),
            reason,
        })
    }

    /// Drops the tokenizer if unused for `idle`; returns whether it did.
    pub(crate) fn drop_if_idle(&self, idle: Duration) -> bool {
        let mut slot = self.slot.lock();
        let unused = slot
            .as_ref()
            .is_some_and(|(_, used)| used.elapsed() >= idle);
        if unused {
            *slot = None;
        }
        unused
    }
}

/// The tests' skip convention (`SKIPPED: <test>: <reason>`, counted by `scripts/test`).
#[cfg(test)]
#[path = "../../../tests/support/skip.rs"]
mod test_skip;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bert_wordpiece_tokenizer_json_gets_the_compact_tokenizer() {
        const TEST: &str = "a_bert_wordpiece_tokenizer_json_gets_the_compact_tokenizer";
        let Some(dir) = std::env::var_os("PINCER_EMBED_MODEL_DIR") else {
            assert!(
                !test_skip::in_ci(),
                "{TEST}: PINCER_EMBED_MODEL_DIR is not set"
            );
            test_skip::skip(
                TEST,
                "PINCER_EMBED_MODEL_DIR is not set (scripts/setup memory installs the model, scripts/test sets it)",
            );
            return;
        };
        let path = std::path::Path::new(&dir).join("tokenizer.json");
        assert!(
            path.is_file(),
            "{} is missing (PINCER_EMBED_MODEL_DIR; run scripts/setup memory)",
            path.display()
        );
        let tokenizer = ModelTokenizer::load(&path).expect("MiniLM tokenizer");
        assert!(matches!(tokenizer, ModelTokenizer::WordPiece(_)));
        let encoded = tokenizer.encode("Hello world", true).expect("encode");
        assert_eq!(encoded.ids, vec![101, 7592, 2088, 102]);
        assert_eq!(encoded.type_ids, vec![0; 4]);
        assert_eq!(tokenizer.count("Hello world"), 2);
    }

    /// A tokenizer.json the compact WordPiece tokenizer does not implement (a WordLevel model).
    const WORD_LEVEL_TOKENIZER_JSON: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
            "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"world":2},"unk_token":"[UNK]"}}"#;

    #[cfg(feature = "hf-tokenizers")]
    #[test]
    fn another_tokenizer_json_stays_with_the_tokenizers_crate() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, WORD_LEVEL_TOKENIZER_JSON).expect("write");
        let tokenizer = ModelTokenizer::load(&path).expect("WordLevel tokenizer");
        assert!(matches!(tokenizer, ModelTokenizer::Hugging(_)));
        let encoded = tokenizer.encode("hello there world", true).expect("encode");
        assert_eq!(encoded.ids, vec![1, 0, 2]);
    }

    #[cfg(not(feature = "hf-tokenizers"))]
    #[test]
    fn another_tokenizer_json_is_refused_naming_the_feature() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, WORD_LEVEL_TOKENIZER_JSON).expect("write");
        let error = match ModelTokenizer::load(&path) {
            Ok(_) => panic!("a WordLevel tokenizer.json must be refused without hf-tokenizers"),
            Err(error) => error,
        };
        assert!(error.contains(&path.display().to_string()), "{error}");
        assert!(
            error.contains("not what the compact WordPiece tokenizer implements"),
            "{error}"
        );
        assert!(error.contains("`hf-tokenizers` feature"), "{error}");
    }
}
