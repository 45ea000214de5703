//! The host's side of an offered upload: the listing of a tree (every file hashed), and the tar
//! stream of the files a `need` bitmap asks for. In the core crate so the host and the upload
//! benchmark send the very same bytes.

use super::{dir_line, file_line, needed, ListedFile};
use crate::unpack::check_entry_path;
use rustix::fs::OFlags;
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{self, Read, Write};
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

/// Lists the tree under `dir` (names sorted, a directory before what is in it; links never
/// followed), hashing every file on every core, and writes the listing to `out` as it is made:
/// each line as soon as every line before it is known, so sending the listing overlaps hashing
/// the tree. Anything but regular files and directories, and names an upload refuses, are
/// errors naming the path, found by the walk before a line is written; a file that cannot be
/// read once the listing has begun (it vanished, say) is an error too, and `out` then holds
/// part of a listing.
pub fn list_tree_to(dir: &Path, out: &mut dyn Write) -> io::Result<Offered> {
    let entries = walk(dir)?;
    let files: Vec<usize> = (0..entries.len()).filter(|&i| !entries[i].dir).collect();
    let mut offered = Offered {
        files: Vec::with_capacity(files.len()),
    };
    let mut emitted = 0;
    hash_in_order(&files, &entries, |k, file| {
        // Directories up to the next file, then the file itself (`k` is the next in order).
        let upto = files.get(k).copied().unwrap_or(entries.len());
        while emitted < upto {
            out.write_all(dir_line(&entries[emitted].rel).as_bytes())?;
            emitted += 1;
        }
        if let Some(file) = file {
            let entry = &entries[emitted];
            out.write_all(file_line(&entry.rel, &file).as_bytes())?;
            offered
                .files
                .push((entry.rel.clone(), entry.path.clone(), file.size));
            emitted += 1;
        }
        Ok(())
    })?;
    Ok(offered)
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
        let mut done: Vec<Option<ListedFile>> = vec![None; files.len()];
        let mut k = 0;
        // The first file (in listing order) that failed: files are taken in that order, so
        // every one before it was taken already and still arrives.
        let mut failed: Option<(usize, io::Error)> = None;
        let mut emitted: io::Result<()> = Ok(());
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
                if let Err(e) = emit(k, Some(file)) {
                    emitted = Err(e);
                    break;
                }
                k += 1;
            }
            if emitted.is_err() || failed.as_ref().is_some_and(|(first, _)| k >= *first) {
                break;
            }
        }
        if let (Ok(()), Some((_, e))) = (&emitted, failed) {
            emitted = Err(e);
        }
        stop.store(true, Ordering::Relaxed);
        drop(rx);
        // Every worker joined (a panicked one left to the scope would panic it).
        let mut panicked = false;
        for w in workers {
            panicked |= w.join().is_err();
        }
        emitted?;
        if panicked || k < files.len() {
            return Err(io::Error::other("a hashing thread stopped"));
        }
        emit(k, None)
    })
}

fn hash_file(path: &Path, buf: &mut [u8]) -> io::Result<ListedFile> {
    let (mut f, meta) = open_listed(path)?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    loop {
        let n = f.read(buf).map_err(at(path, "read"))?;
        if n == 0 {
            return Ok(ListedFile {
                sha256: hasher.finalize().into(),
                size,
                exec: meta.permissions().mode() & 0o100 != 0,
            });
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
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
