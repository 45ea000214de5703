//! Content-addressed uploads (`upload` with `offer`): the host first offers a listing of the
//! tree, and only the files the supervisor cannot find already follow in the tar stream.
//!
//! The listing is lines of text in the order of the host's walk (a directory before what is in
//! it), paths checked as tar entry paths are ([`check_entry_path`]):
//!
//! ```text
//! d <path>
//! f <sha256, 64 lowercase hex> <size in bytes> <x or -> <path>
//! ```
//!
//! A listing is refused whole, before anything is written, when a line breaks a rule, a path
//! is listed twice, or it exceeds the limits. A host that cannot finish a listing it has begun
//! to send (a file vanished while it was being hashed) ends it with [`ABORT_LINE`], which no
//! supervisor accepts. When `dest` already holds exactly the listed tree (`kept`: with no
//! extended attribute an owner sets), nothing is needed and it stays as it is. Otherwise
//! [`Assembly::prepare`] creates a fresh staging directory (as [`super::unpack_tar`] does) with
//! every listed directory, then looks for each file's content where it already is:
//!
//! - an earlier file of this listing with the same sha256 and size: copied once that one is in
//!   staging;
//! - the same path in the tree being replaced, when it is a regular file of the listed size
//!   whose content hashes to the listed sha256: moved into staging when it has one link,
//!   already belongs to the tree's owner and every extended attribute its owner could have set
//!   (`user.*`, POSIX ACLs) could be removed (`moving`, `xattrs`), else copied into a new file
//!   (a reflink where the file system offers one) and the copy hashed. A copy is created by the supervisor
//!   in a directory no one else can enter: never a hard link to what was there, and nothing
//!   written to the old file afterwards reaches it.
//!
//! Then, for what is still missing, the other trees the sandbox holds (those it was offered
//! before, [`elsewhere`]): a file whose listing there gives the same sha256 and size is copied
//! from there (never moved) and the copy hashed.
//!
//! The other files are needed ([`Assembly::need_bitmap`]). The tar stream that follows
//! ([`Assembly::receive`]) must hold exactly those, in listing order, each with its listed size
//! and sha256 (hashed as it is written), and nothing else. Only then does [`Assembly::finish`]
//! swap the staging tree in for `dest`; a refusal, or an assembly dropped unfinished (the
//! connection went away), moves what it moved back and removes the staging tree, leaving `dest`
//! as it was.

use super::{
    check_dest, check_entry_path, chown, copy_with, discard, finish, make_staging, Dirs,
    UnpackError, UnpackLimits, COPY_BUFFER, MAX_PATH_LEN,
};
use crate::bounded_tree::{self, DirStack};
pub use elsewhere::OtherTree;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The longest listing line: a path of [`MAX_PATH_LEN`] bytes and the fields before it.
pub const MAX_LINE: usize = MAX_PATH_LEN + 128;

/// The line a host ends a listing with when it cannot finish it: refused like any line that is
/// neither `d ` nor `f `, by every supervisor, so nothing of the upload is written. It starts
/// with a newline, so a line the host was cut off in the middle of cannot take it in and pass
/// for a whole one (an empty line is skipped).
pub const ABORT_LINE: &[u8] = b"\n! the host could not finish this listing\n";

/// What a listed file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedFile {
    /// SHA-256 of its content.
    pub sha256: [u8; 32],
    /// Its size in bytes.
    pub size: u64,
    /// Whether its owner-execute bit is set.
    pub exec: bool,
}

/// The listing line of a directory (`path` relative, `/`-separated), newline included.
pub fn dir_line(path: &str) -> String {
    format!("d {path}\n")
}

/// The listing line of a file, newline included.
pub fn file_line(path: &str, file: &ListedFile) -> String {
    let exec = if file.exec { 'x' } else { '-' };
    format!(
        "f {} {} {exec} {path}\n",
        hex::encode(file.sha256),
        file.size
    )
}

