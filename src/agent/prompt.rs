//! System prompt assembly: identity, tools, skills, the agent workspace's
//! bootstrap files (AGENTS.md, SOUL.md, TOOLS.md, IDENTITY.md, USER.md,
//! HEARTBEAT.md, and BOOTSTRAP.md on a session's first run), the request's
//! extra instructions and a runtime line (time, host, model).
//!
//! Files are read bounded: a file over its cap is read as head and tail by
//! seeking, never whole. This file only builds text; it never writes the
//! workspace and never calls a provider.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use crate::config::{Config, WorkspaceAccess};
use crate::sandbox::SANDBOX_AGENT_WORKSPACE;

use super::skills::{self, Skill};

/// Workspace files injected into the prompt, in this order.
pub const BOOTSTRAP_FILES: [&str; 7] = [
    "AGENTS.md",
    "SOUL.md",
    "TOOLS.md",
    "IDENTITY.md",
    "USER.md",
    "HEARTBEAT.md",
    "BOOTSTRAP.md",
];
/// Only on a session's first run.
pub const FIRST_RUN_FILE: &str = "BOOTSTRAP.md";
/// Default cap of one bootstrap file (`bootstrapMaxChars`).
pub const DEFAULT_BOOTSTRAP_MAX_CHARS: usize = 20_000;
/// Default cap of all bootstrap files (`bootstrapTotalMaxChars`).
pub const DEFAULT_BOOTSTRAP_TOTAL_MAX_CHARS: usize = 150_000;
/// A file cut to fit keeps this share of its cap from its start…
const HEAD_SHARE: f64 = 0.7;
/// …and this share from its end (the rest holds the marker).
const TAIL_SHARE: f64 = 0.2;
/// Bytes of a cut file's cap set aside for the marker between head and tail.
const MARKER_RESERVE_BYTES: usize = 112;
/// Below this many characters left in the total budget, files are skipped.
const MIN_FILE_BUDGET_CHARS: usize = 64;

/// The caps on bootstrap files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootstrapLimits {
    pub max_chars: usize,
    pub total_max_chars: usize,
}

impl BootstrapLimits {
    /// `agents.defaults.bootstrapMaxChars` / `bootstrapTotalMaxChars` or the defaults.
    pub fn from_config(config: &Config) -> BootstrapLimits {
        let d = &config.agents.defaults;
        BootstrapLimits {
            max_chars: d
                .bootstrap_max_chars
                .map_or(DEFAULT_BOOTSTRAP_MAX_CHARS, |n| n as usize),
            total_max_chars: d
                .bootstrap_total_max_chars
                .map_or(DEFAULT_BOOTSTRAP_TOTAL_MAX_CHARS, |n| n as usize),
        }
    }
}

/// One bootstrap file as it goes into the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapFile {
    pub name: &'static str,
    pub content: String,
    pub truncated: bool,
}

/// Reads a file as text, at most `max_bytes` of it: a longer file gives its
/// head and tail around a marker naming the file. `None` when unreadable.
pub fn read_capped(path: &Path, max_bytes: usize) -> Option<(String, bool)> {
    let mut file = std::fs::File::open(path).ok()?;
    let size = file.metadata().ok()?.len();
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    if size <= max_bytes as u64 {
        let mut bytes = Vec::with_capacity(size as usize);
        file.by_ref()
            .take(max_bytes as u64)
            .read_to_end(&mut bytes)
            .ok()?;
        return Some((String::from_utf8_lossy(&bytes).into_owned(), false));
    }
    let kept = max_bytes.saturating_sub(MARKER_RESERVE_BYTES) as f64 / (HEAD_SHARE + TAIL_SHARE);
    let head_len = (kept * HEAD_SHARE) as u64;
    let tail_len = (kept * TAIL_SHARE) as u64;
    let mut head = Vec::with_capacity(head_len as usize);
    file.by_ref().take(head_len).read_to_end(&mut head).ok()?;
    file.seek(SeekFrom::Start(size - tail_len)).ok()?;
    let mut tail = Vec::with_capacity(tail_len as usize);
    file.take(tail_len).read_to_end(&mut tail).ok()?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let text = format!(
        "{}\n\n[... {} of {} bytes left out here; read {} for the whole file ...]\n\n{}",
        String::from_utf8_lossy(&head).trim_end_matches('\u{FFFD}'),
        size - head_len - tail_len,
        size,
        name.unwrap_or_default(),
        String::from_utf8_lossy(&tail).trim_start_matches('\u{FFFD}'),
    );
    Some((text, true))
}

