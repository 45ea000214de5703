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
//!
//! Verified plugins ([`deliver_plugins`]): Codex 0.169.1 loads a plugin only when the user
//! config (`CODEX_HOME/config.toml`; not a `-c` override, not a project's) enables it as
//! `[plugins."<name>@<marketplace>"]`, from `CODEX_HOME/plugins/cache/<marketplace>/<name>/
//! <version>/`, a real directory (a symlinked version directory, or symlinked entries in it,
//! load nothing). So for a manifest with trees of kind `codex-plugin`, after verification and
//! before each launch, the supervisor writes both anew: `config.toml` naming exactly those
//! plugins, and a copy of each verified tree at `plugins/cache/pitcrew/<name>/local/`, every
//! file read once without following a link and checked against the verified listing's SHA-256
//! as it is copied. Root's when the supervisor is root: in the sticky config dir the agent can
//! neither change nor replace them, nor add a plugin (the next reset removes what it added
//! anywhere else there).

use crate::manifest::{Manifest, Runtime, RuntimeDirPaths, TreeKind, TreePin};
use crate::root_guard::{self, Guard};
use crate::sandbox::nofollow;
use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The names Codex 0.169.1 reads from `CODEX_HOME` that it does not write in a run under
/// pitcrew, each with the guard put in its place when the manifest pins nothing there: its
/// hooks (`{}`: none), its configuration, `.env` and instructions (empty files: none), the
/// rules, prompts and memories it loads from directories there, the `tmp` it would put on its
/// tools' and hooks' `PATH`, and `node_modules` (empty directories).
pub const GUARDED: &[(&str, Guard)] = &[
    ("hooks.json", Guard::Settings),
    ("config.toml", Guard::EmptyFile),
    ("AGENTS.md", Guard::EmptyFile),
    ("AGENTS.override.md", Guard::EmptyFile),
    ("rules", Guard::Empty),
    ("prompts", Guard::Empty),
    ("memories", Guard::Empty),
    // Codex makes `tmp/arg0-linux/…` at start and puts it first on the PATH its hooks and MCP
    // servers inherit: the agent's to write there, a `grep` of its own would run in a
    // verified hook. Without it Codex goes on, its PATH left as it was.
    ("tmp", Guard::Empty),
    // Read at start for variables; and where a Node hook's bare `require` would look last.
    (".env", Guard::EmptyFile),
    ("node_modules", Guard::Empty),
];

/// The record's `codex_config`: what of Codex's config dir the agent could not write while
/// Codex ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodexConfigRecord {
    /// Names of [`GUARDED`] that were root's and read-only to the agent: a guard or a pinned
    /// entry.
    pub guarded: Vec<String>,
    /// The verified plugins Codex was given ([`deliver_plugins`]): each `<name>@pitcrew`, as
    /// the `config.toml` the supervisor wrote enables it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<String>,
    /// Every file of the image's `/etc/codex` ([`MANAGED_DIR`]), which Codex reads whatever
    /// its flags, with its SHA-256 ([`crate::claude_managed::list`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed: Vec<crate::claude_managed::ManagedEntry>,
}

/// Codex's system configuration directory, the image's.
pub const MANAGED_DIR: &str = "/etc/codex";

/// The marketplace name under which the verified plugins sit in Codex's plugin cache.
pub const MARKETPLACE: &str = "pitcrew";

/// The version directory of each verified plugin (the one Codex prefers when present).
const VERSION: &str = "local";

/// Codex's plugin cache below `CODEX_HOME` (its first component, `plugins`, is the
/// supervisor's when plugins are delivered).
const PLUGINS_DIR: &str = "plugins";

/// The user config Codex reads when plugins are delivered (the supervisor's).
const CONFIG_TOML: &str = "config.toml";

/// The verified Codex plugin trees of `manifest` (none for another runtime).
fn plugin_trees(manifest: &Manifest) -> Vec<&TreePin> {
    if manifest.runtime != Runtime::Codex {
        return Vec::new();
    }
    manifest
        .trees
        .iter()
        .filter(|t| t.kind == TreeKind::CodexPlugin)
        .collect()
}