/// Whether file number `ordinal` of a listing (files counted alone, in listing order) is set in
/// a need bitmap: bit `ordinal % 8` (least significant first) of byte `ordinal / 8`.
pub fn needed(bitmap: &[u8], ordinal: usize) -> bool {
    bitmap
        .get(ordinal / 8)
        .is_some_and(|b| b & (1 << (ordinal % 8)) != 0)
}

/// One parsed listing entry.
#[derive(Debug)]
struct Item {
    /// Its normal components joined by `/` (one string: a path of 2,048 components costs no
    /// more than its bytes).
    path: String,
    /// `None` for a directory.
    file: Option<ListedFile>,
}

impl Item {
    /// The path's components.
    fn parts(&self) -> Vec<String> {
        self.path.split('/').map(str::to_string).collect()
    }

    /// The last component, and the components of the directory it is in.
    fn name_and_parents(&self) -> (String, Vec<String>) {
        match self.path.rsplit_once('/') {
            Some((dir, name)) => (
                name.to_string(),
                dir.split('/').map(str::to_string).collect(),
            ),
            None => (self.path.clone(), Vec::new()),
        }
    }
}

/// The staging directory `parents`, created as needed ([`Dirs::dir`]).
fn staging_dir<'a>(
    dirs: &'a mut Option<Dirs>,
    parents: &[String],
    raw: &[u8],
) -> Result<BorrowedFd<'a>, UnpackError> {
    dirs.as_mut().ok_or_else(no_staging)?.dir(parents, raw)
}

fn bad_line(line: usize, why: impl Into<String>) -> UnpackError {
    UnpackError::Listing {
        line,
        why: why.into(),
    }
}

/// The line number (from 1) of entry `n` of `listing` (empty lines are not entries).
fn line_of(listing: &[u8], n: usize) -> usize {
    listing
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, l)| !l.is_empty())
        .nth(n)
        .map_or(0, |(i, _)| i + 1)
}

/// Parses a listing, checking it against the limits before anything is written.
fn parse(listing: &[u8], limits: &UnpackLimits) -> Result<Vec<Item>, UnpackError> {
    let mut items = Vec::new();
    let mut bytes = 0u64;
    if !listing.is_empty() && !listing.ends_with(b"\n") {
        return Err(bad_line(
            listing.split(|&b| b == b'\n').count(),
            "the listing does not end with a newline",
        ));
    }
    for (i, raw) in listing.split(|&b| b == b'\n').enumerate() {
        let n = i + 1;
        if raw.is_empty() {
            continue;
        }
        if items.len() as u64 >= limits.max_entries {
            return Err(bad_line(
                n,
                format!("more than {} entries", limits.max_entries),
            ));
        }
        let line = std::str::from_utf8(raw).map_err(|_| bad_line(n, "not valid UTF-8"))?;
        let (file, path) = if let Some(path) = line.strip_prefix("d ") {
            (None, path)
        } else if let Some(rest) = line.strip_prefix("f ") {
            let mut fields = rest.splitn(4, ' ');
            let (Some(sha), Some(size), Some(exec), Some(path)) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                return Err(bad_line(
                    n,
                    "a file line is `f <sha256> <size> <x|-> <path>`",
                ));
            };
            let mut sha256 = [0u8; 32];
            if sha.len() != 64 || sha.bytes().any(|b| b.is_ascii_uppercase()) {
                return Err(bad_line(n, "the sha256 is not 64 lowercase hex digits"));
            }
            hex::decode_to_slice(sha, &mut sha256)
                .map_err(|_| bad_line(n, "the sha256 is not 64 lowercase hex digits"))?;
            let size: u64 = size
                .parse()
                .map_err(|_| bad_line(n, format!("size {size:?} is not a number of bytes")))?;
            let exec = match exec {
                "x" => true,
                "-" => false,
                other => return Err(bad_line(n, format!("mode {other:?} is neither x nor -"))),
            };
            bytes = bytes.saturating_add(size);
            if bytes > limits.max_bytes {
                return Err(bad_line(
                    n,
                    format!("more than {} bytes of file content", limits.max_bytes),
                ));
            }
            (Some(ListedFile { sha256, size, exec }), path)
        } else if line.starts_with('!') {
            return Err(bad_line(n, "the host abandoned the listing"));
        } else {
            return Err(bad_line(n, "a line starts with `d ` or `f `"));
        };
        let parts = check_entry_path(path.as_bytes())?;
        if parts.is_empty() {
            return Err(bad_line(n, "an entry with an empty path"));
        }
        items.push(Item {
            path: parts.join("/"),
            file,
        });
    }
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    for (n, item) in items.iter().enumerate() {
        if !seen.insert(item.path.as_str()) {
            return Err(bad_line(
                line_of(listing, n),
                format!("{} is listed twice", item.path),
            ));
        }
    }
    Ok(items)
}

