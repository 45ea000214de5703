//! Safe unpacking of a tar stream into a directory that is replaced whole.
//!
//! Used by the supervisor for `upload` (plugins, adapters, the workspace) and by the host to
//! unpack collected iteration records, so it is platform-neutral Unix code (no Linux-only
//! calls). The archive is untrusted:
//!
//! - Only regular files and directories are accepted. Symlinks, hardlinks, character and block
//!   devices, fifos and every other entry type are refused.
//! - Paths must be relative, UTF-8, without `..` components, without `\n`, `\r` or `\` (the
//!   names the tree hash refuses), and at most [`MAX_PATH_LEN`] bytes.
//! - At most `max_entries` entries and `max_bytes` bytes of file content (the sizes the
//!   headers give: a tar carries no holes, sparse entries are refused), and with
//!   [`UnpackLimits::part`] at most its bytes below the directories it names (with
//!   [`PartLimit::entry_cost`], every file and directory there counted at what a file system
//!   allocates for it: [`file_cost`], [`DIR_COST`]).
//!
//! The tree is unpacked into a fresh sibling `<dest>.<random>.staging` (mode 0700 while
//! unpacking), then `dest` is replaced atomically: the old one is renamed aside, the staging
//! directory is renamed into place, the old one is removed. Any refusal removes the staging
//! directory and leaves `dest` untouched. Nothing is ever written outside the staging directory:
//! every directory is created by this code (`mkdirat`, which never follows a final symlink)
//! inside a fresh directory no one else can write, and files are created with
//! `O_CREAT|O_EXCL|O_NOFOLLOW`.
//!
//! Entries are created relative to directory descriptors, from the staging directory down one
//! component at a time, never through a full path: an entry path of up to [`MAX_PATH_LEN`] bytes
//! unpacks below a destination of any length (the full path may exceed `PATH_MAX`), in a bounded
//! number of descriptors at any depth. Replaced and failed trees are removed with
//! [`crate::bounded_tree`], at any depth in a bounded number of descriptors.
//!
//! Modes keep only the owner-exec bit: files 0644 or 0755, directories 0755 (owner-only 0600,
//! 0700 and 0700 with [`UnpackLimits::private`], as the host unpacks collected records).

use crate::bounded_tree::{self, DirStack};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

pub mod offer;

/// The longest accepted entry path, in bytes.
pub const MAX_PATH_LEN: usize = 4096;

/// Limits of one unpack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Most entries (files and directories) accepted.
    pub max_entries: u64,
    /// Most bytes of file content accepted (the sum of every file's size).
    pub max_bytes: u64,
    /// Owner-only modes (directories 0700, files 0600, 0700 when executable) instead of
    /// 0755/0644: for collected records on the host, which hold what the agent saw and wrote.
    pub private: bool,
    /// A tighter bound on the file content below some top-level directories (a collected
    /// record's copies of what the agent left); `None`: only `max_bytes`.
    pub part: Option<PartLimit>,
}

/// The block a file system allocates in: ext4's and XFS's default block and the page a tmpfs
/// allocates. A file's data takes whole blocks, and a directory at least one.
pub const BLOCK_BYTES: u64 = 4096;
/// The least any entry costs, its inode: 256 bytes on ext4 (from preallocated tables), 512 on
/// XFS (allocated as files are made). An empty file takes no block, but is not free: a record
/// of a million empty files would cost a host a million inodes.
pub const INODE_BYTES: u64 = 512;
/// What one directory costs a host's file system: one block (ext4 and XFS give every directory
/// at least one, and one block holds about a hundred names).
pub const DIR_COST: u64 = BLOCK_BYTES;

/// What a regular file of `size` bytes costs a host's file system: its size rounded up to whole
/// blocks ([`BLOCK_BYTES`]), and at least an inode ([`INODE_BYTES`]) when empty. The one
/// accounting of a record's copies, by the supervisor that copies them and by the host that
/// unpacks them: no other entry type is copied into a record or unpacked from one.
pub fn file_cost(size: u64) -> u64 {
    size.div_ceil(BLOCK_BYTES)
        .saturating_mul(BLOCK_BYTES)
        .max(INODE_BYTES)
}

