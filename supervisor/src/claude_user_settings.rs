//! Claude Code's user settings file (`$CLAUDE_CONFIG_DIR/settings.json`) is never the agent's
//! to write.
//!
//! Claude Code reloads its user settings as the file changes, in the iteration that changes it,
//! and applies their `env` block to its own environment, the one every hook it runs later
//! inherits: `CLAUDE_CODE_SIMPLE=1` turns the verified plugins' and the `--settings` hooks off,
//! `CLAUDE_CODE_SAFE_MODE=1` the plugins', and a `PATH` of the agent's makes a verified hook run
//! the agent's programs. No source above the user's can pin every name a hook's processes read,
//! so the agent must not be able to write the file at all. Before each launch of Claude Code,
//! after the config dir was reset and with nothing of the agent running ([`protect`]):
//!
//! - the config dir is root's, group the agent's, mode `1770`: the agent still creates and
//!   replaces its own entries there (Claude Code keeps its state in it), but the sticky bit keeps
//!   it from removing or renaming root's: the user settings file and the pinned files;
//! - a `settings.json` the harness does not pin is made root's, read-only, holding `{}`
//!   ([`GUARD`]), so the agent cannot create its own in its place.
//!
//! The next reset keeps that file (it is recognised by owner, kind and content:
//! [`guard_present`]) so that no iteration's record names it as removed. A supervisor that is
//! not root (unprivileged mode) cannot own a file the agent cannot replace and leaves all this
//! alone.

use crate::manifest::{Manifest, Runtime, RuntimeDirPaths};
use crate::sandbox::nofollow;
use rustix::fs::{Mode, OFlags};
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd as _, BorrowedFd};
use std::path::Path;

/// The content of the user settings file the supervisor puts in the config dir: no settings.
pub const GUARD: &[u8] = b"{}\n";

/// The name of Claude Code's user settings file in its config dir.
pub const USER_SETTINGS: &str = "settings.json";

/// The mode of the config dir while Claude Code runs: root's, the agent's group may create
/// entries, the sticky bit keeps root's entries root's.
const CONFIG_DIR_MODE: u32 = 0o1770;

/// Makes the config dir of a Claude Code `manifest` root's with the sticky bit and puts the
/// read-only [`GUARD`] in place of a user settings file the harness does not pin (see the module
/// docs). Nothing for another runtime or a supervisor that is not root. Errors name the path.
pub fn protect(manifest: &Manifest, dirs: &RuntimeDirPaths) -> Result<(), String> {
    if manifest.runtime != Runtime::Claude || !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let config = Path::new(&dirs.config);
    // The walk gives a path descriptor; the directory itself, opened through it, takes chown
    // and chmod.
    let dir = rustix::fs::openat(
        nofollow::open_dir(config)?,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{}: open: {e}", config.display()))?;
    let gid = rustix::fs::Gid::from_raw_unchecked(manifest.user.gid);
    rustix::fs::fchown(&dir, Some(rustix::fs::Uid::ROOT), Some(gid))
        .map_err(|e| format!("{}: chown: {e}", config.display()))?;
    rustix::fs::fchmod(&dir, Mode::from_raw_mode(CONFIG_DIR_MODE))
        .map_err(|e| format!("{}: chmod: {e}", config.display()))?;
    let settings = config.join(USER_SETTINGS);
    let pinned = manifest
        .files
        .iter()
        .any(|f| Path::new(&f.path) == settings);
    if pinned || is_guard(dir.as_fd()) {
        return Ok(());
    }
    let fd = rustix::fs::openat(
        &dir,
        USER_SETTINGS,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o444),
    )
    .map_err(|e| format!("{}: create: {e}", settings.display()))?;
    // The mode asked for is cut by the umask; the file is root's and read-only whatever it is.
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o444))
        .map_err(|e| format!("{}: chmod: {e}", settings.display()))?;
    std::fs::File::from(fd)
        .write_all(GUARD)
        .map_err(|e| format!("{}: write: {e}", settings.display()))
}

/// Whether the config dir `config` holds the supervisor's [`GUARD`] as its user settings
/// file: a regular file of root's with exactly that content (the agent can make no file of
/// root's). False when anything is missing or unreadable.
pub fn guard_present(config: &Path) -> bool {
    nofollow::open_dir(config).is_ok_and(|dir| is_guard(dir.as_fd()))
}

fn is_guard(dir: BorrowedFd<'_>) -> bool {
    let Ok(fd) = rustix::fs::openat(
        dir,
        USER_SETTINGS,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let Ok(stat) = rustix::fs::fstat(&fd) else {
        return false;
    };
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile
        || stat.st_uid != 0
        || stat.st_size != GUARD.len() as i64
    {
        return false;
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(GUARD.len() as u64 + 1)
        .read_to_end(&mut bytes)
        .is_ok_and(|_| bytes == GUARD)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};

    fn manifest(runtime: &str, workdir: &Path) -> Manifest {
        Manifest::from_json(
            serde_json::json!({
                "version": 1,
                "runtime": runtime,
                "agent": {"binary": "/bin/true"},
                "prompt": "p",
                "workdir": workdir,
                "user": {"uid": 65534, "gid": 65534},
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    #[allow(non_snake_case)] // attack tests are named attack_<class>__<case>
    fn attack_runtime_tamper__claudes_user_settings_are_roots_in_a_sticky_config_dir() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let m = manifest("claude", &tmp.path().join("work"));
        let dirs = m.runtime_dirs();
        let config = Path::new(&dirs.config);
        std::fs::create_dir(config).unwrap();
        std::os::unix::fs::chown(config, Some(65534), Some(65534)).unwrap();
        assert!(!guard_present(config));
        protect(&m, &dirs).unwrap();
        let meta = std::fs::metadata(config).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 65534));
        assert_eq!(meta.permissions().mode() & 0o7777, CONFIG_DIR_MODE);
        let settings = config.join(USER_SETTINGS);
        let meta = std::fs::symlink_metadata(&settings).unwrap();
        assert!(meta.is_file());
        assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (0, 0o444));
        assert_eq!(std::fs::read(&settings).unwrap(), GUARD);
        assert!(guard_present(config));
        // Again (the next iteration, the guard kept by the reset): nothing to do.
        protect(&m, &dirs).unwrap();
        // A settings.json of other content, or not root's, is not the guard.
        std::fs::remove_file(&settings).unwrap();
        std::fs::write(&settings, "{}\n").unwrap();
        std::os::unix::fs::chown(&settings, Some(65534), None).unwrap();
        assert!(!guard_present(config));
        std::fs::write(&settings, "{\"env\":{}}").unwrap();
        std::os::unix::fs::chown(&settings, Some(0), None).unwrap();
        assert!(!guard_present(config));
    }

    #[test]
    fn other_runtimes_keep_their_config_dir_as_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        let m = manifest("pi", &tmp.path().join("work"));
        let dirs = m.runtime_dirs();
        std::fs::create_dir(&dirs.config).unwrap();
        protect(&m, &dirs).unwrap();
        assert!(!Path::new(&dirs.config).join(USER_SETTINGS).exists());
    }
}
