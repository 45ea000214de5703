//! Provisional tree hashing (the real, parallel module lands from the `hash` branch and replaces
//! this file; the signatures here are exactly that module's).
//!
//! This version is deliberately simple: single-threaded, std + `sha2` only, but *correct*:
//! no symlink following below the root, regular files and directories only, names with `\n`,
//! `\r` or `\` refused, files opened with `O_NOFOLLOW` and checked with `fstat` on the opened fd.
//!
//! - `pi-tree-v1`: hex sha256 of the bytewise-sorted lines `<hex sha256(file)>  ./<rel>`, each
//!   `\n`-terminated, followed by `<hex sha256(D)>  -\n` where `D` is the bytewise-sorted list of
//!   `.` and `./<rel>` directory lines, each `\n`-terminated.
//! - `content-v1`: hex sha256 of the bytewise-sorted lines `<rel>:<hex>` joined by `\n`, plus a
//!   final `\n`; files only.
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A tree hash format.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum TreeFormat {
    /// Shell-verifiable `find | sort | sha256sum` form, directories included.
    #[default]
    PiTreeV1,
    /// Content-addressed `<rel>:<hex>` form, files only.
    ContentV1,
}

/// One regular file: its path (relative to the tree root, `/`-separated, no `./`), digest, size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// Relative path inside the tree (or the path given to [`sha256_file`]).
    pub path: String,
    /// Lowercase hex sha256 of the exact bytes.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
}

/// Every regular file and subdirectory of a tree.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeListing {
    /// Regular files, sorted by path.
    pub files: Vec<FileRecord>,
    /// Subdirectories (relative, no trailing `/`, root excluded), sorted.
    pub dirs: Vec<String>,
}

/// A tree's digest in one format, with the listing it was computed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeDigest {
    /// The format of `sha256`.
    pub format: TreeFormat,
    /// Lowercase hex digest.
    pub sha256: String,
    /// The listing hashed.
    pub listing: TreeListing,
}

/// Why a tree or file could not be hashed: the path and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {why}", path.display())]
pub struct TreeError {
    /// The offending path.
    pub path: PathBuf,
    /// What is wrong with it.
    pub why: String,
}

fn tree_error(path: &Path, why: impl Into<String>) -> TreeError {
    TreeError {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

fn hex_sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl TreeListing {
    /// The digest of this listing in `format`.
    pub fn digest(&self, format: TreeFormat) -> String {
        match format {
            TreeFormat::PiTreeV1 => {
                // Sort whole lines without their newline, like `LC_ALL=C sort`.
                let mut lines: Vec<String> = self
                    .files
                    .iter()
                    .map(|f| format!("{}  ./{}", f.sha256, f.path))
                    .collect();
                lines.sort();
                let mut dirs: Vec<String> = std::iter::once(".".to_string())
                    .chain(self.dirs.iter().map(|d| format!("./{d}")))
                    .collect();
                dirs.sort();
                let dir_block: String = dirs.iter().map(|d| format!("{d}\n")).collect();
                let mut all: String = lines.iter().map(|l| format!("{l}\n")).collect();
                all.push_str(&hex_sha256(dir_block.as_bytes()));
                all.push_str("  -\n");
                hex_sha256(all.as_bytes())
            }
            TreeFormat::ContentV1 => {
                let mut lines: Vec<String> = self
                    .files
                    .iter()
                    .map(|f| format!("{}:{}", f.path, f.sha256))
                    .collect();
                lines.sort();
                let mut all = lines.join("\n");
                all.push('\n');
                hex_sha256(all.as_bytes())
            }
        }
    }
}

/// Lists every regular file (with its sha256) and directory under `root` without following
/// symlinks below the root; refuses symlinks, fifos, sockets, devices and names with `\n`, `\r`,
/// `\` or invalid UTF-8.
pub fn scan_tree(root: &Path) -> Result<TreeListing, TreeError> {
    let meta = std::fs::metadata(root).map_err(|e| tree_error(root, e.to_string()))?;
    if !meta.is_dir() {
        return Err(tree_error(root, "not a directory"));
    }
    let mut listing = TreeListing::default();
    walk(root, "", &mut listing)?;
    listing.files.sort_by(|a, b| a.path.cmp(&b.path));
    listing.dirs.sort();
    Ok(listing)
}

fn walk(dir: &Path, rel: &str, listing: &mut TreeListing) -> Result<(), TreeError> {
    let entries = std::fs::read_dir(dir).map_err(|e| tree_error(dir, e.to_string()))?;
    for entry in entries {
        let entry = entry.map_err(|e| tree_error(dir, e.to_string()))?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            return Err(tree_error(&path, "name is not valid UTF-8"));
        };
        if name.contains(['\n', '\r', '\\']) {
            return Err(tree_error(
                &path,
                "name contains a newline, carriage return or backslash",
            ));
        }
        let child_rel = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let file_type = entry
            .file_type()
            .map_err(|e| tree_error(&path, e.to_string()))?;
        if file_type.is_dir() {
            listing.dirs.push(child_rel.clone());
            walk(&path, &child_rel, listing)?;
        } else if file_type.is_file() {
            let record = sha256_file(&path)?;
            listing.files.push(FileRecord {
                path: child_rel,
                ..record
            });
        } else {
            return Err(tree_error(&path, file_type_name(&file_type)));
        }
    }
    Ok(())
}

fn file_type_name(file_type: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_symlink() {
        "is a symbolic link (refused)"
    } else if file_type.is_fifo() {
        "is a fifo (refused)"
    } else if file_type.is_socket() {
        "is a socket (refused)"
    } else if file_type.is_block_device() || file_type.is_char_device() {
        "is a device (refused)"
    } else {
        "is not a regular file or directory (refused)"
    }
}

/// Hashes the tree at `root` in `format`.
pub fn hash_tree(root: &Path, format: TreeFormat) -> Result<TreeDigest, TreeError> {
    let listing = scan_tree(root)?;
    Ok(TreeDigest {
        format,
        sha256: listing.digest(format),
        listing,
    })
}

/// The sha256 and size of one regular file, opened with `O_NOFOLLOW` (a symlink is refused) and
/// checked with `fstat` on the opened descriptor.
pub fn sha256_file(path: &Path) -> Result<FileRecord, TreeError> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| {
        if e == rustix::io::Errno::LOOP {
            tree_error(path, "is a symbolic link (refused)")
        } else {
            tree_error(path, std::io::Error::from(e).to_string())
        }
    })?;
    let mut file = File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| tree_error(path, e.to_string()))?;
    if !meta.file_type().is_file() {
        return Err(tree_error(path, file_type_name(&meta.file_type())));
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(tree_error(path, e.to_string())),
        };
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok(FileRecord {
        path: path.display().to_string(),
        sha256: hex::encode(hasher.finalize()),
        size,
    })
}

