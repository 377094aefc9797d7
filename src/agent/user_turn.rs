//! A user's message entering its session: the transcript entry a turn records for it and what the turn
//! changes in the session's index entry. A turn records both when it starts (`turn.rs`); a caller that keeps
//! the message durably before answering may record them earlier, in the same commit as its own record
//! ([`record_user_message`]: the web chat's `chat.send` when the session is idle), and the turn then finds
//! its user entry recorded and writes nothing more when it starts.
//!
//! This file must not run turns; it only says what a user's message writes.

use crate::store::{SessionEntry, Store, StoreError, TranscriptEntry};

/// A user's message for a session, as its turn will see it.
#[derive(Clone, Copy, Debug)]
pub struct UserMessage<'a> {
    pub session_key: &'a str,
    /// The turn's run id (a replayed message keeps it, so its entry is never recorded twice).
    pub run_id: &'a str,
    pub text: &'a str,
    pub label: Option<&'a str>,
    pub channel: Option<&'a str>,
    pub now_ms: u64,
    /// A person wrote it (not a heartbeat, cron job or announcement): the session's last
    /// interaction, which `session.reset`'s idle window counts from.
    pub interaction: bool,
}

/// The transcript entry of `message`.
pub(super) fn user_entry(message: &UserMessage<'_>) -> TranscriptEntry {
    TranscriptEntry {
        role: "user".into(),
        text: message.text.to_string(),
        timestamp_ms: message.now_ms,
        run_id: Some(message.run_id.to_string()),
        stop_reason: None,
        input_tokens: None,
        output_tokens: None,
        extra_json: None,
    }
}

/// The session entry once `message`'s turn starts: `current`, or a new session, touched by the message.
pub(super) fn session_for(
    current: Option<SessionEntry>,
    message: &UserMessage<'_>,
) -> SessionEntry {
    let mut session = current
        .unwrap_or_else(|| SessionEntry::new(uuid::Uuid::new_v4().to_string(), message.now_ms));
    session.updated_at_ms = message.now_ms;
    if message.interaction {
        session.last_interaction_at_ms = Some(message.now_ms);
    }
    if let Some(label) = message.label {
        session.label = Some(label.to_string());
    }
    if let Some(channel) = message.channel {
        session.last_channel = Some(channel.to_string());
        session.channel = session
            .channel
            .clone()
            .or_else(|| Some(channel.to_string()));
    }
    session
}

/// Whether `next` says nothing `stored` does not, apart from the time it was touched (and the
/// time of its last interaction, when both have one: the message's arrival was recorded).
pub(super) fn same_but_time(stored: &SessionEntry, next: &SessionEntry) -> bool {
    let mut touched = stored.clone();
    touched.updated_at_ms = next.updated_at_ms;
    if touched.last_interaction_at_ms.is_some() && next.last_interaction_at_ms.is_some() {
        touched.last_interaction_at_ms = next.last_interaction_at_ms;
    }
    touched == *next
}

/// Records `message` as its session's next user turn (creating the session when it is new) and `record`
/// (a meta key and value) in one commit. Blocks on the store.
pub fn record_user_message(
    store: &Store,
    message: &UserMessage<'_>,
    record: (&str, &[u8]),
) -> Result<(), StoreError> {
    let current = store.session(message.session_key)?;
    let session = session_for(current.clone(), message);
    // An existing session whose entry would change only its time is left alone: the reply's commit
    // touches it anyway, and the commit writes one database less.
    let unchanged = current.is_some_and(|current| same_but_time(&current, &session));
    let stored = (!unchanged).then(|| session.clone());
    store.record_turn_keeping(
        message.session_key,
        &session.session_id,
        Some(&user_entry(message)),
        move |_| stored.clone(),
        record,
    )?;
    Ok(())
}
