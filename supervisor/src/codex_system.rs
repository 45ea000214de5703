//! The Codex CLI's system configuration, `/etc/codex/{config,managed_config,requirements}.toml`
//! and the `hooks.json` beside them, which Codex 0.169.1 reads at every start whatever its flags (`--ignore-user-config` skips
//! `$CODEX_HOME/config.toml` only). The image's own files there are the operator's; a file the
//! agent could have written would be the agent's configuration for the next iteration (a model
//! provider, MCP servers, hooks, a sandbox mode), unverified. So before every launch of Codex,
//! if the agent's uid could create or change any of them (it owns `/etc`, `/etc/codex` or one of
//! the files, or their group or other bits let it write), nothing is launched.

use crate::manifest::AgentUser;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// The files Codex reads below its system directory.
pub const SYSTEM_FILES: &[&str] = &[
    "config.toml",
    "managed_config.toml",
    "requirements.toml",
    "hooks.json",
];

/// Whether `user` may write what `meta` describes (an entry of a directory it describes, for a
/// directory): it owns it (and so may change its mode), or its group or other bits allow it.
fn agent_may_write(meta: &std::fs::Metadata, user: &AgentUser) -> bool {
    if meta.uid() == user.uid {
        return true;
    }
    if meta.gid() == user.gid || user.groups.contains(&meta.gid()) {
        return meta.mode() & 0o020 != 0;
    }
    meta.mode() & 0o002 != 0
}

/// Why Codex may not be launched as `user` with the system directory `etc`/`codex` (`/etc` in
/// a sandbox): the first of `etc`, `etc/codex` and its [`SYSTEM_FILES`] that the agent could
/// write, looked at both as the entry itself and as what it leads to. `None` when none is, or
/// the agent runs as root (then nothing below `/` is out of its reach, and this check says
/// nothing).
pub fn system_config_problem(user: &AgentUser, etc: &Path) -> Option<String> {
    system_dir_problem(user, etc, "codex", "Codex", SYSTEM_FILES)
}

/// The managed configuration OpenCode 1.18.33 reads at every start whatever its switches:
/// `/etc/opencode/opencode.json(c)`, merged over every other layer.
pub const OPENCODE_SYSTEM_FILES: &[&str] = &["opencode.json", "opencode.jsonc"];

/// [`system_config_problem`] for OpenCode: `etc`/`opencode` and its [`OPENCODE_SYSTEM_FILES`].
pub fn opencode_system_problem(user: &AgentUser, etc: &Path) -> Option<String> {
    system_dir_problem(user, etc, "opencode", "OpenCode", OPENCODE_SYSTEM_FILES)
}

/// The first of `etc`, `etc/<name>` and its `files` the agent could write (see
/// [`system_config_problem`]), as the refusal's text naming `runtime`.
fn system_dir_problem(
    user: &AgentUser,
    etc: &Path,
    name: &str,
    runtime: &str,
    files: &[&str],
) -> Option<String> {
    if user.uid == 0 {
        return None;
    }
    let dir = etc.join(name);
    let mut paths: Vec<PathBuf> = vec![etc.to_path_buf(), dir.clone()];
    paths.extend(files.iter().map(|f| dir.join(f)));
    paths.into_iter().find_map(|path| {
        let writable = [std::fs::symlink_metadata(&path), std::fs::metadata(&path)]
            .into_iter()
            .flatten()
            .any(|meta| agent_may_write(&meta, user));
        writable.then(|| {
            format!(
                "{name}: {} is writable by the agent's uid {}, and {runtime} reads {}/{{{}}} at \
                 every start: what an iteration wrote there would configure the next one \
                 unverified; make it root's and not group- or world-writable",
                path.display(),
                user.uid,
                dir.display(),
                files.join(",")
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn user(uid: u32) -> AgentUser {
        AgentUser {
            uid,
            gid: 65534,
            groups: Vec::new(),
        }
    }

    #[test]
    fn an_opencode_managed_config_the_agent_could_write_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path();
        std::fs::create_dir(etc.join("opencode")).unwrap();
        std::fs::set_permissions(etc, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(etc.join("opencode"), std::fs::Permissions::from_mode(0o777))
            .unwrap();
        let why = opencode_system_problem(&user(4242), etc).unwrap_or_default();
        assert!(
            why.starts_with("opencode: ") && why.contains("OpenCode reads"),
            "{why}"
        );
        assert_eq!(opencode_system_problem(&user(0), etc), None);
    }

    #[test]
    fn a_system_config_the_agent_could_write_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path();
        std::fs::set_permissions(etc, std::fs::Permissions::from_mode(0o755)).unwrap();
        let me = std::fs::metadata(etc).unwrap().uid();
        let other = if me == 0 { 65534 } else { me + 1 };
        // Root's directory, no codex in it: nothing to say.
        assert_eq!(system_config_problem(&user(other), etc), None);
        // The image's own root-owned file is the operator's.
        std::fs::create_dir(etc.join("codex")).unwrap();
        std::fs::write(etc.join("codex/config.toml"), "model = \"m\"\n").unwrap();
        std::fs::set_permissions(
            etc.join("codex/config.toml"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert_eq!(system_config_problem(&user(other), etc), None);
        // World-writable: named.
        std::fs::set_permissions(
            etc.join("codex/config.toml"),
            std::fs::Permissions::from_mode(0o666),
        )
        .unwrap();
        let why = system_config_problem(&user(other), etc).unwrap();
        assert!(why.contains("codex/config.toml is writable"), "{why}");
        std::fs::set_permissions(
            etc.join("codex/config.toml"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        // Owned by the agent: named (it could change the mode).
        let (owner, owned) = if me == 0 {
            std::os::unix::fs::chown(etc.join("codex"), Some(65534), None).unwrap();
            (65534, etc.join("codex"))
        } else {
            (me, etc.to_path_buf())
        };
        let why = system_config_problem(&user(owner), etc).unwrap();
        assert!(
            why.contains(&format!("{} is writable", owned.display())),
            "{why}"
        );
        // A root agent is outside the check.
        assert_eq!(system_config_problem(&user(0), etc), None);
    }
}
