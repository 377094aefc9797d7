//! The `sessions` database: session key (`agent:main:main`) → `SessionEntry`, the durable per-session metadata
//! that OpenClaw keeps in its session store (ids, token counters, overrides, delivery context).
//!
//! This file owns the entry's shape and the index operations. It must not touch transcripts (deleting a session
//! leaves its transcript to `delete_transcript`, as `sessions.delete {deleteTranscript}` decides) and must not
//! decide session keys (routing does).

use heed::RoTxn;
use serde::{Deserialize, Serialize};

use super::codec::{check_key, decode, decode_at, encode, key_text, Record};
use super::env::{Databases, TxnError, SESSIONS_DB};
use super::{Store, StoreError};

/// Where a session's conversation comes from (OpenClaw's `SessionOrigin`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionOrigin {
    pub label: Option<String>,
    pub provider: Option<String>,
    pub surface: Option<String>,
    pub chat_type: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub account_id: Option<String>,
    pub thread_id: Option<String>,
}

/// One session's metadata (OpenClaw's `SessionEntry`, the fields pincer serves). Times in ms since the epoch.
///
/// The record is postcard-encoded, so fields are positional: add new fields only together with a record version
/// bump and an `upgrade` arm for the old shape.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEntry {
    pub session_id: String,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub total_tokens: u64,
    pub context_tokens: Option<u64>,
    pub channel: Option<String>,
    pub origin: Option<SessionOrigin>,
    pub label: Option<String>,
    pub display_name: Option<String>,
    pub model_override: Option<String>,
    pub provider_override: Option<String>,
    pub thinking_level: Option<String>,
    pub verbose_level: Option<String>,
    pub reasoning_level: Option<String>,
    /// `"allow"` | `"deny"`.
    pub send_policy: Option<String>,
    pub last_channel: Option<String>,
    pub last_to: Option<String>,
    /// Parent session key for a spawned (subagent) session.
    pub spawned_by: Option<String>,
    /// 0 = main, 1 = subagent, 2 = sub-subagent.
    pub spawn_depth: Option<u32>,
    pub aborted_last_run: bool,
    /// `"direct"` | `"group"` | `"channel"`: drives `sessions.list` `kind`.
    pub chat_type: Option<String>,
    /// Model and provider that actually ran last (`sessions.list` `model` / `modelProvider`).
    pub model: Option<String>,
    pub model_provider: Option<String>,
    /// `sessions.patch` settings.
    pub fast_mode: Option<bool>,
    /// `"on"` | `"off"` | `"tokens"` | `"full"`.
    pub response_usage: Option<String>,
    /// `"mention"` | `"always"`.
    pub group_activation: Option<String>,
    pub elevated_level: Option<String>,
    /// Last run status: `"running"` | `"done"` | `"failed"` | `"killed"` | `"timeout"`.
    pub status: Option<String>,
    /// Delivery context of the last inbound message, beside `last_channel` / `last_to`.
    pub last_account_id: Option<String>,
    pub last_thread_id: Option<String>,
    /// Whether the system prompt introduction was already sent in this session.
    pub system_sent: bool,
    pub compaction_count: u32,
    /// Last delivered heartbeat text and when, to suppress duplicate heartbeat notifications.
    pub last_heartbeat_text: Option<String>,
    pub last_heartbeat_sent_at_ms: Option<u64>,
    /// The start of the last turn that was a user's message (not a heartbeat, cron job or
    /// announcement): what `session.reset`'s idle window counts from. `None` until the first.
    pub last_interaction_at_ms: Option<u64>,
}

impl SessionEntry {
    /// Whether the session's `sendPolicy` override is `deny`: its replies are not delivered.
    pub fn sends_denied(&self) -> bool {
        self.send_policy.as_deref() == Some("deny")
    }

    /// A new entry for `session_id`, created and updated at `now_ms`, every other field empty.
    pub fn new(session_id: impl Into<String>, now_ms: u64) -> SessionEntry {
        SessionEntry {
            session_id: session_id.into(),
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            ..SessionEntry::default()
        }
    }
}

impl Record for SessionEntry {
    const VERSION: u8 = 2;

    /// Version 1 lacked `last_interaction_at_ms` (the last field): its bytes plus a postcard `None`
    /// decode as version 2. Without a better witness, its last update counts as its last interaction.
    fn upgrade(version: u8, body: &[u8]) -> Result<Self, String> {
        match version {
            1 => {
                let mut bytes = body.to_vec();
                bytes.push(0);
                let mut entry: SessionEntry = postcard::from_bytes(&bytes)
                    .map_err(|e| format!("malformed version 1 session: {e}"))?;
                entry.last_interaction_at_ms = Some(entry.updated_at_ms);
                Ok(entry)
            }
            other => Err(format!("unknown record version {other}")),
        }
    }
}

