//! The `activeHours` window: heartbeats run only between `start` and `end` ("HH:MM", `end` may be
//! "24:00") in the window's time zone (`user` = `agents.defaults.userTimezone`, `local` = the host's, or
//! an IANA name). A window whose start is after its end wraps past midnight; an equal start and end is an
//! empty window. Without both bounds there is no restriction.

use jiff::tz::TimeZone;
use jiff::Timestamp;

use crate::config::schema::automation::ActiveHours;

/// Minutes in a day: the value of "24:00".
const MINUTES_PER_DAY: u32 = 24 * 60;

/// Why a window cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoursError {
    #[error("activeHours.{field} {value:?} must be HH:MM (00:00–24:00)")]
    Time { field: &'static str, value: String },
    #[error("activeHours.timezone {0:?} is not a known IANA time zone")]
    Zone(String),
    #[error("time {0} ms is out of range")]
    Instant(u64),
}

fn minutes(field: &'static str, text: &str) -> Result<u32, HoursError> {
    let bad = || HoursError::Time {
        field,
        value: text.to_string(),
    };
    let (h, m) = text.trim().split_once(':').ok_or_else(bad)?;
    let (h, m): (u32, u32) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    let total = h * 60 + m;
    if m >= 60 || total > MINUTES_PER_DAY || (total == MINUTES_PER_DAY && field == "start") {
        return Err(bad());
    }
    Ok(total)
}

fn zone(name: Option<&str>, user_timezone: Option<&str>) -> Result<TimeZone, HoursError> {
    let name = match name.map(str::trim).filter(|n| !n.is_empty()) {
        None | Some("user") => user_timezone,
        Some("local") => None,
        Some(other) => Some(other),
    };
    match name {
        None => Ok(TimeZone::system()),
        Some(name) => TimeZone::get(name).map_err(|_| HoursError::Zone(name.to_string())),
    }
}

/// Whether `now_ms` falls inside the window.
pub fn within_active_hours(
    hours: Option<&ActiveHours>,
    user_timezone: Option<&str>,
    now_ms: u64,
) -> Result<bool, HoursError> {
    let Some((start, end)) = hours.and_then(|h| Some((h.start.as_deref()?, h.end.as_deref()?)))
    else {
        return Ok(true);
    };
    let (start, end) = (minutes("start", start)?, minutes("end", end)?);
    let tz = zone(hours.and_then(|h| h.timezone.as_deref()), user_timezone)?;
    let instant = i64::try_from(now_ms)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .ok_or(HoursError::Instant(now_ms))?;
    let local = instant.to_zoned(tz);
    let now =
        u32::try_from(local.hour()).unwrap_or(0) * 60 + u32::try_from(local.minute()).unwrap_or(0);
    Ok(match start.cmp(&end) {
        std::cmp::Ordering::Less => start <= now && now < end,
        std::cmp::Ordering::Greater => now >= start || now < end,
        std::cmp::Ordering::Equal => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(start: &str, end: &str, tz: &str) -> ActiveHours {
        ActiveHours {
            start: Some(start.into()),
            end: Some(end.into()),
            timezone: Some(tz.into()),
        }
    }

    /// 2026-01-15 at `hour`:`minute` UTC.
    fn utc(hour: u64, minute: u64) -> u64 {
        1_768_435_200_000 + (hour * 60 + minute) * 60_000
    }

    #[test]
    fn window_is_read_in_its_own_zone() {
        let day = window("09:00", "17:00", "Europe/Berlin");
        // 07:59 UTC is 08:59 in Berlin (winter, UTC+1).
        assert!(!within_active_hours(Some(&day), None, utc(7, 59)).expect("ok"));
        assert!(within_active_hours(Some(&day), None, utc(8, 0)).expect("ok"));
        assert!(!within_active_hours(Some(&day), None, utc(16, 0)).expect("ok"));
    }

    #[test]
    fn windows_wrap_past_midnight_and_user_means_the_configured_zone() {
        let night = window("22:00", "06:00", "user");
        assert!(within_active_hours(Some(&night), Some("UTC"), utc(23, 30)).expect("ok"));
        assert!(within_active_hours(Some(&night), Some("UTC"), utc(5, 59)).expect("ok"));
        assert!(!within_active_hours(Some(&night), Some("UTC"), utc(12, 0)).expect("ok"));
        let all_day = window("00:00", "24:00", "UTC");
        assert!(within_active_hours(Some(&all_day), None, utc(23, 59)).expect("ok"));
    }

    #[test]
    fn missing_bounds_mean_always_and_bad_values_are_named() {
        assert!(within_active_hours(None, None, utc(3, 0)).expect("ok"));
        let bad = window("9am", "17:00", "UTC");
        let error = within_active_hours(Some(&bad), None, 0).expect_err("bad start");
        assert!(error.to_string().contains("activeHours.start"), "{error}");
        let zone = window("09:00", "17:00", "Mars/Olympus");
        assert!(within_active_hours(Some(&zone), None, 0).is_err());
    }
}
