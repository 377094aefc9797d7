//! The `transcripts` database: the append-only message log of each session id.
//!
//! Key layout: session id bytes, one 0x00 separator, then the entry's sequence number as a big-endian u64, so
//! one session's entries sit together in sequence order and no id is a key-prefix of another's range. Sequence
//! numbers start at 1 and only grow, except that `truncate_transcript_after` (transcript_truncate.rs) frees
//! the numbers it removes. This file must not interpret message text (agent and gateway do) nor decide
//! when a transcript dies (maintenance and the session owner do).

use std::ops::Bound;

use heed::RoTxn;
use serde::{Deserialize, Serialize};

use super::codec::{corrupt, decode, encode, Record, MAX_KEY_BYTES};
use super::env::{Databases, TxnError, TRANSCRIPTS_DB};
use super::{Store, StoreError};

/// Byte between the session id and the sequence number in a transcript key.
const KEY_SEPARATOR: u8 = 0x00;
/// Bytes after the session id: separator + big-endian u64.
const KEY_SUFFIX_BYTES: usize = 1 + 8;
/// Longest session id a transcript key can hold.
pub const MAX_SESSION_ID_BYTES: usize = MAX_KEY_BYTES - KEY_SUFFIX_BYTES;

/// One message in a session's transcript. Times in ms since the epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptEntry {
    /// `"user"` | `"assistant"` | `"system"` | `"tool"`.
    pub role: String,
    pub text: String,
    pub timestamp_ms: u64,
    pub run_id: Option<String>,
    pub stop_reason: Option<String>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// Anything richer (content blocks, tool calls, attachments) as a JSON document.
    pub extra_json: Option<String>,
}

impl Record for TranscriptEntry {
    const VERSION: u8 = 1;
}

impl Store {
    /// Appends an entry to a session's transcript and returns its sequence number (1 for the first).
    pub fn append_transcript(
        &self,
        session_id: &str,
        entry: &TranscriptEntry,
    ) -> Result<u64, StoreError> {
        check_session_id(session_id)?;
        let value = encode(TRANSCRIPTS_DB, session_id, entry)?;
        let session_id = session_id.to_string();
        self.env
            .write_grouped("append_transcript", move |txn, dbs| {
                let seq = last_seq(txn, dbs, &session_id)?.map_or(1, |last| last + 1);
                dbs.transcripts
                    .put(txn, &entry_key(&session_id, seq), &value)?;
                Ok(seq)
            })
    }

    /// Appends several entries to a session's transcript in one write transaction (an import's batch) and
    /// returns the sequence number of the last one (`None` when `entries` is empty).
    pub fn append_transcript_batch(
        &self,
        session_id: &str,
        entries: &[TranscriptEntry],
    ) -> Result<Option<u64>, StoreError> {
        check_session_id(session_id)?;
        if entries.is_empty() {
            return Ok(None);
        }
        let values = entries
            .iter()
            .map(|entry| encode(TRANSCRIPTS_DB, session_id, entry))
            .collect::<Result<Vec<_>, _>>()?;
        self.env.write("append_transcript_batch", |txn, dbs| {
            let mut seq = last_seq(txn, dbs, session_id)?.unwrap_or(0);
            for value in &values {
                seq += 1;
                dbs.transcripts
                    .put(txn, &entry_key(session_id, seq), value)?;
            }
            Ok(Some(seq))
        })
    }

    /// The last `limit` entries of a session's transcript with their sequence numbers, oldest first.
    pub fn transcript_tail(
        &self,
        session_id: &str,
        limit: usize,
    ) -> Result<Vec<(u64, TranscriptEntry)>, StoreError> {
        check_session_id(session_id)?;
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.env.read("transcript_tail", |txn, dbs| {
            let mut tail = Vec::with_capacity(limit.min(1024));
            for item in dbs
                .transcripts
                .rev_prefix_iter(txn, &key_prefix(session_id))?
                .take(limit)
            {
                let (key, bytes) = item?;
                let seq = seq_of(session_id, key)?;
                let entry = decode(bytes).map_err(|reason| {
                    corrupt(TRANSCRIPTS_DB, &key_label(session_id, seq), reason)
                })?;
                tail.push((seq, entry));
            }
            tail.reverse();
            Ok(tail)
        })
    }

