//! `read`, `write` and `edit`: files inside the agent's workspace, or inside what a sandboxed
//! session sees of it (`sandbox_workspace.rs`: a private workspace, the agent's read-only).
//!
//! Reads are bounded (a line window and a byte cap); writes create parent
//! directories and replace files atomically; `edit` replaces one exact,
//! unique occurrence of a text.

use std::io::{BufRead, BufReader, Write};

use serde_json::{json, Value};

use super::sandbox_workspace;
use super::{arg_str, arg_u64, Tool, ToolContext, ToolError, ToolFuture, ToolOutput};

/// Lines `read` returns when no limit is given.
pub const DEFAULT_READ_LINES: u64 = 2000;
/// Bytes `read` returns at most.
pub const MAX_READ_BYTES: usize = 256 * 1024;
/// Largest file `write`/`edit` will produce.
pub const MAX_WRITE_BYTES: usize = 8 * 1024 * 1024;

fn io_error(path: &str, e: std::io::Error) -> ToolError {
    ToolError::Failed(format!("{path}: {e}"))
}

/// Writes through a temp file and a rename, so a crash never leaves half a file.
pub fn write_atomic(target: &std::path::Path, content: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = target.with_extension(format!("pincer-tmp-{}", std::process::id()));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(content)?;
    file.sync_all()?;
    std::fs::rename(&tmp, target)
}

/// Whether a path is opened to read or to change.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}

/// Whether `tools.fs.workspaceOnly` (the agent's block, else the global one)
/// leaves this session's file tools free to reach host paths: only when it
/// is `false` and no sandbox mode confines the session (a sandboxed session
/// sees what its sandbox mounts, as upstream's does).
pub(crate) fn reaches_host(ctx: &ToolContext) -> bool {
    let config = &ctx.config;
    let agent = config.agents.list.iter().find(|a| a.id == ctx.agent_id);
    let workspace_only = agent
        .and_then(|a| a.tools.as_ref())
        .and_then(|t| t.fs.as_ref())
        .and_then(|fs| fs.workspace_only)
        .unwrap_or_else(|| config.tools.fs.effective_workspace_only());
    if workspace_only {
        return false;
    }
    !sandbox_workspace::confined_by_config(config, &ctx.agent_id, &ctx.session_key)
}

/// The file a tool opens: confined to what the session's workspace view
/// allows, or anywhere on the host under `workspaceOnly: false`.
pub(crate) fn file_path(
    ctx: &ToolContext,
    path: &str,
    access: Access,
) -> Result<std::path::PathBuf, ToolError> {
    if reaches_host(ctx) {
        return super::workspace::resolve_host(&ctx.workspace, path);
    }
    let view = sandbox_workspace::for_context(ctx)?;
    match access {
        Access::Read => view.resolve_read(path),
        Access::Write => view.resolve_write(path),
    }
}

pub struct ReadTool;

impl Tool for ReadTool {
    fn name(&self) -> &'static str {
        "read"
    }
    fn description(&self) -> &'static str {
        "Read a text file from the workspace. Optional offset (1-based line) and limit (lines)."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace"},
            "offset": {"type": "integer", "minimum": 1}, "limit": {"type": "integer", "minimum": 1}},
            "required": ["path"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let path = arg_str(&args, "path")?;
            let offset = arg_u64(&args, "offset")?.unwrap_or(1).max(1);
            let limit = arg_u64(&args, "limit")?
                .unwrap_or(DEFAULT_READ_LINES)
                .max(1);
            let full = file_path(ctx, path, Access::Read)?;
            let file = std::fs::File::open(&full).map_err(|e| io_error(path, e))?;
            let mut out = String::new();
            let mut shown = 0u64;
            let mut more = false;
            for (i, line) in BufReader::new(file).lines().enumerate() {
                let number = i as u64 + 1;
                if number < offset {
                    continue;
                }
                let line = line.map_err(|e| io_error(path, e))?;
                if shown >= limit || out.len() + line.len() + 1 > MAX_READ_BYTES {
                    more = true;
                    break;
                }
                out.push_str(&line);
                out.push('\n');
                shown += 1;
            }
            if more {
                out.push_str(&format!(
                    "[… more lines; continue with offset {}]\n",
                    offset + shown
                ));
            }
            Ok(ToolOutput {
                text: out,
                details: Some(json!({"path": path, "lines": shown, "truncated": more})),
            })
        })
    }
}

pub struct WriteTool;

impl Tool for WriteTool {
    fn name(&self) -> &'static str {
        "write"
    }
    fn description(&self) -> &'static str {
        "Create or replace a file in the workspace with the given content."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
               "required": ["path", "content"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let path = arg_str(&args, "path")?;
            let content = arg_str(&args, "content")?;
            if content.len() > MAX_WRITE_BYTES {
                return Err(ToolError::InvalidArguments(format!(
                    "content is over {MAX_WRITE_BYTES} bytes"
                )));
            }
            let full = file_path(ctx, path, Access::Write)?;
            write_atomic(&full, content.as_bytes()).map_err(|e| io_error(path, e))?;
            Ok(ToolOutput::text(format!(
                "wrote {} bytes to {path}",
                content.len()
            )))
        })
    }
}

pub struct EditTool;

impl Tool for EditTool {
    fn name(&self) -> &'static str {
        "edit"
    }
    fn description(&self) -> &'static str {
        "Replace one exact occurrence of oldText with newText in a workspace file (oldText must be unique)."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"path": {"type": "string"}, "oldText": {"type": "string"},
               "newText": {"type": "string"}}, "required": ["path", "oldText", "newText"]})
    }
    fn execute<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> ToolFuture<'a> {
        Box::pin(async move {
            let path = arg_str(&args, "path")?;
            let old = arg_str(&args, "oldText")?;
            let new = arg_str(&args, "newText")?;
            if old.is_empty() {
                return Err(ToolError::InvalidArguments(
                    "oldText must not be empty".into(),
                ));
            }
            let full = file_path(ctx, path, Access::Write)?;
            let text = std::fs::read_to_string(&full).map_err(|e| io_error(path, e))?;
            match text.matches(old).count() {
                0 => {
                    return Err(ToolError::Failed(format!(
                        "oldText was not found in {path}"
                    )))
                }
                1 => {}
                n => {
                    return Err(ToolError::Failed(format!(
                        "oldText occurs {n} times in {path}; add context to make it unique"
                    )))
                }
            }
            let updated = text.replacen(old, new, 1);
            if updated.len() > MAX_WRITE_BYTES {
                return Err(ToolError::Failed(format!(
                    "the edited file would be over {MAX_WRITE_BYTES} bytes"
                )));
            }
            write_atomic(&full, updated.as_bytes()).map_err(|e| io_error(path, e))?;
            Ok(ToolOutput::text(format!("edited {path}")))
        })
    }
}
