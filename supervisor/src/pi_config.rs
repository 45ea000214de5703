//! pi's config dir holds nothing the agent can make pi read while it runs.
//!
//! pi keeps its configuration and state in its agent dir (`PI_CODING_AGENT_DIR`, the manifest's
//! config dir), and pi 0.87.1 and 1.6.0 read some of it again while they run: `auth.json`
//! before each model request (a `!command` key pi runs with a shell itself, outside any tool
//! call a hook adapter sees), and in 1.6.0 `models-store.json` (provider catalogs). The config
//! reset brings the directory back to the pinned files before each iteration, but the agent
//! could write there while pi runs (with pi's own `write` tool). Before each launch of pi, after
//! the config reset and with nothing of the agent running ([`protect`]):
//!
//! - the config dir is root's, group the agent's, mode `1770`: pi, as the agent, still creates
//!   what it writes there (the `*.lock` directories it takes around each read of a settings or
//!   auth file, a crash log), but the sticky bit keeps it from removing or renaming root's
//!   entries: the guards and the pinned files;
//! - each name of [`GUARDED`] that the manifest does not pin (and that is not the supervisor's
//!   own `models.json`, [`crate::pi_model_route`]) gets a root-owned, read-only guard in its
//!   place ([`crate::root_guard`]): `{}` for a JSON file, an empty directory for a directory.
//!
//! `SYSTEM.md` and `APPEND_SYSTEM.md` there are read once, when pi starts, after the reset has
//! removed them; no guard stands for them (a guard's content would be read as a system prompt).
//! The next reset keeps the guards ([`guards_present`]). A supervisor that is not root
//! (unprivileged mode), or an agent that runs as root, leaves all this alone, and the record
//! names nothing as guarded.

use crate::manifest::{Manifest, Runtime, RuntimeDirPaths};
use crate::root_guard::{self, Guard};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The names pi 0.73.1, 0.87.1 and 1.6.0 read from their agent dir and do not write in a run
/// under pitcrew, each with the guard put in its place when the manifest pins nothing there:
/// credentials (with `!command` values), models and settings, provider catalogs, MCP servers
/// and their credentials, and the extensions, skills, prompts, themes, tools and packages it
/// loads from there.
pub const GUARDED: &[(&str, Guard)] = &[
    ("auth.json", Guard::Settings),
    ("models.json", Guard::Settings),
    ("settings.json", Guard::Settings),
    ("models-store.json", Guard::Settings),
    ("mcp.json", Guard::Settings),
    ("mcp-auth.json", Guard::Settings),
    ("extensions", Guard::Empty),
    ("skills", Guard::Empty),
    ("prompts", Guard::Empty),
    ("themes", Guard::Empty),
    ("tools", Guard::Empty),
    ("bin", Guard::Empty),
    ("git", Guard::Empty),
    ("npm", Guard::Empty),
];

/// The record's `pi_config`: what of pi's config dir the agent could not write while pi ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PiConfigRecord {
    /// Names of [`GUARDED`] that were root's and read-only to the agent: a guard, a pinned
    /// entry or the supervisor's own `models.json`.
    pub guarded: Vec<String>,
}

/// Makes the config dir of a pi `manifest` root's with the sticky bit and puts a root-owned,
/// read-only guard in place of each name of [`GUARDED`] the manifest does not pin (see the
/// module docs). Returns what the record names; `None` for another runtime, a supervisor that
/// is not root or an agent that is. Errors name the path.
pub fn protect(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
) -> Result<Option<PiConfigRecord>, String> {
    if manifest.runtime != Runtime::Pi || !root_guard::applies(manifest) {
        return Ok(None);
    }
    let supervisors_models = manifest
        .model
        .as_ref()
        .is_some_and(|m| m.pi_provider.is_some());
    // The supervisor writes its own models.json after this (root's, read-only).
    let guarded = root_guard::guard_config_dir(manifest, Path::new(&dirs.config), GUARDED, |n| {
        supervisors_models && n == crate::pi_model_route::FILE
    })?;
    Ok(Some(PiConfigRecord { guarded }))
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
    fn attack_runtime_tamper__pis_credentials_and_catalogs_are_roots_in_a_sticky_config_dir() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let m = manifest("pi", &tmp.path().join("work"));
        let dirs = m.runtime_dirs();
        let config = Path::new(&dirs.config);
        std::fs::create_dir(config).unwrap();
        std::os::unix::fs::chown(config, Some(65534), Some(65534)).unwrap();
        assert!(guards_present(config).is_empty());
        let record = protect(&m, &dirs).unwrap().unwrap();
        assert_eq!(record.guarded.len(), GUARDED.len());
        let meta = std::fs::metadata(config).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 65534));
        assert_eq!(meta.permissions().mode() & 0o7777, 0o1770);
        let auth = std::fs::symlink_metadata(config.join("auth.json")).unwrap();
        assert!(auth.is_file());
        assert_eq!((auth.uid(), auth.permissions().mode() & 0o777), (0, 0o444));
        assert_eq!(
            std::fs::read(config.join("auth.json")).unwrap(),
            root_guard::SETTINGS
        );
        let ext = std::fs::symlink_metadata(config.join("extensions")).unwrap();
        assert!(ext.is_dir());
        assert_eq!((ext.uid(), ext.permissions().mode() & 0o7777), (0, 0o555));
        assert_eq!(guards_present(config).len(), GUARDED.len());
        // The next iteration, the guards kept by the reset: nothing to do.
        protect(&m, &dirs).unwrap();
    }

    #[test]
    fn the_supervisors_models_json_is_left_to_it() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let mut v = serde_json::to_value(manifest("pi", &tmp.path().join("work"))).unwrap();
        v["network"] = serde_json::json!({"mode": "allow", "allow": [{"host": "api.anthropic.com", "port": 443}]});
        v["model"] = serde_json::json!({
            "pi_provider": "anthropic",
            "upstream": {"host": "api.anthropic.com", "port": 443},
            "credentials": ["ANTHROPIC_API_KEY"],
        });
        let m = Manifest::from_json(v.to_string().as_bytes()).unwrap();
        let dirs = m.runtime_dirs();
        let config = Path::new(&dirs.config);
        std::fs::create_dir(config).unwrap();
        std::fs::write(config.join("models.json"), "{\"providers\":{}}\n").unwrap();
        let record = protect(&m, &dirs).unwrap().unwrap();
        assert!(record.guarded.contains(&"models.json".to_string()));
        assert_eq!(
            std::fs::read_to_string(config.join("models.json")).unwrap(),
            "{\"providers\":{}}\n"
        );
    }

    #[test]
    fn other_runtimes_keep_their_config_dir_as_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        let m = manifest("claude", &tmp.path().join("work"));
        let dirs = m.runtime_dirs();
        std::fs::create_dir(&dirs.config).unwrap();
        assert_eq!(protect(&m, &dirs).unwrap(), None);
    }
}
