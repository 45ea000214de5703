//! Depth-first walks in name order, and the stack of directories from the root down, with at
//! most [`OPEN_DIRS`](super::OPEN_DIRS) descriptors open.

use super::*;
use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use std::collections::BinaryHeap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::PathBuf;

/// The directories from a root down to the current one. Only the deepest [`OPEN_DIRS`] keep a
/// descriptor; a closed one is reopened through `..` from the one below it when the stack comes
/// back up to it, and must be the directory (device, inode) it was.
#[derive(Debug)]
pub struct DirStack {
    /// The current (deepest) directory, always open.
    current: OwnedFd,
    current_id: DirId,
    /// The directories above it, the root first; the deepest of them open.
    pub(super) above: Vec<(DirId, Option<OwnedFd>)>,
}

impl DirStack {
    /// A stack holding only `root` (a directory descriptor that can be read or searched).
    pub fn new(root: OwnedFd) -> io::Result<DirStack> {
        let st = rustix::fs::fstat(&root)?;
        Ok(DirStack {
            current: root,
            current_id: DirId::of(&st),
            above: Vec::new(),
        })
    }

    /// How many directories below the root the current one is.
    pub fn depth(&self) -> usize {
        self.above.len()
    }

    /// The current directory.
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.current.as_fd()
    }

    /// The root's device.
    fn root_dev(&self) -> u64 {
        self.above
            .first()
            .map_or(self.current_id.dev, |(id, _)| id.dev)
    }

    /// Makes `dir` (a subdirectory of the current one, opened by the caller) the current one.
    pub fn push(&mut self, dir: OwnedFd) -> io::Result<()> {
        let st = rustix::fs::fstat(&dir)?;
        let id = DirId::of(&st);
        let old = std::mem::replace(&mut self.current, dir);
        let old_id = std::mem::replace(&mut self.current_id, id);
        self.above.push((old_id, Some(old)));
        if self.above.len() >= OPEN_DIRS {
            let close = self.above.len() - OPEN_DIRS;
            self.above[close].1 = None;
        }
        Ok(())
    }

    /// Goes back up to the parent of the current directory; `false` at the root.
    pub fn pop(&mut self) -> io::Result<bool> {
        let Some((id, fd)) = self.above.pop() else {
            return Ok(false);
        };
        let fd = match fd {
            Some(fd) => fd,
            None => {
                let up = rustix::fs::openat(&self.current, c"..", dir_flags(), Mode::empty())?;
                let st = rustix::fs::fstat(&up)?;
                if DirId::of(&st) != id {
                    return Err(io::Error::other(
                        "a directory moved during the walk (`..` is no longer the directory it \
                         was reached from)",
                    ));
                }
                up
            }
        };
        self.current = fd;
        self.current_id = id;
        Ok(true)
    }

    /// Goes back up until the current directory is `depth` levels below the root.
    pub fn truncate(&mut self, depth: usize) -> io::Result<()> {
        while self.depth() > depth {
            self.pop()?;
        }
        Ok(())
    }

    /// Opens the subdirectory `name` of the current directory (never through a symlink, never
    /// on another file system than the root) and makes it the current one.
    pub fn enter(&mut self, name: &OsStr) -> io::Result<()> {
        let fd = rustix::fs::openat(&self.current, name, dir_flags(), Mode::empty())?;
        let st = rustix::fs::fstat(&fd)?;
        if DirId::of(&st).dev != self.root_dev() {
            return Err(io::Error::other(
                "a mount point (another file system): not entered",
            ));
        }
        self.push(fd)
    }
}

/// One entry a [`Walk`] returns.
#[derive(Debug)]
pub struct WalkEntry {
    /// Its path relative to the walk's root.
    pub rel: PathBuf,
    /// Its name.
    pub name: OsString,
    /// What `fstatat(AT_SYMLINK_NOFOLLOW)` said of it.
    pub stat: Stat,
    /// How many directories below the root the directory holding it is.
    pub depth: usize,
}

impl WalkEntry {
    /// Its type (a symlink is a symlink).
    pub fn file_type(&self) -> FileType {
        file_type(&self.stat)
    }

    /// Whether it is a directory (not a link to one).
    pub fn is_dir(&self) -> bool {
        self.file_type() == FileType::Directory
    }
}

/// What [`Walk::next`] found.
#[derive(Debug)]
pub enum Step {
    /// The next entry.
    Entry(WalkEntry),
    /// The walk's limit is reached; the path of the first entry left out. The walk is over.
    Limit(PathBuf),
}

/// A depth-first walk of a directory, the entries of each directory in byte order of their
/// names, holding at most [`OPEN_DIRS`] directory descriptors at any depth.
///
/// Entries are returned one by one; a directory is only walked into when the caller asks
/// ([`Walk::enter`]) right after it was returned, so the caller bounds the depth it goes to. At
/// most `limit` entries are returned, and the walk keeps at most `limit + 1` names in memory,
/// the ones it would return next (of a directory with more entries, the first in name order).
#[derive(Debug)]
pub struct Walk {
    dirs: DirStack,
    /// For each directory from the root down: its names not returned yet, largest first.
    pub(super) pending: Vec<Vec<OsString>>,
    /// The current directory, relative to the root.
    rel: PathBuf,
    /// How many more entries may be returned.
    left: u64,
    /// The directory entry returned last, which [`Walk::enter`] enters.
    last: Option<OsString>,
    trail: Trail,
    over: bool,
}