/// The manifest listing of the tree an offered listing describes (every file's path, sha256
/// and size, sorted by path; every directory, sorted): what a host computes for a manifest tree
/// from the same walk. The listing is checked as an upload's is (`limits`).
pub fn manifest_listing(
    listing: &[u8],
    limits: &UnpackLimits,
) -> Result<crate::tree_hash::TreeListing, UnpackError> {
    let mut out = crate::tree_hash::TreeListing::default();
    for item in parse(listing, limits)? {
        match item.file {
            Some(f) => out.files.push(crate::tree_hash::FileRecord {
                path: item.path,
                sha256: hex::encode(f.sha256),
                size: f.size,
            }),
            None => out.dirs.push(item.path),
        }
    }
    out.files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    out.dirs.sort_unstable();
    Ok(out)
}

/// What an offered upload did, sent in the `ok` of the `upload` request.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OfferReport {
    /// Files in the tree.
    pub files: u64,
    /// Directories created (the destination itself not counted).
    pub dirs: u64,
    /// Bytes of file content in the tree.
    pub bytes: u64,
    /// Files taken from what the sandbox held (the tree replaced: same path, same content;
    /// or another tree): moved, or copied.
    pub reused_files: u64,
    /// Their bytes.
    pub reused_bytes: u64,
    /// Of those, the files moved (renamed) rather than copied.
    pub moved_files: u64,
    /// Of those, the files copied from another tree of the sandbox ([`elsewhere`]).
    #[serde(default)]
    pub from_other_trees: u64,
    /// The destination already held exactly this tree: kept as it was (nothing copied, moved
    /// or swapped; `reused_files` counts its files).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kept: bool,
    /// Files copied from another file of the same tree with the same content.
    pub duplicate_files: u64,
    /// Files that came in the tar stream.
    pub sent_files: u64,
    /// Their bytes.
    pub sent_bytes: u64,
}

/// An offered tree being assembled in its staging directory (see the module docs).
pub struct Assembly {
    dest: PathBuf,
    /// `None` once swapped in; removed on drop otherwise.
    staging: Option<PathBuf>,
    items: Vec<Item>,
    /// The staging tree's directories (`None` when the tree is kept as it is).
    dirs: Option<Dirs>,
    limits: UnpackLimits,
    owner: Option<(u32, u32)>,
    /// Item indices of the needed files, in listing order.
    needed: Vec<usize>,
    /// Bit per listed file: needed.
    bitmap: Vec<u8>,
    /// `(target, source)` item indices: copied from staging once the tar stream is in.
    duplicates: Vec<(usize, usize)>,
    /// The tree being replaced (never followed if `dest` is a link), when there is one.
    old_root: Option<OwnedFd>,
    /// Files moved from the replaced tree into staging: `(item index, its old mode)`, moved
    /// back if the assembly does not finish.
    moved: Vec<(usize, u32)>,
    /// Per item, the `(st_dev, st_ino)` of an old file already hashed and found to hold the
    /// listed content (by the check for a tree kept as it is).
    verified: Vec<Option<(u64, u64)>>,
    report: OfferReport,
}

