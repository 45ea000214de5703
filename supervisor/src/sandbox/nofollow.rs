//! Directories reached from `/` one component at a time, never through a symbolic link.
//!
//! Every component is opened with `openat(parent, name, O_PATH | O_NOFOLLOW | O_DIRECTORY |
//! O_CLOEXEC)` relative to the descriptor of the one before, so a symlink anywhere in the path
//! (not only the last component) stops the walk, and the descriptor returned is the directory
//! that was checked, whatever happens to the path afterwards.
//!
//! - [`open_dir`]: the Landlock writable roots ([`super::confine`]): a missing component, a
//!   symlink or a non-directory is an error naming the component.
//! - [`ensure_dir`]: the agent's directories in long-lived mode ([`crate::server`]): missing
//!   components are created, and a symlink or non-directory is replaced by a directory when
//!   the caller says the agent could have put it there, refused otherwise.

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// How many times [`ensure_dir`] tries to create or replace one component before giving up.
const ATTEMPTS: usize = 3;

/// What a directory component turned out to be.
enum Entry {
    /// A directory, opened.
    Dir(OwnedFd),
    /// Nothing by that name.
    Missing,
    /// Something other than a directory: `symlink`, `regular file`, …
    Other(&'static str),
}

fn dir_flags() -> OFlags {
    OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC
}

/// The name of a file type in messages.
fn type_name(file_type: FileType) -> &'static str {
    match file_type {
        FileType::Symlink => "symlink",
        FileType::RegularFile => "regular file",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Directory => "directory",
        FileType::Unknown => "file of unknown type",
    }
}

/// Opens `name` in `dir` without following it; on failure, looks at what is there
/// (`fstatat(AT_SYMLINK_NOFOLLOW)`) to say why.
fn open_entry(dir: &OwnedFd, name: &OsStr) -> Result<Entry, Errno> {
    let open_err = match rustix::fs::openat(dir, name, dir_flags(), Mode::empty()) {
        Ok(fd) => return Ok(Entry::Dir(fd)),
        Err(err) => err,
    };
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            // A directory we could not open (EACCES, …): the open's error says why.
            FileType::Directory => Err(open_err),
            other => Ok(Entry::Other(type_name(other))),
        },
        Err(Errno::NOENT) => Ok(Entry::Missing),
        Err(err) => Err(err),
    }
}

/// The normal components of the absolute path `path` (`.` dropped); `..` is refused, since
/// walking it would leave the directory the path names.
fn components(path: &Path) -> Result<Vec<&OsStr>, String> {
    if !path.is_absolute() {
        return Err(format!("{} is not an absolute path", path.display()));
    }
    let mut names = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => names.push(name),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(format!("{} contains a '..' component", path.display()))
            }
        }
    }
    Ok(names)
}

fn open_root() -> Result<OwnedFd, String> {
    rustix::fs::open("/", dir_flags(), Mode::empty()).map_err(|e| format!("/: {e}"))
}

/// Opens the existing directory `path` (absolute) without following a symlink in any
/// component. The error names the first component that is missing, a symlink or not a
/// directory (`/a/b is a symlink`), or the errno of a failed open.
pub fn open_dir(path: &Path) -> Result<OwnedFd, String> {
    let mut dir = open_root()?;
    let mut reached = PathBuf::from("/");
    for name in components(path)? {
        reached.push(name);
        dir = match open_entry(&dir, name) {
            Ok(Entry::Dir(fd)) => fd,
            Ok(Entry::Missing) => return Err(format!("{} does not exist", reached.display())),
            Ok(Entry::Other(what)) => {
                return Err(format!(
                    "{} is a {what}, not a directory",
                    reached.display()
                ))
            }
            Err(err) => return Err(format!("{}: {err}", reached.display())),
        };
    }
    Ok(dir)
}

/// An entry [`ensure_dir`] removed because it stood where a directory belongs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Replaced {
    /// Its path.
    pub path: String,
    /// What it was (`symlink`, `regular file`, …).
    pub was: &'static str,
}

