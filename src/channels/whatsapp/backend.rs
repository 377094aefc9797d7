//! whatsapp-rust's storage port (`Backend`: the device's credentials, Signal
//! identities, sessions, pre-keys and sender keys, app-state keys and
//! versions, LID↔phone mappings, device lists, …) over pincer's sealed LMDB
//! records (`store::SealedRecords`, encrypted at rest), one namespace per
//! account. Values are the crate's own bytes or its serde types as JSON;
//! binary parts of keys are hex. The layout is this file's alone:
//!
//! | key | value |
//! |---|---|
//! | `device` | the `Device` (keys, JIDs, push name) |
//! | `id/<address>` | remote identity key (32 bytes) |
//! | `sess/<address>` | session record |
//! | `pk/<id, 10 digits>` | uploaded flag (1 byte) + pre-key record |
//! | `spk/<id>` | signed pre-key record |
//! | `sk/<address>` | sender key record |
//! | `sync/<hex id>`, `meta/latest-sync-key` | app-state sync key; the latest key id |
//! | `ver/<name>`, `mac/<name>/<hex index>` | app-state hash state; value MACs |
//! | `skd/<group>/<device>` | sender key sent to a device (1 byte) |
//! | `lid/<lid>`, `pn/<phone>` | LID↔phone mapping; its index by phone |
//! | `bk/<address>/<message id>` | base key of a pre-key message |
//! | `devs/<user>`, `grp/<group>`, `tc/<jid>` | device list; group metadata; privacy token |
//! | `sent/<chat>/<id>`, `pend/<chat>/<sender>/<id>` | time (8 bytes) + payload |
//! | `secret/<chat>/<sender>/<id>` | message secret with its expiry and time |
//!
//! Scans (expiry sweeps, all mappings) read at most [`MAX_SCAN`] records and
//! fail beyond that instead of growing without bound; sent messages kept for
//! retries are capped at [`MAX_SENT_MESSAGES`] (the oldest go first).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use whatsapp_rust::async_trait;
use whatsapp_rust::bytes::Bytes;
use whatsapp_rust::wacore::appstate::hash::HashState;
use whatsapp_rust::wacore::appstate::processor::AppStateMutationMAC;
use whatsapp_rust::wacore::store::error::{Result, StoreError as WaStoreError};
use whatsapp_rust::wacore::store::traits::{
    merge_msg_secret_expiry, merge_msg_secret_message_ts, AppStateSyncKey, AppSyncStore,
    DeviceListRecord, DeviceStore, LidPnMappingEntry, MsgSecretEntry, MsgSecretStore,
    ProtocolStore, SignalStore, TcTokenEntry,
};
use whatsapp_rust::wacore::store::Device;

use crate::store::{SealedChange, SealedRecords, StoreError};

/// Most records one scan reads.
pub const MAX_SCAN: usize = 50_000;
/// Most sent messages kept for answering retry receipts.
pub const MAX_SENT_MESSAGES: usize = 4_096;

const LATEST_SYNC_KEY: &str = "meta/latest-sync-key";

/// The storage port of one WhatsApp account.
#[derive(Clone)]
pub struct SealedBackend {
    records: SealedRecords,
}

impl SealedBackend {
    pub fn new(records: SealedRecords) -> SealedBackend {
        SealedBackend { records }
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.records
            .run_blocking(|| self.records.get(key))
            .map_err(db_error)
    }

    fn apply(&self, changes: &[SealedChange]) -> Result<()> {
        self.records
            .run_blocking(|| self.records.apply(changes))
            .map_err(db_error)
    }

    fn put(&self, key: String, value: Vec<u8>) -> Result<()> {
        self.apply(&[SealedChange::Put(key, value)])
    }

    fn delete(&self, key: String) -> Result<()> {
        self.apply(&[SealedChange::Delete(key)])
    }

