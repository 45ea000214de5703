//! An offered tree that `dest` already holds exactly is kept as it is: no staging tree, no
//! copies, no swap. "Exactly" is checked, never assumed: `dest` and every listed directory is a
//! real directory (opened without following links) of the tree's owner and mode holding as
//! many entries as the listing gives it, and every listed file is a regular file of the owner,
//! mode and size listed, with one link, whose content hashes to the listed sha256; none of them
//! carries an extended attribute its owner could have set (`user.*`, a POSIX ACL: see
//! [`xattrs`]). Anything else (an extra entry, a file the agent linked elsewhere, a changed
//! mode, an ACL) falls back to the assembly in staging.

use super::{moving, xattrs, Item, ListedFile};
use crate::bounded_tree;
use crate::unpack::UnpackLimits;
use rustix::fs::{FileType, Mode, OFlags};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// What [`holds_exactly`] found.
#[derive(Debug, Default)]
pub(super) struct Verdict {
    /// `dest` holds exactly the listed tree.
    pub exact: bool,
    /// Per item: the `(st_dev, st_ino)` of the old file whose content was hashed and found to
    /// be the listed one (the assembly may move it without hashing it again).
    pub verified: Vec<Option<(u64, u64)>>,
}

/// Whether `dest` holds exactly the tree `items` lists, owned by `owner`: the directories are
/// checked first (cheap: owner, mode, and every name they hold listed), then the files on every
/// core (each thread takes a contiguous share of the listing, so it opens few directories):
/// each opened, its metadata read from the open descriptor and its content hashed, all
/// stopping once one file differs. Every thread is joined before this returns.
pub(super) fn holds_exactly(
    dest: &Path,
    items: &[Item],
    limits: &UnpackLimits,
    owner: (u32, u32),
    buffer_len: usize,
) -> Verdict {
    let mut verdict = Verdict {
        exact: false,
        verified: vec![None; items.len()],
    };
    let Ok(root) = bounded_tree::open_dir(dest) else {
        return verdict;
    };
    if !structure_ok(root.as_fd(), items, limits, owner) {
        return verdict;
    }
    let files: Vec<usize> = (0..items.len())
        .filter(|&i| items[i].file.is_some())
        .collect();
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let share = files.len().div_ceil(workers).max(1);
    let differs = AtomicBool::new(false);
    let root = root.as_fd();
    let hashed: Vec<Vec<(usize, (u64, u64))>> = std::thread::scope(|scope| {
        let threads: Vec<_> = files
            .chunks(share)
            .filter_map(|part| {
                let differs = &differs;
                // A thread the system will not give is a share not checked: not exact (never a
                // panic in PID 1).
                let spawned = std::thread::Builder::new().spawn_scoped(scope, move || {
                    let mut buf = vec![0u8; buffer_len];
                    let mut cursor: Option<(String, OwnedFd)> = None;
                    let mut found = Vec::with_capacity(part.len());
                    for &i in part {
                        let item = &items[i];
                        if differs.load(Ordering::Relaxed) {
                            break;
                        }
                        let (parent, name) = item.path.rsplit_once('/').unwrap_or(("", &item.path));
                        let id = item.file.as_ref().and_then(|file| {
                            let dir = cached_dir(root, &mut cursor, parent)?;
                            file_ok(dir, name, file, limits, owner, &mut buf)
                        });
                        match id {
                            Some(id) => found.push((i, id)),
                            None => {
                                differs.store(true, Ordering::Relaxed);
                                break;
                            }
                        }
                    }
                    found
                });
                if spawned.is_err() {
                    differs.store(true, Ordering::Relaxed);
                }
                spawned.ok()
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join().unwrap_or_else(|_| {
                    differs.store(true, Ordering::Relaxed);
                    Vec::new()
                })
            })
            .collect()
    });
    for (i, id) in hashed.into_iter().flatten() {
        verdict.verified[i] = Some(id);
    }
    verdict.exact = !differs.load(Ordering::Relaxed);
    verdict
}

/// The directory `parent` below `root`, through `cursor` (the last one opened).
fn cached_dir<'a>(
    root: BorrowedFd<'_>,
    cursor: &'a mut Option<(String, OwnedFd)>,
    parent: &str,
) -> Option<BorrowedFd<'a>> {
    if cursor.as_ref().is_none_or(|(p, _)| p != parent) {
        *cursor = None;
        *cursor = Some((parent.to_string(), open_below(root, parent).ok()?));
    }
    cursor.as_ref().map(|(_, fd)| fd.as_fd())
}

