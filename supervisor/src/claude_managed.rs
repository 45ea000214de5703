//! Claude Code's managed settings directory, named in the record.
//!
//! Claude Code reads `/etc/claude-code` on Linux whatever its flags: `managed-settings.json`
//! and the drop-ins of `managed-settings.d/` (the highest settings source: hooks, permissions,
//! `env`), `managed-mcp.json` (MCP servers it starts) and a managed `CLAUDE.md` (memory put
//! into the model's context). The directory belongs to the image, not to the agent (it is
//! root's, outside every directory the agent may write), so pitcrew neither pins nor resets it;
//! but what the runtime loads from it is named in every record of a Claude Code iteration, each
//! file with its SHA-256 ([`list`]), so that nothing Claude Code reads at startup is unnamed.
//! The same [`list`] names the image's `/etc/codex` (Codex's system configuration) and
//! `/etc/opencode` (OpenCode's managed configuration) in those runtimes' records.

use crate::tree_hash;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Where Claude Code reads its managed settings, policies and memory on Linux.
pub const MANAGED_DIR: &str = "/etc/claude-code";

/// At most this many entries are named (a directory of more is named as cut).
const MAX_ENTRIES: usize = 256;

/// How deep below [`MANAGED_DIR`] the walk goes.
const MAX_DEPTH: usize = 4;

/// One entry of the managed directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagedEntry {
    /// Its absolute path.
    pub path: String,
    /// SHA-256 of a regular file's content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A regular file's size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// What a symlink points to (not followed here; Claude Code follows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// Why a file could not be read or hashed, or that the walk stopped here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Every regular file and symlink below `root` ([`MANAGED_DIR`] in production), depth-first in
/// name order, directories descended and not named themselves; empty when `root` does not
/// exist. Never fails: what cannot be read is named with its error.
pub fn list(root: &Path) -> Vec<ManagedEntry> {
    let mut out = Vec::new();
    walk(root, 0, &mut out);
    out
}

fn walk(dir: &Path, depth: usize, out: &mut Vec<ManagedEntry>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && depth == 0 => return,
        Err(e) => return out.push(failed(dir, format!("read_dir: {e}"))),
    };
    let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if out.len() >= MAX_ENTRIES {
            return out.push(failed(dir, format!("more than {MAX_ENTRIES} entries: cut")));
        }
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) => {
                out.push(failed(&path, format!("stat: {e}")));
                continue;
            }
        };
        if meta.is_dir() {
            if depth + 1 >= MAX_DEPTH {
                out.push(failed(
                    &path,
                    format!("deeper than {MAX_DEPTH}: not walked"),
                ));
            } else {
                walk(&path, depth + 1, out);
            }
        } else if meta.file_type().is_symlink() {
            let link = std::fs::read_link(&path)
                .map(|t| t.to_string_lossy().into_owned())
                .unwrap_or_else(|e| format!("(readlink: {e})"));
            out.push(ManagedEntry {
                link: Some(link),
                ..entry(&path)
            });
        } else if meta.is_file() {
            out.push(match tree_hash::sha256_file(&path) {
                Ok(file) => ManagedEntry {
                    sha256: Some(file.sha256),
                    bytes: Some(file.size),
                    ..entry(&path)
                },
                Err(e) => failed(&path, e.to_string()),
            });
        } else {
            out.push(failed(
                &path,
                "not a regular file, link or directory".into(),
            ));
        }
    }
}

fn entry(path: &Path) -> ManagedEntry {
    ManagedEntry {
        path: path.to_string_lossy().into_owned(),
        sha256: None,
        bytes: None,
        link: None,
        error: None,
    }
}

fn failed(path: &Path, error: String) -> ManagedEntry {
    ManagedEntry {
        error: Some(error),
        ..entry(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_missing_directory_names_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(list(&dir.path().join("claude-code")).is_empty());
    }

    #[test]
    fn files_links_and_drop_ins_are_named_with_their_digests_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::write(root.join("managed-settings.json"), b"{}\n").unwrap();
        fs::create_dir(root.join("managed-settings.d")).unwrap();
        fs::write(
            root.join("managed-settings.d/10-hooks.json"),
            b"{\"hooks\":{}}",
        )
        .unwrap();
        std::os::unix::fs::symlink("/srv/policy.md", root.join("CLAUDE.md")).unwrap();
        let listed = list(root);
        let names: Vec<_> = listed
            .iter()
            .map(|e| e.path.strip_prefix(&*root.to_string_lossy()).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "/CLAUDE.md",
                "/managed-settings.d/10-hooks.json",
                "/managed-settings.json"
            ]
        );
        assert_eq!(listed[0].link.as_deref(), Some("/srv/policy.md"));
        assert_eq!(listed[0].sha256, None);
        assert_eq!(
            listed[2].sha256.as_deref(),
            Some("ca3d163bab055381827226140568f3bef7eaac187cebd76878e0b63e9e442356")
        );
        assert_eq!(listed[2].bytes, Some(3));
        assert!(listed.iter().all(|e| e.error.is_none()));
    }

    #[test]
    fn a_directory_of_too_many_entries_is_named_as_cut() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..MAX_ENTRIES + 5 {
            fs::write(dir.path().join(format!("f{i:04}")), b"x").unwrap();
        }
        let listed = list(dir.path());
        assert_eq!(listed.len(), MAX_ENTRIES + 1);
        assert!(listed
            .last()
            .unwrap()
            .error
            .as_deref()
            .unwrap()
            .contains("cut"));
    }
}
