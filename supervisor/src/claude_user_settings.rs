//! Claude Code's config dir holds nothing the agent can make it load during an iteration.
//!
//! Claude Code reloads its user settings as the file changes, in the iteration that changes it,
//! and applies their `env` block to its own environment, the one every hook it runs later
//! inherits: `CLAUDE_CODE_SIMPLE=1` turns the verified plugins' and the `--settings` hooks off,
//! `CLAUDE_CODE_SAFE_MODE=1` the plugins', and a `PATH` of the agent's makes a verified hook run
//! the agent's programs. It also reads user skills, agents, commands, output styles, rules,
//! workflows and its user `CLAUDE.md` from the config dir, and watches the directory while it
//! runs. No source above the user's can pin all of it, so the agent must not be able to create
//! any of these names at all. Before each launch of Claude Code, after the config dir was reset
//! and with nothing of the agent running ([`protect`]):
//!
//! - the config dir is root's, group the agent's, mode `1770`: the agent still creates and
//!   replaces its own entries there (Claude Code keeps its state in it), but the sticky bit keeps
//!   it from removing or renaming root's: the guards and the pinned files;
//! - each name of [`GUARDED`] that the harness does not pin gets a root-owned, read-only guard
//!   in its place: for the two user settings files a file holding `{}` ([`root_guard::SETTINGS`]), for every
//!   other name an empty directory (mode `0555`), which Claude Code reads as no skills, no
//!   agents, … and, where it expects a file, as no file. A pinned name's directory is made
//!   root's and not writable by the agent's group or others;
//! - the names Claude Code reads there that it also writes itself stay the agent's to write
//!   ([`AGENT_WRITABLE`]); every record names both lists ([`ClaudeConfigRecord`]).
//!
//! The next reset keeps the guards (each is recognised by owner, kind and content:
//! [`guards_present`]) so that no iteration's record names them as removed. A supervisor that is
//! not root (unprivileged mode) cannot own a file the agent cannot replace, and an agent that
//! runs as root passes any guard ([`root_guard::applies`]): both leave all this alone, and the
//! record names nothing as guarded.

use crate::manifest::{Manifest, Runtime, RuntimeDirPaths};
use crate::root_guard;
pub use crate::root_guard::Guard;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The name of Claude Code's user settings file in its config dir.
pub const USER_SETTINGS: &str = "settings.json";

/// The names Claude Code reads from its config dir and never needs to write in a run under
/// pitcrew, each with the guard put in its place when the harness pins nothing there. The list
/// is the release's own: the entries its sandbox denies writes to in the config dir, the
/// settings files it loads, and every other name it was seen to read there (`strace` of a run).
pub const GUARDED: &[(&str, Guard)] = &[
    // User settings; `cowork_settings.json` is the file `CLAUDE_CODE_USE_COWORK_PLUGINS`
    // switches to.
    (USER_SETTINGS, Guard::Settings),
    ("cowork_settings.json", Guard::Settings),
    // Skills, agents, commands, output styles, workflows, themes, routines and hooks of the
    // user scope.
    ("skills", Guard::Empty),
    ("agents", Guard::Empty),
    ("commands", Guard::Empty),
    ("output-styles", Guard::Empty),
    ("workflows", Guard::Empty),
    ("themes", Guard::Empty),
    ("routines", Guard::Empty),
    ("hooks", Guard::Empty),
    // User memory: instructions in the system prompt.
    ("CLAUDE.md", Guard::Empty),
    ("rules", Guard::Empty),
    ("loop.md", Guard::Empty),
    // Plugins of another scope, development mods, the legacy global config (MCP servers),
    // scheduled tasks, launch and daemon configuration, policy limits.
    ("cowork_plugins", Guard::Empty),
    ("dev-mods", Guard::Empty),
    (".config.json", Guard::Empty),
    ("scheduled_tasks.json", Guard::Empty),
    ("launch.json", Guard::Empty),
    ("daemon.json", Guard::Empty),
    ("daemon", Guard::Empty),
    ("policy-limits.json", Guard::Empty),
];

/// The names Claude Code reads from its config dir that it writes itself, so they stay the
/// agent's to write during an iteration (the config reset removes them before the next one):
/// its global config (`.claude.json`: MCP servers, per-project settings, read at startup), its
/// credentials, installed plugins and their data, transcripts, the shell snapshots and session
/// environment its Bash tool sources, and its caches and state.
pub const AGENT_WRITABLE: &[&str] = &[
    ".claude.json",
    ".credentials.json",
    "plugins",
    "projects",
    "sessions",
    "session-env",
    "shell-snapshots",
    "backups",
    "state",
    "cache",
    "plans",
    "jobs",
    "debug",
];

/// The record's `claude_config`: what of Claude Code's config dir the agent could not write
/// during the iteration, and what it could.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaudeConfigRecord {
    /// Names of [`GUARDED`] that were root's and read-only to the agent: a guard or a pinned
    /// entry (empty when the supervisor is not root).
    pub guarded: Vec<String>,
    /// Names Claude Code reads there that the agent could create or change while it ran
    /// ([`AGENT_WRITABLE`], and every name of [`GUARDED`] left unguarded).
    pub agent_writable: Vec<String>,
    /// What the image holds in Claude Code's managed settings directory (`/etc/claude-code`),
    /// which it reads whatever its flags: every file with its SHA-256.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed: Vec<crate::claude_managed::ManagedEntry>,
}

