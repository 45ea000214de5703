//! What a collected workspace (`pitcrew run --collect-workspace`, `pitcrew collect`) never
//! brings back to the host: what git would run, or read as configuration, by its being there,
//! at the next git command the operator runs in the tree. The sandbox is not trusted, and
//! neither is the supervisor that sends its record, so this is done on the host, on the
//! record as unpacked (owner-only, no links), before anyone may look at it.
//!
//! In every git directory of the workspace (each directory named `.git`, and each holding a
//! `HEAD` file beside an `objects/` directory or a `commondir` file: bare repositories,
//! submodules' `.git/modules/*`, worktrees' `.git/worktrees/*`, and the workspace directory
//! itself when it holds them, which git with no `.git` there takes as the repository):
//!
//! - `hooks/`: every entry but the `*.sample` files git never runs is removed (a hook runs by
//!   its name alone once it is executable, and a later `chmod` is all it takes);
//! - `config` and `config.worktree`: rewritten with the allowlisted keys alone
//!   ([`pitcrew_core::git_config`]); every key dropped is named (`core.fsmonitor`,
//!   `core.hooksPath`, `filter.*.clean`, `include.path`, …); one over 1 MiB is removed;
//! - `info/attributes` is removed (it activates filters and diff and merge drivers for every
//!   path);
//! - a `commondir` naming a directory outside the workspace is removed.
//!
//! In the work tree, a `.git` file (`gitdir: …`) that names a directory outside the workspace
//! is removed (git would work on that repository, with its configuration). A `.gitattributes`
//! that sets a `filter`, or a `diff` or `merge` driver git does not define itself, is kept (it
//! is the agent's work, and the driver runs only if the operator's own configuration defines
//! it, as for any repository one clones) and named as flagged.
//!
//! Whatever cannot be checked (a walk that fails, a file that cannot be rewritten) takes the
//! whole workspace with it, named: nothing unchecked reaches the operator.

use anyhow::Context as _;
use pitcrew_core::bounded_tree::{self, Step, Walk};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// Most names listed in each of [`WorkspaceReport`]'s lists (then how many more).
const NAMED: usize = 100;
/// Largest configuration file read; a larger one is removed.
const MAX_CONFIG: u64 = 1 << 20;
/// Largest `.gitattributes` read; a larger one is flagged unread.
const MAX_ATTRIBUTES: u64 = 1 << 20;
/// Largest `.git` file or `commondir` read; a larger one is removed.
const MAX_POINTER: u64 = 4096;
/// Most entries walked: twice what the host's unpack of a record lets through.
const MAX_ENTRIES: u64 = 200_000;

/// The `diff` drivers git defines itself (function names, word diffs: no command).
const BUILTIN_DIFF: &[&str] = &[
    "ada", "bash", "bibtex", "cpp", "csharp", "css", "dts", "elixir", "fortran", "fountain",
    "golang", "html", "java", "kotlin", "markdown", "matlab", "objc", "pascal", "perl", "php",
    "python", "ruby", "rust", "scheme", "tex",
];
/// The `merge` drivers git defines itself.
const BUILTIN_MERGE: &[&str] = &["text", "binary", "union"];

/// What [`strip`] removed from a collected workspace, and what it kept but names.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WorkspaceReport {
    /// What was removed, relative to the workspace (`.git/hooks/post-checkout`,
    /// `.git/config: core.fsmonitor`, …); the first [`NAMED`], then how many more.
    pub stripped: Vec<String>,
    /// What was kept but could make the operator's own git configuration run a command
    /// (`.gitattributes:3: filter=crypt`); the first [`NAMED`], then how many more.
    pub flagged: Vec<String>,
    stripped_more: u64,
    flagged_more: u64,
}

impl WorkspaceReport {
    fn strip(&mut self, what: String) {
        if self.stripped.len() < NAMED {
            self.stripped.push(what);
        } else {
            self.stripped_more += 1;
        }
    }

