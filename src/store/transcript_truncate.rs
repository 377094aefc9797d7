//! Taking a transcript back to an earlier length: the heartbeat removes an acknowledged exchange
//! (`HEARTBEAT_OK`) so a session's history does not fill with heartbeat noise. The removal is bounded and
//! all-or-nothing in one write transaction: at most `max_entries`, each accepted by the caller's check
//! (e.g. "written by this run"), else nothing goes, so a message another writer appended meanwhile is never
//! lost. Sequence numbers freed here are given out again by the next append; readers that remember one
//! (the memory indexer) see a shorter transcript and index it again.
//!
//! This file must not decide what to remove (the caller's check does) nor interpret message text.

use std::ops::Bound;

use super::codec::{corrupt, decode};
use super::env::TRANSCRIPTS_DB;
use super::transcripts::{check_session_id, entry_key, key_prefix, seq_of};
use super::{Store, StoreError, TranscriptEntry};

/// What `truncate_transcript_after` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TruncateOutcome {
    /// This many entries after the given sequence number were removed (0: there were none).
    Removed(u64),
    /// More than `max_entries` followed: nothing was removed.
    TooMany,
    /// An entry failed the caller's check: nothing was removed.
    Refused { seq: u64 },
}

impl Store {
    /// Removes every entry of `session_id` after sequence number `after_seq` when there are at most
    /// `max_entries` of them and `removable` accepts each; otherwise removes nothing.
    pub fn truncate_transcript_after(
        &self,
        session_id: &str,
        after_seq: u64,
        max_entries: usize,
        removable: impl Fn(&TranscriptEntry) -> bool,
    ) -> Result<TruncateOutcome, StoreError> {
        check_session_id(session_id)?;
        let start = entry_key(session_id, after_seq.saturating_add(1));
        let mut end = key_prefix(session_id);
        if let Some(separator) = end.last_mut() {
            *separator += 1;
        }
        self.env.delete("truncate_transcript_after", |txn, dbs| {
            let range = (
                Bound::Included(start.as_slice()),
                Bound::Excluded(end.as_slice()),
            );
            let mut keys = Vec::new();
            for item in dbs.transcripts.range(txn, &range)?.take(max_entries + 1) {
                let (key, bytes) = item?;
                let seq = seq_of(session_id, key)?;
                let entry: TranscriptEntry = decode(bytes).map_err(|reason| {
                    corrupt(TRANSCRIPTS_DB, &format!("{session_id}#{seq}"), reason)
                })?;
                if keys.len() == max_entries {
                    return Ok(TruncateOutcome::TooMany);
                }
                if !removable(&entry) {
                    return Ok(TruncateOutcome::Refused { seq });
                }
                keys.push(key.to_vec());
            }
            for key in &keys {
                dbs.transcripts.delete(txn, key)?;
            }
            Ok(TruncateOutcome::Removed(keys.len() as u64))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    fn entry(text: &str, run: &str) -> TranscriptEntry {
        TranscriptEntry {
            role: "user".into(),
            text: text.into(),
            run_id: Some(run.into()),
            ..TranscriptEntry::default()
        }
    }

    fn texts(store: &Store) -> Vec<String> {
        store
            .transcript_tail("s", 100)
            .expect("tail")
            .into_iter()
            .map(|(_, e)| e.text)
            .collect()
    }

    fn of_run(run: &'static str) -> impl Fn(&TranscriptEntry) -> bool {
        move |e: &TranscriptEntry| e.run_id.as_deref() == Some(run)
    }

    #[test]
    fn entries_after_the_mark_go_and_the_next_append_follows_the_mark() {
        let (_dir, store) = temp_store();
        store
            .append_transcript("s", &entry("keep", "a"))
            .expect("append");
        store
            .append_transcript("s", &entry("beat", "hb"))
            .expect("append");
        store
            .append_transcript("s", &entry("ok", "hb"))
            .expect("append");
        let outcome = store
            .truncate_transcript_after("s", 1, 8, of_run("hb"))
            .expect("truncate");
        assert_eq!(outcome, TruncateOutcome::Removed(2));
        assert_eq!(texts(&store), ["keep"]);
        assert_eq!(
            store
                .append_transcript("s", &entry("next", "b"))
                .expect("append"),
            2
        );
        assert_eq!(
            store
                .truncate_transcript_after("s", 2, 8, of_run("hb"))
                .expect("nothing after"),
            TruncateOutcome::Removed(0)
        );
    }

    #[test]
    fn a_foreign_entry_or_too_many_entries_leave_everything_in_place() {
        let (_dir, store) = temp_store();
        store
            .append_transcript("s", &entry("beat", "hb"))
            .expect("append");
        store
            .append_transcript("s", &entry("user wrote", "other"))
            .expect("append");
        store
            .append_transcript("s", &entry("ok", "hb"))
            .expect("append");
        assert_eq!(
            store
                .truncate_transcript_after("s", 0, 8, of_run("hb"))
                .expect("refused"),
            TruncateOutcome::Refused { seq: 2 }
        );
        assert_eq!(
            store
                .truncate_transcript_after("s", 0, 2, |_| true)
                .expect("too many"),
            TruncateOutcome::TooMany
        );
        assert_eq!(texts(&store), ["beat", "user wrote", "ok"]);
        let other = store
            .truncate_transcript_after("other-session", 0, 2, |_| true)
            .expect("empty");
        assert_eq!(other, TruncateOutcome::Removed(0));
    }
}
