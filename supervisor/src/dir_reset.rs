//! Between the reap and verification: the runtime's config directory (`dirs.config` or its
//! default, [`Manifest::runtime_dirs`]: pi's
//! `PI_CODING_AGENT_DIR`, Claude's `CLAUDE_CONFIG_DIR`) is brought back to what the host pinned.
//!
//! The agent may write in that directory while it runs (the runtimes keep state there), so
//! whatever it added would otherwise be loaded by the next iteration's runtime at startup
//! (`settings.json`, `models.json`, `skills/`, `.claude.json`, `agents/` …) without a digest the
//! host computed. Every entry that is not a pinned file (`files[]` below the directory), an
//! ancestor directory of one, or the sessions directory (`dirs.sessions`, whose *contents* are
//! removed) is removed, without following symlinks, at any depth, in a bounded number of
//! descriptors ([`crate::bounded_tree`]). Pinned files are left exactly as they are:
//! verification, which runs next, reports any that changed (exit 98 for a config).
//!
//! The same walk empties the agent's `HOME` and `TMPDIR` ([`reset_home_and_tmp`]: the runtimes
//! read user-level skills and settings from `HOME`) and the workspace's `output/`
//! ([`empty_output`]: each record holds what its own iteration wrote), keeping only what the
//! manifest names there.

use crate::bounded_tree::{self, TreeError};
use crate::manifest::{Manifest, RuntimeDirPaths};
use rustix::fs::{Dir, FileType};
use rustix::io::Errno;
use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};

/// Most removed paths named in the record (the count is always exact).
const NAMED: usize = 100;

/// What a reset removed from one directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResetReport {
    /// Removed entries, relative to the directory, at most [`NAMED`] of them.
    pub removed: Vec<String>,
    /// How many entries were removed (a removed directory counts once).
    pub count: u64,
}

/// The path of `path` below `dir`, when it is strictly below it.
fn below(dir: &Path, path: &Path) -> Option<PathBuf> {
    let rel = path.strip_prefix(dir).ok()?;
    let normal = rel.components().all(|c| matches!(c, Component::Normal(_)));
    (normal && !rel.as_os_str().is_empty()).then(|| rel.to_path_buf())
}

fn io_error(path: &Path, op: &'static str, err: impl Into<std::io::Error>) -> TreeError {
    TreeError::Io {
        path: path.display().to_string(),
        op,
        source: err.into(),
    }
}

/// Brings the config directory back to the pinned files (see the module docs). A missing config
/// directory, or one that is not a directory, is left alone (verification then reports the
/// pinned files it cannot find). Errors name the path.
///
/// Everything is done relative to directory descriptors, and what is removed is removed with
/// [`bounded_tree::remove_at`]: a tree of any depth the agent built goes in a bounded number of
/// descriptors and bounded memory, without following a symlink.
pub fn reset_config(manifest: &Manifest, dirs: &RuntimeDirPaths) -> Result<ResetReport, TreeError> {
    let config = Path::new(&dirs.config);
    let mut pinned: BTreeSet<PathBuf> = manifest
        .files
        .iter()
        .filter_map(|f| below(config, Path::new(&f.path)))
        .collect();
    // The supervisor's own read-only guards in Claude Code's config dir, put there before the
    // last launch: kept, so that no record names them as removed.
    match manifest.runtime {
        crate::manifest::Runtime::Claude => {
            pinned.extend(crate::claude_user_settings::guards_present(config))
        }
        crate::manifest::Runtime::Pi => pinned.extend(crate::pi_config::guards_present(config)),
        crate::manifest::Runtime::Codex => {
            pinned.extend(crate::codex_config::guards_present(config));
            // The verified plugins and the config.toml enabling them: written anew before
            // each launch, kept here so that no record names them as removed.
            pinned.extend(crate::codex_config::plugins_kept(manifest));
        }
        // The supervisor's links to the verified plugin modules (made anew before each
        // launch, in a config dir the agent cannot write).
        crate::manifest::Runtime::Opencode => {
            pinned.insert(PathBuf::from(crate::opencode_config::PLUGINS_DIR));
        }
        _ => {}
    }
    // pi's models.json of the supervisor's (a model route's pi_provider): written anew before
    // each launch, kept here so that no record names it as removed.
    pinned.extend(crate::pi_model_route::kept(manifest, config));
    let sessions = dirs
        .uses_sessions
        .then(|| below(config, Path::new(&dirs.sessions)))
        .flatten();
    reset_dir(config, &pinned, sessions.as_ref())
}

