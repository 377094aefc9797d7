//! `apply_patch`: the `*** Begin Patch` format (add, delete, update with
//! context hunks, move), applied to workspace files all or nothing: every
//! hunk is checked before any file is written.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::fs::write_atomic;
use super::{arg_str, Tool, ToolContext, ToolError, ToolFuture, ToolOutput};

/// Largest patch text accepted.
pub const MAX_PATCH_BYTES: usize = 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Add {
        path: String,
        lines: Vec<String>,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        hunks: Vec<Vec<String>>,
    },
}

fn bad(message: impl Into<String>) -> ToolError {
    ToolError::InvalidArguments(format!("patch: {}", message.into()))
}

fn parse(text: &str) -> Result<Vec<Op>, ToolError> {
    let mut lines = text
        .lines()
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .peekable();
    if lines.next().map(str::trim) != Some("*** Begin Patch") {
        return Err(bad("must start with \"*** Begin Patch\""));
    }
    let mut ops = Vec::new();
    loop {
        let Some(line) = lines.next() else {
            return Err(bad("missing \"*** End Patch\""));
        };
        if line.trim() == "*** End Patch" {
            break;
        }
        if let Some(path) = line.strip_prefix("*** Add File: ") {
            let mut body = Vec::new();
            while let Some(next) = lines.peek().and_then(|l| l.strip_prefix('+')) {
                body.push(next.to_string());
                lines.next();
            }
            ops.push(Op::Add {
                path: path.trim().to_string(),
                lines: body,
            });
        } else if let Some(path) = line.strip_prefix("*** Delete File: ") {
            ops.push(Op::Delete {
                path: path.trim().to_string(),
            });
        } else if let Some(path) = line.strip_prefix("*** Update File: ") {
            let mut move_to = None;
            if let Some(dest) = lines.peek().and_then(|l| l.strip_prefix("*** Move to: ")) {
                move_to = Some(dest.trim().to_string());
                lines.next();
            }
            let mut hunks: Vec<Vec<String>> = Vec::new();
            while let Some(next) = lines.peek() {
                if next.starts_with("*** ") && !next.starts_with("*** End of File") {
                    break;
                }
                let next = lines.next().unwrap_or_default();
                if next.starts_with("@@") || hunks.is_empty() {
                    hunks.push(Vec::new());
                    if next.starts_with("@@") {
                        continue;
                    }
                }
                if next.starts_with("*** End of File") {
                    continue;
                }
                if let Some(hunk) = hunks.last_mut() {
                    hunk.push(next.to_string());
                }
            }
            hunks.retain(|h| !h.is_empty());
            ops.push(Op::Update {
                path: path.trim().to_string(),
                move_to,
                hunks,
            });
        } else if !line.trim().is_empty() {
            return Err(bad(format!("unexpected line {line:?}")));
        }
    }
    Ok(ops)
}

/// Applies context hunks to a file's lines.
fn apply_hunks(path: &str, original: &str, hunks: &[Vec<String>]) -> Result<String, ToolError> {
    let mut lines: Vec<String> = original.lines().map(String::from).collect();
    let mut cursor = 0usize;
    for (n, hunk) in hunks.iter().enumerate() {
        let mut old = Vec::new();
        let mut new = Vec::new();
        for line in hunk {
            match line.chars().next() {
                Some('-') => old.push(line[1..].to_string()),
                Some('+') => new.push(line[1..].to_string()),
                Some(' ') => {
                    old.push(line[1..].to_string());
                    new.push(line[1..].to_string());
                }
                None => {
                    old.push(String::new());
                    new.push(String::new());
                }
                Some(_) => {
                    return Err(bad(format!(
                        "{path}: hunk {} has a line without +, - or space: {line:?}",
                        n + 1
                    )))
                }
            }
        }
        // A hunk longer than what is left of the file cannot match there (and must not be sliced past it).
        let matches_at =
            |i: usize| i + old.len() <= lines.len() && lines[i..i + old.len()] == old[..];
        let at = if old.is_empty() {
            lines.len()
        } else {
            (cursor..=lines.len().saturating_sub(old.len()))
                .find(|&i| matches_at(i))
                .or_else(|| (0..cursor.min(lines.len())).find(|&i| matches_at(i)))
                .ok_or_else(|| {
                    ToolError::Failed(format!("{path}: hunk {} does not match the file", n + 1))
                })?
        };
        lines.splice(at..at + old.len(), new.iter().cloned());
        cursor = at + new.len();
    }
    let mut text = lines.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    Ok(text)
}

/// The files a patch works on, as [`plan`] sees them: the tool's are the workspace's, behind its path checks;
/// the fuzz target's are in memory.
pub trait PatchFiles {
    /// Refuses a path the patch may not touch.
    fn check(&mut self, path: &str) -> Result<(), ToolError>;
    /// Whether a file is there (to delete it).
    fn exists(&mut self, path: &str) -> bool;
    /// A file's text (to update it).
    fn read(&mut self, path: &str) -> Result<String, ToolError>;
}

/// One file's part of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Put { path: String, text: String },
    Remove { path: String },
}

/// What a patch does, worked out before anything is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub changes: Vec<Change>,
    /// `A path`, `D path`, `M path`, `M from -> to`, in the patch's order.
    pub summary: Vec<String>,
}

