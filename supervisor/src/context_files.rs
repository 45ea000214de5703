//! Context files: the repository's own instructions to the agent (`AGENTS.md`,
//! `AGENTS.override.md`, `CLAUDE.md`), which the runtime puts into the model's context. The
//! workspace persists from one iteration to the next, so what one iteration's agent writes
//! into them would be the next one's instructions; `agent.context_files` chooses which the
//! runtime reads, and every iteration's record names them ([`ContextFilesRecord`]).
//!
//! What each release reads, from its installed sources:
//!
//! - **pi 0.73.1**: in its agent dir (the config dir, `PI_CODING_AGENT_DIR`), then in each
//!   directory from `/` down to the workdir, the first of `AGENTS.md`, `AGENTS.MD`,
//!   `CLAUDE.md`, `CLAUDE.MD` that exists (a symlink followed); `--no-context-files` drops
//!   them all.
//! - **pi from 0.84** (0.87.1, 1.6.0): the same with `AGENTS.override.md` first, a regular file
//!   only (a linked worktree's copy of the main repository's file aside).
//! - **pi before 0.87.1** (no project trust) also reads the workdir's `.pi/SYSTEM.md` (its
//!   system prompt), `.pi/APPEND_SYSTEM.md` and `.pi/settings.json` whatever its flags: the two
//!   prompts are named with the context files, and `uploaded` sets all three back with them
//!   (a `.pi` that is a symlink, which pi reads through, is removed).
//! - **Claude Code** (`--setting-sources user`: no project memory, so no `CLAUDE.md`,
//!   `.claude/CLAUDE.md`, `CLAUDE.local.md` or `.claude/rules/` of the repository, and no
//!   `AGENTS.md`): its config dir's `CLAUDE.md` and `rules/**/*.md` (pinned files only after
//!   the config reset), and the workdir's `CLAUDE.md` when it is a regular file, which pitcrew
//!   passes with `--append-system-prompt-file` (appended to the system prompt as it is: no
//!   `@import` in it is followed). `none` passes no file and sets
//!   `CLAUDE_CODE_DISABLE_CLAUDE_MDS=1`. Beside the files, Claude Code puts a snapshot of the
//!   workdir's git repository (branch, status, the last commits with their messages) into the
//!   model's context: no reset can take back what an iteration committed, so `uploaded` and
//!   `none` turn it off (`CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS=1`) and `as-is` names it in the
//!   record (`git_status`).
//! - **Codex CLI 0.169.1**: in `CODEX_HOME` (the config dir: pinned files only after the
//!   config reset) and in each directory from the git root down to its cwd (the workdir), the
//!   first of `AGENTS.override.md`, `AGENTS.md` (a symlink followed; never `CLAUDE.md`).
//!   `none` passes `-c project_doc_max_bytes=0`, which drops the project's files; a pinned
//!   `AGENTS.md` of the config dir is still read, and named.
//!
//! The choices ([`ContextFiles`]): `as-is` reads what is there; `none` reads nothing;
//! `uploaded` sets the workspace's context files back to the run's [`Baseline`] before launch.
//! The baseline is taken after the reap of the first iteration after the workspace was
//! uploaded (or the manifest set), before any agent ran: in a `pitcrew run`, exactly what was
//! uploaded. Then, before each launch, in the directories the runtime reads from the workdir
//! up (the config dir is the config reset's), a context file the agent created is removed,
//! and one it changed, removed, or replaced (content, mode, owner, type) is written back from
//! the baseline; the record names each. A directory by such a name is left alone: no release
//! reads one. Nothing is followed or read through a link, except to name what pi reads through
//! one: a symlink pi reads is named with the digest of what it leads to, and one it passes over
//! (dangling, not a regular file, unreadable to the agent) is not named, so the name pi reads
//! next is.

use crate::manifest::{AgentUser, ContextFiles, Manifest, Runtime, RuntimeDirPaths};
use crate::result::{ContextFileRecord, ContextFilesRecord, ContextResetRecord};
use crate::runtime_version::PiFeatures;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

/// The names pi 0.73.1 tries in each directory, in order.
const PI_NAMES: &[&str] = &["AGENTS.md", "AGENTS.MD", "CLAUDE.md", "CLAUDE.MD"];

/// The names pi tries from 0.84 on, in order.
const PI_OVERRIDE_NAMES: &[&str] = &[
    "AGENTS.override.md",
    "AGENTS.md",
    "AGENTS.MD",
    "CLAUDE.md",
    "CLAUDE.MD",
];

/// The workdir's directory of pi's project files, and the files in it pi before 0.87.1 reads
/// whatever its flags (no project trust): `SYSTEM.md` replaces its system prompt and
/// `APPEND_SYSTEM.md` is appended to it (both named in the record), `settings.json` is merged
/// into its settings. `uploaded` sets all three back like the context files.
const PI_PROJECT_DIR: &str = ".pi";
const PI_PROJECT_PROMPTS: &[&str] = &["SYSTEM.md", "APPEND_SYSTEM.md"];
const PI_PROJECT_FILES: &[&str] = &["SYSTEM.md", "APPEND_SYSTEM.md", "settings.json"];

