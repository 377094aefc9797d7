//! When a session goes stale on its own, after OpenClaw's session reset policy: `session.reset` (mode
//! `daily` at `atHour` local time, or `idle` after `idleMinutes`; `none` never), per-type overrides
//! (`resetByType`: direct — legacy alias `dm` —, group, thread), per-channel overrides (`resetByChannel`,
//! which win outright) and the legacy top-level `session.idleMinutes`.
//!
//! Pure computation over the config, a timestamp and a time zone: this file must not read the store or
//! the clock (`SessionOps::roll_over_if_stale` does, and resets what this file calls stale).

use jiff::tz::TimeZone;
use jiff::Timestamp;

use crate::config::schema::session::{SessionConfig, SessionResetConfig, SessionResetMode};

/// Local hour of the daily reset when none is configured.
pub const DEFAULT_RESET_AT_HOUR: u8 = 4;
/// Idle window of `mode: "idle"` without `idleMinutes` (upstream's `DEFAULT_IDLE_MINUTES`).
pub const DEFAULT_IDLE_MINUTES: u32 = 60;
const MINUTE_MS: u64 = 60_000;

/// The kind of conversation a session holds, as `resetByType` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetKind {
    Direct,
    Group,
    Thread,
}

impl ResetKind {
    /// A thread (`:thread:`/`:topic:` in the key), else a group (`:group:`/`:channel:` in the key, or
    /// a group message), else a direct chat.
    pub fn of(session_key: &str, is_group: bool) -> ResetKind {
        let key = session_key.to_lowercase();
        if key.contains(":thread:") || key.contains(":topic:") {
            ResetKind::Thread
        } else if is_group || key.contains(":group:") || key.contains(":channel:") {
            ResetKind::Group
        } else {
            ResetKind::Direct
        }
    }
}

/// When sessions of one kind reset on their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResetPolicy {
    pub mode: SessionResetMode,
    /// Local hour (0–23) of the daily boundary (`daily` mode only).
    pub at_hour: u8,
    /// Idle window in minutes; applies in `daily` mode too, whichever expires first.
    pub idle_minutes: Option<u32>,
}

impl ResetPolicy {
    /// No automatic reset (upstream's default: `/new` and `/reset` only).
    pub const NEVER: ResetPolicy = ResetPolicy {
        mode: SessionResetMode::None,
        at_hour: DEFAULT_RESET_AT_HOUR,
        idle_minutes: None,
    };

    /// The policy for a session of `kind` on `channel`: `resetByChannel.<channel>` wins outright, else
    /// `resetByType.<kind>` over `reset`, else the legacy `idleMinutes` (idle mode), else never.
    pub fn resolve(session: &SessionConfig, kind: ResetKind, channel: Option<&str>) -> ResetPolicy {
        let by_channel = channel
            .map(|c| c.trim().to_lowercase())
            .filter(|c| !c.is_empty())
            .and_then(|c| {
                session
                    .reset_by_channel
                    .iter()
                    .find(|(name, _)| name.to_lowercase() == c)
                    .map(|(_, reset)| reset)
            });
        let base = by_channel.or(session.reset.as_ref());
        let by_type = match by_channel {
            Some(_) => None,
            None => session.reset_by_type.as_ref().and_then(|types| match kind {
                ResetKind::Direct => types.direct.as_ref().or(types.dm.as_ref()),
                ResetKind::Group => types.group.as_ref(),
                ResetKind::Thread => types.thread.as_ref(),
            }),
        };
        let legacy_idle = match by_channel {
            Some(_) => None,
            None => session.idle_minutes,
        };
        let explicit = base.is_some() || session.reset_by_type.is_some();
        let mode = mode_of(by_type, base)
            .or_else(|| (!explicit && legacy_idle.is_some()).then_some(SessionResetMode::Idle))
            .unwrap_or(SessionResetMode::None);
        if mode == SessionResetMode::None {
            return ResetPolicy::NEVER;
        }
        let at_hour = by_type
            .and_then(|r| r.at_hour)
            .or(base.and_then(|r| r.at_hour))
            .unwrap_or(DEFAULT_RESET_AT_HOUR)
            .min(23);
        let idle_minutes = by_type
            .and_then(|r| r.idle_minutes)
            .or(base.and_then(|r| r.idle_minutes))
            .or(legacy_idle)
            .map(|minutes| minutes.max(1))
            .or((mode == SessionResetMode::Idle).then_some(DEFAULT_IDLE_MINUTES));
        ResetPolicy {
            mode,
            at_hour,
            idle_minutes,
        }
    }
}

