//! Mount and file syscalls the namespace init uses to build the sandbox root.
//!
//! Plain wrappers returning the errno, working on C strings prepared by the parent, with stack
//! buffers only: they run in a forked child of a multi-threaded process and must not allocate.
//! This file must not decide what is mounted where (the root plan in namespaces.rs does).

use std::ffi::CStr;

use super::limits::last_errno;

/// Longest path the child can handle without allocating.
pub(crate) const CHILD_PATH_MAX_BYTES: usize = 4096;

const AT_RECURSIVE: libc::c_uint = 0x8000;
pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x4;
const ST_NOEXEC: libc::c_ulong = 8;
const ST_NOATIME: libc::c_ulong = 1024;
const ST_NODIRATIME: libc::c_ulong = 2048;
const ST_RELATIME: libc::c_ulong = 4096;
const SIOCGIFFLAGS: libc::c_ulong = 0x8913;
const SIOCSIFFLAGS: libc::c_ulong = 0x8914;
const IFF_UP: libc::c_short = 0x1;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

#[repr(C)]
struct InterfaceRequest {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _rest: [u8; 22],
}

pub(crate) fn check(rc: libc::c_int) -> Result<(), i32> {
    if rc == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

pub(crate) fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> Result<(), i32> {
    let ptr = |value: Option<&CStr>| value.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is null or a NUL-terminated string that outlives the call.
    check(unsafe {
        libc::mount(
            ptr(source),
            target.as_ptr(),
            ptr(fstype),
            flags,
            ptr(data).cast(),
        )
    })
}

/// `chdir(new_root)` then `pivot_root(".", put_old)` then `chdir("/")`.
pub(crate) fn pivot(new_root: &CStr, put_old: &CStr) -> Result<(), i32> {
    // SAFETY: plain syscalls on NUL-terminated paths.
    unsafe {
        check(libc::chdir(new_root.as_ptr()))?;
        if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), put_old.as_ptr()) != 0 {
            return Err(last_errno());
        }
        check(libc::chdir(c"/".as_ptr()))
    }
}

pub(crate) fn make_mount_point(target: &CStr, is_dir: bool) -> Result<(), i32> {
    if is_dir {
        mkdir_all(target, true)
    } else {
        mkdir_all(target, false)?;
        write_new_file(target, b"")
    }
}

/// Creates every directory of `path` (all but the last component unless `include_last`).
pub(crate) fn mkdir_all(path: &CStr, include_last: bool) -> Result<(), i32> {
    let bytes = path.to_bytes();
    let mut buffer = [0u8; CHILD_PATH_MAX_BYTES];
    if bytes.len() >= buffer.len() {
        return Err(libc::ENAMETOOLONG);
    }
    buffer[..bytes.len()].copy_from_slice(bytes);
    for end in 1..=bytes.len() {
        let at_separator = end < bytes.len() && bytes[end] == b'/';
        if !(at_separator || (end == bytes.len() && include_last)) {
            continue;
        }
        buffer[end] = 0;
        // SAFETY: buffer holds a NUL-terminated prefix of the path.
        if unsafe { libc::mkdir(buffer.as_ptr().cast(), 0o755) } != 0
            && last_errno() != libc::EEXIST
        {
            return Err(last_errno());
        }
        if end < bytes.len() {
            buffer[end] = b'/';
        }
    }
    Ok(())
}

pub(crate) fn write_new_file(path: &CStr, contents: &[u8]) -> Result<(), i32> {
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: path is NUL-terminated; contents is a valid slice.
    unsafe {
        let fd = libc::open(path.as_ptr(), flags, 0o644);
        if fd < 0 {
            return Err(last_errno());
        }
        let written = libc::write(fd, contents.as_ptr().cast(), contents.len());
        let errno = last_errno();
        libc::close(fd);
        if written < 0 || written as usize != contents.len() {
            return Err(errno);
        }
    }
    Ok(())
}