/// The workspace's bootstrap files that exist, capped per file and in total.
pub fn load_bootstrap(
    workspace: &Path,
    first_run: bool,
    limits: BootstrapLimits,
) -> Vec<BootstrapFile> {
    let mut left = limits.total_max_chars;
    let mut files = Vec::new();
    for name in BOOTSTRAP_FILES {
        if name == FIRST_RUN_FILE && !first_run {
            continue;
        }
        let cap = limits.max_chars.min(left);
        if cap < MIN_FILE_BUDGET_CHARS {
            log::warn!("bootstrapTotalMaxChars reached: {name} left out of the prompt");
            break;
        }
        let Some((content, truncated)) = read_capped(&workspace.join(name), cap) else {
            continue;
        };
        if content.trim().is_empty() {
            continue;
        }
        left = left.saturating_sub(content.len());
        files.push(BootstrapFile {
            name,
            content,
            truncated,
        });
    }
    files
}

/// Facts for the runtime line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeInfo {
    pub agent_id: String,
    pub host: String,
    /// `provider/model`.
    pub model: String,
    pub now_ms: u64,
    pub timezone: Option<String>,
}

/// Everything the system prompt is made of.
#[derive(Debug, Clone)]
pub struct PromptParts<'a> {
    pub workspace: &'a Path,
    /// What a sandboxed session sees of the workspace (`sandbox.workspaceAccess`); `rw` for a
    /// session the sandbox does not confine.
    pub workspace_access: WorkspaceAccess,
    pub tool_names: &'a [String],
    pub skills: &'a [Skill],
    pub bootstrap: &'a [BootstrapFile],
    pub extra_system_prompt: Option<&'a str>,
    pub runtime: &'a RuntimeInfo,
}

/// Where the tools work: the agent's workspace, or a sandbox's private one.
fn workspace_section(workspace: &Path, access: WorkspaceAccess) -> String {
    match access {
        WorkspaceAccess::Rw => format!(
            "## Workspace\nYour working directory is {}. File tools take paths relative to it.\n\n",
            workspace.display()
        ),
        WorkspaceAccess::None => "## Workspace\nThis session runs in a sandbox with a private workspace (sandbox.workspaceAccess \"none\"): commands and file tools work there, with paths relative to it. The agent's own workspace is not available.\n\n".to_owned(),
        WorkspaceAccess::Ro => format!(
            "## Workspace\nThis session runs in a sandbox with a private workspace (sandbox.workspaceAccess \"ro\"): commands run there, with paths relative to it. The agent's workspace is read-only at {SANDBOX_AGENT_WORKSPACE} (read works there too); write, edit and apply_patch are disabled.\n\n"
        ),
    }
}

/// The whole system prompt, sections in a fixed order.
pub fn build_system_prompt(parts: &PromptParts<'_>) -> String {
    let mut out = String::from(
        "You are a personal assistant running inside pincer, an OpenClaw-compatible gateway.\n\n",
    );
    if !parts.tool_names.is_empty() {
        out.push_str("## Tooling\nTools you may call: ");
        out.push_str(&parts.tool_names.join(", "));
        out.push_str(".\nTool names are case-sensitive; call them as listed.\n\n");
    }
    let skills = skills::prompt_section(parts.skills);
    if !skills.is_empty() {
        out.push_str(&skills);
        out.push('\n');
    }
    out.push_str(&workspace_section(parts.workspace, parts.workspace_access));
    if !parts.bootstrap.is_empty() {
        out.push_str("# Project Context\nThese workspace files were loaded for you:\n\n");
        for file in parts.bootstrap {
            out.push_str(&format!(
                "## {}\n{}\n\n",
                file.name,
                file.content.trim_end()
            ));
        }
    }
    if let Some(extra) = parts.extra_system_prompt.filter(|s| !s.trim().is_empty()) {
        out.push_str("## Additional instructions\n");
        out.push_str(extra.trim_end());
        out.push_str("\n\n");
    }
    out.push_str("## Runtime\n");
    out.push_str(&runtime_line(parts.runtime));
    out.push('\n');
    out
}

/// `Runtime: agent=… | host=… | model=… | time=…`.
pub fn runtime_line(info: &RuntimeInfo) -> String {
    let mut line = format!(
        "Runtime: agent={} | host={} | model={} | time={}",
        info.agent_id,
        info.host,
        info.model,
        utc_timestamp(info.now_ms)
    );
    if let Some(tz) = &info.timezone {
        line.push_str(&format!(" | user timezone={tz}"));
    }
    line
}