/// Whether `manifest`'s runtime (release `version`) reads the workdir's `.pi/` files whatever
/// its flags.
fn reads_pi_project(manifest: &Manifest, version: Option<&str>) -> bool {
    manifest.runtime == Runtime::Pi && PiFeatures::of(version).reads_project_files
}

/// The names the Codex CLI tries in `CODEX_HOME` and in each project directory, in order
/// (0.169.1: an `AGENTS.override.md` is read in place of the `AGENTS.md` beside it).
const CODEX_NAMES: &[&str] = &["AGENTS.override.md", "AGENTS.md"];

/// The workdir's files of OpenCode's: its `AGENTS.md`, which pitcrew passes through
/// `instructions` (with project config off, OpenCode 1.18.33 reads no `AGENTS.md`, `CLAUDE.md`
/// or `CONTEXT.md` of the project at start), and what its `read` tool adds from each directory
/// between a file it reads and the project root ([`nested`], which covers those below).
const OPENCODE_NAMES: &[&str] = nested::NAMES;

/// The workdir's file pitcrew passes to Claude Code, and the name of its user-level one.
const CLAUDE_NAMES: &[&str] = &["CLAUDE.md"];

/// The most content of one context file the baseline keeps to write back (a larger one is
/// kept by digest: if it changes, the iteration stops rather than launch with it).
pub const MAX_KEPT_BYTES: u64 = 4 << 20;

/// The most content the baseline keeps in all.
const MAX_KEPT_TOTAL: u64 = 16 << 20;

/// The most `rules/` entries of Claude Code's config dir named in a record, and how deep.
const MAX_RULES: usize = 1024;
const MAX_RULES_DEPTH: usize = 16;

/// Why the context files could not be named or set back (the iteration stops with 125).
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// A system call failed on `path`.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// What was being done.
        op: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A directory the runtime reads from could not be reached without following a link.
    #[error("{0}")]
    Dir(String),
    /// A file changed since the baseline, which kept only its digest.
    #[error(
        "{path} changed since the run began, and at {bytes} bytes it is larger than the \
         {MAX_KEPT_BYTES} bytes kept to write it back (agent.context_files: as-is or none \
         runs with it)"
    )]
    TooLarge {
        /// The file.
        path: String,
        /// Its size in the baseline.
        bytes: u64,
    },
    /// A symlink of the baseline now leads to other content (its target was written).
    #[error(
        "{path} is a symlink the run began with, and what it leads to changed since; the \
         supervisor writes nothing through a link (agent.context_files: as-is runs with it)"
    )]
    ChangedThroughLink {
        /// The symlink.
        path: String,
    },
}

fn io_err(path: &Path, op: &'static str, err: impl Into<std::io::Error>) -> ContextError {
    ContextError::Io {
        path: path.display().to_string(),
        op,
        source: err.into(),
    }
}

/// The names `runtime` (release `version`) reads context files by, in each directory, in the
/// order it tries them; none for `command`.
pub fn names(runtime: Runtime, version: Option<&str>) -> &'static [&'static str] {
    match runtime {
        Runtime::Pi if PiFeatures::of(version).agents_override => PI_OVERRIDE_NAMES,
        Runtime::Pi => PI_NAMES,
        Runtime::Claude => CLAUDE_NAMES,
        Runtime::Codex => CODEX_NAMES,
        Runtime::Opencode => OPENCODE_NAMES,
        Runtime::Command => &[],
    }
}

/// The names a baseline of `manifest` keeps in each directory: none under `none` (pi 0.73's
/// `.pi/` files aside, see [`reads_pi_project`]), else what the runtime reads.
fn baseline_names(manifest: &Manifest, version: Option<&str>) -> &'static [&'static str] {
    match manifest.agent.context_files {
        // OpenCode's `read` adds instruction files whatever pitcrew passes: set back under
        // `none` too.
        ContextFiles::None if manifest.runtime == Runtime::Opencode => OPENCODE_NAMES,
        ContextFiles::None => &[],
        ContextFiles::AsIs | ContextFiles::Uploaded => names(manifest.runtime, version),
    }
}

