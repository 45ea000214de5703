//! Walks and removals of trees the agent could have written, in a bounded number of file
//! descriptors and bounded memory at any depth.
//!
//! An agent can build a directory chain tens of thousands of levels deep, or a path longer than
//! `PATH_MAX`, in everything it may write: the workspace, its config and sessions directories,
//! `output/`. A recursive removal (`std::fs::remove_dir_all`) holds one descriptor per level and
//! fails with `EMFILE` (or runs out of stack); a walk that builds full paths fails with
//! `ENAMETOOLONG`. Everything here works relative to directory descriptors, one component at a
//! time, never through a full path:
//!
//! - [`remove_at`] and [`remove_path`]: bottom-up removal holding at most three descriptors
//!   (the caller's parent, the directory being emptied and the one being stepped into).
//! - [`Walk`]: a depth-first walk in name order (for copies and archives) holding at most
//!   [`OPEN_DIRS`] directory descriptors, with a cap on the entries it returns that also caps
//!   the names it keeps in memory.
//! - [`DirStack`]: the directories from a root down to the current one, of which only the
//!   deepest [`OPEN_DIRS`] stay open.
//!
//! No symbolic link is ever followed: directories are opened with `O_DIRECTORY | O_NOFOLLOW`, a
//! link is removed or reported, never entered. Nothing leaves the tree it started in: a directory
//! on another file system (a mount point) is neither entered nor removed, and every step back up
//! (`openat(dir, "..")`) must reach the very directory (device, inode) it came down from, so a
//! directory moved elsewhere during the walk ends it with an error instead of carrying on in its
//! new parent. Memory grows by 16 bytes per level of depth (the device and inode of each
//! directory on the way down, 24 with [`DirStack`]), plus at most [`TRAIL_BYTES`] of names kept
//! to name a deep entry in messages.

mod remove;
#[cfg(all(test, target_os = "linux"))]
pub(crate) mod test_support;
#[cfg(all(test, target_os = "linux"))]
mod tests;
mod walk;

pub use remove::{remove_at, remove_path};
pub use walk::{DirStack, Step, Walk, WalkEntry};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use std::ffi::{CStr, OsStr, OsString};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

/// Most directory descriptors a [`Walk`] or [`DirStack`] keeps open.
pub const OPEN_DIRS: usize = 16;
/// Most bytes of names kept to name a deep entry in messages; deeper levels are counted.
pub const TRAIL_BYTES: usize = 1024;
/// How many times in a row a directory may change under a removal before it gives up.
const CHANGES: u32 = 100;

/// Why a walk or removal stopped.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// A system call failed on `path`.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The entry (deep ones shortened, see [`TRAIL_BYTES`]).
        path: String,
        /// What was being done (`remove`, `open directory`, …).
        op: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The tree is not what the walk reached it as, or holds what must not be touched.
    #[error("{path}: {why}")]
    Refused {
        /// The entry (deep ones shortened).
        path: String,
        /// Why.
        why: &'static str,
    },
}

/// The (device, inode) of a directory: the identity a step back up must find again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DirId {
    dev: u64,
    ino: u64,
}

impl DirId {
    // `st_dev` and `st_ino` are narrower or signed on some Unixes.
    #[allow(clippy::unnecessary_cast)]
    fn of(st: &Stat) -> DirId {
        DirId {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
        }
    }
}

/// How every directory is opened: readable, never through a symlink.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn file_type(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

fn is_dot(name: &CStr) -> bool {
    matches!(name.to_bytes(), b"." | b"..")
}

/// Names a place deep in a tree for messages: the root's label, then at most [`TRAIL_BYTES`]
/// of names, then how many levels were left out.
#[derive(Debug, Clone)]
struct Trail {
    root: String,
    names: Vec<OsString>,
    bytes: usize,
    hidden: usize,
}

impl Trail {
    fn new(root: &str) -> Trail {
        let root = match root.trim_end_matches('/') {
            "" if root.starts_with('/') => String::new(),
            trimmed => trimmed.to_string(),
        };
        Trail {
            root,
            names: Vec::new(),
            bytes: 0,
            hidden: 0,
        }
    }

