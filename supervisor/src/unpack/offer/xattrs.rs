//! What a file or directory of the replaced tree may carry beside its content and mode: extended
//! attributes. Its owner (the agent, for the workspace) can set `user.*` attributes on it and
//! POSIX ACLs (`system.posix_acl_access`, a directory's `system.posix_acl_default`), and a tree
//! kept as it is, or a file moved into the new one, would carry them on. So a tree with any is
//! never kept ([`carries_any`]), and a file is stripped of every one before it is moved
//! ([`strip`]); one that cannot be removed makes it a copy instead (a new file carries none).
//!
//! `security.*` attributes stay: they are the kernel's (an LSM's label, which a new file gets too)
//! and no owner sets them, except `security.capability` (file capabilities, which only a
//! privileged process sets), which goes like the rest.

#[cfg(target_os = "linux")]
use rustix::io::Errno;
use std::ffi::CString;
use std::io;
use std::os::fd::BorrowedFd;

/// How often the list is read again when it grew between its size and its read.
#[cfg(target_os = "linux")]
const LIST_TRIES: usize = 3;

/// Whether the attribute `name` stays on a reused file.
fn stays(name: &[u8]) -> bool {
    name.starts_with(b"security.") && name != b"security.capability"
}

/// The names of `fd`'s attributes that may not stay (none on a file system without extended
/// attributes).
#[cfg(target_os = "linux")]
fn foreign(fd: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    for _ in 0..LIST_TRIES {
        let size = match rustix::fs::flistxattr_query(fd) {
            Ok(size) => size,
            Err(Errno::OPNOTSUPP) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        };
        if size == 0 {
            return Ok(Vec::new());
        }
        let mut list = vec![0u8; size];
        let len = match rustix::fs::flistxattr(fd, &mut list[..]) {
            Ok(len) => len,
            Err(Errno::RANGE) => continue,
            Err(e) => return Err(e.into()),
        };
        return Ok(list[..len]
            .split(|&b| b == 0)
            .filter(|name| !name.is_empty() && !stays(name))
            .filter_map(|name| CString::new(name).ok())
            .collect());
    }
    Err(io::Error::other(
        "its extended attributes kept changing while they were listed",
    ))
}

/// No extended attributes where moves are not made.
#[cfg(not(target_os = "linux"))]
fn foreign(_fd: BorrowedFd<'_>) -> io::Result<Vec<CString>> {
    Ok(Vec::new())
}

/// Whether `fd` carries an attribute that may not stay (or its attributes cannot be listed).
pub(super) fn carries_any(fd: BorrowedFd<'_>) -> bool {
    foreign(fd).map_or(true, |names| !names.is_empty())
}

/// Removes every attribute of `fd` that may not stay; `Err` when one cannot be listed or
/// removed (the file is then not moved but copied).
pub(super) fn strip(fd: BorrowedFd<'_>) -> io::Result<()> {
    let names = foreign(fd)?;
    if names.is_empty() {
        return Ok(());
    }
    #[cfg(target_os = "linux")]
    for name in &names {
        match rustix::fs::fremovexattr(fd, name.as_c_str()) {
            Ok(()) | Err(Errno::NODATA) => {}
            Err(e) => return Err(e.into()),
        }
    }
    match foreign(fd)?.first() {
        None => Ok(()),
        Some(name) => Err(io::Error::other(format!(
            "its extended attribute {name:?} is still there"
        ))),
    }
}
