//! A job's schedule — `at` (one shot at an ISO time), `every` (fixed interval from an anchor) or `cron`
//! (expression in an IANA zone, optional stagger) — and the next-run computation for each.
//!
//! Shapes follow OpenClaw's `CronSchedule` (`kind` tag, camelCase fields). Pure computation: no clock reads,
//! no storage.

use jiff::tz::TimeZone;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::expr::{CronExpr, ExprError};

/// Shortest interval an `every` schedule accepts: 1 s.
pub const MIN_EVERY_MS: u64 = 1_000;

/// When a job runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Schedule {
    /// Once, at an ISO-8601 time (`2026-01-01T09:00:00Z`; no offset means UTC).
    At { at: String },
    /// Every `everyMs`, counted from `anchorMs` (the job's creation time when absent).
    #[serde(rename_all = "camelCase")]
    Every {
        every_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        anchor_ms: Option<u64>,
    },
    /// A 5- or 6-field cron expression in `tz` (UTC when absent), delayed by a fixed per-job offset below
    /// `staggerMs`.
    #[serde(rename_all = "camelCase")]
    Cron {
        expr: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tz: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stagger_ms: Option<u64>,
    },
}

/// Why a schedule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("schedule.at {0:?} is not an ISO-8601 time")]
    BadAt(String),
    #[error("schedule.everyMs must be at least {MIN_EVERY_MS}")]
    EveryTooShort,
    #[error("schedule.tz {0:?} is not a known IANA time zone")]
    UnknownZone(String),
    #[error("schedule.expr: {0}")]
    Expr(#[from] ExprError),
}

impl Schedule {
    /// Checks the schedule can be computed (time parses, zone exists, expression is valid).
    pub fn validate(&self) -> Result<(), ScheduleError> {
        match self {
            Schedule::At { at } => parse_at(at).map(|_| ()),
            Schedule::Every { every_ms, .. } if *every_ms < MIN_EVERY_MS => {
                Err(ScheduleError::EveryTooShort)
            }
            Schedule::Every { .. } => Ok(()),
            Schedule::Cron { expr, tz, .. } => {
                CronExpr::parse(expr)?;
                zone(tz.as_deref()).map(|_| ())
            }
        }
    }

    /// Whether the job runs once only.
    pub fn is_one_shot(&self) -> bool {
        matches!(self, Schedule::At { .. })
    }

    /// The next run strictly after `after_ms`; `created_at_ms` anchors `every`, `job_id` picks the stagger
    /// offset. `None` when the schedule never fires again (an `at` time in the past, an impossible date).
    pub fn next_after(&self, after_ms: u64, created_at_ms: u64, job_id: &str) -> Option<u64> {
        match self {
            Schedule::At { at } => parse_at(at).ok().filter(|t| *t > after_ms),
            Schedule::Every {
                every_ms,
                anchor_ms,
            } => {
                let every = (*every_ms).max(MIN_EVERY_MS);
                let anchor = anchor_ms.unwrap_or(created_at_ms);
                if after_ms < anchor {
                    return Some(anchor);
                }
                let periods = (after_ms - anchor) / every + 1;
                Some(anchor + periods * every)
            }
            Schedule::Cron {
                expr,
                tz,
                stagger_ms,
            } => {
                let expr = CronExpr::parse(expr).ok()?;
                let zone = zone(tz.as_deref()).ok()?;
                let offset = stagger_offset_ms(job_id, stagger_ms.unwrap_or(0));
                // Staggered runs are the unstaggered slot plus the offset; search from the unstaggered time.
                let base_after = after_ms.saturating_sub(offset);
                let next = expr.next_after(&zone, i64::try_from(base_after).ok()?)?;
                u64::try_from(next).ok().map(|n| n + offset)
            }
        }
    }
}

/// Parses an `at` time to ms since the epoch; an offset-less time is UTC.
pub fn parse_at(text: &str) -> Result<u64, ScheduleError> {
    let bad = || ScheduleError::BadAt(text.to_string());
    let timestamp = match text.parse::<Timestamp>() {
        Ok(t) => t,
        Err(_) => text
            .parse::<jiff::civil::DateTime>()
            .ok()
            .and_then(|civil| civil.to_zoned(TimeZone::UTC).ok())
            .map(|zoned| zoned.timestamp())
            .ok_or_else(bad)?,
    };
    u64::try_from(timestamp.as_millisecond()).map_err(|_| bad())
}