/// The directories the runtime reads the repository's context files from, with their scope:
/// pi each from `/` down to the workdir, Claude Code the workdir alone.
fn project_dirs(manifest: &Manifest) -> Vec<(PathBuf, &'static str)> {
    let workdir = Path::new(&manifest.workdir);
    match manifest.runtime {
        Runtime::Pi => {
            let mut dirs: Vec<(PathBuf, &'static str)> = workdir
                .ancestors()
                .skip(1)
                .map(|d| (d.to_path_buf(), "parent"))
                .collect();
            dirs.reverse();
            dirs.push((workdir.to_path_buf(), "workdir"));
            dirs
        }
        // Codex reads each directory from the git root down to its cwd: the workdir, which is
        // the repository's root in a sandbox.
        Runtime::Claude | Runtime::Codex | Runtime::Opencode => {
            vec![(workdir.to_path_buf(), "workdir")]
        }
        Runtime::Command => Vec::new(),
    }
}

/// What a directory entry is, looked at without following it.
enum Found {
    Missing,
    File(rustix::fs::Stat),
    Symlink(OsString, rustix::fs::Stat),
    Dir,
    Other(FileType),
}

impl Found {
    /// Its kind in records.
    fn kind(&self) -> &'static str {
        match self {
            Found::Missing => "missing",
            Found::File(_) => "regular file",
            Found::Symlink(..) => "symlink",
            Found::Dir => "directory",
            Found::Other(FileType::Fifo) => "fifo",
            Found::Other(FileType::Socket) => "socket",
            Found::Other(FileType::CharacterDevice) => "character device",
            Found::Other(FileType::BlockDevice) => "block device",
            Found::Other(_) => "file of unknown type",
        }
    }
}

fn look(dir: BorrowedFd<'_>, name: &str, path: &Path) -> Result<Found, ContextError> {
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(Found::Missing),
        Err(err) => return Err(io_err(path, "stat", err)),
    };
    Ok(match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => Found::File(st),
        FileType::Directory => Found::Dir,
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(dir, name, Vec::new())
                .map_err(|e| io_err(path, "readlink", e))?;
            Found::Symlink(OsStr::from_bytes(target.as_bytes()).to_os_string(), st)
        }
        other => Found::Other(other),
    })
}

/// A regular file's digest and size, read without following a link or blocking on a fifo put
/// in its place, and its content when it is at most `keep` bytes.
struct Hashed {
    sha256: [u8; 32],
    size: u64,
    content: Option<Vec<u8>>,
}

fn hash_at(
    dir: BorrowedFd<'_>,
    name: &str,
    path: &Path,
    keep: u64,
) -> Result<Hashed, ContextError> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY;
    let fd = rustix::fs::openat(dir, name, flags | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| io_err(path, "open", e))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| io_err(path, "stat", e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(io_err(path, "open", Errno::INVAL));
    }
    hash_fd(fd, path, keep)
}

/// The digest and size of the open regular file `fd`, and its content up to `keep` bytes.
fn hash_fd(fd: OwnedFd, path: &Path, keep: u64) -> Result<Hashed, ContextError> {
    let mut file = std::fs::File::from(fd);
    let mut hasher = Sha256::new();
    let mut content = Vec::new();
    let mut size = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf).map_err(|e| io_err(path, "read", e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
        if size <= keep {
            content.extend_from_slice(&buf[..n]);
        }
    }
    Ok(Hashed {
        sha256: hasher.finalize().into(),
        size,
        content: (size <= keep).then_some(content),
    })
}

fn open_dir(path: &Path) -> Result<OwnedFd, ContextError> {
    crate::sandbox::nofollow::open_dir(path).map_err(ContextError::Dir)
}

/// What the baseline holds of one context file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kept {
    File {
        sha256: [u8; 32],
        size: u64,
        mode: u32,
        uid: u32,
        gid: u32,
        /// `None` past [`MAX_KEPT_BYTES`] (or [`MAX_KEPT_TOTAL`] in all).
        content: Option<Vec<u8>>,
    },
    Symlink {
        target: OsString,
        uid: u32,
        gid: u32,
        /// The digest of what it led to: a regular file, up to [`MAX_LINKED_HASH`] bytes.
        leads_to: Option<[u8; 32]>,
    },
}

/// The context files the run's workspace began with (`agent.context_files: uploaded`), by path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Baseline {
    /// The workdir and runtime it was taken for: another manifest takes its own.
    workdir: String,
    runtime: Runtime,
    names: &'static [&'static str],
    /// The iteration whose reap it followed.
    iteration: u32,
    kept: BTreeMap<PathBuf, Kept>,
    /// pi before 0.87.1: the workdir's `.pi/` as it was (its files are in `kept`).
    pi_dir: Option<PiDir>,
}

/// What the baseline holds of the workdir's `.pi/` directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PiDir {
    /// Nothing there, or no directory: pi reads nothing through it.
    Absent,
    /// A directory, with its mode and owner.
    Dir { mode: u32, uid: u32, gid: u32 },
}

