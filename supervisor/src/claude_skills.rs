//! The plugin directories Claude Code is given for the skills trees (`--plugin-dir`, one per
//! skill), made by the supervisor before each launch, after verification, with nothing of the
//! agent running.
//!
//! Claude Code runs what a plugin directory holds: `hooks/hooks.json`, `.mcp.json` servers,
//! `bin/` on the Bash tool's `PATH`, a `plugin.json` declaring more; and for a skill, the hooks
//! its `SKILL.md` frontmatter declares and its inline shell commands. A skills tree handed to it
//! as a plugin directory would run all of that. So the tree itself is never given: for the
//! skills tree `<parent>/<name>` Claude Code gets `<parent>/.pitcrew-claude-skills/<name>`
//! ([`skill_md::claude_plugin_dir`]), a directory of the supervisor's holding only
//! `skills/<name>/`, where
//!
//! - `SKILL.md` is derived from the verified bytes ([`skill_md::for_claude`]): a frontmatter
//!   written by the supervisor (name, description, `disable-model-invocation`), the body with
//!   its inline shell escaped;
//! - every other top-level entry of the verified listing is a symlink to the tree's own
//!   (Claude Code reads nothing else in a skill's directory; the model reaches the skill's
//!   files through them, and they are the verified ones).
//!
//! The `SKILL.md` read is the one verification hashed: its SHA-256 must be the listing's, and
//! the listing must hash to the pin (the manifest's listing, else the tree scanned again). The
//! directory is removed (no link followed) and made again before every launch, `0755` and
//! `0644`, owned by the supervisor; it must lie outside every directory the agent may write.

use crate::manifest::{Manifest, Runtime, RuntimeDirPaths, TreeKind, TreePin};
use crate::sandbox::confine::writable_roots;
use crate::sandbox::nofollow;
use crate::skill_md::{self, CLAUDE_PLUGINS_DIR, MAX_SKILL_MD_BYTES, SKILL_FILE};
use crate::tree_hash::{self, TreeListing};
use rustix::fs::{Mode, OFlags};
use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::Path;

/// Makes the plugin directory of every skills tree of `manifest` when its runtime is Claude
/// Code, and returns them in manifest order (what `--plugin-dir` is given). The error names the
/// tree and what is wrong.
pub fn prepare(manifest: &Manifest, dirs: &RuntimeDirPaths) -> Result<Vec<String>, String> {
    if manifest.runtime != Runtime::Claude {
        return Ok(Vec::new());
    }
    let trees: Vec<&TreePin> = manifest.skill_trees().collect();
    check_plugin_names(manifest, &trees)?;
    let mut bases = BTreeSet::new();
    let mut plugins = Vec::new();
    for tree in &trees {
        let dir = skill_md::claude_plugin_dir(&tree.path)
            .ok_or_else(|| format!("skill tree {:?} ({}) has no parent", tree.name, tree.path))?;
        let base = dir[..dir.rfind('/').unwrap_or(0)].to_string();
        check_place(manifest, dirs, &base)?;
        bases.insert(base);
        plugins.push(dir);
    }
    for base in &bases {
        let (parent, name) = base.rsplit_once('/').unwrap_or(("", base));
        let parent = nofollow::open_dir(Path::new(if parent.is_empty() { "/" } else { parent }))?;
        crate::bounded_tree::remove_at(parent.as_fd(), name.as_ref(), base)
            .map_err(|e| format!("{base}: {e}"))?;
        make_dir(&parent, name, base)?;
    }
    for tree in trees {
        make_plugin(tree)
            .map_err(|why| format!("skill tree {:?} ({}): {why}", tree.name, tree.path))?;
    }
    Ok(plugins)
}

