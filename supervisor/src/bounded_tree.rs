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

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use std::collections::BinaryHeap;
use std::ffi::{CStr, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};

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
        return match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
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
    let dir = match rustix::fs::openat(parent, name, dir_flags(), Mode::empty()) {
        Ok(dir) => dir,
        Err(Errno::NOENT) => return Ok(0),
        Err(err) => return Err(trail.io(Some(name), "open directory", err)),
    };
    let mut trail = trail;
    trail.push(name);
    let mut removed = empty(dir, &mut trail)?;
    trail.pop();
    match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
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
            match rustix::fs::unlinkat(fd, name, AtFlags::empty()) {
                Ok(()) => *removed += 1,
                Err(Errno::NOENT) => {}
                Err(Errno::ISDIR) => return Ok(Pass::Changed),
                Err(err) => return Err(trail.io(Some(os), "remove", err)),
            }
            continue;
        }
        match rustix::fs::unlinkat(fd, name, AtFlags::REMOVEDIR) {
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
        let child = match rustix::fs::openat(fd, name, dir_flags(), Mode::empty()) {
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

/// The directories from a root down to the current one. Only the deepest [`OPEN_DIRS`] keep a
/// descriptor; a closed one is reopened through `..` from the one below it when the stack comes
/// back up to it, and must be the directory (device, inode) it was.
#[derive(Debug)]
pub struct DirStack {
    /// The current (deepest) directory, always open.
    current: OwnedFd,
    current_id: DirId,
    /// The directories above it, the root first; the deepest of them open.
    above: Vec<(DirId, Option<OwnedFd>)>,
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
    pending: Vec<Vec<OsString>>,
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

/// Opens the directory `name` in `parent` for reading, never through a symlink.
pub fn open_dir_at(parent: BorrowedFd<'_>, name: &OsStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        parent,
        name,
        dir_flags(),
        Mode::empty(),
    )?)
}

/// Opens the directory `path` for reading; its last component is not followed if it is a
/// symlink.
pub fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(path, dir_flags(), Mode::empty())?)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::test_support::with_fd_limit;
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    /// Builds a chain of `depth` directories named `d` below `top` (relative steps, so the full
    /// path may exceed `PATH_MAX`) with a file and a symlink at the bottom.
    fn chain(top: &Path, depth: usize) {
        fs::create_dir_all(top).unwrap();
        let mut dir = open_dir(top).unwrap();
        for _ in 0..depth {
            rustix::fs::mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap();
            dir = open_dir_at(dir.as_fd(), OsStr::new("d")).unwrap();
        }
        let f = rustix::fs::openat(
            &dir,
            "bottom.txt",
            OFlags::WRONLY | OFlags::CREATE,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
        drop(f);
        rustix::fs::symlinkat("/etc", &dir, "link").unwrap();
    }

    /// A temp dir removed with [`remove_path`] (the recursive removal of `TempDir` would run
    /// out of stack on a deep chain a failed test left behind).
    struct Scratch(tempfile::TempDir);

    impl Scratch {
        fn new() -> Scratch {
            Scratch(tempfile::tempdir().unwrap())
        }

        fn path(&self) -> &Path {
            self.0.path()
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = remove_path(self.0.path());
        }
    }

    fn open_fds() -> usize {
        fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
    }

    #[test]
    fn walks_and_removes_a_30000_deep_chain_with_64_descriptors() {
        let tmp = Scratch::new();
        let top = tmp.path().join("top");
        chain(&top, 30_000);
        with_fd_limit(64, || {
            // Walked to the bottom first, then removed.
            let root = open_dir(&top).map_err(|e| e.to_string())?;
            let mut walk = Walk::new(root, "top", u64::MAX).map_err(|e| e.to_string())?;
            let (mut entries, mut deepest) = (0, 0);
            while let Some(step) = walk.next() {
                let Step::Entry(e) = step.map_err(|e| e.to_string())? else {
                    return Err("limit".into());
                };
                entries += 1;
                deepest = deepest.max(e.depth);
                if e.file_type() == FileType::Directory {
                    walk.enter().map_err(|e| e.to_string())?;
                }
            }
            if (entries, deepest) != (30_002, 30_000) {
                return Err(format!("walked {entries} entries, {deepest} deep"));
            }
            let removed = remove_path(&top).map_err(|e| e.to_string())?;
            // 30000 directories, the top one, a file and a link.
            if removed != 30_003 {
                return Err(format!("removed {removed}"));
            }
            Ok(())
        });
        assert!(fs::symlink_metadata(&top).is_err());
        assert!(Path::new("/etc/passwd").exists());
    }

    #[test]
    fn removal_never_follows_links_and_counts_what_it_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let keep = tmp.path().join("keep");
        fs::create_dir(&keep).unwrap();
        fs::write(keep.join("precious"), b"x").unwrap();
        let top = tmp.path().join("top");
        fs::create_dir_all(top.join("a/b/c")).unwrap();
        fs::write(top.join("a/b/c/f"), b"1").unwrap();
        fs::write(top.join("a/g"), b"2").unwrap();
        fs::create_dir(top.join("empty")).unwrap();
        symlink(&keep, top.join("a/b/to-keep")).unwrap();
        symlink(&keep, top.join("link-dir")).unwrap();
        let removed = remove_path(&top).unwrap();
        // top, a, b, c, f, g, empty, two links.
        assert_eq!(removed, 9);
        assert!(!top.exists());
        assert!(keep.join("precious").is_file());
        // A symlink given as the path is removed itself.
        symlink(&keep, tmp.path().join("l")).unwrap();
        assert_eq!(remove_path(&tmp.path().join("l")).unwrap(), 1);
        assert!(keep.join("precious").is_file());
        // Nothing there: nothing removed.
        assert_eq!(remove_path(&tmp.path().join("absent")).unwrap(), 0);
        assert!(remove_path(Path::new("/")).is_err());
        assert!(remove_path(&tmp.path().join("a/..")).is_err());
    }

    #[test]
    fn a_directory_moved_out_during_a_walk_stops_it() {
        // Coming back up through `..` must reach the directory the walk came down from: a
        // directory an attacker moved elsewhere (here `top/a/b` to `outside/b`) is caught, and
        // the walk does not carry on in `outside`.
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("top");
        fs::create_dir_all(top.join("a/b")).unwrap();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        let mut stack = DirStack::new(open_dir(&top).unwrap()).unwrap();
        stack.enter(OsStr::new("a")).unwrap();
        stack.enter(OsStr::new("b")).unwrap();
        fs::rename(top.join("a/b"), outside.join("b")).unwrap();
        // Descriptors closed, as they are beyond `OPEN_DIRS` levels: the pop goes through `..`.
        for level in &mut stack.above {
            level.1 = None;
        }
        let err = stack.pop().unwrap_err();
        assert!(err.to_string().contains("moved"), "{err}");
    }

    #[test]
    fn a_walk_never_enters_another_file_system() {
        // `/proc` is another file system than `/`.
        let mut stack = DirStack::new(open_dir(Path::new("/")).unwrap()).unwrap();
        let err = stack.enter(OsStr::new("proc")).unwrap_err();
        assert!(err.to_string().contains("another file system"), "{err}");
        assert_eq!(stack.depth(), 0);
    }

    /// Unmounts its path when dropped.
    struct Mounted(std::ffi::CString);

    impl Drop for Mounted {
        fn drop(&mut self) {
            // SAFETY: umount2 with a NUL-terminated path.
            unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
        }
    }

    #[test]
    fn a_removal_never_crosses_into_another_file_system() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("top");
        let m = top.join("a/mnt");
        fs::create_dir_all(&m).unwrap();
        let path = std::ffi::CString::new(m.as_os_str().as_bytes()).unwrap();
        // SAFETY: mount with NUL-terminated strings and no data.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                path.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            eprintln!("skipped: mount tmpfs: {}", io::Error::last_os_error());
            return;
        }
        let _mounted = Mounted(path);
        fs::write(m.join("other-fs"), b"x").unwrap();
        let err = remove_path(&top).unwrap_err();
        assert!(err.to_string().contains("another file system"), "{err}");
        assert!(err.to_string().contains("/a/mnt"), "{err}");
        assert!(m.join("other-fs").is_file());
    }

    #[test]
    fn walks_in_name_order_at_depth_with_bounded_descriptors() {
        let tmp = Scratch::new();
        let top = tmp.path().join("top");
        fs::create_dir_all(top.join("b/y")).unwrap();
        fs::create_dir_all(top.join("a")).unwrap();
        fs::write(top.join("a/2"), b"").unwrap();
        fs::write(top.join("a/1"), b"").unwrap();
        fs::write(top.join("c"), b"").unwrap();
        chain(&top.join("b/y"), 3000);
        let before = open_fds();
        let mut walk = Walk::new(open_dir(&top).unwrap(), "top", u64::MAX).unwrap();
        let mut seen = Vec::new();
        let mut deepest = 0;
        let mut most_fds = 0;
        while let Some(step) = walk.next() {
            let Step::Entry(e) = step.unwrap() else {
                panic!("limit")
            };
            deepest = deepest.max(e.depth);
            most_fds = most_fds.max(open_fds());
            if e.file_type() == FileType::Directory {
                walk.enter().unwrap();
            }
            if e.depth < 3 {
                seen.push(e.rel.display().to_string());
            }
        }
        assert_eq!(seen, ["a", "a/1", "a/2", "b", "b/y", "b/y/d", "c"]);
        assert_eq!(deepest, 3002);
        // One per level would be 3000 and more.
        assert!(
            most_fds <= before + OPEN_DIRS + 8,
            "{most_fds} descriptors open (before: {before})"
        );
    }

    #[test]
    fn a_walks_limit_bounds_what_it_returns_and_keeps() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("top");
        fs::create_dir_all(top.join("a")).unwrap();
        for i in 0..50 {
            fs::write(top.join(format!("a/{i:02}")), b"").unwrap();
            fs::write(top.join(format!("z{i:02}")), b"").unwrap();
        }
        let mut walk = Walk::new(open_dir(&top).unwrap(), "top", 5).unwrap();
        let mut seen = Vec::new();
        let mut limit = None;
        while let Some(step) = walk.next() {
            match step.unwrap() {
                Step::Entry(e) => {
                    if e.file_type() == FileType::Directory {
                        walk.enter().unwrap();
                    }
                    seen.push(e.rel.display().to_string());
                    let kept: usize = walk.pending.iter().map(Vec::len).sum();
                    assert!(kept as u64 <= walk.left() + 1, "{kept} names kept");
                }
                Step::Limit(rel) => limit = Some(rel),
            }
        }
        assert_eq!(seen, ["a", "a/00", "a/01", "a/02", "a/03"]);
        assert_eq!(limit, Some(PathBuf::from("a/04")));
        assert_eq!(walk.left(), 0);
    }

    #[test]
    fn the_walk_reports_symlinks_and_never_enters_them() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("top");
        fs::create_dir(&top).unwrap();
        symlink("/etc", top.join("etc")).unwrap();
        let mut walk = Walk::new(open_dir(&top).unwrap(), "top", 10).unwrap();
        let Some(Ok(Step::Entry(e))) = walk.next() else {
            panic!("no entry")
        };
        assert_eq!(e.file_type(), FileType::Symlink);
        assert!(walk.enter().is_err());
        assert!(walk.next().is_none());
        // Opening a link as a directory fails too.
        assert!(open_dir(&top.join("etc")).is_err());
    }

    #[test]
    fn errors_name_deep_entries_within_a_bounded_message() {
        let mut trail = Trail::new("/base/");
        for _ in 0..5000 {
            trail.push(OsStr::new("dd"));
        }
        let at = trail.at(Some(OsStr::new("leaf")));
        assert!(at.starts_with("/base/dd/dd/"), "{at}");
        assert!(at.ends_with("more levels)…/leaf"), "{at}");
        assert!(at.len() < TRAIL_BYTES + 100, "{}", at.len());
        for _ in 0..5000 {
            trail.pop();
        }
        assert_eq!(trail.at(None), "/base");
        assert_eq!(Trail::new("/").at(Some(OsStr::new("x"))), "/x");
    }
}

/// Helpers for the tests of the modules that walk agent-written trees.
#[cfg(all(test, target_os = "linux"))]
pub(crate) mod test_support {
    use std::io;

    /// Runs `f` in a child process whose `RLIMIT_NOFILE` is `limit`, so a walk that needs more
    /// descriptors fails there; the test fails when the child does.
    pub fn with_fd_limit(limit: u64, f: impl FnOnce() -> Result<(), String>) {
        // SAFETY: the child only runs `f` (plain system calls through rustix and std) and
        // leaves with `_exit`; the test harness's other threads are not used in it.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            // Only the standard streams: the other threads' descriptors are not this test's.
            // SAFETY: close_range on descriptors this child does not use.
            unsafe { libc::syscall(libc::SYS_close_range, 3, u32::MAX, 0) };
            let lim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            // SAFETY: setrlimit with a valid pointer to an initialised rlimit.
            let code = if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
                3
            } else {
                match f() {
                    Ok(()) => 0,
                    Err(e) => {
                        eprintln!("{e}");
                        1
                    }
                }
            };
            // SAFETY: leaves the child without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waitpid on the child just forked, with a valid status pointer.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child with RLIMIT_NOFILE {limit} failed (status {status:#x})"
        );
    }
}