impl Baseline {
    /// Takes the baseline of `manifest`'s context files (release `version`), after the reap of
    /// `iteration`: in each directory the runtime reads the repository's from, every file and
    /// symlink by one of its names (a directory or a special file is not kept: it is not
    /// restored, and one created since is removed).
    pub fn take(
        manifest: &Manifest,
        version: Option<&str>,
        iteration: u32,
    ) -> Result<Baseline, ContextError> {
        let names = baseline_names(manifest, version);
        let mut kept = BTreeMap::new();
        let mut total = 0u64;
        for (dir_path, _) in project_dirs(manifest) {
            let dir = open_dir(&dir_path)?;
            for name in names {
                keep_entry(dir.as_fd(), &dir_path, name, &mut kept, &mut total)?;
            }
        }
        if manifest.runtime == Runtime::Opencode && !names.is_empty() {
            nested::take(Path::new(&manifest.workdir), &mut kept, &mut total)?;
        }
        let pi_dir = if reads_pi_project(manifest, version) {
            Some(take_pi_dir(manifest, &mut kept, &mut total)?)
        } else {
            None
        };
        Ok(Baseline {
            workdir: manifest.workdir.clone(),
            runtime: manifest.runtime,
            names,
            iteration,
            kept,
            pi_dir,
        })
    }

    /// Whether it was taken for `manifest` (release `version`).
    pub fn fits(&self, manifest: &Manifest, version: Option<&str>) -> bool {
        self.workdir == manifest.workdir
            && self.runtime == manifest.runtime
            && self.names == baseline_names(manifest, version)
            && self.pi_dir.is_some() == reads_pi_project(manifest, version)
    }

    /// The iteration whose reap it followed.
    pub fn iteration(&self) -> u32 {
        self.iteration
    }

    /// Sets `manifest`'s context files back to the baseline: removes what it does not hold (a
    /// directory aside), writes back what differs from it. Returns what was done.
    pub fn reset(&self, manifest: &Manifest) -> Result<Vec<ContextResetRecord>, ContextError> {
        let mut done = Vec::new();
        for (dir_path, _) in project_dirs(manifest) {
            let dir = open_dir(&dir_path)?;
            for name in self.names {
                self.reset_entry(dir.as_fd(), &dir_path, name, &mut done)?;
            }
        }
        if manifest.runtime == Runtime::Opencode && !self.names.is_empty() {
            nested::reset(self, Path::new(&manifest.workdir), &mut done)?;
        }
        if let Some(pi_dir) = self.pi_dir {
            self.reset_pi_dir(manifest, pi_dir, &mut done)?;
        }
        Ok(done)
    }

    /// Sets `name` of `dir` (at `dir_path`) back to the baseline, recording it in `done` when
    /// it differed.
    fn reset_entry(
        &self,
        dir: BorrowedFd<'_>,
        dir_path: &Path,
        name: &str,
        done: &mut Vec<ContextResetRecord>,
    ) -> Result<(), ContextError> {
        let path = dir_path.join(name);
        let kept = self.kept.get(&path);
        let found = look(dir, name, &path)?;
        if same(dir, name, &path, kept, &found)? {
            if let Some(Kept::Symlink { leads_to, .. }) = kept {
                if linked_digest(dir, name, &path)? != *leads_to {
                    return Err(ContextError::ChangedThroughLink {
                        path: path.display().to_string(),
                    });
                }
            }
            return Ok(());
        }
        if let Some(Kept::File {
            content: None,
            size,
            ..
        }) = kept
        {
            return Err(ContextError::TooLarge {
                path: path.display().to_string(),
                bytes: *size,
            });
        }
        if !matches!(found, Found::Missing) {
            remove(dir, name, dir_path, &path)?;
        }
        if let Some(kept) = kept {
            restore(dir, name, &path, kept)?;
        }
        done.push(reset_record(&path, kept.is_some(), &found));
        Ok(())
    }

    /// pi before 0.87.1: sets the workdir's `.pi/` files back to the baseline. A `.pi` that is
    /// no longer the directory the baseline held (a symlink pi would read through, a file in
    /// place of the directory) is removed, and the directory made again when the baseline held
    /// one.
    fn reset_pi_dir(
        &self,
        manifest: &Manifest,
        pi_dir: PiDir,
        done: &mut Vec<ContextResetRecord>,
    ) -> Result<(), ContextError> {
        let workdir = Path::new(&manifest.workdir);
        let parent = open_dir(workdir)?;
        let path = workdir.join(PI_PROJECT_DIR);
        let found = look(parent.as_fd(), PI_PROJECT_DIR, &path)?;
        match (&found, pi_dir) {
            (Found::Dir, _) => {}
            // Nothing pi reads through.
            (Found::Missing | Found::File(_) | Found::Other(_), PiDir::Absent) => return Ok(()),
            (Found::Symlink(..), PiDir::Absent) => {
                remove(parent.as_fd(), PI_PROJECT_DIR, workdir, &path)?;
                done.push(reset_record(&path, false, &found));
                return Ok(());
            }
            (_, PiDir::Dir { mode, uid, gid }) => {
                if !matches!(found, Found::Missing) {
                    remove(parent.as_fd(), PI_PROJECT_DIR, workdir, &path)?;
                }
                make_dir(parent.as_fd(), PI_PROJECT_DIR, &path, mode, uid, gid)?;
                done.push(reset_record(&path, true, &found));
            }
        }
        let dir = crate::bounded_tree::open_dir_at(parent.as_fd(), OsStr::new(PI_PROJECT_DIR))
            .map_err(|e| io_err(&path, "open directory", e))?;
        for name in PI_PROJECT_FILES {
            self.reset_entry(dir.as_fd(), &path, name, done)?;
        }
        Ok(())
    }
}

