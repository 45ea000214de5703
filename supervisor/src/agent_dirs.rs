//! The agent's directories (`workdir` and every `dirs.*` of the manifest), prepared before each
//! iteration once nothing of an earlier agent runs any more: present, directories, owned by the
//! agent, reached without following a symlink.

use crate::manifest::{Manifest, RuntimeDirPaths};
use crate::sandbox::nofollow::{self, Replaced};
use std::path::Path;

/// The agent's directories in the order they are prepared: `workdir`, then the runtime
/// directories ([`Manifest::runtime_dirs`], defaults included).
fn agent_dirs(manifest: &Manifest, runtime: &RuntimeDirPaths) -> Vec<String> {
    std::iter::once(manifest.workdir.as_str())
        .chain(runtime.agent_dirs())
        .map(String::from)
        .collect()
}

/// Ensures every agent directory of `manifest` exists as a directory owned by the agent:
/// missing ones are created 0700 (parents as root 0755), existing ones are chowned (the
/// directory itself, not its contents). No symlink is followed in any component.
///
/// Something other than a directory where one belongs (a symlink, a file) is what an earlier
/// agent left in its own space, so it is removed (`unlinkat`, not followed) and replaced by a
/// directory — but only when the entry lies in an agent directory; in any other place it is the
/// host's doing and the iteration is refused. Returns what was replaced.
pub fn prepare(manifest: &Manifest, runtime: &RuntimeDirPaths) -> Result<Vec<Replaced>, String> {
    // The defaults lie beside the workdir: beside `/work` they would be `/home`, `/tmp`, …,
    // directories of the system, never to be handed to the agent.
    if Path::new(&manifest.workdir)
        .parent()
        .is_none_or(|p| p == Path::new("/"))
    {
        for (name, dir) in [
            ("dirs.home", &manifest.dirs.home),
            ("dirs.tmp", &manifest.dirs.tmp),
            ("dirs.config", &manifest.dirs.config),
        ] {
            if dir.is_none() {
                return Err(format!(
                    "{name} must be set when the workdir lies directly below / (the default, \
                     beside the workdir, would be a directory of the system)"
                ));
            }
        }
    }
    let dirs = agent_dirs(manifest, runtime);
    let agent_writable = |parent: &Path| dirs.iter().any(|d| parent.starts_with(d));
    let uid = rustix::fs::Uid::from_raw_unchecked(manifest.user.uid);
    let gid = rustix::fs::Gid::from_raw_unchecked(manifest.user.gid);
    let mut replaced = Vec::new();
    for dir in &dirs {
        let (fd, mut r) = nofollow::ensure_dir(Path::new(dir), &agent_writable)?;
        replaced.append(&mut r);
        // `fchownat(fd, "", AT_EMPTY_PATH)`: the directory just walked to, not a path.
        rustix::fs::chownat(
            &fd,
            "",
            Some(uid),
            Some(gid),
            rustix::fs::AtFlags::EMPTY_PATH,
        )
        .map_err(|e| format!("{dir}: chown: {e}"))?;
    }
    Ok(replaced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workdir_comes_first_then_the_runtime_dirs() {
        let manifest = Manifest::from_json(
            serde_json::json!({
                "version": 1,
                "runtime": "command",
                "agent": {"binary": "/bin/true"},
                "workdir": "/sb/work",
                "dirs": {"sessions": "/home/agent/sessions", "home": "/home/agent"},
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(
            agent_dirs(&manifest, &manifest.runtime_dirs()),
            [
                "/sb/work",
                "/home/agent",
                "/sb/tmp",
                "/sb/config",
                "/home/agent/sessions"
            ]
        );
    }

    #[test]
    fn defaults_beside_a_workdir_below_root_are_refused() {
        let manifest = Manifest::from_json(
            serde_json::json!({
                "version": 1,
                "runtime": "pi",
                "agent": {"binary": "/bin/true"},
                "prompt": "p",
                "workdir": "/work",
                "dirs": {"home": "/h", "config": "/c"},
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let err = prepare(&manifest, &manifest.runtime_dirs()).unwrap_err();
        assert!(err.starts_with("dirs.tmp must be set"), "{err}");
    }
}
