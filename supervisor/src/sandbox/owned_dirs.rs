//! The directories on the supervisor's own paths that the agent's uid owns, held by descriptor
//! and given their modes back.
//!
//! In the unprivileged mode the agent runs as the supervisor's own uid, so it owns the records
//! directory, the uploads root and often their parents (`/sandbox` in OpenShell's layout).
//! Landlock keeps it from renaming or removing them outside its writable roots, but not from
//! `chmod`: `chmod 000 /sandbox` would make every later record, upload, collect and run fail
//! with "Permission denied", and the supervisor, being that uid and no more, has no override.
//!
//! So the supervisor holds every directory of its uid on the way to what it uses (the records
//! directory, each upload's destination, the manifest's workdir, agent directories and trees),
//! opened one component at a time from `/` without following a link (`O_PATH`, so no right on
//! the directory itself is needed), and remembers the mode each had when first held, with the
//! owner's rights added. [`OwnedDirs::restore`] gives each its mode back through its descriptor;
//! the server and the iteration call it after every reap (nothing of the agent runs then) and
//! before each upload and collect. Directories of other uids are not held: the agent cannot
//! change their modes. Outside the unprivileged mode nothing is held (root overrides modes).

use rustix::fs::{Mode, OFlags};
use std::ffi::OsStr;
use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};

/// Most directories held: the paths a manifest names share their parents, so a few dozen is
/// already a large layout; past it nothing more is held (and a warning says so).
const MAX_HELD: usize = 256;

/// A directory held by descriptor.
#[derive(Debug)]
struct Held {
    path: PathBuf,
    fd: OwnedFd,
    /// The mode to give back (permission bits, setgid and sticky included).
    mode: u32,
    /// Only the supervisor creates entries here (the records directory): each entry of the uid
    /// gets its owner's rights back too.
    own_entries: bool,
}

/// The directories of the supervisor's uid on its paths (see the module documentation).
#[derive(Debug, Default)]
pub struct OwnedDirs {
    /// The uid whose directories are held; `None`: hold nothing.
    uid: Option<u32>,
    held: Vec<Held>,
}

impl OwnedDirs {
    /// Holds nothing (root PID 1, rootless and degraded modes: root overrides modes).
    pub fn off() -> OwnedDirs {
        OwnedDirs::default()
    }

    /// Holds the directories `uid` owns (the unprivileged mode's own uid).
    pub fn of_uid(uid: u32) -> OwnedDirs {
        OwnedDirs {
            uid: Some(uid),
            held: Vec::new(),
        }
    }

