//! Sealed channel state: what a chat adapter must keep across restarts and
//! must not leave readable on disk — WhatsApp's device credentials and its
//! Signal-protocol sessions and keys. The records live in the
//! `channel_state` database under `sealed/<namespace>/<key>`; each value is
//! encrypted with ChaCha20-Poly1305 under a 256-bit key kept beside the data
//! file (`sealed-state.key`, mode 0600, made on first use), with a random
//! nonce per write and the record's full key as associated data, so a value
//! moved to another key (or another namespace) does not open.
//!
//! The key file is the secret: a copy of the data directory with it opens
//! the records; the data file alone does not. A missing key file with
//! sealed records present is reported as corrupt records, never answered
//! with a fresh key that would silently orphan them.
//!
//! This file keeps bytes; what they mean is the adapter's business.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use super::codec::check_key;
use super::env::CHANNEL_STATE_DB;
use super::{Store, StoreError};

/// The key file's name in the data directory.
pub const SEALED_KEY_FILE: &str = "sealed-state.key";

const KEY_BYTES: usize = 32;
const PREFIX: &str = "sealed/";

/// Records of one namespace (e.g. `whatsapp/default`), sealed at rest.
/// Cheap to clone.
#[derive(Clone)]
pub struct SealedRecords {
    store: Store,
    prefix: String,
    key: Arc<LessSafeKey>,
    rng: SystemRandom,
}

impl std::fmt::Debug for SealedRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedRecords")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// One change in a [`SealedRecords::apply`] batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealedChange {
    Put(String, Vec<u8>),
    Delete(String),
}

fn key_error(path: &Path, reason: impl std::fmt::Display) -> StoreError {
    StoreError::SealKey {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// Reads the key file, or makes one (only when `may_create`).
fn load_or_create_key(path: &Path, may_create: bool) -> Result<[u8; KEY_BYTES], StoreError> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let key: [u8; KEY_BYTES] = bytes.as_slice().try_into().map_err(|_| {
                key_error(
                    path,
                    format!("holds {} bytes; a key is {KEY_BYTES}", bytes.len()),
                )
            })?;
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !may_create {
                return Err(key_error(
                    path,
                    "is missing while sealed records exist (restore the key file or delete the records)",
                ));
            }
            let mut key = [0u8; KEY_BYTES];
            SystemRandom::new()
                .fill(&mut key)
                .map_err(|_| key_error(path, "no randomness for a new key"))?;
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt as _;
                options.mode(0o600);
            }
            let mut file = options.open(path).map_err(|e| key_error(path, e))?;
            file.write_all(&key).map_err(|e| key_error(path, e))?;
            file.sync_all().map_err(|e| key_error(path, e))?;
            Ok(key)
        }
        Err(e) => Err(key_error(path, e)),
    }
}

impl Store {
    /// The sealed records of `namespace` (`[a-z0-9_-]` segments joined by
    /// `/`), with the data directory's key (made on first use when no sealed
    /// record exists yet).
    pub fn sealed(&self, namespace: &str) -> Result<SealedRecords, StoreError> {
        let valid = !namespace.is_empty()
            && namespace.split('/').all(|segment| {
                !segment.is_empty()
                    && segment
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            });
        if !valid {
            return Err(StoreError::InvalidKey {
                db: CHANNEL_STATE_DB,
                reason: format!("sealed namespace {namespace:?} is not [A-Za-z0-9_-] segments"),
            });
        }
        let path: PathBuf = self.path().join(SEALED_KEY_FILE);
        let any_sealed = self.env.read("sealed_probe", |txn, dbs| {
            Ok(dbs
                .channel_state
                .prefix_iter(txn, PREFIX.as_bytes())?
                .next()
                .is_some())
        })?;
        let key = load_or_create_key(&path, !any_sealed)?;
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, &key)
            .map_err(|_| key_error(&path, "not a ChaCha20-Poly1305 key"))?;
        Ok(SealedRecords {
            store: self.clone(),
            prefix: format!("{PREFIX}{namespace}/"),
            key: Arc::new(LessSafeKey::new(unbound)),
            rng: SystemRandom::new(),
        })
    }
}

impl SealedRecords {
    fn full_key(&self, key: &str) -> Result<String, StoreError> {
        let full = format!("{}{key}", self.prefix);
        check_key(CHANNEL_STATE_DB, &full)?;
        Ok(full)
    }