impl std::fmt::Debug for Assembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembly")
            .field("dest", &self.dest)
            .field("staging", &self.staging)
            .field("entries", &self.items.len())
            .field("needed", &self.needed.len())
            .finish_non_exhaustive()
    }
}

impl Drop for Assembly {
    fn drop(&mut self) {
        if let Some(staging) = self.staging.take() {
            self.move_back();
            discard(&staging);
        }
    }
}

impl Assembly {
    /// Parses `listing` for `dest` and assembles what is already in the sandbox.
    pub fn prepare(
        dest: &Path,
        listing: &[u8],
        limits: &UnpackLimits,
        owner: Option<(u32, u32)>,
    ) -> Result<Assembly, UnpackError> {
        Assembly::prepare_with(dest, listing, limits, owner, &[])
    }

    /// [`Assembly::prepare`], also copying the content of files the replaced tree lacks from
    /// `others`, the other trees the sandbox holds ([`elsewhere`]).
    pub fn prepare_with(
        dest: &Path,
        listing: &[u8],
        limits: &UnpackLimits,
        owner: Option<(u32, u32)>,
        others: &[OtherTree],
    ) -> Result<Assembly, UnpackError> {
        let items = parse(listing, limits)?;
        check_dest(dest)?;
        let files = items.iter().filter(|i| i.file.is_some()).count();
        let mut assembly = Assembly {
            dest: dest.to_path_buf(),
            staging: None,
            items,
            dirs: None,
            limits: *limits,
            owner,
            needed: Vec::new(),
            bitmap: vec![0; files.div_ceil(8)],
            duplicates: Vec::new(),
            old_root: None,
            moved: Vec::new(),
            verified: Vec::new(),
            report: OfferReport::default(),
        };
        let verdict = owner
            .or_else(moving::own_ids)
            .map(|ids| kept::holds_exactly(dest, &assembly.items, limits, ids, COPY_BUFFER))
            .unwrap_or_default();
        if verdict.exact {
            let bytes = assembly
                .items
                .iter()
                .filter_map(|i| i.file.map(|f| f.size))
                .sum();
            assembly.report = OfferReport {
                files: files as u64,
                bytes,
                reused_files: files as u64,
                reused_bytes: bytes,
                kept: true,
                ..OfferReport::default()
            };
            return Ok(assembly);
        }
        assembly.verified = verdict.verified;
        let staging = make_staging(dest)?;
        // From here on, dropping the assembly removes the staging directory.
        assembly.staging = Some(staging.clone());
        let stack = bounded_tree::open_dir(&staging)
            .and_then(DirStack::new)
            .map_err(|e| UnpackError::Io(staging.display().to_string(), e))?;
        assembly.dirs = Some(Dirs {
            stack,
            names: Vec::new(),
            mode: limits.dir_mode(),
            owner,
            created: 0,
            // A part limit bounds collected records, which come as tar streams, not offers.
            part: None,
        });
        assembly.gather(others)?;
        Ok(assembly)
    }

