//! Failover policy for one model call: which errors are retried (with
//! exponential backoff, jitter and the provider's `retry-after`), which rotate
//! to the next auth profile (key) of the same provider, which downgrade the
//! thinking level, which move on to the next model of the fallback chain, and
//! which stop the run (context overflow, a distinct kind the caller acts on).
//!
//! It decides and sleeps; it never calls a provider itself and never retries
//! once text was shown to the user (the caller checks that before asking).
//! Sleeping goes through a [`Sleeper`] so tests run the backoff without time
//! passing.

use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio_util::sync::CancellationToken;

use super::providers::models::ResolvedModel;
use super::providers::{BoxFuture, ProviderError};
use crate::system::backoff::{Backoff, Jitter};

/// Retries of one auth profile (upstream's provider retry defaults).
pub const DEFAULT_RETRY_ATTEMPTS: u32 = 3;
/// First backoff delay.
pub const DEFAULT_MIN_DELAY_MS: u64 = 500;
/// Longest single backoff delay, also the cap on a honoured `retry-after`.
pub const DEFAULT_MAX_DELAY_MS: u64 = 30_000;
/// Jitter as a fraction of the delay (0.1 = ±10 %).
pub const DEFAULT_JITTER: f64 = 0.1;

/// How hard the model should think before answering.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum ThinkingLevel {
    #[default]
    Off,
    Minimal,
    Low,
    Medium,
    High,
    XHigh,
}

impl ThinkingLevel {
    /// Parses upstream's level names; `adaptive` is treated as `medium`.
    pub fn parse(text: &str) -> Option<ThinkingLevel> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "off" => ThinkingLevel::Off,
            "minimal" => ThinkingLevel::Minimal,
            "low" => ThinkingLevel::Low,
            "medium" | "adaptive" => ThinkingLevel::Medium,
            "high" => ThinkingLevel::High,
            "xhigh" => ThinkingLevel::XHigh,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ThinkingLevel::Off => "off",
            ThinkingLevel::Minimal => "minimal",
            ThinkingLevel::Low => "low",
            ThinkingLevel::Medium => "medium",
            ThinkingLevel::High => "high",
            ThinkingLevel::XHigh => "xhigh",
        }
    }

    /// The next lower level, `None` once off.
    pub fn lower(self) -> Option<ThinkingLevel> {
        match self {
            ThinkingLevel::Off => None,
            ThinkingLevel::Minimal => Some(ThinkingLevel::Off),
            ThinkingLevel::Low => Some(ThinkingLevel::Minimal),
            ThinkingLevel::Medium => Some(ThinkingLevel::Low),
            ThinkingLevel::High => Some(ThinkingLevel::Medium),
            ThinkingLevel::XHigh => Some(ThinkingLevel::High),
        }
    }
}

/// What kind of failure a provider error is, for failover decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailoverReason {
    /// 401/403: this key is bad; try the provider's next key.
    Auth,
    /// 402 or a quota message: this key has no credit left.
    Billing,
    /// 429: back off, then rotate keys.
    RateLimit,
    /// 5xx / 529: the provider is struggling; back off and retry.
    Overloaded,
    /// The connection failed or went silent.
    Timeout,
    /// The prompt does not fit the model's context window.
    ContextOverflow,
    /// The model refused the requested thinking/reasoning setting.
    ThinkingRejected,
    /// The request was refused as malformed (400 and others).
    Format,
    Cancelled,
}

const CONTEXT_OVERFLOW_MARKERS: [&str; 8] = [
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "prompt is too long",
    "too many tokens",
    "input is too long",
    "exceeds the context",
];
const BILLING_MARKERS: [&str; 4] = [
    "insufficient_quota",
    "credit balance",
    "billing",
    "payment required",
];

/// Classifies a provider error (status first, then the message text).
pub fn classify(error: &ProviderError) -> FailoverReason {
    let (status, message) = match error {
        ProviderError::Cancelled => return FailoverReason::Cancelled,
        ProviderError::Network(_) => return FailoverReason::Timeout,
        ProviderError::Protocol(message) => (0, message.to_ascii_lowercase()),
        ProviderError::Http {
            status, message, ..
        } => (*status, message.to_ascii_lowercase()),
    };
    let mentions = |markers: &[&str]| markers.iter().any(|m| message.contains(m));
    if status == 413 || mentions(&CONTEXT_OVERFLOW_MARKERS) {
        return FailoverReason::ContextOverflow;
    }
    if mentions(&BILLING_MARKERS) || status == 402 {
        return FailoverReason::Billing;
    }
    match status {
        401 | 403 => FailoverReason::Auth,
        429 => FailoverReason::RateLimit,
        408 => FailoverReason::Timeout,
        500..=599 => FailoverReason::Overloaded,
        400 | 422 if message.contains("thinking") || message.contains("reasoning") => {
            FailoverReason::ThinkingRejected
        }
        _ => FailoverReason::Format,
    }
}

