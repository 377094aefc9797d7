//! Account-task plumbing the Discord gateway and Slack's Socket Mode share:
//! the state a connection task and its channel both see (status for
//! `channels.status`, whether the task runs, the bot's identity), the set
//! of running tasks a channel stops together, the reconnect backoff and a
//! cancellable pause.
//!
//! It knows no platform's protocol.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::channels::AccountStatus;
use crate::config::schema::channels::DEFAULT_ACCOUNT_ID;
use crate::system::backoff::{self, Jitter};
use crate::system::clock::now_ms;

/// First reconnect delay after a failed attempt; doubles per failure.
pub const RECONNECT_BASE_DELAY_MS: u64 = 1_000;
/// Longest reconnect delay.
pub const RECONNECT_MAX_DELAY_MS: u64 = 60_000;
/// A connection that worked at least this long reconnects without delay;
/// shorter ones count as failures (no tight loop against a server that
/// accepts and drops at once).
pub const STABLE_CONNECTION_MS: u64 = 5_000;

/// State shared between an account's connection task and the channel;
/// `I` is who the bot is on the platform (learnt once connected).
#[derive(Debug)]
pub struct AccountState<I> {
    status: Mutex<AccountStatus>,
    running: AtomicBool,
    identity: Mutex<Option<I>>,
}

impl<I: Clone> AccountState<I> {
    pub fn new(account_id: &str, enabled: bool, configured: bool) -> AccountState<I> {
        let status = AccountStatus {
            account_id: account_id.to_string(),
            enabled,
            configured,
            ..AccountStatus::default()
        };
        AccountState {
            status: Mutex::new(status),
            running: AtomicBool::new(false),
            identity: Mutex::new(None),
        }
    }

    pub fn status(&self) -> AccountStatus {
        self.status.lock().clone()
    }

    /// Changes the status and tells the gateway (`health` event).
    pub fn update(&self, change: impl FnOnce(&mut AccountStatus)) {
        change(&mut self.status.lock());
        crate::system::status::changed();
    }

    /// Connected (READY, RESUMED, hello): the last error is cleared.
    pub fn connected(&self) {
        self.update(|s| {
            s.connected = true;
            s.last_error = None;
        });
    }

    /// The connection is gone, for `reason`.
    pub fn disconnected(&self, reason: String) {
        self.update(|s| {
            s.connected = false;
            s.last_error = Some(reason);
        });
    }

    pub fn inbound_now(&self) {
        self.update(|s| s.last_inbound_at_ms = Some(now_ms()));
    }

    pub fn outbound_now(&self) {
        self.update(|s| s.last_outbound_at_ms = Some(now_ms()));
    }

    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    pub fn set_running(&self, running: bool) {
        self.running.store(running, Ordering::SeqCst);
        self.update(|s| {
            s.running = running;
            if !running {
                s.connected = false;
            }
        });
    }

    pub fn identity(&self) -> Option<I> {
        self.identity.lock().clone()
    }

    pub fn set_identity(&self, identity: I) {
        *self.identity.lock() = Some(identity);
    }
}

/// A channel's running account tasks, cancelled and awaited together.
#[derive(Debug, Default)]
pub struct AccountTasks {
    cancel: Mutex<CancellationToken>,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl AccountTasks {
    /// The token the current tasks stop on.
    pub fn token(&self) -> CancellationToken {
        self.cancel.lock().clone()
    }

    /// Adds a task; those that ended are dropped from the set (an account
    /// restarted many times keeps no trail of finished handles).
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut handles = self.handles.lock();
        handles.retain(|handle| !handle.is_finished());
        handles.push(tokio::spawn(task));
    }

    /// Cancels every task, waits for them, and readies a fresh token.
    pub async fn stop(&self) {
        let cancel = std::mem::take(&mut *self.cancel.lock());
        cancel.cancel();
        let handles = std::mem::take(&mut *self.handles.lock());
        for handle in handles {
            let _ = handle.await;
        }
    }
}