/// Most bytes below some of an archive's top-level directories together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartLimit {
    /// The top-level directories counted (`output`, `workspace`, …).
    pub dirs: &'static [&'static str],
    /// Most bytes below them together.
    pub max_bytes: u64,
    /// Whether every entry below them (they included) counts what a file system allocates for
    /// it (a file [`file_cost`], a directory [`DIR_COST`]); otherwise only files count, by
    /// their size.
    pub entry_cost: bool,
}

impl PartLimit {
    /// Whether an entry whose path components are `parts` (a file's parent directories, or a
    /// directory's own path) is below one of [`Self::dirs`], or is one.
    fn holds(&self, parts: &[String]) -> bool {
        parts
            .first()
            .is_some_and(|top| self.dirs.contains(&top.as_str()))
    }
}

/// What the entries below a [`PartLimit`]'s directories took so far.
#[derive(Debug, Clone, Copy)]
struct PartCharge {
    limit: PartLimit,
    used: u64,
}

impl PartCharge {
    /// Charges `cost`, refusing the entry `raw` when it takes the total past the limit.
    fn charge(&mut self, cost: u64, raw: &[u8]) -> Result<(), UnpackError> {
        let used = self.used.saturating_add(cost);
        if used > self.limit.max_bytes {
            let what = if self.limit.entry_cost {
                "of files and directories (each counted in whole 4096-byte blocks)"
            } else {
                "of file content"
            };
            return Err(UnpackError::refused(
                raw,
                format!(
                    "more than {} bytes {what} below {}/",
                    self.limit.max_bytes,
                    self.limit.dirs.join("/, ")
                ),
            ));
        }
        self.used = used;
        Ok(())
    }
}

impl UnpackLimits {
    /// The mode of every directory unpacked.
    fn dir_mode(&self) -> u32 {
        if self.private {
            0o700
        } else {
            0o755
        }
    }

    /// The mode of a file, executable or not.
    fn file_mode(&self, exec: bool) -> u32 {
        match (self.private, exec) {
            (false, false) => 0o644,
            (false, true) => 0o755,
            (true, false) => 0o600,
            (true, true) => 0o700,
        }
    }
}

impl Default for UnpackLimits {
    fn default() -> Self {
        UnpackLimits {
            max_entries: 100_000,
            max_bytes: 4 << 30,
            private: false,
            part: None,
        }
    }
}

/// What an unpack created.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnpackReport {
    /// Regular files written.
    pub files: u64,
    /// Directories created (the destination itself not counted).
    pub dirs: u64,
    /// Bytes of file content written.
    pub bytes: u64,
}

/// Why an archive was refused or could not be unpacked.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// An entry breaks a rule; nothing was written.
    #[error("tar entry {entry:?} refused: {rule}")]
    Refused {
        /// The entry's path as found in the archive (lossy UTF-8).
        entry: String,
        /// The rule it breaks.
        rule: String,
    },
    /// The destination itself is not acceptable.
    #[error("destination {0}: {1}")]
    Destination(String, String),
    /// The archive is not a valid tar stream.
    #[error("tar stream is not valid: {0}")]
    Format(String),
    /// A line of an offered listing ([`offer`]) is not valid; nothing was written.
    #[error("listing line {line}: {why}")]
    Listing {
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A file system error while unpacking or replacing.
    #[error("{0}: {1}")]
    Io(String, io::Error),
}

impl UnpackError {
    fn refused(entry: &[u8], rule: impl Into<String>) -> UnpackError {
        UnpackError::Refused {
            entry: String::from_utf8_lossy(entry).into_owned(),
            rule: rule.into(),
        }
    }
}

/// Checks an entry path and returns its normal components (`.` components dropped).
pub fn check_entry_path(raw: &[u8]) -> Result<Vec<String>, UnpackError> {
    if raw.len() > MAX_PATH_LEN {
        return Err(UnpackError::refused(
            &raw[..64],
            format!("path longer than {MAX_PATH_LEN} bytes"),
        ));
    }
    let Ok(text) = std::str::from_utf8(raw) else {
        return Err(UnpackError::refused(raw, "name is not valid UTF-8"));
    };
    if let Some(bad) = text.chars().find(|c| matches!(c, '\n' | '\r' | '\\')) {
        let what = match bad {
            '\n' => "newline",
            '\r' => "carriage return",
            _ => "backslash",
        };
        return Err(UnpackError::refused(
            raw,
            format!("name contains a {what} (refused by the tree hash)"),
        ));
    }
    if text.contains('\0') {
        return Err(UnpackError::refused(raw, "name contains a NUL byte"));
    }
    if text.starts_with('/') {
        return Err(UnpackError::refused(raw, "absolute path"));
    }
    let mut parts = Vec::new();
    for component in Path::new(text).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => return Err(UnpackError::refused(raw, "`..` component")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(UnpackError::refused(raw, "absolute path"))
            }
        }
    }
    Ok(parts)
}

