//! Cron expressions: parsing the 5-field (`min hour dom month dow`) and 6-field (`sec min hour dom month dow`)
//! forms into sets of allowed values, and finding the next matching instant in an IANA time zone.
//!
//! Fields accept `*`, `?` (day fields), numbers, ranges `a-b`, steps `*/n` and `a-b/n`, lists, month and
//! weekday names (`JAN`, `MON`), and `7` for Sunday. When both day-of-month and day-of-week are restricted a
//! day matches either (classic cron). DST rules: a local time skipped by a spring-forward change runs at the
//! same offset after the jump (02:30 becomes 03:30); a local time repeated by a fall-back change runs once, at
//! its first occurrence. This file computes times only; it never reads the clock or stores anything.

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::Timestamp;

/// How many days ahead the search looks before deciding an expression never matches (e.g. `0 0 31 2 *`).
const MAX_SEARCH_DAYS: u32 = 366 * 5;
/// Longer than any daylight-saving gap in the time zone database (most are an hour, Lord Howe's half of one).
const MAX_DST_GAP: jiff::SignedDuration = jiff::SignedDuration::from_hours(3);

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Why an expression was refused; the text names the field and the allowed range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    #[error("cron expression must have 5 or 6 fields, found {0}")]
    FieldCount(usize),
    #[error("cron field {field} ({text:?}): {reason}")]
    Field {
        field: &'static str,
        text: String,
        reason: String,
    },
}

/// One field's allowed values as a bit set (bit n = value n).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FieldSet {
    bits: u64,
    /// Written as `*` or `?` (matters for the day-of-month / day-of-week rule).
    any: bool,
}

impl FieldSet {
    fn contains(&self, value: u32) -> bool {
        value < 64 && self.bits & (1 << value) != 0
    }

    fn values(&self) -> impl Iterator<Item = u32> + '_ {
        (0..64).filter(|v| self.contains(*v))
    }
}

/// A parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronExpr {
    seconds: FieldSet,
    minutes: FieldSet,
    hours: FieldSet,
    days_of_month: FieldSet,
    months: FieldSet,
    /// 0 = Sunday.
    days_of_week: FieldSet,
}

struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    names_from: u32,
}

const SECOND: FieldSpec = FieldSpec {
    name: "second",
    min: 0,
    max: 59,
    names: &[],
    names_from: 0,
};
const MINUTE: FieldSpec = FieldSpec {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
    names_from: 0,
};
const HOUR: FieldSpec = FieldSpec {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
    names_from: 0,
};
const DAY_OF_MONTH: FieldSpec = FieldSpec {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
    names_from: 0,
};
const MONTH: FieldSpec = FieldSpec {
    name: "month",
    min: 1,
    max: 12,
    names: &MONTH_NAMES,
    names_from: 1,
};
const DAY_OF_WEEK: FieldSpec = FieldSpec {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &WEEKDAY_NAMES,
    names_from: 0,
};