/// Makes the config dir of a Claude Code `manifest` root's with the sticky bit and puts a
/// root-owned, read-only guard in place of each name of [`GUARDED`] the harness does not pin
/// (see the module docs). Returns what the record names; `None` for another runtime. Errors
/// name the path.
pub fn protect(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
) -> Result<Option<ClaudeConfigRecord>, String> {
    if manifest.runtime != Runtime::Claude {
        return Ok(None);
    }
    let mut record = ClaudeConfigRecord {
        guarded: Vec::new(),
        agent_writable: AGENT_WRITABLE.iter().map(|n| n.to_string()).collect(),
        managed: crate::claude_managed::list(Path::new(crate::claude_managed::MANAGED_DIR)),
    };
    if !root_guard::applies(manifest) {
        record
            .agent_writable
            .extend(GUARDED.iter().map(|(n, _)| n.to_string()));
        return Ok(Some(record));
    }
    record.guarded =
        root_guard::guard_config_dir(manifest, Path::new(&dirs.config), GUARDED, |_| false)?;
    Ok(Some(record))
}

/// The names of [`GUARDED`] in the config dir `config` that hold the supervisor's guard: a
/// regular file of root's holding exactly [`root_guard::SETTINGS`], or an empty directory of root's, mode
/// `0555` (the agent can make nothing of root's). Nothing when the directory cannot be opened.
pub fn guards_present(config: &Path) -> Vec<PathBuf> {
    root_guard::present(config, GUARDED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::root_guard::SETTINGS as GUARD;
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
        assert!(guards_present(config).is_empty());
        let record = protect(&m, &dirs).unwrap().unwrap();
        let meta = std::fs::metadata(config).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 65534));
        assert_eq!(
            meta.permissions().mode() & 0o7777,
            root_guard::STICKY_DIR_MODE
        );
        let settings = config.join(USER_SETTINGS);
        let meta = std::fs::symlink_metadata(&settings).unwrap();
        assert!(meta.is_file());
        assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (0, 0o444));
        assert_eq!(std::fs::read(&settings).unwrap(), GUARD);
        for name in ["skills", "agents", "commands", "CLAUDE.md"] {
            let meta = std::fs::symlink_metadata(config.join(name)).unwrap();
            assert!(meta.is_dir(), "{name}");
            assert_eq!((meta.uid(), meta.permissions().mode() & 0o7777), (0, 0o555));
        }
        assert_eq!(record.guarded.len(), GUARDED.len());
        assert!(record.agent_writable.contains(&".claude.json".to_string()));
        assert_eq!(guards_present(config).len(), GUARDED.len());
        // Again (the next iteration, the guards kept by the reset): nothing to do.
        protect(&m, &dirs).unwrap();
        // A settings.json of other content, or not root's, is not the guard; nor is a directory
        // that is not empty or not root's.
        std::fs::remove_file(&settings).unwrap();
        std::fs::write(&settings, "{}\n").unwrap();
        std::os::unix::fs::chown(&settings, Some(65534), None).unwrap();
        std::fs::write(&settings, "{\"env\":{}}").unwrap();
        std::os::unix::fs::chown(config.join("agents"), Some(65534), None).unwrap();
        std::fs::set_permissions(
            config.join("skills"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::fs::create_dir(config.join("skills/x")).unwrap();
        let present = guards_present(config);
        for name in [USER_SETTINGS, "agents", "skills"] {
            assert!(
                !present.contains(&PathBuf::from(name)),
                "{name}: {present:?}"
            );
        }
        assert!(present.contains(&PathBuf::from("commands")));
    }

    #[test]
    fn a_pinned_directory_is_made_roots_and_closed_to_the_agent() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        let mut v = serde_json::json!({
            "version": 1, "runtime": "claude", "agent": {"binary": "/bin/true"},
            "prompt": "p", "workdir": work, "user": {"uid": 65534, "gid": 65534},
        });
        let m = Manifest::from_json(v.to_string().as_bytes()).unwrap();
        let config = PathBuf::from(&m.runtime_dirs().config);
        let agent = config.join("agents/reviewer.md");
        v["files"] = serde_json::json!([{
            "path": agent, "sha256": "0".repeat(64), "role": "config",
        }]);
        let m = Manifest::from_json(v.to_string().as_bytes()).unwrap();
        let dirs = m.runtime_dirs();
        std::fs::create_dir_all(config.join("agents")).unwrap();
        std::fs::write(&agent, "x").unwrap();
        std::os::unix::fs::chown(config.join("agents"), Some(65534), None).unwrap();
        std::fs::set_permissions(
            config.join("agents"),
            std::fs::Permissions::from_mode(0o777),
        )
        .unwrap();
        protect(&m, &dirs).unwrap();
        let meta = std::fs::metadata(config.join("agents")).unwrap();
        assert_eq!((meta.uid(), meta.permissions().mode() & 0o7777), (0, 0o755));
        assert_eq!(std::fs::read(&agent).unwrap(), b"x");
    }

    #[test]
    fn other_runtimes_keep_their_config_dir_as_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        let m = manifest("pi", &tmp.path().join("work"));
        let dirs = m.runtime_dirs();
        std::fs::create_dir(&dirs.config).unwrap();
        assert_eq!(protect(&m, &dirs).unwrap(), None);
        assert!(!Path::new(&dirs.config).join(USER_SETTINGS).exists());
    }
}
