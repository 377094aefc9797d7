//! Paged reads of session transcripts for the memory indexer (`sources: ["sessions"]`): the last sequence
//! number of a transcript, and the entries after a sequence number, a bounded page at a time, so a long
//! transcript is indexed without holding it whole.
//!
//! This file only reads; it must not interpret message text (the memory indexer renders it).

use std::ops::Bound;

use crate::store::codec::{corrupt, decode};
use crate::store::env::TRANSCRIPTS_DB;
use crate::store::transcripts::{check_session_id, entry_key, key_prefix, last_seq, seq_of};
use crate::store::{Store, StoreError, TranscriptEntry};

impl Store {
    /// The highest sequence number of `session_id`'s transcript, 0 when it has none.
    pub fn transcript_last_seq(&self, session_id: &str) -> Result<u64, StoreError> {
        check_session_id(session_id)?;
        self.env.read("transcript_last_seq", |txn, dbs| {
            Ok(last_seq(txn, dbs, session_id)?.unwrap_or(0))
        })
    }

    /// Up to `limit` entries of `session_id` with a sequence number above `after_seq`, oldest first.
    pub fn transcript_page(
        &self,
        session_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<(u64, TranscriptEntry)>, StoreError> {
        check_session_id(session_id)?;
        let start = entry_key(session_id, after_seq.saturating_add(1));
        let mut end = key_prefix(session_id);
        if let Some(separator) = end.last_mut() {
            *separator += 1;
        }
        self.env.read("transcript_page", |txn, dbs| {
            let range = (
                Bound::Included(start.as_slice()),
                Bound::Excluded(end.as_slice()),
            );
            let mut page = Vec::with_capacity(limit.min(256));
            for item in dbs.transcripts.range(txn, &range)?.take(limit) {
                let (key, bytes) = item?;
                let seq = seq_of(session_id, key)?;
                let entry = decode(bytes).map_err(|reason| {
                    corrupt(TRANSCRIPTS_DB, &format!("{session_id}#{seq}"), reason)
                })?;
                page.push((seq, entry));
            }
            Ok(page)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_support::temp_store;
    use crate::store::TranscriptEntry;

    #[test]
    fn pages_follow_the_sequence_and_stay_within_the_session() {
        let (_dir, store) = temp_store();
        for (id, count) in [("a", 5), ("ab", 2)] {
            for i in 0..count {
                let entry = TranscriptEntry {
                    role: "user".into(),
                    text: format!("{id}{i}"),
                    ..TranscriptEntry::default()
                };
                store.append_transcript(id, &entry).expect("append");
            }
        }
        assert_eq!(store.transcript_last_seq("a").expect("last"), 5);
        assert_eq!(store.transcript_last_seq("none").expect("last"), 0);
        let page = store.transcript_page("a", 2, 2).expect("page");
        let texts: Vec<&str> = page.iter().map(|(_, e)| e.text.as_str()).collect();
        assert_eq!(texts, vec!["a2", "a3"]);
        assert_eq!(page[0].0, 3);
        let rest = store.transcript_page("a", 4, 10).expect("page");
        assert_eq!(rest.len(), 1, "no entries of session \"ab\" leak in");
    }
}
