//! OpenClaw's own example configs from its documentation (`tests/fixtures/openclaw-docs/`, each as
//! the docs have it, with its source in a header comment) through the real `pincer` binary: `config
//! check` accepts the block or names its first key pincer lacks as "not supported by pincer" (never an
//! "unknown key"); `config import-openclaw` drops only such keys, each named the same way; the result
//! passes `config check`, and every key it keeps is one `pincer config keys` (the register) lists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openclaw-docs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("fixtures")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json5"))
        .collect();
    files.sort();
    files
}

/// `pincer <args>`, every `${NAME}` the fixture names set (to a placeholder), no other config around.
fn pincer(args: &[&str], fixture_text: &str, home: &Path) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pincer"));
    command
        .args(args)
        .env("HOME", home)
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_DATA_DIR");
    let mut rest = fixture_text;
    while let Some(at) = rest.find("${") {
        let name: String = rest[at + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        command.env(&name, format!("placeholder-{name}"));
        rest = &rest[at + 2..];
    }
    command.output().expect("run pincer")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Register keys as patterns: `*` one map key, `[]` one list element.
fn matches(pattern: &str, path: &str) -> bool {
    fn go(pattern: &[u8], path: &[u8]) -> bool {
        match pattern {
            [] => path.is_empty(),
            [b'*', rest @ ..] => (1..=path.len())
                .take_while(|&n| path[n - 1] != b'[')
                .any(|n| go(rest, &path[n..])),
            [b'[', b']', rest @ ..] => {
                let Some(after) = path.strip_prefix(b"[") else {
                    return false;
                };
                let digits = after.iter().take_while(|b| b.is_ascii_digit()).count();
                digits > 0 && after.get(digits) == Some(&b']') && go(rest, &after[digits + 1..])
            }
            [first, rest @ ..] => path.first() == Some(first) && go(rest, &path[1..]),
        }
    }
    go(pattern.as_bytes(), path.as_bytes())
}

/// The leaf paths of a JSON value (`a.b`, `a.list[0].c`); an empty object (all its keys dropped)
/// holds none.
fn leaves(value: &Value, path: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) if map.is_empty() => {}
        Value::Object(map) => {
            for (key, inner) in map {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                leaves(inner, child, out);
            }
        }
        Value::Array(items) if items.iter().any(|i| i.is_object() || i.is_array()) => {
            for (i, inner) in items.iter().enumerate() {
                leaves(inner, format!("{path}[{i}]"), out);
            }
        }
        _ => out.push(path),
    }
}

/// `path` or one of its ancestors (a key whose value is read whole) is a register key.
fn registered(register: &[String], path: &str) -> bool {
    let mut candidate = path.to_string();
    loop {
        if register.iter().any(|key| matches(key, &candidate)) {
            return true;
        }
        let cut = match (candidate.rfind('.'), candidate.rfind('[')) {
            (Some(dot), Some(bracket)) => dot.max(bracket),
            (Some(at), None) | (None, Some(at)) => at,
            (None, None) => return false,
        };
        candidate.truncate(cut);
    }
}

#[test]
fn openclaws_example_configs_are_accepted_or_named_unsupported_key_by_key() {
    let files = fixtures();
    assert!(files.len() >= 10, "{} fixtures", files.len());
    let home = tempfile::tempdir().expect("home");
    let keys = pincer(&["config", "keys"], "", home.path());
    assert!(keys.status.success(), "{}", text(&keys));
    let register: Vec<String> = String::from_utf8_lossy(&keys.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(register.len() > 300, "{} register keys", register.len());
    let mut sections = BTreeSet::new();
    for file in &files {
        let name = file.display().to_string();
        let source = std::fs::read_to_string(file).expect("fixture");
        assert!(
            source.starts_with("// OpenClaw's own example config"),
            "{name}: no source header"
        );

        let checked = pincer(
            &["config", "check", "--config", &name],
            &source,
            home.path(),
        );
        let said = text(&checked);
        assert!(!said.contains("unknown key"), "{name}: {said}");
        assert!(
            checked.status.success() || said.contains("is not supported by pincer"),
            "{name}: neither accepted nor a key named as not supported: {said}"
        );

        let imported = home.path().join("imported.json5");
        let out = imported.display().to_string();
        let import = pincer(
            &["config", "import-openclaw", &name, "--output", &out],
            &source,
            home.path(),
        );
        let report = text(&import);
        assert!(import.status.success(), "{name}: {report}");
        for line in report
            .lines()
            .filter(|l| l.starts_with("not carried over: "))
        {
            assert!(
                line.contains(": not supported by pincer"),
                "{name}: a key dropped for another reason: {line}"
            );
        }
        assert_eq!(
            checked.status.success(),
            !report.contains("not carried over: "),
            "{name}: check and import disagree: {said} / {report}"
        );

        let rechecked = pincer(&["config", "check", "--config", &out], &source, home.path());
        assert!(
            rechecked.status.success(),
            "{name}: the import does not check: {}",
            text(&rechecked)
        );
        let kept: Value = json5::from_str(&std::fs::read_to_string(&imported).expect("imported"))
            .expect("imported JSON");
        let mut paths = Vec::new();
        leaves(&kept, String::new(), &mut paths);
        for path in paths.iter().filter(|p| !p.is_empty()) {
            assert!(
                registered(&register, path),
                "{name}: {path} is accepted but not in the register"
            );
            sections.insert(path.split('.').take(2).collect::<Vec<_>>().join("."));
        }
    }
    for section in [
        "gateway.auth",
        "channels.telegram",
        "channels.discord",
        "channels.slack",
        "agents.defaults",
        "tools.exec",
        "session.reset",
        "cron.enabled",
        "memory.search",
    ] {
        assert!(
            sections.contains(section),
            "no fixture keeps a {section} key: {sections:?}"
        );
    }
}