/// A random-enough suffix for sibling names (pid, time, a counter).
fn random_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{:x}{:x}{n:x}",
        std::process::id(),
        nanos & 0xffff_ffff_ffff
    )
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> UnpackError + '_ {
    move |e| UnpackError::Io(path.display().to_string(), e)
}

/// `dest` with a suffix appended to its file name (a sibling).
fn sibling(dest: &Path, suffix: &str) -> Result<PathBuf, UnpackError> {
    let name = dest.file_name().ok_or_else(|| {
        UnpackError::Destination(dest.display().to_string(), "has no file name".into())
    })?;
    let mut name = name.to_os_string();
    name.push(format!(".{}.{suffix}", random_suffix()));
    Ok(dest.with_file_name(name))
}

/// Unpacks the tar stream `reader` into `dest`, replacing it whole (see the module docs).
/// With `owner`, every entry (and `dest`) is chowned to `(uid, gid)`; otherwise they keep the
/// caller's identity (root in the supervisor).
pub fn unpack_tar(
    reader: impl Read,
    dest: &Path,
    limits: &UnpackLimits,
    owner: Option<(u32, u32)>,
) -> Result<UnpackReport, UnpackError> {
    check_dest(dest)?;
    let staging = make_staging(dest)?;
    match unpack_into(reader, &staging, limits, owner) {
        Ok(report) => match finish(&staging, dest, owner, limits.dir_mode()) {
            Ok(()) => Ok(report),
            Err(err) => {
                discard(&staging);
                Err(err)
            }
        },
        Err(err) => {
            discard(&staging);
            Err(err)
        }
    }
}

/// Checks a destination: absolute, without `.` or `..` components, with a parent.
fn check_dest(dest: &Path) -> Result<(), UnpackError> {
    if !dest.is_absolute()
        || dest
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(UnpackError::Destination(
            dest.display().to_string(),
            "must be an absolute path without `.` or `..` components".into(),
        ));
    }
    if dest.parent().is_none() {
        return Err(UnpackError::Destination(
            dest.display().to_string(),
            "has no parent".into(),
        ));
    }
    Ok(())
}

/// Creates `dest`'s parent when missing and a fresh staging sibling of `dest` (mode 0700).
fn make_staging(dest: &Path) -> Result<PathBuf, UnpackError> {
    if let Some(parent) = dest.parent() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(io_err(parent))?;
    }
    let staging = sibling(dest, "staging")?;
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(io_err(&staging))?;
    Ok(staging)
}

/// Removes a staging or replaced tree (of any depth), logging what could not be removed.
fn discard(path: &Path) {
    if let Err(e) = bounded_tree::remove_path(path) {
        tracing::warn!("unpack: could not remove {}: {e}", path.display());
    }
}

/// Sets the final mode and owner of the staging root, then swaps it into place.
fn finish(
    staging: &Path,
    dest: &Path,
    owner: Option<(u32, u32)>,
    mode: u32,
) -> Result<(), UnpackError> {
    fs::set_permissions(staging, fs::Permissions::from_mode(mode)).map_err(io_err(staging))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::lchown(staging, Some(uid), Some(gid)).map_err(io_err(staging))?;
    }
    let old = match fs::symlink_metadata(dest) {
        Ok(_) => {
            let old = sibling(dest, "old")?;
            fs::rename(dest, &old).map_err(io_err(dest))?;
            Some(old)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(UnpackError::Io(dest.display().to_string(), e)),
    };
    if let Err(e) = fs::rename(staging, dest) {
        if let Some(old) = &old {
            let _ = fs::rename(old, dest);
        }
        return Err(UnpackError::Io(dest.display().to_string(), e));
    }
    if let Some(old) = old {
        discard(&old);
    }
    Ok(())
}

