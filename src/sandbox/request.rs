//! Validation of a run request's fields and the sandbox environment built from the policy.
//!
//! Every check names the field it rejects and what is allowed (`workdir`, `env`, `argv`,
//! `readOnlyPaths`, `timeout`, `workspace`). The environment holds only PATH, HOME, LANG, TERM,
//! TMPDIR where needed, and the configured extras. This file must not read the gateway's own
//! environment and must not touch the file system beyond resolving the paths it validates.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use super::namespaces::{SANDBOX_AGENT_WORKSPACE, SANDBOX_WORKSPACE};
use super::{SandboxError, SandboxSpec};

/// `PATH` inside the sandbox.
const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Sandbox paths an extra read-only path may not cover or shadow.
const RESERVED_PATHS: [&str; 5] = [
    "/proc",
    "/dev",
    "/tmp",
    SANDBOX_WORKSPACE,
    SANDBOX_AGENT_WORKSPACE,
];
/// Environment variables the sandbox sets itself and a request may not override.
const FIXED_ENV: [&str; 2] = ["HOME", "TMPDIR"];

pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> SandboxError {
    SandboxError::InvalidRequest {
        field,
        reason: reason.into(),
    }
}

/// The checked, canonical parts of a request.
#[derive(Debug)]
pub(crate) struct ValidRequest {
    pub(crate) timeout: Duration,
    /// Canonical host path of the workspace.
    pub(crate) workspace: PathBuf,
    /// Working directory relative to the workspace.
    pub(crate) relative_workdir: PathBuf,
    /// Canonical extra read-only paths.
    pub(crate) extras: Vec<PathBuf>,
    /// Canonical host path of the read-only workspace, if any.
    pub(crate) read_only_workspace: Option<PathBuf>,
}

impl ValidRequest {
    /// Checks argv, limits, timeout, workspace, workdir and extra paths.
    pub(crate) fn check(spec: &SandboxSpec) -> Result<Self, SandboxError> {
        validate_argv(&spec.argv)?;
        spec.policy
            .limits
            .validate()
            .map_err(|field| invalid(field, "must be greater than zero"))?;
        let timeout = choose_timeout(spec)?;
        let workspace = canonical_workspace(&spec.workspace)?;
        let relative_workdir = validate_workdir(&workspace, spec.workdir.as_deref())?;
        let extras = validate_extra_paths(&spec.policy.read_only_paths)?;
        let read_only_workspace = match &spec.read_only_workspace {
            Some(path) => Some(validate_read_only_workspace(&workspace, path)?),
            None => None,
        };
        Ok(Self {
            timeout,
            workspace,
            relative_workdir,
            extras,
            read_only_workspace,
        })
    }
}

fn validate_argv(argv: &[String]) -> Result<(), SandboxError> {
    let program = argv
        .first()
        .ok_or_else(|| invalid("argv", "must name a program"))?;
    if !program.starts_with('/') {
        return Err(invalid(
            "argv",
            format!("the program must be an absolute path, got {program:?}"),
        ));
    }
    if argv.iter().any(|arg| arg.contains('\0')) {
        return Err(invalid("argv", "arguments must not contain NUL bytes"));
    }
    Ok(())
}

fn choose_timeout(spec: &SandboxSpec) -> Result<Duration, SandboxError> {
    let max = Duration::from_secs(spec.policy.max_timeout_secs);
    let timeout = spec
        .timeout
        .unwrap_or(Duration::from_secs(spec.policy.timeout_secs));
    if timeout.is_zero() {
        return Err(invalid("timeout", "must be greater than zero"));
    }
    Ok(timeout.min(max))
}

fn canonical_workspace(workspace: &Path) -> Result<PathBuf, SandboxError> {
    let canonical = workspace
        .canonicalize()
        .map_err(|e| invalid("workspace", format!("{}: {e}", workspace.display())))?;
    if !canonical.is_dir() {
        return Err(invalid(
            "workspace",
            format!("{} is not a directory", canonical.display()),
        ));
    }
    if canonical.parent().is_none() {
        return Err(invalid(
            "workspace",
            "the file-system root cannot be a workspace",
        ));
    }
    Ok(canonical)
}

