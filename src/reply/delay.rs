//! Human delay: a random pause between block replies so a streamed answer
//! arrives at a reading rhythm (OpenClaw `humanDelay`: off | natural | custom).
//!
//! `HumanDelay::from_config(&HumanDelayConfig)`, `.sample(&mut rng)` gives one
//! pause. The dispatcher applies it before every block except the first of a
//! run; this file only picks durations and must not sleep or know about runs.

use std::time::Duration;

use rand::Rng;

use crate::config::{HumanDelayConfig, HumanDelayMode};

/// Lower bound of the natural pause.
pub const NATURAL_DELAY_MIN_MS: u64 = 800;
/// Upper bound of the natural pause.
pub const NATURAL_DELAY_MAX_MS: u64 = 2500;

/// How long to pause between block replies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HumanDelay {
    /// No pause.
    #[default]
    Off,
    /// A uniform pause in 800–2500 ms.
    Natural,
    /// A uniform pause in `min_ms..=max_ms` (exactly `min_ms` if `max_ms ≤ min_ms`).
    Custom { min_ms: u64, max_ms: u64 },
}

impl HumanDelay {
    /// The delay a `humanDelay` config section asks for (absent mode: off).
    pub fn from_config(config: &HumanDelayConfig) -> Self {
        match config.mode.unwrap_or(HumanDelayMode::Off) {
            HumanDelayMode::Off => Self::Off,
            HumanDelayMode::Natural => Self::Natural,
            HumanDelayMode::Custom => Self::Custom {
                min_ms: config.min_ms.unwrap_or(NATURAL_DELAY_MIN_MS),
                max_ms: config.max_ms.unwrap_or(NATURAL_DELAY_MAX_MS),
            },
        }
    }

    /// The inclusive range pauses are drawn from, `None` when off.
    pub fn range_ms(self) -> Option<(u64, u64)> {
        match self {
            Self::Off => None,
            Self::Natural => Some((NATURAL_DELAY_MIN_MS, NATURAL_DELAY_MAX_MS)),
            Self::Custom { min_ms, max_ms } => Some((min_ms, max_ms.max(min_ms))),
        }
    }

    /// One pause drawn from the range (zero when off).
    pub fn sample(self, rng: &mut impl Rng) -> Duration {
        match self.range_ms() {
            None => Duration::ZERO,
            Some((min, max)) => Duration::from_millis(rng.gen_range(min..=max)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    #[test]
    fn off_never_pauses() {
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(HumanDelay::Off.sample(&mut rng), Duration::ZERO);
        assert_eq!(
            HumanDelay::from_config(&HumanDelayConfig::default()),
            HumanDelay::Off
        );
    }

    #[test]
    fn natural_stays_within_800_to_2500_ms() {
        let mut rng = StdRng::seed_from_u64(7);
        let samples: Vec<u64> = (0..500)
            .map(|_| HumanDelay::Natural.sample(&mut rng).as_millis() as u64)
            .collect();
        assert!(samples.iter().all(|ms| (800..=2500).contains(ms)));
        assert!(samples.iter().any(|ms| *ms < 1200) && samples.iter().any(|ms| *ms > 2100));
    }

    #[test]
    fn custom_uses_configured_bounds_and_collapses_inverted_ranges() {
        let config = HumanDelayConfig {
            mode: Some(HumanDelayMode::Custom),
            min_ms: Some(300),
            max_ms: Some(100),
        };
        let delay = HumanDelay::from_config(&config);
        let mut rng = StdRng::seed_from_u64(3);
        assert_eq!(delay.sample(&mut rng), Duration::from_millis(300));
        let partial = HumanDelayConfig {
            mode: Some(HumanDelayMode::Custom),
            min_ms: Some(100),
            max_ms: None,
        };
        assert_eq!(
            HumanDelay::from_config(&partial).range_ms(),
            Some((100, 2500))
        );
    }
}
