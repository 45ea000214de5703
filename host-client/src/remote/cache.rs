//! The content-addressed cache of fetched remote sources:
//!
//! ```text
//! <cache>/sha256/<pin>/tree/content/          a directory, hashing (content-v1) to <pin>
//! <cache>/sha256/<pin>/tree/origins/<u>.json  where it was fetched from: one per URL (<u>: the
//!                                             URL's SHA-256): url, ref, path, commit, files
//! <cache>/sha256/<pin>/blob/content           a file, hashing (sha256) to <pin>
//! <cache>/sha256/<pin>/blob/origins/<u>.json
//! <cache>/tmp/fetch-*/                        fetches in progress
//! ```
//!
//! A directory and a file are kept apart under one pin: a file whose bytes are a directory's
//! `content-v1` listing has that directory's pin, and neither may displace the other. The
//! content is shared by every URL that holds it; each URL has an origin of its own, so two
//! harnesses pinning the same content from two places never displace each other's record.
//!
//! The cache must be the user's own (owned by them, writable by nobody else), and nothing below
//! its root is followed through a symlink: a link where a directory, the content or an origin
//! belongs is refused by a lookup and removed (never followed) by a store. An entry is
//! re-hashed on every use ([`Cache::lookup`]): a copy changed on disk is never used, only
//! reported (and replaced by the next fetch). A store never replaces content that verifies, so
//! a lookup running beside a store sees either nothing or a verified copy.

use pitcrew_core::harness::{RemoteKind, RemoteSource};
use pitcrew_core::tree_hash::{self, TreeFormat, TreeListing};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::io::Read as _;
use std::os::unix::fs::{
    DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::path::{Path, PathBuf};

/// Where a copy came from and what it held: a cache entry's origin for one URL, and an entry
/// of the lock file.
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
    /// A verified copy fetched for this URL: the path to use, where it came from, and (for a
    /// tree) the listing it was verified with.
    Hit(PathBuf, Box<Origin>, Option<TreeListing>),
    /// No copy under the pin, or none fetched for this URL.
    Missing,
    /// A copy or origin that is not what it must be (changed on disk, a link, unreadable).
    Tampered(String),
}

/// The cache rooted at a directory.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

/// What a content path holds.
enum Content {
    /// Nothing there.
    Missing,
    /// A copy that hashes to the pin, with a tree's listing.
    Verified(Option<TreeListing>),
    /// Something else, and why.
    Bad(String),
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

    /// The origin file of `url` in the entry `dir`.
    fn origin_path(dir: &Path, url: &str) -> PathBuf {
        dir.join("origins").join(format!(
            "{}.json",
            hex::encode(Sha256::digest(url.as_bytes()))
        ))
    }