/// The names below the config dir the supervisor writes for verified plugins, which the config
/// reset keeps ([`deliver_plugins`] writes them anew before each launch): none without them.
pub fn plugins_kept(manifest: &Manifest) -> Vec<PathBuf> {
    if plugin_trees(manifest).is_empty() {
        return Vec::new();
    }
    vec![PathBuf::from(CONFIG_TOML), PathBuf::from(PLUGINS_DIR)]
}

/// The `config.toml` enabling exactly `names` from the [`MARKETPLACE`].
fn config_toml(names: &[&str]) -> String {
    let mut out = String::from("# Written by pitcrew: the verified plugins, nothing else.\n");
    for name in names {
        out.push_str(&format!(
            "[plugins.\"{name}@{MARKETPLACE}\"]\nenabled = true\n"
        ));
    }
    out
}

/// Gives Codex the verified plugin trees of `manifest` (see the module docs): removes
/// `config.toml` and `plugins` from the config dir, writes `config.toml` enabling each tree's
/// `<name>@pitcrew` and copies each tree to `plugins/cache/pitcrew/<name>/local/`, checking every
/// file against the verified listing. Returns the enabled names (none for another runtime or
/// without plugin trees). Errors name the path and what is wrong; a tree that changed since it
/// was verified is one.
pub fn deliver_plugins(manifest: &Manifest, dirs: &RuntimeDirPaths) -> Result<Vec<String>, String> {
    let trees = plugin_trees(manifest);
    if trees.is_empty() {
        return Ok(Vec::new());
    }
    let config = Path::new(&dirs.config);
    // What the supervisor writes there must not be a file the manifest pins (the harness
    // refuses a config adapter at config.toml for Codex; a manifest made otherwise is refused
    // here rather than have a verified file removed).
    if let Some(f) = manifest.files.iter().find(|f| {
        let p = Path::new(&f.path);
        p == config.join(CONFIG_TOML) || p.starts_with(config.join(PLUGINS_DIR))
    }) {
        return Err(format!(
            "{} is pinned, but with verified plugins the supervisor writes {CONFIG_TOML} and \
             {PLUGINS_DIR}/ in Codex's config dir itself",
            f.path
        ));
    }
    let dir = nofollow::open_dir(config)?;
    for name in [CONFIG_TOML, PLUGINS_DIR] {
        let label = config.join(name).display().to_string();
        crate::bounded_tree::remove_at(dir.as_fd(), name.as_ref(), &label)
            .map_err(|e| format!("{label}: {e}"))?;
    }
    let label = |rel: &str| config.join(rel).display().to_string();
    let plugins = make_dir(dir.as_fd(), PLUGINS_DIR, &label(PLUGINS_DIR))?;
    let cache = make_dir(plugins.as_fd(), "cache", &label("plugins/cache"))?;
    let market = make_dir(cache.as_fd(), MARKETPLACE, &label("plugins/cache/pitcrew"))?;
    // Each plugin's `PLUGIN_DATA` (`plugins/data/<name>-pitcrew`): the agent's, empty before
    // each launch (a hook keeping state there must be able to write it; otherwise it fails,
    // and Codex takes a failed hook for no objection).
    let data = make_dir(plugins.as_fd(), "data", &label("plugins/data"))?;
    let mut names = Vec::new();
    for tree in &trees {
        if !crate::plugin_format::is_codex_plugin_name(&tree.name) {
            return Err(format!(
                "plugin {:?}: not a name Codex takes for a plugin (ASCII letters, digits, `-`, `_`)",
                tree.name
            ));
        }
        let at = format!("plugins/cache/{MARKETPLACE}/{}", tree.name);
        let base = make_dir(market.as_fd(), &tree.name, &label(&at))?;
        let version = make_dir(base.as_fd(), VERSION, &label(&format!("{at}/{VERSION}")))?;
        copy_tree(tree, version.as_fd(), &label(&format!("{at}/{VERSION}")))
            .map_err(|why| format!("plugin {:?} ({}): {why}", tree.name, tree.path))?;
        let own = format!("{}-{MARKETPLACE}", tree.name);
        let at = label(&format!("plugins/data/{own}"));
        let fd = make_dir(data.as_fd(), &own, &at)?;
        if root_guard::applies(manifest) {
            let (uid, gid) = (manifest.user.uid, manifest.user.gid);
            rustix::fs::fchown(
                &fd,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            )
            .map_err(|e| format!("{at}: chown: {e}"))?;
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))
                .map_err(|e| format!("{at}: chmod: {e}"))?;
        }
        names.push(tree.name.as_str());
    }
    write_file(
        dir.as_fd(),
        CONFIG_TOML,
        config_toml(&names).as_bytes(),
        0o444,
    )
    .map_err(|e| format!("{}: {e}", label(CONFIG_TOML)))?;
    Ok(names.iter().map(|n| format!("{n}@{MARKETPLACE}")).collect())
}

