//! A turn's writes in one transaction: the transcript entry the turn adds
//! (the user's message when it starts, the reply when it ends) and the
//! session's index entry, committed together. One commit instead of two per
//! step halves the fsyncs on a turn's path, and the index entry is read and
//! written in the same transaction, so a `sessions.patch` landing meanwhile
//! is never overwritten by a stale copy.
//!
//! This file must not decide what the entries say; the agent does.

use super::codec::{check_key, encode};
use super::dedupe::{EncodedSettlement, Settlement};
use super::env::{META_DB, SESSIONS_DB, TRANSCRIPTS_DB};
use super::sessions::{read_session, SessionEntry};
use super::transcripts::{check_session_id, entry_key, last_seq, TranscriptEntry};
use super::{Store, StoreError};

impl Store {
    /// Appends `entry` (when given) to `session_id`'s transcript and writes
    /// what `update` makes of the stored index entry under `session_key`
    /// (`None`: leave it as it is), in one transaction. `update` may run more
    /// than once (the transaction is retried when the map grows), so it must
    /// have no effects of its own. Returns the entry's sequence number. The
    /// write shares its commit with other turns' writes waiting at the same
    /// time (`group_commit.rs`); it returns once that commit is synced.
    pub fn record_turn(
        &self,
        session_key: &str,
        session_id: &str,
        entry: Option<&TranscriptEntry>,
        update: impl FnMut(Option<SessionEntry>) -> Option<SessionEntry> + Send + 'static,
    ) -> Result<Option<u64>, StoreError> {
        self.record_turn_settling(session_key, session_id, entry, update, &[])
    }

    /// [`Store::record_turn`] plus `settle` in the same commit: the turn's
    /// answer kept for its idempotency keys and the records of the messages
    /// it answered removed, with the reply itself (one fsync for all).
    pub fn record_turn_settling(
        &self,
        session_key: &str,
        session_id: &str,
        entry: Option<&TranscriptEntry>,
        update: impl FnMut(Option<SessionEntry>) -> Option<SessionEntry> + Send + 'static,
        settle: &[Settlement],
    ) -> Result<Option<u64>, StoreError> {
        let settle = settle
            .iter()
            .map(EncodedSettlement::new)
            .collect::<Result<Vec<_>, _>>()?;
        self.write_turn(session_key, session_id, entry, update, settle, None)
    }

    /// [`Store::record_turn`] plus a meta record (`key` → `value`) in the same commit: a message's
    /// durable record (the inbox) written with the turn's first entry, one fsync for both.
    pub fn record_turn_keeping(
        &self,
        session_key: &str,
        session_id: &str,
        entry: Option<&TranscriptEntry>,
        update: impl FnMut(Option<SessionEntry>) -> Option<SessionEntry> + Send + 'static,
        (key, value): (&str, &[u8]),
    ) -> Result<Option<u64>, StoreError> {
        check_key(META_DB, key)?;
        let kept = Some((key.to_string(), value.to_vec()));
        self.write_turn(session_key, session_id, entry, update, Vec::new(), kept)
    }