/// Keeps `name` of `dir` (at `dir_path`) in `kept` when it is a regular file or a symlink,
/// counting the content kept in `total`.
fn keep_entry(
    dir: BorrowedFd<'_>,
    dir_path: &Path,
    name: &str,
    kept: &mut BTreeMap<PathBuf, Kept>,
    total: &mut u64,
) -> Result<(), ContextError> {
    let path = dir_path.join(name);
    match look(dir, name, &path)? {
        Found::File(st) => {
            let keep = MAX_KEPT_BYTES.min(MAX_KEPT_TOTAL - *total);
            let hashed = hash_at(dir, name, &path, keep)?;
            *total += hashed.content.as_ref().map_or(0, |c| c.len() as u64);
            kept.insert(
                path,
                Kept::File {
                    sha256: hashed.sha256,
                    size: hashed.size,
                    mode: st.st_mode & 0o7777,
                    uid: st.st_uid,
                    gid: st.st_gid,
                    content: hashed.content,
                },
            );
        }
        Found::Symlink(target, st) => {
            let leads_to = linked_digest(dir, name, &path)?;
            kept.insert(
                path,
                Kept::Symlink {
                    target,
                    uid: st.st_uid,
                    gid: st.st_gid,
                    leads_to,
                },
            );
        }
        Found::Missing | Found::Dir | Found::Other(_) => {}
    }
    Ok(())
}

/// The baseline of the workdir's `.pi/` (pi before 0.87.1), its files kept in `kept`. A `.pi`
/// that is a symlink stops the iteration: pi would read through it.
fn take_pi_dir(
    manifest: &Manifest,
    kept: &mut BTreeMap<PathBuf, Kept>,
    total: &mut u64,
) -> Result<PiDir, ContextError> {
    let workdir = Path::new(&manifest.workdir);
    let parent = open_dir(workdir)?;
    let path = workdir.join(PI_PROJECT_DIR);
    match look(parent.as_fd(), PI_PROJECT_DIR, &path)? {
        Found::Dir => {}
        Found::Symlink(..) => {
            return Err(ContextError::Dir(format!(
                "{} is a symlink: pi would read its SYSTEM.md, APPEND_SYSTEM.md and \
                 settings.json through it",
                path.display()
            )))
        }
        Found::Missing | Found::File(_) | Found::Other(_) => return Ok(PiDir::Absent),
    }
    let st = rustix::fs::statat(parent.as_fd(), PI_PROJECT_DIR, AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| io_err(&path, "stat", e))?;
    let dir = crate::bounded_tree::open_dir_at(parent.as_fd(), OsStr::new(PI_PROJECT_DIR))
        .map_err(|e| io_err(&path, "open directory", e))?;
    for name in PI_PROJECT_FILES {
        keep_entry(dir.as_fd(), &path, name, kept, total)?;
    }
    Ok(PiDir::Dir {
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
    })
}

/// Removes `name` of `dir` (at `dir_path`) without following it.
fn remove(
    dir: BorrowedFd<'_>,
    name: &str,
    dir_path: &Path,
    path: &Path,
) -> Result<(), ContextError> {
    crate::bounded_tree::remove_at(dir, OsStr::new(name), &dir_path.display().to_string())
        .map(|_| ())
        .map_err(|e| io_err(path, "remove", std::io::Error::other(e.to_string())))
}

/// Makes the directory `name` of `dir` with `mode` and owner, where nothing is now.
fn make_dir(
    dir: BorrowedFd<'_>,
    name: &str,
    path: &Path,
    mode: u32,
    uid: u32,
    gid: u32,
) -> Result<(), ContextError> {
    rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o700))
        .map_err(|e| io_err(path, "mkdir", e))?;
    let fd = crate::bounded_tree::open_dir_at(dir, OsStr::new(name))
        .map_err(|e| io_err(path, "open directory", e))?;
    rustix::fs::fchown(&fd, Some(uid_of(uid)), Some(gid_of(gid)))
        .map_err(|e| io_err(path, "chown", e))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| io_err(path, "chmod", e))
}

/// The record of `path` set back: `restored` when the baseline held it, else `removed`.
fn reset_record(path: &Path, restored: bool, found: &Found) -> ContextResetRecord {
    ContextResetRecord {
        path: path.display().to_string(),
        action: if restored { "restored" } else { "removed" }.to_string(),
        was: found.kind().to_string(),
    }
}