/// The directories of the staging tree an entry goes into, opened from the staging root down
/// one component at a time (never through a full path or a symlink). The last entry's
/// directory stays current, since archives list neighbours together: the next entry's
/// directory is reached by going up to the common part of both paths and down from there
/// ([`DirStack`]: at most its [`bounded_tree::OPEN_DIRS`] deepest directories open, the others
/// reopened through `..` and checked), so a deep archive costs one step per level it moves.
struct Dirs {
    stack: DirStack,
    /// The names of the current directory's path below the staging root.
    names: Vec<String>,
    mode: u32,
    owner: Option<(u32, u32)>,
    /// Directories created.
    created: u64,
    /// What the entries below the part limit's directories took ([`UnpackLimits::part`]).
    part: Option<PartCharge>,
}

impl Dirs {
    /// The directory `parts` below the root, each component created (mode, owner) when missing
    /// and refused when it is a file this archive wrote. Each directory created below the part
    /// limit's directories (or as one) is charged [`DIR_COST`] when the limit counts entries.
    fn dir(&mut self, parts: &[String], raw: &[u8]) -> Result<BorrowedFd<'_>, UnpackError> {
        let charged = self
            .part
            .is_some_and(|p| p.limit.entry_cost && p.limit.holds(parts));
        let io = |e: io::Error| UnpackError::Io(String::from_utf8_lossy(raw).into_owned(), e);
        let common = self
            .names
            .iter()
            .zip(parts)
            .take_while(|(open, part)| open == part)
            .count();
        self.stack.truncate(common).map_err(io)?;
        self.names.truncate(common);
        for part in &parts[common..] {
            let before = self.created;
            let fd = ensure_dir_at(
                self.stack.dir(),
                part,
                raw,
                self.mode,
                self.owner,
                &mut self.created,
            )?;
            if let Some(charge) = self.part.as_mut().filter(|_| charged) {
                if self.created > before {
                    charge.charge(DIR_COST, raw)?;
                }
            }
            self.stack.push(fd).map_err(io)?;
            self.names.push(part.clone());
        }
        Ok(self.stack.dir())
    }
}

/// Opens the directory `name` in `parent` (inside staging, created by us), creating it when
/// missing (counted in `created`, chowned to `owner`).
fn ensure_dir_at(
    parent: BorrowedFd<'_>,
    name: &str,
    raw: &[u8],
    mode: u32,
    owner: Option<(u32, u32)>,
    created: &mut u64,
) -> Result<OwnedFd, UnpackError> {
    let io = |e: io::Error| UnpackError::Io(String::from_utf8_lossy(raw).into_owned(), e);
    let file_in_the_way =
        || UnpackError::refused(raw, "a path component is already a file in this archive");
    match bounded_tree::open_dir_at(parent, name.as_ref()) {
        Ok(fd) => return Ok(fd),
        Err(e) if e.raw_os_error() == Some(Errno::NOTDIR.raw_os_error()) => {
            return Err(file_in_the_way())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(mode)) {
        Ok(()) => {}
        Err(Errno::EXIST) => return Err(file_in_the_way()),
        Err(e) => return Err(io(e.into())),
    }
    *created += 1;
    let fd = bounded_tree::open_dir_at(parent, name.as_ref()).map_err(io)?;
    if let Some((uid, gid)) = owner {
        chown(fd.as_fd(), uid, gid).map_err(io)?;
    }
    Ok(fd)
}

/// `fchown` of an open file or directory.
fn chown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    let uid = rustix::fs::Uid::from_raw_unchecked(uid);
    let gid = rustix::fs::Gid::from_raw_unchecked(gid);
    Ok(rustix::fs::fchown(fd, Some(uid), Some(gid))?)
}

