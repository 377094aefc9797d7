//! `pincer memory index | status | search` as a user runs them: real model, a small workspace, then the
//! same commands with the runtime missing (keyword-only, said plainly).

mod memory_support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn pincer(dir: &Path, args: &[&str], ort: &Path, model: &Path) -> Output {
    let config = dir.join("pincer.json5");
    let workspace = dir.join("workspace");
    std::fs::write(
        &config,
        format!(
            "{{ agents: {{ defaults: {{ workspace: \"{}\" }} }} }}",
            workspace.display()
        ),
    )
    .expect("config");
    Command::new(env!("CARGO_BIN_EXE_pincer"))
        .arg("--config")
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--log-level", "warn"])
        .args(args)
        .env("PINCER_ORT_DYLIB", ort)
        .env("PINCER_EMBED_MODEL_DIR", model)
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_DATA_DIR")
        .output()
        .expect("run pincer")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "pincer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn index_status_and_search_from_the_command_line() {
    let dir = tempfile::tempdir().expect("dir");
    let settings = memory_support::embedder_settings(Duration::from_secs(300));
    let (ort, model) = (settings.runtime_library, settings.model_dir);
    memory_support::write_note(
        dir.path(),
        "MEMORY.md",
        "# Home\n\nThe spare key is under the blue flowerpot.\n",
    );
    memory_support::write_note(
        dir.path(),
        "memory/2026-02-01.md",
        "Booked the ferry to the island for March.\n",
    );

    let index = stdout(&pincer(dir.path(), &["memory", "index"], &ort, &model));
    assert!(index.contains("indexed 2 of 2 files"), "{index}");
    let again = stdout(&pincer(dir.path(), &["memory", "index"], &ort, &model));
    assert!(
        again.contains("indexed 0 of 2 files (2 unchanged"),
        "{again}"
    );
    let forced = stdout(&pincer(
        dir.path(),
        &["memory", "index", "--force"],
        &ort,
        &model,
    ));
    assert!(
        forced.contains("indexed 2 of 2 files") && forced.contains("2 from cache"),
        "{forced}"
    );

    let status = stdout(&pincer(
        dir.path(),
        &["memory", "status", "--json"],
        &ort,
        &model,
    ));
    let status: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    assert_eq!(status["files"], 2);
    assert_eq!(status["vectors"], 2);
    assert_eq!(status["model"], "all-MiniLM-L6-v2:384");
    assert_eq!(status["lastSync"]["filesIndexed"], 2, "{status}");
    assert!(status["lastSyncMs"].as_u64().is_some(), "{status}");

    let found = stdout(&pincer(
        dir.path(),
        &["memory", "search", "where did I hide the house key"],
        &ort,
        &model,
    ));
    assert!(found.contains("MEMORY.md:1-3"), "{found}");

    let missing = Path::new("/nonexistent/libonnxruntime.so");
    let fallback = stdout(&pincer(
        dir.path(),
        &["memory", "search", "ferry island"],
        missing,
        &model,
    ));
    assert!(fallback.contains("keyword-only"), "{fallback}");
    assert!(fallback.contains("memory/2026-02-01.md"), "{fallback}");
}

/// After `scripts/setup memory` (which installs under `~/.local/share/pincer/onnx`), the CLI uses the local
/// model with no `PINCER_*` variable set.
#[test]
fn the_local_model_is_found_under_the_data_home_without_variables() {
    let dir = tempfile::tempdir().expect("dir");
    let settings = memory_support::embedder_settings(Duration::from_secs(300));
    let assets = dir.path().join("home/.local/share/pincer/onnx");
    std::fs::create_dir_all(assets.join("lib")).expect("asset dirs");
    let library_name = settings.runtime_library.file_name().expect("library name");
    std::os::unix::fs::symlink(
        &settings.runtime_library,
        assets.join("lib").join(library_name),
    )
    .expect("link the runtime");
    std::os::unix::fs::symlink(&settings.model_dir, assets.join("all-MiniLM-L6-v2"))
        .expect("link the model");
    memory_support::write_note(
        dir.path(),
        "MEMORY.md",
        "The spare key is under the flowerpot.\n",
    );
    let config = dir.path().join("pincer.json5");
    std::fs::write(
        &config,
        format!(
            "{{ agents: {{ defaults: {{ workspace: \"{}\" }} }} }}",
            dir.path().join("workspace").display()
        ),
    )
    .expect("config");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pincer"))
            .arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--log-level", "warn"])
            .args(args)
            .env("HOME", dir.path().join("home"))
            .env_remove("XDG_DATA_HOME")
            .env_remove("PINCER_ORT_DYLIB")
            .env_remove("PINCER_EMBED_MODEL_DIR")
            .env_remove("PINCER_CONFIG")
            .env_remove("PINCER_DATA_DIR")
            .output()
            .expect("run pincer")
    };
    let index = stdout(&run(&["memory", "index"]));
    assert!(!index.contains("keyword-only"), "{index}");
    let status: serde_json::Value =
        serde_json::from_str(&stdout(&run(&["memory", "status", "--json"]))).expect("status JSON");
    assert_eq!(status["model"], "all-MiniLM-L6-v2:384", "{status}");
    assert_eq!(status["vectors"], 1, "{status}");
}

/// Not on a terminal (here a pipe), `memory index` reports progress as plain lines on stderr, one per
/// tenth of the files and the last, with no carriage returns of a redrawn bar.
#[test]
fn index_progress_is_plain_lines_when_not_a_terminal() {
    let dir = tempfile::tempdir().expect("dir");
    for n in 1..=20 {
        memory_support::write_note(
            dir.path(),
            &format!("memory/2026-03-{n:02}.md"),
            &format!("Day {n}: watered the tomatoes and fixed fence post {n}.\n"),
        );
    }
    // No embedding runtime: keyword-only indexing, which reports progress the same way.
    let missing = Path::new("/nonexistent/libonnxruntime.so");
    let out = pincer(dir.path(), &["memory", "index"], missing, missing);
    let index = stdout(&out);
    assert!(index.contains("indexed 20 of 20 files"), "{index}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains('\r'), "{stderr:?}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("indexing: "))
        .collect();
    assert_eq!(lines.len(), 11, "{stderr}");
    assert!(lines[0].starts_with("indexing: 1/20 files"), "{stderr}");
    assert!(lines[10].starts_with("indexing: 20/20 files"), "{stderr}");
}
