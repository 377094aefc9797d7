//! DM pairing state in the `meta` database: per channel, the pending
//! pairing codes (sender, account, creation time) and the approved senders;
//! plus the owner seeded by the first approval. One record per channel under
//! `dm_pairing/<channel>`, the owner under `dm_pairing_owner`; every change is
//! one read-modify-write transaction.
//!
//! This file stores and enforces the limits it is given; it must not invent
//! codes or decide policy (the pipeline's `pairing.rs` does).

use serde::{Deserialize, Serialize};

use super::codec::{check_key, decode_at, encode, Record};
use super::env::META_DB;
use super::{Store, StoreError};

const KEY_PREFIX: &str = "dm_pairing/";
const OWNER_KEY: &str = "dm_pairing_owner";

/// A code waiting for the owner's approval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingDmPairing {
    pub code: String,
    pub account_id: String,
    pub sender_id: String,
    pub sender_name: Option<String>,
    pub created_at_ms: u64,
}

/// A sender allowed to DM the bot on one channel account.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovedDmSender {
    pub account_id: String,
    pub sender_id: String,
    pub approved_at_ms: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct ChannelPairing {
    pending: Vec<PendingDmPairing>,
    approved: Vec<ApprovedDmSender>,
}

impl Record for ChannelPairing {
    const VERSION: u8 = 1;
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct OwnerRecord {
    owner: String,
}

impl Record for OwnerRecord {
    const VERSION: u8 = 1;
}

/// Limits a pairing request is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmPairingLimits {
    pub ttl_ms: u64,
    pub max_pending_per_account: usize,
}

/// What a pairing request produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DmPairingRequest {
    /// The sender already had a live code: the same one again.
    Existing(String),
    Created(String),
    /// The account already has the most pending codes allowed.
    TooManyPending,
}

/// An approved code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DmApproval {
    pub sender_id: String,
    pub account_id: String,
    /// This approval made the sender the owner (there was none).
    pub seeded_owner: bool,
}

fn channel_key(channel: &str) -> Result<String, StoreError> {
    let key = format!("{KEY_PREFIX}{}", channel.trim().to_lowercase());
    check_key(META_DB, &key)?;
    Ok(key)
}

fn prune(record: &mut ChannelPairing, now_ms: u64, ttl_ms: u64) {
    record
        .pending
        .retain(|p| now_ms.saturating_sub(p.created_at_ms) < ttl_ms);
}

impl Store {
    /// Gives `sender_id` a pairing code (its live one, or a new one from
    /// `new_code` unless the account is at its pending limit).
    pub fn dm_pairing_request(
        &self,
        channel: &str,
        pending: &PendingDmPairing,
        limits: DmPairingLimits,
        new_code: &mut dyn FnMut() -> String,
    ) -> Result<DmPairingRequest, StoreError> {
        let key = channel_key(channel)?;
        self.env.write("dm_pairing_request", |txn, dbs| {
            let mut record: ChannelPairing = match dbs.meta.get(txn, key.as_bytes())? {
                Some(bytes) => decode_at(META_DB, &key, bytes)?,
                None => ChannelPairing::default(),
            };
            prune(&mut record, pending.created_at_ms, limits.ttl_ms);
            let same = |p: &&PendingDmPairing| {
                p.sender_id == pending.sender_id && p.account_id == pending.account_id
            };
            if let Some(existing) = record.pending.iter().find(same) {
                return Ok(DmPairingRequest::Existing(existing.code.clone()));
            }
            let live = record
                .pending
                .iter()
                .filter(|p| p.account_id == pending.account_id)
                .count();
            if live >= limits.max_pending_per_account {
                return Ok(DmPairingRequest::TooManyPending);
            }
            let mut code = new_code();
            while record.pending.iter().any(|p| p.code == code) {
                code = new_code();
            }
            record.pending.push(PendingDmPairing {
                code: code.clone(),
                ..pending.clone()
            });
            let bytes = encode(META_DB, &key, &record)?;
            dbs.meta.put(txn, key.as_bytes(), &bytes)?;
            Ok(DmPairingRequest::Created(code))
        })
    }

