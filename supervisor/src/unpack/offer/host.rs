//! The host's side of an offered upload: the listing of a tree (every file hashed), and the tar
//! stream of the files a `need` bitmap asks for. In the core crate so the host and the upload
//! benchmark send the very same bytes.

use super::{dir_line, file_line, needed, ListedFile};
use crate::unpack::check_entry_path;
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A tree ready to be offered: its listing, and each listed file in listing order.
#[derive(Debug, Default)]
pub struct Offered {
    /// The listing lines.
    pub listing: Vec<u8>,
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

/// Lists the tree under `dir` (names sorted, a directory before what is in it; links never
/// followed), hashing every file (on every core: the walk first, then the files shared out).
/// Anything but regular files and directories, and names an upload refuses, are errors naming
/// the path.
pub fn list_tree(dir: &Path) -> io::Result<Offered> {
    let entries = walk(dir)?;
    let files: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].exec.is_some())
        .collect();
    let digests = hash_all(&files, &entries)?;
    let mut offered = Offered::default();
    let mut digests = digests.into_iter();
    for entry in entries {
        match entry.exec {
            None => offered
                .listing
                .extend_from_slice(dir_line(&entry.rel).as_bytes()),
            Some(exec) => {
                let (sha256, size) = digests.next().unwrap_or_default();
                let file = ListedFile { sha256, size, exec };
                offered
                    .listing
                    .extend_from_slice(file_line(&entry.rel, &file).as_bytes());
                offered.files.push((entry.rel, entry.path, size));
            }
        }
    }
    Ok(offered)
}

/// One entry of [`walk`].
#[derive(Debug)]
pub struct Walked {
    /// Its path below the tree's root, `/`-separated.
    pub rel: String,
    /// Its path on the host.
    pub path: PathBuf,
    /// `None` for a directory; for a file, whether its owner-execute bit is set.
    pub exec: Option<bool>,
}

/// Every entry of the tree under `dir` in upload order (names sorted, a directory before what
/// is in it), links never followed. Anything but regular files and directories, and names an
/// upload refuses ([`check_entry_path`]), are errors naming the path: the one rule for what the
/// host sends, offered or as a plain tar stream.
pub fn walk(dir: &Path) -> io::Result<Vec<Walked>> {
    let mut out = Vec::new();
    walk_below(&mut out, dir, Path::new(""))?;
    Ok(out)
}

fn walk_below(out: &mut Vec<Walked>, dir: &Path, rel: &Path) -> io::Result<()> {
    let here = dir.join(rel);
    let mut names: Vec<_> = fs::read_dir(&here)
        .and_then(|d| d.map(|e| e.map(|e| e.file_name())).collect())
        .map_err(at(&here, "reading the directory"))?;
    names.sort();
    for name in names {
        let rel = rel.join(&name);
        let path = dir.join(&rel);
        let refused = |why: String| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: cannot be uploaded: {why}", path.display()),
            )
        };
        let text = rel
            .to_str()
            .ok_or_else(|| refused("the name is not valid UTF-8".into()))?
            .to_string();
        check_entry_path(text.as_bytes()).map_err(|e| refused(e.to_string()))?;
        let meta = fs::symlink_metadata(&path).map_err(at(&path, "stat"))?;
        if meta.is_dir() {
            out.push(Walked {
                rel: text,
                path,
                exec: None,
            });
            walk_below(out, dir, &rel)?;
        } else if meta.is_file() {
            let exec = Some(meta.permissions().mode() & 0o100 != 0);
            out.push(Walked {
                rel: text,
                path,
                exec,
            });
        } else {
            return Err(refused(
                "not a regular file or directory (symlinks and special files are never uploaded)"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// A file hashed by [`hash_all`]: its position in `files`, sha256 and size.
type Hashed = (usize, [u8; 32], u64);

/// The sha256 and size of each of `entries[files[k]]`, in order, hashed by one thread per core.
fn hash_all(files: &[usize], entries: &[Walked]) -> io::Result<Vec<([u8; 32], u64)>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let next = AtomicUsize::new(0);
    let results: Vec<io::Result<Vec<Hashed>>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut buf = vec![0u8; 256 * 1024];
                    let mut done = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&i) = files.get(k) else {
                            return Ok(done);
                        };
                        let (sha, size) = hash_file(&entries[i].path, &mut buf)?;
                        done.push((k, sha, size));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a hashing thread panicked")))
            })
            .collect()
    });
    let mut out = vec![([0u8; 32], 0u64); files.len()];
    for done in results {
        for (k, sha, size) in done? {
            out[k] = (sha, size);
        }
    }
    Ok(out)
}

fn hash_file(path: &Path, buf: &mut [u8]) -> io::Result<([u8; 32], u64)> {
    let mut f = fs::File::open(path).map_err(at(path, "open"))?;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    loop {
        let n = f.read(buf).map_err(at(path, "read"))?;
        if n == 0 {
            return Ok((hasher.finalize().into(), size));
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
        let mut f = fs::File::open(path).map_err(at(path, "open"))?;
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
