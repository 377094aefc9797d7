//! The `devices` and `pair_requests` databases: paired client devices (with the hashes of the tokens issued to
//! them) keyed by device id, and pending pairing requests keyed by request id.
//!
//! This file owns the records and their storage. It must not verify signatures, hash tokens or decide who is
//! approved (the gateway's auth does); it never stores a device token itself, only its SHA-256 hash.

use serde::{Deserialize, Serialize};

use super::codec::{check_key, decode_at, encode, key_text, Record};
use super::env::{DEVICES_DB, PAIR_REQUESTS_DB};
use super::{Store, StoreError};

/// A pending device pairing request expires after 5 minutes (OpenClaw's pending device-pairing TTL).
pub const PAIR_REQUEST_TTL_MS: u64 = 5 * 60 * 1000;

/// A token issued to a device for one role.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceToken {
    /// Lowercase hex SHA-256 of the token; the token itself is never stored.
    pub token_hash: String,
    pub role: String,
    pub scopes: Vec<String>,
    pub issued_at_ms: u64,
    pub revoked_at_ms: Option<u64>,
}

/// A paired device. `device_id` is the lowercase hex SHA-256 of its raw Ed25519 public key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRecord {
    pub device_id: String,
    /// Base64url (no padding) of the raw 32-byte public key.
    pub public_key: String,
    pub display_name: Option<String>,
    pub platform: Option<String>,
    pub device_family: Option<String>,
    pub client_id: Option<String>,
    pub client_mode: Option<String>,
    pub roles: Vec<String>,
    pub scopes: Vec<String>,
    pub tokens: Vec<DeviceToken>,
    pub created_at_ms: u64,
    pub approved_at_ms: Option<u64>,
    pub last_seen_at_ms: Option<u64>,
    pub remote_ip: Option<String>,
}

impl Record for DeviceRecord {
    const VERSION: u8 = 1;
}

/// A device waiting for an operator's approval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairRequest {
    pub request_id: String,
    pub device_id: String,
    pub public_key: String,
    pub display_name: Option<String>,
    pub platform: Option<String>,
    pub client_id: Option<String>,
    pub client_mode: Option<String>,
    pub role: String,
    pub scopes: Vec<String>,
    pub remote_ip: Option<String>,
    /// `"not-paired"` | `"role-upgrade"` | `"scope-upgrade"` | `"metadata-upgrade"`.
    pub reason: String,
    pub created_at_ms: u64,
}

impl Record for PairRequest {
    const VERSION: u8 = 1;
}

impl Store {
    /// The paired device with this id, if any.
    pub fn device(&self, device_id: &str) -> Result<Option<DeviceRecord>, StoreError> {
        check_key(DEVICES_DB, device_id)?;
        self.env.read("device", |txn, dbs| {
            match dbs.devices.get(txn, device_id.as_bytes())? {
                None => Ok(None),
                Some(bytes) => Ok(Some(decode_at(DEVICES_DB, device_id, bytes)?)),
            }
        })
    }

    /// Creates or replaces a device, keyed by its `device_id`.
    pub fn put_device(&self, record: &DeviceRecord) -> Result<(), StoreError> {
        check_key(DEVICES_DB, &record.device_id)?;
        let value = encode(DEVICES_DB, &record.device_id, record)?;
        self.env.write("put_device", |txn, dbs| {
            Ok(dbs.devices.put(txn, record.device_id.as_bytes(), &value)?)
        })
    }

    /// Removes a device; `true` when it existed.
    pub fn remove_device(&self, device_id: &str) -> Result<bool, StoreError> {
        check_key(DEVICES_DB, device_id)?;
        self.env.delete("remove_device", |txn, dbs| {
            Ok(dbs.devices.delete(txn, device_id.as_bytes())?)
        })
    }

    /// Every paired device, ordered by device id.
    pub fn devices(&self) -> Result<Vec<DeviceRecord>, StoreError> {
        self.env.read("devices", |txn, dbs| {
            let mut all = Vec::new();
            for item in dbs.devices.iter(txn)? {
                let (key, bytes) = item?;
                all.push(decode_at(DEVICES_DB, key_text(DEVICES_DB, key)?, bytes)?);
            }
            Ok(all)
        })
    }

    /// Creates or replaces a pending pairing request, keyed by its `request_id`.
    pub fn put_pair_request(&self, request: &PairRequest) -> Result<(), StoreError> {
        check_key(PAIR_REQUESTS_DB, &request.request_id)?;
        let value = encode(PAIR_REQUESTS_DB, &request.request_id, request)?;
        self.env.write("put_pair_request", |txn, dbs| {
            Ok(dbs
                .pair_requests
                .put(txn, request.request_id.as_bytes(), &value)?)
        })
    }

    /// Every stored pairing request, oldest first (ties by request id). Expired ones stay until maintenance.
    pub fn pair_requests(&self) -> Result<Vec<PairRequest>, StoreError> {
        let mut all: Vec<PairRequest> = self.env.read("pair_requests", |txn, dbs| {
            let mut all = Vec::new();
            for item in dbs.pair_requests.iter(txn)? {
                let (key, bytes) = item?;
                all.push(decode_at(
                    PAIR_REQUESTS_DB,
                    key_text(PAIR_REQUESTS_DB, key)?,
                    bytes,
                )?);
            }
            Ok(all)
        })?;
        all.sort_by(|a, b| {
            a.created_at_ms
                .cmp(&b.created_at_ms)
                .then_with(|| a.request_id.cmp(&b.request_id))
        });
        Ok(all)
    }