/// Refuses a skills tree whose plugin would be named like a verified `claude-plugin` tree (its
/// directory or its `plugin.json` `name`): Claude Code keeps one of two plugins of a name and
/// offers the other's skill of that name in place of the verified one.
fn check_plugin_names(manifest: &Manifest, skills: &[&TreePin]) -> Result<(), String> {
    let basename = |path: &str| {
        let path = path.trim_end_matches('/');
        path.rsplit_once('/').map_or(path, |(_, n)| n).to_string()
    };
    for plugin in manifest
        .trees
        .iter()
        .filter(|t| t.kind == TreeKind::ClaudePlugin)
    {
        let mut names = vec![basename(&plugin.path)];
        let json = std::fs::read(Path::new(&plugin.path).join(".claude-plugin/plugin.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
        if let Some(name) = json.as_ref().and_then(|j| j["name"].as_str()) {
            names.push(name.to_string());
        }
        if let Some(skill) = skills.iter().find(|s| names.contains(&basename(&s.path))) {
            return Err(format!(
                "skill tree {:?} ({}) would be given to Claude Code as a plugin named like the \
                 verified plugin {:?} ({}), which it would keep in its place",
                skill.name, skill.path, plugin.name, plugin.path
            ));
        }
    }
    Ok(())
}

/// Refuses a place for the plugin directories that overlaps a directory the agent may write
/// or a verified tree or file.
fn check_place(manifest: &Manifest, dirs: &RuntimeDirPaths, base: &str) -> Result<(), String> {
    let overlaps = |p: &str| is_under(p, base) || is_under(base, p);
    if let Some(root) = writable_roots(manifest, dirs).iter().find(|w| overlaps(w)) {
        return Err(format!(
            "{base}, where Claude Code's skill plugins are made, overlaps {root}, which the \
             agent may write: keep the skills trees outside the agent's directories"
        ));
    }
    let pinned = manifest.trees.iter().map(|t| t.path.as_str());
    if let Some(p) = pinned
        .chain(manifest.files.iter().map(|f| f.path.as_str()))
        .find(|p| overlaps(p))
    {
        return Err(format!(
            "{base}, where Claude Code's skill plugins are made, overlaps the verified {p} \
             ({CLAUDE_PLUGINS_DIR} is the supervisor's name)"
        ));
    }
    Ok(())
}

fn is_under(path: &str, root: &str) -> bool {
    let (path, root) = (path.trim_end_matches('/'), root.trim_end_matches('/'));
    path == root || path.strip_prefix(root).is_some_and(|r| r.starts_with('/'))
}

/// `<base>/<name>/skills/<name>/` with the derived `SKILL.md` and a symlink per other entry.
fn make_plugin(tree: &TreePin) -> Result<(), String> {
    let root = tree.path.trim_end_matches('/');
    let (parent, name) = root.rsplit_once('/').ok_or("no parent")?;
    let listing = verified_listing(tree)?;
    let record = listing
        .files
        .iter()
        .find(|f| f.path == SKILL_FILE)
        .ok_or_else(|| {
            format!(
                "has no {SKILL_FILE} at its root: a skills entry is one skill, the directory of \
                 its {SKILL_FILE}"
            )
        })?;
    let text = read_skill_md(root, &record.sha256)?;
    let base = nofollow::open_dir(Path::new(&format!("{parent}/{CLAUDE_PLUGINS_DIR}")))?;
    let label = format!("{parent}/{CLAUDE_PLUGINS_DIR}/{name}");
    let plugin = make_dir(&base, name, &label)?;
    let skills = make_dir(&plugin, "skills", &label)?;
    let skill = make_dir(&skills, name, &label)?;
    write_file(
        &skill,
        SKILL_FILE,
        skill_md::for_claude(name, &text).as_bytes(),
    )
    .map_err(|e| format!("{label}/skills/{name}/{SKILL_FILE}: {e}"))?;
    let entries: BTreeSet<&str> = listing
        .files
        .iter()
        .map(|f| f.path.as_str())
        .chain(listing.dirs.iter().map(String::as_str))
        .map(|p| p.split('/').next().unwrap_or(p))
        .filter(|e| *e != SKILL_FILE)
        .collect();
    for entry in entries {
        rustix::fs::symlinkat(format!("{root}/{entry}"), &skill, entry)
            .map_err(|e| format!("{label}/skills/{name}/{entry}: symlink: {e}"))?;
    }
    Ok(())
}

/// The tree's listing that hashes to its pin: the manifest's (or the one kept on disk), else
/// the tree scanned now.
pub(crate) fn verified_listing(tree: &TreePin) -> Result<TreeListing, String> {
    if let Ok(listing) = tree.expected_listing() {
        if listing.digest(tree.format) == tree.sha256 {
            return Ok(listing);
        }
    }
    let listing = tree_hash::scan_tree(Path::new(&tree.path)).map_err(|e| e.to_string())?;
    if listing.digest(tree.format) != tree.sha256 {
        return Err("changed since it was verified".into());
    }
    Ok(listing)
}

/// The tree's `SKILL.md`, opened without following a link, whose SHA-256 must be `sha256`.
fn read_skill_md(root: &str, sha256: &str) -> Result<String, String> {
    use sha2::Digest as _;
    let path = format!("{root}/{SKILL_FILE}");
    let dir = nofollow::open_dir(Path::new(root))?;
    let fd = rustix::fs::openat(
        &dir,
        SKILL_FILE,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{path}: {e}"))?;
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_SKILL_MD_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{path}: {e}"))?;
    if bytes.len() as u64 > MAX_SKILL_MD_BYTES {
        return Err(format!(
            "{path} is over the {MAX_SKILL_MD_BYTES} bytes a SKILL.md may have"
        ));
    }
    if hex::encode(sha2::Sha256::digest(&bytes)) != sha256 {
        return Err(format!("{path} changed since it was verified"));
    }
    String::from_utf8(bytes).map_err(|_| format!("{path} is not UTF-8 text"))
}

/// Makes the directory `name` in `dir` (`0755`, whatever the umask) and opens it without
/// following a link.
fn make_dir(dir: &OwnedFd, name: &str, label: &str) -> Result<OwnedFd, String> {
    let fail = |what: &str, e: rustix::io::Errno| format!("{label}: {what} {name}: {e}");
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o755)).map_err(|e| fail("mkdir", e))?;
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| fail("open", e))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o755)).map_err(|e| fail("chmod", e))?;
    Ok(fd)
}

/// Writes the new file `name` in `dir` (`0644`, whatever the umask).
fn write_file(dir: &OwnedFd, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o644))?;
    std::fs::File::from(fd).write_all(bytes)
}

#[cfg(test)]
mod tests;