    fn scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.records
            .run_blocking(|| self.records.scan(prefix, MAX_SCAN))
            .map_err(db_error)
    }

    fn delete_prefix(&self, prefix: &str) -> Result<usize> {
        self.records
            .run_blocking(|| self.records.delete_prefix(prefix))
            .map_err(db_error)
    }

    fn get_json<T: for<'de> Deserialize<'de>>(&self, key: &str) -> Result<Option<T>> {
        self.get(key)?
            .map(|bytes| serde_json::from_slice(&bytes).map_err(serde_error))
            .transpose()
    }

    fn put_json<T: Serialize>(&self, key: String, value: &T) -> Result<()> {
        self.put(key, serde_json::to_vec(value).map_err(serde_error)?)
    }

    /// Deletes the timed records under `prefix` (8-byte time first) older than `cutoff`.
    fn delete_timed_before(&self, prefix: &str, cutoff: i64) -> Result<u32> {
        let stale: Vec<SealedChange> = self
            .scan(prefix)?
            .into_iter()
            .filter(|(_, value)| timed_at(value) < cutoff)
            .map(|(key, _)| SealedChange::Delete(key))
            .collect();
        self.apply(&stale)?;
        Ok(u32::try_from(stale.len()).unwrap_or(u32::MAX))
    }
}

fn db_error(error: StoreError) -> WaStoreError {
    WaStoreError::Database(Box::new(error))
}

