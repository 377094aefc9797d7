//! The Landlock layer: read-only system paths, read-write workspace and tmp, nothing else.
//!
//! The parent plans the rules (paths as C strings with the access they get); the child builds
//! and enforces the ruleset after the mount namespace is in place, so the rules name the
//! sandbox's own inodes (a fresh `/tmp` tmpfs has no host path to name beforehand). The ABI is
//! used as far as the kernel offers (best effort up to file ABI v5, TCP ABI v4, scopes ABI v6);
//! the enforcement status is reported back. This file must not decide which paths are visible
//! (the mount plan does) and must not widen a grant beyond what the plan names.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

/// File-system ABI whose access rights are handled (v5 adds device ioctls).
const FS_ABI: ABI = ABI::V5;
/// Network ABI (TCP bind/connect rules).
const NET_ABI: ABI = ABI::V4;
/// Scope ABI (signals and abstract UNIX sockets confined to the sandbox).
const SCOPE_ABI: ABI = ABI::V6;
/// `LANDLOCK_CREATE_RULESET_VERSION`: ask the kernel for its ABI version.
const CREATE_RULESET_VERSION: libc::c_uint = 1;

/// What a rule grants beneath its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grant {
    /// List directories only (the sandbox root, `/dev`).
    ListOnly,
    /// Read and execute a directory tree.
    ReadOnlyTree,
    /// Read and execute one file.
    ReadOnlyFile,
    /// Everything (workspace, tmp).
    ReadWrite,
    /// A character device; `writable` adds writes and truncation (`/dev/null`).
    Device { writable: bool },
    /// Read the sandbox's own `/proc` (no execution).
    ProcRead,
}

impl Grant {
    fn access(self) -> BitFlags<AccessFs> {
        let file = AccessFs::from_file(FS_ABI);
        match self {
            Grant::ListOnly => AccessFs::ReadDir.into(),
            Grant::ReadOnlyTree => AccessFs::from_read(FS_ABI),
            Grant::ReadOnlyFile => AccessFs::from_read(FS_ABI) & file,
            Grant::ReadWrite => AccessFs::from_all(FS_ABI),
            Grant::Device { writable: false } => AccessFs::ReadFile | AccessFs::IoctlDev,
            Grant::Device { writable: true } => {
                AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev
            }
            Grant::ProcRead => AccessFs::ReadFile | AccessFs::ReadDir,
        }
    }
}

/// How much of the requested ruleset the kernel enforced, as reported by the child.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LandlockEnforcement {
    /// Every requested restriction is enforced.
    Full,
    /// The kernel's older ABI enforces a subset (e.g. no TCP or scope rules).
    Partial,
    /// Nothing was enforced.
    None,
}

impl LandlockEnforcement {
    pub(crate) fn code(self) -> i32 {
        match self {
            LandlockEnforcement::Full => 2,
            LandlockEnforcement::Partial => 1,
            LandlockEnforcement::None => 0,
        }
    }

    pub(crate) fn from_code(code: i32) -> Self {
        match code {
            2 => LandlockEnforcement::Full,
            1 => LandlockEnforcement::Partial,
            _ => LandlockEnforcement::None,
        }
    }
}

/// One planned rule.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    path: CString,
    grant: Grant,
}

/// The ruleset the child enforces on itself.
#[derive(Clone, Debug, Default)]
pub(crate) struct LandlockPlan {
    rules: Vec<Rule>,
    deny_tcp: bool,
}

impl LandlockPlan {
    /// An empty plan; `deny_tcp` also handles TCP bind/connect with no rule allowing any.
    pub(crate) fn new(deny_tcp: bool) -> Self {
        Self {
            rules: Vec::new(),
            deny_tcp,
        }
    }

    /// Grants `grant` beneath `path` (a path as the child will see it).
    pub(crate) fn allow(&mut self, path: &Path, grant: Grant) -> Result<(), io::Error> {
        let path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in a path"))?;
        self.rules.push(Rule { path, grant });
        Ok(())
    }

    /// Paths the plan grants, with their grant.
    #[cfg(test)]
    pub(crate) fn grants(&self) -> impl Iterator<Item = (&Path, Grant)> {
        self.rules.iter().map(|rule| {
            (
                Path::new(OsStr::from_bytes(rule.path.to_bytes())),
                rule.grant,
            )
        })
    }

