//! The content-addressed cache of fetched remote sources:
//!
//! ```text
//! <cache>/sha256/<pin>/tree/content/        a directory, hashing (content-v1) to <pin>
//! <cache>/sha256/<pin>/tree/metadata.json   where it came from (url, ref, commit, fetched_at, files)
//! <cache>/sha256/<pin>/blob/content         a file, hashing (sha256) to <pin>
//! <cache>/sha256/<pin>/blob/metadata.json
//! <cache>/tmp/fetch-*/                      fetches in progress, renamed into place once verified
//! ```
//!
//! A directory and a file are kept apart under one pin: a file whose bytes are a directory's
//! `content-v1` listing has that directory's pin, and neither may displace the other.
//!
//! An entry is re-hashed on every use ([`Cache::lookup`]): a copy changed on disk is never
//! used, only reported (and replaced by the next fetch).

use pitcrew_core::harness::{RemoteKind, RemoteSource};
use pitcrew_core::tree_hash::{self, TreeFormat};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// Where a copy came from and what it held: a cache entry's `metadata.json`, and an entry of
/// the lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Origin {
    /// The URL without its pin.
    pub url: String,
    /// `tree` or `blob`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The pin.
    pub sha256: String,
    /// The ref the URL named.
    #[serde(rename = "ref")]
    pub ref_name: String,
    /// The path inside the repository.
    pub path: String,
    /// The commit the ref pointed at when fetched.
    pub commit: String,
    /// When it was fetched (UTC, RFC 3339).
    pub fetched_at: String,
    /// Every file (for a tree) with its SHA-256, sorted by path.
    pub files: Vec<CachedFile>,
}

/// One file of a cached tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CachedFile {
    /// Relative path.
    pub path: String,
    /// SHA-256 of its bytes.
    pub sha256: String,
}

/// What a cache lookup found.
#[derive(Debug)]
pub enum Lookup {
    /// A verified copy: the path to use and its metadata.
    Hit(PathBuf, Origin),
    /// Nothing cached under the pin.
    Missing,
    /// A copy that no longer hashes to its pin (or cannot be read): changed on disk.
    Tampered(String),
}

/// The cache rooted at a directory.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

impl Cache {
    /// The cache at `root` (created on first store).
    pub fn new(root: PathBuf) -> Cache {
        Cache { root }
    }

    /// Its root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of the entry of `kind` pinned `sha256`.
    pub fn entry_dir(&self, sha256: &str, kind: RemoteKind) -> PathBuf {
        self.root.join("sha256").join(sha256).join(kind.as_str())
    }

    /// The verified copy of `source`, re-hashed now.
    pub fn lookup(&self, source: &RemoteSource) -> Lookup {
        let dir = self.entry_dir(&source.sha256, source.kind);
        let metadata = match std::fs::read(dir.join("metadata.json")) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !dir.exists() => {
                return Lookup::Missing
            }
            Err(e) => return Lookup::Tampered(format!("{}/metadata.json: {e}", dir.display())),
            Ok(bytes) => match serde_json::from_slice::<Origin>(&bytes) {
                Ok(m) => m,
                Err(e) => return Lookup::Tampered(format!("{}/metadata.json: {e}", dir.display())),
            },
        };
        let path = dir.join("content");
        let found = match source.kind {
            RemoteKind::Tree => match tree_hash::hash_tree(&path, TreeFormat::ContentV1) {
                Ok(d) => d.sha256,
                Err(e) => return Lookup::Tampered(e.to_string()),
            },
            RemoteKind::Blob => match tree_hash::sha256_file(&path) {
                Ok(r) => r.sha256,
                Err(e) => return Lookup::Tampered(e.to_string()),
            },
        };
        if metadata.kind != source.kind.as_str() {
            return Lookup::Tampered(format!(
                "{}/metadata.json says {:?}, not {:?}",
                dir.display(),
                metadata.kind,
                source.kind.as_str()
            ));
        }
        if found != source.sha256 || metadata.sha256 != source.sha256 {
            return Lookup::Tampered(format!(
                "{} hashes to {found}, not to its pin {}",
                path.display(),
                source.sha256
            ));
        }
        Lookup::Hit(path, metadata)
    }

    /// A fresh, private staging directory for one fetch, below `<cache>/tmp/`.
    pub fn staging(&self) -> std::io::Result<tempfile::TempDir> {
        let tmp = self.root.join("tmp");
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&tmp)?;
        tempfile::Builder::new().prefix("fetch-").tempdir_in(&tmp)
    }

    /// Moves a verified fetch into place: `staging` holds `content` (the directory or the file);
    /// `metadata` is written beside it; an old entry of the same kind and pin (one that failed
    /// verification, or fetched for another URL) is removed first. Returns the entry's copy.
    pub fn store(
        &self,
        staging: tempfile::TempDir,
        kind: RemoteKind,
        metadata: &Origin,
    ) -> std::io::Result<PathBuf> {
        let json = serde_json::to_vec_pretty(metadata).map_err(std::io::Error::other)?;
        std::fs::write(staging.path().join("metadata.json"), json)?;
        // The git repository the fetch used is not part of the entry.
        let _ = std::fs::remove_dir_all(staging.path().join("git"));
        for scratch in ["git.out", "git.err"] {
            let _ = std::fs::remove_file(staging.path().join(scratch));
        }
        let dir = self.entry_dir(&metadata.sha256, kind);
        if let Some(parent) = dir.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)?;
        }
        if std::fs::symlink_metadata(&dir).is_ok() {
            self.remove(&metadata.sha256, kind)?;
        }
        let staged = staging.keep();
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755))?;
        std::fs::rename(&staged, &dir)?;
        Ok(dir.join("content"))
    }

    /// Removes fetch directories left in `<cache>/tmp/` by a `pitcrew lock` that was killed,
    /// once they are older than `age` (younger ones may be another lock's, still running).
    pub fn sweep_staging(&self, age: std::time::Duration) {
        let Ok(entries) = std::fs::read_dir(self.root.join("tmp")) else {
            return;
        };
        for entry in entries.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|elapsed| elapsed > age);
            if old && entry.file_name().to_string_lossy().starts_with("fetch-") {
                make_writable(&entry.path());
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    /// Removes the entry of `kind` pinned `sha256`, restoring write permission on its
    /// directories first (a symlink in its place is removed, not followed).
    pub fn remove(&self, sha256: &str, kind: RemoteKind) -> std::io::Result<()> {
        let dir = self.entry_dir(sha256, kind);
        if std::fs::symlink_metadata(&dir).is_ok_and(|m| !m.is_dir()) {
            return std::fs::remove_file(&dir);
        }
        make_writable(&dir);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Gives the owner write and search permission on every directory below `dir` (not following
/// links), so an entry someone made read-only can still be replaced.
fn make_writable(dir: &Path) {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return;
    };
    if !meta.is_dir() {
        return;
    }
    let mode = meta.permissions().mode() | 0o700;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            make_writable(&entry.path());
        }
    }
}