/// Copies the verified tree `tree` into the empty directory `to` (at `label`): its directories
/// (`0755`), then each file of the verified listing, opened below the tree's root without
/// following a link, read once and written only when its SHA-256 is the listing's (`0755` when
/// the source has an execute bit, else `0644`).
fn copy_tree(tree: &TreePin, to: BorrowedFd<'_>, label: &str) -> Result<(), String> {
    use sha2::Digest as _;
    let listing = crate::claude_skills::verified_listing(tree)?;
    let root = nofollow::open_dir(Path::new(&tree.path))?;
    for d in &listing.dirs {
        let (parent, name) = split(d);
        let parent = open_below(to, parent, label)?;
        make_dir(parent.as_fd(), name, &format!("{label}/{d}"))?;
    }
    for f in &listing.files {
        let (parent, name) = split(&f.path);
        let src_dir = open_below(root.as_fd(), parent, &tree.path)?;
        let src = rustix::fs::openat(
            &src_dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("{}/{}: {e}", tree.path, f.path))?;
        let st = rustix::fs::fstat(&src).map_err(|e| format!("{}/{}: {e}", tree.path, f.path))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(format!("{}/{} is not a regular file", tree.path, f.path));
        }
        let mut bytes = Vec::new();
        std::fs::File::from(src)
            .take(f.size + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{}/{}: {e}", tree.path, f.path))?;
        if hex::encode(sha2::Sha256::digest(&bytes)) != f.sha256 {
            return Err(format!(
                "{}/{} changed since it was verified",
                tree.path, f.path
            ));
        }
        let mode = if st.st_mode & 0o111 != 0 {
            0o755
        } else {
            0o644
        };
        let dst_dir = open_below(to, parent, label)?;
        write_file(dst_dir.as_fd(), name, &bytes, mode)
            .map_err(|e| format!("{label}/{}: {e}", f.path))?;
    }
    Ok(())
}

/// `a/b/c` as (`a/b`, `c`); (`""`, `c`) for a bare name.
fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// The directory `rel` (`/`-separated, may be empty) below `dir`, each component opened
/// without following a link.
fn open_below(dir: BorrowedFd<'_>, rel: &str, label: &str) -> Result<OwnedFd, String> {
    let mut fd = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{label}: {e}"))?;
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        fd = root_guard::open_dir_at(fd.as_fd(), part, Path::new(&format!("{label}/{rel}")))?;
    }
    Ok(fd)
}

/// Makes the directory `name` in `dir` (`0755`, whatever the umask) and opens it without
/// following a link.
fn make_dir(dir: BorrowedFd<'_>, name: &str, label: &str) -> Result<OwnedFd, String> {
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755))
        .map_err(|e| format!("{label}: mkdir: {e}"))?;
    let fd = root_guard::open_dir_at(dir, name, Path::new(label))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o755))
        .map_err(|e| format!("{label}: chmod: {e}"))?;
    Ok(fd)
}

