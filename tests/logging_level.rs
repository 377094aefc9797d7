//! `logging.level` sets how much the gateway logs, as upstream; the
//! `--log-level` flag, when given, wins over it.

mod support;

use support::gateway::GatewayProcess;

const TOKEN: &str = "logging-level-test-token";

fn info_lines(stderr: &str) -> usize {
    stderr
        .lines()
        .filter(|line| line.contains(" INFO "))
        .count()
}

#[test]
fn logging_level_warn_silences_info_lines() {
    let mut quiet = GatewayProcess::start(
        "{ logging: { level: 'warn' } }",
        &["--port", "0", "--token", TOKEN],
    );
    quiet.terminate();
    let stderr = quiet.stderr();
    assert_eq!(
        info_lines(&stderr),
        0,
        "info lines despite level warn:\n{stderr}"
    );

    let mut chatty = GatewayProcess::start("{}", &["--port", "0", "--token", TOKEN]);
    chatty.terminate();
    assert!(
        info_lines(&chatty.stderr()) > 0,
        "the default level logs info lines"
    );
}

#[test]
fn log_level_flag_wins_over_the_config() {
    let mut flagged = GatewayProcess::start(
        "{ logging: { level: 'warn' } }",
        &["--port", "0", "--token", TOKEN, "--log-level", "info"],
    );
    flagged.terminate();
    assert!(info_lines(&flagged.stderr()) > 0, "{}", flagged.stderr());
}
