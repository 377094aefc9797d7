//! The agent's workspace: OpenClaw's (`agents.defaults.workspace` in its config, else
//! `<state>/workspace`) is copied into pincer's workspace for the default agent, or, with
//! `--reference-workspace`, used in place by pointing `agents.defaults.workspace` at it.
//!
//! A copy never overwrites: a file pincer's workspace already has is left as it is (counted as
//! present, or as differing when its bytes differ). Symbolic links and special files are reported.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{ImportOptions, Report};
use crate::config::Config;

/// Differing files named in the report; the rest are counted.
const NAMED_DIFFERENCES: usize = 5;

/// `~/…` under `$HOME`.
pub fn expand_home(path: &Path) -> PathBuf {
    match (path.strip_prefix("~"), std::env::var_os("HOME")) {
        (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => path.to_path_buf(),
    }
}

/// OpenClaw's workspace directory, when it exists.
pub fn source(state: &Path, openclaw: Option<&(String, Value)>) -> Option<PathBuf> {
    let configured = openclaw
        .and_then(|(_, value)| value["agents"]["defaults"]["workspace"].as_str())
        .filter(|p| !p.trim().is_empty())
        .map(|p| expand_home(Path::new(p.trim())));
    let dir = configured.unwrap_or_else(|| state.join("workspace"));
    dir.is_dir().then_some(dir)
}

/// In the converted config: the workspace key points at OpenClaw's workspace (reference), or is
/// removed so pincer's own default is used and the copy lands there.
pub fn point_config(config: &mut Value, reference: bool, source: &Option<PathBuf>) {
    let Some(agents) = config.as_object_mut().map(|c| {
        c.entry("agents")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .map(|a| a.entry("defaults").or_insert_with(|| json!({})))
    }) else {
        return;
    };
    let Some(defaults) = agents.and_then(Value::as_object_mut) else {
        return;
    };
    match (reference, source) {
        (true, Some(dir)) => {
            defaults.insert("workspace".into(), json!(dir.display().to_string()));
        }
        _ => {
            defaults.remove("workspace");
        }
    }
}

/// Copies or references the workspace, by the options and the pincer config in force.
pub fn import(
    options: &ImportOptions,
    source: &Option<PathBuf>,
    config: Option<&Config>,
    report: &mut Report,
) {
    let Some(source) = source else {
        return;
    };
    let default = Config::default();
    let config = config.unwrap_or(&default);
    let agent = config.agents.default_agent_id();
    let destination = crate::memory::workspace_for(config, &agent, &options.data_dir);
    if options.reference_workspace {
        let what = format!("workspace {}", source.display());
        if same_dir(&destination, source) {
            report.imported(&what, "referenced by agents.defaults.workspace".into());
        } else {
            report.failed(
                &what,
                format!(
                    "not referenced: pincer's config already exists and uses {}; set agents.defaults.workspace to {} there",
                    destination.display(),
                    source.display()
                ),
            );
        }
        return;
    }
    if same_dir(&destination, source) {
        report.present(&format!(
            "workspace {} (pincer already uses it)",
            source.display()
        ));
        return;
    }
    let what = format!("workspace {} → {}", source.display(), destination.display());
    let mut tally = Tally::default();
    if let Err(e) = copy_tree(source, &destination, &mut tally) {
        report.failed(&what, e);
        return;
    }
    let mut notes = Vec::new();
    if tally.differ > 0 {
        notes.push(format!(
            "{} files differ from pincer's and were left as they are ({})",
            tally.differ,
            tally.differing.join(", ")
        ));
    }
    if !tally.special.is_empty() {
        notes.push(format!(
            "symbolic links and special files not copied: {}",
            tally.special.join(", ")
        ));
    }
    if tally.copied == 0 {
        if notes.is_empty() {
            report.present(&what);
        } else {
            report.failed(&what, notes.join("; "));
        }
        return;
    }
    let mut note = format!("{} files copied", tally.copied);
    if tally.present > 0 {
        note.push_str(&format!(", {} already present", tally.present));
    }
    for extra in notes {
        note.push_str("; ");
        note.push_str(&extra);
    }
    report.imported(&what, note);
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[derive(Default)]
struct Tally {
    copied: u64,
    present: u64,
    differ: u64,
    differing: Vec<String>,
    special: Vec<String>,
}

/// Copies files `from` → `to` that `to` lacks; never overwrites.
fn copy_tree(from: &Path, to: &Path, tally: &mut Tally) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let listing =
        std::fs::read_dir(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    let mut entries: Vec<_> = listing.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let source = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry
            .file_type()
            .map_err(|e| format!("cannot read {}: {e}", source.display()))?;
        if kind.is_dir() {
            copy_tree(&source, &target, tally)?;
        } else if !kind.is_file() {
            tally.special.push(source.display().to_string());
        } else if target.exists() {
            if same_bytes(&source, &target) {
                tally.present += 1;
            } else {
                tally.differ += 1;
                if tally.differing.len() < NAMED_DIFFERENCES {
                    tally.differing.push(target.display().to_string());
                }
            }
        } else {
            std::fs::copy(&source, &target).map_err(|e| {
                format!(
                    "cannot copy {} to {}: {e}",
                    source.display(),
                    target.display()
                )
            })?;
            tally.copied += 1;
        }
    }
    Ok(())
}

/// Whether two files hold the same bytes, read in blocks.
fn same_bytes(a: &Path, b: &Path) -> bool {
    use std::io::Read;
    let (Ok(mut fa), Ok(mut fb)) = (std::fs::File::open(a), std::fs::File::open(b)) else {
        return false;
    };
    let (Ok(ma), Ok(mb)) = (fa.metadata(), fb.metadata()) else {
        return false;
    };
    if ma.len() != mb.len() {
        return false;
    }
    let mut ba = vec![0u8; 64 * 1024];
    let mut bb = vec![0u8; 64 * 1024];
    loop {
        let Ok(n) = fa.read(&mut ba) else {
            return false;
        };
        if n == 0 {
            return true;
        }
        if fb.read_exact(&mut bb[..n]).is_err() || ba[..n] != bb[..n] {
            return false;
        }
    }
}
