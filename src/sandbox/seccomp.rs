//! The seccomp layer: a deny-list of syscalls a sandboxed command never needs.
//!
//! Two BPF programs are compiled in the parent and installed by the child right before exec:
//! a hand-written guard (foreign architectures killed, x32 syscalls and `clone3` answered with
//! ENOSYS so libc falls back to `clone`, whose flags *can* be inspected) and a seccompiler
//! deny-list answering EPERM (ptrace, mount APIs, kexec, bpf, perf, keyrings, userfaultfd,
//! reboot, swap, modules, clock setting, unsafe personalities, io_uring, and new user
//! namespaces through `unshare`/`clone`). This file must not allocate in `apply` (it runs in a
//! forked child) and must not allow-list: everything not named here stays allowed.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use super::limits::last_errno;

/// `personality(2)` values that are safe to allow (Docker's list): PER_LINUX, PER_LINUX32,
/// UNAME26 variants, and the query value.
const SAFE_PERSONALITIES: [u64; 5] = [0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

// Classic BPF opcodes and seccomp return values used by the guard program.
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_DATA_NR_OFFSET: u32 = 0;
const SECCOMP_DATA_ARCH_OFFSET: u32 = 4;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
/// `kexec_file_load`, which the libc crate does not name for aarch64 musl.
#[cfg(all(target_arch = "aarch64", target_env = "musl"))]
const SYS_KEXEC_FILE_LOAD: libc::c_long = 294;
#[cfg(not(all(target_arch = "aarch64", target_env = "musl")))]
const SYS_KEXEC_FILE_LOAD: libc::c_long = libc::SYS_kexec_file_load;
/// Syscall numbers at or above this on x86_64 are the x32 ABI.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Why the filter could not be built for this machine.
#[derive(Debug, thiserror::Error)]
pub enum SeccompBuildError {
    /// seccompiler has no backend for this CPU architecture.
    #[error("seccomp filters are not supported on the {0} architecture")]
    UnsupportedArch(&'static str),
    /// seccompiler rejected the rule set.
    #[error("seccomp filter compilation failed: {0}")]
    Compile(#[from] seccompiler::BackendError),
}

/// The compiled programs, installed in the child.
#[derive(Clone, Debug)]
pub(crate) struct SeccompPlan {
    guard: BpfProgram,
    deny: BpfProgram,
}

impl SeccompPlan {
    /// Compiles both programs for the running architecture.
    pub(crate) fn build() -> Result<Self, SeccompBuildError> {
        let arch_name = std::env::consts::ARCH;
        let arch = TargetArch::try_from(arch_name)
            .map_err(|_| SeccompBuildError::UnsupportedArch(arch_name))?;
        let filter = SeccompFilter::new(
            deny_rules()?,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )?;
        Ok(Self {
            guard: guard_program(audit_arch(arch)),
            deny: filter.try_into()?,
        })
    }

    /// Installs both filters on the calling process (sets `no_new_privs` first).
    /// Runs in the forked child: no allocation.
    pub(crate) fn apply(&self) -> Result<(), i32> {
        for program in [&self.guard, &self.deny] {
            seccompiler::apply_filter(program).map_err(|error| match error {
                seccompiler::Error::Prctl(e) | seccompiler::Error::Seccomp(e) => {
                    e.raw_os_error().unwrap_or(libc::EINVAL)
                }
                _ => last_errno(),
            })?;
        }
        Ok(())
    }
}

fn audit_arch(arch: TargetArch) -> u32 {
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;
    const AUDIT_ARCH_RISCV64: u32 = 0xc000_00f3;
    match arch {
        TargetArch::x86_64 => AUDIT_ARCH_X86_64,
        TargetArch::aarch64 => AUDIT_ARCH_AARCH64,
        TargetArch::riscv64 => AUDIT_ARCH_RISCV64,
    }
}

fn statement(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Kills foreign-architecture syscalls, answers x32 syscalls and `clone3` with ENOSYS.
fn guard_program(native_arch: u32) -> BpfProgram {
    let enosys = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    let clone3 = libc::SYS_clone3 as u32;
    let x32_floor = if cfg!(target_arch = "x86_64") {
        X32_SYSCALL_BIT
    } else {
        u32::MAX
    };
    vec![
        statement(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_ARCH_OFFSET),
        statement(BPF_JMP_JEQ_K, 1, 0, native_arch),
        statement(BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        statement(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR_OFFSET),
        statement(BPF_JMP_JGE_K, 2, 0, x32_floor),
        statement(BPF_JMP_JEQ_K, 1, 0, clone3),
        statement(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
        statement(BPF_RET_K, 0, 0, enosys),
    ]
}

/// Syscalls denied outright (EPERM).
fn unconditional_denials() -> Vec<libc::c_long> {
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut denied = vec![
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_setns,
        libc::SYS_kexec_load,
        SYS_KEXEC_FILE_LOAD,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_userfaultfd,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_settimeofday,
        libc::SYS_adjtimex,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_open_by_handle_at,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_syslog,
    ];
    #[cfg(target_arch = "x86_64")]
    denied.extend([libc::SYS_iopl, libc::SYS_ioperm, libc::SYS_uselib]);
    denied
}

/// A syscall number as seccompiler's rule key (`c_long` is 32 bits on 32-bit ARM).
#[allow(clippy::useless_conversion)]
fn syscall_key(nr: libc::c_long) -> i64 {
    i64::from(nr)
}

fn deny_rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, SeccompBuildError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = unconditional_denials()
        .into_iter()
        .map(|nr| (syscall_key(nr), Vec::new()))
        .collect();
    // A new user namespace would hand the command a fresh set of capabilities.
    let new_user_ns = libc::CLONE_NEWUSER as u64;
    let flags_have_new_user_ns = || {
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(new_user_ns),
            new_user_ns,
        )
    };
    rules.insert(
        syscall_key(libc::SYS_unshare),
        vec![SeccompRule::new(vec![flags_have_new_user_ns()?])?],
    );
    rules.insert(
        syscall_key(libc::SYS_clone),
        vec![SeccompRule::new(vec![flags_have_new_user_ns()?])?],
    );
    // Personality changes such as ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC weaken the process.
    let unsafe_personality = SAFE_PERSONALITIES
        .iter()
        .map(|&value| SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, value))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(
        syscall_key(libc::SYS_personality),
        vec![SeccompRule::new(unsafe_personality)?],
    );
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_compiles_for_this_machine_or_names_the_architecture() {
        match SeccompPlan::build() {
            Ok(plan) => {
                assert!(!plan.deny.is_empty());
                assert_eq!(plan.guard.len(), 8);
            }
            Err(SeccompBuildError::UnsupportedArch(arch)) => {
                assert_eq!(arch, std::env::consts::ARCH);
            }
            Err(other) => panic!("filter did not compile: {other}"),
        }
    }

    #[test]
    fn guard_jumps_land_on_the_intended_returns() {
        let program = guard_program(0xc000_003e);
        // After the x32 check (index 4), a true branch skips 2 to the ENOSYS return (index 7).
        assert_eq!(program[4].jt, 2);
        assert_eq!(program[7].k, SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        // clone3 (index 5) jumps 1 to the same ENOSYS return.
        assert_eq!(usize::from(program[5].jt) + 6, 7);
        assert_eq!(program[6].k, SECCOMP_RET_ALLOW);
    }

    #[test]
    fn every_denied_syscall_is_in_the_rule_map() {
        let rules = deny_rules().expect("rules");
        for nr in unconditional_denials() {
            assert!(
                rules.get(&syscall_key(nr)).is_some_and(Vec::is_empty),
                "syscall {nr} denied outright"
            );
        }
        for nr in [libc::SYS_unshare, libc::SYS_clone, libc::SYS_personality] {
            assert_eq!(
                rules.get(&syscall_key(nr)).map(Vec::len),
                Some(1),
                "syscall {nr} has one conditional rule"
            );
        }
    }
}