    fn seal(&self, full_key: &str, plain: &[u8]) -> Result<Vec<u8>, StoreError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|_| StoreError::Encode {
            db: CHANNEL_STATE_DB,
            key: full_key.to_string(),
            reason: "no randomness for a nonce".into(),
        })?;
        let mut out = Vec::with_capacity(NONCE_LEN + plain.len() + CHACHA20_POLY1305.tag_len());
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(full_key.as_bytes()),
                &mut body,
            )
            .map_err(|_| StoreError::Encode {
                db: CHANNEL_STATE_DB,
                key: full_key.to_string(),
                reason: "sealing failed".into(),
            })?;
        out.extend_from_slice(&body);
        Ok(out)
    }

    fn open(&self, full_key: &str, sealed: &[u8]) -> Result<Vec<u8>, StoreError> {
        let corrupt = |reason: &str| StoreError::Corrupt {
            db: CHANNEL_STATE_DB,
            key: full_key.to_string(),
            reason: reason.to_string(),
        };
        if sealed.len() < NONCE_LEN + CHACHA20_POLY1305.tag_len() {
            return Err(corrupt("sealed record is shorter than nonce and tag"));
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| corrupt("bad nonce"))?;
        let mut body = body.to_vec();
        let plain_len = self
            .key
            .open_in_place(nonce, Aad::from(full_key.as_bytes()), &mut body)
            .map_err(|_| {
                corrupt("sealed record does not open with this data directory's key (wrong key file or tampered record)")
            })?
            .len();
        body.truncate(plain_len);
        Ok(body)
    }

    /// Runs store work for async code (see [`Store::run_blocking`]).
    pub fn run_blocking<R>(&self, work: impl FnOnce() -> R) -> R {
        self.store.run_blocking(work)
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let full = self.full_key(key)?;
        let sealed = self.store.env.read("sealed_get", |txn, dbs| {
            Ok(dbs
                .channel_state
                .get(txn, full.as_bytes())?
                .map(<[u8]>::to_vec))
        })?;
        sealed.map(|s| self.open(&full, &s)).transpose()
    }

    /// Applies every change in one committed transaction.
    pub fn apply(&self, changes: &[SealedChange]) -> Result<(), StoreError> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut prepared: Vec<(String, Option<Vec<u8>>)> = Vec::with_capacity(changes.len());
        for change in changes {
            match change {
                SealedChange::Put(key, value) => {
                    let full = self.full_key(key)?;
                    let sealed = self.seal(&full, value)?;
                    prepared.push((full, Some(sealed)));
                }
                SealedChange::Delete(key) => prepared.push((self.full_key(key)?, None)),
            }
        }
        self.store.env.write("sealed_apply", |txn, dbs| {
            for (key, value) in &prepared {
                match value {
                    Some(value) => dbs.channel_state.put(txn, key.as_bytes(), value)?,
                    None => {
                        dbs.channel_state.delete(txn, key.as_bytes())?;
                    }
                }
            }
            Ok(())
        })
    }

    /// Stores `value` under `key`.
    pub fn put(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.apply(&[SealedChange::Put(key.to_string(), value.to_vec())])
    }

    /// Removes `key`.
    pub fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.apply(&[SealedChange::Delete(key.to_string())])
    }

    /// Every `(key, value)` whose key starts with `prefix`, in key order, at
    /// most `limit` of them (more is an error naming the prefix, never a
    /// silent cut).
    pub fn scan(&self, prefix: &str, limit: usize) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let full_prefix = format!("{}{prefix}", self.prefix);
        let rows = self.store.env.read("sealed_scan", |txn, dbs| {
            let mut rows = Vec::new();
            for item in dbs.channel_state.prefix_iter(txn, full_prefix.as_bytes())? {
                let (key, value) = item?;
                if rows.len() == limit {
                    return Err(StoreError::InvalidKey {
                        db: CHANNEL_STATE_DB,
                        reason: format!("more than {limit} sealed records under {full_prefix:?}"),
                    }
                    .into());
                }
                rows.push((String::from_utf8_lossy(key).into_owned(), value.to_vec()));
            }
            Ok(rows)
        })?;
        rows.into_iter()
            .map(|(full, sealed)| {
                let plain = self.open(&full, &sealed)?;
                let key = full[self.prefix.len()..].to_string();
                Ok((key, plain))
            })
            .collect()
    }

    /// Removes every key that starts with `prefix`; returns how many.
    pub fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        let full_prefix = format!("{}{prefix}", self.prefix);
        self.store.env.delete("sealed_delete_prefix", |txn, dbs| {
            let keys: Vec<Vec<u8>> = dbs
                .channel_state
                .prefix_iter(txn, full_prefix.as_bytes())?
                .map(|item| item.map(|(key, _)| key.to_vec()))
                .collect::<Result<_, _>>()?;
            for key in &keys {
                dbs.channel_state.delete(txn, key)?;
            }
            Ok(keys.len())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreOptions;

    #[test]
    fn records_survive_a_reopen_and_are_not_readable_on_disk() {
        let dir = tempfile::tempdir().expect("temp dir");
        let secret = b"identity-key-bytes-0123456789abcdef";
        {
            let store = Store::open(dir.path(), StoreOptions::default()).expect("open");
            let sealed = store.sealed("whatsapp/default").expect("sealed");
            sealed.put("device", secret).expect("put");
            sealed.put("session/a", b"one").expect("put");
            sealed.put("session/b", b"two").expect("put");
            store.sync().expect("sync");
        }
        let data = std::fs::read(dir.path().join("data.mdb")).expect("data file");
        assert!(
            !data.windows(secret.len()).any(|w| w == secret),
            "the plain value is on disk"
        );
        let key_file = dir.path().join(SEALED_KEY_FILE);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&key_file)
                .expect("key file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "key file mode");
        }
        let store = Store::open(dir.path(), StoreOptions::default()).expect("reopen");
        let sealed = store.sealed("whatsapp/default").expect("sealed");
        assert_eq!(
            sealed.get("device").expect("get").as_deref(),
            Some(&secret[..])
        );
        let rows = sealed.scan("session/", 10).expect("scan");
        assert_eq!(
            rows,
            vec![
                ("session/a".to_string(), b"one".to_vec()),
                ("session/b".to_string(), b"two".to_vec())
            ]
        );
        assert_eq!(sealed.delete_prefix("session/").expect("delete"), 2);
        assert!(sealed.scan("session/", 10).expect("scan").is_empty());
        let other = store.sealed("whatsapp/work").expect("other namespace");
        assert_eq!(
            other.get("device").expect("get"),
            None,
            "namespaces are apart"
        );
    }

    #[test]
    fn another_key_file_or_a_moved_value_does_not_open() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(dir.path(), StoreOptions::default()).expect("open");
        let sealed = store.sealed("whatsapp/default").expect("sealed");
        sealed.put("device", b"secret").expect("put");
        // A value copied under another key is refused: the key is the associated data.
        let raw = store
            .env
            .read("t", |txn, dbs| {
                Ok(dbs
                    .channel_state
                    .get(txn, b"sealed/whatsapp/default/device")?
                    .map(<[u8]>::to_vec))
            })
            .expect("raw")
            .expect("present");
        store
            .env
            .write("t", |txn, dbs| {
                Ok(dbs
                    .channel_state
                    .put(txn, b"sealed/whatsapp/default/moved", &raw)?)
            })
            .expect("copy");
        let err = sealed.get("moved").expect_err("moved value opens");
        assert!(err.to_string().contains("does not open"), "{err}");
        // Another key file: the records are reported, not answered with garbage.
        std::fs::write(dir.path().join(SEALED_KEY_FILE), [7u8; 32]).expect("swap key");
        let swapped = store.sealed("whatsapp/default").expect("sealed");
        let err = swapped.get("device").expect_err("opens with another key");
        assert!(err.to_string().contains("wrong key file"), "{err}");
        // No key file while records exist: refused, not replaced by a fresh key.
        std::fs::remove_file(dir.path().join(SEALED_KEY_FILE)).expect("remove key");
        let err = store
            .sealed("whatsapp/default")
            .expect_err("fresh key made");
        assert!(err.to_string().contains("is missing"), "{err}");
    }

    #[test]
    fn a_scan_past_its_limit_is_an_error_and_bad_namespaces_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(dir.path(), StoreOptions::default()).expect("open");
        let sealed = store.sealed("whatsapp/default").expect("sealed");
        for i in 0..3 {
            sealed.put(&format!("k/{i}"), b"v").expect("put");
        }
        let err = sealed.scan("k/", 2).expect_err("limit ignored");
        assert!(err.to_string().contains("more than 2"), "{err}");
        assert!(store.sealed("../x").is_err());
        assert!(store.sealed("").is_err());
    }
}