    /// Removes a session's whole transcript and returns how many entries it held.
    pub fn delete_transcript(&self, session_id: &str) -> Result<u64, StoreError> {
        check_session_id(session_id)?;
        self.env.delete("delete_transcript", |txn, dbs| {
            delete_entries(txn, dbs, session_id)
        })
    }
}

/// Deletes every entry of `session_id` in the given write transaction.
pub(super) fn delete_entries(
    txn: &mut heed::RwTxn<'_>,
    dbs: &Databases,
    session_id: &str,
) -> Result<u64, TxnError> {
    let start = key_prefix(session_id);
    let mut end = session_id.as_bytes().to_vec();
    end.push(KEY_SEPARATOR + 1);
    let range = (
        Bound::Included(start.as_slice()),
        Bound::Excluded(end.as_slice()),
    );
    Ok(dbs.transcripts.delete_range(txn, &range)? as u64)
}

/// The highest sequence number stored for `session_id`.
pub(super) fn last_seq(
    txn: &RoTxn<'_>,
    dbs: &Databases,
    session_id: &str,
) -> Result<Option<u64>, TxnError> {
    match dbs
        .transcripts
        .rev_prefix_iter(txn, &key_prefix(session_id))?
        .next()
    {
        None => Ok(None),
        Some(item) => Ok(Some(seq_of(session_id, item?.0)?)),
    }
}

/// Checks that a session id can form transcript keys: non-empty, no NUL byte, short enough.
pub(super) fn check_session_id(session_id: &str) -> Result<(), StoreError> {
    let reason = if session_id.is_empty() {
        "session id is empty".to_string()
    } else if session_id.as_bytes().contains(&KEY_SEPARATOR) {
        "session id contains a NUL byte".to_string()
    } else if session_id.len() > MAX_SESSION_ID_BYTES {
        format!(
            "session id is {} bytes; the limit is {MAX_SESSION_ID_BYTES}",
            session_id.len()
        )
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidKey {
        db: TRANSCRIPTS_DB,
        reason,
    })
}

pub(super) fn key_prefix(session_id: &str) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(session_id.len() + KEY_SUFFIX_BYTES);
    prefix.extend_from_slice(session_id.as_bytes());
    prefix.push(KEY_SEPARATOR);
    prefix
}

