//! The workspace files a turn's system prompt is made of (the bootstrap files and the skills' headers), kept
//! between turns while none of them changed, so a turn costs a few `stat` calls instead of opening and reading
//! every file.
//!
//! A kept copy is checked before each use against the stamps (device, inode, size, mtime, ctime) of every
//! path it was read from: the workspace directory, each bootstrap file found, the `skills` directory, each
//! skill folder and each SKILL.md. A file created, removed or renamed changes its directory's stamp, so names
//! that were missing need no check of their own. A copy whose stamps are younger than `RACY_WINDOW_MS` is not
//! kept: a file written twice within one timestamp tick, at the same size, would otherwise look unchanged.
//!
//! The cache holds at most `MAX_KEPT` copies (one per workspace, bootstrap limits and first-run flag), each
//! bounded by `bootstrapTotalMaxChars` and the skill limits. It never writes the workspace.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::prompt::{self, BootstrapFile, BootstrapLimits};
use super::skills::{self, Skill};

/// Copies kept at most (a workspace has two: first run and later runs).
const MAX_KEPT: usize = 8;
/// A file changed this recently (by its mtime or ctime) is read again next turn instead of trusted.
const RACY_WINDOW_MS: i64 = 2_000;

/// The workspace files of one prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptFiles {
    pub bootstrap: Vec<BootstrapFile>,
    /// Every skill found, before the agent's allowlist.
    pub skills: Vec<Skill>,
}

/// What identifies a path's content without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let meta = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
            ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
        })
    }

    fn changed_after_ms(&self, since_ms: i64) -> bool {
        self.mtime_ns.max(self.ctime_ns) / 1_000_000 >= since_ms
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    workspace: PathBuf,
    first_run: bool,
    limits: BootstrapLimits,
}

struct Kept {
    key: Key,
    files: Arc<PromptFiles>,
    stamps: Arc<[(PathBuf, Stamp)]>,
}

/// Kept copies of workspaces' prompt files.
pub struct PromptFileCache {
    kept: Mutex<Vec<Kept>>,
    racy_window_ms: i64,
}

/// The gateway's cache (every turn of this process goes through it).
pub static PROMPT_FILES: PromptFileCache = PromptFileCache::new(RACY_WINDOW_MS);

impl PromptFileCache {
    const fn new(racy_window_ms: i64) -> PromptFileCache {
        PromptFileCache {
            kept: Mutex::new(Vec::new()),
            racy_window_ms,
        }
    }

    /// The workspace's bootstrap files (capped by `limits`, BOOTSTRAP.md only on a first run) and its skills:
    /// the kept copy when every stamp still matches, else read again.
    pub fn load(
        &self,
        workspace: &Path,
        first_run: bool,
        limits: BootstrapLimits,
    ) -> Arc<PromptFiles> {
        let key = Key {
            workspace: workspace.to_path_buf(),
            first_run,
            limits,
        };
        let kept = self
            .kept
            .lock()
            .iter()
            .find(|kept| kept.key == key)
            .map(|kept| (kept.files.clone(), kept.stamps.clone()));
        if let Some((files, stamps)) = kept {
            if stamps
                .iter()
                .all(|(path, stamp)| Stamp::of(path).as_ref() == Some(stamp))
            {
                return files;
            }
        }
        let (files, stamps) = read(workspace, first_run, limits);
        let files = Arc::new(files);
        let racy_since = crate::system::clock::now_ms() as i64 - self.racy_window_ms;
        if stamps.iter().all(|(_, s)| !s.changed_after_ms(racy_since)) {
            let mut kept = self.kept.lock();
            kept.retain(|k| k.key != key);
            if kept.len() >= MAX_KEPT {
                kept.remove(0);
            }
            kept.push(Kept {
                key,
                files: files.clone(),
                stamps: stamps.into(),
            });
        }
        files
    }
}