impl CronExpr {
    /// Parses a 5- or 6-field expression.
    pub fn parse(text: &str) -> Result<CronExpr, ExprError> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        let (seconds, rest) = match fields.len() {
            5 => (
                FieldSet {
                    bits: 1,
                    any: false,
                },
                &fields[..],
            ),
            6 => (parse_field(fields[0], &SECOND)?, &fields[1..]),
            n => return Err(ExprError::FieldCount(n)),
        };
        let mut days_of_week = parse_field(rest[4], &DAY_OF_WEEK)?;
        if days_of_week.contains(7) {
            days_of_week.bits = (days_of_week.bits & !(1 << 7)) | 1;
        }
        Ok(CronExpr {
            seconds,
            minutes: parse_field(rest[0], &MINUTE)?,
            hours: parse_field(rest[1], &HOUR)?,
            days_of_month: parse_field(rest[2], &DAY_OF_MONTH)?,
            months: parse_field(rest[3], &MONTH)?,
            days_of_week,
        })
    }

    fn matches_day(&self, date: Date) -> bool {
        if !self.months.contains(date.month() as u32) {
            return false;
        }
        let dom = self.days_of_month.contains(date.day() as u32);
        let dow = self
            .days_of_week
            .contains(u32::from(date.weekday().to_sunday_zero_offset() as u8));
        match (self.days_of_month.any, self.days_of_week.any) {
            (true, true) => true,
            (false, true) => dom,
            (true, false) => dow,
            (false, false) => dom || dow,
        }
    }

    /// The first instant strictly after `after_ms` (ms since the epoch) that matches in `tz`, or `None` when
    /// nothing matches within five years.
    pub fn next_after(&self, tz: &TimeZone, after_ms: i64) -> Option<i64> {
        let after = Timestamp::from_millisecond(after_ms).ok()?;
        let start = after.to_zoned(tz.clone()).datetime();
        // Times of day before the floor are skipped on the first day without converting them. The floor is the
        // wall time `MAX_DST_GAP` earlier: a time in a daylight-saving gap resolves to an instant after the gap,
        // so a wall time below `after`'s own can still be the next run (the fuzz target `cron_expr` found the
        // next run changing with the instant asked from when the floor was `after`'s own wall time).
        let earlier = after
            .checked_sub(MAX_DST_GAP)
            .ok()?
            .to_zoned(tz.clone())
            .datetime();
        let floor = (earlier.date() == start.date()).then(|| {
            (
                earlier.hour() as u32,
                earlier.minute() as u32,
                earlier.second() as u32,
            )
        });
        let mut date = start.date();
        for day in 0..MAX_SEARCH_DAYS {
            if self.matches_day(date) {
                if let Some(found) =
                    self.first_on_day(tz, date, floor.filter(|_| day == 0), after_ms)
                {
                    return Some(found);
                }
            }
            date = date.tomorrow().ok()?;
        }
        None
    }

    /// The first matching time on `date` at or after `floor` whose instant is after `after_ms`.
    fn first_on_day(
        &self,
        tz: &TimeZone,
        date: Date,
        floor: Option<(u32, u32, u32)>,
        after_ms: i64,
    ) -> Option<i64> {
        for hour in self.hours.values() {
            if floor.is_some_and(|(h, _, _)| hour < h) {
                continue;
            }
            for minute in self.minutes.values() {
                if floor.is_some_and(|(h, m, _)| (hour, minute) < (h, m)) {
                    continue;
                }
                for second in self.seconds.values() {
                    if floor.is_some_and(|f| (hour, minute, second) < f) {
                        continue;
                    }
                    let civil = DateTime::new(
                        date.year(),
                        date.month(),
                        date.day(),
                        hour as i8,
                        minute as i8,
                        second as i8,
                        0,
                    )
                    .ok()?;
                    // `compatible`: a skipped time moves forward by the gap, a repeated time takes its first
                    // occurrence.
                    let instant = tz.to_ambiguous_timestamp(civil).compatible().ok()?;
                    let ms = instant.as_millisecond();
                    if ms > after_ms {
                        return Some(ms);
                    }
                }
            }
        }
        None
    }
}

fn parse_field(text: &str, spec: &FieldSpec) -> Result<FieldSet, ExprError> {
    let fail = |reason: String| ExprError::Field {
        field: spec.name,
        text: text.to_string(),
        reason,
    };
    let mut bits = 0u64;
    let any = text == "*" || text == "?";
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| fail(format!("step {step:?} must be a positive integer")))?;
                (range, step)
            }
            None => (part, 1),
        };
        let (low, high) = if range == "*" || range == "?" {
            (spec.min, spec.max)
        } else if let Some((a, b)) = range.split_once('-') {
            (
                value_of(a, spec).map_err(&fail)?,
                value_of(b, spec).map_err(&fail)?,
            )
        } else {
            let v = value_of(range, spec).map_err(&fail)?;
            // `5/15` means from 5 to the end in steps of 15.
            (v, if part.contains('/') { spec.max } else { v })
        };
        if low > high {
            return Err(fail(format!("range {low}-{high} runs backwards")));
        }
        let mut v = low;
        while v <= high {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok(FieldSet { bits, any })
}