/// Checks that the workdir stays inside the workspace; returns it relative to the workspace.
fn validate_workdir(workspace: &Path, workdir: Option<&Path>) -> Result<PathBuf, SandboxError> {
    let Some(workdir) = workdir else {
        return Ok(PathBuf::new());
    };
    let relative = workdir.strip_prefix(SANDBOX_WORKSPACE).unwrap_or(workdir);
    if !relative
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(invalid(
            "workdir",
            format!(
                "{} must be a path inside the workspace without `..`",
                workdir.display()
            ),
        ));
    }
    let host = workspace.join(relative);
    let canonical = host
        .canonicalize()
        .map_err(|e| invalid("workdir", format!("{}: {e}", workdir.display())))?;
    if !canonical.starts_with(workspace) || !canonical.is_dir() {
        return Err(invalid(
            "workdir",
            format!(
                "{} is not a directory inside the workspace",
                workdir.display()
            ),
        ));
    }
    Ok(canonical
        .strip_prefix(workspace)
        .unwrap_or(Path::new(""))
        .to_path_buf())
}

/// The read-only workspace: a directory apart from the writable one (neither inside the other,
/// or the read-only one would be writable, or the writable one hidden).
fn validate_read_only_workspace(workspace: &Path, path: &Path) -> Result<PathBuf, SandboxError> {
    let field = "readOnlyWorkspace";
    let canonical = canonical_workspace(path).map_err(|e| invalid(field, e.to_string()))?;
    if canonical.starts_with(workspace) || workspace.starts_with(&canonical) {
        return Err(invalid(
            field,
            format!(
                "{} and the workspace {} must not contain one another",
                canonical.display(),
                workspace.display()
            ),
        ));
    }
    Ok(canonical)
}

