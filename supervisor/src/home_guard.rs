//! The agent's `HOME` holds no module folder the agent can fill for a verified plugin.
//!
//! Node resolves a bare `require()` (and pi's loader a bare `import`) that the `node_modules`
//! folders of the importing file's directories do not satisfy in its global folders,
//! `$HOME/.node_modules` and `$HOME/.node_libraries`, and `HOME` is the agent's to write. A
//! verified pi extension, or a verified Claude Code plugin's Node hook, that loads a package it
//! does not ship (an optional dependency, a name built at run time) would load, inside pi or as
//! the hook, what the agent's tools wrote there earlier in the same iteration. Emptying `HOME`
//! between iterations does not reach that, so before each launch, after `HOME` was emptied
//! ([`protect`]):
//!
//! - `HOME` is made root's, group the agent's, mode `1770`: the agent still creates whatever it
//!   likes there, but the sticky bit keeps it from removing or renaming root's entries;
//! - each of Node's global folders is a root-owned empty directory, mode `0555`
//!   ([`crate::root_guard`]), so a lookup there finds nothing; and the start-up files a
//!   verified hook's tools read from `HOME` (`~/.jq`, `~/.curlrc`, `~/.wgetrc`, `~/.npmrc`:
//!   [`GUARDED`]) are root-owned empty files, so that the agent cannot write, say, the `jq`
//!   definitions a hook deciding with `jq` would run;
//! - no directory above `HOME` may let the agent replace `HOME` itself (a directory it owns, or
//!   one its groups or everyone may write without the sticky bit): Node takes the folders' paths
//!   from `HOME` when it starts, so a `HOME` renamed away and made anew would be the agent's.
//!   Such a layout is refused with the path.
//!
//! Python's own per-user folder (the user site directory, whose `.pth` files run at every
//! interpreter start) is switched off by a pinned variable instead (`PYTHONNOUSERSITE=1`,
//! [`crate::environment::common_pins`]): the agent's tools keep using `~/.local` as they like.
//!
//! The next reset keeps the guards ([`guards_present`]) so that no record names them as removed.
//! A supervisor that is not root (unprivileged mode), or an agent that runs as root, leaves all
//! this alone, and the record names nothing as guarded.

use crate::manifest::{Manifest, RuntimeDirPaths};
use crate::root_guard::{self, Guard};
use crate::sandbox::nofollow;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};

/// What in `HOME` the tools of verified code read without being asked, each kept a guard of
/// root's: Node's global module folders (an empty directory), and the start-up files of `jq`
/// (definitions put before every program), `curl` and `wget` (options for every transfer) and
/// `npm` (`node-options`, `script-shell`: programs every `npm`/`npx` runs), each an empty file.
pub const GUARDED: &[(&str, Guard)] = &[
    (".node_modules", Guard::Empty),
    (".node_libraries", Guard::Empty),
    (".jq", Guard::EmptyFile),
    (".curlrc", Guard::EmptyFile),
    (".wgetrc", Guard::EmptyFile),
    (".npmrc", Guard::EmptyFile),
];

/// Makes `HOME` root's with the sticky bit and puts an empty root-owned directory in place of
/// each of Node's global folders (see the module docs). Returns the names guarded, for the
/// record (none when the supervisor is not root or the agent is). Errors name the path.
pub fn protect(manifest: &Manifest, dirs: &RuntimeDirPaths) -> Result<Vec<String>, String> {
    if !root_guard::applies(manifest) {
        return Ok(Vec::new());
    }
    let home = Path::new(&dirs.home);
    if let Some(problem) = replaceable_by(home, manifest, dirs) {
        return Err(format!(
            "{}: the agent could put another HOME in its place ({problem}), and with it Node's \
             global module folders: give dirs.home a parent only root may change",
            home.display()
        ));
    }
    let dir = root_guard::make_sticky(home, manifest.user.gid)?;
    for (name, guard) in GUARDED {
        root_guard::put(dir.as_fd(), home, name, *guard)?;
    }
    Ok(GUARDED.iter().map(|(name, _)| name.to_string()).collect())
}

/// The names of [`GUARDED`] in `home` that hold the supervisor's guard.
pub fn guards_present(home: &Path) -> Vec<PathBuf> {
    root_guard::present(home, GUARDED)
}

/// Why the agent of `manifest` could rename or remove `path` (then make its own in its place),
/// or `None` when no directory above it lets it: each must be neither the agent's nor writable
/// by one of its groups or by everyone without the sticky bit (which, in a directory the agent
/// does not own, keeps it from renaming what is not its own).
///
/// In a user namespace other than the initial one (rootless), an owner the namespace does not
/// map reads as the overflow id, 65534, which may be the agent's own id as well: such an owner
/// counts as the agent's only for the agent's own directories (`dirs`, the workdir) and what
/// lies in them.
fn replaceable_by(path: &Path, manifest: &Manifest, dirs: &RuntimeDirPaths) -> Option<String> {
    let user = &manifest.user;
    let overflow =
        crate::user_namespace::current().map(|_| (overflow_id("uid"), overflow_id("gid")));
    let agents_own = |dir: &Path| {
        std::iter::once(manifest.workdir.as_str())
            .chain(dirs.agent_dirs())
            .any(|d| dir.starts_with(d))
    };
    for dir in path.ancestors().skip(1) {
        let stat = match nofollow::open_dir(dir).and_then(|fd| {
            rustix::fs::fstat(&fd).map_err(|e| format!("{}: stat: {e}", dir.display()))
        }) {
            Ok(stat) => stat,
            Err(err) => return Some(err),
        };
        let sticky = stat.st_mode & 0o1000 != 0;
        let unmapped_uid = overflow.is_some_and(|(uid, _)| stat.st_uid == uid) && !agents_own(dir);
        let unmapped_gid = overflow.is_some_and(|(_, gid)| stat.st_gid == gid) && !agents_own(dir);
        let group =
            !unmapped_gid && (stat.st_gid == user.gid || user.groups.contains(&stat.st_gid));
        let why = if stat.st_uid == user.uid && !unmapped_uid {
            "is the agent's"
        } else if sticky {
            continue;
        } else if stat.st_mode & 0o002 != 0 {
            "is writable by everyone"
        } else if group && stat.st_mode & 0o020 != 0 {
            "is writable by the agent's group"
        } else {
            continue;
        };
        return Some(format!("{} {why}", dir.display()));
    }
    None
}