/// The mode a type override and the base policy give: the type's own mode, else the base's unless it is
/// `none`, else `daily` for a configured override without a mode.
fn mode_of(
    by_type: Option<&SessionResetConfig>,
    base: Option<&SessionResetConfig>,
) -> Option<SessionResetMode> {
    let base_mode = base.and_then(|b| b.mode);
    if let Some(by_type) = by_type {
        return Some(
            by_type
                .mode
                .or(base_mode.filter(|m| *m != SessionResetMode::None))
                .unwrap_or(SessionResetMode::Daily),
        );
    }
    base.map(|b| b.mode.unwrap_or(SessionResetMode::Daily))
}

/// Whether a session is still fresh, and if not, which limit it passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    Fresh,
    /// Last updated before the daily boundary at `boundary_ms`.
    PastDailyReset {
        boundary_ms: u64,
    },
    /// Idle since `expired_at_ms`.
    Idle {
        expired_at_ms: u64,
    },
}

impl Freshness {
    pub fn is_stale(self) -> bool {
        self != Freshness::Fresh
    }
}

/// The most recent daily boundary at or before `now_ms`: `at_hour`:00 local time in `tz` today, or
/// yesterday when that is still ahead. An hour a DST change skips resolves to the same offset after the
/// jump (02:00 → 03:00), a repeated hour to its first occurrence.
pub fn daily_boundary_ms(now_ms: u64, at_hour: u8, tz: &TimeZone) -> u64 {
    let now = Timestamp::from_millisecond(i64::try_from(now_ms).unwrap_or(i64::MAX))
        .unwrap_or(Timestamp::MAX);
    let today = now.to_zoned(tz.clone()).date();
    let at = |date: jiff::civil::Date| {
        date.at(i8::try_from(at_hour.min(23)).unwrap_or(0), 0, 0, 0)
            .to_zoned(tz.clone())
            .map(|z| z.timestamp().as_millisecond())
            .ok()
    };
    let boundary = match at(today) {
        Some(ms) if ms <= now.as_millisecond() => Some(ms),
        _ => today.yesterday().ok().and_then(at),
    };
    boundary.map_or(0, |ms| u64::try_from(ms).unwrap_or(0))
}

/// When a session started and when a user last wrote in it, as upstream judges staleness by them: the
/// daily boundary against the start (a session started before today's boundary is stale), the idle
/// window against the last interaction. Heartbeats and other writes that are no interaction touch
/// neither, so they never keep a session fresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionTimes {
    pub started_at_ms: u64,
    pub last_interaction_at_ms: u64,
}

impl SessionTimes {
    /// The times of a stored entry: its creation (else its last update, for an entry without one) and
    /// its last interaction (else its start, as upstream).
    pub fn of(entry: &crate::store::SessionEntry) -> SessionTimes {
        let started_at_ms = match entry.created_at_ms {
            0 => entry.updated_at_ms,
            created => created,
        };
        SessionTimes {
            started_at_ms,
            last_interaction_at_ms: entry.last_interaction_at_ms.unwrap_or(started_at_ms),
        }
    }
}