    /// Holds every directory of the uid from `/` down to `path` (as far as it exists), giving
    /// each the owner's rights first if it lacks them, so the walk can go on below it. `Err`
    /// names a directory of the uid that cannot be held: one reached through a symlink, or one
    /// below a directory of another uid that the supervisor cannot search.
    pub fn guard(&mut self, path: &Path) -> Result<(), String> {
        let Some(uid) = self.uid else {
            return Ok(());
        };
        if !path.is_absolute() {
            return Err(format!("{}: not an absolute path", path.display()));
        }
        // Through links (`/var/run -> /run`) as far as the path resolves: the supervisor's own
        // paths resolve the same way, and the agent can change no link outside its writable
        // roots. The walk then follows none, so a link met below a part that did not resolve
        // (an agent made a directory unsearchable) is refused when the uid owns it.
        let canonical = canonical_prefix(path);
        let path = canonical.as_path();
        let open = |dir: &OwnedFd, name: &OsStr| {
            rustix::fs::openat(
                dir,
                name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
        };
        let mut dir = rustix::fs::open(
            "/",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("/: {e}"))?;
        let mut at = PathBuf::from("/");
        for component in path.components() {
            let name = match component {
                Component::RootDir => continue,
                Component::Normal(name) => name,
                Component::CurDir | Component::ParentDir | Component::Prefix(_) => {
                    return Err(format!("{}: `.` or `..` in the path", path.display()))
                }
            };
            at.push(name);
            let next = match open(&dir, name) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::NOENT) => return Ok(()),
                Err(rustix::io::Errno::NOTDIR) | Err(rustix::io::Errno::LOOP) => {
                    return self.not_a_directory(&dir, name, &at, uid);
                }
                Err(e) => {
                    return Err(format!(
                        "{}: {e} (the supervisor holds the directories on its paths by \
                         descriptor and cannot open this one)",
                        at.display()
                    ))
                }
            };
            let stat = rustix::fs::fstat(&next).map_err(|e| format!("{}: {e}", at.display()))?;
            if stat.st_uid == uid && !self.held.iter().any(|h| same_dir(h, &stat)) {
                self.hold(
                    at.clone(),
                    next.try_clone().map_err(|e| e.to_string())?,
                    stat.st_mode,
                )?;
            }
            dir = next;
        }
        Ok(())
    }

    /// A component that is not a directory: fine where it is the uid's own file or a link of
    /// another uid's directory (the host named a path it will replace or that root set up);
    /// refused where the uid owns the link (its target could be any directory of the uid).
    fn not_a_directory(
        &self,
        dir: &OwnedFd,
        name: &OsStr,
        at: &Path,
        uid: u32,
    ) -> Result<(), String> {
        match rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st)
                if rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink()
                    && st.st_uid == uid =>
            {
                Err(format!(
                    "{} is a symbolic link of uid {uid} (the agent's): the supervisor holds the \
                     directories on its paths without following links; name the real path",
                    at.display()
                ))
            }
            _ => Ok(()),
        }
    }

    /// Adds a directory, first giving it the owner's rights (a `chmod 000` before this
    /// supervisor started would otherwise stop the walk below it).
    fn hold(&mut self, path: PathBuf, fd: OwnedFd, st_mode: u32) -> Result<(), String> {
        if self.held.len() >= MAX_HELD {
            tracing::warn!(
                "owned-dirs: {} not held: {MAX_HELD} directories are already",
                path.display()
            );
            return Ok(());
        }
        let held = Held {
            path,
            fd,
            mode: (st_mode & 0o7777) | 0o700,
            own_entries: false,
        };
        if st_mode & 0o700 != 0o700 {
            chmod_held(&held).map_err(|e| format!("{}: chmod: {e}", held.path.display()))?;
        }
        strip_acls(&held).map_err(|e| format!("{}: {e}", held.path.display()))?;
        self.held.push(held);
        Ok(())
    }

    /// [`OwnedDirs::guard`], and the directory `path` itself is one only the supervisor
    /// creates entries in (its records directory): [`OwnedDirs::restore`] gives each entry of
    /// the uid there its owner's rights back as well (`.collected`, which the supervisor reads
    /// at start, included).
    pub fn guard_own(&mut self, path: &Path) -> Result<(), String> {
        self.guard(path)?;
        let canonical = canonical_prefix(path);
        if let Some(held) = self.held.iter_mut().find(|h| h.path == canonical) {
            held.own_entries = true;
        }
        Ok(())
    }

    /// Gives every held directory whose mode changed its mode back, outermost first; returns
    /// the paths it changed (what the agent had done) and names those it could not.
    pub fn restore(&self) -> Restored {
        let mut restored = Restored::default();
        for held in &self.held {
            let now = match rustix::fs::fstat(&held.fd) {
                Ok(st) => st.st_mode & 0o7777,
                Err(e) => {
                    restored
                        .failed
                        .push(format!("{}: {e}", held.path.display()));
                    continue;
                }
            };
            if now != held.mode {
                match chmod_held(held) {
                    Ok(()) => restored.modes.push(format!(
                        "{} {:o} -> {:o}",
                        held.path.display(),
                        now,
                        held.mode
                    )),
                    Err(e) => restored
                        .failed
                        .push(format!("{}: chmod: {e}", held.path.display())),
                }
            }
            match strip_acls(held) {
                Ok(names) => restored.modes.extend(
                    names
                        .into_iter()
                        .map(|n| format!("{}: {n} removed", held.path.display())),
                ),
                Err(e) => restored
                    .failed
                    .push(format!("{}: {e}", held.path.display())),
            }
            if held.own_entries {
                if let Err(e) = restore_entries(held, self.uid, &mut restored) {
                    restored
                        .failed
                        .push(format!("{}: entries: {e}", held.path.display()));
                }
            }
        }
        for failed in &restored.failed {
            tracing::warn!("owned-dirs: {failed}");
        }
        restored
    }

    /// Whether directories are held at all (the unprivileged mode).
    pub fn enabled(&self) -> bool {
        self.uid.is_some()
    }

    /// How many directories are held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// What [`OwnedDirs::restore`] changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Restored {
    /// `PATH OLD -> NEW` (octal) of each directory given its mode back.
    pub modes: Vec<String>,
    /// Directories that could not be given their mode back, and why.
    pub failed: Vec<String>,
}

/// The POSIX ACLs of a directory: a default ACL decides the modes of every entry made in it
/// later, whatever mode its creator asks for.
const ACLS: [&str; 2] = ["system.posix_acl_default", "system.posix_acl_access"];

