//! A file replaced whole or not at all: the one atomic write of both binaries (result records,
//! `.collected`, the host's lock file, cache origins and batch job records).
//!
//! The new content goes to a temporary file created beside the target (same directory, so the
//! rename cannot cross a filesystem) with `O_CREAT | O_EXCL | O_NOFOLLOW`: whatever already sits
//! at a temporary name (a symlink an agent planted, a file of a concurrent writer) is never
//! opened, followed or truncated; the next name is tried instead. The content is synced, then
//! renamed over the target. On any failure the temporary file is removed: a full disk leaves
//! nothing behind.

use rustix::fs::{Mode, OFlags};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write as _};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Path, PathBuf};

/// How many temporary names are tried before giving up (each taken one is a concurrent writer
/// of the same file in this process, or something planted there).
const ATTEMPTS: u32 = 16;

/// The most bytes of the target's name kept in a temporary name (the rest must fit in a
/// directory entry's 255).
const NAME_KEPT: usize = 200;

/// Writes `bytes` to `path` atomically: a reader sees the old content or the new, never a part.
/// A file created has `mode` (less the umask); the target, when it exists, is replaced (a symlink
/// at `path` is replaced too, never followed).
pub fn write(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: not a file name", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let kept = &name.as_bytes()[..name.len().min(NAME_KEPT)];
    let pid = std::process::id();
    for attempt in 0..ATTEMPTS {
        let mut tmp_name = b".".to_vec();
        tmp_name.extend_from_slice(kept);
        tmp_name.extend_from_slice(format!(".{pid}.{attempt}.tmp").as_bytes());
        let tmp = dir.join(OsString::from_vec(tmp_name));
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::open(&tmp, flags, Mode::from_raw_mode(mode)) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::EXIST) => continue,
            Err(e) => return Err(at(&tmp, e.into())),
        };
        let written = fill(File::from(fd), bytes)
            .map_err(|e| at(&tmp, e))
            .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| at(path, e)));
        if written.is_err() {
            // Ours (created exclusively above): a half-written file only takes space.
            let _ = std::fs::remove_file(&tmp);
        }
        return written;
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{}: every temporary name beside it is taken ({ATTEMPTS} tried)",
            path.display()
        ),
    ))
}

/// Writes all of `bytes` to the new file and syncs it.
fn fill(mut file: File, bytes: &[u8]) -> io::Result<()> {
    file.write_all(bytes)?;
    file.sync_all()
}

/// `err` with the path it happened at.
fn at(path: &Path, err: io::Error) -> io::Error {
    io::Error::new(
        err.kind(),
        format!("{}: {err}", PathBuf::from(path).display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// The entries of `dir`, sorted.
    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn tmp_name(name: &str, attempt: u32) -> String {
        format!(".{name}.{}.{attempt}.tmp", std::process::id())
    }

    #[test]
    fn writes_and_replaces_leaving_only_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("result.json");
        write(&path, b"one\n", 0o600).unwrap();
        write(&path, b"two\n", 0o600).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(entries(dir.path()), ["result.json"]);
    }

    #[test]
    fn a_symlink_at_the_temporary_name_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let planted = dir.path().join(tmp_name("result.json", 0));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let path = dir.path().join("result.json");
        write(&path, b"record\n", 0o600).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&path).unwrap(), b"record\n");
        // The planted link is not ours to remove; it still points where it did.
        assert_eq!(std::fs::read_link(&planted).unwrap(), victim);
        assert_eq!(
            entries(dir.path()),
            [
                tmp_name("result.json", 0),
                "result.json".into(),
                "victim".into()
            ]
        );
    }

    #[test]
    fn a_symlink_at_the_target_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let path = dir.path().join("result.json");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write(&path, b"record\n", 0o600).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
    }

    #[test]
    fn every_name_taken_fails_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for attempt in 0..ATTEMPTS {
            std::fs::write(dir.path().join(tmp_name("f", attempt)), b"theirs").unwrap();
        }
        let err = write(&dir.path().join("f"), b"mine", 0o600).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");
        assert!(!dir.path().join("f").exists());
        let theirs = std::fs::read(dir.path().join(tmp_name("f", 0))).unwrap();
        assert_eq!(theirs, b"theirs");
    }

    #[test]
    fn a_failed_rename_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        // A non-empty directory at the target: the rename fails after the content was written.
        let path = dir.path().join("taken");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), b"").unwrap();
        let err = write(&path, b"record\n", 0o600).unwrap_err();
        assert!(err.to_string().contains("taken"), "{err}");
        assert_eq!(entries(dir.path()), ["taken"]);
    }

    #[test]
    fn a_directory_it_cannot_create_in_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = write(&dir.path().join("absent/f"), b"x", 0o600).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(err.to_string().contains("absent"), "{err}");
        assert!(write(Path::new("/"), b"x", 0o600).is_err());
    }
}
