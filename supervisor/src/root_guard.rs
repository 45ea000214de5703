//! Root-owned, read-only stand-ins ("guards") for names that a runtime or an interpreter loads
//! from a directory the agent writes, so that the agent cannot create them while it runs.
//!
//! The directory itself is made root's, group the agent's, mode `1770` ([`make_sticky`]): the
//! agent still creates and replaces its own entries there, but the sticky bit keeps it from
//! removing or renaming root's. Each guarded name then holds a guard ([`put`]): a root-owned
//! regular file of mode `0444` holding `{}` ([`Guard::Settings`]), a root-owned empty
//! directory of mode `0555` ([`Guard::Empty`]), which a reader takes for "no settings", "no
//! entries", or, where it expects a file, for no file, or a root-owned empty regular file of
//! mode `0444` ([`Guard::EmptyFile`]) for a configuration or script file read as text. A guard is recognised by owner, kind,
//! mode and content ([`is_guard`]), so a directory reset keeps exactly the guards and nothing
//! the agent made that looks like one.
//!
//! All of it needs root: a supervisor that is not root cannot own a file the agent cannot
//! replace, and its callers leave their directories alone.

use crate::manifest::Manifest;
use crate::sandbox::nofollow;
use rustix::fs::{FileType, Gid, Mode, OFlags, Uid};
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The content of a [`Guard::Settings`] file: no settings.
pub const SETTINGS: &[u8] = b"{}\n";

/// The mode of a directory holding guards: root's, the agent's group may create entries, the
/// sticky bit keeps root's entries root's.
pub const STICKY_DIR_MODE: u32 = 0o1770;

/// What stands in place of a guarded name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// A root-owned regular file, mode `0444`, holding [`SETTINGS`].
    Settings,
    /// A root-owned empty directory, mode `0555`.
    Empty,
    /// A root-owned empty regular file, mode `0444` (for a name read as a configuration or
    /// script file, which an empty one leaves as it would be without it).
    EmptyFile,
}

/// Opens the directory `path` without following a symlink in any component and makes it
/// root's, group `gid`, mode [`STICKY_DIR_MODE`]. Returns the directory's descriptor. Errors
/// name the path.
pub fn make_sticky(path: &Path, gid: u32) -> Result<OwnedFd, String> {
    // The walk gives a path descriptor; the directory itself, opened through it, takes chown
    // and chmod.
    let dir = open_dir_at(nofollow::open_dir(path)?.as_fd(), ".", path)?;
    rustix::fs::fchown(&dir, Some(Uid::ROOT), Some(Gid::from_raw_unchecked(gid)))
        .map_err(|e| format!("{}: chown: {e}", path.display()))?;
    rustix::fs::fchmod(&dir, Mode::from_raw_mode(STICKY_DIR_MODE))
        .map_err(|e| format!("{}: chmod: {e}", path.display()))?;
    Ok(dir)
}

/// Puts `guard` in place of `name` in the directory `dir` (at `path`), unless a guard is there
/// already. Something else under that name is an error naming it: the caller resets the
/// directory first, so only what it keeps on purpose can be there.
pub fn put(dir: BorrowedFd<'_>, path: &Path, name: &str, guard: Guard) -> Result<(), String> {
    if is_guard(dir, name, guard) {
        return Ok(());
    }
    let at = path.join(name);
    match guard {
        Guard::Settings | Guard::EmptyFile => {
            let fd = rustix::fs::openat(
                dir,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o444),
            )
            .map_err(|e| format!("{}: create: {e}", at.display()))?;
            // The mode asked for is cut by the umask; the file is root's and read-only whatever
            // it is.
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o444))
                .map_err(|e| format!("{}: chmod: {e}", at.display()))?;
            let content: &[u8] = if guard == Guard::Settings {
                SETTINGS
            } else {
                b""
            };
            std::fs::File::from(fd)
                .write_all(content)
                .map_err(|e| format!("{}: write: {e}", at.display()))
        }
        Guard::Empty => {
            rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o555))
                .map_err(|e| format!("{}: create: {e}", at.display()))?;
            let fd = open_dir_at(dir, name, &at)?;
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o555))
                .map_err(|e| format!("{}: chmod: {e}", at.display()))
        }
    }
}

