//! Unit tests of the parent module, kept apart so the module stays readable.
use super::*;

fn inputs<'a>(
    workspace: &'a Path,
    system: &'a [SystemPath],
    proc: bool,
    isolate: bool,
) -> RootInputs<'a> {
    RootInputs {
        workspace,
        read_only_workspace: None,
        system,
        extra_read_only: &[],
        tmp_bytes: 1 << 20,
        pid_max: 64,
        mount_proc: proc,
        isolate_network: isolate,
    }
}

#[test]
fn system_paths_keep_merged_usr_symlinks_as_symlinks() {
    let found = system_paths(false);
    assert!(found
        .iter()
        .any(|p| p.path == Path::new("/usr") && p.kind == NodeKind::Directory));
    if let Ok(target) = fs::read_link("/bin") {
        let bin = found
            .iter()
            .find(|p| p.path == Path::new("/bin"))
            .expect("/bin planned");
        assert_eq!(bin.kind, NodeKind::Symlink(target));
    }
    assert!(found
        .iter()
        .all(|p| !p.path.starts_with("/home") && !p.path.starts_with("/root")));
}

#[test]
fn root_plan_binds_workspace_writable_and_system_read_only() {
    let system = system_paths(false);
    let plan = RootPlan::build(&inputs(Path::new("/srv/ws"), &system, true, true)).expect("plan");
    let writable: Vec<_> = plan
        .entries
        .iter()
        .filter_map(|e| match e {
            MountEntry::WritableBind { source, target } => Some((source.clone(), target.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        writable,
        vec![(
            c"/oldroot/srv/ws".to_owned(),
            c"/newroot/workspace".to_owned()
        )]
    );
    let usr = plan.entries.iter().any(|e| {
        matches!(e, MountEntry::ReadOnlyBind { target, is_dir: true, .. } if target.as_c_str() == c"/newroot/usr")
    });
    assert!(usr, "/usr bound read-only");
    assert!(plan
        .entries
        .iter()
        .any(|e| matches!(e, MountEntry::Proc { .. })));
}

#[test]
fn root_plan_without_proc_has_no_proc_mount() {
    let plan = RootPlan::build(&inputs(Path::new("/srv/ws"), &[], false, false)).expect("plan");
    assert!(!plan
        .entries
        .iter()
        .any(|e| matches!(e, MountEntry::Proc { .. } | MountEntry::ReadOnlySelf { .. })));
    assert!(!plan.isolate_network);
}

#[test]
fn landlock_grants_follow_the_root_plan() {
    let system = system_paths(false);
    let plan = RootPlan::build(&inputs(Path::new("/srv/ws"), &system, true, true)).expect("plan");
    let landlock = plan.landlock_plan(false).expect("landlock plan");
    let grants: Vec<(PathBuf, Grant)> = landlock
        .grants()
        .map(|(p, g)| (p.to_path_buf(), g))
        .collect();
    let grant_of = |path: &str| {
        grants
            .iter()
            .find(|(p, _)| p == Path::new(path))
            .map(|(_, g)| *g)
    };
    assert_eq!(grant_of("/workspace"), Some(Grant::ReadWrite));
    assert_eq!(grant_of("/tmp"), Some(Grant::ReadWrite));
    assert_eq!(grant_of("/usr"), Some(Grant::ReadOnlyTree));
    assert_eq!(grant_of("/dev"), Some(Grant::ListOnly));
    assert_eq!(
        grant_of("/dev/null"),
        Some(Grant::Device { writable: true })
    );
    assert_eq!(
        grant_of("/dev/urandom"),
        Some(Grant::Device { writable: false })
    );
    assert_eq!(grant_of("/proc"), Some(Grant::ProcRead));
    assert_eq!(grant_of("/"), Some(Grant::ListOnly));
}

#[test]
fn entries_are_described_by_their_sandbox_path() {
    let plan = RootPlan::build(&inputs(Path::new("/srv/ws"), &[], false, true)).expect("plan");
    let index = plan
        .entries
        .iter()
        .position(|e| matches!(e, MountEntry::WritableBind { .. }))
        .expect("workspace entry");
    assert_eq!(plan.describe(index), "writable bind of /workspace");
}
