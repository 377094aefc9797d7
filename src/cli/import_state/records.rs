//! OpenClaw's small JSON stores: cron jobs (`cron/jobs.json`), paired devices (`devices/paired.json`)
//! and DM pairing approvals (`credentials/<channel>[-<account>]-allowFrom.json`), into pincer's store.
//!
//! Each record is checked and written alone: a bad one is reported by file and id, the others go on.
//! A job id, device id or approved sender pincer already has is left alone ("already present").

use std::path::Path;

use serde_json::Value;

use super::{read_json, Report};
use crate::config::schema::channels::DEFAULT_ACCOUNT_ID;
use crate::cron::CronJob;
use crate::gateway::device_auth::{decode_public_key, device_id_for, token_hash};
use crate::store::{DeviceRecord, DeviceToken, Store};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

/// The chat channels pincer runs; approvals of other channels are reported, not stored.
pub const PINCER_CHANNELS: [&str; 6] = [
    "telegram", "discord", "slack", "matrix", "signal", "whatsapp",
];

/// Imports the jobs of `jobs_path` (OpenClaw's `{version, jobs: [...]}`).
pub fn import_cron(jobs_path: &Path, store: &Store, now_ms: u64, report: &mut Report) {
    if !jobs_path.exists() {
        return;
    }
    let file = jobs_path.display().to_string();
    let jobs = match read_json(jobs_path) {
        Ok(Value::Object(mut doc)) => match doc.remove("jobs") {
            Some(Value::Array(jobs)) => jobs,
            _ => return report.failed(&file, "no \"jobs\" array".into()),
        },
        Ok(Value::Array(jobs)) => jobs,
        Ok(_) => return report.failed(&file, "not a jobs document".into()),
        Err(why) => return report.failed(&file, why),
    };
    import_jobs(jobs, &file, store, now_ms, report);
}

/// Imports cron jobs in OpenClaw's JSON shape; `source` names where they came from.
pub fn import_jobs(
    jobs: Vec<Value>,
    source: &str,
    store: &Store,
    now_ms: u64,
    report: &mut Report,
) {
    for (at, raw) in jobs.into_iter().enumerate() {
        let id = raw["id"].as_str().unwrap_or_default().to_string();
        let what = format!("cron job {id:?} ({:?})", raw["name"].as_str().unwrap_or(""));
        if id.is_empty() {
            report.failed(&format!("{source}: jobs[{at}]"), "the job has no id".into());
            continue;
        }
        if raw["payload"]["kind"] == "heartbeat" {
            report.failed(
                &format!("{what} in {source}"),
                "OpenClaw's own heartbeat job: pincer runs the heartbeat from agents.defaults.heartbeat".into(),
            );
            continue;
        }
        match import_job(raw, &id, store, now_ms) {
            Ok(true) => report.imported(&what, String::new()),
            Ok(false) => report.present(&what),
            Err(why) => report.failed(&format!("{what} in {source}"), why),
        }
    }
}

fn import_job(mut raw: Value, id: &str, store: &Store, now_ms: u64) -> Result<bool, String> {
    if store.cron_job(id).map_err(|e| e.to_string())?.is_some() {
        return Ok(false);
    }
    if let Some(object) = raw.as_object_mut() {
        object.entry("createdAtMs").or_insert(now_ms.into());
        object.entry("updatedAtMs").or_insert(now_ms.into());
    }
    let mut job: CronJob = serde_json::from_value(raw).map_err(|e| e.to_string())?;
    job.validate().map_err(|e| e.to_string())?;
    job.state.running_at_ms = None;
    job.recompute_next(now_ms);
    let json = serde_json::to_string(&job).map_err(|e| e.to_string())?;
    store.cron_job_put(id, &json).map_err(|e| e.to_string())?;
    Ok(true)
}