/// The reconnect delays after failures: 1 s, 2 s, 4 s … up to 60 s, each
/// with up to 20 % more as jitter.
pub const RECONNECT_BACKOFF: backoff::Backoff = backoff::Backoff::new(
    Duration::from_millis(RECONNECT_BASE_DELAY_MS),
    Duration::from_millis(RECONNECT_MAX_DELAY_MS),
)
.with_jitter(Jitter::Up(0.2));

/// Reconnect pacing over consecutive connection attempts: none after a
/// stable connection, else [`RECONNECT_BACKOFF`].
#[derive(Debug)]
pub struct Backoff {
    steps: backoff::Backoff,
    started: std::time::Instant,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            steps: RECONNECT_BACKOFF,
            started: std::time::Instant::now(),
        }
    }
}

impl Backoff {
    /// A connection attempt starts now.
    pub fn attempt(&mut self) {
        self.started = std::time::Instant::now();
    }

    /// The wait before the next attempt: none after a connection that was
    /// established and stable, else the next step of the backoff.
    pub fn next_delay_ms(&mut self, established: bool) -> u64 {
        let lasted_ms = self.started.elapsed().as_millis() as u64;
        if established && lasted_ms >= STABLE_CONNECTION_MS {
            self.steps.reset();
            return 0;
        }
        self.steps.next_delay().as_millis() as u64
    }
}

/// Waits `delay_ms`; false when `cancel` fired first.
pub async fn pause(cancel: &CancellationToken, delay_ms: u64) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => false,
        _ = tokio::time::sleep(Duration::from_millis(delay_ms)) => true,
    }
}

/// The account a channel answers for when none is named: the configured `defaultAccount` when it
/// runs, else the one called `default`, else the first by id (`default` when there is none).
pub fn default_account_id<V>(
    configured: Option<&str>,
    accounts: &std::collections::BTreeMap<String, V>,
) -> String {
    configured
        .filter(|id| accounts.contains_key(*id))
        .map(str::to_string)
        .or_else(|| {
            accounts
                .contains_key(DEFAULT_ACCOUNT_ID)
                .then(|| DEFAULT_ACCOUNT_ID.to_string())
        })
        .or_else(|| accounts.keys().next().cloned())
        .unwrap_or_else(|| DEFAULT_ACCOUNT_ID.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn finished_tasks_leave_no_handles_behind() {
        let tasks = AccountTasks::default();
        for _ in 0..100 {
            tasks.spawn(async {});
            // Let it finish before the next spawn (an account relinked again and again).
            while !tasks.handles.lock().iter().all(JoinHandle::is_finished) {
                tokio::task::yield_now().await;
            }
        }
        assert!(
            tasks.handles.lock().len() <= 1,
            "{}",
            tasks.handles.lock().len()
        );
        tasks.stop().await;
    }

    #[test]
    fn reconnect_delay_doubles_and_is_capped() {
        let ms = |delay: Duration| delay.as_millis() as u64;
        let first = ms(RECONNECT_BACKOFF.delay(0, rand::random()));
        assert!((1_000..=1_200).contains(&first), "{first}");
        let third = ms(RECONNECT_BACKOFF.delay(2, rand::random()));
        assert!((4_000..=4_800).contains(&third), "{third}");
        let many = ms(RECONNECT_BACKOFF.delay(29, rand::random()));
        assert!((60_000..=72_000).contains(&many), "{many}");
    }

    #[test]
    fn short_lived_connections_back_off_like_failures() {
        let mut backoff = Backoff::default();
        backoff.attempt();
        let first = backoff.next_delay_ms(true);
        assert!((1_000..=1_200).contains(&first), "{first}");
        backoff.attempt();
        let second = backoff.next_delay_ms(false);
        assert!((2_000..=2_400).contains(&second), "{second}");
    }

    #[test]
    fn connecting_clears_the_last_error_and_stopping_disconnects() {
        let state: AccountState<String> = AccountState::new("main", true, true);
        state.disconnected("gateway closed".into());
        assert_eq!(state.status().last_error.as_deref(), Some("gateway closed"));
        state.connected();
        assert!(state.status().connected && state.status().last_error.is_none());
        state.set_running(true);
        state.set_running(false);
        assert!(!state.status().connected && !state.is_running());
    }
}
