//! Workspace confinement: every path a file tool touches must resolve inside
//! the agent's workspace, after `..` and symlinks are followed.
//!
//! A relative path is taken from the workspace root; an absolute path is
//! accepted only when it already lies inside. The deepest existing ancestor
//! is canonicalised, so a symlink inside the workspace that points out is
//! refused, for reading and for writing.

use std::path::{Component, Path, PathBuf};

use super::ToolError;

/// Resolves `requested` inside `workspace`; the result may not exist yet.
pub fn resolve(workspace: &Path, requested: &str) -> Result<PathBuf, ToolError> {
    if requested.trim().is_empty() {
        return Err(ToolError::InvalidArguments("path is empty".into()));
    }
    if requested.contains('\0') {
        return Err(ToolError::InvalidArguments(
            "path contains a NUL byte".into(),
        ));
    }
    let root = workspace.canonicalize().map_err(|e| {
        ToolError::Failed(format!(
            "workspace {} is not usable: {e}",
            workspace.display()
        ))
    })?;
    let joined = if Path::new(requested).is_absolute() {
        PathBuf::from(requested)
    } else {
        root.join(requested)
    };
    // Lexically normalise, refusing to climb above the filesystem root.
    let mut normal = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                if !normal.pop() {
                    return Err(outside(requested));
                }
            }
            Component::CurDir => {}
            other => normal.push(other.as_os_str()),
        }
    }
    // Follow symlinks in the part that exists.
    let mut existing = normal.clone();
    let mut rest = Vec::new();
    while !existing.exists() {
        match existing.file_name() {
            Some(name) => rest.push(name.to_os_string()),
            None => break,
        }
        if !existing.pop() {
            break;
        }
    }
    let mut real = existing
        .canonicalize()
        .map_err(|e| ToolError::Failed(format!("cannot resolve {requested}: {e}")))?;
    for part in rest.into_iter().rev() {
        real.push(part);
    }
    if !real.starts_with(&root) {
        return Err(outside(requested));
    }
    // A dangling symlink as the last component would be followed on write.
    if let Ok(meta) = std::fs::symlink_metadata(&real) {
        if meta.file_type().is_symlink() {
            return Err(outside(requested));
        }
    }
    Ok(real)
}

/// Resolves `requested` without confinement (`tools.fs.workspaceOnly:
/// false`): a relative path is taken from the workspace root, an absolute
/// one as it is, `..` folded lexically.
pub fn resolve_host(workspace: &Path, requested: &str) -> Result<PathBuf, ToolError> {
    if requested.trim().is_empty() {
        return Err(ToolError::InvalidArguments("path is empty".into()));
    }
    if requested.contains('\0') {
        return Err(ToolError::InvalidArguments(
            "path contains a NUL byte".into(),
        ));
    }
    let joined = workspace.join(requested);
    let mut normal = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            other => normal.push(other.as_os_str()),
        }
    }
    Ok(normal)
}

fn outside(requested: &str) -> ToolError {
    ToolError::Denied(format!(
        "path {requested:?} is outside the workspace; file tools only work inside it"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_resolve_inside_and_escapes_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("notes")).expect("mkdir");
        let root = ws.canonicalize().expect("canon");
        assert_eq!(
            resolve(&ws, "notes/a.md").expect("inside"),
            root.join("notes/a.md")
        );
        assert_eq!(
            resolve(&ws, "./notes/../b.md").expect("inside"),
            root.join("b.md")
        );
        assert!(matches!(
            resolve(&ws, "../outside.md"),
            Err(ToolError::Denied(_))
        ));
        assert!(matches!(
            resolve(&ws, "notes/../../x"),
            Err(ToolError::Denied(_))
        ));
        assert!(matches!(
            resolve(&ws, "/etc/passwd"),
            Err(ToolError::Denied(_))
        ));
        let absolute_inside = root.join("notes/c.md");
        assert!(resolve(&ws, absolute_inside.to_str().expect("utf8")).is_ok());
    }

    #[test]
    fn symlinks_pointing_out_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).expect("mkdir");
        std::fs::write(dir.path().join("secret"), "s").expect("secret");
        std::os::unix::fs::symlink(dir.path().join("secret"), ws.join("link")).expect("link");
        std::os::unix::fs::symlink(dir.path(), ws.join("dirlink")).expect("dirlink");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), ws.join("dangling"))
            .expect("dangling");
        assert!(matches!(resolve(&ws, "link"), Err(ToolError::Denied(_))));
        assert!(matches!(
            resolve(&ws, "dirlink/secret"),
            Err(ToolError::Denied(_))
        ));
        assert!(matches!(
            resolve(&ws, "dirlink/new-file"),
            Err(ToolError::Denied(_))
        ));
        assert!(matches!(
            resolve(&ws, "dangling"),
            Err(ToolError::Denied(_))
        ));
    }
}