/// The id (`uid` or `gid`) an unmapped owner reads as in a user namespace
/// (`/proc/sys/kernel/overflowuid`, `overflowgid`; 65534 when it cannot be read).
fn overflow_id(kind: &str) -> u32 {
    std::fs::read_to_string(format!("/proc/sys/kernel/overflow{kind}"))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(65534)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    fn manifest(workdir: &Path, home: &Path) -> Manifest {
        Manifest::from_json(
            serde_json::json!({
                "version": 1,
                "runtime": "pi",
                "agent": {"binary": "/bin/true"},
                "prompt": "p",
                "workdir": workdir,
                "dirs": {"home": home},
                "user": {"uid": 65534, "gid": 65534},
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    #[allow(non_snake_case)] // attack tests are named attack_<class>__<case>
    fn attack_runtime_tamper__nodes_global_folders_are_roots_in_a_sticky_home() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(65534), Some(65534)).unwrap();
        let m = manifest(&tmp.path().join("work"), &home);
        assert!(guards_present(&home).is_empty());
        let guarded = protect(&m, &m.runtime_dirs()).unwrap();
        assert_eq!(
            guarded,
            [
                ".node_modules",
                ".node_libraries",
                ".jq",
                ".curlrc",
                ".wgetrc",
                ".npmrc"
            ]
        );
        let meta = std::fs::metadata(&home).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 65534));
        assert_eq!(meta.permissions().mode() & 0o7777, 0o1770);
        for (name, guard) in GUARDED {
            let meta = std::fs::symlink_metadata(home.join(name)).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            match guard {
                Guard::Empty => assert!(meta.is_dir() && mode == 0o555, "{name}"),
                _ => assert!(meta.is_file() && meta.len() == 0 && mode == 0o444, "{name}"),
            }
            assert_eq!(meta.uid(), 0, "{name}");
        }
        assert_eq!(guards_present(&home).len(), GUARDED.len());
        // The next iteration, the guards kept by the reset: nothing to do.
        assert_eq!(protect(&m, &m.runtime_dirs()).unwrap().len(), GUARDED.len());
        // A folder the agent could have made is no guard.
        std::fs::remove_dir(home.join(".node_libraries")).unwrap();
        std::fs::create_dir(home.join(".node_libraries")).unwrap();
        std::os::unix::fs::chown(home.join(".node_libraries"), Some(65534), None).unwrap();
        assert!(!guards_present(&home).contains(&PathBuf::from(".node_libraries")));
        assert_eq!(guards_present(&home).len(), GUARDED.len() - 1);
        // Nor is a start-up file of the agent's, or one with content.
        std::fs::remove_file(home.join(".jq")).unwrap();
        std::fs::write(home.join(".jq"), "").unwrap();
        std::os::unix::fs::chown(home.join(".jq"), Some(65534), None).unwrap();
        assert!(!guards_present(&home).contains(&PathBuf::from(".jq")));
        std::os::unix::fs::chown(home.join(".jq"), Some(0), None).unwrap();
        std::fs::write(home.join(".jq"), "def test(re): false;\n").unwrap();
        assert!(!guards_present(&home).contains(&PathBuf::from(".jq")));
        assert!(protect(&m, &m.runtime_dirs())
            .unwrap_err()
            .contains(".node_libraries: create"));
    }

    #[test]
    #[allow(non_snake_case)] // attack tests are named attack_<class>__<case>
    fn attack_runtime_tamper__a_home_the_agent_could_replace_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let parent = tmp.path().join("agents");
        let home = parent.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let m = manifest(&tmp.path().join("work"), &home);
        for (uid, gid, mode, why) in [
            (65534, 0, 0o755, "is the agent's"),
            (0, 0, 0o777, "is writable by everyone"),
            (0, 65534, 0o775, "is writable by the agent's group"),
        ] {
            std::os::unix::fs::chown(&parent, Some(uid), Some(gid)).unwrap();
            std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = protect(&m, &m.runtime_dirs()).unwrap_err();
            assert!(
                err.contains(&format!("{} {why}", parent.display())),
                "{err}"
            );
            assert!(guards_present(&home).is_empty());
        }
        // Writable by everyone with the sticky bit, as /tmp: the agent renames only its own.
        std::os::unix::fs::chown(&parent, Some(0), Some(0)).unwrap();
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(protect(&m, &m.runtime_dirs()).unwrap().len(), GUARDED.len());
    }
}
