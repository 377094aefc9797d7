//! The `cron` and `cron_runs` databases: scheduled jobs (key = job id, value = the job's JSON) and each
//! job's run log (key = job id, NUL, 20-digit start time, 10-digit sequence; value = the entry's JSON).
//!
//! The job model lives in `crate::cron`; this file keeps its JSON text opaque except through the caller's
//! closure in `cron_job_update`, which runs inside the write transaction so a claim (checking and setting
//! `runningAtMs`) is atomic. Run logs are bounded: an append trims the job's oldest entries past `keep`.

use serde::{Deserialize, Serialize};

use super::codec::{check_key, decode_at, encode, key_text, Record};
use super::env::{CRON_DB, CRON_RUNS_DB};
use super::{Store, StoreError};

/// Upper bound of a job's run log: 2,000 entries.
pub const MAX_CRON_RUN_LOG_ENTRIES: usize = 2_000;
/// Separator between the job id and the time in run-log keys (job ids never contain NUL).
const RUN_KEY_SEPARATOR: u8 = 0;

/// A stored job or run-log entry: its JSON text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct CronJsonRecord {
    json: String,
}

impl Record for CronJsonRecord {
    const VERSION: u8 = 1;
}

fn check_job_id(id: &str) -> Result<(), StoreError> {
    check_key(CRON_DB, id)?;
    if id.as_bytes().contains(&RUN_KEY_SEPARATOR) {
        return Err(StoreError::InvalidKey {
            db: CRON_DB,
            reason: "job id contains a NUL byte".into(),
        });
    }
    Ok(())
}

fn run_prefix(job_id: &str) -> Vec<u8> {
    let mut prefix = job_id.as_bytes().to_vec();
    prefix.push(RUN_KEY_SEPARATOR);
    prefix
}

impl Store {
    /// Every job as `(id, json)`, in id order.
    pub fn cron_jobs(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.env.read("cron_jobs", |txn, dbs| {
            let mut jobs = Vec::new();
            for item in dbs.cron.iter(txn)? {
                let (key, bytes) = item?;
                let id = key_text(CRON_DB, key)?;
                let record: CronJsonRecord = decode_at(CRON_DB, id, bytes)?;
                jobs.push((id.to_string(), record.json));
            }
            Ok(jobs)
        })
    }

    /// One job's JSON.
    pub fn cron_job(&self, id: &str) -> Result<Option<String>, StoreError> {
        check_job_id(id)?;
        self.env.read("cron_job", |txn, dbs| {
            match dbs.cron.get(txn, id.as_bytes())? {
                None => Ok(None),
                Some(bytes) => Ok(Some(decode_at::<CronJsonRecord>(CRON_DB, id, bytes)?.json)),
            }
        })
    }

    /// Stores a job's JSON under `id`, replacing any previous version.
    pub fn cron_job_put(&self, id: &str, json: &str) -> Result<(), StoreError> {
        check_job_id(id)?;
        let bytes = encode(
            CRON_DB,
            id,
            &CronJsonRecord {
                json: json.to_string(),
            },
        )?;
        self.env.write("cron_job_put", |txn, dbs| {
            Ok(dbs.cron.put(txn, id.as_bytes(), &bytes)?)
        })
    }

    /// Reads the job under `id` and stores what `change` returns, in one transaction. `change` sees the
    /// current JSON (or `None`) and returns the new JSON, or `None` to leave the job untouched; the result
    /// is whatever was written. `change` may run more than once (after a map resize) and must be pure.
    pub fn cron_job_update(
        &self,
        id: &str,
        mut change: impl FnMut(Option<&str>) -> Option<String>,
    ) -> Result<Option<String>, StoreError> {
        check_job_id(id)?;
        self.env.write("cron_job_update", |txn, dbs| {
            let current = match dbs.cron.get(txn, id.as_bytes())? {
                None => None,
                Some(bytes) => Some(decode_at::<CronJsonRecord>(CRON_DB, id, bytes)?.json),
            };
            let Some(json) = change(current.as_deref()) else {
                return Ok(None);
            };
            let bytes = encode(CRON_DB, id, &CronJsonRecord { json: json.clone() })?;
            dbs.cron.put(txn, id.as_bytes(), &bytes)?;
            Ok(Some(json))
        })
    }

    /// Deletes a job and its run log; returns whether the job existed.
    pub fn cron_job_delete(&self, id: &str) -> Result<bool, StoreError> {
        check_job_id(id)?;
        let prefix = run_prefix(id);
        self.env.delete("cron_job_delete", |txn, dbs| {
            let existed = dbs.cron.delete(txn, id.as_bytes())?;
            let mut doomed = Vec::new();
            for item in dbs.cron_runs.prefix_iter(txn, &prefix)? {
                doomed.push(item?.0.to_vec());
            }
            for key in &doomed {
                dbs.cron_runs.delete(txn, key)?;
            }
            Ok(existed)
        })
    }

