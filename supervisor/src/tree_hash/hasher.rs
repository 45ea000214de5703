//! Hashing the files a walk found: parallel workers, one reusable buffer each, every file opened
//! relative to its directory without following links and read exactly once.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use super::error::{Refusal, TreeError};
use super::walk::{dir_flags, entry_error, type_refusal, Plan};
use super::{FileRecord, TreeListing};

/// Size of each worker's read buffer. Measured (docs/benchmarks.md): 32–128 KiB keep the copy
/// from the page cache in L2 and cost about half the kernel time of 256 KiB or 1 MiB buffers.
const BUFFER_SIZE: usize = 64 * 1024;

/// Flags for every file: never follow a link, never block on a fifo swapped in.
fn file_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY
}

/// Digest and size of one file.
type Hashed = ([u8; 32], u64);

/// Why a file of the plan could not be hashed (turned into a [`TreeError`] by the caller).
enum FileFailure {
    Refused(Refusal),
    Io(&'static str, Errno),
}

/// Hashes every file of `plan` and returns the sorted listing.
pub(super) fn hash_plan(root: &Path, plan: Plan) -> Result<TreeListing, TreeError> {
    let count = plan.files.len();
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(count)
        .max(1);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let mut hashed: Vec<Option<Hashed>> = vec![None; count];
    let mut failures: Vec<(usize, FileFailure)> = Vec::new();

    let outputs = if workers == 1 {
        vec![worker(&plan, &next, &failed)]
    } else {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|_| scope.spawn(|| worker(&plan, &next, &failed)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        })
    };
    for output in outputs {
        for (index, result) in output {
            match result {
                Ok(h) => hashed[index] = Some(h),
                Err(f) => failures.push((index, f)),
            }
        }
    }
    // Report the failure of the first file in walk order among those seen.
    if let Some((index, failure)) = failures.into_iter().min_by_key(|(i, _)| *i) {
        let rel = plan.files[index].rel.clone();
        return Err(match failure {
            FileFailure::Refused(reason) => TreeError::Refused {
                root: root.to_path_buf(),
                path: rel,
                reason,
            },
            FileFailure::Io(op, e) => entry_error(root, rel, op, e),
        });
    }

    let mut files = Vec::with_capacity(count);
    for (file, h) in plan.files.into_iter().zip(hashed) {
        let Some((digest, size)) = h else {
            // Unreachable unless a worker stopped early without a failure.
            return Err(TreeError::Io {
                root: root.to_path_buf(),
                path: file.rel,
                op: "hash",
                error: std::io::Error::other("file was not hashed"),
            });
        };
        files.push(FileRecord {
            path: file.rel,
            sha256: hex::encode(digest),
            size,
        });
    }
    files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    let mut dirs: Vec<String> = plan.dirs.into_iter().skip(1).map(|d| d.rel).collect();
    dirs.sort_unstable();
    Ok(TreeListing { files, dirs })
}

/// One worker: takes file indices from `next` until none are left or some worker failed.
fn worker(
    plan: &Plan,
    next: &AtomicUsize,
    failed: &AtomicBool,
) -> Vec<(usize, Result<Hashed, FileFailure>)> {
    let mut buf = vec![0u8; BUFFER_SIZE];
    let mut reopened: Option<(usize, OwnedFd)> = None;
    let mut out = Vec::new();
    loop {
        if failed.load(Ordering::Relaxed) {
            break;
        }
        let index = next.fetch_add(1, Ordering::Relaxed);
        let Some(file) = plan.files.get(index) else {
            break;
        };
        let result =
            dir_fd(plan, file.dir, &mut reopened).and_then(|dir| {
                let fd = rustix::fs::openat(dir, file.name(), file_flags(), Mode::empty())
                    .map_err(|e| match e {
                        Errno::NXIO => FileFailure::Refused(Refusal::Socket),
                        e => FileFailure::Io("open", e),
                    })?;
                hash_fd(&fd, &mut buf)
            });
        if result.is_err() {
            failed.store(true, Ordering::Relaxed);
        }
        out.push((index, result));
    }
    out
}