fn zone(name: Option<&str>) -> Result<TimeZone, ScheduleError> {
    match name.map(str::trim).filter(|n| !n.is_empty()) {
        None => Ok(TimeZone::UTC),
        Some(name) => TimeZone::get(name).map_err(|_| ScheduleError::UnknownZone(name.to_string())),
    }
}

/// A fixed offset in `[0, stagger_ms)` derived from the job id (FNV-1a), so a job keeps its slot across
/// restarts while jobs sharing an expression spread out.
fn stagger_offset_ms(job_id: &str, stagger_ms: u64) -> u64 {
    if stagger_ms == 0 {
        return 0;
    }
    let hash = job_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    hash % stagger_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_fires_once_and_accepts_times_without_offset() {
        let at = Schedule::At {
            at: "2025-01-01T09:00:00Z".into(),
        };
        let t = parse_at("2025-01-01T09:00:00Z").expect("parse");
        assert_eq!(at.next_after(t - 1, 0, "j"), Some(t));
        assert_eq!(at.next_after(t, 0, "j"), None);
        assert_eq!(parse_at("2025-01-01T09:00:00").expect("no offset"), t);
        assert!(Schedule::At {
            at: "tomorrow".into()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn every_counts_whole_periods_from_the_anchor() {
        let every = Schedule::Every {
            every_ms: 60_000,
            anchor_ms: Some(1_000),
        };
        assert_eq!(every.next_after(0, 0, "j"), Some(1_000));
        assert_eq!(every.next_after(1_000, 0, "j"), Some(61_000));
        // Far past the anchor: the next slot, not one per missed period.
        assert_eq!(every.next_after(10_000_000, 0, "j"), Some(10_021_000));
        let unanchored = Schedule::Every {
            every_ms: 5_000,
            anchor_ms: None,
        };
        assert_eq!(unanchored.next_after(7_000, 2_000, "j"), Some(12_000));
        assert_eq!(
            Schedule::Every {
                every_ms: 10,
                anchor_ms: None
            }
            .validate(),
            Err(ScheduleError::EveryTooShort)
        );
    }

    #[test]
    fn cron_uses_the_zone_and_a_stable_stagger() {
        let berlin = Schedule::Cron {
            expr: "0 9 * * *".into(),
            tz: Some("Europe/Berlin".into()),
            stagger_ms: None,
        };
        let after = parse_at("2025-07-01T00:00:00Z").expect("t");
        assert_eq!(
            berlin.next_after(after, 0, "j"),
            Some(parse_at("2025-07-01T07:00:00Z").expect("t"))
        );
        let staggered = Schedule::Cron {
            expr: "0 9 * * *".into(),
            tz: Some("Europe/Berlin".into()),
            stagger_ms: Some(60_000),
        };
        let first = staggered.next_after(after, 0, "job-a").expect("next");
        let slot = parse_at("2025-07-01T07:00:00Z").expect("t");
        assert!((slot..slot + 60_000).contains(&first));
        // From the staggered run itself the next one is a day later, same offset.
        assert_eq!(
            staggered.next_after(first, 0, "job-a"),
            Some(first + 86_400_000)
        );
        assert!(Schedule::Cron {
            expr: "0 9 * * *".into(),
            tz: Some("Mars/Base".into()),
            stagger_ms: None
        }
        .validate()
        .is_err());
    }

    #[test]
    fn schedule_json_matches_openclaw_shapes() {
        let s: Schedule = serde_json::from_str(r#"{"kind":"every","everyMs":60000,"anchorMs":5}"#)
            .expect("every");
        assert_eq!(
            s,
            Schedule::Every {
                every_ms: 60_000,
                anchor_ms: Some(5)
            }
        );
        let s: Schedule = serde_json::from_str(
            r#"{"kind":"cron","expr":"0 * * * *","tz":"UTC","staggerMs":1000}"#,
        )
        .expect("cron");
        assert!(matches!(
            s,
            Schedule::Cron {
                stagger_ms: Some(1000),
                ..
            }
        ));
    }
}
