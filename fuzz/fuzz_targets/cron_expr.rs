//! A cron expression (5 or 6 fields, as `cron.add` and the config accept) and the next run it gives.
//! Properties: no panic; the next run is whole seconds, strictly after the given instant and at most five
//! years (and a day) later; asking again from just before it gives the same instant.
#![no_main]

use jiff::tz::TimeZone;
use libfuzzer_sys::fuzz_target;
use pincer::cron::expr::CronExpr;
use pincer_fuzz::{split_parts, within_budget};

const FIVE_YEARS_AND_A_DAY_MS: i64 = (5 * 366 + 1) * 24 * 3600 * 1000;

fuzz_target!(|data: &[u8]| {
    let parts = split_parts(data, 3);
    let Ok(text) = std::str::from_utf8(parts[0]) else {
        return;
    };
    let after_ms = parts
        .get(1)
        .map(|b| {
            let mut raw = [0u8; 8];
            for (slot, byte) in raw.iter_mut().zip(b.iter()) {
                *slot = *byte;
            }
            // Between 1970 and ~2100: the range a gateway's clock is in.
            (i64::from_le_bytes(raw).rem_euclid(4_102_444_800_000)).max(0)
        })
        .unwrap_or(1_767_225_600_000);
    let zones = [
        "UTC",
        "Europe/Berlin",
        "America/Sao_Paulo",
        "Australia/Lord_Howe",
        "Asia/Kathmandu",
    ];
    let zone = zones[parts
        .get(2)
        .and_then(|z| z.first())
        .map_or(0, |b| usize::from(*b) % zones.len())];
    let Ok(tz) = TimeZone::get(zone) else {
        return;
    };
    within_budget("cron expression", 64 * 1024 + 16 * text.len(), || {
        let Ok(expr) = CronExpr::parse(text) else {
            return;
        };
        let Some(next) = expr.next_after(&tz, after_ms) else {
            return;
        };
        assert_eq!(next % 1000, 0, "next run {next} is not a whole second");
        assert!(next > after_ms, "next run {next} is not after {after_ms}");
        assert!(
            next - after_ms <= FIVE_YEARS_AND_A_DAY_MS,
            "next run too far ahead"
        );
        assert_eq!(
            expr.next_after(&tz, next - 1),
            Some(next),
            "next run not stable"
        );
    });
});
