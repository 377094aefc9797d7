//! The one way a test says it did not check its subject: [`skip`] prints
//! `SKIPPED: <test>: <reason>` past libtest's output capture, and `scripts/test`
//! (`scripts/test-count.sh`) counts each test so named as skipped, not passed. A test that
//! cannot run its subject and does not call [`skip`] must fail instead.
//!
//! Test files that do not use the rest of `support` include this file alone:
//! `#[path = "support/skip.rs"] mod skip;`.
#![allow(dead_code)]

use std::io::Write as _;

/// Reports `test` (its function name) as skipped for `reason`. The caller then returns
/// without asserting anything.
pub fn skip(test: &str, reason: &str) {
    assert!(
        !test.is_empty() && !test.contains([' ', ':']),
        "a skipped test is named by its function name, not {test:?}"
    );
    say(&format!("SKIPPED: {test}: {reason}"));
}

/// Prints one line past libtest's capture, in one write so that parallel tests' lines do
/// not interleave within it. For notes that are not skips (a part of a test not run).
pub fn say(line: &str) {
    let line = format!("{line}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// True under CI (`CI=true`), where a skip of something this host provides is a failure.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true")
}