    /// Creates every listed directory, copies what the replaced tree already holds (then what
    /// `others` hold), and notes which files are duplicates and which are needed.
    fn gather(&mut self, others: &[OtherTree]) -> Result<(), UnpackError> {
        self.old_root = bounded_tree::open_dir(&self.dest).ok();
        let mut old_parent: Option<(Vec<String>, OwnedFd)> = None;
        // Content already placed or asked for, by sha256 and size (a listing that gives one
        // sha256 two sizes gets each asked for, and refused when the bytes come).
        let mut first_with: HashMap<([u8; 32], u64), usize> = HashMap::new();
        let mut buf = vec![0u8; COPY_BUFFER];
        let mut ordinal = 0usize;
        // Files the replaced tree did not have: (item, ordinal among the files).
        let mut missing = Vec::new();
        for i in 0..self.items.len() {
            let raw = self.items[i].path.clone();
            let parts = self.items[i].parts();
            let Some(file) = self.items[i].file else {
                staging_dir(&mut self.dirs, &parts, raw.as_bytes())?;
                continue;
            };
            let this = ordinal;
            ordinal += 1;
            self.report.files += 1;
            self.report.bytes += file.size;
            if let Some(&source) = first_with.get(&(file.sha256, file.size)) {
                self.duplicates.push((i, source));
                continue;
            }
            first_with.insert((file.sha256, file.size), i);
            let (name, parents) = self.items[i].name_and_parents();
            let (name, parents) = (name.as_str(), parents.as_slice());
            let old = self
                .old_root
                .as_ref()
                .and_then(|root| old_file(root.as_fd(), &mut old_parent, parents, name, &file));
            if let Some(old) = old {
                let old_dir = old_parent.as_ref().map(|(_, fd)| fd.as_fd());
                let reused = match old_dir.map(|d| self.move_in(i, &old, d, &file, &mut buf)) {
                    Some(Move::Moved) => true,
                    Some(Move::Differs) => false,
                    Some(Move::Refused(err)) => return Err(err),
                    None | Some(Move::NotMovable) => {
                        self.copy_in(&old, parents, name, &file, &raw, &mut buf)?
                    }
                };
                if reused {
                    self.report.reused_files += 1;
                    self.report.reused_bytes += file.size;
                    continue;
                }
            }
            missing.push((i, this));
        }
        self.copy_from_others(&mut missing, others, &mut buf)?;
        for (i, this) in missing {
            self.needed.push(i);
            self.bitmap[this / 8] |= 1 << (this % 8);
        }
        Ok(())
    }

    /// Copies `old` into staging as `parents/name` and keeps it when the copy's content is the
    /// listed one; removes it and returns false otherwise.
    fn copy_in(
        &mut self,
        old: &File,
        parents: &[String],
        name: &str,
        file: &ListedFile,
        raw: &str,
        buf: &mut [u8],
    ) -> Result<bool, UnpackError> {
        let io = |e: io::Error| UnpackError::Io(raw.to_string(), e);
        let mode = self.limits.file_mode(file.exec);
        let owner = self.owner;
        let parent = staging_dir(&mut self.dirs, parents, raw.as_bytes())?;
        let mut copy = create_at(parent, name, mode, raw)?;
        let digest = copy_hashed(old, &mut copy, file.size, buf).map_err(io)?;
        if digest != Some(file.sha256) {
            drop(copy);
            rustix::fs::unlinkat(parent, name, AtFlags::empty()).map_err(|e| io(e.into()))?;
            return Ok(false);
        }
        set_mode_owner(&copy, mode, owner).map_err(io)?;
        Ok(true)
    }

    /// Which listed files the tar stream must bring (see [`needed`]).
    pub fn need_bitmap(&self) -> &[u8] {
        &self.bitmap
    }

    /// How many files are needed, and their bytes.
    pub fn need(&self) -> (u64, u64) {
        let bytes = self
            .needed
            .iter()
            .filter_map(|&i| self.items[i].file.map(|f| f.size))
            .sum();
        (self.needed.len() as u64, bytes)
    }