fn value_of(text: &str, spec: &FieldSpec) -> Result<u32, String> {
    let upper = text.to_ascii_uppercase();
    if let Some(index) = spec.names.iter().position(|n| *n == upper) {
        return Ok(index as u32 + spec.names_from);
    }
    match text.parse::<u32>() {
        Ok(v) if (spec.min..=spec.max).contains(&v) => Ok(v),
        _ => Err(format!(
            "{text:?} is not a value from {} to {}{}",
            spec.min,
            spec.max,
            if spec.names.is_empty() {
                ""
            } else {
                " or a name"
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> i64 {
        text.parse::<Timestamp>()
            .expect("timestamp")
            .as_millisecond()
    }

    fn next(expr: &str, tz: &str, after: &str) -> String {
        let tz = TimeZone::get(tz).expect("zone");
        let found = CronExpr::parse(expr)
            .expect("parse")
            .next_after(&tz, ms(after))
            .expect("next");
        Timestamp::from_millisecond(found).expect("ts").to_string()
    }

    #[test]
    fn five_field_daily_job_in_utc() {
        assert_eq!(
            next("0 9 * * *", "UTC", "2025-01-01T08:00:00Z"),
            "2025-01-01T09:00:00Z"
        );
        assert_eq!(
            next("0 9 * * *", "UTC", "2025-01-01T09:00:00Z"),
            "2025-01-02T09:00:00Z"
        );
    }

    #[test]
    fn six_field_form_has_seconds() {
        assert_eq!(
            next("*/15 * * * * *", "UTC", "2025-01-01T00:00:01Z"),
            "2025-01-01T00:00:15Z"
        );
        assert_eq!(
            next("30 0 12 * * *", "UTC", "2025-01-01T12:00:30Z"),
            "2025-01-02T12:00:30Z"
        );
    }

    #[test]
    fn names_ranges_steps_and_sunday_as_seven() {
        // 2025-01-04 is a Saturday.
        assert_eq!(
            next("0 8 * * MON-FRI", "UTC", "2025-01-04T00:00:00Z"),
            "2025-01-06T08:00:00Z"
        );
        assert_eq!(
            next("0 8 * * 7", "UTC", "2025-01-04T00:00:00Z"),
            "2025-01-05T08:00:00Z"
        );
        assert_eq!(
            next("0 0 1 jun *", "UTC", "2025-01-04T00:00:00Z"),
            "2025-06-01T00:00:00Z"
        );
        assert_eq!(
            next("10-20/5 * * * *", "UTC", "2025-01-01T00:16:00Z"),
            "2025-01-01T00:20:00Z"
        );
    }

    #[test]
    fn restricted_day_of_month_and_week_match_either() {
        // The 15th, or any Monday: from Saturday 2025-01-04 the Monday the 6th comes first.
        assert_eq!(
            next("0 0 15 * 1", "UTC", "2025-01-04T00:00:00Z"),
            "2025-01-06T00:00:00Z"
        );
    }

    #[test]
    fn spring_forward_gap_time_runs_once_after_the_jump() {
        // New York, 2025-03-09: 02:00 EST jumps to 03:00 EDT, so 02:30 does not exist.
        assert_eq!(
            next("30 2 * * *", "America/New_York", "2025-03-09T05:00:00Z"),
            "2025-03-09T07:30:00Z" // 03:30 EDT
        );
        // Asked from just before the moved run, the answer is the same run (found by the `cron_expr` fuzz
        // target, in Lord Howe's half-hour gap: the first day's floor skipped the gap's wall time).
        assert_eq!(
            next("30 2 * * *", "America/New_York", "2025-03-09T07:29:59Z"),
            "2025-03-09T07:30:00Z"
        );
        assert_eq!(
            next("3 1 2 * * *", "Australia/Lord_Howe", "2025-10-04T15:29:00Z"),
            next("3 1 2 * * *", "Australia/Lord_Howe", "2025-10-04T15:31:02Z")
        );
        // The day after, 02:30 EDT exists again.
        assert_eq!(
            next("30 2 * * *", "America/New_York", "2025-03-09T07:30:00Z"),
            "2025-03-10T06:30:00Z"
        );
        // An hourly job skips nothing but the missing hour and never runs twice at 03:30.
        assert_eq!(
            next("30 * * * *", "America/New_York", "2025-03-09T06:30:00Z"),
            "2025-03-09T07:30:00Z"
        );
        assert_eq!(
            next("30 * * * *", "America/New_York", "2025-03-09T07:30:00Z"),
            "2025-03-09T08:30:00Z"
        );
    }

    #[test]
    fn fall_back_repeated_time_runs_once() {
        // New York, 2025-11-02: 02:00 EDT falls back to 01:00 EST, so 01:30 happens twice.
        assert_eq!(
            next("30 1 * * *", "America/New_York", "2025-11-02T04:00:00Z"),
            "2025-11-02T05:30:00Z" // 01:30 EDT, the first occurrence
        );
        assert_eq!(
            next("30 1 * * *", "America/New_York", "2025-11-02T05:30:00Z"),
            "2025-11-03T06:30:00Z" // not 01:30 EST the same day
        );
        // A daily 09:00 job keeps its local time across the change (UTC offset moves by an hour).
        assert_eq!(
            next("0 9 * * *", "America/New_York", "2025-11-01T13:00:00Z"),
            "2025-11-02T14:00:00Z"
        );
    }

    #[test]
    fn bad_expressions_name_the_field() {
        assert_eq!(CronExpr::parse("* * *"), Err(ExprError::FieldCount(3)));
        let error = CronExpr::parse("61 * * * *").expect_err("minute");
        assert!(error.to_string().contains("minute"), "{error}");
        assert!(CronExpr::parse("* * * FOO *").is_err());
        assert!(CronExpr::parse("*/0 * * * *").is_err());
        assert!(CronExpr::parse("5-1 * * * *").is_err());
    }

    #[test]
    fn impossible_date_never_matches() {
        let tz = TimeZone::UTC;
        assert_eq!(
            CronExpr::parse("0 0 31 2 *")
                .expect("parse")
                .next_after(&tz, 0),
            None
        );
    }
}