/// `YYYY-MM-DDTHH:MM:SSZ` for milliseconds since the epoch.
pub fn utc_timestamp(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The agent's skills allowlist: its own `skills`, else the defaults'.
pub fn skill_allowlist<'a>(config: &'a Config, agent_id: &str) -> Option<&'a [String]> {
    config
        .agents
        .entry(agent_id)
        .and_then(|a| a.skills.as_deref())
        .or(config.agents.defaults.skills.as_deref())
}

/// The skills a turn may use: the conversation's list (a group's or channel's `skills`) within the
/// agent's, as upstream merges them — either alone when the other is unset, nothing when either is
/// empty, else the names both hold.
pub fn merge_skill_filters(
    conversation: Option<&[String]>,
    agent: Option<&[String]>,
) -> Option<Vec<String>> {
    match (conversation, agent) {
        (None, None) => None,
        (Some(only), None) | (None, Some(only)) => Some(only.to_vec()),
        (Some(conversation), Some(agent)) => Some(
            conversation
                .iter()
                .filter(|name| agent.contains(name))
                .cloned()
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conversations_skills_narrow_the_agents() {
        let list = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let (weather, both) = (list(&["weather"]), list(&["weather", "git"]));
        assert_eq!(merge_skill_filters(None, None), None);
        assert_eq!(
            merge_skill_filters(Some(&weather), None),
            Some(weather.clone())
        );
        assert_eq!(merge_skill_filters(None, Some(&both)), Some(both.clone()));
        assert_eq!(
            merge_skill_filters(Some(&both), Some(&weather)),
            Some(weather.clone())
        );
        assert_eq!(
            merge_skill_filters(Some(&[]), Some(&both)),
            Some(Vec::new())
        );
        assert_eq!(
            merge_skill_filters(Some(&list(&["git"])), Some(&[])),
            Some(Vec::new())
        );
    }

    #[test]
    fn the_workspace_section_follows_the_sandbox_access() {
        let ws = Path::new("/srv/agent");
        assert!(workspace_section(ws, WorkspaceAccess::Rw).contains("/srv/agent"));
        let none = workspace_section(ws, WorkspaceAccess::None);
        assert!(
            !none.contains("/srv/agent") && none.contains("not available"),
            "{none}"
        );
        let ro = workspace_section(ws, WorkspaceAccess::Ro);
        assert!(
            ro.contains("read-only at /agent") && ro.contains("disabled"),
            "{ro}"
        );
    }

    #[test]
    fn timestamps_are_civil_utc() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(utc_timestamp(1_700_000_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn a_long_file_is_read_as_head_and_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("AGENTS.md");
        let text = format!("HEAD{}TAIL", "m".repeat(50_000));
        std::fs::write(&path, &text).expect("write");
        let (read, truncated) = read_capped(&path, 1_000).expect("read");
        assert!(truncated);
        assert!(read.starts_with("HEAD"));
        assert!(read.ends_with("TAIL"));
        assert!(read.len() <= 1_000, "{}", read.len());
        let (whole, cut) = read_capped(&path, 60_000).expect("read");
        assert!(!cut);
        assert_eq!(whole, text);
    }

    #[test]
    fn bootstrap_respects_order_first_run_and_total_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in ["USER.md", "AGENTS.md", "BOOTSTRAP.md", "SOUL.md"] {
            std::fs::write(dir.path().join(name), format!("{name} {}", "x".repeat(500)))
                .expect("write");
        }
        let limits = BootstrapLimits {
            max_chars: 20_000,
            total_max_chars: 150_000,
        };
        let names = |files: Vec<BootstrapFile>| files.iter().map(|f| f.name).collect::<Vec<_>>();
        assert_eq!(
            names(load_bootstrap(dir.path(), true, limits)),
            ["AGENTS.md", "SOUL.md", "USER.md", "BOOTSTRAP.md"]
        );
        assert_eq!(
            names(load_bootstrap(dir.path(), false, limits)),
            ["AGENTS.md", "SOUL.md", "USER.md"]
        );
        let tight = BootstrapLimits {
            max_chars: 20_000,
            total_max_chars: 700,
        };
        let files = load_bootstrap(dir.path(), false, tight);
        assert_eq!(names(files.clone()), ["AGENTS.md", "SOUL.md"]);
        assert!(files[1].truncated);
        assert!(files.iter().map(|f| f.content.len()).sum::<usize>() <= 700);
    }
}
