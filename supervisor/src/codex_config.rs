//! Codex's config dir holds nothing the agent can make Codex read while it runs.
//!
//! pitcrew points `CODEX_HOME` at the manifest's config dir, which the config reset brings back
//! to the pinned files before each iteration. Codex 0.169.1 reads it again while it runs: a
//! sub-agent (`multi_agent_v1`'s `spawn_agent`) reads `hooks.json`, `AGENTS.md` and
//! `AGENTS.override.md` there when it is spawned, so a `hooks.json` the agent's shell swapped in
//! turned the verified hook off for the sub-agent, and its instructions were the agent's. Before
//! each launch of Codex, after the config reset and with nothing of the agent running
//! ([`protect`]), the config dir is root's, group the agent's, mode `1770` (Codex, as the agent,
//! still creates its state there; the sticky bit keeps the agent from removing or renaming
//! root's entries: the guards and the pinned files), and each name of [`GUARDED`] that the
//! manifest does not pin gets a root-owned, read-only guard ([`crate::root_guard`]).
//!
//! The next reset keeps the guards ([`guards_present`]). A supervisor that is not root
//! (unprivileged mode), or an agent that runs as root, leaves all this alone, and the record
//! names nothing as guarded.

use crate::manifest::{Manifest, Runtime, RuntimeDirPaths};
use crate::root_guard::{self, Guard};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The names Codex 0.169.1 reads from `CODEX_HOME` that it does not write in a run under
/// pitcrew, each with the guard put in its place when the manifest pins nothing there: its
/// hooks (`{}`: none), its configuration and instructions (empty files: none), and the rules,
/// prompts and memories it loads from directories there (empty directories).
pub const GUARDED: &[(&str, Guard)] = &[
    ("hooks.json", Guard::Settings),
    ("config.toml", Guard::EmptyFile),
    ("AGENTS.md", Guard::EmptyFile),
    ("AGENTS.override.md", Guard::EmptyFile),
    ("rules", Guard::Empty),
    ("prompts", Guard::Empty),
    ("memories", Guard::Empty),
];

/// The record's `codex_config`: what of Codex's config dir the agent could not write while
/// Codex ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodexConfigRecord {
    /// Names of [`GUARDED`] that were root's and read-only to the agent: a guard or a pinned
    /// entry.
    pub guarded: Vec<String>,
}

/// Makes the config dir of a Codex `manifest` root's with the sticky bit and puts a root-owned,
/// read-only guard in place of each name of [`GUARDED`] the manifest does not pin (see the
/// module docs). Returns what the record names; `None` for another runtime, a supervisor that
/// is not root or an agent that is. Errors name the path.
pub fn protect(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
) -> Result<Option<CodexConfigRecord>, String> {
    if manifest.runtime != Runtime::Codex || !root_guard::applies(manifest) {
        return Ok(None);
    }
    let guarded =
        root_guard::guard_config_dir(manifest, Path::new(&dirs.config), GUARDED, |_| false)?;
    Ok(Some(CodexConfigRecord { guarded }))
}

/// The names of [`GUARDED`] in the config dir `config` that hold the supervisor's guard.
pub fn guards_present(config: &Path) -> Vec<PathBuf> {
    root_guard::present(config, GUARDED)
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
    fn attack_runtime_tamper__codexs_hooks_and_instructions_are_roots_in_a_sticky_config_dir() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let m = manifest("codex", &tmp.path().join("work"));
        let dirs = m.runtime_dirs();
        let config = Path::new(&dirs.config);
        std::fs::create_dir(config).unwrap();
        std::os::unix::fs::chown(config, Some(65534), Some(65534)).unwrap();
        let record = protect(&m, &dirs).unwrap().unwrap();
        assert_eq!(record.guarded.len(), GUARDED.len());
        let meta = std::fs::metadata(config).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 65534));
        assert_eq!(meta.permissions().mode() & 0o7777, 0o1770);
        let agents = std::fs::symlink_metadata(config.join("AGENTS.md")).unwrap();
        assert!(agents.is_file() && agents.len() == 0 && agents.uid() == 0);
        assert_eq!(
            std::fs::read(config.join("hooks.json")).unwrap(),
            root_guard::SETTINGS
        );
        assert_eq!(guards_present(config).len(), GUARDED.len());
        protect(&m, &dirs).unwrap();
    }

    #[test]
    fn other_runtimes_keep_their_config_dir_as_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        let m = manifest("pi", &tmp.path().join("work"));
        let dirs = m.runtime_dirs();
        std::fs::create_dir(&dirs.config).unwrap();
        assert_eq!(protect(&m, &dirs).unwrap(), None);
    }
}