/// Whether `found` is what the baseline kept (`kept`), a missing entry or a directory where it
/// kept nothing included.
fn same(
    dir: BorrowedFd<'_>,
    name: &str,
    path: &Path,
    kept: Option<&Kept>,
    found: &Found,
) -> Result<bool, ContextError> {
    Ok(match (kept, found) {
        (None, Found::Missing | Found::Dir) => true,
        (None, _) => false,
        (
            Some(Kept::File {
                sha256,
                size,
                mode,
                uid,
                gid,
                ..
            }),
            Found::File(st),
        ) => {
            st.st_mode & 0o7777 == *mode
                && (st.st_uid, st.st_gid) == (*uid, *gid)
                && st.st_size as u64 == *size
                // One the supervisor cannot read (the unprivileged mode, mode 000) differs.
                && hash_at(dir, name, path, 0).is_ok_and(|h| h.sha256 == *sha256)
        }
        (
            Some(Kept::Symlink {
                target, uid, gid, ..
            }),
            Found::Symlink(now, st),
        ) => now == target && (st.st_uid, st.st_gid) == (*uid, *gid),
        (Some(_), _) => false,
    })
}

/// Writes `kept` back as `name` of `dir` (where nothing is now): a new file with its content,
/// owner and mode, or a symlink with its target and owner.
fn restore(dir: BorrowedFd<'_>, name: &str, path: &Path, kept: &Kept) -> Result<(), ContextError> {
    match kept {
        Kept::File {
            mode,
            uid,
            gid,
            content,
            ..
        } => {
            let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW;
            let fd = rustix::fs::openat(
                dir,
                name,
                flags | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(|e| io_err(path, "create", e))?;
            rustix::fs::fchown(&fd, Some(uid_of(*uid)), Some(gid_of(*gid)))
                .map_err(|e| io_err(path, "chown", e))?;
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(*mode))
                .map_err(|e| io_err(path, "chmod", e))?;
            let mut file = std::fs::File::from(fd);
            file.write_all(content.as_deref().unwrap_or_default())
                .map_err(|e| io_err(path, "write", e))?;
        }
        Kept::Symlink {
            target, uid, gid, ..
        } => {
            rustix::fs::symlinkat(target.as_os_str(), dir, name)
                .map_err(|e| io_err(path, "symlink", e))?;
            rustix::fs::chownat(
                dir,
                name,
                Some(uid_of(*uid)),
                Some(gid_of(*gid)),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(|e| io_err(path, "chown", e))?;
        }
    }
    Ok(())
}

fn uid_of(uid: u32) -> rustix::fs::Uid {
    rustix::fs::Uid::from_raw_unchecked(uid)
}

fn gid_of(gid: u32) -> rustix::fs::Gid {
    rustix::fs::Gid::from_raw_unchecked(gid)
}

/// The record entry of a context file the runtime reads: a regular file with its digest, a
/// symlink with its target (the runtime follows it, the supervisor does not); `None` for
/// anything the runtime passes over (nothing there, a directory, a special file).
fn read_entry(
    dir: BorrowedFd<'_>,
    name: &str,
    path: &Path,
    scope: &str,
) -> Result<Option<ContextFileRecord>, ContextError> {
    let mut record = ContextFileRecord {
        path: path.display().to_string(),
        scope: scope.to_string(),
        sha256: None,
        bytes: None,
        link: None,
    };
    match look(dir, name, path)? {
        Found::File(_) => {
            // One the supervisor cannot read (the unprivileged mode, mode 000) is named only.
            if let Ok(hashed) = hash_at(dir, name, path, 0) {
                record.sha256 = Some(hex::encode(hashed.sha256));
                record.bytes = Some(hashed.size);
            }
        }
        Found::Symlink(target, _) => record.link = Some(target.to_string_lossy().into_owned()),
        Found::Missing | Found::Dir | Found::Other(_) => return Ok(None),
    }
    Ok(Some(record))
}

/// What the context step hands the launch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prepared {
    /// The record's `context_files`.
    pub record: ContextFilesRecord,
    /// Claude Code: the workdir's `CLAUDE.md`, passed with `--append-system-prompt-file`;
    /// OpenCode: the workdir's `AGENTS.md`, passed through its configuration's `instructions`.
    pub claude_md: Option<String>,
}