/// Removes the POSIX ACLs of a held directory (the agent's tree cannot set them: the seccomp
/// filter refuses `setxattr`; another process of the uid could); the names it removed. A file
/// system without ACLs has none to remove.
fn strip_acls(held: &Held) -> Result<Vec<&'static str>, String> {
    let link = format!("/proc/self/fd/{}", held.fd.as_fd().as_raw_fd());
    let mut removed = Vec::new();
    for name in ACLS {
        // Removing an ACL that is not there succeeds too: ask first.
        let mut none = [0u8; 0];
        match rustix::fs::getxattr(link.as_str(), name, &mut none[..]) {
            Err(rustix::io::Errno::NODATA) | Err(rustix::io::Errno::NOTSUP) => continue,
            Ok(_) | Err(_) => {}
        }
        match rustix::fs::removexattr(link.as_str(), name) {
            Ok(()) => removed.push(name),
            Err(rustix::io::Errno::NODATA) | Err(rustix::io::Errno::NOTSUP) => {}
            Err(e) => return Err(format!("remove {name}: {e}")),
        }
    }
    Ok(removed)
}

/// Gives each entry of `uid` in a held directory of the supervisor's own its owner's rights
/// back (files read and write, directories all three), recording each it changed.
fn restore_entries(held: &Held, uid: Option<u32>, restored: &mut Restored) -> Result<(), String> {
    let dir = rustix::fs::openat(
        &held.fd,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| e.to_string())?;
    let entries = rustix::fs::Dir::read_from(&dir).map_err(|e| e.to_string())?;
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let Ok(st) = rustix::fs::statat(&dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
        let rights = match kind {
            rustix::fs::FileType::Directory => 0o700,
            rustix::fs::FileType::RegularFile => 0o600,
            _ => continue,
        };
        let now = st.st_mode & 0o7777;
        if Some(st.st_uid) != uid || now & rights == rights {
            continue;
        }
        let shown = held.path.join(OsStr::from_bytes(name.to_bytes()));
        match rustix::fs::chmodat(
            &dir,
            name,
            Mode::from_raw_mode(now | rights),
            rustix::fs::AtFlags::empty(),
        ) {
            Ok(()) => restored.modes.push(format!(
                "{} {:o} -> {:o}",
                shown.display(),
                now,
                now | rights
            )),
            Err(e) => restored
                .failed
                .push(format!("{}: chmod: {e}", shown.display())),
        }
    }
    Ok(())
}

