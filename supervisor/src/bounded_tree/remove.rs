//! Bottom-up removal of a tree of any depth, holding at most three descriptors.

use super::*;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path};

/// Removes `path` and, when it is a directory, everything below it (see [`remove_at`]); its
/// parent directory is opened as given. Returns how many entries were removed (0 when `path`
/// does not exist).
pub fn remove_path(path: &Path) -> Result<u64, TreeError> {
    let (parent, name) = match (path.parent(), path.components().next_back()) {
        (Some(parent), Some(Component::Normal(name))) => (parent, name),
        _ => {
            return Err(TreeError::Refused {
                path: path.display().to_string(),
                why: "not a path to an entry that can be removed",
            })
        }
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let label = parent.display().to_string();
    let dir = match rustix::fs::open(
        parent,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(dir) => dir,
        Err(Errno::NOENT) => return Ok(0),
        Err(err) => return Err(Trail::new(&label).io(None, "open directory", err)),
    };
    remove_at(dir.as_fd(), name, &label)
}

/// Removes the entry `name` of the directory `parent` and, when it is a directory, everything
/// below it, at any depth, bottom-up, without following a symlink (a link is removed, not what
/// it points to). `label` names `parent` in errors. Returns how many entries were removed (0 when
/// `name` does not exist).
///
/// A directory on another file system than `parent` (a mount point, at the top or anywhere
/// below) is refused, and a directory that is no longer where the removal reached it (moved
/// while being removed) stops the removal: nothing outside the tree is ever touched.
pub fn remove_at(parent: BorrowedFd<'_>, name: &OsStr, label: &str) -> Result<u64, TreeError> {
    let trail = Trail::new(label);
    let st = match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(0),
        Err(err) => return Err(trail.io(Some(name), "stat", err)),
    };
    if file_type(&st) != FileType::Directory {
        return match unlink_restoring(parent, name, AtFlags::empty()) {
            Ok(()) => Ok(1),
            Err(Errno::NOENT) => Ok(0),
            Err(err) => Err(trail.io(Some(name), "remove", err)),
        };
    }
    let parent_st = rustix::fs::fstat(parent).map_err(|e| trail.io(None, "stat", e))?;
    if DirId::of(&parent_st).dev != DirId::of(&st).dev {
        return Err(trail.refused(
            Some(name),
            "a mount point (another file system): not removed",
        ));
    }
    let dir = match open_dir_at_restoring(parent, name) {
        Ok(dir) => dir,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(trail.io(Some(name), "open directory", errno_of(&err))),
    };
    let mut trail = trail;
    trail.push(name);
    let mut removed = empty(dir, &mut trail)?;
    trail.pop();
    match unlink_restoring(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) => removed += 1,
        Err(Errno::NOENT) => {}
        Err(err) => return Err(trail.io(Some(name), "remove directory", err)),
    }
    Ok(removed)
}

/// What one pass over a directory found.
enum Pass {
    /// Everything in it is gone.
    Empty,
    /// A non-empty subdirectory to step into: its descriptor, identity and name.
    Down(OwnedFd, DirId, OsString),
    /// An entry changed type under the pass: read the directory again.
    Changed,
}

/// Removes everything below the directory `root` (which stays), bottom-up, with one open
/// directory at a time: each directory is read until a non-empty subdirectory turns up, which is
/// stepped into; an emptied directory is left through `..` (checked against the identity it was
/// reached from) and removed when its parent is read again.
fn empty(root: OwnedFd, trail: &mut Trail) -> Result<u64, TreeError> {
    let st = rustix::fs::fstat(&root).map_err(|e| trail.io(None, "stat", e))?;
    let dev = DirId::of(&st).dev;
    // The identity of every directory from `root` down to the current one.
    let mut ids = vec![DirId::of(&st)];
    let mut cur = Dir::new(root).map_err(|e| trail.io(None, "read directory", e))?;
    let mut removed = 0u64;
    let mut changes = 0u32;
    loop {
        match pass(&mut cur, dev, trail, &mut removed)? {
            Pass::Changed => {
                changes += 1;
                if changes > CHANGES {
                    return Err(trail.refused(None, "kept changing while being removed"));
                }
                cur.rewind();
            }
            Pass::Down(child, id, name) => {
                changes = 0;
                ids.push(id);
                trail.push(&name);
                cur = Dir::new(child).map_err(|e| trail.io(None, "read directory", e))?;
            }
            Pass::Empty => {
                if ids.len() == 1 {
                    return Ok(removed);
                }
                let fd = cur.fd().map_err(|e| trail.io(None, "read directory", e))?;
                let up = rustix::fs::openat(
                    fd,
                    c"..",
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| trail.io(None, "open ..", e))?;
                let st = rustix::fs::fstat(&up).map_err(|e| trail.io(None, "stat ..", e))?;
                ids.pop();
                if ids.last() != Some(&DirId::of(&st)) {
                    return Err(trail.refused(
                        None,
                        "moved while being removed (its parent is no longer the directory it \
                         was reached from): stopped",
                    ));
                }
                trail.pop();
                cur = Dir::new(up).map_err(|e| trail.io(None, "read directory", e))?;
            }
        }
    }
}

/// One pass of [`empty`] over `cur`: removes every non-directory and every empty directory up to
/// the first non-empty subdirectory.
fn pass(cur: &mut Dir, dev: u64, trail: &Trail, removed: &mut u64) -> Result<Pass, TreeError> {
    while let Some(entry) = cur.read() {
        let entry = entry.map_err(|e| trail.io(None, "read directory", e))?;
        let name = entry.file_name();
        if is_dot(name) {
            continue;
        }
        let os = OsStr::from_bytes(name.to_bytes());
        let fd = cur.fd().map_err(|e| trail.io(None, "read directory", e))?;
        let mut kind = entry.file_type();
        if kind == FileType::Unknown {
            kind = match rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => file_type(&st),
                Err(Errno::NOENT) => continue,
                Err(err) => return Err(trail.io(Some(os), "stat", err)),
            };
        }
        if kind != FileType::Directory {
            match unlink_restoring(fd, os, AtFlags::empty()) {
                Ok(()) => *removed += 1,
                Err(Errno::NOENT) => {}
                Err(Errno::ISDIR) => return Ok(Pass::Changed),
                Err(err) => return Err(trail.io(Some(os), "remove", err)),
            }
            continue;
        }
        match unlink_restoring(fd, os, AtFlags::REMOVEDIR) {
            Ok(()) => {
                *removed += 1;
                continue;
            }
            Err(Errno::NOENT) => continue,
            Err(Errno::NOTEMPTY | Errno::EXIST) => {}
            Err(Errno::NOTDIR) => return Ok(Pass::Changed),
            Err(Errno::BUSY) => {
                return Err(
                    trail.refused(Some(os), "a mount point (another file system): not removed")
                );
            }
            Err(err) => return Err(trail.io(Some(os), "remove directory", err)),
        }
        let child = match open_dir_at_restoring(fd, os).map_err(|e| errno_of(&e)) {
            Ok(child) => child,
            Err(Errno::NOENT) => continue,
            Err(Errno::NOTDIR | Errno::LOOP) => return Ok(Pass::Changed),
            Err(err) => return Err(trail.io(Some(os), "open directory", err)),
        };
        let st = rustix::fs::fstat(&child).map_err(|e| trail.io(Some(os), "stat", e))?;
        let id = DirId::of(&st);
        if id.dev != dev {
            return Err(trail.refused(Some(os), "a mount point (another file system): not removed"));
        }
        return Ok(Pass::Down(child, id, os.to_os_string()));
    }
    Ok(Pass::Empty)
}