fn unpack_into(
    reader: impl Read,
    staging: &Path,
    limits: &UnpackLimits,
    owner: Option<(u32, u32)>,
) -> Result<UnpackReport, UnpackError> {
    let mut archive = tar::Archive::new(reader);
    let entries = archive
        .entries()
        .map_err(|e| UnpackError::Format(e.to_string()))?;
    let mut report = UnpackReport::default();
    let mut count: u64 = 0;
    let root = bounded_tree::open_dir(staging).map_err(io_err(staging))?;
    let mut dirs = Dirs {
        stack: DirStack::new(root).map_err(io_err(staging))?,
        names: Vec::new(),
        mode: limits.dir_mode(),
        owner,
        created: 0,
        part: limits.part.map(|limit| PartCharge { limit, used: 0 }),
    };
    // One copy buffer for every entry: `io::copy`'s 8 KiB stack buffer costs a write syscall per
    // 8 KiB, a third of the upload time for a 200 MB tree.
    let mut buf = vec![0u8; COPY_BUFFER];
    for entry in entries {
        let mut entry = entry.map_err(|e| UnpackError::Format(e.to_string()))?;
        let raw = entry.path_bytes().into_owned();
        count += 1;
        if count > limits.max_entries {
            return Err(UnpackError::refused(
                &raw,
                format!("more than {} entries", limits.max_entries),
            ));
        }
        let kind = entry.header().entry_type();
        let is_dir = match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => false,
            tar::EntryType::Directory => true,
            tar::EntryType::Symlink => {
                return Err(UnpackError::refused(&raw, "symlinks are refused"))
            }
            tar::EntryType::Link => {
                return Err(UnpackError::refused(&raw, "hardlinks are refused"))
            }
            tar::EntryType::Char => {
                return Err(UnpackError::refused(&raw, "character devices are refused"))
            }
            tar::EntryType::Block => {
                return Err(UnpackError::refused(&raw, "block devices are refused"))
            }
            tar::EntryType::Fifo => return Err(UnpackError::refused(&raw, "fifos are refused")),
            other => {
                return Err(UnpackError::refused(
                    &raw,
                    format!("entry type {:?} is refused", other.as_byte() as char),
                ))
            }
        };
        let parts = check_entry_path(&raw)?;
        if is_dir {
            // `./` itself is the destination, created already.
            if !parts.is_empty() {
                dirs.dir(&parts, &raw)?;
            }
            continue;
        }
        let Some((last, parents)) = parts.split_last() else {
            return Err(UnpackError::refused(
                &raw,
                "a file entry with an empty name",
            ));
        };
        let size = entry.size();
        if report.bytes.saturating_add(size) > limits.max_bytes {
            return Err(UnpackError::refused(
                &raw,
                format!("more than {} bytes of file content", limits.max_bytes),
            ));
        }
        // Charged before anything of it is written, at the size its header gives: the most it
        // writes.
        if let Some(charge) = dirs.part.as_mut().filter(|p| p.limit.holds(parents)) {
            let cost = if charge.limit.entry_cost {
                file_cost(size)
            } else {
                size
            };
            charge.charge(cost, &raw)?;
        }
        let exec = entry
            .header()
            .mode()
            .map(|m| m & 0o100 != 0)
            .unwrap_or(false);
        let mode = limits.file_mode(exec);
        let io = |e: io::Error| UnpackError::Io(String::from_utf8_lossy(&raw).into_owned(), e);
        let parent = dirs.dir(parents, &raw)?;
        let file = rustix::fs::openat(
            parent,
            last.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )
        .map_err(|e| match e {
            Errno::EXIST => UnpackError::refused(&raw, "duplicate entry"),
            other => io(other.into()),
        })?;
        let mut file = File::from(file);
        let written = copy_with(&mut (&mut entry).take(size), &mut file, &mut buf)
            .map_err(|e| UnpackError::Format(format!("{}: {e}", String::from_utf8_lossy(&raw))))?;
        // The umask may have narrowed the mode given at creation.
        file.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(io)?;
        if let Some((uid, gid)) = owner {
            chown(file.as_fd(), uid, gid).map_err(io)?;
        }
        drop(file);
        report.bytes += written;
        report.files += 1;
    }
    report.dirs = dirs.created;
    Ok(report)
}

/// Size of the buffer entries are copied through.
const COPY_BUFFER: usize = 256 * 1024;

/// Copies `r` to `w` through `buf`, returning the bytes copied.
fn copy_with(r: &mut impl io::Read, w: &mut impl io::Write, buf: &mut [u8]) -> io::Result<u64> {
    let mut total = 0u64;
    loop {
        let n = match r.read(buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        w.write_all(&buf[..n])?;
        total += n as u64;
    }
}

#[cfg(test)]
mod tests;
