//! Tree digests (`pi-tree-v1`, `content-v1`) and single-file SHA-256, computed without following
//! symlinks.
//!
//! # Walk
//!
//! The root is opened as a directory (the root itself may be a symlink to a directory). Below it,
//! every directory is opened with `openat(parent, name, O_DIRECTORY | O_NOFOLLOW)` and every file
//! with `openat(parent, name, O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)`; the opened descriptor is
//! `fstat`ed and anything that is not a regular file is refused, so a file swapped for a symlink
//! or a fifo between listing and hashing is refused too. Each file is read exactly once, streaming
//! into SHA-256, on [`std::thread::available_parallelism`] workers. The same workers list the
//! directories: one shared stack holds directories to list and files to hash, so hashing starts as
//! soon as the root is listed. Which error is reported does not depend on scheduling: listing
//! errors come first, in depth-first order with sorted names, as in a sequential walk.
//!
//! Refused anywhere below the root (the error names the path relative to the root and why):
//! symlinks, fifos, sockets, block and character devices, names containing `\n`, `\r` or `\`
//! (GNU `sha256sum` escapes such names, so the digest could not be checked in a shell), and names
//! that are not UTF-8 (manifests are JSON). Empty directories count in `pi-tree-v1`; modes,
//! ownership, timestamps and xattrs never count.
//!
//! # `pi-tree-v1` (shell-verifiable)
//!
//! Let `L(xs)` be the strings `xs` sorted bytewise (`LC_ALL=C sort`), each followed by `\n`.
//!
//! - `F` = one string `<hex sha256(content)>  ./<rel>` (two spaces) per regular file. `F` is
//!   sorted as whole lines, i.e. **by content hash first**, then by path.
//! - `Dl` = `.` plus `./<rel>` per subdirectory.
//! - digest = `hex(sha256( L(F) ‖ hex(sha256(L(Dl))) ‖ "  -\n" ))`.
//!
//! The directory digest is appended after the sorted file lines (in `sha256sum` stdin form), not
//! sorted in. This is exactly the first field printed by
//!
//! ```sh
//! cd DIR && { find . -type f -exec sha256sum {} + | LC_ALL=C sort; find . -type d | LC_ALL=C sort | sha256sum; } | sha256sum
//! ```
//!
//! # `content-v1` (content-addressed pins, `…#sha256=<hex>`)
//!
//! digest = `hex(sha256( join(sort_bytewise(["<rel>:<hex sha256(content)>"]), "\n") ‖ "\n" ))`:
//! files only (directories are invisible), no `./` prefix, sorted on the whole `path:hash` string.
//! An empty tree hashes the single byte `\n`.
//!
//! All hex is lowercase; `<rel>` is the `/`-separated path relative to the root.

mod drift;
mod error;
mod format;
mod hasher;
mod walk;

pub(crate) use hasher::read_hashed;

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

pub use drift::{drift, Drift};
pub use error::{Refusal, TreeError};

/// Which tree digest to compute.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, clap::ValueEnum,
)]
pub enum TreeFormat {
    /// Shell-verifiable: files sorted by `<hash>  ./<path>` lines, then the directory list digest.
    #[default]
    #[serde(rename = "pi-tree-v1")]
    #[value(name = "pi-tree-v1")]
    PiTreeV1,
    /// Content-addressed: sorted `<path>:<hash>` lines of files only.
    #[serde(rename = "content-v1")]
    #[value(name = "content-v1")]
    ContentV1,
}

impl TreeFormat {
    /// The format's name as written in manifests and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            TreeFormat::PiTreeV1 => "pi-tree-v1",
            TreeFormat::ContentV1 => "content-v1",
        }
    }
}

impl fmt::Display for TreeFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing an unknown [`TreeFormat`] name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tree hash format {0:?} (expected \"pi-tree-v1\" or \"content-v1\")")]
pub struct UnknownTreeFormat(pub String);

impl FromStr for TreeFormat {
    type Err = UnknownTreeFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pi-tree-v1" => Ok(TreeFormat::PiTreeV1),
            "content-v1" => Ok(TreeFormat::ContentV1),
            other => Err(UnknownTreeFormat(other.to_owned())),
        }
    }
}