/// Puts `guard` in place of `name` in the config dir `dir` (at `config`), unless it is one
/// already or the manifest pins something there: a pinned directory is made root's and not
/// writable by group or others, a pinned file is verification's.
pub fn put_unless_pinned(
    manifest: &Manifest,
    dir: BorrowedFd<'_>,
    config: &Path,
    name: &str,
    guard: Guard,
) -> Result<(), String> {
    let path = config.join(name);
    let pinned = manifest
        .files
        .iter()
        .any(|f| Path::new(&f.path).starts_with(&path));
    if pinned {
        return match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st)
                if rustix::fs::FileType::from_raw_mode(st.st_mode)
                    == rustix::fs::FileType::Directory =>
            {
                let fd = open_dir_at(dir, name, &path)?;
                rustix::fs::fchown(&fd, Some(rustix::fs::Uid::ROOT), None)
                    .map_err(|e| format!("{}: chown: {e}", path.display()))?;
                let mode = st.st_mode & 0o755;
                rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
                    .map_err(|e| format!("{}: chmod: {e}", path.display()))
            }
            _ => Ok(()),
        };
    }
    put(dir, config, name, guard)
}

/// Whether guards can hold for `manifest`'s agent: the supervisor is root (only then can it own
/// a file the agent cannot replace) and the agent is not (root would pass any guard). The one
/// rule of every caller: `HOME` and the config dirs of Claude Code, pi and Codex.
pub fn applies(manifest: &Manifest) -> bool {
    nix::unistd::geteuid().is_root() && manifest.user.uid != 0
}

/// Makes the config dir `config` of `manifest` root's, group the agent's, with the sticky bit
/// ([`make_sticky`]) and puts each guard of `guarded` in place ([`put_unless_pinned`]) but for
/// the names `left` says the supervisor writes itself. Returns the names of `guarded`, for the
/// record. Errors name the path.
pub fn guard_config_dir(
    manifest: &Manifest,
    config: &Path,
    guarded: &[(&str, Guard)],
    left: impl Fn(&str) -> bool,
) -> Result<Vec<String>, String> {
    let dir = make_sticky(config, manifest.user.gid)?;
    for (name, guard) in guarded {
        if !left(name) {
            put_unless_pinned(manifest, dir.as_fd(), config, name, *guard)?;
        }
    }
    Ok(guarded.iter().map(|(name, _)| name.to_string()).collect())
}

/// Opens the directory `name` in `dir` (at `path`, for the error) without following a symlink.
pub fn open_dir_at(dir: BorrowedFd<'_>, name: &str, path: &Path) -> Result<OwnedFd, String> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{}: open: {e}", path.display()))
}

/// The names of `guarded` that hold their guard in the directory `path`. Nothing when the
/// directory cannot be opened.
pub fn present(path: &Path, guarded: &[(&str, Guard)]) -> Vec<PathBuf> {
    let Ok(dir) = nofollow::open_dir(path) else {
        return Vec::new();
    };
    guarded
        .iter()
        .filter(|(name, guard)| is_guard(dir.as_fd(), name, *guard))
        .map(|(name, _)| PathBuf::from(name))
        .collect()
}

/// Whether `name` in `dir` is `guard`: a regular file of root's holding exactly [`SETTINGS`],
/// or an empty directory of root's, mode `0555` (the agent can make nothing of root's).
pub fn is_guard(dir: BorrowedFd<'_>, name: &str, guard: Guard) -> bool {
    let flags = match guard {
        Guard::Settings | Guard::EmptyFile => OFlags::RDONLY | OFlags::NONBLOCK,
        Guard::Empty => OFlags::RDONLY | OFlags::DIRECTORY,
    };
    let Ok(fd) = rustix::fs::openat(
        dir,
        name,
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let Ok(stat) = rustix::fs::fstat(&fd) else {
        return false;
    };
    let kind = FileType::from_raw_mode(stat.st_mode);
    // Root's, and writable by nobody else.
    if stat.st_uid != 0 || stat.st_mode & 0o022 != 0 {
        return false;
    }
    match guard {
        Guard::Settings => {
            if kind != FileType::RegularFile || stat.st_size != SETTINGS.len() as i64 {
                return false;
            }
            let mut bytes = Vec::new();
            std::fs::File::from(fd)
                .take(SETTINGS.len() as u64 + 1)
                .read_to_end(&mut bytes)
                .is_ok_and(|_| bytes == SETTINGS)
        }
        Guard::EmptyFile => kind == FileType::RegularFile && stat.st_size == 0,
        Guard::Empty => {
            kind == FileType::Directory
                && stat.st_mode & 0o7777 == 0o555
                && crate::bounded_tree::entry_names(fd.as_fd()).is_ok_and(|n| n.is_empty())
        }
    }
}
