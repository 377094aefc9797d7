//! Duration and byte-size text as OpenClaw writes it in config files:
//! `"30d"`, `"1h30m"`, `"500ms"`, `"500mb"`, `"1gb"`.
//!
//! Pure parsing: units and multipliers follow upstream's `parseDurationMs`
//! (ms, s, m, h, d; composite forms; a bare number takes a default unit) and
//! `parseByteSize` (b, k/kb, m/mb, g/gb, t/tb, powers of 1024). Nothing here
//! knows which config key a value came from.

/// A time unit a bare number can default to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationUnit {
    Millis,
    Seconds,
    Minutes,
    Hours,
    Days,
}

impl DurationUnit {
    fn millis(self) -> f64 {
        match self {
            DurationUnit::Millis => 1.0,
            DurationUnit::Seconds => 1_000.0,
            DurationUnit::Minutes => 60_000.0,
            DurationUnit::Hours => 3_600_000.0,
            DurationUnit::Days => 86_400_000.0,
        }
    }

    fn from_suffix(suffix: &str) -> Option<Self> {
        match suffix {
            "ms" => Some(DurationUnit::Millis),
            "s" => Some(DurationUnit::Seconds),
            "m" => Some(DurationUnit::Minutes),
            "h" => Some(DurationUnit::Hours),
            "d" => Some(DurationUnit::Days),
            _ => None,
        }
    }
}

/// Why a duration or size text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitTextError {
    #[error(
        "invalid duration {0:?} (use a number with ms, s, m, h or d, e.g. \"30d\" or \"1h30m\")"
    )]
    Duration(String),
    #[error("invalid size {0:?} (use a number with b, kb, mb, gb or tb, e.g. \"500mb\")")]
    Size(String),
}

/// Parses a duration into milliseconds. A bare number (`"30"`) takes
/// `default_unit`; composite text (`"1h30m"`) needs a unit on every part.
pub fn parse_duration_ms(text: &str, default_unit: DurationUnit) -> Result<u64, UnitTextError> {
    let fail = || UnitTextError::Duration(text.to_string());
    let trimmed = text.trim().to_ascii_lowercase();
    if trimmed.is_empty() {
        return Err(fail());
    }
    let (number, suffix) = split_number(&trimmed).ok_or_else(fail)?;
    if suffix.is_empty() {
        return to_whole(number * default_unit.millis()).ok_or_else(fail);
    }
    // Composite form ("1h30m"): every part carries its own unit.
    let mut total_ms = 0.0_f64;
    let mut rest = trimmed.as_str();
    while !rest.is_empty() {
        let (number, after_number) = split_number(rest).ok_or_else(fail)?;
        let unit_len = after_number
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after_number.len());
        let unit = DurationUnit::from_suffix(&after_number[..unit_len]).ok_or_else(fail)?;
        total_ms += number * unit.millis();
        rest = &after_number[unit_len..];
    }
    to_whole(total_ms).ok_or_else(fail)
}

/// Parses a size into bytes (`"500mb"` → 524288000). A bare number is bytes.
pub fn parse_byte_size(text: &str) -> Result<u64, UnitTextError> {
    let fail = || UnitTextError::Size(text.to_string());
    let trimmed = text.trim().to_ascii_lowercase();
    let (number, suffix) = split_number(&trimmed).ok_or_else(fail)?;
    let multiplier: f64 = match suffix {
        "" | "b" => 1.0,
        "k" | "kb" => 1024.0,
        "m" | "mb" => 1024.0 * 1024.0,
        "g" | "gb" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(fail()),
    };
    to_whole(number * multiplier).ok_or_else(fail)
}

/// Splits a leading non-negative decimal number (`12` or `1.5`) off `text`.
fn split_number(text: &str) -> Option<(f64, &str)> {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let digits = &text[..end];
    if digits.is_empty()
        || digits.starts_with('.')
        || digits.ends_with('.')
        || digits.matches('.').count() > 1
    {
        return None;
    }
    let value: f64 = digits.parse().ok()?;
    Some((value, &text[end..]))
}

fn to_whole(value: f64) -> Option<u64> {
    let rounded = value.round();
    if rounded.is_finite() && rounded >= 0.0 && rounded <= u64::MAX as f64 {
        Some(rounded as u64)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY_MS: u64 = 86_400_000;

    #[test]
    fn day_and_hour_suffixes_parse() {
        assert_eq!(
            parse_duration_ms("30d", DurationUnit::Millis),
            Ok(30 * DAY_MS)
        );
        assert_eq!(
            parse_duration_ms("12h", DurationUnit::Millis),
            Ok(12 * 3_600_000)
        );
        assert_eq!(parse_duration_ms("500ms", DurationUnit::Days), Ok(500));
    }

    #[test]
    fn bare_number_takes_the_default_unit() {
        assert_eq!(parse_duration_ms("7", DurationUnit::Days), Ok(7 * DAY_MS));
        assert_eq!(
            parse_duration_ms("45", DurationUnit::Minutes),
            Ok(45 * 60_000)
        );
    }

    #[test]
    fn composite_duration_adds_parts() {
        assert_eq!(
            parse_duration_ms("1h30m", DurationUnit::Millis),
            Ok(5_400_000)
        );
        assert_eq!(
            parse_duration_ms("2m500ms", DurationUnit::Millis),
            Ok(120_500)
        );
        assert_eq!(
            parse_duration_ms("1.5h", DurationUnit::Millis),
            Ok(5_400_000)
        );
    }

    #[test]
    fn bad_duration_text_is_refused() {
        for bad in ["", "abc", "30x", "1h30", "-5d", "d", "3 0d", "1..5h"] {
            assert!(
                parse_duration_ms(bad, DurationUnit::Days).is_err(),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn sizes_use_powers_of_1024() {
        assert_eq!(parse_byte_size("500mb"), Ok(500 * 1024 * 1024));
        assert_eq!(parse_byte_size("1gb"), Ok(1024 * 1024 * 1024));
        assert_eq!(parse_byte_size("2K"), Ok(2048));
        assert_eq!(parse_byte_size("123"), Ok(123));
    }

    #[test]
    fn bad_size_text_is_refused() {
        for bad in ["", "mb", "10 zb", "1.2.3mb", "-1mb"] {
            assert!(parse_byte_size(bad).is_err(), "{bad:?} accepted");
        }
    }
}
