//! The host's side of an offered upload: the listing of a tree, made from the one walk that
//! hashed it ([`OfferListing`]), and the tar stream of the files a `need` bitmap asks for; the
//! walker of plain tar uploads ([`walk`]). In the core crate, behind its `host` feature (never in
//! `pitcrew-init`), so the host and the upload benchmarks send the very same bytes.

use super::{dir_line, file_line, needed, ListedFile};
use crate::protocol::ListingDigest;
use crate::tree_hash::{FileRecord, HashProgress, TreeDigest, TreeFormat};
use crate::unpack::check_entry_path;
use rustix::fs::OFlags;
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// A tree being offered: each listed file in listing order, for the tar stream of those the
/// sandbox lacks.
#[derive(Debug, Default)]
pub struct Offered {
    /// `(path in the listing, path on the host, size)` of every listed file.
    pub files: Vec<(String, PathBuf, u64)>,
}

impl Offered {
    /// The bytes of the tar stream [`write_needed`] writes for `bitmap`, about (headers of
    /// 512 bytes, content rounded up to 512).
    pub fn needed_tar_bytes(&self, bitmap: &[u8]) -> u64 {
        self.files
            .iter()
            .enumerate()
            .filter(|(n, _)| needed(bitmap, *n))
            .map(|(_, (_, _, size))| size.div_ceil(512) * 512 + 512)
            .sum()
    }
}

fn at<'a>(path: &'a Path, what: &str) -> impl FnOnce(io::Error) -> io::Error + 'a {
    let what = what.to_string();
    move |e| io::Error::new(e.kind(), format!("{}: {what}: {e}", path.display()))
}

fn cannot_upload(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}: cannot be uploaded: {why}", path.display()),
    )
}

const NOT_FILE_OR_DIR: &str =
    "not a regular file or directory (symlinks and special files are never uploaded)";

/// Opens a file of a tree being uploaded for reading: never through a symlink, never blocking
/// on a fifo put in its place, and refused unless it is a regular file. Its metadata with it.
pub fn open_listed(path: &Path) -> io::Result<(fs::File, fs::Metadata)> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32)
        .open(path)
        .map_err(at(path, "open"))?;
    let meta = f.metadata().map_err(at(path, "stat"))?;
    if !meta.is_file() {
        return Err(cannot_upload(path, NOT_FILE_OR_DIR));
    }
    Ok((f, meta))
}

/// A tree's offered listing, made once from the walk that hashed the tree
/// ([`crate::tree_hash`]): the listing's bytes, its SHA-256, and the files a tar stream of what
/// the supervisor lacks reads.
#[derive(Debug)]
pub struct OfferListing {
    /// The listing (lines of [`crate::unpack::offer`], in upload order).
    pub bytes: Vec<u8>,
    /// Its SHA-256.
    pub sha256: [u8; 32],
    /// Its lines (entries).
    pub lines: u64,
    /// The listed files, for [`write_needed`].
    pub offered: Offered,
}

impl OfferListing {
    /// Walks and hashes the tree under `root` once: its digest in `format` (what a manifest
    /// pins) and its offer listing (what an upload sends). Errors name the path.
    pub fn of_tree(
        root: &Path,
        format: TreeFormat,
        progress: Option<&HashProgress>,
    ) -> io::Result<(TreeDigest, OfferListing)> {
        let digest = crate::tree_hash::hash_tree_watched(root, format, progress)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let listing = OfferListing::from_digest(root, &digest)?;
        Ok((digest, listing))
    }

    /// The offer listing of the tree under `root` that `digest` was computed from: no file is
    /// read again. A digest made from a listing rather than a walk (no `executables`) has each
    /// file's execute bit looked up (`lstat`, never following a link).
    pub fn from_digest(root: &Path, digest: &TreeDigest) -> io::Result<OfferListing> {
        let listing = &digest.listing;
        // Upload order: names sorted, a directory before what is in it (the order of the
        // paths' component lists).
        let mut entries: Vec<(&str, Option<&FileRecord>)> = listing
            .dirs
            .iter()
            .map(|d| (d.as_str(), None))
            .chain(listing.files.iter().map(|f| (f.path.as_str(), Some(f))))
            .collect();
        entries.sort_unstable_by(|a, b| a.0.split('/').cmp(b.0.split('/')));
        let mut bytes = Vec::with_capacity(listing.files.len() * 110 + listing.dirs.len() * 20);
        let mut offered = Offered {
            files: Vec::with_capacity(listing.files.len()),
        };
        for (rel, file) in &entries {
            let path = root.join(rel);
            check_entry_path(rel.as_bytes()).map_err(|e| cannot_upload(&path, &e.to_string()))?;
            let Some(file) = file else {
                bytes.extend_from_slice(dir_line(rel).as_bytes());
                continue;
            };
            let mut sha256 = [0u8; 32];
            hex::decode_to_slice(&file.sha256, &mut sha256)
                .map_err(|_| cannot_upload(&path, "its listed sha256 is not hex"))?;
            let exec = match &digest.executables {
                Some(set) => set.contains(*rel),
                None => {
                    let meta = fs::symlink_metadata(&path).map_err(at(&path, "stat"))?;
                    if !meta.is_file() {
                        return Err(cannot_upload(&path, NOT_FILE_OR_DIR));
                    }
                    meta.permissions().mode() & 0o100 != 0
                }
            };
            let listed = ListedFile {
                sha256,
                size: file.size,
                exec,
            };
            bytes.extend_from_slice(file_line(rel, &listed).as_bytes());
            offered.files.push((rel.to_string(), path, file.size));
        }
        Ok(OfferListing {
            sha256: Sha256::digest(&bytes).into(),
            lines: entries.len() as u64,
            bytes,
            offered,
        })
    }