fn validate_extra_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>, SandboxError> {
    paths
        .iter()
        .map(|path| {
            if !path.is_absolute() {
                return Err(invalid(
                    "readOnlyPaths",
                    format!("{} must be absolute", path.display()),
                ));
            }
            let canonical = path
                .canonicalize()
                .map_err(|e| invalid("readOnlyPaths", format!("{}: {e}", path.display())))?;
            let reserved = RESERVED_PATHS
                .iter()
                .any(|r| canonical.starts_with(r) || Path::new(r).starts_with(&canonical));
            if reserved {
                return Err(invalid(
                    "readOnlyPaths",
                    format!(
                        "{} overlaps a sandbox path (/proc, /dev, /tmp, /workspace, /agent)",
                        canonical.display()
                    ),
                ));
            }
            Ok(canonical)
        })
        .collect()
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `PATH`: the policy's directories in their order, then the sandbox's own.
fn search_path(prepend: &[String]) -> Result<String, SandboxError> {
    let mut parts = Vec::with_capacity(prepend.len() + 1);
    for dir in prepend {
        if !dir.starts_with('/') || dir.contains([':', '\0']) {
            return Err(invalid(
                "pathPrepend",
                format!("{dir:?} must be an absolute directory without ':'"),
            ));
        }
        parts.push(dir.as_str());
    }
    parts.push(SANDBOX_PATH);
    Ok(parts.join(":"))
}

/// The whole environment of the command: PATH, HOME, LANG, TERM, TMPDIR without a private
/// `/tmp`, then the policy's and the call's extras. Nothing comes from the gateway's own
/// environment.
pub(crate) fn build_env(
    spec: &SandboxSpec,
    home: &Path,
    tmp: Option<&Path>,
) -> Result<Vec<(String, String)>, SandboxError> {
    let path_text = |path: &Path| {
        path.to_str().map(str::to_owned).ok_or_else(|| {
            invalid(
                "workspace",
                format!("{} is not valid UTF-8", path.display()),
            )
        })
    };
    let mut env = vec![
        ("PATH".to_owned(), search_path(&spec.policy.path_prepend)?),
        ("HOME".to_owned(), path_text(home)?),
        ("LANG".to_owned(), spec.policy.lang.clone()),
        ("TERM".to_owned(), spec.policy.term.clone()),
    ];
    if let Some(tmp) = tmp {
        env.push(("TMPDIR".to_owned(), path_text(tmp)?));
    }
    let extras = spec
        .policy
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str(), "policy.env"));
    let per_call = spec
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str(), "env"));
    for (name, value, field) in extras.chain(per_call) {
        if !valid_env_name(name) {
            return Err(invalid(
                field,
                format!("{name:?} is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)"),
            ));
        }
        if FIXED_ENV.contains(&name) {
            return Err(invalid(
                field,
                format!("{name} is set by the sandbox and cannot be overridden"),
            ));
        }
        if value.contains('\0') {
            return Err(invalid(
                field,
                format!("the value of {name} contains a NUL byte"),
            ));
        }
        env.retain(|(existing, _)| existing != name);
        env.push((name.to_owned(), value.to_owned()));
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn spec(workspace: &Path) -> SandboxSpec {
        SandboxSpec::new(vec!["/bin/true".into()], workspace)
    }

    #[test]
    fn workdir_cannot_leave_the_workspace() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir(dir.path().join("sub")).expect("mkdir");
        let workspace = dir.path().canonicalize().expect("canonical");
        assert_eq!(
            validate_workdir(&workspace, Some(Path::new("sub"))).expect("inside"),
            PathBuf::from("sub")
        );
        assert_eq!(
            validate_workdir(&workspace, Some(Path::new("/workspace/sub"))).expect("sandbox path"),
            PathBuf::from("sub")
        );
        for bad in ["../", "sub/../..", "/etc"] {
            assert!(
                validate_workdir(&workspace, Some(Path::new(bad))).is_err(),
                "{bad} accepted"
            );
        }
        std::os::unix::fs::symlink("/", workspace.join("escape")).expect("symlink");
        assert!(
            validate_workdir(&workspace, Some(Path::new("escape"))).is_err(),
            "symlink out accepted"
        );
    }

    #[test]
    fn environment_holds_only_the_sandbox_variables_and_extras() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut request = spec(dir.path());
        request.policy.env.insert("EDITOR".into(), "vi".into());
        request.env.push(("LANG".into(), "de_DE.UTF-8".into()));
        let env = build_env(&request, Path::new("/workspace"), None).expect("env");
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, vec!["PATH", "HOME", "TERM", "EDITOR", "LANG"]);
        assert!(env.contains(&("HOME".into(), "/workspace".into())));
        assert!(env.contains(&("LANG".into(), "de_DE.UTF-8".into())));
    }

    #[test]
    fn path_prepend_comes_first_and_must_be_absolute() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut request = spec(dir.path());
        request.policy.path_prepend = vec!["/opt/a/bin".into(), "/workspace/bin".into()];
        let env = build_env(&request, Path::new("/workspace"), None).expect("env");
        assert!(env.contains(&(
            "PATH".into(),
            format!("/opt/a/bin:/workspace/bin:{SANDBOX_PATH}")
        )));
        for bad in ["bin", "/a:/b", "~/bin"] {
            request.policy.path_prepend = vec![bad.into()];
            let error = build_env(&request, Path::new("/workspace"), None)
                .expect_err("a bad directory is refused");
            assert!(error.to_string().contains("pathPrepend"), "{error}");
        }
    }

    #[test]
    fn environment_rejects_bad_names_and_fixed_variables() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (name, value) in [
            ("1BAD", "x"),
            ("A=B", "x"),
            ("HOME", "/root"),
            ("OK", "nul\0byte"),
        ] {
            let mut request = spec(dir.path());
            request.env.push((name.into(), value.into()));
            assert!(
                build_env(&request, Path::new("/workspace"), None).is_err(),
                "{name:?} accepted"
            );
        }
    }

    #[test]
    fn extra_paths_may_not_shadow_sandbox_paths() {
        assert!(validate_extra_paths(&[PathBuf::from("/tmp")]).is_err());
        assert!(validate_extra_paths(&[PathBuf::from("relative")]).is_err());
        assert!(validate_extra_paths(&[PathBuf::from("/")]).is_err());
        assert_eq!(
            validate_extra_paths(&[PathBuf::from("/usr")]).expect("usr"),
            vec![PathBuf::from("/usr")]
        );
    }

    #[test]
    fn timeout_override_is_capped_at_the_maximum() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut request = spec(dir.path());
        request.timeout = Some(Duration::from_secs(10_000));
        assert_eq!(
            choose_timeout(&request).expect("timeout"),
            Duration::from_secs(1800)
        );
        request.timeout = None;
        assert_eq!(
            choose_timeout(&request).expect("timeout"),
            Duration::from_secs(120)
        );
        request.timeout = Some(Duration::ZERO);
        assert!(choose_timeout(&request).is_err());
    }

    #[test]
    fn program_must_be_an_absolute_path() {
        assert!(validate_argv(&["sh".into()]).is_err());
        assert!(validate_argv(&[]).is_err());
        assert!(validate_argv(&["/bin/sh".into(), "-c".into(), "true".into()]).is_ok());
    }
}