    /// Takes the tar stream of the needed files (see the module docs).
    pub fn receive(&mut self, reader: impl Read) -> Result<(), UnpackError> {
        let mut archive = tar::Archive::new(reader);
        let entries = archive
            .entries()
            .map_err(|e| UnpackError::Format(e.to_string()))?;
        let mut buf = vec![0u8; COPY_BUFFER];
        let mut next = 0usize;
        for entry in entries {
            let mut entry = entry.map_err(|e| UnpackError::Format(e.to_string()))?;
            let raw = entry.path_bytes().into_owned();
            if !matches!(
                entry.header().entry_type(),
                tar::EntryType::Regular | tar::EntryType::Continuous
            ) {
                return Err(UnpackError::refused(
                    &raw,
                    "only the needed files may follow an offered listing (its directories come from the listing)",
                ));
            }
            let path = check_entry_path(&raw)?.join("/");
            let Some(&i) = self.needed.get(next) else {
                return Err(UnpackError::refused(
                    &raw,
                    "more files than the supervisor asked for",
                ));
            };
            let item = &self.items[i];
            let Some(file) = item.file else {
                return Err(UnpackError::refused(
                    &raw,
                    "a directory where a file was needed",
                ));
            };
            if path != item.path {
                return Err(UnpackError::refused(
                    &raw,
                    format!("not the next file asked for ({})", item.path),
                ));
            }
            if entry.size() != file.size {
                return Err(UnpackError::refused(
                    &raw,
                    format!("{} bytes, listed as {}", entry.size(), file.size),
                ));
            }
            let (name, parents) = item.name_and_parents();
            let (name, parents) = (name.as_str(), parents.as_slice());
            let mode = self.limits.file_mode(file.exec);
            let owner = self.owner;
            let io = |e: io::Error| UnpackError::Io(String::from_utf8_lossy(&raw).into_owned(), e);
            let parent = staging_dir(&mut self.dirs, parents, &raw)?;
            let mut out = create_at(parent, name, mode, &String::from_utf8_lossy(&raw))?;
            let mut hashing = HashingWriter {
                inner: &mut out,
                hasher: Sha256::new(),
            };
            let written = copy_with(&mut (&mut entry).take(file.size), &mut hashing, &mut buf)
                .map_err(|e| {
                    UnpackError::Format(format!("{}: {e}", String::from_utf8_lossy(&raw)))
                })?;
            let digest: [u8; 32] = hashing.hasher.finalize().into();
            if written != file.size || digest != file.sha256 {
                return Err(UnpackError::refused(
                    &raw,
                    "its content does not match the sha256 the listing gave",
                ));
            }
            set_mode_owner(&out, mode, owner).map_err(io)?;
            self.report.sent_files += 1;
            self.report.sent_bytes += written;
            next += 1;
        }
        if let Some(&i) = self.needed.get(next) {
            return Err(UnpackError::refused(
                self.items[i].path.as_bytes(),
                "the tar stream ended before this needed file",
            ));
        }
        Ok(())
    }

    /// Copies the duplicates, then swaps the complete tree in for `dest`.
    pub fn finish(mut self) -> Result<OfferReport, UnpackError> {
        let mut buf = vec![0u8; COPY_BUFFER];
        for (target, source) in std::mem::take(&mut self.duplicates) {
            let (source, target) = (&self.items[source], &self.items[target]);
            let raw = target.path.clone();
            let io = |e: io::Error| UnpackError::Io(raw.clone(), e);
            let (name, parents) = source.name_and_parents();
            let (name, parents) = (name.as_str(), parents.as_slice());
            let parent = staging_dir(&mut self.dirs, parents, raw.as_bytes())?;
            let from = File::from(
                rustix::fs::openat(
                    parent,
                    name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| io(e.into()))?,
            );
            let Some(file) = target.file else {
                return Err(UnpackError::refused(
                    raw.as_bytes(),
                    "a directory listed as a copy",
                ));
            };
            let mode = self.limits.file_mode(file.exec);
            let (name, parents) = target.name_and_parents();
            let (name, parents) = (name.as_str(), parents.as_slice());
            let parent = staging_dir(&mut self.dirs, parents, raw.as_bytes())?;
            let mut to = create_at(parent, name, mode, &raw)?;
            // The source was hashed when it was written into this root-only staging tree.
            if !clone(&from, &to) {
                copy_with(&mut (&from).take(file.size), &mut to, &mut buf).map_err(io)?;
            }
            set_mode_owner(&to, mode, self.owner).map_err(io)?;
            self.report.duplicate_files += 1;
        }
        self.report.dirs = self.dirs.as_ref().map_or(0, |d| d.created);
        let Some(staging) = self.staging.take() else {
            // Kept as it is: `dest` already holds the tree.
            return Ok(std::mem::take(&mut self.report));
        };
        match finish(&staging, &self.dest, self.owner, self.limits.dir_mode()) {
            Ok(()) => {
                self.moved.clear();
                Ok(std::mem::take(&mut self.report))
            }
            Err(err) => {
                // `dest` is back in place: what was moved out of it goes back on drop.
                self.staging = Some(staging);
                Err(err)
            }
        }
    }
}