impl Store {
    /// The entry under a session key, if any.
    pub fn session(&self, key: &str) -> Result<Option<SessionEntry>, StoreError> {
        check_key(SESSIONS_DB, key)?;
        self.env
            .read("session", |txn, dbs| read_session(txn, dbs, key))
    }

    /// Creates or replaces the entry under a session key.
    pub fn put_session(&self, key: &str, entry: &SessionEntry) -> Result<(), StoreError> {
        check_key(SESSIONS_DB, key)?;
        let value = encode(SESSIONS_DB, key, entry)?;
        self.env.write("put_session", |txn, dbs| {
            Ok(dbs.sessions.put(txn, key.as_bytes(), &value)?)
        })
    }

    /// Changes the entry under a session key in one write transaction: `change` gets the current entry
    /// (`None` when there is none) and returns the entry to store, or `None` to leave the key as it is.
    /// Returns what was stored. `change` may run more than once (a write retried after the map grew).
    pub fn update_session(
        &self,
        key: &str,
        mut change: impl FnMut(Option<SessionEntry>) -> Option<SessionEntry>,
    ) -> Result<Option<SessionEntry>, StoreError> {
        check_key(SESSIONS_DB, key)?;
        self.env.write("update_session", |txn, dbs| {
            let current = read_session(txn, dbs, key)?;
            let Some(next) = change(current) else {
                return Ok(None);
            };
            let value = encode(SESSIONS_DB, key, &next)?;
            dbs.sessions.put(txn, key.as_bytes(), &value)?;
            Ok(Some(next))
        })
    }

    /// Removes a session key and returns the entry it held. A corrupt entry is removed too (logged, `None`).
    pub fn delete_session(&self, key: &str) -> Result<Option<SessionEntry>, StoreError> {
        check_key(SESSIONS_DB, key)?;
        self.env.delete("delete_session", |txn, dbs| {
            let previous = match dbs.sessions.get(txn, key.as_bytes())? {
                None => return Ok(None),
                Some(bytes) => decode::<SessionEntry>(bytes),
            };
            dbs.sessions.delete(txn, key.as_bytes())?;
            match previous {
                Ok(entry) => Ok(Some(entry)),
                Err(reason) => {
                    log::warn!("store: deleted corrupt session entry {key:?}: {reason}");
                    Ok(None)
                }
            }
        })
    }

    /// Every session, most recently updated first (ties by key).
    pub fn sessions(&self) -> Result<Vec<(String, SessionEntry)>, StoreError> {
        self.env.read("sessions", |txn, dbs| {
            let mut all = Vec::new();
            for item in dbs.sessions.iter(txn)? {
                let (key, bytes) = item?;
                let key = key_text(SESSIONS_DB, key)?;
                all.push((key.to_string(), decode_at(SESSIONS_DB, key, bytes)?));
            }
            sort_most_recent_first(&mut all);
            Ok(all)
        })
    }
}

pub(super) fn read_session(
    txn: &RoTxn<'_>,
    dbs: &Databases,
    key: &str,
) -> Result<Option<SessionEntry>, TxnError> {
    match dbs.sessions.get(txn, key.as_bytes())? {
        None => Ok(None),
        Some(bytes) => Ok(Some(decode_at(SESSIONS_DB, key, bytes)?)),
    }
}