    /// Builds and enforces the ruleset on the calling process (sets `no_new_privs`).
    /// Runs in the forked child; returns the index of a failing rule, or `None`, with errno.
    pub(crate) fn apply(&self) -> Result<LandlockEnforcement, (Option<usize>, i32)> {
        let mut ruleset = Ruleset::default()
            .handle_access(AccessFs::from_all(FS_ABI))
            .map_err(|e| (None, errno_of(&e)))?;
        if self.deny_tcp {
            ruleset = ruleset
                .handle_access(AccessNet::from_all(NET_ABI))
                .map_err(|e| (None, errno_of(&e)))?;
        }
        let mut created = ruleset
            .scope(Scope::from_all(SCOPE_ABI))
            .map_err(|e| (None, errno_of(&e)))?
            .create()
            .map_err(|e| (None, errno_of(&e)))?;
        for (index, rule) in self.rules.iter().enumerate() {
            let path = Path::new(OsStr::from_bytes(rule.path.to_bytes()));
            let fd = PathFd::new(path).map_err(|e| (Some(index), errno_of(&e)))?;
            created = created
                .add_rule(PathBeneath::new(fd, rule.grant.access()))
                .map_err(|e| (Some(index), errno_of(&e)))?;
        }
        let status = created.restrict_self().map_err(|e| (None, errno_of(&e)))?;
        Ok(match status.ruleset {
            RulesetStatus::FullyEnforced => LandlockEnforcement::Full,
            RulesetStatus::PartiallyEnforced => LandlockEnforcement::Partial,
            RulesetStatus::NotEnforced => LandlockEnforcement::None,
        })
    }

    /// The path of rule `index`, for error messages.
    pub(crate) fn rule_path(&self, index: usize) -> Option<&Path> {
        self.rules
            .get(index)
            .map(|rule| Path::new(OsStr::from_bytes(rule.path.to_bytes())))
    }
}

/// The errno buried in a landlock error, or EINVAL for a misuse the crate caught itself.
fn errno_of(error: &(dyn std::error::Error + 'static)) -> i32 {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(level) = current {
        if let Some(os) = level
            .downcast_ref::<io::Error>()
            .and_then(io::Error::raw_os_error)
        {
            return os;
        }
        current = level.source();
    }
    libc::EINVAL
}

/// The kernel's Landlock ABI version, or why Landlock is unavailable.
pub(crate) fn kernel_abi() -> Result<u32, String> {
    // SAFETY: with a null attribute and size 0 the syscall only reports the ABI version.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if version > 0 {
        return Ok(version as u32);
    }
    let error = io::Error::last_os_error();
    Err(match error.raw_os_error() {
        Some(libc::ENOSYS) => {
            "the kernel is built without Landlock (CONFIG_SECURITY_LANDLOCK)".to_owned()
        }
        Some(libc::EOPNOTSUPP) => {
            "Landlock is disabled at boot (add landlock to the kernel's lsm= parameter)".to_owned()
        }
        _ => format!("Landlock ABI query failed: {error}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_grants_never_include_write_rights() {
        let writes = AccessFs::from_write(FS_ABI);
        for grant in [
            Grant::ListOnly,
            Grant::ReadOnlyTree,
            Grant::ReadOnlyFile,
            Grant::ProcRead,
        ] {
            assert!(
                (grant.access() & writes).is_empty(),
                "{grant:?} grants a write right"
            );
        }
        assert!((Grant::Device { writable: false }.access() & AccessFs::WriteFile).is_empty());
    }

    #[test]
    fn file_grants_only_hold_rights_valid_on_files() {
        let file_rights = AccessFs::from_file(FS_ABI);
        for grant in [Grant::ReadOnlyFile, Grant::Device { writable: true }] {
            assert_eq!(grant.access() & file_rights, grant.access(), "{grant:?}");
        }
    }

    #[test]
    fn plan_records_paths_and_rejects_nul_bytes() {
        let mut plan = LandlockPlan::new(true);
        plan.allow(Path::new("/workspace"), Grant::ReadWrite)
            .expect("plain path");
        assert!(plan
            .allow(Path::new(OsStr::from_bytes(b"/bad\0path")), Grant::ListOnly)
            .is_err());
        let grants: Vec<_> = plan.grants().collect();
        assert_eq!(grants, vec![(Path::new("/workspace"), Grant::ReadWrite)]);
        assert_eq!(plan.rule_path(0), Some(Path::new("/workspace")));
    }

    #[test]
    fn enforcement_codes_round_trip() {
        for level in [
            LandlockEnforcement::Full,
            LandlockEnforcement::Partial,
            LandlockEnforcement::None,
        ] {
            assert_eq!(LandlockEnforcement::from_code(level.code()), level);
        }
    }
}