/// Writes the new file `name` in `dir` with `mode`, whatever the umask.
fn write_file(dir: BorrowedFd<'_>, name: &str, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    rustix::fs::fchmod(&file, Mode::from_raw_mode(mode))?;
    Ok(())
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
    // With verified plugins, config.toml is the supervisor's (written after verification).
    let plugins = !plugin_trees(manifest).is_empty();
    let guarded = root_guard::guard_config_dir(manifest, Path::new(&dirs.config), GUARDED, |n| {
        plugins && n == CONFIG_TOML
    })?;
    Ok(Some(CodexConfigRecord {
        guarded,
        ..CodexConfigRecord::default()
    }))
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

    /// The verified plugin tree is copied into Codex's plugin cache with the `config.toml`
    /// enabling it, anything of an earlier launch there replaced; a file that changed since
    /// verification stops it.
    #[test]
    fn a_verified_plugin_is_copied_and_enabled_and_a_changed_one_refused() {
        use crate::exit_code::PinRole;
        use crate::manifest::{FileListing, TreeKind, TreePin};
        use crate::tree_hash::{scan_tree, TreeFormat};
        let tmp = tempfile::tempdir().unwrap();
        let tree = tmp.path().join("plugins/cx");
        std::fs::create_dir_all(tree.join(".codex-plugin")).unwrap();
        std::fs::create_dir_all(tree.join("hooks")).unwrap();
        std::fs::write(tree.join(".codex-plugin/plugin.json"), r#"{"name": "cx"}"#).unwrap();
        std::fs::write(tree.join("hooks/run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            tree.join("hooks/run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let listing = scan_tree(&tree).unwrap();
        let mut m = manifest("codex", &tmp.path().join("work"));
        m.trees.push(TreePin {
            name: "cx".into(),
            path: tree.display().to_string(),
            role: PinRole::Plugin,
            kind: TreeKind::CodexPlugin,
            format: TreeFormat::PiTreeV1,
            sha256: listing.digest(TreeFormat::PiTreeV1),
            files: FileListing::from_records(&listing.files).unwrap(),
            dirs: listing.dirs.clone(),
            stored: None,
            entries: Vec::new(),
            env: Default::default(),
            pi_args: Vec::new(),
        });
        let dirs = m.runtime_dirs();
        let config = Path::new(&dirs.config);
        std::fs::create_dir_all(config.join("plugins/cache/pitcrew/cx/0-planted")).unwrap();
        assert_eq!(plugins_kept(&m).len(), 2);
        assert_eq!(deliver_plugins(&m, &dirs).unwrap(), ["cx@pitcrew"]);
        let copy = config.join("plugins/cache/pitcrew/cx/local");
        assert_eq!(
            std::fs::read(copy.join(".codex-plugin/plugin.json")).unwrap(),
            br#"{"name": "cx"}"#
        );
        let mode = std::fs::metadata(copy.join("hooks/run.sh")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(!config.join("plugins/cache/pitcrew/cx/0-planted").exists());
        let toml = std::fs::read_to_string(config.join("config.toml")).unwrap();
        assert!(
            toml.contains("[plugins.\"cx@pitcrew\"]\nenabled = true\n"),
            "{toml}"
        );
        assert_eq!(
            std::fs::metadata(config.join("config.toml"))
                .unwrap()
                .mode()
                & 0o777,
            0o444
        );
        // Written anew over the last launch's; a changed file stops it.
        deliver_plugins(&m, &dirs).unwrap();
        std::fs::write(tree.join("hooks/run.sh"), "#!/bin/sh\nevil\n").unwrap();
        let err = deliver_plugins(&m, &dirs).unwrap_err();
        assert!(err.contains("changed since it was verified"), "{err}");
        // A manifest pinning config.toml is refused.
        let mut pinned = m.clone();
        pinned.files.push(
            serde_json::from_value(serde_json::json!({
                "path": format!("{}/config.toml", dirs.config), "role": "config",
                "sha256": "b".repeat(64), "use": "verify",
            }))
            .unwrap(),
        );
        let err = deliver_plugins(&pinned, &dirs).unwrap_err();
        assert!(err.contains("config.toml is pinned"), "{err}");
        // Other runtimes get nothing.
        assert!(plugins_kept(&manifest("pi", tmp.path())).is_empty());
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