    fn push(&mut self, name: &OsStr) {
        if self.hidden == 0 && self.bytes + name.len() < TRAIL_BYTES {
            self.bytes += name.len() + 1;
            self.names.push(name.to_os_string());
        } else {
            self.hidden += 1;
        }
    }

    fn pop(&mut self) {
        if self.hidden > 0 {
            self.hidden -= 1;
        } else if let Some(name) = self.names.pop() {
            self.bytes -= name.len() + 1;
        }
    }

    /// The path of `leaf` in the current directory (of the directory itself without one).
    fn at(&self, leaf: Option<&OsStr>) -> String {
        let mut s = self.root.clone();
        for name in &self.names {
            s.push('/');
            s.push_str(&name.to_string_lossy());
        }
        if self.hidden > 0 {
            s.push_str(&format!("/…({} more levels)…", self.hidden));
        }
        if let Some(leaf) = leaf {
            s.push('/');
            s.push_str(&leaf.to_string_lossy());
        }
        if s.is_empty() {
            s.push('/');
        }
        s
    }

    fn io(&self, leaf: Option<&OsStr>, op: &'static str, err: Errno) -> TreeError {
        TreeError::Io {
            path: self.at(leaf),
            op,
            source: err.into(),
        }
    }

    fn refused(&self, leaf: Option<&OsStr>, why: &'static str) -> TreeError {
        TreeError::Refused {
            path: self.at(leaf),
            why,
        }
    }
}
/// Opens the directory `name` in `parent` for reading, never through a symlink.
pub fn open_dir_at(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        parent,
        name,
        dir_flags(),
        Mode::empty(),
    )?)
}

/// [`open_dir_at`] for a walk that removes: a directory its owner made unreadable (`chmod 000`,
/// `chmod 300`) first gets its owner's rights back. The agent may do that to what it owns, and
/// in the unprivileged mode the supervisor is that owner, without root's override: a removal
/// that stopped there would leave the tree to the next iteration, or fail every one after it.
pub fn open_dir_at_restoring(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    match open_dir_at(parent, name) {
        Err(e) if e.raw_os_error() == Some(Errno::ACCESS.raw_os_error()) => {
            restore_owner_rights(parent, name)?;
            open_dir_at(parent, name)
        }
        other => other,
    }
}

/// The errno of an I/O error (`EIO` for one that carries none).
pub fn errno_of(err: &io::Error) -> Errno {
    Errno::from_io_error(err).unwrap_or(Errno::IO)
}

/// Gives the directory `name` of `parent` (not followed: anything else is refused) its owner's
/// read, write and search rights back.
fn restore_owner_rights(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let st = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    if file_type(&st) != FileType::Directory {
        return Err(Errno::ACCESS.into());
    }
    let mode = Mode::from_raw_mode((st.st_mode & 0o7777) | 0o700);
    Ok(rustix::fs::chmodat(parent, name, mode, AtFlags::empty())?)
}

/// `unlinkat(dir, name, flags)`; refused for want of rights on `dir` (its owner made it
/// read-only or unsearchable), it is retried once `dir` has its owner's rights back (see
/// [`open_dir_at_restoring`]).
pub(crate) fn unlink_restoring(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    flags: AtFlags,
) -> rustix::io::Result<()> {
    match rustix::fs::unlinkat(dir, name, flags) {
        Err(Errno::ACCESS) => {
            let st = rustix::fs::fstat(dir)?;
            rustix::fs::fchmod(dir, Mode::from_raw_mode((st.st_mode & 0o7777) | 0o700))?;
            rustix::fs::unlinkat(dir, name, flags)
        }
        other => other,
    }
}

/// Opens the directory `path` for reading; its last component is not followed if it is a
/// symlink.
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(path, dir_flags(), Mode::empty())?)
}

/// The names in the directory `dir`, without `.` and `..`, read through a descriptor of their
/// own (so `dir` stays usable for `*at` calls, and entries may be removed after).
pub fn entry_names(dir: BorrowedFd<'_>) -> io::Result<Vec<OsString>> {
    use std::os::unix::ffi::OsStrExt as _;
    let own = open_dir_at(dir, OsStr::new("."))?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::new(own)? {
        let entry = entry?;
        if !is_dot(entry.file_name()) {
            names.push(OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string());
        }
    }
    Ok(names)
}