/// Evaluates a session with these `times` under `policy`, at `now_ms` in `tz`. When both the daily
/// boundary and the idle window have passed, the one that expired first is reported.
pub fn evaluate(
    policy: &ResetPolicy,
    times: SessionTimes,
    now_ms: u64,
    tz: &TimeZone,
) -> Freshness {
    let daily = match policy.mode {
        SessionResetMode::None => return Freshness::Fresh,
        SessionResetMode::Daily => {
            let boundary_ms = daily_boundary_ms(now_ms, policy.at_hour, tz);
            (times.started_at_ms < boundary_ms).then_some(boundary_ms)
        }
        SessionResetMode::Idle => None,
    };
    let idle = policy
        .idle_minutes
        .map(|minutes| {
            times
                .last_interaction_at_ms
                .saturating_add(u64::from(minutes) * MINUTE_MS)
        })
        .filter(|expires_at| now_ms > *expires_at);
    match (daily, idle) {
        (Some(boundary_ms), Some(expired_at_ms)) if expired_at_ms < boundary_ms => {
            Freshness::Idle { expired_at_ms }
        }
        (Some(boundary_ms), _) => Freshness::PastDailyReset { boundary_ms },
        (None, Some(expired_at_ms)) => Freshness::Idle { expired_at_ms },
        (None, None) => Freshness::Fresh,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::civil::date;

    const HOUR_MS: u64 = 3_600_000;

    fn at(tz: &TimeZone, y: i16, mo: i8, d: i8, h: i8, mi: i8) -> u64 {
        let ms = date(y, mo, d)
            .at(h, mi, 0, 0)
            .to_zoned(tz.clone())
            .expect("valid local time")
            .timestamp()
            .as_millisecond();
        u64::try_from(ms).expect("after 1970")
    }

    fn session(json: &str) -> SessionConfig {
        serde_json::from_str(json).expect("session config")
    }

    /// A session started and last written to at `at_ms` (the two times apart are tested below).
    fn evaluate(policy: &ResetPolicy, at_ms: u64, now_ms: u64, tz: &TimeZone) -> Freshness {
        super::evaluate(
            policy,
            SessionTimes {
                started_at_ms: at_ms,
                last_interaction_at_ms: at_ms,
            },
            now_ms,
            tz,
        )
    }

    /// The daily boundary counts from the session's start and the idle window from the last
    /// interaction: a session a heartbeat (no interaction) wrote to after the boundary, or that was
    /// updated recently without a user's message, is still stale.
    #[test]
    fn daily_counts_from_the_start_and_idle_from_the_last_interaction() {
        let tz = TimeZone::UTC;
        let now = at(&tz, 2026, 2, 6, 9, 0);
        let yesterday = at(&tz, 2026, 2, 5, 20, 0);
        let this_morning = at(&tz, 2026, 2, 6, 8, 30);
        let started_yesterday_talked_today = SessionTimes {
            started_at_ms: yesterday,
            last_interaction_at_ms: this_morning,
        };
        assert!(super::evaluate(&daily(4), started_yesterday_talked_today, now, &tz).is_stale());
        let idle = ResetPolicy {
            mode: SessionResetMode::Idle,
            at_hour: 4,
            idle_minutes: Some(60),
        };
        assert!(!super::evaluate(&idle, started_yesterday_talked_today, now, &tz).is_stale());
        let quiet_since_yesterday = SessionTimes {
            started_at_ms: this_morning,
            last_interaction_at_ms: yesterday,
        };
        assert!(super::evaluate(&idle, quiet_since_yesterday, now, &tz).is_stale());
        assert!(!super::evaluate(&daily(4), quiet_since_yesterday, now, &tz).is_stale());
    }

    #[test]
    fn an_entry_without_an_interaction_counts_from_its_start() {
        let mut entry = crate::store::SessionEntry::new("s", 1_000);
        entry.updated_at_ms = 9_000;
        assert_eq!(
            SessionTimes::of(&entry),
            SessionTimes {
                started_at_ms: 1_000,
                last_interaction_at_ms: 1_000
            }
        );
        entry.last_interaction_at_ms = Some(5_000);
        entry.created_at_ms = 0;
        assert_eq!(
            SessionTimes::of(&entry),
            SessionTimes {
                started_at_ms: 9_000,
                last_interaction_at_ms: 5_000
            }
        );
    }

    fn daily(at_hour: u8) -> ResetPolicy {
        ResetPolicy {
            mode: SessionResetMode::Daily,
            at_hour,
            idle_minutes: None,
        }
    }

    #[test]
    fn a_session_from_before_todays_boundary_is_stale_and_one_after_it_is_fresh() {
        let tz = TimeZone::UTC;
        let now = at(&tz, 2026, 2, 6, 9, 0);
        let boundary = at(&tz, 2026, 2, 6, 4, 0);
        assert_eq!(
            evaluate(&daily(4), at(&tz, 2026, 2, 5, 23, 0), now, &tz),
            Freshness::PastDailyReset {
                boundary_ms: boundary
            }
        );
        assert_eq!(
            evaluate(&daily(4), at(&tz, 2026, 2, 6, 4, 1), now, &tz),
            Freshness::Fresh
        );
    }

    #[test]
    fn before_the_hour_the_boundary_is_yesterdays() {
        let tz = TimeZone::UTC;
        let now = at(&tz, 2026, 2, 6, 3, 59);
        assert_eq!(
            daily_boundary_ms(now, 4, &tz),
            at(&tz, 2026, 2, 5, 4, 0),
            "03:59 is still yesterday's session day"
        );
        assert_eq!(
            evaluate(&daily(4), at(&tz, 2026, 2, 5, 23, 0), now, &tz),
            Freshness::Fresh
        );
        // At the hour itself the new day has begun.
        let on_the_hour = at(&tz, 2026, 2, 6, 4, 0);
        assert_eq!(daily_boundary_ms(on_the_hour, 4, &tz), on_the_hour);
        assert!(evaluate(&daily(4), on_the_hour - 1, on_the_hour, &tz).is_stale());
        assert!(!evaluate(&daily(4), on_the_hour, on_the_hour, &tz).is_stale());
    }

    #[test]
    fn the_boundary_is_local_time_in_the_given_zone() {
        let tz = TimeZone::get("Asia/Tokyo").expect("zone");
        // 04:00 in Tokyo is 19:00 UTC the day before.
        let now = at(&tz, 2026, 7, 1, 10, 0);
        assert_eq!(
            daily_boundary_ms(now, 4, &tz),
            at(&TimeZone::UTC, 2026, 6, 30, 19, 0)
        );
    }

    #[test]
    fn daylight_saving_changes_keep_the_local_hour() {
        let tz = TimeZone::get("Europe/Berlin").expect("zone");
        // Spring forward on 2026-03-29: 02:00 → 03:00. A 02:00 reset that day happens at 03:00 local.
        let after_jump = at(&tz, 2026, 3, 29, 12, 0);
        assert_eq!(
            daily_boundary_ms(after_jump, 2, &tz),
            at(&tz, 2026, 3, 29, 3, 0)
        );
        // The 04:00 boundary after the jump is 02:00 UTC, not 03:00 UTC as the day before.
        assert_eq!(
            daily_boundary_ms(after_jump, 4, &tz),
            at(&TimeZone::UTC, 2026, 3, 29, 2, 0)
        );
        assert_eq!(
            daily_boundary_ms(at(&tz, 2026, 3, 28, 12, 0), 4, &tz),
            at(&TimeZone::UTC, 2026, 3, 28, 3, 0)
        );
        // Fall back on 2026-10-25: 03:00 → 02:00; the repeated 02:00 hour resets at its first occurrence.
        let after_fall_back = at(&tz, 2026, 10, 25, 12, 0);
        assert_eq!(
            daily_boundary_ms(after_fall_back, 2, &tz),
            at(&TimeZone::UTC, 2026, 10, 25, 0, 0)
        );
        // The day of the change is 25 hours long: a session from 04:30 the day before is stale.
        assert!(evaluate(
            &daily(4),
            at(&tz, 2026, 10, 24, 4, 30),
            after_fall_back,
            &tz
        )
        .is_stale());
    }

    #[test]
    fn idle_sessions_expire_after_the_window() {
        let tz = TimeZone::UTC;
        let policy = ResetPolicy {
            mode: SessionResetMode::Idle,
            at_hour: 4,
            idle_minutes: Some(30),
        };
        let updated = 1_000 * HOUR_MS;
        assert_eq!(
            evaluate(&policy, updated, updated + 30 * MINUTE_MS, &tz),
            Freshness::Fresh
        );
        assert_eq!(
            evaluate(&policy, updated, updated + 30 * MINUTE_MS + 1, &tz),
            Freshness::Idle {
                expired_at_ms: updated + 30 * MINUTE_MS
            }
        );
        // Idle mode ignores the daily boundary.
        assert_eq!(
            evaluate(
                &policy,
                at(&tz, 2026, 2, 6, 3, 50),
                at(&tz, 2026, 2, 6, 4, 10),
                &tz
            ),
            Freshness::Fresh
        );
    }

    #[test]
    fn daily_and_idle_together_report_whichever_expired_first() {
        let tz = TimeZone::UTC;
        let policy = ResetPolicy {
            idle_minutes: Some(60),
            ..daily(4)
        };
        let now = at(&tz, 2026, 2, 6, 9, 0);
        // Idle first: updated 01:00, idle expired 02:00, boundary 04:00.
        assert_eq!(
            evaluate(&policy, at(&tz, 2026, 2, 6, 1, 0), now, &tz),
            Freshness::Idle {
                expired_at_ms: at(&tz, 2026, 2, 6, 2, 0)
            }
        );
        // Daily first: updated 03:30, boundary 04:00, idle would expire 04:30.
        assert_eq!(
            evaluate(&policy, at(&tz, 2026, 2, 6, 3, 30), now, &tz),
            Freshness::PastDailyReset {
                boundary_ms: at(&tz, 2026, 2, 6, 4, 0)
            }
        );
        // Past the boundary, idle alone can still expire a session.
        assert_eq!(
            evaluate(&policy, at(&tz, 2026, 2, 6, 5, 0), now, &tz),
            Freshness::Idle {
                expired_at_ms: at(&tz, 2026, 2, 6, 6, 0)
            }
        );
        assert_eq!(
            evaluate(&policy, at(&tz, 2026, 2, 6, 8, 30), now, &tz),
            Freshness::Fresh
        );
    }

    #[test]
    fn no_reset_configured_never_resets() {
        let policy = ResetPolicy::resolve(&session("{}"), ResetKind::Direct, Some("telegram"));
        assert_eq!(policy, ResetPolicy::NEVER);
        assert_eq!(
            evaluate(&policy, 0, u64::MAX / 2, &TimeZone::UTC),
            Freshness::Fresh
        );
        let off = session(r#"{"reset": {"mode": "none", "idleMinutes": 5}}"#);
        assert_eq!(
            ResetPolicy::resolve(&off, ResetKind::Direct, None),
            ResetPolicy::NEVER
        );
    }

    #[test]
    fn reset_without_a_mode_is_daily_at_four_and_idle_mode_defaults_to_an_hour() {
        let config = session(r#"{"reset": {}}"#);
        assert_eq!(
            ResetPolicy::resolve(&config, ResetKind::Direct, None),
            daily(DEFAULT_RESET_AT_HOUR)
        );
        let idle = session(r#"{"reset": {"mode": "idle"}}"#);
        assert_eq!(
            ResetPolicy::resolve(&idle, ResetKind::Group, None).idle_minutes,
            Some(DEFAULT_IDLE_MINUTES)
        );
    }

    #[test]
    fn by_channel_beats_by_type_beats_reset_beats_legacy_idle_minutes() {
        let config = session(
            r#"{
              "idleMinutes": 600,
              "reset": {"mode": "daily", "atHour": 5},
              "resetByType": {"group": {"mode": "idle", "idleMinutes": 120}, "dm": {"atHour": 7}},
              "resetByChannel": {"Discord": {"mode": "idle", "idleMinutes": 30}}
            }"#,
        );
        let discord = ResetPolicy::resolve(&config, ResetKind::Group, Some("discord"));
        assert_eq!(
            (discord.mode, discord.idle_minutes),
            (SessionResetMode::Idle, Some(30)),
            "the channel wins outright, without the legacy idle minutes"
        );
        let group = ResetPolicy::resolve(&config, ResetKind::Group, Some("telegram"));
        assert_eq!(
            (group.mode, group.idle_minutes),
            (SessionResetMode::Idle, Some(120))
        );
        let direct = ResetPolicy::resolve(&config, ResetKind::Direct, Some("telegram"));
        assert_eq!(
            (direct.mode, direct.at_hour, direct.idle_minutes),
            (SessionResetMode::Daily, 7, Some(600)),
            "`dm` is the legacy name of `direct`; it inherits the base mode"
        );
        let thread = ResetPolicy::resolve(&config, ResetKind::Thread, None);
        assert_eq!((thread.mode, thread.at_hour), (SessionResetMode::Daily, 5));
        let legacy = session(r#"{"idleMinutes": 45}"#);
        assert_eq!(
            ResetPolicy::resolve(&legacy, ResetKind::Direct, None),
            ResetPolicy {
                mode: SessionResetMode::Idle,
                at_hour: DEFAULT_RESET_AT_HOUR,
                idle_minutes: Some(45)
            }
        );
    }

    #[test]
    fn the_kind_comes_from_the_key_and_the_message() {
        assert_eq!(ResetKind::of("agent:main:main", false), ResetKind::Direct);
        assert_eq!(ResetKind::of("agent:main:main", true), ResetKind::Group);
        assert_eq!(
            ResetKind::of("agent:main:telegram:group:-100", false),
            ResetKind::Group
        );
        assert_eq!(
            ResetKind::of("agent:main:discord:channel:9", false),
            ResetKind::Group
        );
        assert_eq!(
            ResetKind::of("agent:main:telegram:group:-100:topic:4", true),
            ResetKind::Thread
        );
        assert_eq!(
            ResetKind::of("agent:main:slack:channel:c1:thread:17", true),
            ResetKind::Thread
        );
    }
}