/// Sorts by `updated_at_ms` descending, then key ascending, so listings are deterministic.
pub(super) fn sort_most_recent_first(sessions: &mut [(String, SessionEntry)]) {
    sessions.sort_by(|(a_key, a), (b_key, b)| {
        b.updated_at_ms
            .cmp(&a.updated_at_ms)
            .then_with(|| a_key.cmp(b_key))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    fn full_entry() -> SessionEntry {
        SessionEntry {
            input_tokens: 10,
            output_tokens: 20,
            total_tokens: 30,
            context_tokens: Some(128_000),
            channel: Some("telegram".into()),
            origin: Some(SessionOrigin {
                label: Some("Alice".into()),
                provider: Some("telegram".into()),
                chat_type: Some("direct".into()),
                from: Some("telegram:42".into()),
                thread_id: Some("7".into()),
                ..SessionOrigin::default()
            }),
            model_override: Some("gpt-5".into()),
            spawned_by: Some("agent:main:main".into()),
            spawn_depth: Some(1),
            aborted_last_run: true,
            fast_mode: Some(true),
            compaction_count: 3,
            ..SessionEntry::new("3f1c", 1_700_000_000_000)
        }
    }

    #[test]
    fn new_entry_is_created_and_updated_now() {
        let entry = SessionEntry::new("abc", 42);
        assert_eq!(
            (
                entry.session_id.as_str(),
                entry.created_at_ms,
                entry.updated_at_ms
            ),
            ("abc", 42, 42)
        );
        assert_eq!(entry.total_tokens, 0);
        assert!(entry.origin.is_none());
    }

    #[test]
    fn put_then_get_returns_the_same_entry() {
        let (_dir, store) = temp_store();
        assert_eq!(store.session("agent:main:main").expect("get"), None);
        store
            .put_session("agent:main:main", &full_entry())
            .expect("put");
        assert_eq!(
            store.session("agent:main:main").expect("get"),
            Some(full_entry())
        );
    }

    #[test]
    fn put_replaces_an_existing_entry() {
        let (_dir, store) = temp_store();
        store
            .put_session("k", &SessionEntry::new("one", 1))
            .expect("put");
        store
            .put_session("k", &SessionEntry::new("two", 2))
            .expect("put");
        assert_eq!(
            store.session("k").expect("get").map(|e| e.session_id),
            Some("two".into())
        );
    }

    #[test]
    fn delete_returns_the_removed_entry_once() {
        let (_dir, store) = temp_store();
        store.put_session("k", &full_entry()).expect("put");
        assert_eq!(
            store.delete_session("k").expect("delete"),
            Some(full_entry())
        );
        assert_eq!(store.delete_session("k").expect("delete again"), None);
        assert_eq!(store.session("k").expect("get"), None);
    }

    #[test]
    fn sessions_are_listed_most_recently_updated_first() {
        let (_dir, store) = temp_store();
        store
            .put_session("old", &SessionEntry::new("a", 100))
            .expect("put");
        store
            .put_session("new", &SessionEntry::new("b", 300))
            .expect("put");
        store
            .put_session("mid-b", &SessionEntry::new("c", 200))
            .expect("put");
        store
            .put_session("mid-a", &SessionEntry::new("d", 200))
            .expect("put");
        let keys: Vec<String> = store
            .sessions()
            .expect("list")
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(keys, ["new", "mid-a", "mid-b", "old"]);
    }

    #[test]
    fn empty_or_oversized_session_key_is_rejected() {
        let (_dir, store) = temp_store();
        assert!(matches!(
            store.session(""),
            Err(StoreError::InvalidKey { db: "sessions", .. })
        ));
        let long = "k".repeat(600);
        assert!(matches!(
            store.put_session(&long, &full_entry()),
            Err(StoreError::InvalidKey { .. })
        ));
    }

    fn put_raw(store: &Store, key: &str, value: &[u8]) {
        store
            .env
            .write("test", |txn, dbs| {
                Ok(dbs.sessions.put(txn, key.as_bytes(), value)?)
            })
            .expect("raw put");
    }

    #[test]
    fn corrupt_entry_is_an_error_naming_database_and_key() {
        let (_dir, store) = temp_store();
        put_raw(&store, "agent:main:broken", &[1, 0xff, 0xff, 0xff]);
        let error = store.session("agent:main:broken").expect_err("corrupt");
        match &error {
            StoreError::Corrupt { db, key, .. } => {
                assert_eq!((*db, key.as_str()), ("sessions", "agent:main:broken"))
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(error.to_string().contains("agent:main:broken"));
        assert!(matches!(store.sessions(), Err(StoreError::Corrupt { .. })));
    }

    #[test]
    fn a_version_1_entry_reads_with_its_last_update_as_its_last_interaction() {
        let (_dir, store) = temp_store();
        let mut entry = full_entry();
        entry.updated_at_ms = 1_700_000_500_000;
        // Version 1 was this record without its last field.
        let mut v2 = postcard::to_stdvec(&entry).expect("encode");
        assert_eq!(v2.pop(), Some(0), "the new last field, None");
        let mut v1 = vec![1];
        v1.extend(v2);
        put_raw(&store, "agent:main:old", &v1);
        let read = store
            .session("agent:main:old")
            .expect("read")
            .expect("entry");
        assert_eq!(read.last_interaction_at_ms, Some(1_700_000_500_000));
        entry.last_interaction_at_ms = Some(1_700_000_500_000);
        assert_eq!(read, entry);
    }

    #[test]
    fn corrupt_entry_can_still_be_deleted() {
        let (_dir, store) = temp_store();
        put_raw(&store, "broken", &[1]);
        assert_eq!(store.delete_session("broken").expect("delete"), None);
        assert_eq!(store.session("broken").expect("get after delete"), None);
        assert!(store.sessions().expect("list").is_empty());
    }
}
