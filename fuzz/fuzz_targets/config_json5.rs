//! Config text (JSON5), as read from the config file or sent by `config.set`/`config.apply`: parsed, `${VAR}`
//! substituted (from a fixed environment), typed and validated. Properties: no panic; an error names where
//! (origin, and line/column for syntax); heap use stays linear in the text's size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pincer::config::{parse_str_with_env, ConfigError};
use pincer_fuzz::{linear_budget, within_budget};

fn env(name: &str) -> Option<String> {
    (name == "PINCER_FUZZ").then(|| "value".to_string())
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let budget = linear_budget(text.len(), 128, 256 * 1024);
    within_budget("config parse", budget, || {
        if let Err(error) = parse_str_with_env(text, "fuzz.json5", &env) {
            let message = error.to_string();
            assert!(
                message.contains("fuzz.json5"),
                "error without its origin: {message}"
            );
            if let ConfigError::Syntax { line, column, .. } = error {
                assert!(line >= 1 && column >= 1, "syntax error at {line}:{column}");
            }
        }
    });
});
