//! Exponential backoff, the one retry pacing every reconnect loop and retry
//! policy uses: a first delay, multiplied by a factor per step up to a cap,
//! with optional jitter. Callers that count their own attempts ask
//! [`Backoff::delay`] for a step; loops let it count failures
//! ([`Backoff::next_delay`], [`Backoff::reset`]).
//!
//! It only computes delays: it never sleeps and knows no caller's numbers
//! (each caller keeps its own). Fixed schedules (cron's error table) are not
//! backoffs and stay with their owners.

use std::time::Duration;

/// Steps past this one no longer grow the delay (only the cap applies);
/// keeps the arithmetic from overflowing.
const MAX_EXPONENT: u32 = 20;

/// How a delay may stray from its step, drawn anew for each delay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Jitter {
    /// Exactly the step.
    None,
    /// Up to this fraction more than the capped step (so a storm of
    /// reconnects spreads out even at the cap, which it may exceed).
    Up(f64),
    /// Within ± this fraction of the step (0..1), then held within
    /// `initial..=max`.
    Around(f64),
}

/// Exponential backoff with a cap and optional jitter; `failures` counts the
/// steps taken by [`Backoff::next_delay`] since the last [`Backoff::reset`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    factor: u32,
    jitter: Jitter,
    failures: u32,
}

impl Backoff {
    /// Starts at `initial`, doubles per step, never more than `max` (nor less
    /// than `initial` when `max` is smaller); no jitter.
    pub const fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            factor: 2,
            jitter: Jitter::None,
            failures: 0,
        }
    }

    /// Multiplies by `factor` per step instead of 2.
    pub const fn with_factor(self, factor: u32) -> Backoff {
        Backoff { factor, ..self }
    }

    pub const fn with_jitter(self, jitter: Jitter) -> Backoff {
        Backoff { jitter, ..self }
    }

    /// The first delay.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The cap on a step (at least the first delay).
    pub fn max(&self) -> Duration {
        self.max.max(self.initial)
    }

    /// The delay of step `step` (0 is the first delay); `unit`, a number in
    /// `[0, 1]`, places it within the jitter.
    pub fn delay(&self, step: u32, unit: f64) -> Duration {
        let initial_ms = millis(self.initial);
        let max_ms = millis(self.max());
        let growth = u64::from(self.factor).saturating_pow(step.min(MAX_EXPONENT));
        let step_ms = initial_ms.saturating_mul(growth);
        let unit = unit.clamp(0.0, 1.0);
        let ms = match self.jitter {
            Jitter::None => step_ms.min(max_ms),
            Jitter::Up(fraction) => {
                let capped = step_ms.min(max_ms);
                capped.saturating_add((capped as f64 * fraction.max(0.0) * unit) as u64)
            }
            Jitter::Around(fraction) => {
                let spread = fraction.clamp(0.0, 1.0) * (2.0 * unit - 1.0);
                (step_ms as f64 * (1.0 + spread))
                    .clamp(initial_ms as f64, max_ms as f64)
                    .round() as u64
            }
        };
        Duration::from_millis(ms)
    }

    /// `wait` (a server's `retry-after`) made longer by up to the jitter's
    /// fraction (never shorter), capped at [`Backoff::max`].
    pub fn stretch(&self, wait: Duration, unit: f64) -> Duration {
        let unit = unit.clamp(0.0, 1.0);
        let fraction = match self.jitter {
            Jitter::None => 0.0,
            Jitter::Up(fraction) => fraction.max(0.0) * unit,
            Jitter::Around(fraction) => (fraction.clamp(0.0, 1.0) * (2.0 * unit - 1.0)).abs(),
        };
        let ms = (millis(wait) as f64 * (1.0 + fraction)).min(millis(self.max()) as f64);
        Duration::from_millis(ms.round() as u64)
    }

    /// The delay after one more failure, with fresh jitter.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.delay(self.failures, rand::random::<f64>());
        self.failures = self.failures.saturating_add(1);
        delay
    }

    /// Back to the first delay (after a success).
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// Failures counted since the last reset.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut backoff = Backoff::new(ms(1_000), ms(30_000));
        let delays: Vec<u64> = (0..7)
            .map(|_| backoff.next_delay().as_millis() as u64)
            .collect();
        assert_eq!(delays, [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000]);
        assert_eq!(backoff.failures(), 7);
        backoff.reset();
        assert_eq!(backoff.next_delay(), ms(1_000));
    }

    #[test]
    fn a_factor_other_than_two_and_steps_past_the_exponent_limit() {
        let backoff = Backoff::new(ms(100), ms(10_000)).with_factor(3);
        assert_eq!(backoff.delay(2, 0.5), ms(900));
        assert_eq!(backoff.delay(u32::MAX, 0.5), ms(10_000));
    }

    #[test]
    fn upward_jitter_adds_up_to_its_fraction_even_at_the_cap() {
        let backoff = Backoff::new(ms(1_000), ms(60_000)).with_jitter(Jitter::Up(0.2));
        assert_eq!(backoff.delay(0, 0.0), ms(1_000));
        assert_eq!(backoff.delay(0, 1.0), ms(1_200));
        assert_eq!(backoff.delay(2, 0.5), ms(4_400));
        assert_eq!(backoff.delay(29, 1.0), ms(72_000));
        for _ in 0..20 {
            let drawn = Backoff::new(ms(1_000), ms(60_000))
                .with_jitter(Jitter::Up(0.2))
                .next_delay();
            assert!((ms(1_000)..=ms(1_200)).contains(&drawn), "{drawn:?}");
        }
    }

    #[test]
    fn jitter_around_the_step_stays_within_its_fraction_and_the_bounds() {
        let backoff = Backoff::new(ms(500), ms(30_000)).with_jitter(Jitter::Around(0.1));
        assert_eq!(backoff.delay(1, 0.0), ms(900));
        assert_eq!(backoff.delay(1, 1.0), ms(1_100));
        // Below the first delay and above the cap are held at the bounds.
        assert_eq!(backoff.delay(0, 0.0), ms(500));
        assert_eq!(backoff.delay(11, 1.0), ms(30_000));
        let unjittered = backoff.with_jitter(Jitter::None);
        assert_eq!(unjittered.delay(2, 0.0), ms(2_000));
        assert_eq!(unjittered.delay(12, 0.0), ms(30_000));
    }

    #[test]
    fn a_cap_below_the_first_delay_is_the_first_delay() {
        let backoff = Backoff::new(ms(500), ms(100)).with_jitter(Jitter::Around(0.1));
        assert_eq!(backoff.max(), ms(500));
        assert_eq!(backoff.delay(3, 1.0), ms(500));
    }

    #[test]
    fn a_stretched_wait_is_never_shorter_and_is_capped() {
        let backoff = Backoff::new(ms(500), ms(30_000)).with_jitter(Jitter::Around(0.1));
        for unit in [0.0, 0.5, 0.99] {
            let delay = backoff.stretch(ms(7_000), unit);
            assert!((ms(7_000)..=ms(7_700)).contains(&delay), "{delay:?}");
        }
        assert_eq!(backoff.stretch(ms(120_000), 0.5), ms(30_000));
        assert_eq!(
            Backoff::new(ms(1), ms(10)).stretch(ms(5), 1.0),
            ms(5),
            "no jitter, no stretch"
        );
    }
}
