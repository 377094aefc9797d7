//! Hot reload against a real file: an edit is applied, a broken edit is
//! rejected with the offending path (and the watcher keeps going), a file
//! replaced by rename is picked up, and the mode is the file's own: `restart`
//! reports every change as needing a restart, and a change made while `off`
//! is not applied.

use std::path::Path;
use std::time::Duration;

use pincer::config::{load, spawn_watcher, write_atomic, ConfigError, ReloadEvent};
use tokio::sync::mpsc::Receiver;

/// Upper bound for one event to arrive; a hang guard, not a timing claim.
const EVENT_WAIT: Duration = Duration::from_secs(20);

async fn next_event(events: &mut Receiver<ReloadEvent>) -> ReloadEvent {
    tokio::time::timeout(EVENT_WAIT, events.recv())
        .await
        .expect("no reload event in time")
        .expect("watcher stopped")
}

fn config_text(port: u16, timeout_seconds: u32) -> String {
    config_text_in_mode(port, timeout_seconds, "hybrid")
}

fn config_text_in_mode(port: u16, timeout_seconds: u32, mode: &str) -> String {
    format!(
        "{{\n  gateway: {{ port: {port}, reload: {{ debounceMs: 50, mode: \"{mode}\" }} }},\n  agents: {{ defaults: {{ timeoutSeconds: {timeout_seconds} }} }},\n}}\n"
    )
}

fn write_in_place(path: &Path, text: &str) {
    std::fs::write(path, text).expect("edit config in place");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_are_applied_broken_edits_rejected_and_renames_seen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pincer.json5");
    write_in_place(&path, &config_text(18789, 60));
    let loaded = load(Some(&path)).expect("initial config");
    let mut events = spawn_watcher(path.clone(), loaded);

    // A hot change: no restart needed.
    write_in_place(&path, &config_text(18789, 120));
    match next_event(&mut events).await {
        ReloadEvent::Applied {
            loaded,
            restart_required,
        } => {
            assert_eq!(loaded.config.agents.defaults.timeout_seconds, Some(120));
            assert!(restart_required.is_empty(), "{restart_required:?}");
            assert_eq!(loaded.raw, config_text(18789, 120));
        }
        other => panic!("valid edit not applied: {other:?}"),
    }

    // A broken edit names the bad key; the running config is untouched.
    write_in_place(&path, "{ gateway: { prot: 1 } }");
    match next_event(&mut events).await {
        ReloadEvent::Rejected { error } => {
            assert!(matches!(error, ConfigError::UnknownKey { .. }), "{error}");
            assert_eq!(error.json_path(), Some("gateway.prot"));
            assert!(
                error.to_string().contains("did you mean gateway.port?"),
                "{error}"
            );
        }
        other => panic!("broken config not rejected: {other:?}"),
    }

    // Replaced by rename (how editors and write_atomic save): a port change
    // needs a restart.
    write_atomic(&path, &config_text(19001, 120)).expect("replace by rename");
    match next_event(&mut events).await {
        ReloadEvent::Applied {
            loaded,
            restart_required,
        } => {
            assert_eq!(loaded.config.gateway.port, 19001);
            assert_eq!(restart_required, vec!["gateway.port".to_string()]);
        }
        other => panic!("renamed config not applied: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_mode_reports_every_change_as_needing_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pincer.json5");
    write_in_place(&path, &config_text_in_mode(18789, 60, "restart"));
    let loaded = load(Some(&path)).expect("initial config");
    let mut events = spawn_watcher(path.clone(), loaded);
    write_in_place(&path, &config_text_in_mode(18789, 90, "restart"));
    match next_event(&mut events).await {
        ReloadEvent::Applied {
            restart_required, ..
        } => {
            assert_eq!(
                restart_required,
                vec!["agents.defaults.timeoutSeconds".to_string()]
            );
        }
        other => panic!("valid edit not applied: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_made_while_off_is_not_applied() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pincer.json5");
    write_in_place(&path, &config_text_in_mode(18789, 60, "off"));
    let loaded = load(Some(&path)).expect("initial config");
    let mut events = spawn_watcher(path.clone(), loaded);
    // Seen while off: not applied, and the baseline of the next change.
    write_in_place(&path, &config_text_in_mode(19001, 60, "off"));
    match next_event(&mut events).await {
        ReloadEvent::Ignored { changed } => assert_eq!(changed, vec!["gateway.port".to_string()]),
        other => panic!("a change made while off was reported: {other:?}"),
    }
    // Turning reload on is reported: the first event names only what
    // changed after the port change.
    write_atomic(&path, &config_text_in_mode(19001, 75, "hybrid")).expect("replace by rename");
    match next_event(&mut events).await {
        ReloadEvent::Applied {
            loaded,
            restart_required,
        } => {
            assert_eq!(loaded.config.agents.defaults.timeout_seconds, Some(75));
            assert!(
                restart_required.is_empty(),
                "the port change made while off is not reported: {restart_required:?}"
            );
        }
        other => panic!("valid edit not applied: {other:?}"),
    }
}