/// One regular file of a tree (or a single hashed file).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileRecord {
    /// Path relative to the root, `/`-separated, without a `./` prefix.
    pub path: String,
    /// Lowercase hex SHA-256 of the content.
    pub sha256: String,
    /// Number of bytes hashed.
    pub size: u64,
}

/// Everything a tree digest is computed from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TreeListing {
    /// Regular files, sorted by path bytewise.
    pub files: Vec<FileRecord>,
    /// Subdirectories relative to the root (the root itself excluded), sorted bytewise.
    pub dirs: Vec<String>,
}

impl TreeListing {
    /// The digest of this listing in `format` (lowercase hex).
    pub fn digest(&self, format: TreeFormat) -> String {
        match format {
            TreeFormat::PiTreeV1 => format::pi_tree_v1(self),
            TreeFormat::ContentV1 => format::content_v1(self),
        }
    }

    /// Sum of the sizes of all files.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// A tree digest together with the listing it was computed from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TreeDigest {
    /// The format of `sha256`.
    pub format: TreeFormat,
    /// Lowercase hex digest.
    pub sha256: String,
    /// The files and directories that were hashed.
    pub listing: TreeListing,
    /// The files of `listing` whose owner-execute bit was set, when the tree was walked (not
    /// part of the digest: what an upload of the tree needs besides, so it is walked once).
    #[serde(skip)]
    pub executables: Option<std::collections::BTreeSet<String>>,
}

/// Counters another thread can read while trees and files are hashed (a progress display):
/// files found by the walk so far, files hashed, bytes read. One value may watch several
/// hashes in turn; the counters only grow.
#[derive(Debug, Default)]
pub struct HashProgress {
    files_found: AtomicU64,
    files_hashed: AtomicU64,
    bytes: AtomicU64,
}

impl HashProgress {
    /// Regular files found so far (every listed directory's files, and each single file).
    pub fn files_found(&self) -> u64 {
        self.files_found.load(Ordering::Relaxed)
    }

    /// Files completely hashed so far.
    pub fn files_hashed(&self) -> u64 {
        self.files_hashed.load(Ordering::Relaxed)
    }

    /// Bytes read into SHA-256 so far (counted per read, so a large file moves it too).
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn found(&self, n: usize) {
        self.files_found.fetch_add(n as u64, Ordering::Relaxed);
    }

    fn hashed(&self) {
        self.files_hashed.fetch_add(1, Ordering::Relaxed);
    }

    fn read(&self, n: usize) {
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Walks `root` without following symlinks and hashes every regular file in parallel.
pub fn scan_tree(root: &Path) -> Result<TreeListing, TreeError> {
    walk::scan(root, None).map(|(listing, _)| listing)
}

/// Scans `root` ([`scan_tree`]) and computes its digest in `format`.
pub fn hash_tree(root: &Path, format: TreeFormat) -> Result<TreeDigest, TreeError> {
    hash_tree_watched(root, format, None)
}

/// [`hash_tree`], counting into `progress` as it goes.
pub fn hash_tree_watched(
    root: &Path,
    format: TreeFormat,
    progress: Option<&HashProgress>,
) -> Result<TreeDigest, TreeError> {
    let (listing, executables) = walk::scan(root, progress)?;
    Ok(TreeDigest {
        format,
        sha256: listing.digest(format),
        listing,
        executables: Some(executables),
    })
}

/// SHA-256 of one regular file, without following a symlink at `path`.
///
/// The record's `path` is `path` as given (lossily converted to UTF-8).
pub fn sha256_file(path: &Path) -> Result<FileRecord, TreeError> {
    hasher::hash_single_file(path, None)
}

/// [`sha256_file`], counting into `progress` as it goes.
pub fn sha256_file_watched(
    path: &Path,
    progress: Option<&HashProgress>,
) -> Result<FileRecord, TreeError> {
    hasher::hash_single_file(path, progress)
}