/// The context step, after the reap and verification, before launch: for `uploaded`, the
/// workspace's context files set back to the run's baseline (`kept`, where the caller keeps it
/// between iterations: taken now when it holds none for this manifest; `None` for a caller
/// that keeps none, which takes one for this iteration alone), then every context file the
/// runtime will read named. `None` for `command`.
pub fn prepare(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    version: Option<&str>,
    iteration: u32,
    kept: Option<&mut Option<Baseline>>,
) -> Result<Option<Prepared>, ContextError> {
    if manifest.runtime == Runtime::Command {
        return Ok(None);
    }
    let mode = manifest.agent.context_files;
    let mut prepared = Prepared {
        record: ContextFilesRecord {
            mode: mode.as_str().to_string(),
            ..ContextFilesRecord::default()
        },
        claude_md: None,
    };
    let mut own = None;
    let slot = kept.unwrap_or(&mut own);
    let mut to_baseline = |record: &mut ContextFilesRecord| -> Result<(), ContextError> {
        match slot.as_ref().filter(|b| b.fits(manifest, version)) {
            Some(baseline) => record.reset = baseline.reset(manifest)?,
            None => *slot = Some(Baseline::take(manifest, version, iteration)?),
        }
        record.baseline_iteration = slot.as_ref().map(Baseline::iteration);
        Ok(())
    };
    match mode {
        // pi 0.73 reads its `.pi/` prompts and settings whatever the flags: set back as under
        // `uploaded` (the context files themselves left alone), and the prompts named.
        ContextFiles::None if reads_pi_project(manifest, version) => {
            to_baseline(&mut prepared.record)?;
            let read = &mut prepared.record.read;
            pi_prompts(Path::new(&manifest.workdir), &manifest.user, read)?;
            return Ok(Some(prepared));
        }
        // OpenCode's `read` adds the instruction files below the workdir whatever it is
        // given: set back to the baseline and named.
        ContextFiles::None if manifest.runtime == Runtime::Opencode => {
            to_baseline(&mut prepared.record)?;
            let workdir = Path::new(&manifest.workdir);
            prepared.record.read = nested::named(workdir)?;
            return Ok(Some(prepared));
        }
        // Codex under `none` still reads its `CODEX_HOME` (the config dir's pinned file):
        // named below, the project's files not.
        ContextFiles::None if manifest.runtime == Runtime::Codex => {}
        ContextFiles::None => return Ok(Some(prepared)),
        ContextFiles::AsIs => {
            prepared.record.git_status = manifest.runtime == Runtime::Claude;
        }
        ContextFiles::Uploaded => to_baseline(&mut prepared.record)?,
    }
    let names = names(manifest.runtime, version);
    let config = PathBuf::from(&dirs.config);
    let config_dir = open_dir(&config)?;
    let read = &mut prepared.record.read;
    match manifest.runtime {
        Runtime::Pi | Runtime::Codex => {
            let mut dirs = vec![(config.clone(), "config")];
            if mode != ContextFiles::None {
                dirs.extend(project_dirs(manifest));
            }
            for (dir_path, scope) in dirs {
                let dir = open_dir(&dir_path)?;
                for name in names {
                    let path = dir_path.join(name);
                    if let Some(entry) = pi_entry(dir.as_fd(), name, &path, scope, &manifest.user)?
                    {
                        if !read.iter().any(|r| r.path == entry.path) {
                            read.push(entry);
                        }
                        break;
                    }
                }
            }
            if reads_pi_project(manifest, version) {
                pi_prompts(Path::new(&manifest.workdir), &manifest.user, read)?;
            }
        }
        Runtime::Claude => {
            let user = config.join("CLAUDE.md");
            read.extend(read_entry(
                config_dir.as_fd(),
                "CLAUDE.md",
                &user,
                "config",
            )?);
            claude_rules(config_dir.as_fd(), &config.join("rules"), 0, read)?;
            let workdir = Path::new(&manifest.workdir);
            let dir = open_dir(workdir)?;
            let path = workdir.join("CLAUDE.md");
            if let Some(entry) = read_entry(dir.as_fd(), "CLAUDE.md", &path, "workdir")? {
                // Claude Code is given a regular file only.
                if entry.link.is_none() {
                    prepared.claude_md = Some(entry.path.clone());
                    read.push(entry);
                }
            }
        }
        Runtime::Opencode => {
            let workdir = Path::new(&manifest.workdir);
            let dir = open_dir(workdir)?;
            let path = workdir.join("AGENTS.md");
            if let Some(entry) = read_entry(dir.as_fd(), "AGENTS.md", &path, "workdir")? {
                // OpenCode is given a regular file only.
                if entry.link.is_none() {
                    prepared.claude_md = Some(entry.path.clone());
                    read.push(entry);
                }
            }
            read.extend(nested::named(workdir)?);
        }
        Runtime::Command => {}
    }
    Ok(Some(prepared))
}

/// pi before 0.87.1: the workdir's `.pi/SYSTEM.md` and `.pi/APPEND_SYSTEM.md` it will read,
/// named in `read` (a `.pi` that is a symlink, which pi reads through, named as one).
fn pi_prompts(
    workdir: &Path,
    user: &AgentUser,
    read: &mut Vec<ContextFileRecord>,
) -> Result<(), ContextError> {
    let parent = open_dir(workdir)?;
    let path = workdir.join(PI_PROJECT_DIR);
    let dir = match look(parent.as_fd(), PI_PROJECT_DIR, &path)? {
        Found::Dir => crate::bounded_tree::open_dir_at(parent.as_fd(), OsStr::new(PI_PROJECT_DIR))
            .map_err(|e| io_err(&path, "open directory", e))?,
        Found::Symlink(..) => {
            read.extend(read_entry(
                parent.as_fd(),
                PI_PROJECT_DIR,
                &path,
                "workdir",
            )?);
            // pi reads through it: what it finds there is named too.
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK | OFlags::CLOEXEC;
            match rustix::fs::openat(parent.as_fd(), PI_PROJECT_DIR, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(_) => return Ok(()),
            }
        }
        Found::Missing | Found::File(_) | Found::Other(_) => return Ok(()),
    };
    for name in PI_PROJECT_PROMPTS {
        read.extend(pi_entry(
            dir.as_fd(),
            name,
            &path.join(name),
            "workdir",
            user,
        )?);
    }
    Ok(())
}

