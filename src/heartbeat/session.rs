//! The session side of one heartbeat: which session it runs in (the configured one, or with
//! `isolatedSession` a fresh `<session>:heartbeat` session each time, so no history is sent), and leaving
//! that session as it was when the reply was only an acknowledgement: the heartbeat's prompt and reply are
//! removed from the transcript again and the session's `updatedAt` is put back, as OpenClaw does, so the
//! history does not fill with heartbeat noise and the session does not look active.
//!
//! This file only touches the store; the runner decides when.

use crate::store::{SessionEntry, Store, StoreError, TruncateOutcome};

/// Suffix of the isolated heartbeat session's key (after the configured session's key).
pub const ISOLATED_SESSION_SUFFIX: &str = ":heartbeat";
/// Most transcript entries an acknowledged heartbeat turn may have written and still be removed (prompt,
/// tool steps, reply); a longer turn is kept.
pub const MAX_PRUNED_ENTRIES: usize = 200;

/// The key of the isolated heartbeat session for a configured session key.
pub fn isolated_key(base: &str) -> String {
    if base.ends_with(ISOLATED_SESSION_SUFFIX) {
        base.to_string()
    } else {
        format!("{base}{ISOLATED_SESSION_SUFFIX}")
    }
}

/// Empties the isolated session before a heartbeat: its entry and transcript go, so the turn starts a new
/// session id with no history.
pub fn reset_isolated(store: &Store, key: &str) -> Result<(), StoreError> {
    if let Some(old) = store.delete_session(key)? {
        store.delete_transcript(&old.session_id)?;
    }
    Ok(())
}

/// A session as it was before a heartbeat turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMark {
    /// The entry before the turn (`None`: the session did not exist).
    entry: Option<SessionEntry>,
    /// The transcript's last sequence number then (0: empty).
    last_seq: u64,
}

/// Notes the session's entry and transcript length before a heartbeat turn.
pub fn mark(store: &Store, key: &str) -> Result<SessionMark, StoreError> {
    let entry = store.session(key)?;
    let last_seq = match &entry {
        Some(entry) => store.transcript_last_seq(&entry.session_id)?,
        None => 0,
    };
    Ok(SessionMark { entry, last_seq })
}

/// After an acknowledged heartbeat turn `run_id` in `session_id`: removes what the turn wrote (only when
/// everything after the mark is the turn's own) and restores `updatedAt`. Returns whether it pruned.
pub fn prune_ack(
    store: &Store,
    key: &str,
    mark: &SessionMark,
    session_id: &str,
    run_id: &str,
) -> Result<bool, StoreError> {
    let before_id = mark.entry.as_ref().map(|e| e.session_id.as_str());
    if session_id.is_empty() || before_id.is_some_and(|id| id != session_id) {
        return Ok(false);
    }
    let outcome = store.truncate_transcript_after(
        session_id,
        mark.last_seq,
        MAX_PRUNED_ENTRIES,
        |entry| entry.run_id.as_deref() == Some(run_id),
    )?;
    if !matches!(outcome, TruncateOutcome::Removed(_)) {
        log::info!("heartbeat: session {key} kept its heartbeat turn ({outcome:?})");
        return Ok(false);
    }
    if let Some(before) = &mark.entry {
        crate::agent::SessionIndex::new(store.clone()).restore_updated_at(
            key,
            &before.session_id,
            before.updated_at_ms,
        )?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;
    use crate::store::TranscriptEntry;

    fn said(text: &str, run: &str) -> TranscriptEntry {
        TranscriptEntry {
            role: "user".into(),
            text: text.into(),
            run_id: Some(run.into()),
            ..TranscriptEntry::default()
        }
    }

    #[test]
    fn the_isolated_key_hangs_off_the_configured_one_once() {
        assert_eq!(isolated_key("agent:main:main"), "agent:main:main:heartbeat");
        assert_eq!(
            isolated_key("agent:main:main:heartbeat"),
            "agent:main:main:heartbeat"
        );
    }

    #[test]
    fn an_acknowledged_turn_leaves_transcript_and_updated_at_as_they_were() {
        let (_dir, store) = temp_store();
        let key = "agent:main:main";
        store
            .put_session(key, &SessionEntry::new("sid", 1_000))
            .expect("session");
        store
            .append_transcript("sid", &said("hello", "r0"))
            .expect("append");
        let before = mark(&store, key).expect("mark");
        store
            .append_transcript("sid", &said("beat", "hb"))
            .expect("append");
        store
            .append_transcript("sid", &said("HEARTBEAT_OK", "hb"))
            .expect("append");
        let mut touched = store.session(key).expect("read").expect("entry");
        touched.updated_at_ms = 9_000;
        touched.input_tokens = 5;
        store.put_session(key, &touched).expect("touch");

        assert!(prune_ack(&store, key, &before, "sid", "hb").expect("prune"));
        assert_eq!(store.transcript_last_seq("sid").expect("seq"), 1);
        let after = store.session(key).expect("read").expect("entry");
        assert_eq!(after.updated_at_ms, 1_000);
        assert_eq!(after.input_tokens, 5);
    }

    #[test]
    fn a_message_from_someone_else_keeps_the_turn() {
        let (_dir, store) = temp_store();
        let key = "agent:main:main";
        store
            .put_session(key, &SessionEntry::new("sid", 1_000))
            .expect("session");
        let before = mark(&store, key).expect("mark");
        store
            .append_transcript("sid", &said("beat", "hb"))
            .expect("append");
        store
            .append_transcript("sid", &said("from the user", "u1"))
            .expect("append");
        assert!(!prune_ack(&store, key, &before, "sid", "hb").expect("prune"));
        assert_eq!(store.transcript_last_seq("sid").expect("seq"), 2);
        assert!(!prune_ack(&store, key, &before, "other-sid", "hb").expect("reset meanwhile"));
    }

    #[test]
    fn resetting_the_isolated_session_drops_its_history() {
        let (_dir, store) = temp_store();
        let key = "agent:main:main:heartbeat";
        store
            .put_session(key, &SessionEntry::new("old", 1))
            .expect("session");
        store
            .append_transcript("old", &said("beat", "hb"))
            .expect("append");
        reset_isolated(&store, key).expect("reset");
        assert!(store.session(key).expect("read").is_none());
        assert_eq!(store.transcript_last_seq("old").expect("seq"), 0);
        reset_isolated(&store, key).expect("nothing to reset");
    }
}
