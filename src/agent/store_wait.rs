//! A turn's writes when the store refuses them for a while (a full disk, the store at its size cap): the
//! turn waits and tries again, for a bounded time, rather than drop its message's answer. The session's
//! lane stays held meanwhile, so later messages queue (within the queue's cap) instead of failing too.
//!
//! This file only waits; the turn decides what a write that never lands means.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::store::StoreError;

/// Pause after the first refusal; each later pause doubles, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
const MAX_PAUSE: Duration = Duration::from_secs(15);
/// Longest a turn waits for its write (a disk filled by something else is usually freed within it).
pub const WAIT_BUDGET: Duration = Duration::from_secs(300);

/// Runs `attempt` until it succeeds, fails for good ([`StoreError::is_transient`] false), the turn is
/// cancelled, or `budget` has passed; each refusal is logged with `what`.
pub async fn retry<T>(
    cancel: &CancellationToken,
    budget: Duration,
    what: &str,
    mut attempt: impl FnMut() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let deadline = Instant::now() + budget;
    let mut pause = FIRST_PAUSE;
    loop {
        let error = match attempt() {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        if !error.is_transient() || cancel.is_cancelled() || Instant::now() + pause > deadline {
            return Err(error);
        }
        log::warn!("{what}: {error}; trying again in {} ms", pause.as_millis());
        tokio::select! {
            _ = cancel.cancelled() => return Err(error),
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> StoreError {
        StoreError::Full { limit_bytes: 1 }
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_write_is_tried_again_until_it_lands() {
        let mut calls = 0;
        let result = retry(&CancellationToken::new(), WAIT_BUDGET, "test", || {
            calls += 1;
            if calls < 4 {
                Err(full())
            } else {
                Ok(calls)
            }
        })
        .await;
        assert_eq!(result.expect("lands"), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_is_bounded_by_its_budget() {
        let started = Instant::now();
        let mut calls = 0;
        let result: Result<(), _> = retry(
            &CancellationToken::new(),
            Duration::from_secs(60),
            "test",
            || {
                calls += 1;
                Err(full())
            },
        )
        .await;
        assert!(matches!(result, Err(StoreError::Full { .. })));
        assert!(
            started.elapsed() <= Duration::from_secs(60),
            "{:?}",
            started.elapsed()
        );
        // 0.25 + 0.5 + 1 + 2 + 4 + 8 + 15 + 15 s of pauses fit in a minute; the next would not.
        assert_eq!(calls, 9);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lasting_failure_or_a_cancelled_turn_stops_at_once() {
        let mut calls = 0;
        let result: Result<(), _> = retry(&CancellationToken::new(), WAIT_BUDGET, "test", || {
            calls += 1;
            Err(StoreError::InvalidKey {
                db: "meta",
                reason: "empty".into(),
            })
        })
        .await;
        assert!(result.is_err());
        assert_eq!(calls, 1);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let mut calls = 0;
        let result: Result<(), _> = retry(&cancel, WAIT_BUDGET, "test", || {
            calls += 1;
            Err(full())
        })
        .await;
        assert!(result.is_err());
        assert_eq!(calls, 1);
    }
}