/// What [`reset_home_and_tmp`] removed from each directory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScratchReport {
    /// From `HOME`.
    pub home: ResetReport,
    /// From `TMPDIR`.
    pub tmp: ResetReport,
}

/// Empties the agent's `HOME` and `TMPDIR` ([`Manifest::runtime_dirs`]) before each
/// iteration: the runtimes read user-level configuration from `HOME` (pi's `~/.agents/skills`,
/// `~/.pi`; Claude Code's `~/.claude`, `~/.claude.json`), so what an earlier agent wrote there
/// would be loaded unverified. Kept: the paths of `dirs.home_keep` (relative to `HOME`, what
/// the harness says persists), the other of the two when it lies inside, and everything the
/// manifest or the supervisor (`own`: the records) names below either directory: the workdir,
/// the config and sessions directories, the verified trees and files, the output files, the
/// confinement's extra roots, the `.env` and an absolute agent binary. A directory that is `/`,
/// or is or lies inside one of those, is not emptied: the error names both.
pub fn reset_home_and_tmp(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    own: &[PathBuf],
) -> Result<ScratchReport, TreeError> {
    let mut named: Vec<PathBuf> = vec![
        PathBuf::from(&manifest.workdir),
        PathBuf::from(&dirs.config),
        PathBuf::from(&dirs.sessions),
    ];
    named.extend(manifest.trees.iter().map(|t| PathBuf::from(&t.path)));
    named.extend(manifest.files.iter().map(|f| PathBuf::from(&f.path)));
    named.extend(manifest.output.stdout.iter().map(PathBuf::from));
    named.extend(manifest.output.stderr.iter().map(PathBuf::from));
    named.extend(manifest.confinement.read_only.iter().map(PathBuf::from));
    named.extend(manifest.confinement.read_write.iter().map(PathBuf::from));
    named.extend(manifest.env.dotenv.iter().map(PathBuf::from));
    if manifest.agent.binary.starts_with('/') {
        named.push(PathBuf::from(&manifest.agent.binary));
    }
    named.extend(own.iter().cloned());
    let home = Path::new(&dirs.home);
    let tmp = Path::new(&dirs.tmp);
    let refused = |dir: &Path, why: String| TreeError::Io {
        path: dir.display().to_string(),
        op: "empty before the iteration",
        source: std::io::Error::other(why),
    };
    let mut report = ScratchReport::default();
    for (dir, extra, out) in [
        (home, manifest.dirs.home_keep.as_slice(), &mut report.home),
        (tmp, &[][..], &mut report.tmp),
    ] {
        if dir.parent().is_none() {
            return Err(refused(dir, "the root directory is never emptied".into()));
        }
        let other = if dir == home { tmp } else { home };
        let mut kept: BTreeSet<PathBuf> = extra.iter().map(PathBuf::from).collect();
        // The supervisor's guards of Node's global folders, put there before the last launch:
        // kept, so that no record names them as removed.
        if dir == home {
            kept.extend(crate::home_guard::guards_present(home));
            // OpenCode's guards below HOME: kept (their directories are emptied of the rest).
            if manifest.runtime == crate::manifest::Runtime::Opencode {
                kept.extend(crate::opencode_config::home_guards_present(home));
            }
        }
        kept.extend(below(dir, other));
        for path in &named {
            if dir.starts_with(path) {
                return Err(refused(
                    dir,
                    format!(
                        "it is, or lies inside, {} (which must be kept): give HOME and TMPDIR \
                         directories of their own (dirs.home, dirs.tmp)",
                        path.display()
                    ),
                ));
            }
            if let Some(rel) = below(dir, path) {
                kept.insert(rel);
            }
        }
        *out = reset_dir(dir, &kept, None)?;
    }
    Ok(report)
}