pub(super) fn entry_key(session_id: &str, seq: u64) -> Vec<u8> {
    let mut key = key_prefix(session_id);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// The sequence number in a key of `session_id`'s range.
pub(super) fn seq_of(session_id: &str, key: &[u8]) -> Result<u64, StoreError> {
    let suffix = key.get(session_id.len() + 1..).unwrap_or_default();
    let raw: [u8; 8] = suffix.try_into().map_err(|_| {
        corrupt(
            TRANSCRIPTS_DB,
            &String::from_utf8_lossy(key),
            format!("key suffix is {} bytes, not 8", suffix.len()),
        )
    })?;
    Ok(u64::from_be_bytes(raw))
}

/// How a transcript key is named in errors: `<session id>#<seq>`.
fn key_label(session_id: &str, seq: u64) -> String {
    format!("{session_id}#{seq}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    fn message(role: &str, text: &str, timestamp_ms: u64) -> TranscriptEntry {
        TranscriptEntry {
            role: role.into(),
            text: text.into(),
            timestamp_ms,
            ..TranscriptEntry::default()
        }
    }

    #[test]
    fn appends_get_increasing_sequence_numbers_per_session() {
        let (_dir, store) = temp_store();
        assert_eq!(
            store
                .append_transcript("s1", &message("user", "hi", 1))
                .expect("append"),
            1
        );
        assert_eq!(
            store
                .append_transcript("s1", &message("assistant", "hello", 2))
                .expect("append"),
            2
        );
        assert_eq!(
            store
                .append_transcript("s2", &message("user", "other", 3))
                .expect("append"),
            1
        );
        assert_eq!(
            store
                .append_transcript("s1", &message("user", "again", 4))
                .expect("append"),
            3
        );
    }

    #[test]
    fn a_batch_continues_the_sequence_in_order() {
        let (_dir, store) = temp_store();
        store
            .append_transcript("s", &message("user", "first", 1))
            .expect("append");
        let batch = [message("user", "a", 2), message("assistant", "b", 3)];
        assert_eq!(
            store.append_transcript_batch("s", &batch).expect("batch"),
            Some(3)
        );
        assert_eq!(
            store.append_transcript_batch("s", &[]).expect("empty"),
            None
        );
        let texts: Vec<String> = store
            .transcript_tail("s", 10)
            .expect("tail")
            .into_iter()
            .map(|(_, e)| e.text)
            .collect();
        assert_eq!(texts, ["first", "a", "b"]);
    }

    #[test]
    fn tail_returns_the_last_entries_oldest_first() {
        let (_dir, store) = temp_store();
        for i in 0..5u64 {
            store
                .append_transcript("s", &message("user", &format!("m{i}"), i))
                .expect("append");
        }
        let tail = store.transcript_tail("s", 3).expect("tail");
        let got: Vec<(u64, String)> = tail.into_iter().map(|(seq, e)| (seq, e.text)).collect();
        assert_eq!(
            got,
            [
                (3, "m2".to_string()),
                (4, "m3".to_string()),
                (5, "m4".to_string())
            ]
        );
        assert_eq!(store.transcript_tail("s", 100).expect("tail").len(), 5);
        assert!(store.transcript_tail("s", 0).expect("tail").is_empty());
        assert!(store
            .transcript_tail("unknown", 10)
            .expect("tail")
            .is_empty());
    }

    #[test]
    fn full_entry_round_trips() {
        let (_dir, store) = temp_store();
        let entry = TranscriptEntry {
            run_id: Some("run-1".into()),
            stop_reason: Some("end_turn".into()),
            input_tokens: Some(12),
            output_tokens: Some(34),
            extra_json: Some(r#"{"content":[]}"#.into()),
            ..message("assistant", "done", 99)
        };
        store.append_transcript("s", &entry).expect("append");
        assert_eq!(
            store.transcript_tail("s", 1).expect("tail"),
            vec![(1, entry)]
        );
    }

    #[test]
    fn a_session_id_that_prefixes_another_keeps_its_own_entries() {
        let (_dir, store) = temp_store();
        store
            .append_transcript("abc", &message("user", "short", 1))
            .expect("append");
        store
            .append_transcript("abcd", &message("user", "long", 2))
            .expect("append");
        store
            .append_transcript("abcd", &message("user", "long2", 3))
            .expect("append");
        assert_eq!(store.transcript_tail("abc", 10).expect("tail").len(), 1);
        assert_eq!(store.delete_transcript("abc").expect("delete"), 1);
        assert_eq!(store.transcript_tail("abcd", 10).expect("tail").len(), 2);
    }

    #[test]
    fn delete_removes_every_entry_and_reports_the_count() {
        let (_dir, store) = temp_store();
        for i in 0..4 {
            store
                .append_transcript("s", &message("user", "x", i))
                .expect("append");
        }
        assert_eq!(store.delete_transcript("s").expect("delete"), 4);
        assert!(store.transcript_tail("s", 10).expect("tail").is_empty());
        assert_eq!(store.delete_transcript("s").expect("delete again"), 0);
        // A deleted transcript starts over at 1.
        assert_eq!(
            store
                .append_transcript("s", &message("user", "new", 9))
                .expect("append"),
            1
        );
    }

    #[test]
    fn session_ids_that_cannot_form_keys_are_rejected() {
        let (_dir, store) = temp_store();
        for bad in ["", "a\0b"] {
            let error = store
                .append_transcript(bad, &message("user", "x", 1))
                .expect_err("invalid");
            assert!(
                matches!(
                    error,
                    StoreError::InvalidKey {
                        db: "transcripts",
                        ..
                    }
                ),
                "{error:?}"
            );
        }
        let long = "s".repeat(MAX_SESSION_ID_BYTES + 1);
        assert!(store.transcript_tail(&long, 1).is_err());
        assert!(store
            .delete_transcript(&"s".repeat(MAX_SESSION_ID_BYTES))
            .is_ok());
    }

    #[test]
    fn corrupt_entry_error_names_session_and_sequence() {
        let (_dir, store) = temp_store();
        store
            .append_transcript("s", &message("user", "ok", 1))
            .expect("append");
        store
            .env
            .write("test", |txn, dbs| {
                Ok(dbs.transcripts.put(txn, &entry_key("s", 2), &[1, 0xff])?)
            })
            .expect("raw put");
        match store.transcript_tail("s", 5).expect_err("corrupt") {
            StoreError::Corrupt { db, key, .. } => {
                assert_eq!((db, key.as_str()), ("transcripts", "s#2"))
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
