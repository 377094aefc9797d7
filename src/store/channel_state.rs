//! The `channel_state` database: what a chat adapter must keep across
//! restarts beyond the message path's own records. For a Matrix account:
//! the session a password login made (so a restart does not log in again
//! and leave a new device behind each time) and the `/sync` `next_batch`
//! token (so a restart neither loses nor replays events).
//!
//! Keys are `<channel>/<account id>/<what>`; each record names the
//! homeserver and user it belongs to, and a record of another user is read
//! as absent (the account's config changed). This file must not decide when
//! a token advances (the sync loop stores it only after the inbound sink
//! accepted the batch's events); it only keeps the values.

use serde::{Deserialize, Serialize};

use super::codec::{check_key, decode_at, encode, Record};
use super::env::CHANNEL_STATE_DB;
use super::{Store, StoreError};

/// The login of a Matrix account made by pincer (password login).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatrixSession {
    pub homeserver: String,
    pub user_id: String,
    pub device_id: String,
    pub access_token: String,
}

impl std::fmt::Debug for MatrixSession {
    /// The access token never reaches a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatrixSession")
            .field("homeserver", &self.homeserver)
            .field("user_id", &self.user_id)
            .field("device_id", &self.device_id)
            .finish_non_exhaustive()
    }
}

impl Record for MatrixSession {
    const VERSION: u8 = 1;
}

/// A Matrix account's sync position.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct MatrixSyncRecord {
    homeserver: String,
    user_id: String,
    next_batch: String,
    updated_at_ms: u64,
}

impl Record for MatrixSyncRecord {
    const VERSION: u8 = 1;
}

fn key(channel: &str, account_id: &str, what: &str) -> String {
    format!("{channel}/{account_id}/{what}")
}

impl Store {
    fn channel_record<R: Record>(&self, key: &str) -> Result<Option<R>, StoreError> {
        check_key(CHANNEL_STATE_DB, key)?;
        self.env.read("channel_state", |txn, dbs| {
            let Some(bytes) = dbs.channel_state.get(txn, key.as_bytes())? else {
                return Ok(None);
            };
            Ok(Some(decode_at(CHANNEL_STATE_DB, key, bytes)?))
        })
    }

    fn put_channel_record<R: Record>(&self, key: &str, record: &R) -> Result<(), StoreError> {
        check_key(CHANNEL_STATE_DB, key)?;
        let bytes = encode(CHANNEL_STATE_DB, key, record)?;
        self.env.write("set_channel_state", |txn, dbs| {
            Ok(dbs.channel_state.put(txn, key.as_bytes(), &bytes)?)
        })
    }

    fn delete_channel_record(&self, key: &str) -> Result<(), StoreError> {
        check_key(CHANNEL_STATE_DB, key)?;
        self.env.write("delete_channel_state", |txn, dbs| {
            dbs.channel_state.delete(txn, key.as_bytes())?;
            Ok(())
        })
    }

    /// The session pincer's password login made for `account_id`, if it
    /// belongs to `homeserver` and `user_id`.
    pub fn matrix_session(
        &self,
        account_id: &str,
        homeserver: &str,
        user_id: &str,
    ) -> Result<Option<MatrixSession>, StoreError> {
        let record: Option<MatrixSession> =
            self.channel_record(&key("matrix", account_id, "session"))?;
        Ok(record.filter(|s| s.homeserver == homeserver && s.user_id == user_id))
    }

    /// Keeps the session of a password login (committed before returning).
    pub fn set_matrix_session(
        &self,
        account_id: &str,
        session: &MatrixSession,
    ) -> Result<(), StoreError> {
        self.put_channel_record(&key("matrix", account_id, "session"), session)
    }

    /// Forgets a session the homeserver refused.
    pub fn clear_matrix_session(&self, account_id: &str) -> Result<(), StoreError> {
        self.delete_channel_record(&key("matrix", account_id, "session"))
    }

    /// The stored `next_batch` of `account_id`, when it was stored for the
    /// same homeserver and user.
    pub fn matrix_sync_token(
        &self,
        account_id: &str,
        homeserver: &str,
        user_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let record: Option<MatrixSyncRecord> =
            self.channel_record(&key("matrix", account_id, "sync"))?;
        Ok(record
            .filter(|r| r.homeserver == homeserver && r.user_id == user_id)
            .map(|r| r.next_batch))
    }

    /// Stores the `next_batch` to sync from next (committed and synced
    /// before returning).
    pub fn set_matrix_sync_token(
        &self,
        account_id: &str,
        homeserver: &str,
        user_id: &str,
        next_batch: &str,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        let record = MatrixSyncRecord {
            homeserver: homeserver.to_string(),
            user_id: user_id.to_string(),
            next_batch: next_batch.to_string(),
            updated_at_ms: now_ms,
        };
        self.put_channel_record(&key("matrix", account_id, "sync"), &record)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_support::temp_store;
    use crate::store::{MatrixSession, Store, StoreOptions};

    #[test]
    fn a_sync_token_is_kept_per_account_and_user() {
        let dir = tempfile::tempdir().expect("temp dir");
        {
            let store = Store::open(dir.path(), StoreOptions::default()).expect("open");
            assert_eq!(
                store
                    .matrix_sync_token("default", "https://hs", "@bot:hs")
                    .expect("read"),
                None
            );
            store
                .set_matrix_sync_token("default", "https://hs", "@bot:hs", "s1_2", 1)
                .expect("write");
            store
                .set_matrix_sync_token("default", "https://hs", "@bot:hs", "s9_9", 2)
                .expect("write");
        }
        let store = Store::open(dir.path(), StoreOptions::default()).expect("reopen");
        let token = |user: &str| {
            store
                .matrix_sync_token("default", "https://hs", user)
                .expect("read")
        };
        assert_eq!(token("@bot:hs").as_deref(), Some("s9_9"));
        assert_eq!(token("@other:hs"), None, "another user's token is not used");
    }

    #[test]
    fn a_session_is_read_only_for_its_homeserver_and_user_and_can_be_cleared() {
        let (_dir, store) = temp_store();
        let session = MatrixSession {
            homeserver: "https://hs".into(),
            user_id: "@bot:hs".into(),
            device_id: "DEV".into(),
            access_token: "syt_secret".into(),
        };
        store.set_matrix_session("work", &session).expect("write");
        assert_eq!(
            store
                .matrix_session("work", "https://hs", "@bot:hs")
                .expect("read"),
            Some(session.clone())
        );
        assert_eq!(
            store
                .matrix_session("work", "https://other", "@bot:hs")
                .expect("read"),
            None
        );
        assert!(!format!("{session:?}").contains("syt_secret"));
        store.clear_matrix_session("work").expect("clear");
        assert_eq!(
            store
                .matrix_session("work", "https://hs", "@bot:hs")
                .expect("read"),
            None
        );
    }
}