/// Exponential backoff with jitter, as upstream's retry runner does it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Calls per auth profile for transient errors (1 = no retry).
    pub attempts: u32,
    pub backoff: Backoff,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: DEFAULT_RETRY_ATTEMPTS,
            backoff: Backoff::new(
                Duration::from_millis(DEFAULT_MIN_DELAY_MS),
                Duration::from_millis(DEFAULT_MAX_DELAY_MS),
            )
            .with_jitter(Jitter::Around(DEFAULT_JITTER)),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1-based). `unit` is a random
    /// number in `[0, 1)` for the jitter. A `retry-after` is honoured as a
    /// lower bound (jitter only adds to it), capped at the backoff's maximum.
    pub fn delay(&self, retry: u32, retry_after_ms: Option<u64>, unit: f64) -> Duration {
        match retry_after_ms {
            Some(after) => self.backoff.stretch(Duration::from_millis(after), unit),
            None => self.backoff.delay(retry.saturating_sub(1), unit),
        }
    }
}

/// Waits for a backoff delay; injected so tests need not sleep for real.
pub trait Sleeper: Send + Sync {
    fn sleep(&self, delay: Duration) -> BoxFuture<'_, ()>;
}

/// The production sleeper: tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, delay: Duration) -> BoxFuture<'_, ()> {
        Box::pin(tokio::time::sleep(delay))
    }
}

/// How a backoff pause ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseEnd {
    Elapsed,
    Cancelled,
    DeadlinePassed,
}

/// Sleeps `delay` unless the run is cancelled or its deadline comes first.
pub async fn pause(
    sleeper: &dyn Sleeper,
    delay: Duration,
    cancel: &CancellationToken,
    deadline: tokio::time::Instant,
) -> PauseEnd {
    if tokio::time::Instant::now() + delay > deadline {
        return PauseEnd::DeadlinePassed;
    }
    tokio::select! {
        _ = cancel.cancelled() => PauseEnd::Cancelled,
        _ = sleeper.sleep(delay) => PauseEnd::Elapsed,
    }
}

/// What to do after a failed call.
#[derive(Debug, Clone, PartialEq)]
pub enum FailoverStep {
    /// Call the same model with the same key again after this wait.
    Retry(Duration),
    /// Call again with the provider's next auth profile.
    NextProfile,
    /// Call again at this lower thinking level.
    Downgrade(ThinkingLevel),
    /// Give up on this model; try the next in the chain.
    NextModel,
    /// The prompt is too big for this model: stop and let the caller compact.
    ContextOverflow,
}

/// The failover state of one model in the chain during one step.
pub struct ModelAttempt {
    model: ResolvedModel,
    profile: usize,
    thinking: ThinkingLevel,
    retries: u32,
}

impl ModelAttempt {
    pub fn new(model: &ResolvedModel) -> Self {
        ModelAttempt {
            model: model.clone(),
            profile: 0,
            thinking: model.thinking,
            retries: 0,
        }
    }

    /// The model to call now: its current auth profile at the current level.
    pub fn current(&self) -> ResolvedModel {
        self.model.with_profile(self.profile, self.thinking)
    }

    /// The id of the auth profile in use (for logs).
    pub fn profile_id(&self) -> &str {
        self.model
            .auth_profiles
            .get(self.profile)
            .map(|p| p.id.as_str())
            .unwrap_or("default")
    }

    /// Decides the next step after `error`, advancing the state to match.
    pub fn after_error(&mut self, error: &ProviderError) -> FailoverStep {
        let reason = classify(error);
        match reason {
            FailoverReason::ContextOverflow => FailoverStep::ContextOverflow,
            FailoverReason::Cancelled | FailoverReason::Format => FailoverStep::NextModel,
            FailoverReason::ThinkingRejected => self.downgrade(error),
            FailoverReason::Auth | FailoverReason::Billing => self.rotate(),
            transient => {
                let policy = self.model.policy.retry;
                if self.retries + 1 < policy.attempts {
                    self.retries += 1;
                    let retry_after = match error {
                        ProviderError::Http { retry_after_ms, .. } => *retry_after_ms,
                        _ => None,
                    };
                    let unit = rand::thread_rng().gen::<f64>();
                    FailoverStep::Retry(policy.delay(self.retries, retry_after, unit))
                } else if transient == FailoverReason::RateLimit {
                    self.rotate()
                } else {
                    FailoverStep::NextModel
                }
            }
        }
    }