    /// The one transaction behind the `record_turn*` methods.
    fn write_turn(
        &self,
        session_key: &str,
        session_id: &str,
        entry: Option<&TranscriptEntry>,
        mut update: impl FnMut(Option<SessionEntry>) -> Option<SessionEntry> + Send + 'static,
        settle: Vec<EncodedSettlement>,
        kept: Option<(String, Vec<u8>)>,
    ) -> Result<Option<u64>, StoreError> {
        check_key(SESSIONS_DB, session_key)?;
        check_session_id(session_id)?;
        let value = entry
            .map(|entry| encode(TRANSCRIPTS_DB, session_id, entry))
            .transpose()?;
        let (session_key, session_id) = (session_key.to_string(), session_id.to_string());
        self.env.write_grouped("record_turn", move |txn, dbs| {
            let seq = match &value {
                Some(value) => {
                    let seq = last_seq(txn, dbs, &session_id)?.map_or(1, |last| last + 1);
                    dbs.transcripts
                        .put(txn, &entry_key(&session_id, seq), value)?;
                    Some(seq)
                }
                None => None,
            };
            let current = read_session(txn, dbs, &session_key)?;
            if let Some(next) = update(current) {
                // An entry that cannot be encoded rolls the whole write back (its nested transaction).
                let bytes = encode(SESSIONS_DB, &session_key, &next)?;
                dbs.sessions.put(txn, session_key.as_bytes(), &bytes)?;
            }
            for settlement in &settle {
                settlement.apply(txn, dbs)?;
            }
            if let Some((key, value)) = &kept {
                dbs.meta.put(txn, key.as_bytes(), value)?;
            }
            Ok(seq)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    fn entry(role: &str, text: &str) -> TranscriptEntry {
        TranscriptEntry {
            role: role.into(),
            text: text.into(),
            ..TranscriptEntry::default()
        }
    }

    #[test]
    fn the_entry_and_the_index_are_written_together() {
        let (_dir, store) = temp_store();
        let seq = store
            .record_turn(
                "agent:main:main",
                "sid-1",
                Some(&entry("user", "hi")),
                |current| {
                    assert!(current.is_none());
                    Some(SessionEntry::new("sid-1", 5))
                },
            )
            .expect("record");
        assert_eq!(seq, Some(1));
        let second = store
            .record_turn(
                "agent:main:main",
                "sid-1",
                Some(&entry("assistant", "yo")),
                |current| {
                    let mut current = current.expect("stored");
                    current.input_tokens += 7;
                    Some(current)
                },
            )
            .expect("record");
        assert_eq!(second, Some(2));
        let stored = store
            .session("agent:main:main")
            .expect("read")
            .expect("entry");
        assert_eq!(stored.input_tokens, 7);
        let tail = store.transcript_tail("sid-1", 5).expect("tail");
        assert_eq!(tail.len(), 2);
    }

    #[test]
    fn settlements_are_committed_with_the_reply() {
        let (_dir, store) = temp_store();
        store
            .env
            .write("test record", |txn, dbs| {
                dbs.meta.put(txn, b"webchat-inbox/run-1", b"message")?;
                Ok(())
            })
            .expect("inbox record");
        let settle = Settlement {
            key: "idem:chat:run-1".into(),
            expires_at_ms: 10_000,
            value: br#"{"ok":true}"#.to_vec(),
            done: vec!["webchat-inbox/run-1".into()],
        };
        store
            .record_turn_settling(
                "agent:main:main",
                "sid-1",
                Some(&entry("assistant", "done")),
                |_| Some(SessionEntry::new("sid-1", 5)),
                &[settle],
            )
            .expect("record");
        assert_eq!(
            store.dedupe_get("idem:chat:run-1", 1).expect("dedupe"),
            Some(br#"{"ok":true}"#.to_vec())
        );
        let record = store
            .env
            .read("test read", |txn, dbs| {
                Ok(dbs.meta.get(txn, b"webchat-inbox/run-1")?.is_some())
            })
            .expect("read");
        assert!(!record, "the answered message's record went with the reply");
        assert_eq!(store.transcript_tail("sid-1", 5).expect("tail").len(), 1);
    }

    #[test]
    fn a_kept_record_is_committed_with_the_first_entry() {
        let (_dir, store) = temp_store();
        store
            .record_turn_keeping(
                "agent:main:main",
                "sid-1",
                Some(&entry("user", "hi")),
                |_| Some(SessionEntry::new("sid-1", 5)),
                ("webchat-inbox/run-1", b"message"),
            )
            .expect("record");
        assert_eq!(
            store.meta("webchat-inbox/run-1").expect("meta"),
            Some(b"message".to_vec())
        );
        assert_eq!(store.transcript_tail("sid-1", 5).expect("tail").len(), 1);
        let error = store
            .record_turn_keeping("agent:main:main", "sid-1", None, |_| None, ("", b"x"))
            .expect_err("an empty key");
        assert!(matches!(error, StoreError::InvalidKey { .. }), "{error:?}");
    }

    #[test]
    fn declining_the_update_leaves_the_index_and_still_appends() {
        let (_dir, store) = temp_store();
        store
            .put_session("agent:main:main", &SessionEntry::new("new-sid", 9))
            .expect("put");
        store
            .record_turn(
                "agent:main:main",
                "old-sid",
                Some(&entry("assistant", "late")),
                |_| None,
            )
            .expect("record");
        let stored = store
            .session("agent:main:main")
            .expect("read")
            .expect("entry");
        assert_eq!(stored.session_id, "new-sid");
        assert_eq!(store.transcript_tail("old-sid", 5).expect("tail").len(), 1);
    }
}