/// Makes sure the directory `path` (absolute) exists, walking it without following a symlink
/// in any component, and returns its descriptor (`O_PATH`) with what had to be replaced.
///
/// A missing component is created, `0o700` for the last one and `0o755` for the others (owned
/// by the caller). A component that exists as something other than a directory (a symlink, a
/// file) is unlinked, without following it, and created as a directory only when
/// `may_replace(parent)` holds for the directory it is in; otherwise the walk stops with an
/// error naming it.
pub fn ensure_dir(
    path: &Path,
    may_replace: &dyn Fn(&Path) -> bool,
) -> Result<(OwnedFd, Vec<Replaced>), String> {
    let names = components(path)?;
    let mut dir = open_root()?;
    let mut reached = PathBuf::from("/");
    let mut replaced = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let parent = reached.clone();
        reached.push(name);
        let mode = if i + 1 == names.len() { 0o700 } else { 0o755 };
        let mut attempts = 0;
        dir = loop {
            attempts += 1;
            if attempts > ATTEMPTS {
                return Err(format!(
                    "{}: changed {ATTEMPTS} times while being created",
                    reached.display()
                ));
            }
            match open_entry(&dir, name) {
                Ok(Entry::Dir(fd)) => break fd,
                Ok(Entry::Missing) => {}
                Ok(Entry::Other(what)) => {
                    if !may_replace(&parent) {
                        return Err(format!(
                            "{} is a {what}, not a directory, in {} (which the agent cannot \
                             write: not replacing it)",
                            reached.display(),
                            parent.display()
                        ));
                    }
                    match rustix::fs::unlinkat(&dir, *name, AtFlags::empty()) {
                        Ok(()) | Err(Errno::NOENT) => {}
                        Err(err) => {
                            return Err(format!(
                                "{} (a {what}): cannot remove it: {err}",
                                reached.display()
                            ))
                        }
                    }
                    replaced.push(Replaced {
                        path: reached.display().to_string(),
                        was: what,
                    });
                }
                Err(err) => return Err(format!("{}: {err}", reached.display())),
            }
            match rustix::fs::mkdirat(&dir, *name, Mode::from_raw_mode(mode)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(err) => return Err(format!("{}: {err}", reached.display())),
            }
        };
    }
    Ok((dir, replaced))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A scratch directory reached without symlinks (the walk refuses any on the way).
    fn scratch() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = std::fs::canonicalize(dir.path()).expect("canonicalize");
        assert_eq!(
            real,
            dir.path(),
            "the temp dir is reached through a symlink"
        );
        dir
    }

    #[test]
    fn opens_a_plain_directory() {
        let dir = scratch();
        let sub = dir.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        assert!(open_dir(&sub).is_ok());
        assert!(open_dir(&dir.path().join("./a/./b/")).is_ok());
    }

    #[test]
    fn refuses_a_symlink_in_any_component() {
        let dir = scratch();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::create_dir(dir.path().join("real/b")).unwrap();
        symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        symlink("/", dir.path().join("root")).unwrap();
        let err = open_dir(&dir.path().join("link/b")).unwrap_err();
        assert_eq!(
            err,
            format!(
                "{} is a symlink, not a directory",
                dir.path().join("link").display()
            )
        );
        let err = open_dir(&dir.path().join("root")).unwrap_err();
        assert!(err.ends_with("root is a symlink, not a directory"), "{err}");
    }

    #[test]
    fn names_missing_and_non_directories() {
        let dir = scratch();
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        let err = open_dir(&dir.path().join("file")).unwrap_err();
        assert!(
            err.ends_with("file is a regular file, not a directory"),
            "{err}"
        );
        let err = open_dir(&dir.path().join("gone/x")).unwrap_err();
        assert_eq!(
            err,
            format!("{} does not exist", dir.path().join("gone").display())
        );
        assert!(open_dir(Path::new("relative")).is_err());
        assert!(open_dir(Path::new("/a/../b")).is_err());
    }

    #[test]
    fn ensure_creates_and_replaces_only_where_allowed() {
        let dir = scratch();
        let agent = dir.path().join("agent");
        std::fs::create_dir(&agent).unwrap();
        // The agent planted a symlink and a file where directories belong.
        symlink("/", agent.join("sessions")).unwrap();
        std::fs::write(agent.join("tmp"), b"x").unwrap();
        let inside = |p: &Path| p.starts_with(&agent);

        let (_, replaced) = ensure_dir(&agent.join("sessions/deep"), &inside).unwrap();
        assert_eq!(
            replaced,
            [Replaced {
                path: agent.join("sessions").display().to_string(),
                was: "symlink",
            }]
        );
        assert!(std::fs::symlink_metadata(agent.join("sessions/deep"))
            .unwrap()
            .is_dir());
        let (_, replaced) = ensure_dir(&agent.join("tmp"), &inside).unwrap();
        assert_eq!(replaced[0].was, "regular file");
        assert!(agent.join("tmp").is_dir());
        let (_, replaced) = ensure_dir(&agent.join("tmp"), &inside).unwrap();
        assert!(replaced.is_empty());

        // Outside the agent's directories a link is refused and left alone.
        symlink("/", dir.path().join("host-link")).unwrap();
        let err = ensure_dir(&dir.path().join("host-link"), &inside).unwrap_err();
        assert!(err.contains("host-link is a symlink"), "{err}");
        assert!(std::fs::symlink_metadata(dir.path().join("host-link"))
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
