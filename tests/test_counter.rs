//! The count `scripts/test` prints (`tests: N passed, N failed, N skipped`), fed sample
//! `cargo test` logs through `scripts/test-count.sh`: each test counts once, a nested run's
//! output counts not at all, and a test that said `SKIPPED: <test>: <reason>` is skipped,
//! not passed.

use std::path::Path;
use std::process::Command;

/// Runs `count_cargo_log` on `log`; returns (passed, failed, skipped).
fn count(log: &str) -> (u32, u32, u32) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cargo-test.log");
    std::fs::write(&file, log).expect("write log");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/test-count.sh");
    let output = Command::new("bash")
        .arg("-c")
        .arg("set -euo pipefail; source \"$1\"; count_cargo_log \"$2\"")
        .arg("count")
        .arg(&script)
        .arg(&file)
        .output()
        .expect("bash runs");
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let numbers: Vec<u32> = text
        .split_whitespace()
        .map(|n| n.parse().expect("a number"))
        .collect();
    assert_eq!(numbers.len(), 3, "{text}");
    (numbers[0], numbers[1], numbers[2])
}

/// A binary of three tests whose last one re-runs the binary as nobody (failing there once)
/// and shows that output indented, as `tests/sandbox_support` does.
const NESTED: &str = "\
     Running tests/sandbox_runner.rs (target/debug/deps/sandbox_runner-0)

running 3 tests
test a ... ok
test b ... ok
--- runner suite as nobody ---
    [as nobody]
    [as nobody] running 2 tests
    [as nobody] test a ... ok
    [as nobody] test b ... FAILED
    [as nobody] SKIPPED: a: not root
    [as nobody]
    [as nobody] test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 1 filtered out; finished in 0.1s
test suite_passes_as_an_unprivileged_user ... FAILED

failures:

---- suite_passes_as_an_unprivileged_user stdout ----
runner suite failed as nobody:
    [as nobody] test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 1 filtered out; finished in 0.1s

test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.0s

     Running tests/other.rs (target/debug/deps/other-0)

running 4 tests
test one ... ok
SKIPPED: two: PINCER_EMBED_MODEL_DIR is not set
test two ... ok
test three ... SKIPPED: three: no Landlock here
ok
SKIPPED: three: no Landlock here
test four ... ok

test result: ok. 4 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.5s

   Doc-tests pincer

running 0 tests

test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.0s
";

#[test]
fn each_test_counts_once_and_nested_output_not_at_all() {
    assert_eq!(count(NESTED), (2 + 2, 1, 2));
}

#[test]
fn a_skipped_test_counts_as_skipped_not_passed_once_per_binary() {
    let log = "\
     Running a
SKIPPED: x: reason
test x ... ok
test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0s
     Running b
SKIPPED: x: reason
test x ... ok
test y ... ok
test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0s
";
    assert_eq!(count(log), (1, 0, 2));
}

#[test]
fn lines_that_only_mention_a_skip_are_not_skips() {
    let log = "\
     Running a
test every_skipped_path_is_gone ... ok
NOTE x: not root, SKIPPED: y: maybe
    SKIPPED: z: indented, a nested run's
test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0s
";
    assert_eq!(count(log), (1, 0, 0));
}