/// Imports the devices of `<state>/devices/paired.json`; pending requests are reported only.
pub fn import_devices(state_dir: &Path, store: &Store, report: &mut Report) {
    let devices_dir = state_dir.join("devices");
    let pending = devices_dir.join("pending.json");
    if let Ok(Value::Object(requests)) = read_json(&pending) {
        if !requests.is_empty() {
            report.failed(
                &pending.display().to_string(),
                format!(
                    "{} pending device pairing requests are not carried over (they expire within minutes; the device asks again when it connects)",
                    requests.len()
                ),
            );
        }
    }
    let paired = devices_dir.join("paired.json");
    if !paired.exists() {
        return;
    }
    let file = paired.display().to_string();
    let devices = match read_json(&paired) {
        Ok(Value::Object(devices)) => devices,
        Ok(_) => return report.failed(&file, "not a JSON object of device id → device".into()),
        Err(why) => return report.failed(&file, why),
    };
    for (device_id, raw) in devices {
        import_device(&device_id, &raw, &file, store, report);
    }
}

/// Imports one paired device in OpenClaw's JSON shape; `source` names where it came from.
pub fn import_device(
    device_id: &str,
    raw: &Value,
    source: &str,
    store: &Store,
    report: &mut Report,
) {
    let what = format!("paired device {device_id}");
    match store_device(device_id, raw, store) {
        Ok(true) => report.imported(&what, describe_device(raw)),
        Ok(false) => report.present(&what),
        Err(why) => report.failed(&format!("{what} in {source}"), why),
    }
}

