//! Skill discovery: `<workspace>/skills/*/SKILL.md`, of which only the
//! frontmatter (name, description, metadata) reaches the system prompt; the
//! model reads a skill's body with the `read` tool when it needs it.
//!
//! Discovery is bounded: at most [`MAX_SKILLS`] folders are looked at and
//! only the first [`MAX_SKILL_HEADER_BYTES`] of each file are read. This file
//! never runs a skill and never reads outside the workspace's `skills/`.

use std::borrow::Cow;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Skill folders looked at per workspace.
pub const MAX_SKILLS: usize = 64;
/// Bytes of each SKILL.md read for its frontmatter.
pub const MAX_SKILL_HEADER_BYTES: u64 = 16 * 1024;
/// Longest description or metadata text kept per skill.
pub const MAX_SKILL_FIELD_CHARS: usize = 1_024;

/// One discovered skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// The frontmatter's `metadata` value as written (often one-line JSON).
    pub metadata: Option<String>,
    /// Path of the SKILL.md, relative to the workspace.
    pub location: PathBuf,
}

/// The folder of a workspace that holds the skills.
pub const SKILLS_DIR: &str = "skills";
/// The file in a skill's folder that describes it.
pub const SKILL_FILE: &str = "SKILL.md";

/// Skills under `<workspace>/skills`, sorted by name; `allow` (the agent's
/// `skills` list) keeps only the named ones.
pub fn discover(workspace: &Path, allow: Option<&[String]>) -> Vec<Skill> {
    let mut skills: Vec<Skill> = folders(&workspace.join(SKILLS_DIR))
        .iter()
        .filter_map(|folder| read_skill(workspace, folder))
        .filter(|s| permitted(s, allow))
        .collect();
    skills.sort_by(|a, b| a.name.cmp(&b.name));
    skills
}

/// The skill folders looked at: at most [`MAX_SKILLS`] subfolders of `dir`, sorted.
pub fn folders(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut folders: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .take(MAX_SKILLS)
        .collect();
    folders.sort();
    folders
}

/// Only the named skills (the agent's `skills` list), or all (borrowed) without a list.
pub fn allowed<'a>(skills: &'a [Skill], allow: Option<&[String]>) -> Cow<'a, [Skill]> {
    match allow {
        None => Cow::Borrowed(skills),
        Some(_) => skills
            .iter()
            .filter(|s| permitted(s, allow))
            .cloned()
            .collect(),
    }
}

fn permitted(skill: &Skill, allow: Option<&[String]>) -> bool {
    allow.is_none_or(|names| names.iter().any(|n| n == &skill.name))
}

fn read_skill(workspace: &Path, folder: &Path) -> Option<Skill> {
    let path = folder.join(SKILL_FILE);
    let file = std::fs::File::open(&path).ok()?;
    let mut head = String::new();
    file.take(MAX_SKILL_HEADER_BYTES)
        .read_to_string(&mut head)
        .ok()
        .or_else(|| {
            log::warn!("skill {} is not UTF-8 text; skipped", path.display());
            None
        })?;
    let fields = frontmatter(&head)?;
    let folder_name = folder.file_name()?.to_string_lossy().into_owned();
    let field = |key: &str| {
        fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| cap(v))
            .filter(|v| !v.is_empty())
    };
    Some(Skill {
        name: field("name").unwrap_or(folder_name),
        description: field("description").unwrap_or_default(),
        metadata: field("metadata"),
        location: path.strip_prefix(workspace).unwrap_or(&path).to_path_buf(),
    })
}

fn cap(value: &str) -> String {
    value.chars().take(MAX_SKILL_FIELD_CHARS).collect()
}

/// The `key: value` lines between the leading `---` fences. A value that
/// continues on indented lines (YAML block style) is joined with spaces.
fn frontmatter(text: &str) -> Option<Vec<(String, String)>> {
    let mut lines = text.lines();
    if lines.next()?.trim() != "---" {
        return None;
    }
    let mut fields: Vec<(String, String)> = Vec::new();
    for line in lines {
        if line.trim() == "---" {
            return Some(fields);
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = fields.last_mut() {
                if !value.is_empty() {
                    value.push(' ');
                }
                value.push_str(line.trim());
            }
            continue;
        }
        if let Some((key, value)) = line.split_once(':') {
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            let value = if value == "|" || value == ">" {
                ""
            } else {
                value
            };
            fields.push((key.trim().to_string(), value.to_string()));
        }
    }
    None
}

/// The skills section of the system prompt (empty when there are none).
pub fn prompt_section(skills: &[Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "## Skills\nBefore answering, check whether one of these skills fits the task. If one does, read its SKILL.md with the read tool and follow it; never read more than one up front.\n<available_skills>\n",
    );
    for skill in skills {
        out.push_str(&format!(
            "<skill>\n<name>{}</name>\n<description>{}</description>\n",
            skill.name, skill.description
        ));
        if let Some(metadata) = &skill.metadata {
            out.push_str(&format!("<metadata>{metadata}</metadata>\n"));
        }
        out.push_str(&format!(
            "<location>{}</location>\n</skill>\n",
            skill.location.display()
        ));
    }
    out.push_str("</available_skills>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_skill(root: &Path, folder: &str, text: &str) {
        let dir = root.join("skills").join(folder);
        std::fs::create_dir_all(&dir).expect("skill dir");
        std::fs::write(dir.join("SKILL.md"), text).expect("skill file");
    }

    #[test]
    fn skills_are_found_with_frontmatter_only() {
        let root = tempfile::tempdir().expect("tempdir");
        write_skill(
            root.path(),
            "weather",
            "---\nname: weather\ndescription: \"Look up the forecast\"\nmetadata: {\"emoji\":\"sun\"}\n---\n# Body\nSECRET BODY TEXT\n",
        );
        write_skill(root.path(), "plain", "no frontmatter here\n");
        write_skill(
            root.path(),
            "notes",
            "---\ndescription: >\n  Keep notes\n  tidy\n---\n",
        );
        let skills = discover(root.path(), None);
        let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["notes", "weather"]);
        assert_eq!(skills[0].description, "Keep notes tidy");
        assert_eq!(skills[1].metadata.as_deref(), Some("{\"emoji\":\"sun\"}"));
        let section = prompt_section(&skills);
        assert!(section.contains("<name>weather</name>"));
        assert!(section.contains("skills/weather/SKILL.md"));
        assert!(!section.contains("SECRET BODY TEXT"));
    }

    #[test]
    fn the_agent_skill_list_filters_discovery() {
        let root = tempfile::tempdir().expect("tempdir");
        write_skill(root.path(), "a", "---\nname: a\ndescription: A\n---\n");
        write_skill(root.path(), "b", "---\nname: b\ndescription: B\n---\n");
        let only_b = discover(root.path(), Some(&["b".to_string()]));
        assert_eq!(only_b.len(), 1);
        assert_eq!(only_b[0].name, "b");
        assert!(prompt_section(&[]).is_empty());
    }
}