    /// Removes a pairing request and returns it (approve and reject both consume the request).
    pub fn take_pair_request(&self, request_id: &str) -> Result<Option<PairRequest>, StoreError> {
        check_key(PAIR_REQUESTS_DB, request_id)?;
        self.env.delete("take_pair_request", |txn, dbs| {
            let request = match dbs.pair_requests.get(txn, request_id.as_bytes())? {
                None => return Ok(None),
                Some(bytes) => decode_at(PAIR_REQUESTS_DB, request_id, bytes)?,
            };
            dbs.pair_requests.delete(txn, request_id.as_bytes())?;
            Ok(Some(request))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    fn device(id: &str) -> DeviceRecord {
        DeviceRecord {
            device_id: id.into(),
            public_key: "q83vEjRWeJq83vEjRWeJq83vEjRWeJq83vEjRWeJq80".into(),
            display_name: Some("laptop".into()),
            platform: Some("linux".into()),
            client_id: Some("cli".into()),
            client_mode: Some("cli".into()),
            roles: vec!["operator".into()],
            scopes: vec!["operator.read".into(), "operator.write".into()],
            tokens: vec![DeviceToken {
                token_hash: "ab".repeat(32),
                role: "operator".into(),
                scopes: vec!["operator.read".into()],
                issued_at_ms: 5,
                revoked_at_ms: None,
            }],
            created_at_ms: 1,
            approved_at_ms: Some(2),
            ..DeviceRecord::default()
        }
    }

    fn request(id: &str, created_at_ms: u64) -> PairRequest {
        PairRequest {
            request_id: id.into(),
            device_id: format!("dev-{id}"),
            public_key: "key".into(),
            role: "operator".into(),
            scopes: vec!["operator.admin".into()],
            reason: "not-paired".into(),
            created_at_ms,
            ..PairRequest::default()
        }
    }

    #[test]
    fn device_round_trips_and_is_replaced_on_put() {
        let (_dir, store) = temp_store();
        assert_eq!(store.device("d1").expect("get"), None);
        store.put_device(&device("d1")).expect("put");
        assert_eq!(store.device("d1").expect("get"), Some(device("d1")));
        let seen = DeviceRecord {
            last_seen_at_ms: Some(99),
            ..device("d1")
        };
        store.put_device(&seen).expect("put again");
        assert_eq!(store.device("d1").expect("get"), Some(seen));
    }

    #[test]
    fn remove_device_reports_whether_it_existed() {
        let (_dir, store) = temp_store();
        store.put_device(&device("d1")).expect("put");
        assert!(store.remove_device("d1").expect("remove"));
        assert!(!store.remove_device("d1").expect("remove again"));
        assert_eq!(store.device("d1").expect("get"), None);
    }

    #[test]
    fn devices_are_listed_by_id() {
        let (_dir, store) = temp_store();
        for id in ["c", "a", "b"] {
            store.put_device(&device(id)).expect("put");
        }
        let ids: Vec<String> = store
            .devices()
            .expect("list")
            .into_iter()
            .map(|d| d.device_id)
            .collect();
        assert_eq!(ids, ["a", "b", "c"]);
    }

    #[test]
    fn device_with_empty_id_is_rejected() {
        let (_dir, store) = temp_store();
        assert!(matches!(
            store.put_device(&device("")),
            Err(StoreError::InvalidKey { db: "devices", .. })
        ));
    }

    #[test]
    fn pair_requests_are_listed_oldest_first_and_taken_once() {
        let (_dir, store) = temp_store();
        store.put_pair_request(&request("r2", 20)).expect("put");
        store.put_pair_request(&request("r1", 10)).expect("put");
        let ids: Vec<String> = store
            .pair_requests()
            .expect("list")
            .into_iter()
            .map(|r| r.request_id)
            .collect();
        assert_eq!(ids, ["r1", "r2"]);
        assert_eq!(
            store.take_pair_request("r1").expect("take"),
            Some(request("r1", 10))
        );
        assert_eq!(store.take_pair_request("r1").expect("take again"), None);
        assert_eq!(
            store.pair_requests().expect("list"),
            vec![request("r2", 20)]
        );
    }

    #[test]
    fn corrupt_device_is_an_error_naming_database_and_key() {
        let (_dir, store) = temp_store();
        store
            .env
            .write("test", |txn, dbs| {
                Ok(dbs.devices.put(txn, b"dev-x", &[7, 1, 2])?)
            })
            .expect("raw put");
        match store.device("dev-x").expect_err("corrupt") {
            StoreError::Corrupt { db, key, reason } => {
                assert_eq!((db, key.as_str()), ("devices", "dev-x"));
                assert!(reason.contains("record version 7"), "{reason}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(store.devices().is_err());
    }
}