/// Empties the workspace's `output/` (what the record collects) before each iteration, unless
/// the manifest keeps it (`output.keep_output`): each iteration's record then holds what that
/// iteration wrote, not what an earlier one left. `output/` itself stays; one that is not a
/// directory is left alone (the record copy never follows it).
pub fn empty_output(manifest: &Manifest) -> Result<ResetReport, TreeError> {
    if manifest.output.keep_output {
        return Ok(ResetReport::default());
    }
    let output = Path::new(&manifest.workdir).join("output");
    reset_dir(&output, &BTreeSet::new(), None)
}

/// Removes everything below `dir` except the entries at the relative paths `kept` (with
/// their ancestor directories) and `emptied`, a directory kept but emptied. A missing `dir`,
/// or one that is not a directory, is left alone.
fn reset_dir(
    top: &Path,
    kept: &BTreeSet<PathBuf>,
    emptied: Option<&PathBuf>,
) -> Result<ResetReport, TreeError> {
    let mut report = ResetReport::default();
    // The last component is not followed; a directory that is missing, a link or a file is
    // left alone (verification reports a config directory's pinned files). Any other failure
    // stops the iteration: a directory skipped would keep what the agent left in it.
    let root = match open_top(top) {
        Ok(fd) => fd,
        Err(e)
            if matches!(
                bounded_tree::errno_of(&e),
                Errno::NOENT | Errno::LOOP | Errno::NOTDIR
            ) =>
        {
            return Ok(report)
        }
        Err(e) => return Err(io_error(top, "open", e)),
    };
    // Directories kept because something kept lies below them.
    let mut ancestors: BTreeSet<PathBuf> = BTreeSet::new();
    for kept in kept.iter().chain(emptied) {
        for a in kept.ancestors().skip(1) {
            if !a.as_os_str().is_empty() {
                ancestors.insert(a.to_path_buf());
            }
        }
    }
    // Kept directories still to read: their path below the directory. Only the manifest's
    // paths are ever kept, so this holds at most as many as the manifest names.
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir_path = top.join(&rel);
        let dir = open_below(root.as_fd(), &rel).map_err(|e| io_error(&dir_path, "open", e))?;
        let mut entries = listing(&dir, &dir_path)?;
        while let Some(entry) = entries.read() {
            let entry = entry.map_err(|e| io_error(&dir_path, "read directory", e))?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes());
            if matches!(name.as_bytes(), b"." | b"..") {
                continue;
            }
            let rel = rel.join(name);
            if kept.contains(&rel) {
                continue;
            }
            // Never followed: a link to a directory is a link.
            let is_dir = kind(dir.as_fd(), name, &entry) == FileType::Directory;
            if is_dir && emptied == Some(&rel) {
                // Kept (a writable root: the sessions directory), emptied.
                let path = top.join(&rel);
                let emptied_dir = bounded_tree::open_dir_at_restoring(dir.as_fd(), name)
                    .map_err(|e| io_error(&path, "open", e))?;
                let children = bounded_tree::entry_names(emptied_dir.as_fd())
                    .map_err(|e| io_error(&path, "read directory", e))?;
                for child in &children {
                    let shown = rel.join(child);
                    remove(emptied_dir.as_fd(), &path, child, &shown, &mut report)?;
                }
                continue;
            }
            if is_dir && ancestors.contains(&rel) {
                stack.push(rel);
                continue;
            }
            remove(dir.as_fd(), &dir_path, name, &rel, &mut report)?;
        }
    }
    Ok(report)
}

/// Opens the directory `top` (its last component not followed); one its owner (the agent) made
/// unreadable gets its owner's rights back first, through its parent.
fn open_top(top: &Path) -> std::io::Result<OwnedFd> {
    match bounded_tree::open_dir(top) {
        Err(e) if bounded_tree::errno_of(&e) == Errno::ACCESS => {
            let (Some(parent), Some(name)) = (top.parent(), top.file_name()) else {
                return Err(e);
            };
            let parent = rustix::fs::open(
                parent,
                rustix::fs::OFlags::RDONLY
                    | rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )?;
            bounded_tree::open_dir_at_restoring(parent.as_fd(), name)
        }
        other => other,
    }
}