    fn flag(&mut self, what: String) {
        if self.flagged.len() < NAMED {
            self.flagged.push(what);
        } else {
            self.flagged_more += 1;
        }
    }

    /// The lists with their counts of names left out appended.
    fn finish(mut self) -> WorkspaceReport {
        if self.stripped_more > 0 {
            let more = format!("… and {} more", self.stripped_more);
            self.stripped.push(more);
        }
        if self.flagged_more > 0 {
            let more = format!("… and {} more", self.flagged_more);
            self.flagged.push(more);
        }
        self
    }
}

/// Strips the collected workspace at `workspace` (see the module docs); nothing to do when
/// there is none. When it cannot be checked, it is removed whole and says so; `Err` when that
/// removal failed too (the caller must then not keep the record).
pub fn strip(workspace: &Path) -> anyhow::Result<WorkspaceReport> {
    match std::fs::symlink_metadata(workspace) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(WorkspaceReport::default()),
        _ => {}
    }
    let mut report = WorkspaceReport::default();
    match strip_tree(workspace, &mut report) {
        Ok(()) => Ok(report.finish()),
        Err(why) => {
            bounded_tree::remove_path(workspace).with_context(|| {
                format!(
                    "{}: could not be checked ({why}) nor removed",
                    workspace.display()
                )
            })?;
            Ok(WorkspaceReport {
                stripped: vec![format!(
                    "the whole workspace: it could not be checked ({why})"
                )],
                ..WorkspaceReport::default()
            })
        }
    }
}