fn serde_error(error: serde_json::Error) -> WaStoreError {
    WaStoreError::Serialization(Box::new(error))
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn timed(at: i64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&at.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn timed_at(value: &[u8]) -> i64 {
    value
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(i64::from_be_bytes)
        .unwrap_or(0)
}

fn timed_payload(value: Vec<u8>) -> Vec<u8> {
    value.get(8..).map(<[u8]>::to_vec).unwrap_or_default()
}

fn prekey_key(id: u32) -> String {
    format!("pk/{id:010}")
}

fn prekey_id(key: &str, prefix: &str) -> Option<u32> {
    key.strip_prefix(prefix)?.parse().ok()
}

#[derive(Serialize, Deserialize)]
struct StoredSecret {
    secret: Vec<u8>,
    expires_at: i64,
    message_ts: i64,
}

#[async_trait]
impl SignalStore for SealedBackend {
    async fn put_identity(&self, address: &str, key: [u8; 32]) -> Result<()> {
        self.put(format!("id/{address}"), key.to_vec())
    }

    async fn put_identities_batch(&self, identities: &[(Arc<str>, [u8; 32])]) -> Result<()> {
        let changes: Vec<SealedChange> = identities
            .iter()
            .map(|(address, key)| SealedChange::Put(format!("id/{address}"), key.to_vec()))
            .collect();
        self.apply(&changes)
    }

    async fn load_identity(&self, address: &str) -> Result<Option<[u8; 32]>> {
        match self.get(&format!("id/{address}"))? {
            None => Ok(None),
            Some(bytes) => <[u8; 32]>::try_from(bytes.as_slice())
                .map(Some)
                .map_err(|_| {
                    WaStoreError::Validation(format!(
                        "identity of {address} is {} bytes, not 32",
                        bytes.len()
                    ))
                }),
        }
    }

    async fn delete_identity(&self, address: &str) -> Result<()> {
        self.delete(format!("id/{address}"))
    }

    async fn get_session(&self, address: &str) -> Result<Option<Bytes>> {
        Ok(self.get(&format!("sess/{address}"))?.map(Bytes::from))
    }

    async fn put_session(&self, address: &str, session: &[u8]) -> Result<()> {
        self.put(format!("sess/{address}"), session.to_vec())
    }

    async fn put_sessions_batch(&self, sessions: &[(Arc<str>, Bytes)]) -> Result<()> {
        let changes: Vec<SealedChange> = sessions
            .iter()
            .map(|(address, record)| SealedChange::Put(format!("sess/{address}"), record.to_vec()))
            .collect();
        self.apply(&changes)
    }

    async fn delete_session(&self, address: &str) -> Result<()> {
        self.delete(format!("sess/{address}"))
    }

    async fn store_prekey(&self, id: u32, record: &[u8], uploaded: bool) -> Result<()> {
        let mut value = vec![u8::from(uploaded)];
        value.extend_from_slice(record);
        self.put(prekey_key(id), value)
    }

    async fn store_prekeys_batch(&self, keys: &[(u32, Bytes)], uploaded: bool) -> Result<()> {
        let changes: Vec<SealedChange> = keys
            .iter()
            .map(|(id, record)| {
                let mut value = vec![u8::from(uploaded)];
                value.extend_from_slice(record);
                SealedChange::Put(prekey_key(*id), value)
            })
            .collect();
        self.apply(&changes)
    }

    async fn load_prekey(&self, id: u32) -> Result<Option<Bytes>> {
        Ok(self
            .get(&prekey_key(id))?
            .map(|value| Bytes::from(value.get(1..).map(<[u8]>::to_vec).unwrap_or_default())))
    }

    async fn mark_prekeys_uploaded(&self, ids: &[u32]) -> Result<()> {
        let mut changes = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(mut value) = self.get(&prekey_key(*id))? {
                if let Some(flag) = value.first_mut() {
                    *flag = 1;
                }
                changes.push(SealedChange::Put(prekey_key(*id), value));
            }
        }
        self.apply(&changes)
    }

    async fn remove_prekey(&self, id: u32) -> Result<()> {
        self.delete(prekey_key(id))
    }

    async fn get_max_prekey_id(&self) -> Result<u32> {
        Ok(self
            .scan("pk/")?
            .iter()
            .filter_map(|(key, _)| prekey_id(key, "pk/"))
            .max()
            .unwrap_or(0))
    }

    async fn store_signed_prekey(&self, id: u32, record: &[u8]) -> Result<()> {
        self.put(format!("spk/{id:010}"), record.to_vec())
    }

    async fn load_signed_prekey(&self, id: u32) -> Result<Option<Vec<u8>>> {
        self.get(&format!("spk/{id:010}"))
    }

    async fn load_all_signed_prekeys(&self) -> Result<Vec<(u32, Vec<u8>)>> {
        Ok(self
            .scan("spk/")?
            .into_iter()
            .filter_map(|(key, value)| prekey_id(&key, "spk/").map(|id| (id, value)))
            .collect())
    }

    async fn remove_signed_prekey(&self, id: u32) -> Result<()> {
        self.delete(format!("spk/{id:010}"))
    }

    async fn put_sender_key(&self, address: &str, record: &[u8]) -> Result<()> {
        self.put(format!("sk/{address}"), record.to_vec())
    }

    async fn put_sender_keys_batch(&self, sender_keys: &[(Arc<str>, Bytes)]) -> Result<()> {
        let changes: Vec<SealedChange> = sender_keys
            .iter()
            .map(|(address, record)| SealedChange::Put(format!("sk/{address}"), record.to_vec()))
            .collect();
        self.apply(&changes)
    }

    async fn get_sender_key(&self, address: &str) -> Result<Option<Vec<u8>>> {
        self.get(&format!("sk/{address}"))
    }

    async fn delete_sender_key(&self, address: &str) -> Result<()> {
        self.delete(format!("sk/{address}"))
    }
}

#[async_trait]
impl AppSyncStore for SealedBackend {
    async fn get_sync_key(&self, key_id: &[u8]) -> Result<Option<AppStateSyncKey>> {
        self.get_json(&format!("sync/{}", hex::encode(key_id)))
    }

    async fn set_sync_key(&self, key_id: &[u8], key: AppStateSyncKey) -> Result<()> {
        let value = serde_json::to_vec(&key).map_err(serde_error)?;
        self.apply(&[
            SealedChange::Put(format!("sync/{}", hex::encode(key_id)), value),
            SealedChange::Put(LATEST_SYNC_KEY.to_string(), key_id.to_vec()),
        ])
    }

    async fn get_version(&self, name: &str) -> Result<HashState> {
        Ok(self.get_json(&format!("ver/{name}"))?.unwrap_or_default())
    }

    async fn set_version(&self, name: &str, state: HashState) -> Result<()> {
        self.put_json(format!("ver/{name}"), &state)
    }

    async fn put_mutation_macs(
        &self,
        name: &str,
        _version: u64,
        mutations: &[AppStateMutationMAC],
    ) -> Result<()> {
        let changes: Vec<SealedChange> = mutations
            .iter()
            .map(|m| {
                SealedChange::Put(
                    format!("mac/{name}/{}", hex::encode(&m.index_mac)),
                    m.value_mac.clone(),
                )
            })
            .collect();
        self.apply(&changes)
    }

    async fn get_mutation_mac(&self, name: &str, index_mac: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get(&format!("mac/{name}/{}", hex::encode(index_mac)))
    }

    async fn delete_mutation_macs(&self, name: &str, index_macs: &[Vec<u8>]) -> Result<()> {
        let changes: Vec<SealedChange> = index_macs
            .iter()
            .map(|index| SealedChange::Delete(format!("mac/{name}/{}", hex::encode(index))))
            .collect();
        self.apply(&changes)
    }

    async fn clear_mutation_macs(&self, name: &str) -> Result<()> {
        self.delete_prefix(&format!("mac/{name}/")).map(|_| ())
    }

    async fn get_latest_sync_key_id(&self) -> Result<Option<Vec<u8>>> {
        self.get(LATEST_SYNC_KEY)
    }
}

#[async_trait]
impl ProtocolStore for SealedBackend {
    async fn get_sender_key_devices(&self, group_jid: &str) -> Result<Vec<(String, bool)>> {
        let prefix = format!("skd/{group_jid}/");
        Ok(self
            .scan(&prefix)?
            .into_iter()
            .map(|(key, value)| {
                let device = key[prefix.len()..].to_string();
                (device, value.first() == Some(&1))
            })
            .collect())
    }

    async fn set_sender_key_status(&self, group_jid: &str, entries: &[(&str, bool)]) -> Result<()> {
        let changes: Vec<SealedChange> = entries
            .iter()
            .map(|(device, has_key)| {
                SealedChange::Put(
                    format!("skd/{group_jid}/{device}"),
                    vec![u8::from(*has_key)],
                )
            })
            .collect();
        self.apply(&changes)
    }

    async fn clear_sender_key_devices(&self, group_jid: &str) -> Result<()> {
        self.delete_prefix(&format!("skd/{group_jid}/")).map(|_| ())
    }

    async fn delete_sender_key_device_rows(&self, device_jids: &[&str]) -> Result<()> {
        if device_jids.is_empty() {
            return Ok(());
        }
        let changes: Vec<SealedChange> = self
            .scan("skd/")?
            .into_iter()
            .filter(|(key, _)| {
                key.rsplit_once('/')
                    .is_some_and(|(_, device)| device_jids.contains(&device))
            })
            .map(|(key, _)| SealedChange::Delete(key))
            .collect();
        self.apply(&changes)
    }

    async fn clear_all_sender_key_devices(&self) -> Result<()> {
        self.delete_prefix("skd/").map(|_| ())
    }

    async fn get_lid_mapping(&self, lid: &str) -> Result<Option<LidPnMappingEntry>> {
        self.get_json(&format!("lid/{lid}"))
    }

    async fn get_pn_mapping(&self, phone: &str) -> Result<Option<LidPnMappingEntry>> {
        match self.get(&format!("pn/{phone}"))? {
            Some(lid) => self.get_json(&format!("lid/{}", String::from_utf8_lossy(&lid))),
            None => Ok(None),
        }
    }

    async fn put_lid_mapping(&self, entry: &LidPnMappingEntry) -> Result<()> {
        self.put_lid_mappings(std::slice::from_ref(entry)).await
    }

    async fn put_lid_mappings(&self, entries: &[LidPnMappingEntry]) -> Result<()> {
        let mut changes = Vec::with_capacity(entries.len() * 2);
        for entry in entries {
            changes.push(SealedChange::Put(
                format!("lid/{}", entry.lid),
                serde_json::to_vec(entry).map_err(serde_error)?,
            ));
            changes.push(SealedChange::Put(
                format!("pn/{}", entry.phone_number),
                entry.lid.as_bytes().to_vec(),
            ));
        }
        self.apply(&changes)
    }

    async fn get_all_lid_mappings(&self) -> Result<Vec<LidPnMappingEntry>> {
        self.scan("lid/")?
            .into_iter()
            .map(|(_, value)| serde_json::from_slice(&value).map_err(serde_error))
            .collect()
    }

    async fn save_base_key(&self, address: &str, message_id: &str, base_key: &[u8]) -> Result<()> {
        self.put(format!("bk/{address}/{message_id}"), base_key.to_vec())
    }

    async fn has_same_base_key(
        &self,
        address: &str,
        message_id: &str,
        current_base_key: &[u8],
    ) -> Result<bool> {
        Ok(self
            .get(&format!("bk/{address}/{message_id}"))?
            .is_some_and(|stored| stored == current_base_key))
    }

    async fn delete_base_key(&self, address: &str, message_id: &str) -> Result<()> {
        self.delete(format!("bk/{address}/{message_id}"))
    }

    async fn update_device_list(&self, record: DeviceListRecord) -> Result<()> {
        self.put_json(format!("devs/{}", record.user), &record)
    }

    async fn get_devices(&self, user: &str) -> Result<Option<DeviceListRecord>> {
        self.get_json(&format!("devs/{user}"))
    }

    async fn delete_devices(&self, user: &str) -> Result<()> {
        self.delete(format!("devs/{user}"))
    }

    async fn get_group_metadata(&self, group_jid: &str) -> Result<Option<Vec<u8>>> {
        self.get(&format!("grp/{group_jid}"))
    }

    async fn put_group_metadata(&self, group_jid: &str, blob: &[u8]) -> Result<()> {
        self.put(format!("grp/{group_jid}"), blob.to_vec())
    }

    async fn delete_group_metadata(&self, group_jid: &str) -> Result<()> {
        self.delete(format!("grp/{group_jid}"))
    }

    async fn get_tc_token(&self, jid: &str) -> Result<Option<TcTokenEntry>> {
        self.get_json(&format!("tc/{jid}"))
    }

    async fn put_tc_token(&self, jid: &str, entry: &TcTokenEntry) -> Result<()> {
        self.put_json(format!("tc/{jid}"), entry)
    }

    async fn delete_tc_token(&self, jid: &str) -> Result<()> {
        self.delete(format!("tc/{jid}"))
    }

    async fn get_all_tc_token_jids(&self) -> Result<Vec<String>> {
        Ok(self
            .scan("tc/")?
            .into_iter()
            .map(|(key, _)| key["tc/".len()..].to_string())
            .collect())
    }

    async fn delete_expired_tc_tokens(&self, token_cutoff: i64, sender_cutoff: i64) -> Result<u32> {
        let mut changes = Vec::new();
        for (key, value) in self.scan("tc/")? {
            let entry: TcTokenEntry = serde_json::from_slice(&value).map_err(serde_error)?;
            let token_live = !entry.token.is_empty() && entry.token_timestamp >= token_cutoff;
            let sender_live = entry.sender_timestamp.is_some_and(|ts| ts >= sender_cutoff);
            if !token_live && !sender_live {
                changes.push(SealedChange::Delete(key));
            }
        }
        self.apply(&changes)?;
        Ok(u32::try_from(changes.len()).unwrap_or(u32::MAX))
    }

    async fn store_sent_message(
        &self,
        chat_jid: &str,
        message_id: &str,
        payload: &[u8],
    ) -> Result<()> {
        let mut changes = Vec::new();
        let kept = self.scan("sent/")?;
        if kept.len() >= MAX_SENT_MESSAGES {
            let mut by_age: Vec<(i64, String)> = kept
                .into_iter()
                .map(|(key, value)| (timed_at(&value), key))
                .collect();
            by_age.sort();
            let excess = by_age.len() + 1 - MAX_SENT_MESSAGES * 3 / 4;
            changes.extend(
                by_age
                    .into_iter()
                    .take(excess)
                    .map(|(_, key)| SealedChange::Delete(key)),
            );
        }
        changes.push(SealedChange::Put(
            format!("sent/{chat_jid}/{message_id}"),
            timed(now_secs(), payload),
        ));
        self.apply(&changes)
    }

    async fn take_sent_message(&self, chat_jid: &str, message_id: &str) -> Result<Option<Vec<u8>>> {
        let key = format!("sent/{chat_jid}/{message_id}");
        let value = self.get(&key)?;
        if value.is_some() {
            self.delete(key)?;
        }
        Ok(value.map(timed_payload))
    }

    async fn delete_expired_sent_messages(&self, cutoff_timestamp: i64) -> Result<u32> {
        self.delete_timed_before("sent/", cutoff_timestamp)
    }

    async fn store_pending_inbound(
        &self,
        chat: &str,
        sender: &str,
        id: &str,
        message: &[u8],
    ) -> Result<()> {
        self.put(
            format!("pend/{chat}/{sender}/{id}"),
            timed(now_secs(), message),
        )
    }

    async fn get_pending_inbound(
        &self,
        chat: &str,
        sender: &str,
        id: &str,
    ) -> Result<Option<Vec<u8>>> {
        Ok(self
            .get(&format!("pend/{chat}/{sender}/{id}"))?
            .map(timed_payload))
    }

    async fn delete_pending_inbound(&self, chat: &str, sender: &str, id: &str) -> Result<()> {
        self.delete(format!("pend/{chat}/{sender}/{id}"))
    }

    async fn delete_expired_pending_inbound(&self, cutoff_timestamp: i64) -> Result<u32> {
        self.delete_timed_before("pend/", cutoff_timestamp)
    }
}

#[async_trait]
impl MsgSecretStore for SealedBackend {
    async fn put_msg_secrets(&self, entries: Vec<MsgSecretEntry>) -> Result<usize> {
        let stored = entries.len();
        let mut changes = Vec::with_capacity(stored);
        for entry in entries {
            let key = format!("secret/{}/{}/{}", entry.chat, entry.sender, entry.msg_id);
            let merged = match self.get_json::<StoredSecret>(&key)? {
                Some(existing) => StoredSecret {
                    secret: entry.secret.to_vec(),
                    expires_at: merge_msg_secret_expiry(existing.expires_at, entry.expires_at),
                    message_ts: merge_msg_secret_message_ts(existing.message_ts, entry.message_ts),
                },
                None => StoredSecret {
                    secret: entry.secret.to_vec(),
                    expires_at: entry.expires_at,
                    message_ts: entry.message_ts,
                },
            };
            changes.push(SealedChange::Put(
                key,
                serde_json::to_vec(&merged).map_err(serde_error)?,
            ));
        }
        self.apply(&changes)?;
        Ok(stored)
    }

    async fn get_msg_secret(
        &self,
        chat: &str,
        sender: &str,
        msg_id: &str,
    ) -> Result<Option<Vec<u8>>> {
        Ok(self
            .get_msg_secret_with_ts(chat, sender, msg_id)
            .await?
            .map(|(secret, _)| secret))
    }

    async fn get_msg_secret_with_ts(
        &self,
        chat: &str,
        sender: &str,
        msg_id: &str,
    ) -> Result<Option<(Vec<u8>, i64)>> {
        Ok(self
            .get_json::<StoredSecret>(&format!("secret/{chat}/{sender}/{msg_id}"))?
            .map(|s| (s.secret, s.message_ts)))
    }

    async fn delete_expired_msg_secrets(&self, cutoff_timestamp: i64) -> Result<u32> {
        let mut changes = Vec::new();
        for (key, value) in self.scan("secret/")? {
            let stored: StoredSecret = serde_json::from_slice(&value).map_err(serde_error)?;
            if stored.expires_at != 0 && stored.expires_at <= cutoff_timestamp {
                changes.push(SealedChange::Delete(key));
            }
        }
        self.apply(&changes)?;
        Ok(u32::try_from(changes.len()).unwrap_or(u32::MAX))
    }
}

#[async_trait]
impl DeviceStore for SealedBackend {
    async fn save(&self, device: &Device) -> Result<()> {
        self.put_json("device".to_string(), device)
    }

    async fn load(&self) -> Result<Option<Device>> {
        self.get_json("device")
    }

    async fn exists(&self) -> Result<bool> {
        Ok(self.get("device")?.is_some())
    }

    async fn create(&self) -> Result<i32> {
        if !self.exists().await? {
            self.save(&Device::new()).await?;
        }
        Ok(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    fn backend(store: &crate::store::Store) -> SealedBackend {
        SealedBackend::new(store.sealed("whatsapp/test").expect("sealed"))
    }

    #[tokio::test]
    async fn signal_state_round_trips_and_prekeys_keep_their_upload_flag() {
        let (_dir, store) = temp_store();
        let b = backend(&store);
        b.put_identity("111.0", [9; 32]).await.expect("identity");
        assert_eq!(b.load_identity("111.0").await.expect("load"), Some([9; 32]));
        b.put_sessions_batch(&[(Arc::from("111.0"), Bytes::from_static(b"sess"))])
            .await
            .expect("sessions");
        assert!(b.has_session("111.0").await.expect("has"));
        b.store_prekeys_batch(
            &[
                (7, Bytes::from_static(b"seven")),
                (12, Bytes::from_static(b"twelve")),
            ],
            false,
        )
        .await
        .expect("prekeys");
        assert_eq!(b.get_max_prekey_id().await.expect("max"), 12);
        b.mark_prekeys_uploaded(&[7]).await.expect("mark");
        assert_eq!(
            b.load_prekey(7).await.expect("load").as_deref(),
            Some(&b"seven"[..])
        );
        assert_eq!(b.get("pk/0000000007").expect("raw").map(|v| v[0]), Some(1));
        assert_eq!(b.get("pk/0000000012").expect("raw").map(|v| v[0]), Some(0));
        b.remove_prekey(12).await.expect("remove");
        assert_eq!(b.get_max_prekey_id().await.expect("max"), 7);
    }

    #[tokio::test]
    async fn mappings_secrets_and_sweeps_follow_the_crate_semantics() {
        let (_dir, store) = temp_store();
        let b = backend(&store);
        let entry = LidPnMappingEntry {
            lid: "998877".into(),
            phone_number: "15550001111".into(),
            created_at: 1,
            updated_at: 2,
            learning_source: "pairing".into(),
        };
        b.put_lid_mapping(&entry).await.expect("mapping");
        assert_eq!(
            b.get_pn_mapping("15550001111")
                .await
                .expect("pn")
                .map(|e| e.lid),
            Some("998877".to_string())
        );
        b.put_msg_secrets(vec![MsgSecretEntry {
            chat: Arc::from("c@s.whatsapp.net"),
            sender: Arc::from("s@s.whatsapp.net"),
            msg_id: Arc::from("M1"),
            secret: [3; 32],
            expires_at: 100,
            message_ts: 5,
        }])
        .await
        .expect("secret");
        assert_eq!(
            b.get_msg_secret_with_ts("c@s.whatsapp.net", "s@s.whatsapp.net", "M1")
                .await
                .expect("get"),
            Some((vec![3; 32], 5))
        );
        assert_eq!(b.delete_expired_msg_secrets(99).await.expect("sweep"), 0);
        assert_eq!(b.delete_expired_msg_secrets(100).await.expect("sweep"), 1);
        b.set_sender_key_status(
            "g@g.us",
            &[("a:1@s.whatsapp.net", true), ("b:2@s.whatsapp.net", false)],
        )
        .await
        .expect("skd");
        b.delete_sender_key_device_rows(&["b:2@s.whatsapp.net"])
            .await
            .expect("rows");
        assert_eq!(
            b.get_sender_key_devices("g@g.us").await.expect("skd"),
            vec![("a:1@s.whatsapp.net".to_string(), true)]
        );
        b.store_sent_message("c@s.whatsapp.net", "X", b"payload")
            .await
            .expect("sent");
        assert_eq!(b.delete_expired_sent_messages(0).await.expect("sweep"), 0);
        assert_eq!(
            b.take_sent_message("c@s.whatsapp.net", "X")
                .await
                .expect("take")
                .as_deref(),
            Some(&b"payload"[..])
        );
        assert_eq!(
            b.take_sent_message("c@s.whatsapp.net", "X")
                .await
                .expect("take"),
            None
        );
    }

    #[tokio::test]
    async fn sent_messages_are_capped() {
        let (_dir, store) = temp_store();
        let b = backend(&store);
        let changes: Vec<SealedChange> = (0..MAX_SENT_MESSAGES)
            .map(|i| SealedChange::Put(format!("sent/c/{i:06}"), timed(i as i64, b"p")))
            .collect();
        b.apply(&changes).expect("fill");
        b.store_sent_message("c", "new", b"p")
            .await
            .expect("one more");
        let kept = b.scan("sent/").expect("scan");
        assert!(
            kept.len() <= MAX_SENT_MESSAGES * 3 / 4,
            "{} kept",
            kept.len()
        );
        assert!(
            kept.iter().any(|(k, _)| k == "sent/c/new"),
            "the newest is kept"
        );
        assert!(
            !kept.iter().any(|(k, _)| k == "sent/c/000000"),
            "the oldest went first"
        );
    }

    #[tokio::test]
    async fn the_device_survives_a_new_backend_on_the_same_store() {
        let (_dir, store) = temp_store();
        assert!(!backend(&store).exists().await.expect("exists"));
        let id = backend(&store).create().await.expect("create");
        assert_eq!(id, 1);
        let mut device = backend(&store)
            .load()
            .await
            .expect("load")
            .expect("present");
        device.push_name = "pincer".into();
        backend(&store).save(&device).await.expect("save");
        let again = backend(&store)
            .load()
            .await
            .expect("load")
            .expect("present");
        assert_eq!(again.push_name, "pincer");
        assert_eq!(
            again.identity_key.public_key.public_key_bytes(),
            device.identity_key.public_key.public_key_bytes()
        );
    }
}
