//! Session transcripts as a memory source (`sources: ["memory", "sessions"]` with
//! `experimental.sessionMemory`), as upstream's experimental session memory: each session of the agent is
//! indexed as `sessions/<sessionId>.jsonl`, its text one line per user/assistant message (`User: …` /
//! `Assistant: …`, whitespace collapsed), other roles and empty messages left out.
//!
//! A growing session is re-indexed only once it has gained `sync.sessions.deltaMessages` messages (default 50)
//! or `deltaBytes` of text (default 100,000) since it was last indexed, so a chatty session does not cost an
//! inference pass per message. The text is streamed page by page from LMDB, never held whole. For a session
//! record, `size_bytes` is the rendered text's length and `modified_ms` the transcript's last sequence number
//! when it was indexed. This file renders and decides; `index` chunks, embeds and writes.

use std::io::Read;

use crate::store::{MemoryFileRecord, Store, StoreError, TranscriptEntry};

/// Cited paths of session sources start with this.
pub const SESSIONS_PATH_PREFIX: &str = "sessions/";
/// Transcript entries read from LMDB at a time.
pub const PAGE_ENTRIES: usize = 64;

/// One session transcript to index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSource {
    pub session_id: String,
    /// `sessions/<sessionId>.jsonl`.
    pub cited_path: String,
}

/// When a grown session is indexed again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionDeltas {
    pub bytes: u64,
    pub messages: u32,
}

/// The current session of every session key of `agent_id` (`agent:<agentId>:…`), sorted by path.
pub fn agent_sessions(store: &Store, agent_id: &str) -> Result<Vec<SessionSource>, StoreError> {
    let prefix = format!("agent:{agent_id}:");
    let mut sources: Vec<SessionSource> = store
        .sessions()?
        .into_iter()
        .filter(|(key, _)| key.starts_with(&prefix))
        .map(|(_, entry)| SessionSource {
            cited_path: format!("{SESSIONS_PATH_PREFIX}{}.jsonl", entry.session_id),
            session_id: entry.session_id,
        })
        .collect();
    sources.sort_by(|a, b| a.cited_path.cmp(&b.cited_path));
    sources.dedup();
    Ok(sources)
}

/// The index line of one transcript entry, None for roles other than user/assistant and empty text.
pub fn render(entry: &TranscriptEntry) -> Option<String> {
    let label = match entry.role.as_str() {
        "user" => "User",
        "assistant" => "Assistant",
        _ => return None,
    };
    let text = entry.text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then(|| format!("{label}: {text}"))
}

/// Rendered text bytes of the entries after `after_seq`, read a page at a time; and the last sequence seen.
pub fn rendered_bytes_after(
    store: &Store,
    session_id: &str,
    after_seq: u64,
) -> Result<(u64, u64), StoreError> {
    let (mut bytes, mut last) = (0u64, after_seq);
    loop {
        let page = store.transcript_page(session_id, last, PAGE_ENTRIES)?;
        let Some((seq, _)) = page.last() else {
            return Ok((bytes, last));
        };
        last = *seq;
        bytes += page
            .iter()
            .filter_map(|(_, e)| render(e))
            .map(|line| line.len() as u64 + 1)
            .sum::<u64>();
    }
}

/// Whether a session indexed as `stored` (None: never) should be indexed now that its transcript ends at
/// `last_seq`; `grown_bytes` measures the text added since (called only when there are new messages).
pub fn is_due(
    stored: Option<&MemoryFileRecord>,
    last_seq: u64,
    deltas: SessionDeltas,
    grown_bytes: impl FnOnce(u64) -> Result<u64, StoreError>,
) -> Result<bool, StoreError> {
    let Some(stored) = stored else {
        return Ok(last_seq > 0);
    };
    let indexed_seq = stored.modified_ms;
    if last_seq <= indexed_seq {
        // Unchanged, or the transcript was rewritten shorter: index again only in the latter case.
        return Ok(last_seq < indexed_seq);
    }
    if last_seq - indexed_seq >= u64::from(deltas.messages.max(1)) {
        return Ok(true);
    }
    Ok(grown_bytes(indexed_seq)? >= deltas.bytes.max(1))
}

/// The rendered transcript as a byte stream, one LMDB page at a time.
pub struct TranscriptText<'s> {
    store: &'s Store,
    session_id: String,
    after_seq: u64,
    buffer: Vec<u8>,
    position: usize,
    finished: bool,
}

impl<'s> TranscriptText<'s> {
    pub fn new(store: &'s Store, session_id: &str) -> TranscriptText<'s> {
        TranscriptText {
            store,
            session_id: session_id.to_string(),
            after_seq: 0,
            buffer: Vec::new(),
            position: 0,
            finished: false,
        }
    }

    fn refill(&mut self) -> std::io::Result<()> {
        self.buffer.clear();
        self.position = 0;
        while self.buffer.is_empty() && !self.finished {
            let page = self
                .store
                .transcript_page(&self.session_id, self.after_seq, PAGE_ENTRIES)
                .map_err(std::io::Error::other)?;
            match page.last() {
                Some((seq, _)) => self.after_seq = *seq,
                None => self.finished = true,
            }
            for line in page.iter().filter_map(|(_, e)| render(e)) {
                self.buffer.extend_from_slice(line.as_bytes());
                self.buffer.push(b'\n');
            }
        }
        Ok(())
    }
}

impl Read for TranscriptText<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.position >= self.buffer.len() {
            self.refill()?;
        }
        let available = &self.buffer[self.position..];
        let count = available.len().min(out.len());
        out[..count].copy_from_slice(&available[..count]);
        self.position += count;
        Ok(count)
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
    fn the_text_streams_user_and_assistant_lines_across_pages() {
        let (_dir, store) = temp_store();
        for i in 0..(PAGE_ENTRIES + 5) {
            store
                .append_transcript("s1", &entry("user", &format!("question  {i}\nmore")))
                .expect("append");
            store
                .append_transcript("s1", &entry("tool", "ignored"))
                .expect("append");
        }
        store
            .append_transcript("s1", &entry("assistant", "done"))
            .expect("append");
        let mut text = String::new();
        TranscriptText::new(&store, "s1")
            .read_to_string(&mut text)
            .expect("read");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), PAGE_ENTRIES + 6);
        assert_eq!(lines[0], "User: question 0 more");
        assert_eq!(lines.last(), Some(&"Assistant: done"));
        let (bytes, last) = rendered_bytes_after(&store, "s1", 0).expect("bytes");
        assert_eq!(
            (bytes, last),
            (
                text.len() as u64,
                store.transcript_last_seq("s1").expect("seq")
            )
        );
    }

    #[test]
    fn a_session_is_due_after_enough_new_messages_or_bytes() {
        let deltas = SessionDeltas {
            bytes: 1_000,
            messages: 50,
        };
        let record = |seq| MemoryFileRecord {
            content_hash: [0; 32],
            size_bytes: 0,
            modified_ms: seq,
            source: "sessions".into(),
            embed_key: String::new(),
            chunk_ids: Vec::new(),
        };
        let never = |_| -> Result<u64, StoreError> { panic!("no byte count needed") };
        assert!(is_due(None, 3, deltas, never).expect("new"));
        assert!(!is_due(Some(&record(10)), 10, deltas, never).expect("unchanged"));
        assert!(is_due(Some(&record(10)), 60, deltas, never).expect("50 messages"));
        assert!(!is_due(Some(&record(10)), 12, deltas, |_| Ok(999)).expect("small growth"));
        assert!(is_due(Some(&record(10)), 12, deltas, |_| Ok(1_000)).expect("1000 bytes"));
    }
}
