//! The `subagent_runs` database: one record per spawned sub-agent run (key = the run's registry id, value =
//! the record's JSON as `crate::agent::subagents` shapes it).
//!
//! The record model lives in the agent layer; this file keeps the JSON opaque except through the caller's
//! closure in `subagent_run_update`, which runs inside the write transaction so a status change (finished,
//! killed, steered) never overwrites a concurrent one.

use serde::{Deserialize, Serialize};

use super::codec::{check_key, decode_at, encode, key_text, Record};
use super::env::SUBAGENT_RUNS_DB;
use super::{Store, StoreError};

/// A stored sub-agent run: its JSON text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct SubagentJsonRecord {
    json: String,
}

impl Record for SubagentJsonRecord {
    const VERSION: u8 = 1;
}

impl Store {
    /// Every sub-agent run as `(id, json)`, in id order.
    pub fn subagent_runs(&self) -> Result<Vec<(String, String)>, StoreError> {
        self.env.read("subagent_runs", |txn, dbs| {
            let mut runs = Vec::new();
            for item in dbs.subagent_runs.iter(txn)? {
                let (key, bytes) = item?;
                let id = key_text(SUBAGENT_RUNS_DB, key)?;
                let record: SubagentJsonRecord = decode_at(SUBAGENT_RUNS_DB, id, bytes)?;
                runs.push((id.to_string(), record.json));
            }
            Ok(runs)
        })
    }

    /// One run's JSON.
    pub fn subagent_run(&self, id: &str) -> Result<Option<String>, StoreError> {
        check_key(SUBAGENT_RUNS_DB, id)?;
        self.env.read("subagent_run", |txn, dbs| {
            match dbs.subagent_runs.get(txn, id.as_bytes())? {
                None => Ok(None),
                Some(bytes) => Ok(Some(
                    decode_at::<SubagentJsonRecord>(SUBAGENT_RUNS_DB, id, bytes)?.json,
                )),
            }
        })
    }

    /// Stores a run's JSON under `id`, replacing any previous version.
    pub fn subagent_run_put(&self, id: &str, json: &str) -> Result<(), StoreError> {
        check_key(SUBAGENT_RUNS_DB, id)?;
        let record = SubagentJsonRecord {
            json: json.to_string(),
        };
        let bytes = encode(SUBAGENT_RUNS_DB, id, &record)?;
        self.env.write("subagent_run_put", |txn, dbs| {
            Ok(dbs.subagent_runs.put(txn, id.as_bytes(), &bytes)?)
        })
    }

    /// Reads the run under `id` and stores what `change` returns, in one transaction; `None` from `change`
    /// leaves it untouched. Returns what was written. `change` may run more than once and must be pure.
    pub fn subagent_run_update(
        &self,
        id: &str,
        mut change: impl FnMut(Option<&str>) -> Option<String>,
    ) -> Result<Option<String>, StoreError> {
        check_key(SUBAGENT_RUNS_DB, id)?;
        self.env.write("subagent_run_update", |txn, dbs| {
            let current = match dbs.subagent_runs.get(txn, id.as_bytes())? {
                None => None,
                Some(bytes) => {
                    Some(decode_at::<SubagentJsonRecord>(SUBAGENT_RUNS_DB, id, bytes)?.json)
                }
            };
            let Some(json) = change(current.as_deref()) else {
                return Ok(None);
            };
            let bytes = encode(
                SUBAGENT_RUNS_DB,
                id,
                &SubagentJsonRecord { json: json.clone() },
            )?;
            dbs.subagent_runs.put(txn, id.as_bytes(), &bytes)?;
            Ok(Some(json))
        })
    }

    /// Deletes a run record; returns whether it existed.
    pub fn subagent_run_delete(&self, id: &str) -> Result<bool, StoreError> {
        check_key(SUBAGENT_RUNS_DB, id)?;
        self.env.delete("subagent_run_delete", |txn, dbs| {
            Ok(dbs.subagent_runs.delete(txn, id.as_bytes())?)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_support::temp_store;

    #[test]
    fn runs_round_trip_update_and_delete() {
        let (_dir, store) = temp_store();
        store.subagent_run_put("b", "2").expect("put");
        store.subagent_run_put("a", "1").expect("put");
        let ids: Vec<String> = store
            .subagent_runs()
            .expect("list")
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(ids, ["a", "b"]);
        let written = store
            .subagent_run_update("a", |cur| cur.map(|c| format!("{c}+")))
            .expect("update");
        assert_eq!(written.as_deref(), Some("1+"));
        assert_eq!(
            store
                .subagent_run_update("zz", |cur| cur.map(str::to_string))
                .expect("absent"),
            None
        );
        assert!(store.subagent_run_delete("a").expect("delete"));
        assert_eq!(store.subagent_run("a").expect("get"), None);
        assert_eq!(store.subagent_run("b").expect("get").as_deref(), Some("2"));
    }
}
