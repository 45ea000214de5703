//! The host's side of an offered upload: the listing of a tree, made from the one walk that
//! hashed it ([`OfferListing`]) or written out while the tree is hashed ([`list_tree_to`]), and
//! the tar stream of the files a `need` bitmap asks for; the walker of plain tar uploads
//! ([`walk`]). In the core crate, behind its `host` feature (never in `pitcrew-init`), so the
//! host and the upload benchmarks send the very same bytes.

use super::{dir_line, file_line, needed, ListedFile};
use crate::protocol::ListingDigest;
use crate::tree_hash::{FileRecord, HashProgress, TreeDigest, TreeFormat};
use crate::unpack::check_entry_path;
use rustix::fs::OFlags;
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{self, Write};
use std::os::fd::AsFd as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

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

/// A tree's offered listing as [`list_tree_to`] wrote it: its SHA-256, length and lines (what
/// a later upload names it by), and the files a tar stream of what the sandbox lacks reads.
#[derive(Debug)]
pub struct StreamedListing {
    /// The SHA-256 of the listing written.
    pub sha256: [u8; 32],
    /// Its length in bytes.
    pub bytes: u64,
    /// Its lines (entries).
    pub lines: u64,
    /// The listed files, for [`write_needed`].
    pub offered: Offered,
}

impl StreamedListing {
    /// The listing named by its digest, as an `upload` carries it.
    pub fn named(&self) -> ListingDigest {
        ListingDigest {
            sha256: hex::encode(self.sha256),
            bytes: self.bytes,
            lines: self.lines,
        }
    }
}

/// Lists the tree under `dir` (names sorted, a directory before what is in it; links never
/// followed), hashing every file on every core, and writes the listing to `out` as it is made:
/// each line as soon as every line before it is known, so sending the listing overlaps hashing
/// the tree. The bytes are those of [`OfferListing::of_tree`] for the same tree. Anything but
/// regular files and directories, and names an upload refuses, are errors naming the path,
/// found by the walk before a line is written; a file that cannot be read once the listing has
/// begun (it vanished, say) is an error too, and `out` then holds part of a listing.
pub fn list_tree_to(dir: &Path, out: &mut dyn Write) -> io::Result<StreamedListing> {
    let entries = walk(dir)?;
    let files: Vec<usize> = (0..entries.len()).filter(|&i| !entries[i].dir).collect();
    let mut offered = Offered {
        files: Vec::with_capacity(files.len()),
    };
    let mut hasher = Sha256::new();
    let mut bytes = 0u64;
    let mut line = |out: &mut dyn Write, text: &str| -> io::Result<()> {
        hasher.update(text.as_bytes());
        bytes += text.len() as u64;
        out.write_all(text.as_bytes())
    };
    let mut emitted = 0;
    hash_in_order(&files, &entries, |k, file| {
        // Directories up to the next file, then the file itself (`k` is the next in order).
        let upto = files.get(k).copied().unwrap_or(entries.len());
        while emitted < upto {
            line(out, &dir_line(&entries[emitted].rel))?;
            emitted += 1;
        }
        if let Some(file) = file {
            let entry = &entries[emitted];
            line(out, &file_line(&entry.rel, &file))?;
            offered
                .files
                .push((entry.rel.clone(), entry.path.clone(), file.size));
            emitted += 1;
        }
        Ok(())
    })?;
    Ok(StreamedListing {
        sha256: hasher.finalize().into(),
        bytes,
        lines: entries.len() as u64,
        offered,
    })
}

/// Hashes `entries[files[k]]` for every `k` on one thread per core (at most 8) and hands each
/// to `emit` on the calling thread in order of `k`, as soon as those before it are done; then
/// calls `emit(files.len(), None)` once. The first error (a file, or `emit`'s) stops the
/// hashing and is returned.
fn hash_in_order(
    files: &[usize],
    entries: &[Walked],
    mut emit: impl FnMut(usize, Option<ListedFile>) -> io::Result<()>,
) -> io::Result<()> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    // A failure carries its place: what came before it is still emitted, in order.
    let (tx, rx) = mpsc::channel::<Result<(usize, ListedFile), (usize, io::Error)>>();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let tx = tx.clone();
                let (next, stop) = (&next, &stop);
                s.spawn(move || {
                    let mut buf = vec![0u8; 256 * 1024];
                    while !stop.load(Ordering::Relaxed) {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&i) = files.get(k) else { return };
                        let hashed = hash_file(&entries[i].path, &mut buf)
                            .map(|f| (k, f))
                            .map_err(|e| (k, e));
                        let failed = hashed.is_err();
                        if tx.send(hashed).is_err() || failed {
                            return;
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        let emitted = emit_in_order(files.len(), &rx, &stop, &mut emit);
        stop.store(true, Ordering::Relaxed);
        drop(rx);
        // Every worker joined (a panicked one left to the scope would panic it).
        let mut panicked = false;
        for w in workers {
            panicked |= w.join().is_err();
        }
        let k = emitted?;
        if panicked || k < files.len() {
            return Err(io::Error::other("a hashing thread stopped"));
        }
        emit(k, None)
    })
}

/// What a hashing thread of [`hash_in_order`] sends: file `k` hashed, or why it failed.
type HashedAt = Result<(usize, ListedFile), (usize, io::Error)>;

/// Takes the hashed files from `rx` and hands them to `emit` in order, until all `total` are
/// emitted, the first failure (in listing order) is reached, or the threads are gone; sets
/// `stop` on a failure. Returns how many were emitted.
fn emit_in_order(
    total: usize,
    rx: &mpsc::Receiver<HashedAt>,
    stop: &AtomicBool,
    emit: &mut impl FnMut(usize, Option<ListedFile>) -> io::Result<()>,
) -> io::Result<usize> {
    let mut done: Vec<Option<ListedFile>> = vec![None; total];
    let mut k = 0;
    // The first file (in listing order) that failed: files are taken in that order, so every
    // one before it was taken already and still arrives.
    let mut failed: Option<(usize, io::Error)> = None;
    for hashed in rx.iter() {
        match hashed {
            Ok((at, file)) => done[at] = Some(file),
            Err((at, e)) => {
                stop.store(true, Ordering::Relaxed);
                if failed.as_ref().is_none_or(|(first, _)| at < *first) {
                    failed = Some((at, e));
                }
            }
        }
        while let Some(file) = done.get_mut(k).and_then(Option::take) {
            emit(k, Some(file))?;
            k += 1;
        }
        if failed.as_ref().is_some_and(|(first, _)| k >= *first) {
            break;
        }
    }
    match failed {
        Some((_, e)) => Err(e),
        None => Ok(k),
    }
}

/// One file of [`list_tree_to`]: opened as [`open_listed`] opens it, hashed through the crate's
/// one SHA-256 read loop, its execute bit from the `fstat` of the descriptor read.
fn hash_file(path: &Path, buf: &mut [u8]) -> io::Result<ListedFile> {
    let (f, meta) = open_listed(path)?;
    let (sha256, size) =
        crate::tree_hash::read_hashed(f.as_fd(), buf, None, Some(meta.len()), |_| {})
            .map_err(|e| at(path, "read")(io::Error::from_raw_os_error(e.raw_os_error())))?;
    Ok(ListedFile {
        sha256,
        size,
        exec: meta.permissions().mode() & 0o100 != 0,
    })
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
