//! Taking a file of the replaced tree by moving it into staging instead of copying it: for a
//! tree that is uploaded again, a rename costs nothing next to writing its bytes once more.
//!
//! A file is moved only when no other name can reach it and nobody but its final owner could
//! have written it: one link (`st_nlink == 1`), already owned by the owner the new tree gives it
//! (root's tree: root's file; the workspace: the agent's, who may write it anyway). Its content
//! is hashed through the descriptor first, then every extended attribute its owner could have
//! set (`user.*`, POSIX ACLs) is removed ([`xattrs::strip`]): a moved file carries its content
//! and the listed mode, nothing else; one whose attributes cannot all be removed is copied. The
//! rename is refused if the name no longer holds that file. Nothing runs between the hash and
//! the rename (uploads are refused while an iteration runs, and every process of the last one
//! was reaped). Everything else is copied.
//!
//! A moved file leaves a hole in the replaced tree until the new tree is swapped in; an assembly
//! that does not finish moves every file back (with its old mode; its extended attributes are
//! gone) before removing staging, so a refusal still leaves `dest` with the content it had.

use super::{xattrs, Assembly, ListedFile};
use crate::bounded_tree;
use crate::unpack::UnpackError;
use rustix::fs::{AtFlags, Mode};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// What [`Assembly::move_in`] did.
pub(super) enum Move {
    /// Moved into staging, its content the listed one.
    Moved,
    /// Not taken: its content is not the listed one.
    Differs,
    /// Not movable (other links, another owner, or no rename here): copy it instead.
    NotMovable,
    /// The upload must stop.
    Refused(UnpackError),
}

impl Assembly {
    /// Moves `old` (open, in the replaced tree's directory `old_dir`) into staging as item `i`
    /// when it may be moved and holds the listed content.
    pub(super) fn move_in(
        &mut self,
        i: usize,
        old: &File,
        old_dir: BorrowedFd<'_>,
        file: &ListedFile,
        buf: &mut [u8],
    ) -> Move {
        let Ok(st) = rustix::fs::fstat(old) else {
            return Move::NotMovable;
        };
        let Some(owner) = self.owner.or_else(own_ids) else {
            return Move::NotMovable;
        };
        if st.st_nlink != 1 || (st.st_uid, st.st_gid) != owner {
            return Move::NotMovable;
        }
        let hashed = self.verified.get(i).copied().flatten() == Some((st.st_dev, st.st_ino));
        if !hashed {
            match hash(old, file.size, buf) {
                Ok(Some(digest)) if digest == file.sha256 => {}
                Ok(_) => return Move::Differs,
                Err(_) => return Move::NotMovable,
            }
        }
        if let Err(e) = xattrs::strip(old.as_fd()) {
            tracing::debug!("upload: {} is copied, not moved: {e}", self.items[i].path);
            return Move::NotMovable;
        }
        let path = self.items[i].path.clone();
        let (name, parents) = self.items[i].name_and_parents();
        let (name, parents) = (name.as_str(), parents.as_slice());
        let io = |e: io::Error| UnpackError::Io(path.clone(), e);
        let Some(dirs) = self.dirs.as_mut() else {
            return Move::NotMovable;
        };
        let staging_dir = match dirs.dir(parents, path.as_bytes()) {
            Ok(dir) => dir,
            Err(err) => return Move::Refused(err),
        };
        if let Err(e) = rename(old_dir, name, staging_dir, name) {
            return match e.raw_os_error() == Some(rustix::io::Errno::EXIST.raw_os_error()) {
                true => Move::Refused(UnpackError::refused(path.as_bytes(), "listed twice")),
                false => Move::NotMovable,
            };
        }
        self.moved.push((i, st.st_mode & 0o7777));
        // The name moved must be the file hashed.
        match rustix::fs::statat(staging_dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(moved) if (moved.st_dev, moved.st_ino) == (st.st_dev, st.st_ino) => {}
            Ok(_) => {
                return Move::Refused(UnpackError::refused(
                    path.as_bytes(),
                    "the replaced tree changed while it was read",
                ))
            }
            Err(e) => return Move::Refused(io(e.into())),
        }
        let mode = self.limits.file_mode(file.exec);
        if let Err(e) = super::set_mode_owner(old, mode, self.owner) {
            return Move::Refused(io(e));
        }
        self.report.moved_files += 1;
        Move::Moved
    }

    /// Moves every moved file back into the replaced tree, with its old mode (an assembly that
    /// did not finish); what cannot be moved back is logged.
    pub(super) fn move_back(&mut self) {
        let Some(root) = self.old_root.take() else {
            return;
        };
        for (i, mode) in std::mem::take(&mut self.moved).into_iter().rev() {
            let path = self.items[i].path.clone();
            let (name, parents) = self.items[i].name_and_parents();
            let (name, parents) = (name.as_str(), parents.as_slice());
            let back = open_chain(root.as_fd(), parents).and_then(|old_dir| {
                let staging_dir = self
                    .dirs
                    .as_mut()
                    .ok_or_else(|| io::Error::other("no staging directory"))?
                    .dir(parents, path.as_bytes())
                    .map_err(|e| io::Error::other(e.to_string()))?;
                rename(staging_dir, name, old_dir.as_fd(), name)?;
                rustix::fs::chmodat(
                    old_dir.as_fd(),
                    name,
                    Mode::from_raw_mode(mode),
                    AtFlags::empty(),
                )?;
                Ok(())
            });
            if let Err(e) = back {
                tracing::warn!(
                    "upload: {path} could not be moved back into {}: {e}",
                    self.dest.display()
                );
            }
        }
    }
}

/// The supervisor's own uid and gid, which a tree without an owner gets (moves are Linux-only).
pub(super) fn own_ids() -> Option<(u32, u32)> {
    #[cfg(target_os = "linux")]
    {
        Some((
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        ))
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The directory `parts` below `root`, opened one component at a time, never through a link.
fn open_chain(root: BorrowedFd<'_>, parts: &[String]) -> io::Result<OwnedFd> {
    let mut dir = rustix::io::dup(root)?;
    for part in parts {
        dir = bounded_tree::open_dir_at(dir.as_fd(), part.as_ref())?;
    }
    Ok(dir)
}

/// `renameat2(…, RENAME_NOREPLACE)`.
fn rename(from: BorrowedFd<'_>, name: &str, to: BorrowedFd<'_>, to_name: &str) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        Ok(rustix::fs::renameat_with(
            from,
            name,
            to,
            to_name,
            rustix::fs::RenameFlags::NOREPLACE,
        )?)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (from, name, to, to_name);
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// The sha256 of the `size` bytes `file` holds from its start, `None` when it holds another
/// number of bytes (at most `size + 1` are read to tell).
pub(super) fn hash(file: &File, size: u64, buf: &mut [u8]) -> io::Result<Option<[u8; 32]>> {
    let (digest, n) = crate::tree_hash::read_hashed(
        file.as_fd(),
        buf,
        Some(size.saturating_add(1)),
        None,
        |_| {},
    )?;
    Ok((n == size).then_some(digest))
}