/// Why a staging directory is missing: the tree is kept as it is, and nothing may be added.
fn no_staging() -> UnpackError {
    UnpackError::Io(
        "staging".into(),
        io::Error::other("no staging directory: the tree at the destination is kept as it is"),
    )
}

/// A `Write` that hashes what passes through it.
struct HashingWriter<'a, W: Write> {
    inner: &'a mut W,
    hasher: Sha256,
}

impl<W: Write> Write for HashingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Creates `name` in the staging directory `parent` (readable back, for hashing a reflink).
fn create_at(
    parent: BorrowedFd<'_>,
    name: &str,
    mode: u32,
    raw: &str,
) -> Result<File, UnpackError> {
    rustix::fs::openat(
        parent,
        name,
        OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map(File::from)
    .map_err(|e| match e {
        Errno::EXIST => UnpackError::refused(raw.as_bytes(), "listed twice"),
        other => UnpackError::Io(raw.to_string(), other.into()),
    })
}

/// Gives a staging file its final mode (the umask may have narrowed it) and owner.
fn set_mode_owner(file: &File, mode: u32, owner: Option<(u32, u32)>) -> io::Result<()> {
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    if let Some((uid, gid)) = owner {
        chown(file.as_fd(), uid, gid)?;
    }
    Ok(())
}

/// The file `parents/name` of the replaced tree, opened without following links, when it is a
/// regular file of the listed size. `cache` keeps the last parent directory opened (a listing
/// names neighbours together).
fn old_file(
    root: BorrowedFd<'_>,
    cache: &mut Option<(Vec<String>, OwnedFd)>,
    parents: &[String],
    name: &str,
    listed: &ListedFile,
) -> Option<File> {
    if cache.as_ref().is_none_or(|(names, _)| names != parents) {
        *cache = None;
        let mut dir = rustix::io::dup(root).ok()?;
        for part in parents {
            dir = bounded_tree::open_dir_at(dir.as_fd(), part.as_ref()).ok()?;
        }
        *cache = Some((parents.to_vec(), dir));
    }
    let (_, dir) = cache.as_ref()?;
    // O_NONBLOCK: a fifo planted there opens without waiting for a writer, then is refused.
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    (FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
        && u64::try_from(st.st_size).ok() == Some(listed.size))
    .then(|| File::from(fd))
}

/// A reflink of `from` into the empty `to`, where the file system offers one.
fn clone(from: &File, to: &File) -> bool {
    #[cfg(target_os = "linux")]
    {
        rustix::fs::ioctl_ficlone(to, from).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (from, to);
        false
    }
}

/// Copies at most `size + 1` bytes of `from` into `to` and returns the sha256 of the copy, or
/// `None` when its length is not `size`. A reflink is hashed by reading the copy back.
fn copy_hashed(
    from: &File,
    to: &mut File,
    size: u64,
    buf: &mut [u8],
) -> io::Result<Option<[u8; 32]>> {
    if clone(from, to) {
        return moving::hash(to, size, buf);
    }
    let mut hashing = HashingWriter {
        inner: to,
        hasher: Sha256::new(),
    };
    let n = copy_with(&mut from.take(size + 1), &mut hashing, buf)?;
    Ok((n == size).then(|| hashing.hasher.finalize().into()))
}

pub mod delta;
pub mod elsewhere;
#[cfg(feature = "host")]
pub mod host;
mod kept;
mod moving;
mod xattrs;

use moving::Move;

#[cfg(test)]
mod tests;