/// Opens the kept directory `rel` below the directory being reset, one component at a time, never
/// through a symlink.
fn open_below(root: BorrowedFd<'_>, rel: &Path) -> std::io::Result<OwnedFd> {
    let mut dir = bounded_tree::open_dir_at(root, OsStr::new("."))?;
    for name in rel.iter() {
        dir = bounded_tree::open_dir_at_restoring(dir.as_fd(), name)?;
    }
    Ok(dir)
}

/// A directory stream over `dir` (its own descriptor, so `dir` stays usable for `*at` calls).
fn listing(dir: &OwnedFd, path: &Path) -> Result<Dir, TreeError> {
    let fd = bounded_tree::open_dir_at(dir.as_fd(), OsStr::new("."))
        .map_err(|e| io_error(path, "open", e))?;
    Dir::new(fd).map_err(|e| io_error(path, "read directory", e))
}

/// The type of `entry` in `dir`, from the directory entry or `fstatat(AT_SYMLINK_NOFOLLOW)`.
fn kind(dir: BorrowedFd<'_>, name: &OsStr, entry: &rustix::fs::DirEntry) -> FileType {
    match entry.file_type() {
        FileType::Unknown => rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .map_or(FileType::Unknown, |st| FileType::from_raw_mode(st.st_mode)),
        known => known,
    }
}