    /// Appends a run-log entry for `job_id` started at `ts_ms`, then trims the log to its newest `keep`
    /// entries (at most `MAX_CRON_RUN_LOG_ENTRIES`).
    pub fn cron_run_append(
        &self,
        job_id: &str,
        ts_ms: u64,
        json: &str,
        keep: usize,
    ) -> Result<(), StoreError> {
        check_job_id(job_id)?;
        let keep = keep.clamp(1, MAX_CRON_RUN_LOG_ENTRIES);
        let prefix = run_prefix(job_id);
        let bytes = encode(
            CRON_RUNS_DB,
            job_id,
            &CronJsonRecord {
                json: json.to_string(),
            },
        )?;
        self.env.write("cron_run_append", |txn, dbs| {
            let mut keys = Vec::new();
            for item in dbs.cron_runs.prefix_iter(txn, &prefix)? {
                keys.push(item?.0.to_vec());
            }
            let mut key = prefix.clone();
            key.extend_from_slice(format!("{ts_ms:020}").as_bytes());
            let same_ms = keys.iter().filter(|k| k.starts_with(&key)).count();
            key.extend_from_slice(format!("{same_ms:010}").as_bytes());
            dbs.cron_runs.put(txn, &key, &bytes)?;
            keys.push(key);
            keys.sort();
            let excess = keys.len().saturating_sub(keep);
            for old in &keys[..excess] {
                dbs.cron_runs.delete(txn, old)?;
            }
            Ok(())
        })
    }

    /// The newest `limit` run-log entries of `job_id`, newest first.
    pub fn cron_runs(&self, job_id: &str, limit: usize) -> Result<Vec<String>, StoreError> {
        check_job_id(job_id)?;
        let prefix = run_prefix(job_id);
        self.env.read("cron_runs", |txn, dbs| {
            let mut entries = Vec::new();
            for item in dbs.cron_runs.rev_prefix_iter(txn, &prefix)?.take(limit) {
                let (key, bytes) = item?;
                let record: CronJsonRecord =
                    decode_at(CRON_RUNS_DB, &String::from_utf8_lossy(key), bytes)?;
                entries.push(record.json);
            }
            Ok(entries)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_support::temp_store;

    #[test]
    fn jobs_round_trip_and_delete_takes_the_run_log() {
        let (_dir, store) = temp_store();
        store.cron_job_put("a", r#"{"id":"a"}"#).expect("put");
        store.cron_job_put("b", r#"{"id":"b"}"#).expect("put");
        store.cron_run_append("a", 5, "{}", 10).expect("append");
        assert_eq!(store.cron_jobs().expect("list").len(), 2);
        assert_eq!(
            store.cron_job("a").expect("get").as_deref(),
            Some(r#"{"id":"a"}"#)
        );
        assert!(store.cron_job_delete("a").expect("delete"));
        assert!(!store.cron_job_delete("a").expect("delete again"));
        assert!(store.cron_runs("a", 10).expect("runs").is_empty());
        assert!(store.cron_job_put("x\0y", "{}").is_err());
    }

    #[test]
    fn update_sees_current_json_and_can_decline() {
        let (_dir, store) = temp_store();
        assert_eq!(
            store
                .cron_job_update("a", |cur| cur.map(str::to_string))
                .expect("absent"),
            None
        );
        store.cron_job_put("a", "1").expect("put");
        let written = store
            .cron_job_update("a", |cur| cur.map(|c| format!("{c}+1")))
            .expect("update");
        assert_eq!(written.as_deref(), Some("1+1"));
        assert_eq!(store.cron_job("a").expect("get").as_deref(), Some("1+1"));
    }

    #[test]
    fn run_log_is_newest_first_and_bounded() {
        let (_dir, store) = temp_store();
        for ts in 0..12u64 {
            store
                .cron_run_append("job", ts, &ts.to_string(), 10)
                .expect("append");
        }
        store
            .cron_run_append("job", 11, "11b", 10)
            .expect("same ms");
        store
            .cron_run_append("jobx", 99, "other", 10)
            .expect("other job");
        let runs = store.cron_runs("job", 100).expect("runs");
        assert_eq!(runs.len(), 10);
        assert_eq!(runs[0], "11b");
        assert_eq!(runs[1], "11");
        assert_eq!(runs[9], "3");
        assert_eq!(store.cron_runs("job", 2).expect("limit").len(), 2);
    }
}
