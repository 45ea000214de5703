//! Room for records on a full disk. The agent can fill the filesystem that holds the records
//! (the workspace and the state directory often share it), and a record that cannot be written
//! is an iteration lost. So the server holds [`RESERVE_BYTES`] in a file of the records
//! directory from before an iteration starts; when a record meets a full disk the reserve is
//! given back and the write tried again, and a record that still cannot be written is kept in
//! memory ([`Unwritten`]): the requester gets it in the `result` response, `collect` sends it,
//! and it is written as soon as the disk has room.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{self, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// Bytes set aside for records: far more than a result record and the last events take (a few
/// KiB; verification drift lists are capped), little enough to cost nothing on any real disk.
pub(super) const RESERVE_BYTES: u64 = 1 << 20;

/// The reserve's name in the records directory (not an `iteration-N`: never collected).
const RESERVE_NAME: &str = ".reserve";

/// Whether `err` says the filesystem (or the writer's quota) is full: by its OS code, or by its
/// kind when a writer gave it the path as context (`crate::atomic_file` does), which keeps the
/// kind but not the code.
pub(super) fn is_disk_full(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || matches!(
            err.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
        )
}

/// Bytes an unprivileged writer may still allocate on the filesystem holding `path`.
pub(super) fn free_bytes(path: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(path).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// What is free on the filesystem holding `path`, as the disk-full reasons say it: `N bytes
/// free`, and `no inode free` when the filesystem counts inodes and has none left (empty files
/// fill a disk too).
pub(super) fn room_left(path: &Path) -> String {
    let Some(bytes) = free_bytes(path) else {
        return "free space unknown".into();
    };
    if no_inode_free(path) {
        format!("{bytes} bytes free, no inode free")
    } else {
        format!("{bytes} bytes free")
    }
}

/// Whether the filesystem holding `path` counts inodes and has none left for a new file.
pub(super) fn no_inode_free(path: &Path) -> bool {
    rustix::fs::statvfs(path).is_ok_and(|st| st.f_files > 0 && st.f_favail == 0)
}

/// The space held for records.
#[derive(Debug)]
pub(super) struct Reserve {
    /// The reserve file.
    path: PathBuf,
    /// Whether the file holds its bytes now.
    held: bool,
}

impl Reserve {
    /// The reserve of the records directory `records` (nothing is held yet).
    pub(super) fn new(records: &Path) -> Reserve {
        Reserve {
            path: records.join(RESERVE_NAME),
            held: false,
        }
    }

    /// Holds the reserve if it is not held: allocates its bytes (`fallocate`, or zeros where the
    /// filesystem cannot allocate). Fails when the filesystem has no room for it.
    pub(super) fn hold(&mut self) -> io::Result<()> {
        if self.held {
            return Ok(());
        }
        let allocated = self.allocate();
        if allocated.is_err() {
            // Whatever part was allocated is given back: a half reserve guarantees nothing.
            let _ = std::fs::remove_file(&self.path);
        }
        allocated?;
        self.held = true;
        Ok(())
    }

    fn allocate(&self) -> io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&self.path)?;
        match rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, RESERVE_BYTES) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::OPNOTSUPP) => {
                // Bytes a compressing filesystem cannot shrink (zeros would hold nothing there).
                let mut chunk = [0u8; 64 * 1024];
                let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
                let mut left = RESERVE_BYTES;
                while left > 0 {
                    for b in chunk.iter_mut() {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        *b = state.to_le_bytes()[0];
                    }
                    let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
                    file.write_all(&chunk[..n])?;
                    left -= n as u64;
                }
                file.sync_all()
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Gives the reserve's bytes back to the filesystem (to write a record it had no room for).
    pub(super) fn release(&mut self) {
        if let Err(err) = std::fs::remove_file(&self.path) {
            if err.kind() != io::ErrorKind::NotFound {
                tracing::warn!("record reserve {}: {err}", self.path.display());
            }
        }
        self.held = false;
    }
}

/// Records the disk had no room for, by iteration: each with its directory and its line.
#[derive(Debug, Default)]
pub(super) struct Unwritten {
    records: BTreeMap<u32, (PathBuf, String)>,
}

impl Unwritten {
    /// Keeps the record `line` of iteration `n` (directory `dir`) until it can be written.
    pub(super) fn keep(&mut self, n: u32, dir: PathBuf, line: String) {
        self.records.insert(n, (dir, line));
    }

    /// The record line of iteration `n`, if it is kept here.
    pub(super) fn get(&self, n: u32) -> Option<&str> {
        self.records.get(&n).map(|(_, line)| line.as_str())
    }

    /// The iterations whose record is kept here.
    pub(super) fn iterations(&self) -> Vec<u32> {
        self.records.keys().copied().collect()
    }

    /// Writes every kept record that the disk now has room for; keeps the others.
    pub(super) fn flush(&mut self) {
        self.records
            .retain(|_, (dir, line)| write_record(dir, line.as_bytes()).is_err());
    }
}

/// Writes `result.json` of the record directory `dir` (created if the disk had no room for it
/// when the iteration started) through a temporary file and a rename.
pub(super) fn write_record(dir: &Path, line: &[u8]) -> io::Result<()> {
    super::records::create_private_dir(dir)?;
    crate::record::write_result_file(&dir.join(crate::record_names::RESULT_FILE), line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_recognised_with_or_without_its_os_code() {
        let raw = io::Error::from_raw_os_error(libc::ENOSPC);
        assert!(is_disk_full(&raw));
        // As the atomic write returns it: the path as context, the kind kept, the code lost.
        let with_path = io::Error::new(raw.kind(), format!("/records/x: {raw}"));
        assert!(with_path.raw_os_error().is_none());
        assert!(is_disk_full(&with_path));
        let quota = io::Error::from_raw_os_error(libc::EDQUOT);
        assert!(is_disk_full(&io::Error::new(quota.kind(), "q")));
        assert!(!is_disk_full(&io::Error::from_raw_os_error(libc::EACCES)));
    }

    #[test]
    fn a_held_reserve_takes_its_bytes_and_gives_them_back() {
        let tmp = tempfile::tempdir().unwrap();
        let mut reserve = Reserve::new(tmp.path());
        reserve.hold().unwrap();
        let meta = std::fs::metadata(tmp.path().join(RESERVE_NAME)).unwrap();
        assert_eq!(meta.len(), RESERVE_BYTES);
        reserve.hold().unwrap();
        reserve.release();
        assert!(!tmp.path().join(RESERVE_NAME).exists());
        reserve.release();
    }

    #[test]
    fn an_unwritten_record_stays_until_its_directory_can_be_made() {
        let tmp = tempfile::tempdir().unwrap();
        // A file where the records directory should be: every write fails.
        let blocked = tmp.path().join("records");
        std::fs::write(&blocked, b"").unwrap();
        let mut unwritten = Unwritten::default();
        unwritten.keep(3, blocked.join("iteration-3"), "{}\n".into());
        unwritten.flush();
        assert_eq!(unwritten.get(3), Some("{}\n"));
        std::fs::remove_file(&blocked).unwrap();
        unwritten.flush();
        assert_eq!(unwritten.get(3), None);
        let written = std::fs::read(blocked.join("iteration-3/result.json")).unwrap();
        assert_eq!(written, b"{}\n");
    }
}