    /// The listing named by its digest, as an `upload` carries it.
    pub fn named(&self) -> ListingDigest {
        ListingDigest {
            sha256: hex::encode(self.sha256),
            bytes: self.bytes.len() as u64,
            lines: self.lines,
        }
    }
}

/// One entry of [`walk`].
#[derive(Debug)]
pub struct Walked {
    /// Its path below the tree's root, `/`-separated.
    pub rel: String,
    /// Its path on the host.
    pub path: PathBuf,
    /// A directory, else a regular file (as the walk found it: open it with [`open_listed`]).
    pub dir: bool,
}

/// Every entry of the tree under `dir` in upload order (names sorted, a directory before what
/// is in it), links never followed, each entry's type from its directory (no `stat` where the
/// file system says). Anything but regular files and directories, and names an upload refuses
/// ([`check_entry_path`]), are errors naming the path: the one rule for what the host sends,
/// offered or as a plain tar stream.
pub fn walk(dir: &Path) -> io::Result<Vec<Walked>> {
    let mut out = Vec::new();
    walk_below(&mut out, dir, Path::new(""))?;
    Ok(out)
}

fn walk_below(out: &mut Vec<Walked>, dir: &Path, rel: &Path) -> io::Result<()> {
    let here = dir.join(rel);
    let mut found: Vec<_> = fs::read_dir(&here)
        .and_then(|d| {
            d.map(|e| e.and_then(|e| Ok((e.file_name(), e.file_type()?))))
                .collect()
        })
        .map_err(at(&here, "reading the directory"))?;
    found.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, kind) in found {
        let rel = rel.join(&name);
        let path = dir.join(&rel);
        let text = rel
            .to_str()
            .ok_or_else(|| cannot_upload(&path, "the name is not valid UTF-8"))?
            .to_string();
        check_entry_path(text.as_bytes()).map_err(|e| cannot_upload(&path, &e.to_string()))?;
        if !kind.is_dir() && !kind.is_file() {
            return Err(cannot_upload(&path, NOT_FILE_OR_DIR));
        }
        out.push(Walked {
            rel: text,
            path,
            dir: kind.is_dir(),
        });
        if kind.is_dir() {
            walk_below(out, dir, &rel)?;
        }
    }
    Ok(())
}

/// Writes the tar stream of the files of `offered` that `bitmap` asks for, in listing order
/// (deterministic headers: mode 0644 or 0755, fixed owner and time).
pub fn write_needed(w: &mut dyn Write, offered: &Offered, bitmap: &[u8]) -> io::Result<()> {
    let mut b = tar::Builder::new(w);
    b.mode(tar::HeaderMode::Deterministic);
    b.follow_symlinks(false);
    b.sparse(false);
    for (n, (rel, path, _)) in offered.files.iter().enumerate() {
        if !needed(bitmap, n) {
            continue;
        }
        let (mut f, _) = open_listed(path)?;
        b.append_file(rel, &mut f)
            .map_err(at(path, "adding to the tar stream"))?;
    }
    b.into_inner()?.flush()
}

/// How big a tree is as an upload: [`tree_size`]'s count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeSize {
    /// Entries below the root (files, directories and anything else).
    pub entries: u64,
    /// Bytes of regular files.
    pub file_bytes: u64,
    /// About the bytes of its tar stream: a 512-byte header per entry, each file's data
    /// rounded up to 512, and the 1024-byte end.
    pub tar_bytes: u64,
}

/// Counts the tree under `dir` without hashing it, walked without recursion and without
/// following links (a tree of any depth), stopping once `stop_at` entries were seen: what the
/// host checks against an upload's limits before it sends anything. Unreadable directories are
/// skipped (the upload itself names them).
pub fn tree_size(dir: &Path, stop_at: u64) -> TreeSize {
    let mut size = TreeSize {
        entries: 0,
        file_bytes: 0,
        tar_bytes: 1024,
    };
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            size.entries += 1;
            if size.entries >= stop_at {
                return size;
            }
            size.tar_bytes += 512;
            match e.file_type() {
                Ok(t) if t.is_dir() => pending.push(e.path()),
                Ok(t) if t.is_file() => {
                    let len = e.metadata().map_or(0, |m| m.len());
                    size.file_bytes += len;
                    size.tar_bytes += len.div_ceil(512) * 512;
                }
                _ => {}
            }
        }
    }
    size
}

#[cfg(test)]
mod tests;