fn describe_device(raw: &Value) -> String {
    let name = raw["displayName"]
        .as_str()
        .or(raw["clientId"].as_str())
        .unwrap_or("unnamed");
    let tokens = raw["tokens"].as_object().map_or(0, |t| t.len());
    format!("{name}, {tokens} device tokens")
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn store_device(device_id: &str, raw: &Value, store: &Store) -> Result<bool, String> {
    let key_text = raw["publicKey"].as_str().ok_or("no publicKey")?;
    let key = decode_public_key(key_text).ok_or("publicKey is not an Ed25519 public key")?;
    if device_id_for(&key) != device_id {
        return Err("the device id is not the SHA-256 of its public key".into());
    }
    if store
        .device(device_id)
        .map_err(|e| e.to_string())?
        .is_some()
    {
        return Ok(false);
    }
    let created_at_ms = raw["createdAtMs"].as_u64().ok_or("no createdAtMs")?;
    let mut roles = strings(&raw["roles"]);
    if let Some(role) = raw["role"].as_str() {
        if !roles.iter().any(|r| r == role) {
            roles.push(role.to_string());
        }
    }
    let approved = strings(&raw["approvedScopes"]);
    let scopes = if approved.is_empty() {
        strings(&raw["scopes"])
    } else {
        approved
    };
    let tokens = raw["tokens"]
        .as_object()
        .map(|tokens| {
            tokens
                .iter()
                .filter_map(|(role, token)| {
                    let secret = token["token"].as_str()?;
                    Some(DeviceToken {
                        token_hash: token_hash(secret),
                        role: token["role"].as_str().unwrap_or(role).to_string(),
                        scopes: strings(&token["scopes"]),
                        issued_at_ms: token["rotatedAtMs"]
                            .as_u64()
                            .or(token["createdAtMs"].as_u64())
                            .unwrap_or(created_at_ms),
                        revoked_at_ms: token["revokedAtMs"].as_u64(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let text = |name: &str| raw[name].as_str().map(str::to_string);
    let record = DeviceRecord {
        device_id: device_id.to_string(),
        public_key: URL_SAFE_NO_PAD.encode(key),
        display_name: text("displayName"),
        platform: text("platform"),
        device_family: text("deviceFamily"),
        client_id: text("clientId"),
        client_mode: text("clientMode"),
        roles,
        scopes,
        tokens,
        created_at_ms,
        approved_at_ms: raw["approvedAtMs"].as_u64().or(Some(created_at_ms)),
        last_seen_at_ms: raw["lastSeenAtMs"].as_u64(),
        remote_ip: text("remoteIp"),
    };
    store.put_device(&record).map_err(|e| e.to_string())?;
    Ok(true)
}

/// Imports every `credentials/*-allowFrom.json`; `*-pairing.json` (pending codes) is reported only.
pub fn import_allow_from(state_dir: &Path, store: &Store, now_ms: u64, report: &mut Report) {
    let dir = state_dir.join("credentials");
    let Ok(listing) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut names: Vec<String> = listing
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let file = path.display().to_string();
        if let Some(channel) = name.strip_suffix("-pairing.json") {
            if let Ok(doc) = read_json(&path) {
                let pending = doc["requests"].as_array().map_or(0, Vec::len);
                if pending > 0 {
                    report.failed(
                        &file,
                        format!("{pending} pending {channel} pairing codes are not carried over (they expire after an hour; the sender gets a new code)"),
                    );
                }
            }
            continue;
        }
        let Some(stem) = name.strip_suffix("-allowFrom.json") else {
            continue;
        };
        let Some((channel, account)) = channel_and_account(stem) else {
            report.failed(
                &file,
                format!(
                    "not a channel pincer runs ({}); its approvals are not carried over",
                    PINCER_CHANNELS.join(", ")
                ),
            );
            continue;
        };
        let doc = match read_json(&path) {
            Ok(doc) => doc,
            Err(why) => {
                report.failed(&file, why);
                continue;
            }
        };
        let entries = match doc.get("allowFrom").unwrap_or(&doc) {
            Value::Array(entries) => entries.clone(),
            _ => {
                report.failed(&file, "no \"allowFrom\" array".into());
                continue;
            }
        };
        import_allow_entries(channel, &account, &entries, &file, store, now_ms, report);
    }
}

/// Imports the approved senders of one channel account; `source` names where they came from.
pub fn import_allow_entries(
    channel: &str,
    account: &str,
    entries: &[Value],
    source: &str,
    store: &Store,
    now_ms: u64,
    report: &mut Report,
) {
    for raw in entries {
        let sender = match raw {
            Value::String(s) => normalise_sender(channel, s),
            Value::Number(n) => n.to_string(),
            _ => String::new(),
        };
        let what = format!("{channel} DM approval of {sender} (account {account})");
        if sender.is_empty() || sender == "*" {
            report.failed(
                &format!("{source}: {raw}"),
                "not a sender id (a wildcard belongs in the channel's allowFrom config)".into(),
            );
            continue;
        }
        match store.dm_pairing_allow(channel, account, &sender, now_ms) {
            Ok(true) => report.imported(&what, String::new()),
            Ok(false) => report.present(&what),
            Err(e) => report.failed(&format!("{what} in {source}"), e.to_string()),
        }
    }
}

/// `telegram` → (telegram, default); `telegram-work` → (telegram, work); other channels → `None`.
fn channel_and_account(stem: &str) -> Option<(&'static str, String)> {
    PINCER_CHANNELS.iter().find_map(|channel| {
        if stem == *channel {
            return Some((*channel, DEFAULT_ACCOUNT_ID.to_string()));
        }
        let account = stem.strip_prefix(channel)?.strip_prefix('-')?;
        (!account.is_empty()).then(|| (*channel, account.to_string()))
    })
}

/// A stored sender id without the channel prefixes OpenClaw accepts (`telegram:`, `tg:`).
fn normalise_sender(channel: &str, raw: &str) -> String {
    let trimmed = raw.trim();
    let lower = trimmed.to_ascii_lowercase();
    for prefix in [format!("{channel}:"), "tg:".to_string()] {
        if lower.starts_with(&prefix) && (channel == "telegram" || !prefix.starts_with("tg")) {
            return trimmed[prefix.len()..].trim().to_string();
        }
    }
    trimmed.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_from_file_names_give_channel_and_account() {
        assert_eq!(
            channel_and_account("telegram"),
            Some(("telegram", "default".to_string()))
        );
        assert_eq!(
            channel_and_account("discord-work"),
            Some(("discord", "work".to_string()))
        );
        assert_eq!(
            channel_and_account("whatsapp"),
            Some(("whatsapp", "default".to_string()))
        );
        assert_eq!(
            channel_and_account("signal-phone"),
            Some(("signal", "phone".to_string()))
        );
        assert_eq!(channel_and_account("irc"), None);
        assert_eq!(channel_and_account("telegramx"), None);
    }

    #[test]
    fn sender_prefixes_are_removed() {
        assert_eq!(normalise_sender("telegram", "tg:42"), "42");
        assert_eq!(normalise_sender("telegram", "Telegram:42"), "42");
        assert_eq!(normalise_sender("discord", "tg:42"), "tg:42");
        assert_eq!(normalise_sender("slack", " U123 "), "U123");
    }
}