/// Walks the workspace, cleaning each git directory and checking `.git` files and
/// `.gitattributes` of the work tree.
fn strip_tree(workspace: &Path, report: &mut WorkspaceReport) -> Result<(), String> {
    let root = bounded_tree::open_dir(workspace).map_err(|e| format!("open: {e}"))?;
    // With no `.git` in it, git takes the workspace directory itself as the repository when it
    // looks like one (as it does a bare repository), at the top of the tree or above a
    // subdirectory git runs in: it is cleaned as any git directory below it.
    if looks_like_git_dir(root.as_fd()) {
        clean_git_dir(root.as_fd(), ".", 0, report)?;
    }
    let mut walk = Walk::new(root, "workspace", MAX_ENTRIES).map_err(|e| e.to_string())?;
    // The depths of the entries inside each git directory the walk is in.
    let mut inside: Vec<usize> = Vec::new();
    while let Some(step) = walk.next() {
        let entry = match step.map_err(|e| e.to_string())? {
            Step::Entry(entry) => entry,
            Step::Limit(rel) => {
                return Err(format!(
                    "more than {MAX_ENTRIES} entries, at {}",
                    rel.display()
                ))
            }
        };
        while inside.last().is_some_and(|&d| d > entry.depth) {
            inside.pop();
        }
        let in_git_dir = !inside.is_empty();
        let rel = entry.rel.to_string_lossy().into_owned();
        match entry.file_type() {
            FileType::Directory => {
                if entry.name == ".git" || is_git_dir(walk.dir(), &entry.name) {
                    let dir = bounded_tree::open_dir_at(walk.dir(), &entry.name)
                        .map_err(|e| format!("{rel}: {e}"))?;
                    clean_git_dir(dir.as_fd(), &rel, entry.depth + 1, report)
                        .map_err(|e| format!("{rel}: {e}"))?;
                    inside.push(entry.depth + 1);
                }
                walk.enter().map_err(|e| e.to_string())?;
            }
            FileType::RegularFile if !in_git_dir && entry.name == ".git" => {
                let target = read_small(walk.dir(), &entry.name, MAX_POINTER)
                    .map_err(|e| format!("{rel}: {e}"))?;
                let inside_ws = target
                    .as_deref()
                    .and_then(gitdir_of)
                    .is_some_and(|path| stays_inside(entry.depth, path));
                if !inside_ws {
                    remove(walk.dir(), &entry.name).map_err(|e| format!("{rel}: {e}"))?;
                    report.strip(format!(
                        "{rel} (a gitdir file naming a directory outside the workspace)"
                    ));
                }
            }
            FileType::RegularFile if !in_git_dir && entry.name == ".gitattributes" => {
                match read_small(walk.dir(), &entry.name, MAX_ATTRIBUTES)
                    .map_err(|e| format!("{rel}: {e}"))?
                {
                    Some(text) => flag_attributes(&rel, &text, report),
                    None => report.flag(format!("{rel}: not read (over 1 MiB)")),
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether the directory `name` of `parent` is a git directory by its content: a `HEAD` file
/// beside an `objects` directory or a `commondir` file (git asks for more; this asks less).
fn is_git_dir(parent: BorrowedFd<'_>, name: &OsStr) -> bool {
    bounded_tree::open_dir_at(parent, name).is_ok_and(|dir| looks_like_git_dir(dir.as_fd()))
}

/// Whether the directory `dir` is a git directory by its content (see [`is_git_dir`]).
fn looks_like_git_dir(dir: BorrowedFd<'_>) -> bool {
    let kind = |name: &str| {
        rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .ok()
            .map(|st| FileType::from_raw_mode(st.st_mode))
    };
    kind("HEAD") == Some(FileType::RegularFile)
        && (kind("objects") == Some(FileType::Directory)
            || kind("commondir") == Some(FileType::RegularFile))
}

/// Cleans the git directory `dir` (at `rel` in the workspace, `depth` directories below it).
fn clean_git_dir(
    dir: BorrowedFd<'_>,
    rel: &str,
    depth: usize,
    report: &mut WorkspaceReport,
) -> Result<(), String> {
    if kind_at(dir, "hooks") == Some(FileType::Directory) {
        let hooks = bounded_tree::open_dir_at(dir, OsStr::new("hooks")).map_err(err("hooks"))?;
        let mut names = bounded_tree::entry_names(hooks.as_fd()).map_err(err("hooks"))?;
        names.sort();
        for name in names {
            let sample = name.as_bytes().ends_with(b".sample")
                && kind_at(hooks.as_fd(), &name) == Some(FileType::RegularFile);
            if !sample {
                remove(hooks.as_fd(), &name).map_err(err("hooks"))?;
                report.strip(format!("{rel}/hooks/{}", name.to_string_lossy()));
            }
        }
    }
    for config in ["config", "config.worktree"] {
        if kind_at(dir, config).is_some() {
            filter_config(dir, config, &format!("{rel}/{config}"), report)?;
        }
    }
    if kind_at(dir, "info") == Some(FileType::Directory) {
        let info = bounded_tree::open_dir_at(dir, OsStr::new("info")).map_err(err("info"))?;
        if kind_at(info.as_fd(), "attributes").is_some() {
            remove(info.as_fd(), OsStr::new("attributes")).map_err(err("info/attributes"))?;
            report.strip(format!("{rel}/info/attributes"));
        }
    }
    if kind_at(dir, "commondir").is_some() {
        let common =
            read_small(dir, OsStr::new("commondir"), MAX_POINTER).map_err(err("commondir"))?;
        let path = common.as_deref().map(trim_end);
        if !path.is_some_and(|p| stays_inside(depth, p)) {
            remove(dir, OsStr::new("commondir")).map_err(err("commondir"))?;
            report.strip(format!(
                "{rel}/commondir (naming a directory outside the workspace)"
            ));
        }
    }
    Ok(())
}

/// Rewrites the configuration file `name` of `dir` (at `rel`) with its allowlisted keys
/// alone, naming each key dropped; one that is not a regular file or is over
/// [`MAX_CONFIG`] is removed.
fn filter_config(
    dir: BorrowedFd<'_>,
    name: &str,
    rel: &str,
    report: &mut WorkspaceReport,
) -> Result<(), String> {
    let name = OsStr::new(name);
    let Some(bytes) = read_small(dir, name, MAX_CONFIG).map_err(|e| format!("{rel}: {e}"))? else {
        remove(dir, name).map_err(|e| format!("{rel}: {e}"))?;
        report.strip(format!("{rel} (over 1 MiB, or not a file)"));
        return Ok(());
    };
    let filtered = pitcrew_core::git_config::filter(&bytes);
    for key in &filtered.dropped {
        report.strip(format!("{rel}: {key}"));
    }
    if let Some(err) = &filtered.error {
        report.strip(format!("{rel}: everything from {err}"));
    }
    if filtered.text == bytes {
        return Ok(());
    }
    let file = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("{rel}: rewrite: {e}"))?;
    std::fs::File::from(file)
        .write_all(&filtered.text)
        .map_err(|e| format!("{rel}: rewrite: {e}"))
}

/// Flags the lines of the `.gitattributes` `text` (at `rel`) that set a filter or a diff or
/// merge driver git does not define itself.
fn flag_attributes(rel: &str, text: &[u8], report: &mut WorkspaceReport) {
    for (n, line) in text.split(|&b| b == b'\n').enumerate() {
        let line = String::from_utf8_lossy(line);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // The pattern: a C-quoted one may hold blanks.
        let attrs = match line.strip_prefix('"') {
            Some(rest) => {
                let mut escaped = false;
                let end = rest.char_indices().find(|&(_, c)| {
                    let close = c == '"' && !escaped;
                    escaped = c == '\\' && !escaped;
                    close
                });
                end.map_or("", |(i, _)| &rest[i + 1..])
            }
            None => line.split_once(char::is_whitespace).map_or("", |(_, a)| a),
        };
        for attr in attrs.split_whitespace() {
            let Some((name, value)) = attr.split_once('=') else {
                continue;
            };
            let builtin = match name {
                "filter" => false,
                "diff" => BUILTIN_DIFF.contains(&value),
                "merge" => BUILTIN_MERGE.contains(&value),
                _ => true,
            };
            if !builtin {
                report.flag(format!("{rel}:{}: {attr}", n + 1));
            }
        }
    }
}

/// The path a `.git` file names (`gitdir: PATH`, trailing blanks dropped), if it is one.
fn gitdir_of(content: &[u8]) -> Option<&[u8]> {
    content.strip_prefix(b"gitdir: ").map(trim_end)
}

/// `bytes` without trailing blanks and line ends.
fn trim_end(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    &bytes[..end]
}

/// Whether the relative `path`, taken from a directory `depth` levels below the workspace,
/// stays inside it (the unpacked record holds no links, so the names alone decide).
fn stays_inside(depth: usize, path: &[u8]) -> bool {
    if path.is_empty() || path.starts_with(b"/") || path.contains(&0) {
        return false;
    }
    let mut depth = depth;
    for part in path.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => match depth.checked_sub(1) {
                Some(up) => depth = up,
                None => return false,
            },
            _ => depth += 1,
        }
    }
    true
}

/// The type of `name` in `dir`, not followed; `None` when it is missing.
fn kind_at<P: rustix::path::Arg>(dir: BorrowedFd<'_>, name: P) -> Option<FileType> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .ok()
        .map(|st| FileType::from_raw_mode(st.st_mode))
}

/// The content of the regular file `name` of `dir` (not followed); `None` when it is larger
/// than `max` bytes or not a regular file.
fn read_small(dir: BorrowedFd<'_>, name: &OsStr, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let fd: OwnedFd = match rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::LOOP) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() || meta.len() > max {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    file.take(max + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

/// Removes the entry `name` of `dir`, a directory with everything below it.
fn remove(dir: BorrowedFd<'_>, name: &OsStr) -> std::io::Result<()> {
    bounded_tree::remove_at(dir, name, &name.to_string_lossy())
        .map(|_| ())
        .map_err(std::io::Error::other)
}

/// Names `what` in an error.
fn err<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{what}: {e}")
}

#[cfg(test)]
mod tests;