/// Parses `text` and applies every hunk to the files' current text: the whole patch, or an error naming the
/// first thing that does not fit (all or nothing).
pub fn plan(text: &str, files: &mut dyn PatchFiles) -> Result<Plan, ToolError> {
    if text.len() > MAX_PATCH_BYTES {
        return Err(bad(format!("over {MAX_PATCH_BYTES} bytes")));
    }
    let mut changes = Vec::new();
    let mut summary = Vec::new();
    for op in parse(text)? {
        match op {
            Op::Add { path, lines } => {
                files.check(&path)?;
                let mut body = lines.join("\n");
                body.push('\n');
                changes.push(Change::Put {
                    path: path.clone(),
                    text: body,
                });
                summary.push(format!("A {path}"));
            }
            Op::Delete { path } => {
                files.check(&path)?;
                if !files.exists(&path) {
                    return Err(ToolError::Failed(format!("{path}: no such file to delete")));
                }
                changes.push(Change::Remove { path: path.clone() });
                summary.push(format!("D {path}"));
            }
            Op::Update {
                path,
                move_to,
                hunks,
            } => {
                files.check(&path)?;
                let original = files.read(&path)?;
                let updated = apply_hunks(&path, &original, &hunks)?;
                match move_to {
                    Some(dest) => {
                        files.check(&dest)?;
                        changes.push(Change::Put {
                            path: dest.clone(),
                            text: updated,
                        });
                        changes.push(Change::Remove { path: path.clone() });
                        summary.push(format!("M {path} -> {dest}"));
                    }
                    None => {
                        changes.push(Change::Put {
                            path: path.clone(),
                            text: updated,
                        });
                        summary.push(format!("M {path}"));
                    }
                }
            }
        }
    }
    Ok(Plan { changes, summary })
}

/// The workspace's files, through the tools' path checks.
struct WorkspaceFiles<'a> {
    ctx: &'a ToolContext,
}

impl WorkspaceFiles<'_> {
    fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        super::fs::file_path(self.ctx, path, super::fs::Access::Write)
    }
}

impl PatchFiles for WorkspaceFiles<'_> {
    fn check(&mut self, path: &str) -> Result<(), ToolError> {
        self.resolve(path).map(drop)
    }

    fn exists(&mut self, path: &str) -> bool {
        self.resolve(path).is_ok_and(|full| full.is_file())
    }

    fn read(&mut self, path: &str) -> Result<String, ToolError> {
        std::fs::read_to_string(self.resolve(path)?)
            .map_err(|e| ToolError::Failed(format!("{path}: {e}")))
    }
}

pub struct ApplyPatchTool;

impl Tool for ApplyPatchTool {
    fn name(&self) -> &'static str {
        "apply_patch"
    }
    fn description(&self) -> &'static str {
        "Apply a patch (*** Begin Patch / Add File / Update File / Delete File / *** End Patch) to workspace files."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"input": {"type": "string", "description": "The whole patch text"}},
               "required": ["input"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let text = arg_str(&args, "input").or_else(|_| arg_str(&args, "patch"))?;
            let mut files = WorkspaceFiles { ctx };
            let plan = plan(text, &mut files)?;
            for change in plan.changes {
                match change {
                    Change::Put { path, text } => {
                        write_atomic(&files.resolve(&path)?, text.as_bytes())
                    }
                    Change::Remove { path } => std::fs::remove_file(files.resolve(&path)?),
                }
                .map_err(|e| ToolError::Failed(format!("writing the patch: {e}")))?;
            }
            Ok(ToolOutput::text(format!(
                "Success. Updated the following files:\n{}",
                plan.summary.join("\n")
            )))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_hunks_apply_with_context() {
        let original = "a\nb\nc\nd\n";
        let hunks = vec![vec![
            " b".to_string(),
            "-c".to_string(),
            "+C".to_string(),
            " d".to_string(),
        ]];
        assert_eq!(
            apply_hunks("f", original, &hunks).expect("applies"),
            "a\nb\nC\nd\n"
        );
        let wrong = vec![vec!["-zzz".to_string()]];
        assert!(apply_hunks("f", original, &wrong).is_err());
    }

    /// Found by the `apply_patch` fuzz target: a hunk with more lines than the file sliced past its end.
    #[test]
    fn a_hunk_longer_than_the_file_is_refused_not_a_panic() {
        let hunks = vec![vec![" a".to_string(), "-b".to_string(), " c".to_string()]];
        let error = apply_hunks("f", "a\nb\n", &hunks).expect_err("cannot match");
        assert!(error.to_string().contains("does not match"), "{error}");
    }

    #[test]
    fn patch_text_parses_every_operation() {
        let text = "*** Begin Patch\n*** Add File: new.md\n+hello\n*** Delete File: old.md\n*** Update File: a.md\n*** Move to: b.md\n@@\n-x\n+y\n*** End Patch\n";
        let ops = parse(text).expect("parses");
        assert_eq!(ops.len(), 3);
        assert!(
            matches!(&ops[2], Op::Update { move_to: Some(d), hunks, .. } if d == "b.md" && hunks.len() == 1)
        );
        assert!(parse("*** Add File: x\n").is_err());
        assert!(parse("*** Begin Patch\n*** Add File: x\n+y\n").is_err());
    }
}