/// `path` with its longest prefix that resolves made canonical, the rest appended as given.
fn canonical_prefix(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut prefix = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(prefix) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (prefix.parent(), prefix.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                prefix = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Whether `held` is the directory `stat` describes.
fn same_dir(held: &Held, stat: &rustix::fs::Stat) -> bool {
    rustix::fs::fstat(&held.fd).is_ok_and(|h| h.st_dev == stat.st_dev && h.st_ino == stat.st_ino)
}

/// `chmod` of a held directory through its `O_PATH` descriptor (`fchmod` refuses one; the
/// descriptor's `/proc/self/fd` link reaches the directory itself, never a path the agent
/// could have changed).
fn chmod_held(held: &Held) -> rustix::io::Result<()> {
    let link = format!("/proc/self/fd/{}", held.fd.as_fd().as_raw_fd());
    rustix::fs::chmod(
        OsStr::from_bytes(link.as_bytes()),
        Mode::from_raw_mode(held.mode),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    fn own_uid() -> u32 {
        rustix::process::getuid().as_raw()
    }

    #[test]
    fn directories_of_the_uid_get_their_modes_back_through_their_descriptors() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("sandbox");
        let records = top.join(".pitcrew-records");
        fs::create_dir_all(&records).unwrap();
        fs::set_permissions(&top, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&records, fs::Permissions::from_mode(0o700)).unwrap();
        let mut dirs = OwnedDirs::of_uid(own_uid());
        dirs.guard(&records).unwrap();
        // Idempotent: guarding again (or a path below) holds nothing twice.
        dirs.guard(&records.join("iteration-1")).unwrap();
        let held = dirs.len();
        dirs.guard(&records).unwrap();
        assert_eq!(dirs.len(), held);

        fs::set_permissions(&records, fs::Permissions::from_mode(0o000)).unwrap();
        fs::set_permissions(&top, fs::Permissions::from_mode(0o000)).unwrap();
        let restored = dirs.restore();
        assert_eq!(mode(&top), 0o755);
        assert_eq!(mode(&records), 0o700);
        assert!(restored.failed.is_empty(), "{restored:?}");
        assert_eq!(restored.modes.len(), 2, "{restored:?}");
        assert!(
            restored.modes[0].contains("sandbox 0 -> 755"),
            "{restored:?}"
        );
        // Nothing changed: nothing to say.
        assert_eq!(dirs.restore(), Restored::default());
    }

    #[test]
    fn a_directory_found_without_its_owners_rights_gets_them_and_the_walk_goes_on() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().join("sandbox");
        let below = top.join("uploads/plugins");
        fs::create_dir_all(&below).unwrap();
        fs::set_permissions(&top, fs::Permissions::from_mode(0o055)).unwrap();
        let mut dirs = OwnedDirs::of_uid(own_uid());
        dirs.guard(&below).unwrap();
        assert_eq!(mode(&top), 0o755);
        assert!(dirs.held.iter().any(|h| h.path == below), "{dirs:?}");
    }

    #[test]
    fn a_link_on_the_way_is_resolved_and_what_does_not_exist_yet_is_left() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, tmp.path().join("link")).unwrap();
        let mut dirs = OwnedDirs::of_uid(own_uid());
        dirs.guard(&tmp.path().join("link/not/yet")).unwrap();
        let real = fs::canonicalize(&real).unwrap();
        assert!(dirs.held.iter().any(|h| h.path == real), "{dirs:?}");
        assert!(!dirs.held.iter().any(|h| h.path.ends_with("link")));
    }

    #[test]
    fn a_walk_that_meets_a_link_of_the_uid_refuses_it() {
        let tmp = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/", tmp.path().join("link")).unwrap();
        let dir =
            rustix::fs::open(tmp.path(), OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        let dirs = OwnedDirs::of_uid(own_uid());
        let at = tmp.path().join("link");
        let err = dirs
            .not_a_directory(&dir, OsStr::new("link"), &at, own_uid())
            .unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        // Another uid's link (root's, when the test runs as someone else) is no refusal.
        assert!(dirs
            .not_a_directory(&dir, OsStr::new("link"), &at, own_uid() + 1)
            .is_ok());
    }

    #[test]
    fn entries_of_the_supervisors_own_directory_get_their_owners_rights_back() {
        let tmp = tempfile::tempdir().unwrap();
        let records = tmp.path().join("records");
        fs::create_dir_all(records.join("iteration-1")).unwrap();
        fs::write(records.join(".collected"), "1\n").unwrap();
        let mut dirs = OwnedDirs::of_uid(own_uid());
        dirs.guard_own(&records).unwrap();
        fs::set_permissions(
            records.join(".collected"),
            fs::Permissions::from_mode(0o000),
        )
        .unwrap();
        fs::set_permissions(
            records.join("iteration-1"),
            fs::Permissions::from_mode(0o055),
        )
        .unwrap();
        let restored = dirs.restore();
        assert_eq!(mode(&records.join(".collected")), 0o600);
        assert_eq!(mode(&records.join("iteration-1")), 0o755);
        assert_eq!(restored.modes.len(), 2, "{restored:?}");
        // Entries of a directory that is not the supervisor's own are left as they are.
        let other = tmp.path().join("other");
        fs::create_dir(&other).unwrap();
        fs::write(other.join("f"), "").unwrap();
        dirs.guard(&other).unwrap();
        fs::set_permissions(other.join("f"), fs::Permissions::from_mode(0o000)).unwrap();
        dirs.restore();
        assert_eq!(mode(&other.join("f")), 0);
    }

    #[test]
    fn a_default_acl_on_a_held_directory_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sandbox");
        fs::create_dir(&dir).unwrap();
        let mut dirs = OwnedDirs::of_uid(own_uid());
        dirs.guard(&dir.join("x")).unwrap();
        // u::---,g::---,o::--- as the kernel's xattr format (version 2, three entries).
        let mut acl = 2u32.to_le_bytes().to_vec();
        for tag in [1u16, 4, 32] {
            acl.extend(tag.to_le_bytes());
            acl.extend(0u16.to_le_bytes());
            acl.extend(u32::MAX.to_le_bytes());
        }
        let set = rustix::fs::setxattr(
            &dir,
            "system.posix_acl_default",
            &acl,
            rustix::fs::XattrFlags::empty(),
        );
        if set == Err(rustix::io::Errno::NOTSUP) {
            pitcrew_test_support::skip("the temporary directory's file system has no POSIX ACLs");
            return;
        }
        set.unwrap();
        let restored = dirs.restore();
        assert!(
            restored
                .modes
                .iter()
                .any(|m| m.ends_with("system.posix_acl_default removed")),
            "{restored:?}"
        );
        let mut buf = [0u8; 64];
        assert_eq!(
            rustix::fs::getxattr(&dir, "system.posix_acl_default", &mut buf[..]),
            Err(rustix::io::Errno::NODATA)
        );
    }

    #[test]
    fn off_holds_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let mut dirs = OwnedDirs::off();
        dirs.guard(tmp.path()).unwrap();
        assert!(dirs.is_empty());
    }
}
