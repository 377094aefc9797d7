//! Group commit: small writes that arrive while another commit is in flight wait for it, then share one
//! transaction, and so one fsync. A turn's writes (the inbox record, the user's message, the reply with its
//! settlements, tool entries) come from several sessions at once; each used to pay a commit of its own, which
//! on an SD card is milliseconds each. Now the first writer to find no commit in flight leads: it takes every
//! write queued so far (at most `MAX_GROUP_JOBS`), runs each in its own nested transaction of one write
//! transaction, commits, and hands every writer its own outcome. Writers that queued meanwhile form the next
//! batch, led by one of them.
//!
//! Nothing is weakened: a writer's call still returns only after the transaction holding its write was
//! committed and synced, and a write that fails (a corrupt record, a bad key) is rolled back alone — its
//! nested transaction is aborted and the others commit. A full map aborts the whole batch; it is grown and the
//! batch runs again, so jobs, like every write body, must have no effects outside the transaction.
//!
//! This file only batches; `env.rs` runs the transaction (`LmdbEnv::write_batch`).

use std::sync::Arc;

use heed::RwTxn;
use parking_lot::{Condvar, Mutex};

use super::env::{Databases, LmdbEnv, TxnError};
use super::StoreError;

/// Most writes one group transaction carries: a bound on how much one commit writes and on how long the
/// writers at the back of a batch wait behind the others' work.
pub const MAX_GROUP_JOBS: usize = 64;

/// One write: runs inside its own nested transaction; may run more than once (see the file's doc).
pub(super) type Job = Box<dyn FnMut(&mut RwTxn<'_>, &Databases) -> Result<(), TxnError> + Send>;

/// A queued write with the operation name its errors carry and the slot its outcome goes to.
pub(super) struct Queued {
    pub operation: &'static str,
    pub job: Job,
    slot: Arc<Slot>,
}

#[derive(Default)]
struct Slot {
    outcome: Mutex<Option<Result<(), StoreError>>>,
}

#[derive(Default)]
struct Pending {
    jobs: Vec<Queued>,
    /// A writer is running a batch now.
    leading: bool,
}

/// Counters of what the batcher did, for tests and figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupFigures {
    /// Group transactions committed (or attempted).
    pub batches: u64,
    /// Writes they carried.
    pub jobs: u64,
    /// The most writes one transaction carried.
    pub largest: usize,
}

/// The queue of writes waiting for the next group transaction.
#[derive(Default)]
pub(super) struct GroupCommit {
    pending: Mutex<Pending>,
    settled: Condvar,
    figures: Mutex<GroupFigures>,
}

impl GroupCommit {
    /// Queues `job` and returns once the transaction holding it was committed (or it failed). The calling
    /// thread may run the batch itself, its own and other writers' jobs.
    pub fn submit(
        &self,
        env: &LmdbEnv,
        operation: &'static str,
        job: Job,
    ) -> Result<(), StoreError> {
        let slot = Arc::new(Slot::default());
        let mut pending = self.pending.lock();
        pending.jobs.push(Queued {
            operation,
            job,
            slot: Arc::clone(&slot),
        });
        loop {
            if let Some(outcome) = slot.outcome.lock().take() {
                return outcome;
            }
            if pending.leading {
                self.settled.wait(&mut pending);
                continue;
            }
            pending.leading = true;
            let take = pending.jobs.len().min(MAX_GROUP_JOBS);
            let batch: Vec<Queued> = pending.jobs.drain(..take).collect();
            drop(pending);
            self.lead(env, batch);
            pending = self.pending.lock();
        }
    }

    /// Runs one batch and settles its writers; leadership is released even if a job panics.
    fn lead(&self, env: &LmdbEnv, mut batch: Vec<Queued>) {
        struct Release<'a>(&'a GroupCommit);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.0.pending.lock().leading = false;
                self.0.settled.notify_all();
            }
        }
        let _release = Release(self);
        {
            let mut figures = self.figures.lock();
            figures.batches += 1;
            figures.jobs += batch.len() as u64;
            figures.largest = figures.largest.max(batch.len());
        }
        let outcomes = env.write_batch(&mut batch);
        for (queued, outcome) in batch.iter().zip(outcomes) {
            *queued.slot.outcome.lock() = Some(outcome);
        }
    }

    pub fn figures(&self) -> GroupFigures {
        *self.figures.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::temp_store;

    #[test]
    fn concurrent_writes_share_transactions_and_each_gets_its_own_outcome() {
        let (_dir, store) = temp_store();
        let writers = 48;
        std::thread::scope(|scope| {
            for n in 0..writers {
                let store = &store;
                scope.spawn(move || {
                    store
                        .put_meta(&format!("group/{n:03}"), format!("value {n}").as_bytes())
                        .expect("grouped write");
                });
            }
        });
        for n in 0..writers {
            assert_eq!(
                store.meta(&format!("group/{n:03}")).expect("read"),
                Some(format!("value {n}").into_bytes())
            );
        }
        let figures = store.env.group.figures();
        assert_eq!(figures.jobs, writers as u64);
        assert!(figures.batches <= writers as u64);
        assert!(figures.largest <= MAX_GROUP_JOBS);
    }

    #[test]
    fn a_failing_write_is_rolled_back_alone() {
        let (_dir, store) = temp_store();
        let (good, bad) = std::thread::scope(|scope| {
            let good = scope.spawn(|| store.put_meta("group/good", b"kept"));
            let bad = scope.spawn(|| {
                store.env.write_grouped("failing", |txn, dbs| {
                    dbs.meta.put(txn, b"group/half-done", b"never seen")?;
                    Err::<(), _>(TxnError::Store(StoreError::InvalidKey {
                        db: "meta",
                        reason: "refused by the test".into(),
                    }))
                })
            });
            (good.join().expect("good"), bad.join().expect("bad"))
        });
        good.expect("the other write commits");
        assert!(matches!(bad, Err(StoreError::InvalidKey { .. })), "{bad:?}");
        assert_eq!(
            store.meta("group/good").expect("read"),
            Some(b"kept".to_vec())
        );
        assert_eq!(
            store.meta("group/half-done").expect("read"),
            None,
            "the failed write's put is rolled back"
        );
    }

    #[test]
    fn no_batch_carries_more_than_the_limit() {
        let (_dir, store) = temp_store();
        let gate = Arc::new(std::sync::Barrier::new(MAX_GROUP_JOBS * 2 + 1));
        std::thread::scope(|scope| {
            // One long write holds the commit while the others queue behind it.
            let held = Arc::clone(&gate);
            scope.spawn(|| {
                let mut first = true;
                store
                    .env
                    .write_grouped("slow", move |txn, dbs| {
                        if std::mem::take(&mut first) {
                            held.wait();
                            std::thread::sleep(std::time::Duration::from_millis(500));
                        }
                        Ok(dbs.meta.put(txn, b"group/slow", b"1")?)
                    })
                    .expect("slow write");
            });
            for n in 0..MAX_GROUP_JOBS * 2 {
                let (store, gate) = (&store, &gate);
                scope.spawn(move || {
                    gate.wait();
                    store
                        .put_meta(&format!("group/{n:03}"), b"x")
                        .expect("write");
                });
            }
        });
        let figures = store.env.group.figures();
        assert_eq!(figures.jobs, (MAX_GROUP_JOBS * 2 + 1) as u64);
        assert_eq!(figures.largest, MAX_GROUP_JOBS, "{figures:?}");
    }
}