/// Reads the files, stamping every path first: a change during the read shows at the next check.
fn read(
    workspace: &Path,
    first_run: bool,
    limits: BootstrapLimits,
) -> (PromptFiles, Vec<(PathBuf, Stamp)>) {
    let mut stamps = Vec::new();
    let mut stamp = |path: PathBuf| {
        let found = Stamp::of(&path);
        if let Some(found) = found {
            stamps.push((path, found));
        }
        found.is_some()
    };
    stamp(workspace.to_path_buf());
    for name in prompt::BOOTSTRAP_FILES {
        stamp(workspace.join(name));
    }
    let skills_dir = workspace.join(skills::SKILLS_DIR);
    if stamp(skills_dir.clone()) {
        for folder in skills::folders(&skills_dir) {
            stamp(folder.join(skills::SKILL_FILE));
            stamp(folder);
        }
    }
    let files = PromptFiles {
        bootstrap: prompt::load_bootstrap(workspace, first_run, limits),
        skills: skills::discover(workspace, None),
    };
    (files, stamps)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: BootstrapLimits = BootstrapLimits {
        max_chars: prompt::DEFAULT_BOOTSTRAP_MAX_CHARS,
        total_max_chars: prompt::DEFAULT_BOOTSTRAP_TOTAL_MAX_CHARS,
    };

    /// A cache that trusts stamps at once (the tests change files faster than any racy window).
    fn trusting() -> PromptFileCache {
        PromptFileCache::new(0)
    }

    /// Lets the file system's clock move on before the next change: kernels without fine-grained
    /// timestamps stamp files in ticks of up to 10 ms (the racy window covers that outside the tests).
    fn tick() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    /// Loads once the file system's clock has moved past the last change, and checks the copy is kept.
    fn settled(cache: &PromptFileCache, workspace: &Path, first_run: bool) -> Arc<PromptFiles> {
        tick();
        let read = cache.load(workspace, first_run, LIMITS);
        let again = cache.load(workspace, first_run, LIMITS);
        assert!(
            Arc::ptr_eq(&read, &again),
            "an unchanged workspace is not read again"
        );
        again
    }

    fn texts(files: &PromptFiles) -> Vec<(&str, &str)> {
        files
            .bootstrap
            .iter()
            .map(|f| (f.name, f.content.as_str()))
            .collect()
    }

    fn skills_of(files: &PromptFiles) -> Vec<(&str, &str)> {
        files
            .skills
            .iter()
            .map(|s| (s.name.as_str(), s.description.as_str()))
            .collect()
    }

    fn write_skill(workspace: &Path, name: &str, description: &str) -> PathBuf {
        let folder = workspace.join(skills::SKILLS_DIR).join(name);
        std::fs::create_dir_all(&folder).expect("skill folder");
        let path = folder.join(skills::SKILL_FILE);
        let text = format!("---\nname: {name}\ndescription: {description}\n---\nbody\n");
        std::fs::write(&path, text).expect("write skill");
        path
    }

    #[test]
    fn an_unchanged_workspace_is_not_read_again() {
        let cache = trusting();
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("AGENTS.md"), "rules").expect("write");
        write_skill(dir.path(), "weather", "forecasts");
        tick();
        let first = cache.load(dir.path(), false, LIMITS);
        let again = cache.load(dir.path(), false, LIMITS);
        assert!(Arc::ptr_eq(&first, &again), "the kept copy is reused");
        assert_eq!(texts(&again), vec![("AGENTS.md", "rules")]);
        assert_eq!(skills_of(&again), vec![("weather", "forecasts")]);
    }

    #[test]
    fn edited_created_and_removed_bootstrap_files_are_read_again() {
        let cache = trusting();
        let dir = tempfile::tempdir().expect("tempdir");
        let agents = dir.path().join("AGENTS.md");
        std::fs::write(&agents, "rules").expect("write");
        assert_eq!(
            texts(&settled(&cache, dir.path(), false)),
            vec![("AGENTS.md", "rules")]
        );
        // Same size, new content, in place: the file's own stamp tells.
        std::fs::write(&agents, "RULES").expect("edit");
        assert_eq!(
            texts(&settled(&cache, dir.path(), false)),
            vec![("AGENTS.md", "RULES")]
        );
        std::fs::write(dir.path().join("SOUL.md"), "calm").expect("create");
        assert_eq!(
            texts(&settled(&cache, dir.path(), false)),
            vec![("AGENTS.md", "RULES"), ("SOUL.md", "calm")]
        );
        std::fs::remove_file(&agents).expect("remove");
        assert_eq!(
            texts(&settled(&cache, dir.path(), false)),
            vec![("SOUL.md", "calm")]
        );
    }

    #[test]
    fn a_file_replaced_by_rename_is_read_again() {
        let cache = trusting();
        let dir = tempfile::tempdir().expect("tempdir");
        let agents = dir.path().join("AGENTS.md");
        std::fs::write(&agents, "old").expect("write");
        assert_eq!(
            texts(&settled(&cache, dir.path(), false)),
            vec![("AGENTS.md", "old")]
        );
        // How editors save: a new file renamed over the old one.
        let fresh = dir.path().join(".AGENTS.md.swp");
        std::fs::write(&fresh, "new").expect("write the new copy");
        std::fs::rename(&fresh, &agents).expect("rename over");
        assert_eq!(
            texts(&settled(&cache, dir.path(), false)),
            vec![("AGENTS.md", "new")]
        );
    }

    #[test]
    fn skills_added_edited_and_removed_are_seen() {
        let cache = trusting();
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(settled(&cache, dir.path(), false).skills.is_empty());
        let weather = write_skill(dir.path(), "weather", "forecasts");
        assert_eq!(
            skills_of(&settled(&cache, dir.path(), false)),
            vec![("weather", "forecasts")]
        );
        std::fs::write(
            &weather,
            "---\nname: weather\ndescription: rain radar\n---\n",
        )
        .expect("edit skill");
        assert_eq!(
            skills_of(&settled(&cache, dir.path(), false)),
            vec![("weather", "rain radar")]
        );
        write_skill(dir.path(), "alarm", "wakes you");
        assert_eq!(
            skills_of(&settled(&cache, dir.path(), false)),
            vec![("alarm", "wakes you"), ("weather", "rain radar")]
        );
        std::fs::remove_file(&weather).expect("remove skill file");
        assert_eq!(
            skills_of(&settled(&cache, dir.path(), false)),
            vec![("alarm", "wakes you")]
        );
    }

    #[test]
    fn the_first_run_file_only_comes_with_a_first_run() {
        let cache = trusting();
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("BOOTSTRAP.md"), "hello").expect("write");
        assert_eq!(
            texts(&settled(&cache, dir.path(), true)),
            vec![("BOOTSTRAP.md", "hello")]
        );
        assert!(texts(&settled(&cache, dir.path(), false)).is_empty());
        assert_eq!(
            texts(&settled(&cache, dir.path(), true)),
            vec![("BOOTSTRAP.md", "hello")]
        );
    }

    #[test]
    fn files_changed_within_the_racy_window_are_not_trusted() {
        let cache = PromptFileCache::new(RACY_WINDOW_MS);
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("AGENTS.md"), "rules").expect("write");
        let first = cache.load(dir.path(), false, LIMITS);
        let again = cache.load(dir.path(), false, LIMITS);
        assert!(
            !Arc::ptr_eq(&first, &again),
            "a just-written file is read again"
        );
        assert_eq!(texts(&again), vec![("AGENTS.md", "rules")]);
    }

    #[test]
    fn the_cache_keeps_a_bounded_number_of_copies() {
        let cache = trusting();
        let dirs: Vec<_> = (0..MAX_KEPT + 3)
            .map(|_| tempfile::tempdir().expect("tempdir"))
            .collect();
        tick();
        for dir in &dirs {
            cache.load(dir.path(), false, LIMITS);
        }
        assert_eq!(cache.kept.lock().len(), MAX_KEPT);
    }
}