    /// Live pending codes, per channel (all channels when `channel` is `None`).
    pub fn dm_pairing_list(
        &self,
        channel: Option<&str>,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<Vec<(String, PendingDmPairing)>, StoreError> {
        self.env.read("dm_pairing_list", |txn, dbs| {
            let mut out = Vec::new();
            for item in dbs.meta.prefix_iter(txn, KEY_PREFIX.as_bytes())? {
                let (raw_key, bytes) = item?;
                let key = String::from_utf8_lossy(raw_key).to_string();
                let name = key.trim_start_matches(KEY_PREFIX).to_string();
                if channel.is_some_and(|c| c.trim().to_lowercase() != name) {
                    continue;
                }
                let mut record: ChannelPairing = decode_at(META_DB, &key, bytes)?;
                prune(&mut record, now_ms, ttl_ms);
                out.extend(record.pending.into_iter().map(|p| (name.clone(), p)));
            }
            Ok(out)
        })
    }

    /// Approves a live code: the sender joins the approved list, the code
    /// goes, and the first approval ever seeds the owner. `None` for an
    /// unknown or expired code.
    pub fn dm_pairing_approve(
        &self,
        channel: &str,
        code: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<Option<DmApproval>, StoreError> {
        let key = channel_key(channel)?;
        let code = code.trim().to_uppercase();
        let channel_name = channel.trim().to_lowercase();
        self.env.write("dm_pairing_approve", |txn, dbs| {
            let Some(bytes) = dbs.meta.get(txn, key.as_bytes())? else {
                return Ok(None);
            };
            let mut record: ChannelPairing = decode_at(META_DB, &key, bytes)?;
            prune(&mut record, now_ms, ttl_ms);
            let Some(at) = record.pending.iter().position(|p| p.code == code) else {
                return Ok(None);
            };
            let pending = record.pending.remove(at);
            record.approved.retain(|a| {
                !(a.sender_id == pending.sender_id && a.account_id == pending.account_id)
            });
            record.approved.push(ApprovedDmSender {
                account_id: pending.account_id.clone(),
                sender_id: pending.sender_id.clone(),
                approved_at_ms: now_ms,
            });
            let bytes = encode(META_DB, &key, &record)?;
            dbs.meta.put(txn, key.as_bytes(), &bytes)?;
            let seeded_owner = dbs.meta.get(txn, OWNER_KEY.as_bytes())?.is_none();
            if seeded_owner {
                let owner = OwnerRecord {
                    owner: format!("{channel_name}:{}", pending.sender_id),
                };
                let bytes = encode(META_DB, OWNER_KEY, &owner)?;
                dbs.meta.put(txn, OWNER_KEY.as_bytes(), &bytes)?;
            }
            Ok(Some(DmApproval {
                sender_id: pending.sender_id,
                account_id: pending.account_id,
                seeded_owner,
            }))
        })
    }

    /// Drops a live code without approving its sender (upstream's dismiss:
    /// the sender may ask again). `None` for an unknown or expired code.
    pub fn dm_pairing_dismiss(
        &self,
        channel: &str,
        code: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<Option<PendingDmPairing>, StoreError> {
        let key = channel_key(channel)?;
        let code = code.trim().to_uppercase();
        self.env.write("dm_pairing_dismiss", |txn, dbs| {
            let Some(bytes) = dbs.meta.get(txn, key.as_bytes())? else {
                return Ok(None);
            };
            let mut record: ChannelPairing = decode_at(META_DB, &key, bytes)?;
            prune(&mut record, now_ms, ttl_ms);
            let Some(at) = record.pending.iter().position(|p| p.code == code) else {
                return Ok(None);
            };
            let dismissed = record.pending.remove(at);
            let bytes = encode(META_DB, &key, &record)?;
            dbs.meta.put(txn, key.as_bytes(), &bytes)?;
            Ok(Some(dismissed))
        })
    }

    /// Adds `sender_id` to the approved senders of a channel account without a code (an approval carried
    /// over from OpenClaw). Returns `false` when the sender was already approved there. Never seeds the owner.
    pub fn dm_pairing_allow(
        &self,
        channel: &str,
        account_id: &str,
        sender_id: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let key = channel_key(channel)?;
        self.env.write("dm_pairing_allow", |txn, dbs| {
            let mut record: ChannelPairing = match dbs.meta.get(txn, key.as_bytes())? {
                Some(bytes) => decode_at(META_DB, &key, bytes)?,
                None => ChannelPairing::default(),
            };
            let known = record
                .approved
                .iter()
                .any(|a| a.account_id == account_id && a.sender_id == sender_id);
            if known {
                return Ok(false);
            }
            record.approved.push(ApprovedDmSender {
                account_id: account_id.to_string(),
                sender_id: sender_id.to_string(),
                approved_at_ms: now_ms,
            });
            let bytes = encode(META_DB, &key, &record)?;
            dbs.meta.put(txn, key.as_bytes(), &bytes)?;
            Ok(true)
        })
    }

    /// Whether pairing approved this sender on this channel account.
    pub fn dm_pairing_is_approved(
        &self,
        channel: &str,
        account_id: &str,
        sender_id: &str,
    ) -> Result<bool, StoreError> {
        let key = channel_key(channel)?;
        self.env.read("dm_pairing_is_approved", |txn, dbs| {
            let Some(bytes) = dbs.meta.get(txn, key.as_bytes())? else {
                return Ok(false);
            };
            let record: ChannelPairing = decode_at(META_DB, &key, bytes)?;
            Ok(record
                .approved
                .iter()
                .any(|a| a.account_id == account_id && a.sender_id == sender_id))
        })
    }

    /// The owner seeded by the first approval, as `<channel>:<senderId>`.
    pub fn dm_pairing_owner(&self) -> Result<Option<String>, StoreError> {
        self.env.read("dm_pairing_owner", |txn, dbs| {
            match dbs.meta.get(txn, OWNER_KEY.as_bytes())? {
                None => Ok(None),
                Some(bytes) => Ok(Some(
                    decode_at::<OwnerRecord>(META_DB, OWNER_KEY, bytes)?.owner,
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    const LIMITS: DmPairingLimits = DmPairingLimits {
        ttl_ms: 1_000,
        max_pending_per_account: 3,
    };

    fn pending(sender: &str, at: u64) -> PendingDmPairing {
        PendingDmPairing {
            code: String::new(),
            account_id: "default".into(),
            sender_id: sender.into(),
            sender_name: None,
            created_at_ms: at,
        }
    }

    #[test]
    fn approval_moves_sender_to_approved_and_seeds_owner_once() {
        let (_dir, store) = temp_store();
        let mut n = 0;
        let mut codes = || {
            n += 1;
            format!("CODE{n}")
        };
        let first = store
            .dm_pairing_request("telegram", &pending("42", 10), LIMITS, &mut codes)
            .expect("request");
        assert_eq!(first, DmPairingRequest::Created("CODE1".into()));
        let again = store
            .dm_pairing_request("telegram", &pending("42", 20), LIMITS, &mut codes)
            .expect("request");
        assert_eq!(again, DmPairingRequest::Existing("CODE1".into()));
        let approval = store
            .dm_pairing_approve("telegram", "code1", 30, LIMITS.ttl_ms)
            .expect("approve")
            .expect("live code");
        assert!(approval.seeded_owner);
        assert!(store
            .dm_pairing_is_approved("telegram", "default", "42")
            .expect("read"));
        assert_eq!(
            store.dm_pairing_owner().expect("owner").as_deref(),
            Some("telegram:42")
        );
        assert!(store
            .dm_pairing_list(None, 30, LIMITS.ttl_ms)
            .expect("list")
            .is_empty());
    }

    #[test]
    fn a_dismissed_code_is_gone_and_its_sender_not_approved() {
        let (_dir, store) = temp_store();
        let mut codes = || "CODEX".to_string();
        store
            .dm_pairing_request("telegram", &pending("7", 10), LIMITS, &mut codes)
            .expect("request");
        let dismissed = store
            .dm_pairing_dismiss("telegram", "codex", 20, LIMITS.ttl_ms)
            .expect("dismiss")
            .expect("live code");
        assert_eq!(dismissed.sender_id, "7");
        assert!(store
            .dm_pairing_list(None, 20, LIMITS.ttl_ms)
            .expect("list")
            .is_empty());
        assert!(!store
            .dm_pairing_is_approved("telegram", "default", "7")
            .expect("read"));
        assert_eq!(
            store
                .dm_pairing_dismiss("telegram", "CODEX", 20, LIMITS.ttl_ms)
                .expect("dismiss again"),
            None
        );
        assert_eq!(store.dm_pairing_owner().expect("owner"), None);
    }

    #[test]
    fn allowing_a_sender_directly_is_idempotent_and_seeds_no_owner() {
        let (_dir, store) = temp_store();
        assert!(store
            .dm_pairing_allow("Telegram", "default", "42", 5)
            .expect("allow"));
        assert!(!store
            .dm_pairing_allow("telegram", "default", "42", 6)
            .expect("allow again"));
        assert!(store
            .dm_pairing_is_approved("telegram", "default", "42")
            .expect("read"));
        assert!(!store
            .dm_pairing_is_approved("telegram", "work", "42")
            .expect("read"));
        assert_eq!(store.dm_pairing_owner().expect("owner"), None);
    }
}
