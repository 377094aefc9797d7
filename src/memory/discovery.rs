//! Which files are memory: the workspace's `MEMORY.md` / `memory.md`, every `.md` under `memory/`, and the
//! configured `extraPaths` (files or folders, `.md` only), as upstream does.
//!
//! Walks are bounded (depth, file count), skip hidden entries and never follow symlinked folders, so a link
//! loop or a huge tree cannot stall indexing. This file must not read file contents.

use std::path::{Path, PathBuf};

/// Deepest folder level walked below a memory root.
pub const MAX_WALK_DEPTH: usize = 16;
/// Most memory files indexed per agent; the rest are skipped with a warning.
pub const MAX_MEMORY_FILES: usize = 20_000;

/// One file to index: where it is and the path it is cited under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryFile {
    pub absolute: PathBuf,
    /// Relative to the workspace for workspace files, absolute for extra paths.
    pub cited_path: String,
}

fn is_markdown(path: &Path) -> bool {
    path.extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("md"))
}

fn is_hidden(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
}

fn cited(workspace: &Path, path: &Path) -> String {
    match path.strip_prefix(workspace) {
        Ok(relative) => relative.to_string_lossy().into_owned(),
        Err(_) => path.to_string_lossy().into_owned(),
    }
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if depth > MAX_WALK_DEPTH || out.len() >= MAX_MEMORY_FILES {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if is_hidden(&path) {
            continue;
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            walk(&path, depth + 1, out);
        } else if is_markdown(&path) && (meta.is_file() || path.is_file()) {
            if out.len() >= MAX_MEMORY_FILES {
                log::warn!("memory: more than {MAX_MEMORY_FILES} files; the rest are not indexed");
                return;
            }
            out.push(path);
        }
    }
}

/// The memory files of `workspace` plus `extra_paths` (relative ones resolved against the workspace), sorted
/// and without duplicates.
pub fn discover(workspace: &Path, extra_paths: &[String]) -> Vec<MemoryFile> {
    let mut found = Vec::new();
    for name in ["MEMORY.md", "memory.md"] {
        let path = workspace.join(name);
        if path.is_file() {
            found.push(path);
        }
    }
    walk(&workspace.join("memory"), 0, &mut found);
    for extra in extra_paths {
        let path = workspace.join(extra);
        if path.is_dir() {
            walk(&path, 0, &mut found);
        } else if path.is_file() && is_markdown(&path) {
            found.push(path);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut files = Vec::new();
    for path in found {
        // Case-insensitive file systems may list MEMORY.md twice; the canonical path dedupes.
        let key = path.canonicalize().unwrap_or_else(|_| path.clone());
        if seen.insert(key) {
            files.push(MemoryFile {
                cited_path: cited(workspace, &path),
                absolute: path,
            });
        }
    }
    files.sort_by(|a, b| a.cited_path.cmp(&b.cited_path));
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_memory_md_notes_and_extra_paths_but_not_other_files() {
        let dir = tempfile::tempdir().expect("dir");
        let ws = dir.path();
        std::fs::write(ws.join("MEMORY.md"), "# m").expect("write");
        std::fs::create_dir_all(ws.join("memory/2024")).expect("mkdir");
        std::fs::write(ws.join("memory/2024/01-02.md"), "a").expect("write");
        std::fs::write(ws.join("memory/notes.txt"), "no").expect("write");
        std::fs::write(ws.join("memory/.hidden.md"), "no").expect("write");
        std::fs::create_dir_all(ws.join("docs")).expect("mkdir");
        std::fs::write(ws.join("docs/x.md"), "x").expect("write");
        std::fs::write(ws.join("README.md"), "not memory").expect("write");
        let files = discover(ws, &["docs".to_string()]);
        let cited: Vec<&str> = files.iter().map(|f| f.cited_path.as_str()).collect();
        assert_eq!(cited, ["MEMORY.md", "docs/x.md", "memory/2024/01-02.md"]);
    }
}