/// The most bytes of a file read through a symlink that are hashed for the record (past it the
/// link is named with its size only).
const MAX_LINKED_HASH: u64 = 64 << 20;

/// The record entry of a file pi would read as `name` of `dir`: as [`read_entry`] for what is
/// not a symlink. pi follows a symlink, and passes over one that leads to nothing it can read
/// as a regular file (dangling, a directory, a file the agent may not read) to try the next
/// name: such a link is `None`, so the search goes on as pi's does; one it reads is named with
/// its target and the digest and size of what it leads to, opened by the supervisor following
/// the link (without blocking on a fifo), checked to be a regular file the agent's uid or
/// groups may read by its mode.
fn pi_entry(
    dir: BorrowedFd<'_>,
    name: &str,
    path: &Path,
    scope: &str,
    user: &AgentUser,
) -> Result<Option<ContextFileRecord>, ContextError> {
    let Found::Symlink(target, _) = look(dir, name, path)? else {
        return read_entry(dir, name, path, scope);
    };
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::openat(dir, name, flags, Mode::empty()) else {
        return Ok(None);
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| io_err(path, "stat", e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || !agent_may_read(&st, user) {
        return Ok(None);
    }
    let mut record = ContextFileRecord {
        path: path.display().to_string(),
        scope: scope.to_string(),
        sha256: None,
        bytes: Some(st.st_size as u64),
        link: Some(target.to_string_lossy().into_owned()),
    };
    if (st.st_size as u64) <= MAX_LINKED_HASH {
        let hashed = hash_fd(fd, path, 0)?;
        record.sha256 = Some(hex::encode(hashed.sha256));
        record.bytes = Some(hashed.size);
    }
    Ok(Some(record))
}

/// The digest of what the symlink `name` of `dir` leads to when it is a regular file of at most
/// [`MAX_LINKED_HASH`] bytes (opened following it, without blocking on a fifo), else `None`.
fn linked_digest(
    dir: BorrowedFd<'_>,
    name: &str,
    path: &Path,
) -> Result<Option<[u8; 32]>, ContextError> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::openat(dir, name, flags, Mode::empty()) else {
        return Ok(None);
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| io_err(path, "stat", e))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
        || st.st_size as u64 > MAX_LINKED_HASH
    {
        return Ok(None);
    }
    Ok(Some(hash_fd(fd, path, 0)?.sha256))
}

/// Whether the agent's uid or groups may read a file of this owner and mode (root may read
/// anything).
fn agent_may_read(st: &rustix::fs::Stat, user: &AgentUser) -> bool {
    if user.uid == 0 {
        return true;
    }
    if st.st_uid == user.uid {
        return st.st_mode & 0o400 != 0;
    }
    if st.st_gid == user.gid || user.groups.contains(&st.st_gid) {
        return st.st_mode & 0o040 != 0;
    }
    st.st_mode & 0o004 != 0
}

/// Claude Code's user rules: every `*.md` below `rules/` of its config dir (`path`, in
/// `parent`), sorted, at most [`MAX_RULES`] and [`MAX_RULES_DEPTH`] deep.
fn claude_rules(
    parent: BorrowedFd<'_>,
    path: &Path,
    depth: usize,
    read: &mut Vec<ContextFileRecord>,
) -> Result<(), ContextError> {
    let name = path.file_name().unwrap_or_default();
    let dir = match crate::bounded_tree::open_dir_at(parent, name) {
        Ok(dir) => dir,
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
            ) =>
        {
            return Ok(())
        }
        Err(e) => return Err(io_err(path, "open directory", e)),
    };
    let mut names = crate::bounded_tree::entry_names(dir.as_fd())
        .map_err(|e| io_err(path, "read directory", e))?;
    names.sort();
    for entry in names {
        if read.len() >= MAX_RULES {
            break;
        }
        let child = path.join(&entry);
        let Some(text) = entry.to_str() else { continue };
        match look(dir.as_fd(), text, &child)? {
            Found::Dir if depth < MAX_RULES_DEPTH => {
                claude_rules(dir.as_fd(), &child, depth + 1, read)?;
            }
            Found::File(_) | Found::Symlink(..) if text.ends_with(".md") => {
                read.extend(read_entry(dir.as_fd(), text, &child, "config")?);
            }
            _ => {}
        }
    }
    Ok(())
}

mod nested;

#[cfg(test)]
mod tests;