pub(crate) fn write_file(path: &CStr, contents: &[u8]) -> Result<(), i32> {
    // SAFETY: path is NUL-terminated; contents is a valid slice.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(last_errno());
        }
        let written = libc::write(fd, contents.as_ptr().cast(), contents.len());
        let errno = last_errno();
        libc::close(fd);
        if written < 0 {
            return Err(errno);
        }
    }
    Ok(())
}

/// Sets mount attributes (never clears any: flags locked by the user namespace stay), with
/// `mount_setattr` where the kernel has it and a remount otherwise.
pub(crate) fn set_mount_flags(target: &CStr, recursive: bool, attr_set: u64) -> Result<(), i32> {
    let attr = MountAttr {
        attr_set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: attr is a valid mount_attr of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc == 0 {
        return Ok(());
    }
    if last_errno() != libc::ENOSYS {
        return Err(last_errno());
    }
    remount_with_flags(target, attr_set)
}

/// Pre-5.12 kernels: remount the bind keeping the flags it already has.
fn remount_with_flags(target: &CStr, attr_set: u64) -> Result<(), i32> {
    // SAFETY: statvfs writes into a zeroed struct; target is NUL-terminated.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    check(unsafe { libc::statvfs(target.as_ptr(), &mut stat) })?;
    let mut flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_NOSUID | libc::MS_NODEV;
    if attr_set & MOUNT_ATTR_RDONLY != 0 || stat.f_flag & libc::ST_RDONLY != 0 {
        flags |= libc::MS_RDONLY;
    }
    for (kept, flag) in [
        (ST_NOEXEC, libc::MS_NOEXEC),
        (ST_NOATIME, libc::MS_NOATIME),
        (ST_NODIRATIME, libc::MS_NODIRATIME),
        (ST_RELATIME, libc::MS_RELATIME),
    ] {
        if stat.f_flag & kept != 0 {
            flags |= flag;
        }
    }
    mount(None, target, None, flags, None)
}

/// Brings `lo` up in the new network namespace.
pub(crate) fn loopback_up() -> Result<(), i32> {
    // SAFETY: a datagram socket and two ioctls on a zeroed, correctly sized ifreq.
    unsafe {
        let socket = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if socket < 0 {
            return Err(last_errno());
        }
        let mut request: InterfaceRequest = std::mem::zeroed();
        request.name[0] = b'l' as libc::c_char;
        request.name[1] = b'o' as libc::c_char;
        let mut rc = libc::ioctl(
            socket,
            SIOCGIFFLAGS as _,
            &mut request as *mut InterfaceRequest,
        );
        if rc == 0 {
            request.flags |= IFF_UP;
            rc = libc::ioctl(
                socket,
                SIOCSIFFLAGS as _,
                &request as *const InterfaceRequest,
            );
        }
        let errno = last_errno();
        libc::close(socket);
        if rc != 0 {
            return Err(errno);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    fn c_path(path: &std::path::Path) -> CString {
        CString::new(path.as_os_str().as_bytes()).expect("no NUL")
    }

    #[test]
    fn mkdir_all_rejects_paths_longer_than_the_child_buffer() {
        let long = CString::new(vec![b'a'; CHILD_PATH_MAX_BYTES]).expect("no NUL");
        assert_eq!(mkdir_all(&long, true), Err(libc::ENAMETOOLONG));
    }

    #[test]
    fn mkdir_all_creates_nested_directories() {
        let root = tempfile::tempdir().expect("tempdir");
        let nested = root.path().join("a/b/c");
        mkdir_all(&c_path(&nested), true).expect("mkdir");
        assert!(nested.is_dir());
        let file_parent = root.path().join("x/y/file");
        mkdir_all(&c_path(&file_parent), false).expect("mkdir parents");
        assert!(root.path().join("x/y").is_dir());
        assert!(!file_parent.exists());
    }
}