    fn rotate(&mut self) -> FailoverStep {
        if self.profile + 1 < self.model.auth_profiles.len() {
            self.profile += 1;
            self.retries = 0;
            FailoverStep::NextProfile
        } else {
            FailoverStep::NextModel
        }
    }

    fn downgrade(&mut self, error: &ProviderError) -> FailoverStep {
        let unsupported = error
            .to_string()
            .to_ascii_lowercase()
            .contains("not support");
        let lower = if unsupported {
            Some(ThinkingLevel::Off).filter(|_| self.thinking != ThinkingLevel::Off)
        } else {
            self.thinking.lower()
        };
        match lower {
            Some(level) => {
                self.thinking = level;
                FailoverStep::Downgrade(level)
            }
            None => FailoverStep::NextModel,
        }
    }
}

/// A sleeper shared by every model of a chain.
pub type SharedSleeper = Arc<dyn Sleeper>;

/// The retry policy of a model and the sleeper its backoff uses.
#[derive(Clone)]
pub struct FailoverPolicy {
    pub retry: RetryPolicy,
    pub sleeper: SharedSleeper,
}

impl Default for FailoverPolicy {
    fn default() -> Self {
        FailoverPolicy {
            retry: RetryPolicy::default(),
            sleeper: Arc::new(TokioSleeper),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, message: &str) -> ProviderError {
        ProviderError::Http {
            status,
            message: message.to_string(),
            retry_after_ms: None,
        }
    }

    #[test]
    fn statuses_and_messages_classify_as_upstream_does() {
        assert_eq!(classify(&http(401, "bad key")), FailoverReason::Auth);
        assert_eq!(classify(&http(403, "forbidden")), FailoverReason::Auth);
        assert_eq!(classify(&http(429, "slow down")), FailoverReason::RateLimit);
        assert_eq!(
            classify(&http(529, "overloaded")),
            FailoverReason::Overloaded
        );
        assert_eq!(
            classify(&http(
                400,
                "prompt is too long: 210000 tokens > 200000 maximum"
            )),
            FailoverReason::ContextOverflow
        );
        assert_eq!(
            classify(&http(
                400,
                "This model's maximum context length is 8192 tokens"
            )),
            FailoverReason::ContextOverflow
        );
        assert_eq!(
            classify(&http(400, "thinking is not supported by this model")),
            FailoverReason::ThinkingRejected
        );
        assert_eq!(
            classify(&http(400, "Your credit balance is too low")),
            FailoverReason::Billing
        );
        assert_eq!(classify(&http(400, "bad field")), FailoverReason::Format);
        assert_eq!(
            classify(&ProviderError::Network("reset".into())),
            FailoverReason::Timeout
        );
    }

    #[test]
    fn retry_n_waits_step_n_minus_one_with_upstreams_numbers() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.delay(1, None, 0.5), Duration::from_millis(500));
        assert_eq!(policy.delay(2, None, 0.0), Duration::from_millis(900));
        assert_eq!(policy.delay(2, None, 1.0), Duration::from_millis(1100));
        assert_eq!(policy.delay(12, None, 0.5), Duration::from_millis(30_000));
    }

    #[test]
    fn retry_after_is_a_lower_bound_capped_at_the_maximum() {
        let policy = RetryPolicy::default();
        for unit in [0.0, 0.5, 0.99] {
            let delay = policy.delay(1, Some(7_000), unit);
            assert!(delay >= Duration::from_millis(7_000), "{delay:?}");
            assert!(delay <= Duration::from_millis(7_700), "{delay:?}");
        }
        assert_eq!(
            policy.delay(1, Some(120_000), 0.5),
            Duration::from_millis(30_000)
        );
    }

    #[test]
    fn thinking_levels_parse_and_step_down_to_off() {
        assert_eq!(ThinkingLevel::parse("XHigh"), Some(ThinkingLevel::XHigh));
        assert_eq!(
            ThinkingLevel::parse("adaptive"),
            Some(ThinkingLevel::Medium)
        );
        assert_eq!(ThinkingLevel::parse("max"), None);
        let mut level = ThinkingLevel::XHigh;
        let mut steps = 0;
        while let Some(lower) = level.lower() {
            level = lower;
            steps += 1;
        }
        assert_eq!((level, steps), (ThinkingLevel::Off, 5));
    }
}