/// Every listed directory is where the listing puts it, a real directory with the listed owner
/// and mode, and no directory holds a name the listing does not give it (each listed file is
/// then checked by [`file_ok`]).
fn structure_ok(
    root: BorrowedFd<'_>,
    items: &[Item],
    limits: &UnpackLimits,
    owner: (u32, u32),
) -> bool {
    let dirs: HashSet<&str> = items
        .iter()
        .filter(|i| i.file.is_none())
        .map(|i| i.path.as_str())
        .collect();
    // Entries per directory ("" is `dest`), every parent listed.
    let mut children: HashMap<&str, u64> = HashMap::new();
    children.insert("", 0);
    for item in items {
        let parent = item.path.rsplit_once('/').map_or("", |(p, _)| p);
        if !parent.is_empty() && !dirs.contains(parent) {
            return false;
        }
        *children.entry(parent).or_default() += 1;
    }
    // Every listed path, and whether it is listed as a file.
    let paths: HashMap<&str, bool> = items
        .iter()
        .map(|i| (i.path.as_str(), i.file.is_some()))
        .collect();
    let dir_ok = |fd: BorrowedFd<'_>, path: &str| {
        let Ok(st) = rustix::fs::fstat(fd) else {
            return false;
        };
        (st.st_uid, st.st_gid) == owner
            && st.st_mode & 0o7777 == limits.dir_mode()
            && !xattrs::carries_any(fd)
            && names_listed(fd, path, &paths, children.get(path).copied().unwrap_or(0))
    };
    if !dir_ok(root, "") {
        return false;
    }
    let mut cursor: Option<(String, OwnedFd)> = None;
    for item in items.iter().filter(|i| i.file.is_none()) {
        let (parent, name) = item.path.rsplit_once('/').unwrap_or(("", &item.path));
        let Some(dir) = cached_dir(root, &mut cursor, parent) else {
            return false;
        };
        let ok = bounded_tree::open_dir_at(dir, name.as_ref())
            .is_ok_and(|fd| dir_ok(fd.as_fd(), &item.path));
        if !ok {
            return false;
        }
    }
    true
}

/// Whether the directory `dir` (at `path`) holds exactly `expected` entries, each of a name the
/// listing gives (`paths`), and each listed as a file a regular file by the directory's own
/// account (its entry type, or `statat` where the file system gives none): a device or fifo in
/// a file's place is never opened by [`file_ok`], whose `fstat` decides for what is. Names are
/// compared as read from the directory, so two listed names a case-folding directory takes for
/// one do not pass; reading stops at the first name too many.
fn names_listed(
    dir: BorrowedFd<'_>,
    path: &str,
    paths: &HashMap<&str, bool>,
    expected: u64,
) -> bool {
    let Ok(own) = bounded_tree::open_dir_at(dir, ".".as_ref()) else {
        return false;
    };
    let Ok(entries) = rustix::fs::Dir::new(own) else {
        return false;
    };
    let mut seen = 0u64;
    for entry in entries {
        let Ok(entry) = entry else {
            return false;
        };
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        seen += 1;
        let Ok(name) = std::str::from_utf8(name) else {
            return false;
        };
        let full = if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}/{name}")
        };
        let Some(&listed_file) = paths.get(full.as_str()) else {
            return false;
        };
        if seen > expected {
            return false;
        }
        if listed_file {
            let kind = match entry.file_type() {
                FileType::Unknown => {
                    match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(st) => FileType::from_raw_mode(st.st_mode),
                        Err(_) => return false,
                    }
                }
                known => known,
            };
            if kind != FileType::RegularFile {
                return false;
            }
        }
    }
    seen == expected
}

/// The directory `path` (`/`-separated, "" for `root` itself) below `root`, never through a
/// link.
fn open_below(root: BorrowedFd<'_>, path: &str) -> std::io::Result<OwnedFd> {
    let mut dir = rustix::io::dup(root)?;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        dir = bounded_tree::open_dir_at(dir.as_fd(), part.as_ref())?;
    }
    Ok(dir)
}

/// `name` in `dir`, opened without following a link or waiting on a fifo.
fn open_file(dir: BorrowedFd<'_>, name: &str) -> Option<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
}

/// The `(st_dev, st_ino)` of `name` in `dir` when it is a regular file with one link, the
/// listed owner, mode and size (read from the descriptor that is hashed), and the listed
/// content.
fn file_ok(
    dir: BorrowedFd<'_>,
    name: &str,
    file: &ListedFile,
    limits: &UnpackLimits,
    owner: (u32, u32),
    buf: &mut [u8],
) -> Option<(u64, u64)> {
    let fd = open_file(dir, name)?;
    let st = rustix::fs::fstat(&fd).ok()?;
    let listed = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
        && st.st_nlink == 1
        && (st.st_uid, st.st_gid) == owner
        && st.st_mode & 0o7777 == limits.file_mode(file.exec)
        && u64::try_from(st.st_size).ok() == Some(file.size)
        && !xattrs::carries_any(fd.as_fd());
    if !listed {
        return None;
    }
    let digest = moving::hash(&File::from(fd), file.size, buf).ok()??;
    (digest == file.sha256).then_some((st.st_dev, st.st_ino))
}