impl Walk {
    /// A walk of the directory `root` (a readable descriptor); `label` names it in errors.
    pub fn new(root: OwnedFd, label: &str, limit: u64) -> Result<Walk, TreeError> {
        let trail = Trail::new(label);
        let dirs = DirStack::new(root).map_err(|e| TreeError::Io {
            path: trail.at(None),
            op: "stat",
            source: e,
        })?;
        let names = read_names(dirs.dir(), limit.saturating_add(1))
            .map_err(|e| trail.io(None, "read directory", e))?;
        Ok(Walk {
            dirs,
            pending: vec![names],
            rel: PathBuf::new(),
            left: limit,
            last: None,
            trail,
            over: false,
        })
    }

    /// How many more entries the walk may return.
    pub fn left(&self) -> u64 {
        self.left
    }

    /// The directory holding the entry returned last (until [`Walk::enter`]).
    pub fn dir(&self) -> BorrowedFd<'_> {
        self.dirs.dir()
    }

    /// Walks into the directory [`Walk::next`] returned last: its entries come next.
    pub fn enter(&mut self) -> Result<(), TreeError> {
        let Some(name) = self.last.take() else {
            return Err(self.trail.refused(None, "no directory to enter"));
        };
        self.dirs.enter(&name).map_err(|e| TreeError::Io {
            path: self.trail.at(Some(&name)),
            op: "enter",
            source: e,
        })?;
        self.rel.push(&name);
        self.trail.push(&name);
        let names = match read_names(self.dirs.dir(), self.left.saturating_add(1)) {
            Ok(names) => names,
            Err(err) => {
                let err = self.trail.io(None, "read directory", err);
                // Back to where the walk was: the directory is skipped, the walk goes on.
                self.rel.pop();
                self.trail.pop();
                if self.dirs.pop().is_err() {
                    self.over = true;
                }
                return Err(err);
            }
        };
        self.pending.push(names);
        // Only the first `left + 1` names in walk order can still be returned or named: the
        // innermost directory's come first, the outermost's last.
        let mut room = self.left.saturating_add(1);
        for level in self.pending.iter_mut().rev() {
            let len = u64::try_from(level.len()).unwrap_or(u64::MAX);
            if len > room {
                let drop = usize::try_from(len - room).unwrap_or(level.len());
                level.drain(..drop);
            }
            room = room.saturating_sub(len);
        }
        Ok(())
    }
}

impl Iterator for Walk {
    type Item = Result<Step, TreeError>;

    /// The next entry, `Limit` once the limit is reached with entries left, `None` at the end.
    /// An entry that cannot be examined is an error and the walk goes on; a directory that
    /// moved (found on the way back up) is an error that ends the walk.
    fn next(&mut self) -> Option<Result<Step, TreeError>> {
        self.last = None;
        loop {
            if self.over {
                return None;
            }
            let top = self.pending.last_mut()?;
            let Some(name) = top.pop() else {
                self.pending.pop();
                if self.pending.is_empty() {
                    return None;
                }
                self.rel.pop();
                self.trail.pop();
                if let Err(err) = self.dirs.pop() {
                    self.over = true;
                    return Some(Err(TreeError::Io {
                        path: self.trail.at(None),
                        op: "back up",
                        source: err,
                    }));
                }
                continue;
            };
            if self.left == 0 {
                self.over = true;
                return Some(Ok(Step::Limit(self.rel.join(name))));
            }
            self.left -= 1;
            let stat = match rustix::fs::statat(self.dirs.dir(), &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(Errno::NOENT) => continue,
                Err(err) => return Some(Err(self.trail.io(Some(&name), "stat", err))),
            };
            if file_type(&stat) == FileType::Directory {
                self.last = Some(name.clone());
            }
            return Some(Ok(Step::Entry(WalkEntry {
                rel: self.rel.join(&name),
                name,
                stat,
                depth: self.dirs.depth(),
            })));
        }
    }
}

/// The names in the directory `dir` (`.` and `..` left out), at most `cap` of them (the first in
/// byte order), largest first.
fn read_names(dir: BorrowedFd<'_>, cap: u64) -> Result<Vec<OsString>, Errno> {
    let fd = rustix::fs::openat(
        dir,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut listing = Dir::new(fd)?;
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut heap: BinaryHeap<OsString> = BinaryHeap::new();
    if cap == 0 {
        return Ok(Vec::new());
    }
    while let Some(entry) = listing.read() {
        let entry = entry?;
        let name = entry.file_name();
        if is_dot(name) {
            continue;
        }
        let name = OsStr::from_bytes(name.to_bytes());
        if heap.len() == cap {
            if heap
                .peek()
                .is_some_and(|largest| name >= largest.as_os_str())
            {
                continue;
            }
            heap.pop();
        }
        heap.push(name.to_os_string());
    }
    let mut names = heap.into_sorted_vec();
    names.reverse();
    Ok(names)
}
