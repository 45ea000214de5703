//! Hashing one file: opened relative to its directory without following links, `fstat`ed on the
//! opened descriptor (anything not regular is refused) and read exactly once into SHA-256.
//!
//! [`read_hashed`] is the crate's one SHA-256 read loop: the tree walk, the host's offer of a
//! file and the supervisor's check of a file it may move into an upload all read through it.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use super::error::{Refusal, TreeError};
use super::{FileRecord, HashProgress};

/// Size of each worker's read buffer. Measured (docs/benchmarks.md): 32–128 KiB keep the copy
/// from the page cache in L2 and cost about half the kernel time of 256 KiB or 1 MiB buffers.
pub(super) const BUFFER_SIZE: usize = 64 * 1024;

/// Flags for every file: never follow a link, never block on a fifo swapped in.
fn file_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY
}

/// Digest, size and owner-execute bit of one file.
pub(super) type Hashed = ([u8; 32], u64, bool);

/// Reads `fd` from its current offset into SHA-256 until its end, or until `limit` bytes were
/// read, with `buf`; returns the digest and the bytes read. `expected` is the size `fstat`
/// gave: a short read that reaches it ends the file without the extra `read(2)` that would
/// return 0 (one syscall per small file). `on_read` sees each read's length.
pub(crate) fn read_hashed(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    limit: Option<u64>,
    expected: Option<u64>,
    mut on_read: impl FnMut(usize),
) -> Result<([u8; 32], u64), Errno> {
    let mut hasher = Sha256::new();
    let mut size = 0u64;
    loop {
        let want = match limit {
            Some(limit) => {
                let left = usize::try_from(limit - size).unwrap_or(usize::MAX);
                if left == 0 {
                    break;
                }
                left.min(buf.len())
            }
            None => buf.len(),
        };
        match rustix::io::read(fd, &mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buf[..n]);
                size += n as u64;
                on_read(n);
                if n < want && Some(size) == expected {
                    break;
                }
            }
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok((hasher.finalize().into(), size))
}

/// Why a file could not be hashed (turned into a [`TreeError`] by the caller).
pub(super) enum FileFailure {
    Refused(Refusal),
    Io(&'static str, Errno),
}

/// Lowercase hex of a digest, from a table (`hex::encode` goes through a `char` iterator; this
/// runs once per file).
pub(super) fn hex_digest(digest: &[u8; 32]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from(DIGITS[usize::from(byte >> 4)]));
        hex.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    hex
}

/// Opens `name` in the directory `dir` (`O_NOFOLLOW`) and hashes it.
pub(super) fn hash_entry(
    dir: impl AsFd,
    name: &str,
    buf: &mut [u8],
    progress: Option<&HashProgress>,
) -> Result<Hashed, FileFailure> {
    let fd = rustix::fs::openat(dir, name, file_flags(), Mode::empty()).map_err(|e| match e {
        Errno::NXIO => FileFailure::Refused(Refusal::Socket),
        e => FileFailure::Io("open", e),
    })?;
    hash_fd(&fd, buf, progress)
}

/// `fstat`s `fd`, refuses anything not regular, and streams the content into SHA-256.
fn hash_fd(
    fd: &OwnedFd,
    buf: &mut [u8],
    progress: Option<&HashProgress>,
) -> Result<Hashed, FileFailure> {
    let st = rustix::fs::fstat(fd).map_err(|e| FileFailure::Io("stat", e))?;
    if let Some(reason) = Refusal::for_type(FileType::from_raw_mode(st.st_mode)) {
        return Err(FileFailure::Refused(reason));
    }
    let expected = st.st_size as u64;
    let (digest, size) = read_hashed(fd.as_fd(), buf, None, Some(expected), |n| {
        if let Some(p) = progress {
            p.read(n);
        }
    })
    .map_err(|e| FileFailure::Io("read", e))?;
    if let Some(p) = progress {
        p.hashed();
    }
    Ok((digest, size, st.st_mode & 0o100 != 0))
}

/// [`super::sha256_file`]: one regular file, no symlink following.
pub(super) fn hash_single_file(
    path: &Path,
    progress: Option<&HashProgress>,
) -> Result<FileRecord, TreeError> {
    if let Some(p) = progress {
        p.found(1);
    }
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
    let (digest, size, _) = hash_fd(&fd, &mut buf, progress).map_err(|f| match f {
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
        sha256: hex_digest(&digest),
        size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_loop_hashes_to_the_end_or_to_its_limit() {
        use std::io::Write as _;
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        f.write_all(&data).unwrap();
        let mut buf = vec![0u8; 4096];
        let at = |f: &std::fs::File| {
            use std::io::Seek as _;
            let mut f = f;
            f.rewind().unwrap();
        };
        at(&f);
        let mut reads = 0;
        let (digest, n) = read_hashed(f.as_fd(), &mut buf, None, None, |_| reads += 1).unwrap();
        assert_eq!(
            (digest, n),
            (Sha256::digest(&data).into(), data.len() as u64)
        );
        assert!(reads >= 49);
        at(&f);
        let (digest, n) = read_hashed(f.as_fd(), &mut buf, Some(1000), None, |_| {}).unwrap();
        assert_eq!((digest, n), (Sha256::digest(&data[..1000]).into(), 1000));
    }

    #[test]
    fn hex_digest_is_lowercase_hex() {
        let digest: [u8; 32] = Sha256::digest(b"abc").into();
        assert_eq!(hex_digest(&digest), hex::encode(digest));
        assert_eq!(hex_digest(&[0xff; 32]), "f".repeat(64));
    }
}