/// Removes the entry `name` of `dir` (at `dir_path`) without following a symlink: a directory
/// with everything in it, at any depth. `shown` is its path below the directory being reset,
/// for the report.
fn remove(
    dir: BorrowedFd<'_>,
    dir_path: &Path,
    name: &OsStr,
    shown: &Path,
    report: &mut ResetReport,
) -> Result<(), TreeError> {
    let removed = bounded_tree::remove_at(dir, name, &dir_path.display().to_string())?;
    if removed == 0 {
        return Ok(());
    }
    report.count += 1;
    if report.removed.len() < NAMED {
        report.removed.push(shown.display().to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::fs;

    fn manifest(config: &Path, sessions: Option<&Path>, pinned: &[&Path]) -> Manifest {
        let files: Vec<_> = pinned
            .iter()
            .map(|p| json!({"path": p, "role": "config", "sha256": "0".repeat(64)}))
            .collect();
        let mut dirs = json!({"config": config});
        if let Some(s) = sessions {
            dirs["sessions"] = json!(s);
        }
        let v = json!({
            "version": 1,
            "runtime": "command",
            "agent": {"binary": "/bin/true"},
            "workdir": "/tmp",
            "dirs": dirs,
            "files": files,
        });
        Manifest::from_json(v.to_string().as_bytes()).expect("manifest")
    }

    #[test]
    fn keeps_pinned_files_and_the_sessions_dir_removes_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let c = tmp.path().join("config");
        fs::create_dir_all(c.join("hooks")).unwrap();
        fs::create_dir_all(c.join("sessions/agent-1")).unwrap();
        fs::create_dir_all(c.join("skills/evil")).unwrap();
        fs::write(c.join("settings.json"), "{}").unwrap();
        fs::write(c.join("hooks/guard.py"), "pass").unwrap();
        fs::write(c.join("hooks/extra.py"), "evil").unwrap();
        fs::write(c.join("models.json"), "evil").unwrap();
        fs::write(c.join("skills/evil/SKILL.md"), "evil").unwrap();
        fs::write(c.join("sessions/agent-1/s.jsonl"), "{}").unwrap();
        std::os::unix::fs::symlink("/etc", c.join("link")).unwrap();
        let m = manifest(
            &c,
            Some(&c.join("sessions")),
            &[&c.join("settings.json"), &c.join("hooks/guard.py")],
        );
        let report = reset_config(&m, &m.runtime_dirs()).unwrap();
        let mut removed = report.removed.clone();
        removed.sort();
        assert_eq!(
            removed,
            [
                "hooks/extra.py",
                "link",
                "models.json",
                "sessions/agent-1",
                "skills"
            ]
        );
        assert_eq!(report.count, 5);
        assert!(c.join("settings.json").is_file());
        assert!(c.join("hooks/guard.py").is_file());
        assert!(c.join("sessions").is_dir());
        assert_eq!(fs::read_dir(c.join("sessions")).unwrap().count(), 0);
        // The symlink went, not what it pointed at.
        assert!(Path::new("/etc/passwd").exists());
        // Nothing to do the second time.
        assert_eq!(
            reset_config(&m, &m.runtime_dirs()).unwrap(),
            ResetReport::default()
        );
    }

    fn scratch_manifest(base: &Path, home_keep: &[&str]) -> Manifest {
        let v = json!({
            "version": 1,
            "runtime": "pi",
            "prompt": "hi",
            "agent": {"binary": "/bin/true"},
            "workdir": base.join("home/work"),
            "dirs": {
                "home": base.join("home"),
                "tmp": base.join("tmp"),
                "config": base.join("home/.pi/agent"),
                "home_keep": home_keep,
            },
            "trees": [{
                "name": "skill:x", "path": base.join("home/skills/x"), "role": "skill",
                "kind": "data", "format": "pi-tree-v1", "sha256": "0".repeat(64),
            }],
        });
        Manifest::from_json(v.to_string().as_bytes()).expect("manifest")
    }

    #[test]
    fn home_and_tmp_are_emptied_but_what_the_manifest_names_and_home_keep_stay() {
        let tmp = tempfile::tempdir().unwrap();
        let b = tmp.path();
        for dir in [
            "home/.agents/skills/planted",
            "home/.claude",
            "home/.pi/agent/sessions",
            "home/work/src",
            "home/skills/x",
            "home/.cache/keep",
            "home/.cache/drop",
            "tmp/jiti",
            "records",
        ] {
            fs::create_dir_all(b.join(dir)).unwrap();
        }
        fs::write(b.join("home/.agents/skills/planted/SKILL.md"), "x").unwrap();
        fs::write(b.join("home/.claude.json"), "{}").unwrap();
        fs::write(b.join("home/.pi/agent/settings.json"), "{}").unwrap();
        fs::write(b.join("home/work/src/main.rs"), "fn main() {}").unwrap();
        fs::write(b.join("home/skills/x/SKILL.md"), "x").unwrap();
        fs::write(b.join("home/.cache/keep/state"), "kept").unwrap();
        fs::write(b.join("tmp/jiti/cached.mjs"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", b.join("home/.bashrc")).unwrap();
        let m = scratch_manifest(b, &[".cache/keep"]);
        let report = reset_home_and_tmp(&m, &m.runtime_dirs(), &[b.join("records")]).unwrap();
        let mut removed = report.home.removed.clone();
        removed.sort();
        assert_eq!(
            removed,
            [
                ".agents",
                ".bashrc",
                ".cache/drop",
                ".claude",
                ".claude.json"
            ]
        );
        assert_eq!(report.tmp.removed, ["jiti"]);
        for kept in [
            "home/.pi/agent/settings.json",
            "home/work/src/main.rs",
            "home/skills/x/SKILL.md",
            "home/.cache/keep/state",
        ] {
            assert!(b.join(kept).is_file(), "{kept}");
        }
        assert!(b.join("records").is_dir());
        assert_eq!(
            reset_home_and_tmp(&m, &m.runtime_dirs(), &[]).unwrap(),
            ScratchReport::default()
        );

        // A HOME that is the workdir, or inside a verified tree, is never emptied.
        let mut same = scratch_manifest(b, &[]);
        same.dirs.home = Some(same.workdir.clone());
        let err = reset_home_and_tmp(&same, &same.runtime_dirs(), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("home/work"), "{err}");
        assert!(b.join("home/work/src/main.rs").is_file());
        let mut records = scratch_manifest(b, &[]);
        records.dirs.tmp = Some(b.join("records/tmp").display().to_string());
        assert!(
            reset_home_and_tmp(&records, &records.runtime_dirs(), &[b.join("records")]).is_err()
        );
    }

    #[test]
    fn nested_scratch_dirs_and_the_confinements_roots_are_kept_the_root_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let b = tmp.path();
        for dir in ["home/tmp/old", "home/shared/data", "home/leftover"] {
            fs::create_dir_all(b.join(dir)).unwrap();
        }
        let mut m = scratch_manifest(b, &[]);
        // TMPDIR inside HOME, and a writable root the harness gave the agent.
        m.dirs.tmp = Some(b.join("home/tmp").display().to_string());
        m.confinement.read_write = vec![b.join("home/shared").display().to_string()];
        let report = reset_home_and_tmp(&m, &m.runtime_dirs(), &[]).unwrap();
        assert_eq!(report.home.removed, ["leftover"]);
        assert_eq!(report.tmp.removed, ["old"]);
        assert!(b.join("home/tmp").is_dir() && b.join("home/shared/data").is_dir());
        m.dirs.home = Some("/".into());
        let err = reset_home_and_tmp(&m, &m.runtime_dirs(), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("root directory"), "{err}");
    }

    #[test]
    fn output_is_emptied_unless_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let b = tmp.path();
        fs::create_dir_all(b.join("home/work/output/sub")).unwrap();
        fs::write(b.join("home/work/output/old.txt"), "x").unwrap();
        fs::write(b.join("home/work/output/sub/deep.txt"), "x").unwrap();
        let mut m = scratch_manifest(b, &[]);
        m.output.keep_output = true;
        assert_eq!(empty_output(&m).unwrap(), ResetReport::default());
        m.output.keep_output = false;
        let mut removed = empty_output(&m).unwrap().removed;
        removed.sort();
        assert_eq!(removed, ["old.txt", "sub"]);
        assert!(b.join("home/work/output").is_dir());
        // No output/, or a link in its place: nothing is followed or removed.
        fs::remove_dir(b.join("home/work/output")).unwrap();
        assert_eq!(empty_output(&m).unwrap(), ResetReport::default());
        fs::create_dir_all(b.join("outside")).unwrap();
        fs::write(b.join("outside/keep.txt"), "x").unwrap();
        std::os::unix::fs::symlink(b.join("outside"), b.join("home/work/output")).unwrap();
        assert_eq!(empty_output(&m).unwrap(), ResetReport::default());
        assert!(b.join("outside/keep.txt").is_file());
    }

    #[test]
    fn a_pinned_path_replaced_by_a_directory_is_left_for_verification() {
        let tmp = tempfile::tempdir().unwrap();
        let c = tmp.path().join("config");
        fs::create_dir_all(c.join("settings.json")).unwrap();
        let m = manifest(&c, None, &[&c.join("settings.json")]);
        assert_eq!(reset_config(&m, &m.runtime_dirs()).unwrap().count, 0);
        assert!(c.join("settings.json").is_dir());
        // No config dir, or none in the manifest: nothing happens.
        let m = manifest(&tmp.path().join("absent"), None, &[]);
        assert_eq!(reset_config(&m, &m.runtime_dirs()).unwrap().count, 0);
    }

    /// A chain of `depth` directories named `d` below `top`, built with relative steps (its
    /// full path is far over `PATH_MAX`).
    fn chain(top: &Path, depth: usize) {
        fs::create_dir_all(top).unwrap();
        let mut dir = bounded_tree::open_dir(top).unwrap();
        for _ in 0..depth {
            rustix::fs::mkdirat(&dir, "d", rustix::fs::Mode::from_raw_mode(0o755)).unwrap();
            dir = bounded_tree::open_dir_at(dir.as_fd(), OsStr::new("d")).unwrap();
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn deep_trees_in_the_config_and_sessions_dirs_go_with_a_few_descriptors() {
        let tmp = tempfile::tempdir().unwrap();
        let c = tmp.path().join("config");
        fs::create_dir_all(c.join("sessions")).unwrap();
        fs::write(c.join("settings.json"), "{}").unwrap();
        chain(&c.join("deep"), 30_000);
        chain(&c.join("sessions/deep"), 1_500);
        let m = manifest(&c, Some(&c.join("sessions")), &[&c.join("settings.json")]);
        bounded_tree::test_support::with_fd_limit(64, || {
            match reset_config(&m, &m.runtime_dirs()) {
                Ok(r) if r.count == 2 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
        let left: Vec<_> = fs::read_dir(&c)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        let sessions_left = fs::read_dir(c.join("sessions")).unwrap().count();
        // Whatever happened, nothing deep is left for the temp dir's recursive removal.
        let _ = bounded_tree::remove_path(&c);
        assert_eq!(left.len(), 2, "{left:?}");
        assert_eq!(sessions_left, 0);
    }
}