/// The descriptor of directory `dir`: retained by the walk, or reopened from the root one
/// component at a time with `O_NOFOLLOW` (cached for the next file of the same directory).
fn dir_fd<'a>(
    plan: &'a Plan,
    dir: usize,
    reopened: &'a mut Option<(usize, OwnedFd)>,
) -> Result<BorrowedFd<'a>, FileFailure> {
    if let Some(fd) = plan.dirs[dir].fd.as_ref() {
        return Ok(fd.as_fd());
    }
    if !matches!(reopened, Some((d, _)) if *d == dir) {
        let root = plan
            .root_fd()
            .ok_or(FileFailure::Io("open the root", Errno::BADF))?;
        let mut current: Option<OwnedFd> = None;
        for component in plan.dirs[dir].rel.split('/') {
            let parent = current.as_ref().map_or(root, |fd| fd.as_fd());
            let fd = rustix::fs::openat(parent, component, dir_flags(), Mode::empty())
                .map_err(|e| FileFailure::Io("open the directory", e))?;
            current = Some(fd);
        }
        let fd = current.ok_or(FileFailure::Io("open the directory", Errno::NOENT))?;
        *reopened = Some((dir, fd));
    }
    let reopened: &'a Option<(usize, OwnedFd)> = reopened;
    match reopened {
        Some((_, fd)) => Ok(fd.as_fd()),
        None => Err(FileFailure::Io("open the directory", Errno::BADF)),
    }
}

/// `fstat`s `fd`, refuses anything not regular, and streams the content into SHA-256.
fn hash_fd(fd: &OwnedFd, buf: &mut [u8]) -> Result<Hashed, FileFailure> {
    let st = rustix::fs::fstat(fd).map_err(|e| FileFailure::Io("stat", e))?;
    if let Some(reason) = type_refusal(FileType::from_raw_mode(st.st_mode)) {
        return Err(FileFailure::Refused(reason));
    }
    let expected = st.st_size as u64;
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    loop {
        match rustix::io::read(fd, &mut *buf) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                size += n as u64;
                // A short read that reaches the size `fstat` reported is the end of a regular
                // file: skip the extra read(2) that would return 0 (one syscall per small file).
                if n < buf.len() && size == expected {
                    break;
                }
            }
            Err(Errno::INTR) => continue,
            Err(e) => return Err(FileFailure::Io("read", e)),
        }
    }
    Ok((hasher.finalize().into(), size))
}

/// [`super::sha256_file`]: one regular file, no symlink following.
pub(super) fn hash_single_file(path: &Path) -> Result<FileRecord, TreeError> {
    let fd = rustix::fs::open(path, file_flags(), Mode::empty()).map_err(|e| match e {
        Errno::LOOP => TreeError::FileRefused {
            path: path.to_path_buf(),
            reason: Refusal::Symlink,
        },
        Errno::NXIO => TreeError::FileRefused {
            path: path.to_path_buf(),
            reason: Refusal::Socket,
        },
        e => TreeError::FileIo {
            path: path.to_path_buf(),
            op: "open",
            error: e.into(),
        },
    })?;
    let mut buf = vec![0u8; BUFFER_SIZE];
    let (digest, size) = hash_fd(&fd, &mut buf).map_err(|f| match f {
        FileFailure::Refused(reason) => TreeError::FileRefused {
            path: path.to_path_buf(),
            reason,
        },
        FileFailure::Io(op, e) => TreeError::FileIo {
            path: path.to_path_buf(),
            op,
            error: e.into(),
        },
    })?;
    Ok(FileRecord {
        path: path.to_string_lossy().into_owned(),
        sha256: hex::encode(digest),
        size,
    })
}