    /// Refuses a root that is not a directory of this user's, or that others may write.
    fn check_root(&self) -> Result<(), String> {
        let meta = std::fs::metadata(&self.root)
            .map_err(|e| format!("the cache {}: {e}", self.root.display()))?;
        let uid = rustix::process::geteuid().as_raw();
        if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
            return Err(format!(
                "the cache {} must be a directory of uid {uid} that nobody else may write \
                 (it is uid {}, mode {:o})",
                self.root.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
        Ok(())
    }

    /// The verified copy of `source` fetched for its URL, re-hashed now.
    pub fn lookup(&self, source: &RemoteSource) -> Lookup {
        if !self.root.exists() {
            return Lookup::Missing;
        }
        if let Err(why) = self.check_root() {
            return Lookup::Tampered(why);
        }
        let dir = self.entry_dir(&source.sha256, source.kind);
        match no_links(&self.root, &dir) {
            Ok(true) => {}
            Ok(false) => return Lookup::Missing,
            Err(why) => return Lookup::Tampered(why),
        }
        let path = dir.join("content");
        let listing = match verify(&path, source.kind, &source.sha256) {
            Content::Verified(listing) => listing,
            Content::Missing => return Lookup::Missing,
            Content::Bad(why) => return Lookup::Tampered(why),
        };
        let origin_path = Self::origin_path(&dir, &source.url);
        let origin = match read_nofollow(&origin_path) {
            Ok(None) => return Lookup::Missing,
            Ok(Some(bytes)) => match serde_json::from_slice::<Origin>(&bytes) {
                Ok(origin) => origin,
                Err(e) => return Lookup::Tampered(format!("{}: {e}", origin_path.display())),
            },
            Err(why) => return Lookup::Tampered(why),
        };
        if origin.url != source.url
            || origin.kind != source.kind.as_str()
            || origin.sha256 != source.sha256
        {
            return Lookup::Tampered(format!(
                "{} is the origin of {} ({}, sha256={}), not of this entry",
                origin_path.display(),
                origin.url,
                origin.kind,
                origin.sha256
            ));
        }
        Lookup::Hit(path, Box::new(origin), listing)
    }

    /// A fresh, private staging directory for one fetch, below `<cache>/tmp/` (the cache's
    /// root created, owner-only, if it does not exist yet).
    pub fn staging(&self) -> Result<tempfile::TempDir, String> {
        let at = |e: std::io::Error| format!("{}: {e}", self.root.display());
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.root)
            .map_err(at)?;
        self.check_root()?;
        let tmp = self.root.join("tmp");
        make_dir(&self.root, &tmp)?;
        tempfile::Builder::new()
            .prefix("fetch-")
            .tempdir_in(&tmp)
            .map_err(|e| format!("{}: {e}", tmp.display()))
    }

    /// Puts a verified fetch in place: `staging/content` (the directory or the file) becomes
    /// the entry's content unless a copy that verifies is there already (kept: it is the same
    /// content, and a lookup beside this store may be reading it); anything else there is
    /// removed first, a link included (never followed). Then `origin` is written for its URL
    /// (a temporary file renamed over the old one). Returns the entry's content path.
    pub fn store(
        &self,
        staging: tempfile::TempDir,
        kind: RemoteKind,
        origin: &Origin,
    ) -> Result<PathBuf, String> {
        self.check_root()?;
        let dir = self.entry_dir(&origin.sha256, kind);
        for d in [
            self.root.join("sha256"),
            self.root.join("sha256").join(&origin.sha256),
            dir.clone(),
            dir.join("origins"),
        ] {
            make_dir(&self.root, &d)?;
        }
        let content = dir.join("content");
        let staged = staging.path().join("content");
        let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
        match verify(&content, kind, &origin.sha256) {
            Content::Verified(_) => {}
            found => {
                if let Content::Bad(_) = found {
                    remove_nofollow(&content).map_err(|e| io(&content, e))?;
                }
                if let Err(e) = std::fs::rename(&staged, &content) {
                    // Another store beside this one put the same content in place first.
                    if !matches!(verify(&content, kind, &origin.sha256), Content::Verified(_)) {
                        return Err(io(&content, e));
                    }
                }
            }
        }
        let json = serde_json::to_vec_pretty(origin).map_err(|e| e.to_string())?;
        let origins = dir.join("origins");
        let mut tmp = tempfile::NamedTempFile::new_in(&origins).map_err(|e| io(&origins, e))?;
        std::io::Write::write_all(&mut tmp, &json).map_err(|e| io(&origins, e))?;
        let target = Self::origin_path(&dir, &origin.url);
        tmp.persist(&target).map_err(|e| io(&target, e.error))?;
        Ok(content)
    }

    /// Removes fetch directories left in `<cache>/tmp/` by a `pitcrew lock` that was killed,
    /// once they are older than `age` (younger ones may be another lock's, still running).
    pub fn sweep_staging(&self, age: std::time::Duration) {
        if self.check_root().is_err() {
            return;
        }
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
                let _ = remove_nofollow(&entry.path());
            }
        }
    }
}

/// Whether `dir` (below `root`) exists, every component from `root` down a real directory:
/// `Err` names a component that is a link or not a directory.
fn no_links(root: &Path, dir: &Path) -> Result<bool, String> {
    let rel = dir
        .strip_prefix(root)
        .map_err(|_| format!("{} is outside the cache", dir.display()))?;
    let mut at = root.to_path_buf();
    for component in rel.components() {
        at.push(component);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "{} is a link or not a directory: the cache is not followed through links",
                    at.display()
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(format!("{}: {e}", at.display())),
        }
    }
    Ok(true)
}

/// Creates `dir` (below `root`, its parents existing) owner-only if it is missing; a link or a
/// file in its place is refused.
fn make_dir(root: &Path, dir: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => no_links(root, dir).map(|_| ()),
        Err(e) => Err(format!("{}: {e}", dir.display())),
    }
}

/// What the content path `path` holds against the pin `sha256`: a link is never followed.
fn verify(path: &Path, kind: RemoteKind, sha256: &str) -> Content {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Content::Missing,
        Err(e) => return Content::Bad(format!("{}: {e}", path.display())),
        Ok(m) if m.file_type().is_symlink() => {
            return Content::Bad(format!("{} is a link", path.display()))
        }
        Ok(_) => {}
    }
    let found = match kind {
        RemoteKind::Tree => {
            tree_hash::hash_tree(path, TreeFormat::ContentV1).map(|d| (d.sha256, Some(d.listing)))
        }
        RemoteKind::Blob => tree_hash::sha256_file(path).map(|r| (r.sha256, None)),
    };
    match found {
        Ok((found, listing)) if found == sha256 => Content::Verified(listing),
        Ok((found, _)) => Content::Bad(format!(
            "{} hashes to {found}, not to its pin {sha256}",
            path.display()
        )),
        Err(e) => Content::Bad(e.to_string()),
    }
}

/// The bytes of the file at `path`, opened without following a link (`None`: no file).
fn read_nofollow(path: &Path) -> Result<Option<Vec<u8>>, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    let mut bytes = Vec::new();
    match file {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
        Ok(f) => f
            .take(16 << 20)
            .read_to_end(&mut bytes)
            .map(|_| Some(bytes))
            .map_err(|e| format!("{}: {e}", path.display())),
    }
}

/// Removes what is at `path`: a link or file is unlinked, a directory removed with everything
/// in it after its owner's write permission is restored (a read-only tree still goes); links
/// inside are removed, never followed.
fn remove_nofollow(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => {
            make_writable(path);
            std::fs::remove_dir_all(path)
        }
        Ok(_) => std::fs::remove_file(path),
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
