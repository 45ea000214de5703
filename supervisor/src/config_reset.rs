//! Between the reap and verification: the runtime's config directory (`dirs.config`: pi's
//! `PI_CODING_AGENT_DIR`, Claude's `CLAUDE_CONFIG_DIR`) is brought back to what the host pinned.
//!
//! The agent may write in that directory while it runs (the runtimes keep state there), so
//! whatever it added would otherwise be loaded by the next iteration's runtime at startup
//! (`settings.json`, `models.json`, `skills/`, `.claude.json`, `agents/` …) without a digest the
//! host computed. Every entry that is not a pinned file (`files[]` below the directory), an
//! ancestor directory of one, or the sessions directory (`dirs.sessions`, whose *contents* are
//! removed) is removed, without following symlinks. Pinned files are left exactly as they are:
//! verification, which runs next, reports any that changed (exit 98 for a config).

use crate::manifest::Manifest;
use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Most removed paths named in the record (the count is always exact).
const NAMED: usize = 100;

/// What the reset removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResetReport {
    /// Removed entries, relative to the config directory, at most [`NAMED`] of them.
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

/// Brings `dirs.config` back to the pinned files (see the module docs). A missing config
/// directory, or one that is not a directory, is left alone (verification then reports the
/// pinned files it cannot find). Errors name the path.
pub fn reset(manifest: &Manifest) -> Result<ResetReport, String> {
    let mut report = ResetReport::default();
    let Some(config) = manifest.dirs.config.as_deref().map(Path::new) else {
        return Ok(report);
    };
    match fs::symlink_metadata(config) {
        Ok(meta) if meta.is_dir() => {}
        _ => return Ok(report),
    }
    let pinned: BTreeSet<PathBuf> = manifest
        .files
        .iter()
        .filter_map(|f| below(config, Path::new(&f.path)))
        .collect();
    let sessions = manifest
        .dirs
        .sessions
        .as_deref()
        .and_then(|s| below(config, Path::new(s)));
    // Directories kept because something kept lies below them.
    let mut ancestors: BTreeSet<PathBuf> = BTreeSet::new();
    for kept in pinned.iter().chain(sessions.iter()) {
        for a in kept.ancestors().skip(1) {
            if !a.as_os_str().is_empty() {
                ancestors.insert(a.to_path_buf());
            }
        }
    }
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = config.join(&rel);
        let entries = fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
            let rel = rel.join(entry.file_name());
            let path = config.join(&rel);
            let is_dir = entry
                .file_type()
                .map_err(|e| format!("{}: {e}", path.display()))?
                .is_dir();
            if pinned.contains(&rel) {
                continue;
            }
            if is_dir && sessions.as_ref() == Some(&rel) {
                // The sessions directory stays (a writable root), emptied.
                for child in fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))? {
                    let child = child.map_err(|e| format!("{}: {e}", path.display()))?;
                    // `DirEntry::file_type` does not follow a symlink.
                    let is_dir = child
                        .file_type()
                        .map_err(|e| format!("{}: {e}", child.path().display()))?
                        .is_dir();
                    remove(
                        &child.path(),
                        &rel.join(child.file_name()),
                        is_dir,
                        &mut report,
                    )?;
                }
                continue;
            }
            if is_dir && ancestors.contains(&rel) {
                stack.push(rel);
                continue;
            }
            remove(&path, &rel, is_dir, &mut report)?;
        }
    }
    Ok(report)
}

/// Removes one entry without following a symlink (a directory with everything in it);
/// `is_dir` is what `lstat` said of it.
fn remove(path: &Path, rel: &Path, is_dir: bool, report: &mut ResetReport) -> Result<(), String> {
    // `remove_dir_all` does not follow symlinks (it removes the link itself).
    let res: io::Result<()> = if is_dir {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    res.map_err(|e| format!("{}: remove: {e}", path.display()))?;
    report.count += 1;
    if report.removed.len() < NAMED {
        report.removed.push(rel.display().to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let report = reset(&m).unwrap();
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
        assert_eq!(reset(&m).unwrap(), ResetReport::default());
    }

    #[test]
    fn a_pinned_path_replaced_by_a_directory_is_left_for_verification() {
        let tmp = tempfile::tempdir().unwrap();
        let c = tmp.path().join("config");
        fs::create_dir_all(c.join("settings.json")).unwrap();
        let m = manifest(&c, None, &[&c.join("settings.json")]);
        assert_eq!(reset(&m).unwrap().count, 0);
        assert!(c.join("settings.json").is_dir());
        // No config dir, or none in the manifest: nothing happens.
        let m = manifest(&tmp.path().join("absent"), None, &[]);
        assert_eq!(reset(&m).unwrap().count, 0);
    }
}