/// What differs between an expected and an actual listing (directories end with `/`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drift {
    /// Present now, not expected.
    pub added: Vec<String>,
    /// Expected, not present now.
    pub removed: Vec<String>,
    /// Present in both with different content.
    pub changed: Vec<String>,
}

impl Drift {
    /// Whether nothing differs.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// The per-path difference between `expected` and `actual`, each list sorted.
pub fn drift(expected: &TreeListing, actual: &TreeListing) -> Drift {
    let mut d = Drift::default();
    let exp: BTreeMap<&str, &FileRecord> = expected
        .files
        .iter()
        .map(|f| (f.path.as_str(), f))
        .collect();
    let act: BTreeMap<&str, &FileRecord> =
        actual.files.iter().map(|f| (f.path.as_str(), f)).collect();
    for (path, a) in &act {
        match exp.get(path) {
            None => d.added.push((*path).to_string()),
            Some(e) if e.sha256 != a.sha256 || e.size != a.size => {
                d.changed.push((*path).to_string());
            }
            Some(_) => {}
        }
    }
    for path in exp.keys() {
        if !act.contains_key(path) {
            d.removed.push((*path).to_string());
        }
    }
    let exp_dirs: std::collections::BTreeSet<&str> =
        expected.dirs.iter().map(String::as_str).collect();
    let act_dirs: std::collections::BTreeSet<&str> =
        actual.dirs.iter().map(String::as_str).collect();
    d.added
        .extend(act_dirs.difference(&exp_dirs).map(|p| format!("{p}/")));
    d.removed
        .extend(exp_dirs.difference(&act_dirs).map(|p| format!("{p}/")));
    d.added.sort();
    d.removed.sort();
    d.changed.sort();
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn shell_digest(dir: &Path) -> Option<String> {
        let out = Command::new("sh")
            .arg("-c")
            .arg("cd \"$1\" && { find . -type f -exec sha256sum {} + | LC_ALL=C sort; find . -type d | LC_ALL=C sort | sha256sum; } | sha256sum | cut -d' ' -f1")
            .arg("sh")
            .arg(dir)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    #[test]
    fn pi_tree_v1_matches_the_shell_pipeline() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("a/b")).unwrap();
        std::fs::create_dir_all(t.path().join("empty")).unwrap();
        std::fs::create_dir_all(t.path().join(".hidden")).unwrap();
        std::fs::write(t.path().join("index.ts"), "x").unwrap();
        std::fs::write(t.path().join("a/b/c d.js"), "yy").unwrap();
        std::fs::write(t.path().join(".hidden/z"), "").unwrap();
        let d = hash_tree(t.path(), TreeFormat::PiTreeV1).unwrap();
        if let Some(expected) = shell_digest(t.path()) {
            assert_eq!(d.sha256, expected);
        }
        assert_eq!(d.listing.dirs, vec![".hidden", "a", "a/b", "empty"]);
    }

    #[test]
    fn refuses_symlinks_and_bad_names() {
        let t = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/passwd", t.path().join("l")).unwrap();
        let err = scan_tree(t.path()).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(sha256_file(&t.path().join("l")).is_err());
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("a\\b"), "").unwrap();
        assert!(scan_tree(t.path()).is_err());
    }

    #[test]
    fn drift_names_added_removed_changed_and_dirs() {
        let rec = |p: &str, h: &str| FileRecord {
            path: p.into(),
            sha256: h.into(),
            size: 1,
        };
        let expected = TreeListing {
            files: vec![rec("a", "1"), rec("b", "2")],
            dirs: vec!["d".into()],
        };
        let actual = TreeListing {
            files: vec![rec("a", "9"), rec("c", "3")],
            dirs: vec!["e".into()],
        };
        let d = drift(&expected, &actual);
        assert_eq!(d.added, vec!["c", "e/"]);
        assert_eq!(d.removed, vec!["b", "d/"]);
        assert_eq!(d.changed, vec!["a"]);
        assert!(drift(&expected, &expected).is_empty());
    }
}
